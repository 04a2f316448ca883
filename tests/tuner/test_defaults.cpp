// configs/defaults.yaml: every architecture of the search space has a default for every head
// dimension and policy, and each names a variant the generator produces (not pruned), with
// the P.V precision its policy admits.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "sage/common/default_rules.h"
#include "sage/common/embedded.h"
#include "sage/common/paged.h"
#include "sage/gen/search_space.h"
#include "sage/tuner/problems.h"
#include "sage/tuner/tune.h"
#include "sage/tuner/variants.h"
#include "sage/common/error.h"
#include "sage/internal/launch.h"

namespace sage {
namespace {

// The sm_90a default for a call (causal -1: the caller does not say; seq_q 0: nor its query
// count; rows16: rows 16 but not 32 bytes long a multiple of; bh 0: nor its batch x query
// heads), as a search-space variant.
gen::Variant hopper_default(int d, const std::string& policy, int seq_kv, int causal = -1, int seq_q = 0,
                            bool rows16 = false, int bh = 0, int sms = 0) {
  static const gen::SearchSpace space = gen::SearchSpace::builtin();
  const std::string v = tuner::default_variant("sm_90a", d, policy, seq_kv, causal, seq_q, rows16, bh, sms);
  std::optional<gen::Variant> var = space.find(v);
  if (!var) throw std::runtime_error("the default " + v + " is not in the search space");
  return *var;
}

// A boolean axis that older sets may leave out (false then).
bool flag(const gen::Variant& v, const std::string& key) { return v.params.count(key) && v.get_bool(key); }

TEST(Defaults, EveryArchHeadDimAndPolicyHasAnAdmittedVariant) {
  const gen::SearchSpace space = gen::SearchSpace::builtin();
  const tuner::ProblemsConfig cfg = tuner::ProblemsConfig::builtin();
  for (const std::string& arch : space.archs()) {
    for (int d : {64, 128, 256}) {
      for (const auto& [name, policy] : cfg.policies) {
        std::string v;
        ASSERT_NO_THROW(v = tuner::default_variant(arch, d, name)) << arch << " d" << d << " " << name;
        std::optional<gen::Variant> var = space.find(v);
        ASSERT_TRUE(var.has_value()) << v;
        EXPECT_EQ(var->arch, arch);
        EXPECT_EQ(var->get_int("head_dim"), d);
        EXPECT_TRUE(policy.admits_pv(var->get_string("pv"))) << v << " under " << name;
      }
    }
  }
}

// Variable-length batches: every architecture has a `varlen` default at head dims 64 and 128
// (sm_90a also 256) under every policy and whatever the longest sequence, a variant of its own
// arch whose module has the entry sage_attn_varlen (the native kernels of the plain schedule);
// those entries serve no dense call, and head dim 256 has none but on sm_90a (the mma.sync entry
// spilled there).
// Variable-length batches on sm_90a: under the balanced and fast policies past the shortest
// batches (D=128: 512 keys, causal 1K; D=64: 1K) the quantized kernels' varlen entry, INT8 Q.K^T
// quantized in the kernel with FP8 P.V (three warpgroups past 8K keys at D=128); the accurate
// policy and the other architectures the native kernels.
TEST(Defaults, HopperVarlenBatchesPastOneKRunTheQuantizedKernelsUnderBalancedAndFast) {
  const gen::SearchSpace space = gen::SearchSpace::builtin();
  auto pick = [&](const std::string& arch, int d, const std::string& policy, int n, int causal) {
    const std::string v = tuner::default_variant(arch, d, policy, n, causal, n, false, 64, 0, true);
    const std::optional<gen::Variant> var = space.find(v);
    EXPECT_TRUE(var.has_value()) << v;
    EXPECT_TRUE(has_varlen_entry(tuner::kernel_config(*var))) << v;
    return *var;
  };
  for (const std::string policy : {"balanced", "fast"}) {
    for (int d : {64, 128}) {
      for (int causal : {0, 1}) {
        const int shortest = d == 64 || causal ? 1024 : 512;
        for (int n : {shortest + 1, 2048, 4096, 8192, 16384, 65536}) {
          const gen::Variant v = pick("sm_90a", d, policy, n, causal);
          EXPECT_EQ(v.get_string("qk"), "int8") << v.name << " n " << n;
          EXPECT_EQ(v.get_string("pv"), "fp8") << v.name;
          EXPECT_TRUE(v.get_bool("fuse_q")) << v.name;
          if (d == 128) EXPECT_EQ(v.get_int("warpgroups"), n > 8192 ? 3 : 1) << v.name << " n " << n;
        }
        for (int n : {1, 128, shortest}) EXPECT_EQ(pick("sm_90a", d, policy, n, causal).get_string("qk"), "native") << n;
      }
    }
  }
  // Head dim 256 past 1K keys: the dense default's INT8 kernel of two warpgroups.
  for (const std::string policy : {"balanced", "fast"})
    for (int causal : {0, 1}) {
      const gen::Variant v = pick("sm_90a", 256, policy, 4096, causal);
      EXPECT_EQ(v.get_string("qk"), "int8") << v.name;
      EXPECT_EQ(v.get_int("warpgroups"), 2) << v.name;
      EXPECT_EQ(pick("sm_90a", 256, policy, 1024, causal).get_string("qk"), "native");
      EXPECT_EQ(pick("sm_90a", 256, "accurate", 4096, causal).get_string("qk"), "native");
    }
  for (const std::string arch : {"sm_90a", "sm_89", "sm_80"})
    for (int d : {64, 128})
      for (int n : {128, 4096, 32768}) {
        EXPECT_EQ(pick(arch, d, "accurate", n, 0).get_string("qk"), "native") << arch << " d" << d << " n " << n;
        if (arch != "sm_90a") EXPECT_EQ(pick(arch, d, "balanced", n, 1).get_string("qk"), "native") << arch;
      }
}

// Sliding windows: every architecture serves them at head dims 64 and 128 (sm_90a also 256)
// under every policy, on kernels with the entry sage_attn_window; on sm_90a its `window` entries
// (by the keys a query sees) under the balanced and fast policies the quantized kernels at D=128
// and past 512 keys at D=64, the native ones below (64x64 tiles up to 128 keys); the accurate
// policy the native ones. Window entries serve no other call.
TEST(Defaults, SlidingWindowsTakeKernelsWithTheWindowEntry) {
  const gen::SearchSpace space = gen::SearchSpace::builtin();
  const tuner::ProblemsConfig cfg = tuner::ProblemsConfig::builtin();
  // A dense call's window, or (packed) a variable-length batch's, whose kernel must also take such
  // batches.
  auto pick = [&](const std::string& arch, int d, const std::string& policy, int w, bool packed = false,
                  int seq_q = 32768) {
    const std::string v = tuner::default_variant(arch, d, policy, w, 0, seq_q, false, 32, 0, packed, true);
    const std::optional<gen::Variant> var = space.find(v);
    EXPECT_TRUE(var.has_value()) << v;
    EXPECT_TRUE(has_window_entry(tuner::kernel_config(*var))) << v;
    if (packed) {
      EXPECT_TRUE(has_varlen_entry(tuner::kernel_config(*var))) << v;
    }
    EXPECT_EQ(var->get_int("head_dim"), d) << v;
    return *var;
  };
  for (const std::string& arch : space.archs())
    for (int d : {64, 128, 256})
      for (bool packed : {false, true}) {
        // (no kernel takes packed batches at head dim 256 off sm_90a, nor on sm_100 any window there)
        if (d == 256 && arch != "sm_90a" && packed) continue;
        for (const auto& [name, policy] : cfg.policies)
          for (int w : {1, 64, 128, 256, 512, 1024, 4096, 32768})
            for (int q : {16, 256, 32768}) {
              const gen::Variant v = pick(arch, d, name, w, packed, q);
              EXPECT_EQ(v.arch, arch);
              EXPECT_TRUE(policy.admits_pv(v.get_string("pv"))) << v.name << " under " << name;
            }
      }
  for (const std::string policy : {"balanced", "fast"}) {
    for (int w : {1, 128, 256, 1024, 8192}) EXPECT_EQ(pick("sm_90a", 128, policy, w).get_string("qk"), "int8") << w;
    for (int w : {513, 1024, 32768}) EXPECT_EQ(pick("sm_90a", 64, policy, w).get_string("qk"), "int8") << w;
    for (int w : {129, 512}) EXPECT_EQ(pick("sm_90a", 64, policy, w).get_string("qk"), "native") << w;
    EXPECT_EQ(pick("sm_90a", 64, policy, 128).get_int("block_m"), 64);
  }
  for (int d : {64, 128})
    for (int w : {128, 1024, 32768}) EXPECT_EQ(pick("sm_90a", d, "accurate", w).get_string("qk"), "native");
  // Draft tokens over a window (up to 16 queries of a dense call): the decode schedule, every
  // policy, every head dim; a packed batch's keep the entries above (no varlen entry there).
  for (int d : {64, 128, 256})
    for (const std::string policy : {"balanced", "accurate"})
      for (int q : {2, 4, 16}) {
        EXPECT_EQ(pick("sm_90a", d, policy, 4096, false, q).get_string("schedule"), "decode") << d << " " << q;
        EXPECT_NE(pick("sm_90a", d, policy, 4096, true, q).get_string("schedule"), "decode") << d << " " << q;
      }
  EXPECT_NE(pick("sm_90a", 128, "balanced", 4096, false, 64).get_string("schedule"), "decode");
  // sm_80 to sm_120 (2026-11-30 (bc)): the quantized mma.sync kernels of their long prompts take a
  // dense call's window past 128 keys a query sees at D=128 and 256 at D=64, and past 256 queries;
  // every D=256 window; every policy (their accurate kernels are quantized too, with FP16 P.V). A
  // packed batch's window, and the shorter ones, take the native kernels of the varlen entries.
  for (const std::string arch : {"sm_80", "sm_86", "sm_89", "sm_100", "sm_120"})
    for (const std::string policy : {"balanced", "accurate"}) {
      for (int w : {129, 1024, 32768}) {
        EXPECT_EQ(pick(arch, 128, policy, w).get_string("qk"), "int8") << arch << " " << w;
        EXPECT_EQ(pick(arch, 128, policy, w, false, 256).get_string("qk"), "native") << arch << " a chunk of 256";
        EXPECT_EQ(pick(arch, 128, policy, w, true).get_string("qk"), "native") << arch << " packed";
      }
      for (int w : {257, 1024, 32768}) EXPECT_EQ(pick(arch, 64, policy, w).get_string("qk"), "int8") << arch << " " << w;
      EXPECT_EQ(pick(arch, 128, policy, 128).get_string("qk"), "native") << arch;
      EXPECT_EQ(pick(arch, 64, policy, 256).get_string("qk"), "native") << arch;
      for (int w : {64, 1024, 32768}) {
        const gen::Variant v = pick(arch, 256, policy, w, false, 16);
        EXPECT_EQ(v.get_string("qk"), "int8") << arch << " " << w;
        EXPECT_EQ(v.pipeline, "mma") << arch;
      }
      try {
        tuner::default_variant(arch, 256, policy, 1024, 0, 4096, false, 32, 0, true, true);
        ADD_FAILURE() << arch << ": a packed window at head dim 256 has no kernel there";
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), Errc::not_found) << e.what();
      }
      // A bucket's key asks them the same way (tuner::key_default: the runtime's and the tuner's
      // baseline): `_window` a dense call's, `_varlen_window` a packed batch's.
      const auto dense = tuner::ProblemKey::parse("d128_causal_fp16_NHD_q16384_kv1024_bh128_" + policy + "_window");
      const auto packed =
          tuner::ProblemKey::parse("d128_causal_fp16_NHD_q16384_kv1024_bh128_" + policy + "_varlen_window");
      EXPECT_NE(tuner::key_default(arch, dense).find("qk-int8"), std::string::npos) << arch << " " << dense.str();
      EXPECT_NE(tuner::key_default(arch, packed).find("qk-native"), std::string::npos) << arch << " " << packed.str();
    }
  // A variable-length batch (without a window) and a dense call never match a window entry.
  for (int d : {64, 128})
    for (int n : {128, 1024, 8192}) {
      const tuner::DefaultMatch vl = tuner::default_match("sm_90a", d, "balanced", n, 0, n, false, 8, 0, true);
      EXPECT_EQ(vl.conditions.find("window"), std::string::npos) << vl.conditions;
      const tuner::DefaultMatch dense = tuner::default_match("sm_90a", d, "balanced", n, 1, n, false, 8);
      EXPECT_EQ(dense.conditions.find("window"), std::string::npos) << dense.conditions;
      const tuner::DefaultMatch w = tuner::default_match("sm_90a", d, "balanced", n, 0, n, false, 8, 0, true, true);
      EXPECT_TRUE(w.conditions.find("window true") != std::string::npos ||
                  w.conditions.find("varlen true") != std::string::npos)
          << w.conditions;
    }
}

