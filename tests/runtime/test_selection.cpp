// Selection in a JIT build, without a GPU: which variant serves a bucket (user DB winner over
// system DB winner over the architecture default), what a miss explains, and where the cubin
// comes from (database, cubin cache, NVRTC), including SAGE_DISABLE_JIT and compiling once
// when threads or processes start together on a cold cache.
#include <gtest/gtest.h>

#include <fcntl.h>

#include <atomic>
#include <latch>
#include <thread>

#include "runtime/runtime_fixtures.h"
#include "sage/internal/jit_select.h"
#include "sage/internal/launch.h"
#include "sage/tuner/tune.h"
#include "sage/tuner/variants.h"
#include "tuner/store_fixtures.h"

namespace sage {
namespace {

using rt::Source;
using rt::jit::Choice;
namespace fs = std::filesystem;

const char* kArch = "sm_90a";

// Child mode (see ObtainInTwoProcessesCompilesOnce): wait until the parent opens the gate,
// obtain the variant, exit with the number of NVRTC compiles this process ran (or 100+ on an
// error). Runs before main() when the variable is set.
const int kChild = [] {
  const char* name = std::getenv("SAGE_TEST_OBTAIN_CHILD");
  if (!name) return 0;
  const int gate = std::atoi(std::getenv("SAGE_TEST_GATE_FD"));
  char c;
  if (::read(gate, &c, 1) < 0) std::_Exit(101);  // returns 0 (EOF) when the parent closes it
  try {
    rt::jit::ObtainOptions o;
    o.arch = kArch;
    o.cache_dir = std::getenv("SAGE_TEST_CACHE");
    const auto got = rt::jit::obtain(test::variant_named(kArch, name), o);
    if (got.cubin.size() < 4 || got.cubin.compare(0, 4, "\x7f" "ELF") != 0) std::_Exit(102);
  } catch (...) {
    std::_Exit(103);
  }
  std::_Exit(int(rt::jit::compile_count()));
}();

class RuntimeSelection : public ::testing::Test {
 protected:
  void SetUp() override {
    user_ = dir_.file("user.db");
    system_ = dir_.file("system.db");
    key_ = {test::fake_h100(), test::bucket(128, false, 4096, 128), tuner::generator_hash(), tuner::nvrtc_version()};
    dflt_ = tuner::default_variant(kArch, 128, "balanced", key_.problem.seq_kv_bucket);
    // Two non-default variants, so that every source names a different one.
    for (const auto& v : test::attention_variants(kArch, 128))
      if (v.name != dflt_ && others_.size() < 2) others_.push_back(v.name);
    ASSERT_EQ(others_.size(), 2u);
  }
  // A kernel record with made-up bytes: choose() never loads a cubin.
  tuner::KernelRecord fake_kernel(const std::string& variant, int seed) {
    tuner::KernelRecord k = test::kernel(seed, 512, variant);
    k.generator_hash = tuner::generator_hash();
    k.nvrtc_version = tuner::nvrtc_version();
    return k;
  }
  std::unique_ptr<tuner::WinnerLookup> lookup() {
    tuner::LookupOptions o;
    o.user_db = user_;
    o.system_db = system_;
    o.quick_check = false;
    o.warn = [this](const std::string& m) { warnings_.push_back(m); };
    return std::make_unique<tuner::WinnerLookup>(o);
  }
  void user_winner(const tuner::KernelRecord& k, const tuner::WinnerKey& key) {
    tuner::Store db(user_);
    test::add_winner(db, key.device, key.problem, k);
  }
  void system_winner(const tuner::KernelRecord& k) {
    test::make_system_db(system_, dir_.file("system-src.db"),
                         [&](tuner::Store& db) { test::add_winner(db, key_.device, key_.problem, k); });
  }