// Paged KV caches take the `paged` entries on every architecture (native mma.sync kernels with
// sage_attn_paged: the decode schedule up to 4 queries on sm_90a, for one elsewhere, the plain one
// beyond; head dim 256 the
// decode schedule where its shared memory fits: sm_80, sm_90a, sm_100), under every policy; no
// other call matches a paged entry.
TEST(Defaults, PagedCachesTakeKernelsWithThePagedEntry) {
  const gen::SearchSpace space = gen::SearchSpace::builtin();
  const tuner::ProblemsConfig cfg = tuner::ProblemsConfig::builtin();
  for (const std::string& arch : space.archs())
    for (int d : {64, 128, 256}) {
      const bool has256 = arch == "sm_80" || arch == "sm_90a" || arch == "sm_100";
      for (const auto& [name, policy] : cfg.policies)
        for (int q : {1, 4, 16, 17, 128, 1024})
          for (int causal : {0, 1}) {
            if (d == 256 && !has256) {
              EXPECT_THROW(tuner::default_variant(arch, d, name, 8192, causal, q, false, 64, 0, false, false, true), Error)
                  << arch;
              continue;
            }
            const std::string v = tuner::default_variant(arch, d, name, 8192, causal, q, false, 64, 0, false, false, true);
            const std::optional<gen::Variant> var = space.find(v);
            ASSERT_TRUE(var.has_value()) << v;
            EXPECT_TRUE(has_paged_entry(tuner::kernel_config(*var))) << v;
            EXPECT_EQ(var->arch, arch);
            EXPECT_EQ(var->get_int("head_dim"), d) << v;
            EXPECT_EQ(var->get_string("qk"), "native") << v;
            const int decode_q = arch == "sm_90a" ? 4 : 1;  // measured there; elsewhere as the dense calls
            // sm_90a's head dim 256: the decode schedule up to 8 queries (of these pairs), then wgmma
            const bool decode = q <= decode_q || (d == 256 && (arch != "sm_90a" || q <= 8));
            EXPECT_EQ(var->get_string("schedule"), decode ? "decode" : "plain") << v << " q " << q;
            // sm_90a: the wgmma kernels from 64 queries of these 64 pairs (past 128 whatever the pairs)
            if (arch == "sm_90a") {
              EXPECT_EQ(var->pipeline, q >= 128 || (d == 256 && q > 8) ? "wgmma" : "mma") << v << " q " << q;
            }
          }
    }
  for (int d : {64, 128})
    for (int q : {1, 128}) {
      const tuner::DefaultMatch dense = tuner::default_match("sm_90a", d, "balanced", 4096, 0, q, false, 8);
      EXPECT_EQ(dense.conditions.find("paged"), std::string::npos) << dense.conditions;
      const tuner::DefaultMatch vl = tuner::default_match("sm_90a", d, "balanced", 4096, 0, q, false, 8, 0, true);
      EXPECT_EQ(vl.conditions.find("paged"), std::string::npos) << vl.conditions;
      const tuner::DefaultMatch pg = tuner::default_match("sm_90a", d, "balanced", 4096, 0, q, false, 8, 0, false, false, true);
      EXPECT_NE(pg.conditions.find("paged true"), std::string::npos) << pg.conditions;
    }
}

// A sliding window over a paged cache takes a kernel with the window entries (the mma.sync ones:
// has_paged_window_entry) on every architecture, every policy, head dim and query count where the
// paged call has a kernel: the paged entries' where they are mma.sync, else the entries that name
// both `paged` and `window` (sm_90a, before its wgmma ones); the calls without a window keep theirs.
TEST(Defaults, PagedWindowsTakeKernelsWithTheWindowEntries) {
  const gen::SearchSpace space = gen::SearchSpace::builtin();
  const tuner::ProblemsConfig cfg = tuner::ProblemsConfig::builtin();
  int windowed_fallbacks = 0;
  for (const std::string& arch : space.archs())
    for (int d : {64, 128, 256})
      for (const auto& [name, policy] : cfg.policies)
        for (int q : {1, 4, 16, 40, 128, 1024})
          for (int bh : {8, 64, 512}) {
            std::string plain;
            try {
              plain = tuner::default_variant(arch, d, name, 8192, 1, q, false, bh, 0, false, false, true);
            } catch (const Error&) {
              EXPECT_THROW(tuner::default_variant(arch, d, name, 512, 1, q, false, bh, 0, false, true, true), Error);
              continue;  // no paged kernel at this head dim here
            }
            const tuner::DefaultMatch w = tuner::default_match(arch, d, name, 512, 1, q, false, bh, 0, false, true, true);
            const std::optional<gen::Variant> var = space.find(w.variant);
            ASSERT_TRUE(var.has_value()) << w.variant;
            EXPECT_TRUE(has_paged_window_entry(tuner::kernel_config(*var))) << arch << " " << w.variant << " q " << q;
            const std::optional<gen::Variant> pv = space.find(plain);
            ASSERT_TRUE(pv.has_value());
            if (pv->pipeline == "mma") {
              EXPECT_EQ(w.variant, plain) << arch << " q " << q << ": the paged entry's mma.sync kernel serves windows too";
            } else {
              EXPECT_NE(w.conditions.find("window true"), std::string::npos) << w.conditions;
              ++windowed_fallbacks;
            }
          }
  EXPECT_GT(windowed_fallbacks, 0) << "sm_90a's wgmma paged entries give way to its window entries";
  // No dense, varlen or window call without a paged cache matches those entries.
  for (int d : {64, 128, 256}) {
    const tuner::DefaultMatch w = tuner::default_match("sm_90a", d, "balanced", 4096, 1, 1024, false, 8, 0, false, true);
    EXPECT_EQ(w.conditions.find("paged"), std::string::npos) << w.conditions;
  }
}

// The matcher's `kv8` (sage/common/default_rules.h, which static builds share): an entry that
// names it matches calls over FP8 pages only, windowed ones where it names `window` too and
// unwindowed ones where not; an FP8 call matches every paged entry as an FP16 one does.
TEST(Defaults, Kv8EntriesMatchCallsOverFp8PagesOnly) {
  DefaultRule paged, window, kv8, kv8_window;
  for (DefaultRule* r : {&paged, &window, &kv8, &kv8_window}) {
    r->head_dim = 128;
    r->paged = true;
  }
  window.window = kv8_window.window = true;
  kv8.kv8 = kv8_window.kv8 = true;
  auto call = [](bool win, bool fp8) {
    DefaultCall c;
    c.head_dim = 128;
    c.policy = "balanced";
    c.paged = true;
    c.window = win;
    c.kv8 = fp8;
    return c;
  };
  // FP16 pages: the paged entries (with a window, the window ones too), never a kv8 one.
  EXPECT_TRUE(default_rule_matches(paged, call(false, false)));
  EXPECT_FALSE(default_rule_matches(window, call(false, false)));
  EXPECT_FALSE(default_rule_matches(kv8, call(false, false)));
  EXPECT_FALSE(default_rule_matches(kv8_window, call(false, false)));
  EXPECT_TRUE(default_rule_matches(window, call(true, false)));
  EXPECT_FALSE(default_rule_matches(kv8, call(true, false)));
  EXPECT_FALSE(default_rule_matches(kv8_window, call(true, false)));
  // FP8 pages: the same, and the kv8 entries of their window or none.
  EXPECT_TRUE(default_rule_matches(paged, call(false, true)));
  EXPECT_FALSE(default_rule_matches(window, call(false, true)));
  EXPECT_TRUE(default_rule_matches(kv8, call(false, true)));
  EXPECT_FALSE(default_rule_matches(kv8_window, call(false, true)));
  EXPECT_TRUE(default_rule_matches(paged, call(true, true)));
  EXPECT_TRUE(default_rule_matches(window, call(true, true)));
  EXPECT_FALSE(default_rule_matches(kv8, call(true, true)));
  EXPECT_TRUE(default_rule_matches(kv8_window, call(true, true)));
  // ... and no dense call.
  DefaultCall dense = call(false, false);
  dense.paged = false;
  EXPECT_FALSE(default_rule_matches(kv8, dense));
}

// The matcher's `dense` (`window: true, varlen: false`): an entry that names it matches the
// windows of dense calls only; a plain window entry matches packed ones too, and a varlen entry
// matches windows of either kind after them; a dense call without a window matches none of them.
TEST(Defaults, DenseWindowEntriesMatchNoPackedBatch) {
  DefaultRule window, dense_window, varlen;
  for (DefaultRule* r : {&window, &dense_window, &varlen}) r->head_dim = 128;
  window.window = dense_window.window = true;
  dense_window.dense = true;
  varlen.varlen = true;
  auto call = [](bool packed, bool win) {
    DefaultCall c;
    c.head_dim = 128;
    c.policy = "balanced";
    c.varlen = packed;
    c.window = win;
    return c;
  };
  EXPECT_TRUE(default_rule_matches(window, call(false, true)));
  EXPECT_TRUE(default_rule_matches(window, call(true, true)));
  EXPECT_TRUE(default_rule_matches(dense_window, call(false, true)));
  EXPECT_FALSE(default_rule_matches(dense_window, call(true, true)));
  EXPECT_TRUE(default_rule_matches(varlen, call(false, true)));
  EXPECT_TRUE(default_rule_matches(varlen, call(true, true)));
  EXPECT_TRUE(default_rule_matches(varlen, call(true, false)));
  for (const DefaultRule* r : {&window, &dense_window, &varlen}) EXPECT_FALSE(default_rule_matches(*r, call(false, false)));
  EXPECT_FALSE(default_rule_matches(window, call(true, false)));
  EXPECT_FALSE(default_rule_matches(dense_window, call(true, false)));
  // The file's rule: `varlen: false` names a window entry's kernels as dense-only.
  for (const std::string arch : {"sm_80", "sm_89", "sm_100"}) {
    int dense_entries = 0;
    for (const tuner::DefaultEntry& e : tuner::default_entries(arch))
      if (e.rule.dense) {
        ++dense_entries;
        EXPECT_TRUE(e.rule.window && !e.rule.varlen && !e.rule.paged) << e.conditions;
        EXPECT_NE(e.conditions.find("varlen false"), std::string::npos) << e.conditions;
        const std::optional<std::string> v = tuner::entry_variant(arch, e);
        ASSERT_TRUE(v.has_value()) << e.conditions;
        const KernelConfig c = *tuner::variant_config(arch, *v);
        EXPECT_TRUE(has_window_entry(c)) << *v;
        EXPECT_FALSE(has_varlen_entry(c)) << *v << ": a kernel that takes packed batches needs no varlen: false";
      }
    EXPECT_GE(dense_entries, 3) << arch;
  }
}

// FP8 pages (BucketKey::kv8) take a kernel with the FP8 entries on every architecture, every
// policy, head dim, query count and batch x heads where the paged call has a kernel: the FP16
// pages' paged default, or an entry that names `kv8` before it (sm_90a's head dim 128 from the
// query counts of its wgmma kernel: 128x128 tiles of two warpgroups, not one warpgroup's 64x128);
// with a window, an mma.sync kernel (the wgmma FP8 entries take none).
TEST(Defaults, Fp8PagesTakeKernelsWithTheFp8Entries) {
  const gen::SearchSpace space = gen::SearchSpace::builtin();
  const tuner::ProblemsConfig cfg = tuner::ProblemsConfig::builtin();
  int own = 0, wgmma = 0;
  for (const std::string& arch : space.archs())
    for (int d : {64, 128, 256})
      for (const auto& [name, policy] : cfg.policies)
        for (int q : {1, 4, 16, 40, 128, 1024})
          for (int bh : {8, 64, 512}) {
            std::string plain;
            try {
              plain = tuner::default_variant(arch, d, name, 8192, 1, q, false, bh, 0, false, false, true);
            } catch (const Error&) {
              EXPECT_THROW(tuner::default_variant(arch, d, name, 8192, 1, q, false, bh, 0, false, false, true, true), Error);
              continue;  // no paged kernel at this head dim here
            }
            const tuner::DefaultMatch f = tuner::default_match(arch, d, name, 8192, 1, q, false, bh, 0, false, false, true, true);
            const std::optional<gen::Variant> var = space.find(f.variant);
            ASSERT_TRUE(var.has_value()) << f.variant;
            EXPECT_TRUE(has_paged_fp8_entry(tuner::kernel_config(*var))) << arch << " " << f.variant << " q " << q;
            if (f.variant != plain) {
              EXPECT_NE(f.conditions.find("kv8 true"), std::string::npos) << f.conditions;
              ++own;
            }
            wgmma += var->pipeline == "wgmma";
            const tuner::DefaultMatch w = tuner::default_match(arch, d, name, 512, 1, q, false, bh, 0, false, true, true, true);
            const std::optional<gen::Variant> wv = space.find(w.variant);
            ASSERT_TRUE(wv.has_value()) << w.variant;
            EXPECT_TRUE(has_paged_fp8_entry(tuner::kernel_config(*wv))) << arch << " " << w.variant << " q " << q;
            EXPECT_EQ(wv->pipeline, "mma") << arch << " " << w.variant << " q " << q;
            EXPECT_EQ(tuner::kernel_config(*wv).cannot_implement([&] {
              AttnProblem p;
              p.batch = 1; p.heads_q = 8; p.heads_kv = 8; p.seq_q = q; p.seq_kv = 512; p.head_dim = d;
              p.causal = true; p.paged = true; p.page_size = 16; p.kv_fp8 = true; p.window = 256;
              return p;
            }()), "") << w.variant;
          }
  EXPECT_GT(own, 0) << "sm_90a's head dim 128 takes its kv8 entry";
  EXPECT_GT(wgmma, 0) << "long chunks over FP8 pages run on wgmma";
  // The kv8 entries match no call over FP16 pages.
  for (int d : {64, 128, 256})
    for (int q : {1, 1024}) {
      const tuner::DefaultMatch m = tuner::default_match("sm_90a", d, "balanced", 8192, 1, q, false, 8, 0, false, false, true);
      EXPECT_EQ(m.conditions.find("kv8"), std::string::npos) << m.conditions;
    }
}