  test::ScratchDir dir_{"select"};
  std::string user_, system_, dflt_;
  std::vector<std::string> others_;
  tuner::WinnerKey key_;
  std::vector<std::string> warnings_;
};

TEST_F(RuntimeSelection, UserDbWinnerComesFirst) {
  const auto ku = fake_kernel(others_[0], 1), ks = fake_kernel(others_[1], 2);
  user_winner(ku, key_);
  system_winner(ks);
  auto l = lookup();
  const Choice c = rt::jit::choose(*l, key_, kArch, true);
  EXPECT_EQ(c.source, Source::user_db);
  EXPECT_EQ(c.variant, others_[0]);
  EXPECT_EQ(c.db, user_);
  ASSERT_TRUE(c.cubin.has_value());
  EXPECT_EQ(*c.cubin, ku.cubin);
  EXPECT_TRUE(c.rebuild.empty());
}

TEST_F(RuntimeSelection, SystemDbWinnerWhenTheUserDbHasNone) {
  const auto ks = fake_kernel(others_[1], 2);
  system_winner(ks);
  // A user DB with a winner for another bucket only.
  user_winner(fake_kernel(others_[0], 1), {key_.device, test::bucket(128, true, 4096, 128), key_.generator_hash,
                                          key_.nvrtc_version});
  auto l = lookup();
  const Choice c = rt::jit::choose(*l, key_, kArch, false);
  EXPECT_EQ(c.source, Source::system_db);
  EXPECT_EQ(c.variant, others_[1]);
  EXPECT_EQ(c.db, system_);
  ASSERT_TRUE(c.cubin.has_value());
  EXPECT_EQ(*c.cubin, ks.cubin);
}

TEST_F(RuntimeSelection, DefaultVariantWithoutWinnersExplainsTheMiss) {
  // The user DB has this bucket, but tuned under another driver: a miss, and the nearest key.
  tuner::WinnerKey other = key_;
  other.device.driver_version = 12080;
  user_winner(fake_kernel(others_[0], 1), other);
  auto l = lookup();
  const Choice c = rt::jit::choose(*l, key_, kArch, true);
  EXPECT_EQ(c.source, Source::default_variant);
  EXPECT_EQ(c.variant, dflt_);
  EXPECT_FALSE(c.cubin.has_value());
  EXPECT_NE(c.miss.find("device.driver_version (wanted 13000, stored 12080)"), std::string::npos) << c.miss;
  EXPECT_NE(c.miss.find(user_), std::string::npos) << c.miss;
}

TEST_F(RuntimeSelection, DefaultVariantWithoutDatabases) {
  auto l = lookup();  // neither file exists: nothing tuned yet, which is normal
  const Choice c = rt::jit::choose(*l, key_, kArch, true);
  EXPECT_EQ(c.source, Source::default_variant);
  EXPECT_EQ(c.variant, dflt_);
  EXPECT_NE(c.miss.find("no stored winner"), std::string::npos) << c.miss;
  EXPECT_FALSE(fs::exists(user_));  // a lookup never creates the user DB
}

// A winner is tuned at the kernel's own head dim, on aligned rows. Calls whose rows are 16 but
// not 32 bytes long a multiple of (rows16) take their own default where defaults.yaml has one
// for the bucket (sm_90a, head dim 128, 3K keys and queries, no mask: the quantized kernel),
// and the winner where it has none (4K keys: the same default either way).
TEST_F(RuntimeSelection, RowsOffTheSectorsTakeTheirOwnDefaultAheadOfAWinnerTunedOnAlignedRows) {
  tuner::WinnerKey k3 = key_;
  k3.problem = test::bucket(128, false, 3072, 128);
  const std::string own = tuner::default_variant(kArch, 128, "balanced", 3072, 0, 3072, true);
  ASSERT_NE(own, tuner::default_variant(kArch, 128, "balanced", 3072, 0, 3072, false));
  const auto w3 = fake_kernel(others_[0], 1), w4 = fake_kernel(others_[1], 2);
  ASSERT_NE(others_[0], own);
  user_winner(w3, k3);
  user_winner(w4, key_);
  auto l = lookup();
  const Choice rows16 = rt::jit::choose(*l, k3, kArch, true, true);
  EXPECT_EQ(rows16.source, Source::default_variant);
  EXPECT_EQ(rows16.variant, own);
  EXPECT_FALSE(rows16.cubin.has_value());
  EXPECT_NE(rows16.miss.find("rows16"), std::string::npos) << rows16.miss;
  const Choice aligned = rt::jit::choose(*l, k3, kArch, false, false);
  EXPECT_EQ(aligned.source, Source::user_db);
  EXPECT_EQ(aligned.variant, others_[0]);
  const Choice rows16_4k = rt::jit::choose(*l, key_, kArch, false, true);
  EXPECT_EQ(rows16_4k.source, Source::user_db);
  EXPECT_EQ(rows16_4k.variant, others_[1]);
}

// Without a winner, the default is the one of the call's whole bucket, batch x query heads
// included: 8 draft tokens over 32K keys take the decode schedule for one sequence of 8 query
// heads (Llama 3 70B on one GPU of 8), persistent_split for 16 (Llama 3.1 405B on one GPU of 8:
// its share merge leads there since 2026-11-27 (ab)) and for 2 x 32 (configs/defaults.yaml).
TEST_F(RuntimeSelection, DefaultsFollowTheCallsBatchTimesHeadsBucket) {
  auto l = lookup();
  tuner::WinnerKey k = key_;
  k.problem = test::bucket(128, true, 32768, 8);
  k.problem.seq_q_bucket = 8;
  const Choice few = rt::jit::choose(*l, k, kArch, false);
  EXPECT_EQ(few.source, Source::default_variant);
  EXPECT_EQ(test::variant_named(kArch, few.variant).get_string("schedule"), "decode") << few.variant;
  for (const int bh : {16, 128}) {
    k.problem.bh_bucket = bh;
    const Choice more = rt::jit::choose(*l, k, kArch, false);
    EXPECT_EQ(test::variant_named(kArch, more.variant).get_string("schedule"), "persistent_split")
        << "bh " << bh << ": " << more.variant;
  }
}

// A default's max_bh matches the call's own batch x query heads, not its bucket's: at head dim
// 64 over 1K keys without a mask, B=1 H=24 (384 64-row CTAs, one wave of three an SM on 132
// SMs) takes the 64-row native kernel and B=2 H=16 (512) the 128-row one, though both are in
// the bucket of up to 32 pairs; with 0 pairs (unknown) the bucket's own count decides. A tuned
// winner was timed at the bucket's boundary (32 pairs): it serves the calls whose own default is
// the boundary's (30 pairs), and a call whose count has a default of its own (24) keeps that.
TEST_F(RuntimeSelection, DefaultsFollowTheCallsOwnBatchTimesHeads) {
  auto l = lookup();
  tuner::WinnerKey k = key_;
  k.problem = test::bucket(64, false, 1024, 32);
  const Choice b1h24 = rt::jit::choose(*l, k, kArch, false, false, 24);
  const Choice b2h16 = rt::jit::choose(*l, k, kArch, false, false, 32);
  const Choice bucket = rt::jit::choose(*l, k, kArch, false, false, 0);
  EXPECT_EQ(b1h24.source, Source::default_variant);
  EXPECT_EQ(test::variant_named(kArch, b1h24.variant).get_int("block_m"), 64) << b1h24.variant;
  EXPECT_EQ(test::variant_named(kArch, b2h16.variant).get_int("block_m"), 128) << b2h16.variant;
  EXPECT_EQ(bucket.variant, b2h16.variant);
  EXPECT_EQ(b1h24.variant, tuner::default_variant(kArch, 64, "balanced", 1024, 0, 1024, false, 24));

  std::string tuned;
  for (const auto& v : test::attention_variants(kArch, 64))
    if (v.name != b1h24.variant && v.name != b2h16.variant) {
      tuned = v.name;
      break;
    }
  ASSERT_FALSE(tuned.empty());
  user_winner(fake_kernel(tuned, 3), k);
  l = lookup();
  for (const int pairs : {30, 32, 0}) {
    const Choice c = rt::jit::choose(*l, k, kArch, false, false, pairs);
    EXPECT_EQ(c.source, Source::user_db) << pairs;
    EXPECT_EQ(c.variant, tuned) << pairs;
  }
  const Choice own = rt::jit::choose(*l, k, kArch, true, false, 24);
  EXPECT_EQ(own.source, Source::default_variant);
  EXPECT_EQ(own.variant, b1h24.variant);
  EXPECT_NE(own.miss.find("24 (sequence, query head) pairs"), std::string::npos) << own.miss;
}

// A paged bucket (a paged call without a window or variable-length queries): its own winner,
// whose kernel reads pages; the dense bucket's winner of the same fields never serves it, nor
// does a paged winner serve FP8 pages' bucket; without a winner, the paged defaults.
class RuntimeSelectionPaged : public RuntimeSelection {
 protected:
  void SetUp() override {
    RuntimeSelection::SetUp();
    paged_ = key_;
    paged_.problem = test::bucket(128, true, 8192, 128);
    paged_.problem.layout = "NHD";
    paged_.problem.seq_q_bucket = 2048;
    paged_.problem.paged = true;
    pdflt_ = tuner::key_default(kArch, paged_.problem);
    for (const auto& v : test::attention_variants(kArch, 128)) {
      if (v.name == pdflt_) continue;
      const KernelConfig c = tuner::kernel_config(v);
      if (has_paged_entry(c) && reader_.empty()) reader_ = v.name;
      if (!has_paged_entry(c) && nonreader_.empty()) nonreader_ = v.name;
    }
    ASSERT_FALSE(reader_.empty());
    ASSERT_FALSE(nonreader_.empty());
  }
  tuner::WinnerKey paged_;
  std::string pdflt_, reader_, nonreader_;
};

TEST_F(RuntimeSelectionPaged, PagedBucketsTakeTheirOwnWinner) {
  // The paged defaults: a chunk of 2048 queries over 8K keys (an unquantized kernel, where the
  // dense bucket's is a quantized one).
  EXPECT_EQ(pdflt_, tuner::default_variant(kArch, 128, "balanced", 8192, 1, 2048, false, 128, 0, false, false, true));
  EXPECT_NE(pdflt_, tuner::default_variant(kArch, 128, "balanced", 8192, 1, 2048, false, 128));
  tuner::WinnerKey dense = paged_;
  dense.problem.paged = false;
  user_winner(fake_kernel(nonreader_, 1), dense);
  auto l = lookup();
  Choice c = rt::jit::choose(*l, paged_, kArch, true);
  EXPECT_EQ(c.source, Source::default_variant);
  EXPECT_EQ(c.variant, pdflt_);
  EXPECT_NE(c.miss.find("problem.paged (wanted paged, stored dense)"), std::string::npos) << c.miss;

  user_winner(fake_kernel(reader_, 2), paged_);
  l = lookup();
  c = rt::jit::choose(*l, paged_, kArch, true, false, 128);
  EXPECT_EQ(c.source, Source::user_db);
  EXPECT_EQ(c.variant, reader_);
  EXPECT_EQ(rt::jit::choose(*l, dense, kArch, false).variant, nonreader_);  // the dense bucket keeps its own

  tuner::WinnerKey kv8 = paged_;
  kv8.problem.kv8 = true;
  c = rt::jit::choose(*l, kv8, kArch, false);
  EXPECT_EQ(c.source, Source::default_variant);
  EXPECT_EQ(c.variant, tuner::key_default(kArch, kv8.problem));
  EXPECT_TRUE(has_paged_fp8_entry(tuner::kernel_config(test::variant_named(kArch, c.variant)))) << c.variant;
}

TEST_F(RuntimeSelectionPaged, AWinnerThatReadsNoPagesIsNotServed) {
  user_winner(fake_kernel(nonreader_, 1), paged_);  // a database edited by hand
  auto l = lookup();
  const Choice c = rt::jit::choose(*l, paged_, kArch, false);
  EXPECT_EQ(c.source, Source::default_variant);
  EXPECT_EQ(c.variant, pdflt_);
  EXPECT_FALSE(c.cubin.has_value());
  EXPECT_NE(c.miss.find("the winner " + nonreader_), std::string::npos) << c.miss;
  EXPECT_NE(c.miss.find("reads no paged KV cache"), std::string::npos) << c.miss;
  // With the variant's record beside it (the launcher config the tuner stores, read without the
  // search space): the same.
  {
    tuner::Store db(user_);
    const gen::Variant v = test::variant_named(kArch, nonreader_);
    tuner::VariantRecord r;
    r.name = v.name;
    r.params_hash = v.params_hash;
    r.generator_hash = tuner::generator_hash();
    r.params_json = tuner::variant_record_json(v);
    db.record_variant(r);
  }
  l = lookup();
  const Choice again = rt::jit::choose(*l, paged_, kArch, false);
  EXPECT_EQ(again.source, Source::default_variant);
  EXPECT_EQ(again.variant, pdflt_);
  EXPECT_NE(again.miss.find("reads no paged KV cache"), std::string::npos) << again.miss;
}

// Variable-length batches and sliding windows: their own buckets' winners, whose kernels take
// such calls (sage_attn_varlen / sage_attn_window); a winner whose kernel does not is refused;
// without a winner, the defaults the runtime took before these buckets were tuned.
class RuntimeSelectionVarlen : public RuntimeSelection {
 protected:
  void SetUp() override {
    RuntimeSelection::SetUp();
    varlen_ = key_;
    varlen_.problem = test::bucket(128, true, 4096, 128);
    varlen_.problem.layout = "NHD";
    varlen_.problem.varlen = true;
    window_ = key_;
    window_.problem = test::bucket(128, true, 16384, 128);
    window_.problem.layout = "NHD";
    window_.problem.seq_kv_bucket = 4096;
    window_.problem.window = true;
    for (const auto& v : test::attention_variants(kArch, 128)) {
      const KernelConfig c = tuner::kernel_config(v);
      if (v.name != tuner::key_default(kArch, varlen_.problem) && has_varlen_entry(c) && taker_.empty()) taker_ = v.name;
      if (!has_varlen_entry(c) && !has_window_entry(c) && other_.empty()) other_ = v.name;
    }
    ASSERT_FALSE(taker_.empty());
    ASSERT_FALSE(other_.empty());
  }
  tuner::WinnerKey varlen_, window_;
  std::string taker_, other_;
};

TEST_F(RuntimeSelectionVarlen, DefaultsAreTheVarlenAndWindowEntries) {
  // As the runtime asked them before these buckets were tuned: the varlen entries by the call's
  // own batch x query heads; a window's entries, then the varlen ones, as a non-causal call of
  // its window's keys.
  EXPECT_EQ(tuner::key_default(kArch, varlen_.problem, 128),
            tuner::default_variant(kArch, 128, "balanced", 4096, 1, 4096, false, 128, 0, true));
  EXPECT_EQ(tuner::key_default(kArch, window_.problem, 128),
            tuner::default_variant(kArch, 128, "balanced", 4096, 0, 16384, false, 128, 0, false, true));
  // (rows16 is a dense call's only)
  EXPECT_EQ(tuner::key_default(kArch, varlen_.problem, 128, 0, true), tuner::key_default(kArch, varlen_.problem, 128));
  auto l = lookup();
  for (const tuner::WinnerKey& k : {varlen_, window_}) {
    const Choice c = rt::jit::choose(*l, k, kArch, false, false, 128);
    EXPECT_EQ(c.source, Source::default_variant) << k.problem.str();
    EXPECT_EQ(c.variant, tuner::key_default(kArch, k.problem, 128)) << k.problem.str();
    const KernelConfig cfg = tuner::kernel_config(test::variant_named(kArch, c.variant));
    EXPECT_TRUE(k.problem.window ? has_window_entry(cfg) : has_varlen_entry(cfg)) << c.variant;
  }
}

TEST_F(RuntimeSelectionVarlen, VarlenAndWindowBucketsTakeTheirOwnWinners) {
  // The dense bucket's winner of the same fields serves neither.
  tuner::WinnerKey dense = varlen_;
  dense.problem.varlen = false;
  user_winner(fake_kernel(other_, 1), dense);
  auto l = lookup();
  Choice c = rt::jit::choose(*l, varlen_, kArch, true, false, 128);
  EXPECT_EQ(c.source, Source::default_variant);
  EXPECT_NE(c.miss.find("problem.varlen (wanted varlen, stored fixed)"), std::string::npos) << c.miss;

  user_winner(fake_kernel(taker_, 2), varlen_);
  user_winner(fake_kernel(taker_, 2), window_);
  l = lookup();
  for (const tuner::WinnerKey& k : {varlen_, window_}) {
    c = rt::jit::choose(*l, k, kArch, false, false, 128);
    EXPECT_EQ(c.source, Source::user_db) << k.problem.str();
    EXPECT_EQ(c.variant, taker_) << k.problem.str();
  }
  EXPECT_EQ(rt::jit::choose(*l, dense, kArch, false).variant, other_);  // the dense bucket keeps its own
  // The varlen winner does not serve the window bucket of its keys, nor the reverse.
  tuner::WinnerKey both = varlen_;
  both.problem.window = true;
  EXPECT_EQ(rt::jit::choose(*l, both, kArch, false).source, Source::default_variant);
}

TEST_F(RuntimeSelectionVarlen, AWinnerThatTakesNoSuchCallsIsNotServed) {
  user_winner(fake_kernel(other_, 1), varlen_);  // a database edited by hand
  user_winner(fake_kernel(other_, 1), window_);
  auto l = lookup();
  Choice c = rt::jit::choose(*l, varlen_, kArch, false, false, 128);
  EXPECT_EQ(c.source, Source::default_variant);
  EXPECT_EQ(c.variant, tuner::key_default(kArch, varlen_.problem, 128));
  EXPECT_NE(c.miss.find("the winner " + other_), std::string::npos) << c.miss;
  EXPECT_NE(c.miss.find("takes no variable-length batch"), std::string::npos) << c.miss;
  c = rt::jit::choose(*l, window_, kArch, false, false, 128);
  EXPECT_EQ(c.source, Source::default_variant);
  EXPECT_NE(c.miss.find("takes no sliding window"), std::string::npos) << c.miss;
}

TEST_F(RuntimeSelection, PolicySelectsItsOwnDefault) {
  auto l = lookup();
  tuner::WinnerKey k = key_;
  k.problem.policy = "accurate";
  EXPECT_EQ(rt::jit::choose(*l, k, kArch, false).variant, tuner::default_variant(kArch, 128, "accurate"));
  // sm_89's balanced default uses FP8 P.V, which the accurate policy does not admit.
  EXPECT_NE(tuner::default_variant("sm_89", 128, "balanced"), tuner::default_variant("sm_89", 128, "accurate"));
}

TEST_F(RuntimeSelection, DamagedWinnerKernelIsRebuiltNotServed) {
  user_winner(fake_kernel(others_[0], 1), key_);
  {
    test::RawDb raw(user_);
    raw.exec("UPDATE kernels SET cubin = x'00'");  // checksum mismatch on the next read
  }
  auto l = lookup();
  const Choice c = rt::jit::choose(*l, key_, kArch, false);
  EXPECT_EQ(c.source, Source::user_db);
  EXPECT_EQ(c.variant, others_[0]);
  EXPECT_FALSE(c.cubin.has_value());
  EXPECT_FALSE(c.rebuild.empty());
}

// ---- obtaining cubins (NVRTC runs here; no GPU needed) ----------------------------------

class RuntimeObtain : public ::testing::Test {
 protected:
  void SetUp() override {
    v_ = test::variant_named(kArch, tuner::default_variant(kArch, 64, "balanced"));
    rt::jit::reset_compile_count();
  }
  rt::jit::ObtainOptions opts(const std::string& cache, bool jit_disabled = false) {
    rt::jit::ObtainOptions o;
    o.arch = kArch;
    o.cache_dir = cache;
    o.jit_disabled = jit_disabled;
    o.what = "d64_noncausal_fp16_HND_q1024_kv1024_bh32_balanced on a test device";
    return o;
  }
  test::ScratchDir dir_{"obtain"};
  gen::Variant v_;
};

TEST_F(RuntimeObtain, JitDisabledOnAColdCacheNamesTheCommandToRun) {
  try {
    rt::jit::obtain(v_, opts(dir_.file("cache"), true));
    ADD_FAILURE() << "obtained a kernel with JIT disabled and nothing compiled";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::jit_disabled);
    const std::string m = e.what();
    EXPECT_NE(m.find("SAGE_DISABLE_JIT=1"), std::string::npos) << m;
    EXPECT_NE(m.find(cat("sage-tune compile --arch sm_90a --filter '^", v_.name, "$'")), std::string::npos) << m;
    EXPECT_NE(m.find("d64_noncausal"), std::string::npos) << m;
  }
  EXPECT_EQ(rt::jit::compile_count(), 0u);
}

TEST_F(RuntimeObtain, CompilesOnceThenServesTheCubinCache) {
  const std::string cache = dir_.file("cache");
  const auto first = rt::jit::obtain(v_, opts(cache));
  EXPECT_TRUE(first.compiled);
  EXPECT_EQ(first.from, "JIT compile");
  EXPECT_EQ(first.cubin.compare(0, 4, "\x7f" "ELF"), 0);
  EXPECT_EQ(rt::jit::compile_count(), 1u);
  EXPECT_TRUE(fs::exists(cat(cache, "/locks/", first.hash, ".lock")));

  const auto again = rt::jit::obtain(v_, opts(cache));
  EXPECT_FALSE(again.compiled);
  EXPECT_EQ(again.from, "cubin cache");
  EXPECT_EQ(again.cubin, first.cubin);
  // With JIT disabled a compiled kernel in the cache is still served: nothing is compiled.
  const auto cached = rt::jit::obtain(v_, opts(cache, true));
  EXPECT_EQ(cached.from, "cubin cache");
  EXPECT_EQ(cached.cubin, first.cubin);
  EXPECT_EQ(rt::jit::compile_count(), 1u);
}

TEST_F(RuntimeObtain, SageTuneCompileFillsTheCacheTheRuntimeReads) {
  // The command the JIT-disabled error prints must produce exactly the kernel obtain() wants.
  const std::string cache = dir_.file("cache");
  const auto r = test::run_command(cat("SAGE_CACHE_DIR=", test::quote(dir_.path()), " ", test::quote(SAGE_TUNE_EXE),
                                       " compile --arch sm_90a --filter '^", v_.name, "$' --cache-dir ", test::quote(cache)),
                                   dir_.file("log"));
  ASSERT_EQ(r.rc, 0) << r.output;
  const auto got = rt::jit::obtain(v_, opts(cache, true));
  EXPECT_EQ(got.from, "cubin cache");
  EXPECT_EQ(rt::jit::compile_count(), 0u);
}

TEST_F(RuntimeObtain, EightThreadsOnAColdCacheCompileOnce) {
  const std::string cache = dir_.file("cache");
  std::latch start(8);
  std::vector<std::string> cubins(8);
  std::atomic<int> compiled{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      start.arrive_and_wait();
      const auto got = rt::jit::obtain(v_, opts(cache));
      cubins[t] = got.cubin;
      compiled += got.compiled;
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(rt::jit::compile_count(), 1u);
  EXPECT_EQ(compiled.load(), 1);
  for (int t = 1; t < 8; ++t) EXPECT_EQ(cubins[t], cubins[0]);
}

TEST_F(RuntimeObtain, TwoProcessesOnAColdCacheCompileOnce) {
  const std::string cache = dir_.file("cache");
  int gate[2];
  ASSERT_EQ(::pipe(gate), 0);
  // Only the read end goes to the children: a write end left open in them would never let
  // them see EOF.
  ASSERT_EQ(::fcntl(gate[1], F_SETFD, FD_CLOEXEC), 0);
  std::vector<pid_t> kids;
  for (int i = 0; i < 2; ++i)
    kids.push_back(test::spawn_self({"SAGE_TEST_OBTAIN_CHILD=" + v_.name, cat("SAGE_TEST_GATE_FD=", gate[0]),
                                     "SAGE_TEST_CACHE=" + cache}));
  ::close(gate[0]);
  ::close(gate[1]);  // both children read EOF now and start together
  int total = 0;
  for (pid_t k : kids) {
    const int rc = test::wait_exit(k);
    ASSERT_LT(rc, 100) << "child failed with " << rc;
    total += rc;
  }
  EXPECT_EQ(total, 1) << "NVRTC compiles across both processes";
  int cubins = 0;
  for (const auto& e : fs::recursive_directory_iterator(cache)) cubins += e.path().extension() == ".cubin";
  EXPECT_EQ(cubins, 1);
}

}  // namespace
}  // namespace sage