TEST(Defaults, EveryArchHasAVarlenKernelAtHeadDims64And128) {
  const gen::SearchSpace space = gen::SearchSpace::builtin();
  const tuner::ProblemsConfig cfg = tuner::ProblemsConfig::builtin();
  int checked = 0;
  for (const std::string& arch : space.archs()) {
    const bool hopper = arch == "sm_90a";
    for (int d : {64, 128, 256}) {
      if (d == 256 && !hopper) continue;
      for (const auto& [name, policy] : cfg.policies) {
        for (int n : {0, 128, 4096, 32768}) {
          for (int causal : {0, 1}) {
            std::string v;
            ASSERT_NO_THROW(v = tuner::default_variant(arch, d, name, n, causal, n, false, 8, 0, true))
                << arch << " d" << d << " " << name;
            const std::optional<gen::Variant> var = space.find(v);
            ASSERT_TRUE(var.has_value()) << v;
            EXPECT_EQ(var->arch, arch);
            EXPECT_EQ(var->get_int("head_dim"), d);
            EXPECT_TRUE(has_varlen_entry(tuner::kernel_config(*var))) << v;
            EXPECT_TRUE(policy.admits_pv(var->get_string("pv"))) << v << " under " << name;
            ++checked;
          }
        }
        // The dense call of the same shape never takes a varlen entry's (they follow their own).
        const tuner::DefaultMatch dense = tuner::default_match(arch, d, name, 4096, 0, 4096, false, 8);
        EXPECT_EQ(dense.conditions.find("varlen"), std::string::npos) << arch << " " << dense.conditions;
        const tuner::DefaultMatch vl = tuner::default_match(arch, d, name, 4096, 0, 4096, false, 8, 0, true);
        EXPECT_NE(vl.conditions.find("varlen true"), std::string::npos) << arch << " " << vl.conditions;
      }
    }
    if (hopper) continue;
    try {
      tuner::default_variant(arch, 256, "balanced", 0, -1, 0, false, 0, 0, true);
      ADD_FAILURE() << arch << " has a varlen default at head dim 256";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("for variable-length batches"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(checked, (int(space.archs().size()) * 2 + 1) * int(cfg.policies.size()) * 4 * 2);
}

// Blackwell runs the mma.sync pipeline with sm_89's choices (configs/defaults.yaml: no Blackwell
// GPU has measured its own): sm_120 those of the call's policy, sm_100, whose FP8 mma.sync is
// emulated, those of the accurate policy (FP16 P.V) under every policy; but for head dim 256
// where those quantized kernels spill (sm_100 every policy, sm_120 the accurate one's FP16
// accumulators): there sm_80's, FP16 P.V into FP32 accumulators, past the native kernel's calls
// (up to 128 queries or 1K keys). For every call the sm_100 and sm_120 default is that variant for
// the arch, in its search space.
TEST(Defaults, BlackwellRunsTheAdaDefaultsCompiledForItsOwnArch) {
  const gen::SearchSpace space = gen::SearchSpace::builtin();
  int checked = 0;
  for (int d : {64, 128, 256})
    for (const char* policy : {"accurate", "balanced"})
      for (int n : {1024, 0})
        for (int seq_q : {1, 256, 0}) {
          for (const char* arch : {"sm_100", "sm_120"}) {
            const bool sm100 = std::string(arch) == "sm_100";
            const std::string ada = tuner::default_variant("sm_89", d, sm100 ? "accurate" : policy, n, -1, seq_q);
            ASSERT_EQ(ada.rfind("attn_sm89_", 0), 0u) << ada;
            const std::string v = tuner::default_variant(arch, d, policy, n, -1, seq_q);
            const std::optional<gen::Variant> var = space.find(v);
            ASSERT_TRUE(var.has_value()) << v;
            EXPECT_EQ(var->arch, arch);
            EXPECT_EQ(var->pipeline, "mma") << v;
            if (sm100) EXPECT_NE(var->get_string("pv"), "fp8") << v << ": FP8 mma.sync is emulated on sm_100";
            const bool own256 = d == 256 && (sm100 || std::string(policy) == "accurate");
            if (own256) {
              const bool short_call = seq_q == 1 || n == 1024;
              EXPECT_EQ(var->get_string("qk"), short_call ? "native" : "int8") << v;
              EXPECT_EQ(var->get_string("pv"), short_call ? "native" : "fp16") << v;
              if (!short_call) {
                EXPECT_EQ(tuner::default_variant("sm_80", d, policy, n, -1, seq_q).substr(9),
                          v.substr(space.arch(arch).tag().size() + 5))
                    << v << ": sm_80's kernel";
              }
            } else {
              EXPECT_EQ(v, "attn_" + space.arch(arch).tag() + ada.substr(9)) << arch << " d" << d << " " << policy;
            }
            ++checked;
          }
        }
  EXPECT_EQ(checked, 3 * 2 * 2 * 3 * 2);
}

// Hopper serves short sequences with the unquantized (native) family, which needs no
// preparation, and longer ones with the quantized default (configs/defaults.yaml).
TEST(Defaults, HopperPicksTheNativeFamilyForShortSequencesOnly) {
  auto qk = [](int d, const std::string& policy, int seq_kv) {
    return hopper_default(d, policy, seq_kv).get_string("qk");
  };
  for (const char* policy : {"accurate", "balanced", "fast"}) {
    EXPECT_EQ(qk(128, policy, 1024), "native") << policy;
    EXPECT_EQ(qk(128, policy, 2048), "native") << policy;
    EXPECT_EQ(qk(128, policy, 3072), "native") << policy;
    EXPECT_EQ(qk(64, policy, 2048), "native") << policy;
    EXPECT_EQ(qk(64, policy, 3072), "native") << policy;
  }
  EXPECT_EQ(qk(64, "accurate", 4096), "native");
  EXPECT_EQ(qk(64, "balanced", 4096), "int8");
  EXPECT_EQ(qk(128, "balanced", 4096), "int8");
  EXPECT_EQ(qk(64, "balanced", 8192), "int8");
  EXPECT_EQ(qk(128, "balanced", 0), "int8");  // no sequence length: the entries without max_seq_kv
}

// The accurate policy admits FP16 P.V only: on Hopper the native kernels serve it at every
// length (1.4-1.7x the mma.sync kernels with INT8 Q.K^T and FP16 P.V on the H100,
// configs/defaults.yaml), with the schedules of the short calls.
TEST(Defaults, HopperAccuratePolicyRunsTheNativeKernelsAtEveryLength) {
  for (int n : {1024, 4096, 8192, 16384, 32768, 0})
    for (int causal : {0, 1, -1}) {
      const gen::Variant v128 = hopper_default(128, "accurate", n, causal);
      EXPECT_EQ(v128.pipeline, "wgmma") << n << " " << causal;
      EXPECT_EQ(v128.get_string("qk"), "native") << n << " " << causal;
      EXPECT_EQ(v128.get_string("schedule"), "persistent_pingpong") << n << " " << causal;
      const gen::Variant v64 = hopper_default(64, "accurate", n, causal);
      EXPECT_EQ(v64.get_string("qk"), "native") << n << " " << causal;
      EXPECT_EQ(v64.get_string("pv"), "native") << n << " " << causal;
    }
  // D=64 past 2K keys: the 128x128 tile of two warpgroups, three stages, causal masks included.
  EXPECT_EQ(hopper_default(64, "accurate", 16384, 1).get_int("block_m"), 128);
  EXPECT_EQ(hopper_default(64, "accurate", 16384, 1).get_int("stages"), 3);
}

// Within the native range, D=128 runs the persistent kernel with the intra-warpgroup overlap
// and turns between its consumers (docs/kernels.md: N=1K 561-563 vs 433-441 TOPS for the
// plain kernel on the H100); D=64 keeps the plain kernel, which the persistent ones do not
// beat there.
TEST(Defaults, HopperD128ShortSequencesRunThePersistentPingpongKernel) {
  auto schedule = [](int d, const std::string& policy, int seq_kv) {
    return hopper_default(d, policy, seq_kv).get_string("schedule");
  };
  for (const char* policy : {"accurate", "balanced", "fast"}) {
    EXPECT_EQ(schedule(128, policy, 1024), "persistent_pingpong") << policy;
    EXPECT_EQ(schedule(128, policy, 2048), "persistent_pingpong") << policy;
    EXPECT_EQ(schedule(128, policy, 3072), "persistent_pingpong") << policy;
    EXPECT_EQ(schedule(64, policy, 1024), "plain") << policy;
  }
  EXPECT_EQ(schedule(128, "balanced", 4096), "plain");
}

// Non-causal D=128 calls of 2049-3072 keys and queries (the 3072 bucket) of more than 64
// (sequence, query head) pairs run the native kernel with FP8 P.V under the balanced and fast
// policies (2026-11-28 (am)); 64 pairs or fewer, causal masks, fewer queries, the 2K bucket and
// the accurate policy keep the FP16 pingpong kernel.
TEST(Defaults, HopperD128CallsOf2049To3072KeysOfManyPairsRunFp8PvOnTheNativeKernel) {
  auto pv = [](const std::string& policy, int n, int causal, int seq_q, int bh) {
    const gen::Variant v = hopper_default(128, policy, n, causal, seq_q, false, bh);
    EXPECT_EQ(v.get_string("qk"), "native") << v.name;
    EXPECT_EQ(v.get_string("schedule"), "persistent_pingpong") << v.name;
    return v.get_string("pv");
  };
  for (const std::string policy : {"balanced", "fast"}) {
    for (int n : {2049, 2560, 3072}) {
      EXPECT_EQ(pv(policy, n, 0, n, 128), "fp8") << policy << " " << n;
      EXPECT_EQ(pv(policy, n, 0, n, 65), "fp8") << policy << " " << n;
      EXPECT_EQ(pv(policy, n, 0, n, 64), "native") << policy << " " << n;
      EXPECT_EQ(pv(policy, n, 1, n, 128), "native") << policy << " " << n;
      EXPECT_EQ(pv(policy, n, 0, 2048, 128), "native") << policy << " " << n;  // queries of the 2K bucket
    }
    EXPECT_EQ(pv(policy, 2048, 0, 2048, 128), "native") << policy;
  }
  EXPECT_EQ(pv("accurate", 3072, 0, 3072, 128), "native");
}

// An entry that names `causal` matches calls with that mask only: under the balanced policy
// Hopper runs causal D=128 calls natively up to 4K keys (non-causal: 3K) and then the quantized
// one-warpgroup kernel up to 8K, causal D=64 calls natively up to 6K keys, and callers that do
// not say (causal -1) get the mask-independent entries.
TEST(Defaults, CausalEntriesMatchOnlyTheirMask) {
  auto qk = [](int seq_kv, int causal, const char* policy = "balanced") {
    return hopper_default(128, policy, seq_kv, causal).get_string("qk");
  };
  EXPECT_EQ(qk(4096, 1), "native");
  EXPECT_EQ(qk(6144, 1), "int8");
  EXPECT_EQ(qk(4096, 1, "accurate"), "native");
  EXPECT_EQ(qk(4096, 0, "accurate"), "native");
  EXPECT_EQ(qk(4096, 0), "int8");
  EXPECT_EQ(qk(4096, -1), "int8");
  EXPECT_EQ(qk(8192, 1), "int8");
  EXPECT_EQ(qk(2048, 0), "native");
  EXPECT_EQ(qk(2048, 1), "native");
  EXPECT_EQ(qk(3072, 1), "native");
  // D=64: native up to 3K keys, and for causal masks up to 6K; quantized past them under the
  // balanced policy.
  auto qk64 = [](int seq_kv, int causal) { return hopper_default(64, "balanced", seq_kv, causal).get_string("qk"); };
  EXPECT_EQ(qk64(4096, 1), "native");
  EXPECT_EQ(qk64(6144, 1), "native");
  EXPECT_EQ(qk64(3072, 0), "native");
  EXPECT_EQ(qk64(3072, -1), "native");
  EXPECT_EQ(qk64(4096, 0), "int8");
  EXPECT_EQ(qk64(4096, -1), "int8");
  EXPECT_EQ(qk64(2048, 0), "native");
  EXPECT_EQ(qk64(2048, 1), "native");
  EXPECT_EQ(qk64(8192, 1), "int8");
  // Causal D=64 up to 2K keys: 64x64 tiles, two stages; otherwise up to 3K keys, and causal up
  // to 6K: 128x128 tiles of two warpgroups, three stages; the quantized kernel (64x128, three
  // stages) past them.
  auto tile64 = [](int seq_kv, int causal) {
    const gen::Variant var = hopper_default(64, "balanced", seq_kv, causal);
    return std::make_tuple(int(var.get_int("block_m")), int(var.get_int("block_n")), int(var.get_int("stages")));
  };
  EXPECT_EQ(tile64(1024, 1), std::make_tuple(64, 64, 2));
  EXPECT_EQ(tile64(2048, 1), std::make_tuple(64, 64, 2));
  EXPECT_EQ(tile64(3072, 1), std::make_tuple(128, 128, 3));
  EXPECT_EQ(tile64(4096, 1), std::make_tuple(128, 128, 3));
  EXPECT_EQ(tile64(6144, 1), std::make_tuple(128, 128, 3));
  EXPECT_EQ(tile64(1024, 0), std::make_tuple(128, 128, 3));
  EXPECT_EQ(tile64(1024, -1), std::make_tuple(128, 128, 3));
  EXPECT_EQ(tile64(2048, 0), std::make_tuple(128, 128, 3));
  EXPECT_EQ(tile64(3072, 0), std::make_tuple(128, 128, 3));
  EXPECT_EQ(tile64(4096, 0), std::make_tuple(64, 128, 3));  // the quantized kernel
  EXPECT_EQ(tile64(8192, 1), std::make_tuple(64, 128, 3));  // the quantized kernel
}

// The D=64 native default of two warpgroups is capped at 128 registers (min_ctas 2: two CTAs
// per SM), which lets it run the softmax without row maxima (docs/kernels.md).
TEST(Defaults, HopperD64NativeDefaultIsCappedAtTwoCtasPerSm) {
  for (int n : {1024, 2048, 3072}) {
    const gen::Variant var = hopper_default(64, "balanced", n, 0);
    EXPECT_EQ(var.get_string("qk"), "native") << n;
    EXPECT_EQ(var.get_int("warpgroups"), 2) << n;
    EXPECT_EQ(var.get_int("min_ctas"), 2) << n;
  }
  EXPECT_EQ(hopper_default(64, "balanced", 4096, 1).get_int("min_ctas"), 2);
  EXPECT_EQ(hopper_default(64, "accurate", 4096, 0).get_int("min_ctas"), 2);
}

// At D=64 the quantized Hopper default runs four one-warpgroup CTAs per SM (128 registers, with
// fuse_q and sum_mma); D=128 keeps three (it would spill at 128).
TEST(Defaults, HopperD64QuantizedRunsFourCtasPerSm) {
  auto occ = [](int d, int seq_kv) { return hopper_default(d, "balanced", seq_kv, 0).get_int("min_ctas"); };
  for (int n : {4096, 8192, 16384, 0}) EXPECT_EQ(occ(64, n), 4) << n;
  EXPECT_EQ(occ(128, 4096), 3);
}

// The quantized Hopper defaults quantize Q in the attention kernel (fuse_q: a preparation of
// K and V only): at D=128 the one-warpgroup kernel (4K keys, causal up to 8K) and the
// three-warpgroup kernel of the longer calls, at D=64 the one-warpgroup kernel at four CTAs per
// SM with three stages.
TEST(Defaults, HopperD128FusesQQuantization) {
  auto fused = [](int d, const std::string& policy, int seq_kv, int causal) {
    return flag(hopper_default(d, policy, seq_kv, causal), "fuse_q");
  };
  for (const char* policy : {"balanced", "fast"}) {
    for (int n : {6144, 8192, 16384, 32768, 0})
      for (int causal : {0, 1}) EXPECT_TRUE(fused(128, policy, n, causal)) << policy << " " << n << " " << causal;
    EXPECT_TRUE(fused(128, policy, 4096, 0)) << policy;
    EXPECT_FALSE(fused(128, policy, 4096, 1)) << policy;  // the native kernel
    for (int n : {4096, 8192, 16384, 0}) EXPECT_TRUE(fused(64, policy, n, 0)) << policy << " " << n;
    EXPECT_FALSE(fused(64, policy, 2048, 0)) << policy;  // the native kernel
  }
  EXPECT_FALSE(fused(128, "accurate", 4096, 0));  // FP16 P.V: the native kernel, which has no preparation
}

// Past 6K keys (8K for causal masks) the D=128 quantized default is three warpgroups of 64
// rows sharing one four-stage K/V ring: a third of the L2 traffic, which buys SM clock under
// the power cap of long calls (docs/kernels.md).
TEST(Defaults, HopperD128LongCallsShareOneRingAmongThreeWarpgroups) {
  auto wgs = [](int seq_kv, int causal) {
    const gen::Variant var = hopper_default(128, "balanced", seq_kv, causal);
    return std::make_pair(int(var.get_int("warpgroups")), int(var.get_int("stages")));
  };
  for (int n : {8192, 16384, 32768, 0}) EXPECT_EQ(wgs(n, 0), std::make_pair(3, 4)) << n;
  for (int n : {16384, 32768}) EXPECT_EQ(wgs(n, 1), std::make_pair(3, 4)) << n;
  EXPECT_EQ(wgs(4096, 0).first, 1);
  EXPECT_EQ(wgs(6144, 0).first, 1);
  EXPECT_EQ(wgs(8192, 1).first, 1);
}

// The quantized Hopper defaults sum P's rows on the tensor cores (sum_mma), at D=128 and, since
// 2026-11-26 (g), at D=64; the native kernels do not.
TEST(Defaults, HopperQuantizedDefaultsSumRowsOnTheTensorCores) {
  auto rsum = [](int d, int seq_kv, int causal) { return flag(hopper_default(d, "balanced", seq_kv, causal), "sum_mma"); };
  for (int n : {6144, 8192, 32768})
    for (int causal : {0, 1}) EXPECT_TRUE(rsum(128, n, causal)) << n << " " << causal;
  EXPECT_TRUE(rsum(128, 4096, 0));
  EXPECT_FALSE(rsum(128, 2048, 0));  // the native kernel
  for (int n : {8192, 32768})
    for (int causal : {0, 1}) EXPECT_TRUE(rsum(64, n, causal)) << n << " " << causal;
  EXPECT_TRUE(rsum(64, 4096, 0));
  EXPECT_FALSE(rsum(64, 6144, 1));  // the native kernel up to 6K keys under a causal mask
  EXPECT_FALSE(rsum(64, 3072, 0));  // the native kernel
}

// Decoding and short query blocks (5-128 queries, one query tile a head) over any KV length,
// under every policy and mask: the native persistent kernel that splits the keys of fewer
// query tiles than CTAs over every CTA (up to 16 queries of many (sequence, head) pairs, and
// where the call does not say how many); one to four queries, the mma.sync decode schedule.
// From 129 queries on, the defaults by key count.
TEST(Defaults, HopperDecodingRunsTheNativeKernelWithSplitKeys) {
  for (int d : {64, 128})
    for (const char* policy : {"accurate", "balanced", "fast"})
      for (int n : {1024, 4096, 8192, 32768})
        for (int causal : {0, 1, -1}) {
          for (int q : {1, 2, 4}) {  // the mma.sync decode schedule (any GQA group packs)
            const gen::Variant v = hopper_default(d, policy, n, causal, q);
            EXPECT_EQ(v.pipeline, "mma") << v.name;
            EXPECT_EQ(v.get_string("schedule"), "decode") << v.name << " " << q << " queries";
            EXPECT_EQ(v.get_string("qk"), "native") << v.name;
          }
          for (int q : {5, 16, 17, 128})
            for (int bh : {0, 512}) {
              const gen::Variant v = hopper_default(d, policy, n, causal, q, false, bh);
              EXPECT_EQ(v.get_string("qk"), "native") << d << " " << policy << " " << n << " " << causal << " " << q;
              EXPECT_EQ(v.get_string("schedule"), "persistent_split") << v.name << " " << q << " queries, bh " << bh;
              EXPECT_EQ(v.get_int("block_m"), 128) << v.name;  // one query tile a head
            }
          // Past 1K queries (and where the query count is not given) the key count decides.
          for (int q : {2048, 4096, 0})
            EXPECT_EQ(hopper_default(d, policy, n, causal, q).name, hopper_default(d, policy, n, causal).name)
                << d << " " << policy << " " << n << " " << causal << " " << q;
        }
  EXPECT_EQ(hopper_default(128, "balanced", 32768, 0, 2048).get_string("qk"), "int8");
  // Head dim 256: the decode schedule up to 4 queries too; then the row-major mma.sync kernel.
  for (int n : {4096, 32768})
    for (int causal : {0, 1}) {
      for (int q : {1, 2, 4}) EXPECT_EQ(hopper_default(256, "balanced", n, causal, q).get_string("schedule"), "decode");
      const gen::Variant v = hopper_default(256, "balanced", n, causal, 5);
      EXPECT_EQ(v.get_string("schedule"), "plain") << v.name;
      EXPECT_EQ(v.get_int("block_m"), 64) << v.name;
    }
}

// sm_80, sm_86, sm_89 and Blackwell: decoding and short query blocks (up to 256 queries) run
// the native mma.sync kernel (split keys, packed GQA heads, no preparation) under every policy
// and mask; past 256 queries the defaults by key count (quantized, with a preparation).
TEST(Defaults, AmpereAdaAndBlackwellDecodingRunTheNativeMmaKernel) {
  const gen::SearchSpace space = gen::SearchSpace::builtin();
  for (const char* arch : {"sm_80", "sm_86", "sm_89", "sm_100", "sm_120"})
    for (int d : {64, 128})
      for (const char* policy : {"accurate", "balanced", "fast"})
        for (int causal : {0, 1, -1}) {
          for (int q : {1, 16, 128, 256}) {
            const std::optional<gen::Variant> v = space.find(tuner::default_variant(arch, d, policy, 32768, causal, q));
            ASSERT_TRUE(v.has_value()) << arch << " " << d << " " << policy;
            EXPECT_EQ(v->pipeline, "mma") << v->name;
            EXPECT_EQ(v->get_string("qk"), "native") << v->name;
            EXPECT_EQ(v->get_string("pv"), "native") << v->name;
            // One query: the decode schedule (queries as the MMAs' N; seq bucket 1); more: the
            // row-major kernel, whose tile holds a head's queries whatever the group.
            EXPECT_EQ(v->get_string("schedule"), q == 1 ? "decode" : "plain") << v->name;
          }
          for (int q : {512, 2048}) {
            const std::optional<gen::Variant> v = space.find(tuner::default_variant(arch, d, policy, 32768, causal, q));
            ASSERT_TRUE(v.has_value());
            EXPECT_NE(v->get_string("qk"), "native") << v->name;
          }
        }
}

// Query blocks of up to 1K over a longer KV cache (chunked prefill): the native kernels, not
// the quantized ones, whose preparation of the whole cache those few queries cannot amortize.
// Up to the key counts where the native kernels serve every call, the defaults are those.
TEST(Defaults, HopperChunkedPrefillRunsTheNativeKernels) {
  for (const char* policy : {"accurate", "balanced", "fast"})
    for (int n : {8192, 16384, 32768})
      for (int causal : {0, 1, -1}) {
        for (int q : {256, 512, 1024}) {
          const gen::Variant v = hopper_default(128, policy, n, causal, q);
          EXPECT_EQ(v.get_string("qk"), "native") << v.name;
          EXPECT_EQ(v.get_string("schedule"), "persistent_pingpong") << v.name;
        }
        for (int q : {256, 512}) {
          const gen::Variant v = hopper_default(64, policy, n, causal, q);
          EXPECT_EQ(v.get_string("qk"), "native") << v.name;
          EXPECT_EQ(v.get_string("schedule"), "persistent_pingpong") << v.name;
        }
        const gen::Variant v = hopper_default(64, policy, n, causal, 1024);
        EXPECT_EQ(v.get_string("qk"), "native") << v.name;
        EXPECT_EQ(v.get_string("schedule"), "plain") << v.name;
        EXPECT_EQ(v.get_int("min_ctas"), 2) << v.name;
      }
  // Short KV caches keep the defaults by key count (a 512-query prompt of its own included).
  for (int causal : {0, 1})
    for (int q : {512, 1024}) {
      EXPECT_EQ(hopper_default(64, "balanced", 2048, causal, q).name, hopper_default(64, "balanced", 2048, causal).name);
      EXPECT_EQ(hopper_default(128, "balanced", 2048, causal, q).name, hopper_default(128, "balanced", 2048, causal).name);
    }
}

// Calls below head dim 128 whose rows are 16 but not 32 bytes long a multiple of (rows16: d =
// 72, 104, ...) take the quantized one-warpgroup kernel from 1K to 3K keys without a mask,
// under the balanced and fast policies (the native kernel reads their rows off the sectors),
// where they have more than 1K queries; up to 1K keys, with a mask, under the accurate policy,
// for blocks of up to 1K queries over those keys and for aligned rows the defaults are those
// of d=128.
TEST(Defaults, HopperRowsOffTheSectorsRunTheQuantizedKernelPast1KKeys) {
  auto dflt = [](const std::string& policy, int n, int causal, bool rows16, int seq_q = 0) {
    return hopper_default(128, policy, n, causal, seq_q > 0 ? seq_q : n, rows16);
  };
  for (const std::string policy : {"balanced", "fast"})
    for (int n : {2048, 3072}) {
      const gen::Variant v = dflt(policy, n, 0, true);
      EXPECT_EQ(v.get_string("qk"), "int8") << v.name;
      EXPECT_EQ(v.name, dflt(policy, 4096, 0, false).name) << n;  // the 4K default
      EXPECT_EQ(dflt(policy, n, 0, false).get_string("qk"), "native") << n;
      EXPECT_EQ(dflt(policy, n, 1, true).name, dflt(policy, n, 1, false).name) << n;
      for (int q : {256, 512, 1024}) {  // a block of queries over those keys: as aligned rows
        EXPECT_EQ(dflt(policy, n, 0, true, q).name, dflt(policy, n, 0, false, q).name) << n << " " << q;
        EXPECT_EQ(dflt(policy, n, 0, true, q).get_string("qk"), "native") << n << " " << q;
      }
    }
  for (int causal : {0, 1}) EXPECT_EQ(dflt("balanced", 1024, causal, true).name, dflt("balanced", 1024, causal, false).name);
  for (int n : {1024, 2048, 3072, 4096}) EXPECT_EQ(dflt("accurate", n, 0, true).name, dflt("accurate", n, 0, false).name);
  for (int n : {4096, 8192, 32768}) EXPECT_EQ(dflt("balanced", n, 0, true).name, dflt("balanced", n, 0, false).name);
}

// Head dim 64's rows16 calls (d = 40, 56) take the quantized kernel of longer calls from 2K to
// 3K keys and queries without a mask, under the balanced and fast policies; up to 2K, with a
// mask, for fewer queries and under the accurate policy they keep the defaults of d=64.
TEST(Defaults, HopperRowsOffTheSectorsAtHeadDim64RunTheQuantizedKernelFrom2KKeys) {
  auto dflt = [](const std::string& policy, int n, int causal, bool rows16, int seq_q = 0) {
    return hopper_default(64, policy, n, causal, seq_q > 0 ? seq_q : n, rows16);
  };
  for (const std::string policy : {"balanced", "fast"}) {
    const gen::Variant v = dflt(policy, 3072, 0, true);
    EXPECT_EQ(v.get_string("qk"), "int8") << v.name;
    EXPECT_EQ(v.name, dflt(policy, 4096, 0, false).name);  // the 4K default
    EXPECT_EQ(dflt(policy, 3072, 0, false).get_string("qk"), "native");
    for (int n : {1024, 2048}) EXPECT_EQ(dflt(policy, n, 0, true).name, dflt(policy, n, 0, false).name) << n;
    for (int n : {2048, 3072, 4096, 6144}) EXPECT_EQ(dflt(policy, n, 1, true).name, dflt(policy, n, 1, false).name) << n;
    for (int q : {512, 1024, 2048}) EXPECT_EQ(dflt(policy, 3072, 0, true, q).name, dflt(policy, 3072, 0, false, q).name) << q;
  }
  for (int n : {2048, 3072, 4096}) EXPECT_EQ(dflt("accurate", n, 0, true).name, dflt("accurate", n, 0, false).name) << n;
}

// Draft tokens of few (sequence, query head) pairs (2026-11-27 (aa)): 5-16 queries take the
// mma.sync decode schedule where batch x query heads and the keys
// are few enough that its tiles' reads of the keys (one per tile of 16 / queries heads) cost
// less than persistent_split's fixed cost; otherwise persistent_split. The boundaries are the
// H100's (configs/defaults.yaml). Head dim 128, 5-8 queries: up to 4K keys at bh <= 128,
// 16K at bh <= 32, 32K at bh <= 16, any at bh <= 8; 9-16 queries: up to 2K at
// bh <= 128, 4K at bh <= 32, 8K at bh <= 16. Head dim 64, 5-8 queries: up to 8K keys at
// bh <= 128, 32K at bh <= 32, any at bh <= 16; 9-16: up to 8K at bh <= 32, 32K at bh <= 16.
// Head dim 256 (against its row-major mma.sync kernel): 5-8 queries up to 32K keys at
// bh <= 32; 9-16 up to 8K at bh <= 32, 32K at bh <= 16.
TEST(Defaults, HopperDraftTokensOfFewSequenceHeadPairsRunTheDecodeSchedule) {
  struct Row {
    int d, q, n, bh;
    bool decode;
  };
  const Row rows[] = {
      // Head dim 128, 5-8 queries.
      {128, 5, 2048, 128, true},   {128, 8, 2048, 512, false},   {128, 8, 4096, 128, true},
      {128, 8, 6144, 32, true},    {128, 8, 8192, 32, true},     {128, 5, 8192, 128, false},
      {128, 8, 16384, 32, true},   {128, 5, 16384, 128, false},  {128, 8, 16384, 16, true},
      {128, 8, 32768, 16, false},  {128, 8, 32768, 8, true},     {128, 8, 32768, 32, false},
      {128, 8, 65536, 8, true},    {128, 8, 131072, 8, false},   {128, 8, 65536, 16, false},
      {128, 8, 131072, 16, false},
      // Head dim 128, 9-16 queries, and 17.
      {128, 16, 2048, 128, true},  {128, 16, 4096, 128, false},  {128, 9, 4096, 32, true},
      {128, 12, 8192, 16, true},   {128, 12, 8192, 32, false},   {128, 16, 16384, 8, false},
      {128, 17, 1024, 8, false},
      // Head dim 64.
      {64, 8, 8192, 128, true},    {64, 8, 8192, 512, false},    {64, 5, 32768, 32, true},
      {64, 8, 32768, 128, false},  {64, 8, 32768, 16, true},     {64, 8, 65536, 16, false},
      {64, 8, 131072, 8, true},    {64, 8, 131072, 32, false},   {64, 16, 8192, 32, true},
      {64, 12, 8192, 128, false},  {64, 16, 16384, 16, true},    {64, 16, 32768, 16, false},
      {64, 16, 32768, 8, true},    {64, 16, 32768, 32, false},   {64, 16, 65536, 8, false},
      {64, 17, 1024, 8, false},
      // Head dim 256 (otherwise its row-major mma.sync kernel).
      {256, 8, 32768, 32, true},   {256, 8, 32768, 128, false},  {256, 5, 1024, 128, false},
      {256, 8, 65536, 8, false},   {256, 16, 8192, 32, true},    {256, 16, 16384, 32, false},
      {256, 16, 32768, 16, true},  {256, 17, 1024, 8, false},
  };
  for (const Row& r : rows)
    for (const char* policy : {"accurate", "balanced", "fast"})
      for (int causal : {0, 1}) {
        const gen::Variant v = hopper_default(r.d, policy, r.n, causal, r.q, false, r.bh);
        // Otherwise: persistent_split, at head dim 256 the row-major mma.sync kernel.
        const char* other = r.d == 256 ? "plain" : "persistent_split";
        EXPECT_EQ(v.get_string("schedule"), r.decode ? "decode" : other)
            << v.name << ": d" << r.d << " " << r.q << " queries over " << r.n << " keys, bh " << r.bh;
        EXPECT_EQ(v.pipeline, r.decode || r.d == 256 ? "mma" : "wgmma") << v.name;
        EXPECT_EQ(v.get_string("qk"), "native") << v.name;
      }
  // Up to four queries the decode schedule whatever the pairs.
  for (int d : {64, 128, 256})
    EXPECT_EQ(hopper_default(d, "balanced", 32768, 1, 4, false, 512).get_string("schedule"), "decode") << d;
}

// Prefill calls of few (sequence, query head) pairs (batch x query heads, bh) on sm_90a
// (2026-11-28): head dim 64 takes 64-row native CTAs (twice the CTAs of the 128-row kernels)
// where they fit one wave, and for up to 8 pairs the native kernels up to 4K keys; head dim
// 128 takes 64-row native CTAs up to 512 keys and the native kernel up to 4K keys for up to 8
// pairs, and the one-warpgroup quantized kernel instead of the three-warpgroup one up to 8K
// keys for up to 16 pairs and 16K for up to 8. Bucket edges on both sides of each entry.
TEST(Defaults, HopperPrefillOfFewSequenceHeadPairsFillsTheGpu) {
  struct Row {
    int d, n, causal, bh;  // bh: the call's own batch x query heads, which max_bh matches
    const char* policy;
    int block_m, block_n, warpgroups;  // block_n 0: not checked
    const char* qk;
    const char* schedule;  // nullptr: not checked
  };
  const Row rows[] = {
      // Head dim 64: 64-row native CTAs of one warpgroup, 128-key tiles, where they fill their
      // waves best (three an SM); 64-key tiles (about five an SM) where those do; else the
      // 128-row kernel (two an SM). Both sides of each edge, in pairs of one bucket.
      {64, 3072, 0, 8, "balanced", 64, 128, 1, "native", "plain"},
      {64, 3072, 1, 8, "accurate", 64, 128, 1, "native", "plain"},
      {64, 512, 0, 48, "balanced", 64, 128, 1, "native", "plain"},
      {64, 512, 1, 48, "balanced", 64, 128, 1, "native", "plain"},
      {64, 512, 0, 64, "balanced", 128, 128, 2, "native", "plain"},
      {64, 512, 0, 128, "balanced", 128, 128, 2, "native", "plain"},
      {64, 1024, 0, 16, "balanced", 64, 128, 1, "native", "plain"},
      {64, 1024, 0, 24, "balanced", 64, 128, 1, "native", "plain"},   // B=1 H=24: 384 CTAs
      {64, 1024, 0, 28, "balanced", 128, 128, 2, "native", "plain"},  // 448 of them: one wave past
      {64, 1024, 0, 32, "balanced", 128, 128, 2, "native", "plain"},  // B=2 H=16: 512
      {64, 1024, 1, 32, "fast", 64, 128, 1, "native", "plain"},
      {64, 1024, 0, 40, "balanced", 64, 64, 1, "native", "plain"},    // 640 CTAs of 64-key tiles
      {64, 1024, 0, 48, "balanced", 64, 128, 1, "native", "plain"},   // 768: two whole waves
      {64, 1024, 0, 64, "accurate", 128, 128, 2, "native", "plain"},
      {64, 1024, 0, 128, "balanced", 128, 128, 2, "native", "plain"},
      {64, 1024, 1, 40, "balanced", 64, 64, 1, "native", "plain"},    // the 64x64 causal kernel
      {64, 1024, 1, 128, "balanced", 64, 64, 1, "native", "plain"},
      {64, 2048, 0, 12, "balanced", 64, 128, 1, "native", "plain"},   // 384 CTAs
      {64, 2048, 0, 16, "balanced", 128, 128, 2, "native", "plain"},  // B=1 H=16 would take 512 CTAs
      {64, 2048, 0, 20, "balanced", 64, 64, 1, "native", "plain"},
      {64, 2048, 0, 24, "balanced", 128, 128, 2, "native", "plain"},
      {64, 2048, 1, 20, "balanced", 64, 128, 1, "native", "plain"},
      {64, 2048, 1, 24, "balanced", 64, 128, 1, "native", "plain"},
      {64, 2048, 1, 28, "balanced", 64, 64, 1, "native", "plain"},
      {64, 2048, 0, 32, "balanced", 128, 128, 2, "native", "plain"},
      {64, 2048, 0, 33, "balanced", 128, 128, 2, "native", "plain"},  // 528 128-row CTAs: two waves
      {64, 2048, 0, 34, "balanced", 64, 64, 1, "native", "plain"},    // the 128-row kernel's 2.06 waves
      {64, 2048, 0, 40, "balanced", 128, 128, 2, "native", "plain"},
      {64, 1024, 1, 36, "balanced", 64, 128, 1, "native", "plain"},
      {64, 3072, 0, 10, "balanced", 128, 128, 2, "native", "plain"},  // 240 128-row CTAs: one wave
      {64, 3072, 0, 12, "balanced", 64, 64, 1, "native", "plain"},
      {64, 3072, 0, 16, "balanced", 128, 128, 2, "native", "plain"},
      {64, 3072, 1, 16, "balanced", 64, 128, 1, "native", "plain"},
      {64, 3072, 1, 20, "balanced", 128, 128, 2, "native", "plain"},
      // Head dim 64, up to 8 pairs over 4K keys: the 128-row native kernels.
      {64, 4096, 0, 8, "balanced", 128, 128, 2, "native", "plain"},
      {64, 4096, 1, 8, "balanced", 128, 128, 2, "native", "persistent_pingpong"},
      {64, 4096, 0, 16, "balanced", 64, 128, 1, "int8", "plain"},
      {64, 6144, 0, 8, "balanced", 64, 128, 1, "int8", "plain"},
      // Head dim 128 up to 512 keys: 64-row native CTAs for up to 16 pairs.
      {128, 512, 0, 8, "balanced", 64, 128, 1, "native", "plain"},
      {128, 512, 1, 8, "accurate", 64, 128, 1, "native", "plain"},
      {128, 512, 0, 16, "balanced", 64, 128, 1, "native", "plain"},
      {128, 512, 0, 20, "balanced", 128, 128, 2, "native", "persistent_pingpong"},
      {128, 512, 1, 20, "balanced", 64, 128, 1, "native", "plain"},
      {128, 512, 1, 24, "balanced", 128, 128, 2, "native", "persistent_pingpong"},
      // Head dim 128, causal 4K keys: the native persistent kernel, but for 9-12 and 17-18 pairs.
      {128, 4096, 1, 8, "balanced", 128, 128, 2, "native", "persistent_pingpong"},
      {128, 4096, 1, 10, "balanced", 64, 128, 1, "int8", "plain"},
      {128, 4096, 1, 10, "accurate", 128, 128, 2, "native", "persistent_pingpong"},
      {128, 4096, 1, 14, "balanced", 128, 128, 2, "native", "persistent_pingpong"},
      {128, 4096, 1, 18, "fast", 64, 128, 1, "int8", "plain"},
      {128, 4096, 1, 24, "balanced", 128, 128, 2, "native", "persistent_pingpong"},
      {128, 1024, 0, 8, "balanced", 128, 128, 2, "native", "persistent_pingpong"},
      // Head dim 128, no mask up to 4K keys: the native persistent kernel for up to 20 pairs.
      {128, 4096, 0, 8, "balanced", 128, 128, 2, "native", "persistent_pingpong"},
      {128, 4096, 0, 9, "balanced", 64, 128, 1, "int8", "plain"},   // 288 items: 2.2 rounds
      {128, 4096, 0, 10, "balanced", 128, 128, 2, "native", "persistent_pingpong"},
      {128, 4096, 0, 16, "balanced", 128, 128, 2, "native", "persistent_pingpong"},
      {128, 4096, 0, 18, "balanced", 64, 128, 1, "int8", "plain"},  // 4.4 rounds of 128-row items
      {128, 4096, 0, 18, "accurate", 128, 128, 2, "native", "persistent_pingpong"},
      {128, 4096, 0, 20, "balanced", 128, 128, 2, "native", "persistent_pingpong"},
      {128, 4096, 0, 24, "balanced", 64, 128, 1, "int8", "plain"},
      {128, 6144, 0, 8, "balanced", 64, 128, 1, "int8", "plain"},
      // Head dim 128, the one-warpgroup quantized kernel past 6K keys for few pairs.
      {128, 8192, 0, 16, "balanced", 64, 128, 1, "int8", "plain"},
      {128, 8192, 1, 16, "fast", 64, 128, 1, "int8", "plain"},
      {128, 8192, 0, 32, "balanced", 192, 128, 3, "int8", "plain"},
      {128, 16384, 0, 16, "balanced", 192, 128, 3, "int8", "plain"},
      {128, 16384, 0, 8, "balanced", 64, 128, 1, "int8", "plain"},
      {128, 16384, 1, 8, "balanced", 64, 128, 1, "int8", "plain"},
      {128, 32768, 0, 8, "balanced", 192, 128, 3, "int8", "plain"},
      {128, 16384, 0, 8, "accurate", 128, 0, 2, "native", nullptr},  // the accurate policy keeps the native kernel
  };
  for (const Row& r : rows) {
    const gen::Variant v = hopper_default(r.d, r.policy, r.n, r.causal, r.n, false, r.bh);
    const std::string what = v.name + ": d" + std::to_string(r.d) + " " + std::to_string(r.n) + " keys, causal " +
                             std::to_string(r.causal) + ", bh " + std::to_string(r.bh) + ", " + r.policy;
    EXPECT_EQ(v.get_int("block_m"), r.block_m) << what;
    if (r.block_n) {
      EXPECT_EQ(v.get_int("block_n"), r.block_n) << what;
    }
    EXPECT_EQ(v.get_int("warpgroups"), r.warpgroups) << what;
    EXPECT_EQ(v.get_string("qk"), r.qk) << what;
    EXPECT_EQ(v.pipeline, "wgmma") << what;
    if (r.schedule) {
      EXPECT_EQ(v.get_string("schedule"), r.schedule) << what;
    }
  }
  // Rows off the 32-byte sectors keep their quantized default at 3K keys and queries whatever
  // the pairs: the entries above were measured on aligned rows.
  EXPECT_EQ(hopper_default(64, "balanced", 3072, 0, 3072, true, 8).get_string("qk"), "int8");
}

// The runtime matches defaults.yaml's entries against the call's seq_kv (seq_q) bucket and
// `sage-tune bench` against the call's seq_kv (seq_q) itself: the two agree only where every
// max_seq_kv, max_seq_q and min_seq_q is a bucket boundary of problems.yaml (a call of 5000 keys is in the
// 6144 bucket).
TEST(Defaults, EveryMaxSeqKvIsASeqBucketBoundary) {
  const EmbeddedFile* f = embedded_configs::find("defaults.yaml");
  ASSERT_NE(f, nullptr);
  const YAML::Node root = YAML::Load(std::string(f->view()));
  const std::vector<int> bounds = tuner::ProblemsConfig::builtin().seq_buckets;
  int entries = 0;
  for (const auto& arch : root["defaults"])
    for (const YAML::Node& entry : arch.second)
      for (const char* key : {"max_seq_kv", "max_seq_q", "min_seq_q"})
        if (YAML::Node mx = entry[key]) {
          ++entries;
          // A paged call's queries have finer buckets (paged_seq_q_bucket: powers of two up to 128).
          const int v = mx.as<int>();
          const bool paged = entry["paged"] && entry["paged"].as<bool>() && std::string(key) == "max_seq_q";
          if (paged && paged_seq_q_bucket(v, v + 1) == v) continue;
          EXPECT_NE(std::find(bounds.begin(), bounds.end(), v), bounds.end())
              << arch.first.as<std::string>() << " " << key << " " << v;
        }
  EXPECT_GT(entries, 0);
  // The boundaries at which the sm_90a defaults change kernel (2026-11-26 (g), (h), 2026-11-27 (aa)).
  for (int b : {128, 2048, 3072, 4096, 6144, 8192, 8, 16})
    EXPECT_NE(std::find(bounds.begin(), bounds.end(), b), bounds.end()) << b;
  // max_bh needs no bucket boundary: the runtime (jit::choose), `sage-tune select` and `sage-tune
  // bench` all match it against the call's own batch x query heads.
}

// A call whose own batch x query heads has another default than its bucket's boundary (where a
// tuned winner was timed) has a pairs default, which leads that winner; where the two agree, or
// the count is the boundary, it has none.
TEST(Defaults, PairsDefaultWhereTheCountsDefaultDiffersFromTheBoundarys) {
  const auto own = tuner::pairs_default("sm_90a", 64, "balanced", 1024, 0, 1024, false, 24, 32);
  ASSERT_TRUE(own.has_value());
  EXPECT_EQ(*own, tuner::default_variant("sm_90a", 64, "balanced", 1024, 0, 1024, false, 24));
  EXPECT_NE(*own, tuner::default_variant("sm_90a", 64, "balanced", 1024, 0, 1024, false, 32));
  EXPECT_FALSE(tuner::pairs_default("sm_90a", 64, "balanced", 1024, 0, 1024, false, 30, 32).has_value());
  EXPECT_FALSE(tuner::pairs_default("sm_90a", 64, "balanced", 1024, 0, 1024, false, 32, 32).has_value());
  EXPECT_FALSE(tuner::pairs_default("sm_90a", 64, "balanced", 1024, 0, 1024, false, 0, 32).has_value());
  // The grid's shape (B=4 H=32) is the bucket's boundary: its winner serves it.
  EXPECT_FALSE(tuner::pairs_default("sm_90a", 128, "balanced", 16384, 0, 16384, false, 128, 128).has_value());
  // B=1 H=40 at 1K: the 64x64 CTAs, where the bucket's 128 pairs take the 128-row kernel.
  const auto h40 = tuner::pairs_default("sm_90a", 64, "balanced", 1024, 0, 1024, false, 40, 128);
  ASSERT_TRUE(h40.has_value());
  EXPECT_EQ(hopper_default(64, "balanced", 1024, 0, 1024, false, 40).get_int("block_n"), 64);
}

// The max_bh edges are the H100 SXM's wave edges (132 SMs). On fewer SMs (an H100 PCIe's 114, an
// H20's 78, a green context's partition) one wave holds fewer CTAs, and the edges move with
// them: D=64 1K keys, the 64-row 128-key CTAs run three to an SM, 16 a (sequence, head) pair, so
// one wave holds 24 pairs on 132 SMs (384 of 396 places), 21 on 112 (336), 21 on 114 (342) and 14
// on 78 (224 of 234); past that the 128-row kernel (two an SM, 8 CTAs a pair) takes them.
TEST(Defaults, MaxBhEdgesScaleWithTheSmsTheCallRunsOn) {
  EXPECT_EQ(tuner::measured_sms("sm_90a"), 132);
  EXPECT_EQ(tuner::measured_sms("sm_80"), 0);  // no max_bh edges there
  EXPECT_EQ(tuner::pairs_at_measured_sms("sm_90a", 21, 112), 24);
  EXPECT_EQ(tuner::pairs_at_measured_sms("sm_90a", 22, 112), 25);
  EXPECT_EQ(tuner::pairs_at_measured_sms("sm_90a", 24, 132), 24);
  EXPECT_EQ(tuner::pairs_at_measured_sms("sm_90a", 24, 0), 24);    // 0: as measured
  EXPECT_EQ(tuner::pairs_at_measured_sms("sm_90a", 1, 264), 1);    // never below one
  EXPECT_EQ(tuner::pairs_at_measured_sms("sm_80", 22, 112), 22);   // no measured count: unchanged
  auto block_m = [](int pairs, int sms) {
    return hopper_default(64, "balanced", 1024, 0, 1024, false, pairs, sms).get_int("block_m");
  };
  for (int sms : {0, 132}) {
    EXPECT_EQ(block_m(24, sms), 64) << sms;
    EXPECT_EQ(block_m(25, sms), 128) << sms;
  }
  EXPECT_EQ(block_m(21, 112), 64);
  EXPECT_EQ(block_m(22, 112), 128);
  EXPECT_EQ(block_m(21, 114), 64);
  EXPECT_EQ(block_m(22, 114), 128);
  EXPECT_EQ(block_m(14, 78), 64);
  EXPECT_EQ(block_m(15, 78), 128);
  // The pairs default compares the call's count with its bucket's boundary on the same SMs: 22
  // pairs on 112 SMs take the 128-row kernel, the boundary's 32 (as 37 on 132) the 64x64 CTAs.
  const auto own = tuner::pairs_default("sm_90a", 64, "balanced", 1024, 0, 1024, false, 22, 32, 112);
  ASSERT_TRUE(own.has_value());
  EXPECT_EQ(*own, tuner::default_variant("sm_90a", 64, "balanced", 1024, 0, 1024, false, 25));
  EXPECT_EQ(hopper_default(64, "balanced", 1024, 0, 1024, false, 32, 112).get_int("block_n"), 64);
  // The entry that matched says which count it was matched with.
  EXPECT_EQ(tuner::default_match("sm_90a", 64, "balanced", 1024, 0, 1024, false, 22, 112).bh, 25);
  EXPECT_EQ(tuner::default_match("sm_90a", 64, "balanced", 1024, 0, 1024, false, 22).bh, 22);
  // Every architecture with max_bh edges says which SM count they were measured on.
  const EmbeddedFile* f = embedded_configs::find("defaults.yaml");
  ASSERT_NE(f, nullptr);
  const YAML::Node root = YAML::Load(std::string(f->view()));
  for (const auto& arch : root["defaults"]) {
    bool edges = false;
    for (const YAML::Node& entry : arch.second) edges |= bool(entry["max_bh"]);
    if (edges) EXPECT_GT(tuner::measured_sms(arch.first.as<std::string>()), 0) << arch.first.as<std::string>();
  }
  // The grid's shape: 128 pairs keep the B x H 128 kernels on any count of SMs at these lengths.
  for (int sms : {78, 114, 132})
    EXPECT_EQ(hopper_default(128, "balanced", 16384, 0, 16384, false, 128, sms).name,
              hopper_default(128, "balanced", 16384, 0, 16384, false, 128).name)
        << sms;
}

// tuner::default_variant reads only the keys below; a mistyped one (max_bhh) would be ignored and
// widen its entry to every call, so every entry names known keys only, and always head_dim and
// params.
TEST(Defaults, EveryEntryNamesKnownKeysOnly) {
  const EmbeddedFile* f = embedded_configs::find("defaults.yaml");
  ASSERT_NE(f, nullptr);
  const YAML::Node root = YAML::Load(std::string(f->view()));
  const std::vector<std::string> known = {"head_dim", "policies", "max_seq_kv", "max_seq_q", "min_seq_q",
                                          "causal",   "rows16",   "max_bh",     "varlen",    "window", "paged",
                                          "kv8",      "params"};
  int entries = 0;
  for (const auto& arch : root["defaults"])
    for (std::size_t i = 0; i < arch.second.size(); ++i) {
      const YAML::Node entry = arch.second[i];
      ++entries;
      if (entry["continue"]) {  // the list's end: another arch's list follows, whole
        EXPECT_EQ(entry.size(), 1u) << arch.first.as<std::string>() << " entry " << entries;
        EXPECT_EQ(i + 1, arch.second.size()) << arch.first.as<std::string>() << ": `continue` ends the list";
        EXPECT_TRUE(root["defaults"][entry["continue"].as<std::string>()].IsSequence())
            << arch.first.as<std::string>() << " continues with " << entry["continue"].as<std::string>();
        continue;
      }
      EXPECT_TRUE(entry["head_dim"] && entry["params"]) << arch.first.as<std::string>() << " entry " << entries;
      for (const auto& kv : entry) {
        const std::string k = kv.first.as<std::string>();
        EXPECT_NE(std::find(known.begin(), known.end(), k), known.end())
            << arch.first.as<std::string>() << " entry " << entries << ": unknown key " << k;
      }
    }
  EXPECT_GT(entries, 0);
}

// Head dim 256 has only the native (unquantized) kernels, so every policy, length and mask
// runs one of them: on Hopper the wgmma kernel for prefill and the mma.sync kernel (keys split
// over the CTAs) for decoding; elsewhere the mma.sync kernel.
// Head dim 256: decoding (up to 128 queries) runs the native mma.sync kernel, which splits the
// keys, on every arch, and so do calls up to the crossover. Past it: on sm_90a, under the
// balanced and fast policies, the quantized wgmma kernel (INT8 Q.K^T, FP8 P.V) past 2K keys
// (accurate: the native wgmma kernel); on sm_80/86/89 the mma.sync kernel of INT8 Q.K^T past
// 1K keys under every policy, with each arch's D=128 P.V precision (sm_80 FP16, sm_86 FP16
// into FP16 accumulators, sm_89 FP8, and under the accurate policy FP16 accumulators); sm_120
// as sm_89 but for the accurate policy, and sm_100 under every policy, sm_80's FP16 P.V into
// FP32 accumulators (their other quantized 64x32 kernels spill there; since 2026-11-30 (bc)).
TEST(Defaults, HeadDim256RunsTheQuantizedKernelsPastTheCrossover) {
  static const gen::SearchSpace space = gen::SearchSpace::builtin();
  const std::map<std::string, std::string> pv = {{"sm_80", "fp16"},   {"sm_86", "fp16acc"}, {"sm_89", "fp8"},
                                                 {"sm_90a", "fp8"},  {"sm_100", "fp16"},   {"sm_120", "fp8"}};
  const std::map<std::string, std::string> pv_accurate = {
      {"sm_80", "fp16"}, {"sm_86", "fp16acc"}, {"sm_89", "fp16acc"}, {"sm_100", "fp16"}, {"sm_120", "fp16"}};
  for (const std::string& arch : space.archs())
    for (const std::string policy : {"accurate", "balanced", "fast"})
      for (int n : {1024, 2048, 4096, 0})
        for (int causal : {1, -1})
          for (int seq_q : {1, 1024, 0}) {
            const std::string name = tuner::default_variant(arch, 256, policy, n, causal, seq_q);
            const std::optional<gen::Variant> v = space.find(name);
            ASSERT_TRUE(v.has_value()) << name;
            EXPECT_EQ(v->get_int("head_dim"), 256) << name;
            const bool hopper = arch == "sm_90a";
            const bool decoding = seq_q >= 1 && seq_q <= 128;
            const bool long_keys = n == 0 || n > (hopper ? 2048 : 1024);
            const bool accurate = policy == "accurate";
            const bool quantized = !(hopper && accurate) && !decoding && long_keys;
            EXPECT_EQ(v->get_string("qk"), quantized ? "int8" : "native") << name << " n " << n << " seq_q " << seq_q;
            if (quantized) EXPECT_EQ(v->get_string("pv"), accurate ? pv_accurate.at(arch) : pv.at(arch)) << name;
            EXPECT_EQ(v->pipeline, hopper && !decoding ? "wgmma" : "mma") << name << " seq_q " << seq_q;
          }
}

TEST(Defaults, UnknownArchitectureIsNotFound) {
  try {
    tuner::default_variant("sm_70", 128, "balanced");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::not_found);
    EXPECT_NE(std::string(e.what()).find("no defaults for sm_70"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace sage
