// Keys of the runtime: problem buckets agree with the tuner's (so winners tuned for a bucket
// are found), the in-memory cache key separates exactly what must be separate, and the
// runtime's own tables (head dims, architectures) agree with the search space and the tuner.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>

#include "runtime/runtime_fixtures.h"
#include "sage/common/archs.h"
#include "sage/common/cuda_driver.h"
#include "sage/internal/launch.h"
#include "sage/internal/runtime.h"

namespace sage {
namespace {

using rt::BucketKey;
using rt::Buckets;
using rt::CacheKey;
using rt::CacheKeyHash;
using rt::Policy;

Buckets builtin_buckets() {
  const tuner::ProblemsConfig cfg = tuner::ProblemsConfig::builtin();
  return Buckets{cfg.seq_buckets, cfg.bh_buckets};
}

AttnProblem problem(int b, int hq, int hkv, int nq, int nkv, int d, bool causal = false, Layout l = Layout::HND,
                    DType t = DType::fp16) {
  AttnProblem p;
  p.batch = b;
  p.heads_q = hq;
  p.heads_kv = hkv;
  p.seq_q = nq;
  p.seq_kv = nkv;
  p.head_dim = d;
  p.causal = causal;
  p.layout = l;
  p.dtype = t;
  return p;
}

TEST(RuntimeKeys, BucketOfEveryProblemMatchesTheTunersKey) {
  const tuner::ProblemsConfig cfg = tuner::ProblemsConfig::builtin();
  const Buckets b = builtin_buckets();
  std::mt19937 rng(12345);
  std::uniform_int_distribution<int> seq(1, 70000), heads(1, 64), batch(1, 16);
  const char* policies[] = {"accurate", "balanced", "fast"};
  for (int i = 0; i < 2000; ++i) {
    AttnProblem p = problem(batch(rng), heads(rng), 1, seq(rng), seq(rng), i % 2 ? 64 : 128, i % 3 == 0,
                            i % 5 == 0 ? Layout::NHD : Layout::HND, i % 7 == 0 ? DType::bf16 : DType::fp16);
    const std::string pol = policies[i % 3];
    const tuner::ProblemKey want = cfg.key_of(p, pol);
    const BucketKey got = b.key_of(p, rt::parse_policy(pol));
    ASSERT_EQ(got.str(), want.str()) << p.str();
    ASSERT_EQ(BucketKey::parse(want.str()), got) << want.str();
    ASSERT_EQ(tuner::ProblemKey::parse(got.str()), want);
  }
}

// Variable-length batches and sliding windows (the calls as the API hands them over: a dense
// window's call trimmed, rt::trim_window): the tuner's key of each is the runtime's, so that a
// tuned varlen or window winner is found by the calls of its bucket.
TEST(RuntimeKeys, VarlenAndWindowBucketsMatchTheTunersKey) {
  const tuner::ProblemsConfig cfg = tuner::ProblemsConfig::builtin();
  const Buckets b = builtin_buckets();
  std::mt19937 rng(777);
  std::uniform_int_distribution<int> seq(2, 70000), win(1, 20000), heads(1, 64), batch(1, 16);
  int windows = 0, varlens = 0;
  for (int i = 0; i < 2000; ++i) {
    const bool varlen = i % 2 == 0;
    AttnProblem p = problem(batch(rng), heads(rng), 1, seq(rng), seq(rng), i % 3 ? 64 : 128, i % 4 != 1, Layout::NHD);
    if (p.causal && i % 3 != 2) p.window = win(rng);
    if (varlen) {
      p.varlen = true;
      p.total_q = p.seq_q * p.batch;
      p.total_kv = p.seq_kv * p.batch;
    } else {
      p.trim_window();
    }
    const tuner::ProblemKey want = cfg.key_of(p, "balanced");
    const BucketKey got = b.key_of(p, Policy::balanced);
    ASSERT_EQ(got.str(), want.str()) << p.str();
    ASSERT_EQ(tuner::ProblemKey::parse(got.str()), want);
    windows += want.window;
    varlens += want.varlen;
  }
  EXPECT_GT(windows, 200);
  EXPECT_GT(varlens, 500);
}

TEST(RuntimeKeys, BucketBoundariesRoundUpAndClampAtTheLargest) {
  const Buckets b{{1024, 4096}, {32, 128}};
  EXPECT_EQ(b.seq_bucket(1), 1024);
  EXPECT_EQ(b.seq_bucket(1024), 1024);
  EXPECT_EQ(b.seq_bucket(1025), 4096);
  EXPECT_EQ(b.seq_bucket(1 << 20), 4096);
  EXPECT_EQ(b.bh_bucket(33), 128);
  const Buckets none;  // a static build without kernels
  EXPECT_EQ(none.seq_bucket(777), 777);
}

TEST(RuntimeKeys, BucketKeyParseNamesTheBadField) {
  auto err = [](const std::string& s) {
    try {
      BucketKey::parse(s);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::invalid_argument);
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(err("d128_causal_fp16_HND_q4096_kv4096_bh128").find("8 '_'-separated fields"), std::string::npos);
  EXPECT_NE(err("d128_sometimes_fp16_HND_q4096_kv4096_bh128_balanced").find("field causal"), std::string::npos);
  EXPECT_NE(err("d128_causal_fp32_HND_q4096_kv4096_bh128_balanced").find("field dtype"), std::string::npos);
  EXPECT_NE(err("d128_causal_fp16_HDN_q4096_kv4096_bh128_balanced").find("field layout"), std::string::npos);
  EXPECT_NE(err("d128_causal_fp16_HND_qx_kv4096_bh128_balanced").find("seq_q_bucket"), std::string::npos);
  EXPECT_NE(err("d128_causal_fp16_HND_q4096_kv4096_bh128_greedy").find("field policy"), std::string::npos);
  EXPECT_NE(err("x128_causal_fp16_HND_q4096_kv4096_bh128_balanced").find("head_dim"), std::string::npos);
  EXPECT_NE(err("d128_causal_fp16_HND_q4096_kv4096_bh128_balanced_r32").find("optional ninth, r16"), std::string::npos);
}

// A call below the kernel's head dim whose rows are 16 but not 32 bytes long a multiple of
// (d % 16 == 8) has a bucket of its own, "_r16", which round-trips; aligned rows (d = 80, 96,
// the kernel's own 128) and calls at the kernel's head dim do not.
TEST(RuntimeKeys, RowsOffTheSectorsHaveABucketOfTheirOwn) {
  const Buckets b = builtin_buckets();
  const AttnProblem kp = problem(2, 16, 16, 2048, 2048, 128);  // the kernels' problem of a d < 128 call
  for (int d : {72, 88, 104, 120}) {
    const BucketKey k = b.key_of(kp, Policy::balanced, d);
    EXPECT_TRUE(k.rows16) << d;
    EXPECT_EQ(k.str().substr(k.str().size() - 4), "_r16") << k.str();
    EXPECT_EQ(BucketKey::parse(k.str()), k) << k.str();
  }
  for (int d : {0, 80, 96, 128}) EXPECT_FALSE(b.key_of(kp, Policy::balanced, d).rows16) << d;
  EXPECT_FALSE(b.key_of(problem(2, 16, 16, 2048, 2048, 64), Policy::balanced, 64).rows16);
  EXPECT_TRUE(b.key_of(problem(2, 16, 16, 2048, 2048, 64), Policy::balanced, 40).rows16);
  EXPECT_FALSE(BucketKey::parse("d128_noncausal_fp16_HND_q2048_kv2048_bh32_balanced").rows16);
}

TEST(RuntimeKeys, CacheKeyIsEqualWithinABucketAndDiffersAcrossEveryField) {
  const Buckets b = builtin_buckets();
  const std::uint64_t ctx = 1;  // a context ID (context_id)
  const AttnProblem base = problem(4, 32, 8, 3000, 3500, 128);
  // The runtime's key (dispatch.cpp): the bucket, the call's own batch x query heads, and the
  // SMs of its green context (0: none).
  const CacheKey k0{ctx, b.key_of(base, Policy::balanced), base.batch * base.heads_q};
  CacheKeyHash hash;

  // Same bucket and pairs: other sizes that round to the same boundaries, other kv heads,
  // scale, LSE.
  AttnProblem same = problem(2, 64, 64, 2049, 4096, 128);
  same.sm_scale = 0.5f;
  same.return_lse = true;
  const CacheKey k1{ctx, b.key_of(same, Policy::balanced), same.batch * same.heads_q};
  EXPECT_EQ(k0, k1);
  EXPECT_EQ(hash(k0), hash(k1));

  std::vector<CacheKey> different;
  different.push_back({2, k0.bucket, k0.pairs});  // another context, or the same one after a reset
  different.push_back({ctx, b.key_of(base, Policy::accurate)});
  different.push_back({ctx, b.key_of(base, Policy::fast)});
  different.push_back({ctx, b.key_of(problem(4, 32, 8, 3000, 3500, 64), Policy::balanced)});
  different.push_back({ctx, b.key_of(problem(4, 32, 8, 3000, 3500, 128, true), Policy::balanced)});
  different.push_back({ctx, b.key_of(problem(4, 32, 8, 3000, 3500, 128, false, Layout::NHD), Policy::balanced)});
  different.push_back({ctx, b.key_of(problem(4, 32, 8, 3000, 3500, 128, false, Layout::HND, DType::bf16), Policy::balanced)});
  different.push_back({ctx, b.key_of(problem(4, 32, 8, 5000, 3500, 128), Policy::balanced)});   // seq_q bucket
  different.push_back({ctx, b.key_of(problem(4, 32, 8, 3000, 9000, 128), Policy::balanced)});   // seq_kv bucket
  different.push_back({ctx, b.key_of(problem(16, 32, 8, 3000, 3500, 128), Policy::balanced)});  // bh bucket
  different.push_back({ctx, b.key_of(base, Policy::balanced, 72)});  // a d=72 call: rows16
  AttnProblem varlen = problem(4, 32, 8, 3000, 3500, 128, false, Layout::NHD);  // a variable-length batch
  varlen.varlen = true;
  varlen.total_q = varlen.total_kv = 9000;
  different.push_back({ctx, b.key_of(varlen, Policy::balanced)});  // (the dense NHD call is above)
  // The bucket's other batch x query heads (B=3 H=32: 96 pairs, bucket 128): configs/defaults.yaml's
  // max_bh matches the exact count, so such calls get their own selection.
  const AttnProblem fewer = problem(3, 32, 8, 3000, 3500, 128);
  ASSERT_EQ(b.key_of(fewer, Policy::balanced), k0.bucket);
  different.push_back({ctx, b.key_of(fewer, Policy::balanced), fewer.batch * fewer.heads_q});
  // The same call on a green context's 64 SMs: the defaults' wave edges scale with the SMs.
  different.push_back({ctx, k0.bucket, k0.pairs, 64});
  // Each differs from k0 in the one field named: the others keep k0's pairs.
  for (CacheKey& k : different)
    if (k.pairs == 0) k.pairs = k0.pairs;
  std::set<std::size_t> hashes{hash(k0)};
  for (const CacheKey& k : different) {
    EXPECT_FALSE(k == k0) << k.bucket.str();
    hashes.insert(hash(k));
  }
  // Not a requirement of a hash, but a hash that ignores a field would collide here.
  EXPECT_EQ(hashes.size(), different.size() + 1);
}

TEST(RuntimeKeys, SupportedHeadDimsAreTheSearchSpacesHeadDims) {
  std::set<int> space;
  for (const gen::Variant& v : gen::SearchSpace::builtin().enumerate().variants)
    if (v.pipeline != "reference") space.insert(int(v.get_int("head_dim")));
  const std::vector<int>& rt_dims = rt::supported_head_dims();
  EXPECT_EQ(std::set<int>(rt_dims.begin(), rt_dims.end()), space);
}

TEST(RuntimeKeys, HeadDimsBelowTheLargestAreServedByTheNextKernelHeadDim) {
  EXPECT_EQ(rt::kernel_head_dim(1), 64);
  EXPECT_EQ(rt::kernel_head_dim(40), 64);
  EXPECT_EQ(rt::kernel_head_dim(64), 64);
  EXPECT_EQ(rt::kernel_head_dim(65), 128);
  EXPECT_EQ(rt::kernel_head_dim(96), 128);
  EXPECT_EQ(rt::kernel_head_dim(128), 128);
  EXPECT_EQ(rt::kernel_head_dim(129), 256);
  EXPECT_EQ(rt::kernel_head_dim(192), 256);
  EXPECT_EQ(rt::kernel_head_dim(256), 256);
  EXPECT_EQ(rt::kernel_head_dim(257), 0);
  // The C API's validation keeps the call's own head dim (the padding happens at the call).
  rt::Policy policy;
  const rt::DescView d{1, 8, 2, 100, 200, 96, 0, 0, 0, 0.f, 0};
  const AttnProblem p = rt::problem_of(d, &policy);
  EXPECT_EQ(p.head_dim, 96);
  EXPECT_FLOAT_EQ(p.scale(), 1.0f / std::sqrt(96.0f));
}

TEST(RuntimeKeys, StaticArchitectureMapMatchesTheTuners) {
  for (int cc = 30; cc <= 130; ++cc) {
    std::string want;
    try {
      want = tuner::arch_for_cc(cc);
    } catch (const Error&) {
      want.clear();
    }
    EXPECT_EQ(rt::arch_for_cc(cc), want) << "cc " << cc;
  }
}

// Each compute capability runs the target of its own major architecture at a minor version no
// higher than its own (sm_90a: 9.0 only); Blackwell's 10.x and 12.x run sm_100 and sm_120, and
// where no target runs (below 8.0, Thor's 11.0) the tuner says which targets there are.
TEST(RuntimeKeys, ComputeCapabilitiesRunTheirMajorArchitecturesTarget) {
  const std::pair<int, const char*> cases[] = {
      {80, "sm_80"},   {86, "sm_86"},   {87, "sm_86"},   {89, "sm_89"},   {90, "sm_90a"}, {100, "sm_100"},
      {103, "sm_100"}, {120, "sm_120"}, {121, "sm_120"}, {75, ""},        {91, ""},       {110, ""}};
  for (const auto& [cc, arch] : cases) {
    EXPECT_EQ(target_arch_for_cc(cc), arch) << "cc " << cc;
    if (*arch) {
      EXPECT_EQ(tuner::arch_for_cc(cc), arch) << "cc " << cc;
      EXPECT_TRUE(is_target_arch(arch)) << arch;
    }
  }
  try {
    (void)tuner::arch_for_cc(110);
    ADD_FAILURE() << "compute capability 11.0 has no target";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::unsupported);
    EXPECT_NE(std::string(e.what()).find("11.0 is not a target of this build (" + target_archs_text() + ")"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(target_archs_text(), "sm_80, sm_86, sm_89, sm_90a, sm_100, sm_120");
}

TEST(RuntimeKeys, PolicyNamesRoundTrip) {
  for (Policy p : {Policy::accurate, Policy::balanced, Policy::fast}) EXPECT_EQ(rt::parse_policy(rt::to_string(p)), p);
  EXPECT_THROW(rt::parse_policy("greedy"), Error);
  // Every policy the runtime names is defined in configs/problems.yaml.
  const tuner::ProblemsConfig cfg = tuner::ProblemsConfig::builtin();
  for (Policy p : {Policy::accurate, Policy::balanced, Policy::fast}) EXPECT_NO_THROW(cfg.policy(rt::to_string(p)));
}

TEST(RuntimeKeys, ReproduceCommandNamesEveryShapeField) {
  AttnProblem p = problem(2, 16, 4, 1000, 4097, 64, true, Layout::NHD, DType::bf16);
  p.sm_scale = 0.25f;
  p.return_lse = true;
  const std::string cmd = rt::reproduce_command(p, Policy::fast, "attn_x");
  EXPECT_EQ(cmd,
            "sage-tune bench --variant attn_x -d 64 -n 1000 --seq-kv 4097 --batch 2 --heads 16 --heads-kv 4 --causal yes "
            "--layout NHD --dtype bf16   # policy fast, sm_scale 0.25, with LSE");
  const std::string plain = rt::reproduce_command(problem(4, 32, 32, 4096, 4096, 128), Policy::balanced, "v");
  EXPECT_EQ(plain, "sage-tune bench --variant v -d 128 -n 4096 --batch 4 --heads 32 --causal no   # policy balanced");
}

// The printed command must be one the CLI accepts: a bad option would be a usage error (2).
// Without a GPU the bench stops with "no device" (5); with one it runs (0).
TEST(RuntimeKeys, ReproduceCommandIsAcceptedBySageTune) {
  test::ScratchDir dir("repro");
  std::string name = "attn_any";  // without a GPU the bench stops before resolving the name
  std::string why;
  const bool gpu = cu::have_device(&why);
  if (gpu) {
    use_device(0);
    name = tuner::default_variant(tuner::arch_for_cc(tuner::fingerprint_device(0).cc), 64, "balanced");
  }
  const AttnProblem p = problem(1, 2, 1, 100, 300, 64, true, Layout::NHD, DType::bf16);
  const std::string printed = rt::reproduce_command(p, Policy::balanced, name);
  ASSERT_TRUE(starts_with(printed, "sage-tune "));
  const std::size_t comment = printed.find("   #");
  ASSERT_NE(comment, std::string::npos);
  // As a user would paste it (the comment included), with --samples kept small for the GPU run.
  const std::string cmd = cat("SAGE_CACHE_DIR=", test::quote(dir.file("cache")), " ", test::quote(SAGE_TUNE_EXE),
                              printed.substr(9, comment - 9), " --samples 2", printed.substr(comment));
  const auto r = test::run_command(cmd, dir.file("log"));
  if (gpu) EXPECT_EQ(r.rc, 0) << cmd << "\n" << r.output;
  else EXPECT_EQ(r.rc, 5) << cmd << "\n" << r.output;
}


namespace sage {
namespace {
// TMA coordinates are 32-bit: a TMA variant refuses problems whose tiled rows reach 2^31 (with a
// reason), while the same config without TMA, and smaller problems, are served.
// A variable-length batch has a bucket of its own (its kernels are the `varlen` defaults), whose
// key names it and parses back; the dense bucket of the same sizes stays apart.
TEST(RuntimeKeys, VariableLengthBatchesHaveABucketOfTheirOwn) {
  const Buckets b = builtin_buckets();
  AttnProblem p = problem(3, 16, 4, 2000, 2000, 128, false, Layout::NHD);
  const BucketKey dense = b.key_of(p, Policy::balanced);
  p.varlen = true;
  p.total_q = p.total_kv = 4500;
  const BucketKey k = b.key_of(p, Policy::balanced);
  EXPECT_TRUE(k.varlen);
  EXPECT_FALSE(dense.varlen);
  EXPECT_EQ(k.str(), dense.str() + "_varlen");
  EXPECT_EQ(BucketKey::parse(k.str()), k);
  const BucketKey r16 = b.key_of(p, Policy::balanced, 72);
  EXPECT_EQ(r16.str(), dense.str() + "_r16_varlen");
  EXPECT_EQ(BucketKey::parse(r16.str()), r16);
  EXPECT_THROW(BucketKey::parse(dense.str() + "_varlen_r16"), Error);
  EXPECT_THROW(BucketKey::parse(dense.str() + "_lenvar"), Error);
  EXPECT_EQ(p.str(), "B3 Hq16 Hkv4 Nq2000 Nkv2000 D128 NHD fp16 varlen Tq4500 Tkv4500");
}

// Only the native kernels of the plain schedule at head dims 64 and 128 (mma.sync, and wgmma
// with TMA) have the varlen entry; every other variant refuses a variable-length batch, saying
// which kernels do.
TEST(KernelConfigLimits, VariableLengthBatchesRunOnTheNativePlainAndTheQuantizedFuseQKernels) {
  const KernelConfig native = KernelConfig::parse(
      "pipeline=mma;name=t;head_dim=128;block_m=128;block_n=64;warps=8;stages=2;qk=native;pv=native;"
      "granularity=none;smooth_k=false;smooth_q=false;smooth_v=false;schedule=plain;min_ctas=1;threads=256;"
      "smem_bytes=65536");
  AttnProblem p = problem(3, 16, 4, 2000, 2000, 128, false, Layout::NHD);
  p.varlen = true;
  EXPECT_TRUE(has_varlen_entry(native));
  EXPECT_EQ(native.cannot_implement(p), "");
  KernelConfig quantized = native;
  quantized.qk = "int8";
  quantized.pv = "fp8";
  KernelConfig decode = native;
  decode.schedule = "decode";
  KernelConfig d256 = native;
  d256.head_dim = 256;
  KernelConfig wgmma = native;
  wgmma.pipeline = "wgmma";
  wgmma.tma = true;
  EXPECT_TRUE(has_varlen_entry(wgmma));
  EXPECT_EQ(wgmma.cannot_implement(p), "");
  KernelConfig wgmma256 = wgmma;  // the wgmma entry has head dim 256 too (the mma.sync one spilled)
  wgmma256.head_dim = 256;
  EXPECT_TRUE(has_varlen_entry(wgmma256));
  KernelConfig persistent = wgmma;
  persistent.schedule = "persistent_pingpong";
  KernelConfig pv8 = wgmma;
  pv8.pv = "fp8";
  // The quantized wgmma kernels of FP8 P.V, TMA and the plain or turns schedule that quantize
  // Q themselves have the entry (their preparation keeps no Q, so its per-sequence tiles need
  // only K and V); the others not.
  KernelConfig fuse_q = KernelConfig::parse(
      "pipeline=wgmma;name=q;head_dim=128;block_m=64;block_n=128;warps=4;stages=2;qk=int8;pv=fp8;"
      "granularity=per_thread;smooth_k=true;smooth_q=false;smooth_v=false;schedule=plain;min_ctas=3;tma=true;"
      "fuse_q=true;threads=128;smem_bytes=65536");
  EXPECT_TRUE(has_varlen_entry(fuse_q));
  EXPECT_EQ(fuse_q.cannot_implement(p), "");
  KernelConfig turns = fuse_q;
  turns.schedule = "turns";
  EXPECT_TRUE(has_varlen_entry(turns));
  KernelConfig q_in_prep = fuse_q;
  q_in_prep.fuse_q = false;
  KernelConfig pv_int8 = fuse_q;
  pv_int8.pv = "int8";
  KernelConfig no_tma = fuse_q;
  no_tma.tma = false;
  KernelConfig ws = fuse_q;
  ws.schedule = "ws_overlap";
  for (const KernelConfig& c : {quantized, decode, d256, persistent, pv8, q_in_prep, pv_int8, no_tma, ws}) {
    EXPECT_FALSE(has_varlen_entry(c)) << c.str();
    EXPECT_NE(c.cannot_implement(p).find("variable-length batches run on the native"), std::string::npos) << c.str();
    EXPECT_NE(c.cannot_implement(p).find("that quantize Q themselves (fuse_q)"), std::string::npos) << c.str();
    AttnProblem dense = p;
    dense.varlen = false;
    if (c.head_dim == 128) EXPECT_EQ(c.cannot_implement(dense), "") << c.str();
  }
}

TEST(KernelConfigLimits, TmaVariantsRefuseMoreRowsThanTheirCoordinatesAddress) {
  KernelConfig c = KernelConfig::parse(
      "pipeline=wgmma;name=t;head_dim=64;block_m=64;block_n=128;warps=4;stages=2;qk=int8;pv=fp8;"
      "granularity=per_thread;smooth_k=true;smooth_q=false;smooth_v=false;schedule=plain;min_ctas=3;tma=true;"
      "threads=128;smem_bytes=38912");
  ASSERT_TRUE(c.tma);
  AttnProblem big;
  big.batch = 1024;
  big.heads_q = big.heads_kv = 1024;
  big.seq_q = big.seq_kv = 4096;  // 2^32 rows
  big.head_dim = 64;
  const std::string why = c.cannot_implement(big);
  EXPECT_NE(why.find("2^31"), std::string::npos) << why;
  AttnProblem small = big;
  small.seq_q = small.seq_kv = 1024;  // 2^30 rows
  EXPECT_EQ(c.cannot_implement(small), "");
  // A variable-length batch on the kernels that quantize Q themselves: K's rows are each kv
  // head's row of total_kv / 128 + batch tiles (Q is the caller's, read in place).
  c.fuse_q = true;
  AttnProblem packed;
  packed.batch = 1000;
  packed.heads_q = packed.heads_kv = 4096;
  packed.seq_q = packed.seq_kv = 32768;
  packed.head_dim = 64;
  packed.layout = Layout::NHD;
  packed.varlen = true;
  packed.total_q = packed.total_kv = 1 << 20;  // 4096 x (8192 + 1000) x 128 rows > 2^31
  EXPECT_NE(c.cannot_implement(packed).find("2^31"), std::string::npos) << c.cannot_implement(packed);
  packed.total_q = packed.total_kv = 1 << 17;  // 4096 x (1024 + 1000) x 128 rows < 2^31
  EXPECT_EQ(c.cannot_implement(packed), "");
  c.tma = false;
  EXPECT_EQ(c.cannot_implement(big), "");
}

// Native Q.K^T with FP8 P.V converts V in the kernel, a job a (batch, kv head, key tile), whose
// tickets count in 24 bits: it refuses 2^22 jobs or more (with a reason) and serves fewer, and
// the limit is this variant's alone (the FP16 native kernel serves the same problem).
TEST(KernelConfigLimits, NativeFp8PVRefusesMoreVTilesThanItsTicketsCount) {
  KernelConfig c = KernelConfig::parse(
      "pipeline=wgmma;name=t;head_dim=128;block_m=128;block_n=128;warps=8;stages=2;qk=native;pv=fp8;"
      "granularity=none;smooth_k=false;smooth_q=false;smooth_v=false;schedule=persistent_pingpong;min_ctas=1;"
      "tma=true;threads=384;smem_bytes=214016");
  AttnProblem p;
  p.batch = 64;
  p.heads_q = p.heads_kv = 64;
  p.seq_q = 128;
  p.seq_kv = 1024 * 128;  // 64 x 64 x 1024 = 2^22 key tiles
  p.head_dim = 128;
  const std::string why = c.cannot_implement(p);
  EXPECT_NE(why.find("2^22 V tiles"), std::string::npos) << why;
  p.seq_kv -= 128 * 64;  // 64 key tiles fewer a (batch, head): below 2^22
  EXPECT_EQ(c.cannot_implement(p), "");
  p.seq_kv = 1024 * 128;
  c.pv = "native";
  EXPECT_EQ(c.cannot_implement(p), "");
}
}  // namespace
}  // namespace sage

// AttnProblem::sms (a green context's partition, set by the runtime from the call's stream):
// the call's text names it, and a negative count is refused.
TEST(RuntimeProblem, SmsOfAGreenContextShowInTheCallAndMustNotBeNegative) {
  AttnProblem p = problem(1, 8, 8, 4096, 4096, 128);
  EXPECT_EQ(p.str(), "B1 Hq8 Hkv8 Nq4096 Nkv4096 D128 HND fp16");
  p.sms = 64;
  EXPECT_NO_THROW(p.validate());
  EXPECT_EQ(p.str(), "B1 Hq8 Hkv8 Nq4096 Nkv4096 D128 HND fp16 on 64 SMs");
  p.sms = -1;
  try {
    p.validate();
    FAIL() << "sms -1 was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("sms must be >= 0"), std::string::npos) << e.what();
  }
}
}  // namespace
}  // namespace sage

namespace sage {
namespace {
// A sliding window's call has a bucket of its own (its kernels are the `varlen` defaults), by
// the keys a query sees (min(seq_kv, window)); its key names it and parses back, after varlen.
TEST(RuntimeKeys, SlidingWindowsHaveABucketOfTheKeysAQuerySees) {
  const Buckets b = builtin_buckets();
  AttnProblem p = problem(2, 32, 8, 32768, 32768, 128, true);
  const BucketKey dense = b.key_of(p, Policy::balanced);
  p.window = 1000;
  const BucketKey k = b.key_of(p, Policy::balanced);
  EXPECT_TRUE(k.window);
  EXPECT_FALSE(dense.window);
  EXPECT_EQ(k.seq_kv, b.seq_bucket(1000));
  EXPECT_EQ(k.seq_q, dense.seq_q);
  EXPECT_TRUE(starts_with(k.str(), "d128_causal_fp16_HND_q32768_kv1024_")) << k.str();
  EXPECT_TRUE(k.str().ends_with("_balanced_window")) << k.str();
  EXPECT_EQ(BucketKey::parse(k.str()), k);
  p.window = 100000;  // wider than the keys: the keys' bucket
  EXPECT_EQ(b.key_of(p, Policy::balanced).seq_kv, dense.seq_kv);
  p.window = 1000;
  p.layout = Layout::NHD;
  p.varlen = true;
  p.total_q = p.total_kv = 40000;
  const BucketKey kv = b.key_of(p, Policy::accurate);
  EXPECT_TRUE(kv.str().ends_with("_accurate_varlen_window")) << kv.str();
  EXPECT_EQ(BucketKey::parse(kv.str()), kv);
  EXPECT_THROW(BucketKey::parse(dense.str() + "_window_varlen"), Error);
  std::string noncausal = dense.str() + "_window";
  noncausal.replace(noncausal.find("_causal_"), 8, "_noncausal_");
  EXPECT_THROW(BucketKey::parse(noncausal), Error);
  // Every field of the cache key: a window call's differs from the plain causal call's.
  const CacheKeyHash hash;
  const CacheKey a{1, dense, 64, 132}, w{1, k, 64, 132};
  EXPECT_FALSE(a == w);
  EXPECT_NE(hash(a), hash(w));
}

// The problem's text and FLOPs: a window counts the pairs it shows, and it needs a causal mask.
TEST(RuntimeProblem, ASlidingWindowShowsInTheCallCountsItsPairsAndNeedsCausal) {
  AttnProblem p = problem(1, 2, 2, 10, 10, 64, true);
  p.window = 4;
  EXPECT_EQ(p.str(), "B1 Hq2 Hkv2 Nq10 Nkv10 D64 HND fp16 causal window 4");
  // rows 0..3 see 1..4 keys, rows 4..9 see 4: 10 + 24 = 34 pairs a head
  EXPECT_DOUBLE_EQ(p.flops(), 4.0 * 2 * 34 * 64);
  p.seq_kv = 14;  // bottom-right: every row sees 4
  EXPECT_DOUBLE_EQ(p.flops(), 4.0 * 2 * 40 * 64);
  p.window = 1000;  // wider than the keys: the causal count
  double pairs = 0;
  for (int i = 0; i < 10; ++i) pairs += i + 5;
  EXPECT_DOUBLE_EQ(p.flops(), 4.0 * 2 * pairs * 64);
  p.window = -1;
  EXPECT_THROW(p.validate(), Error);
  p.window = 5;
  p.causal = false;
  try {
    p.validate();
    FAIL() << "a window without a causal mask was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("needs a causal mask"), std::string::npos) << e.what();
  }
}

// The keys no query of a window call sees are left out before it runs (rt::trim_window): K and
// V start at the first query's first key (contiguous tensors become strided views of
// themselves), a decoding step loses its window, a window wider than the keys is none; a
// variable-length batch keeps its keys, and so do head dims that run on padded copies.
TEST(RuntimeKeys, TrimmingAWindowLeavesOutTheKeysNoQuerySees) {
  const char* const base = reinterpret_cast<const char*>(0x100000);
  AttnArgs a;
  a.q = a.k = a.v = base;
  a.o = const_cast<char*>(base);
  AttnProblem p = problem(2, 8, 2, 700, 9000, 128, true, Layout::NHD);
  p.window = 2048;
  AttnProblem sized = p;
  rt::trim_window(sized, nullptr);
  rt::trim_window(p, &a);
  const int skip = 9000 - 700 - 2048 + 1;
  EXPECT_EQ(p.seq_kv, 9000 - skip);
  EXPECT_EQ(sized.seq_kv, p.seq_kv) << "the workspace query sees the same call";
  EXPECT_EQ(p.window, 2048) << "rows past the first still lose keys to the window";
  ASSERT_TRUE(a.strided);
  // NHD: rows Hkv x D apart; the strides are the untrimmed tensors'
  EXPECT_EQ(a.sk.n, 2 * 128);
  EXPECT_EQ(a.sk.b, std::int64_t(9000) * 2 * 128);
  EXPECT_EQ(a.sq.b, std::int64_t(700) * 8 * 128);
  EXPECT_EQ(static_cast<const char*>(a.k) - base, std::int64_t(skip) * 2 * 128 * 2);
  EXPECT_EQ(static_cast<const char*>(a.v) - base, std::int64_t(skip) * 2 * 128 * 2);
  EXPECT_EQ(a.q, base);

  // Decoding: one query sees its last `window` keys, which is a plain causal call over them.
  AttnArgs d;
  d.q = d.k = d.v = base;
  AttnProblem one = problem(4, 32, 8, 1, 20000, 128, true);  // HND: rows D apart within a head
  one.window = 4096;
  rt::trim_window(one, &d);
  EXPECT_EQ(one.seq_kv, 4096);
  EXPECT_EQ(one.window, 0);
  EXPECT_EQ(d.sk.h, std::int64_t(20000) * 128) << "the head stride stays the untrimmed tensor's";
  EXPECT_EQ(static_cast<const char*>(d.k) - base, std::int64_t(20000 - 4096) * 128 * 2);

  // A strided call keeps its own strides.
  AttnArgs s;
  s.q = s.k = s.v = base;
  s.strided = true;
  s.sk = s.sv = TensorStrides{1 << 20, 512, 4096};
  AttnProblem st = problem(1, 8, 8, 10, 1000, 128, true);
  st.window = 100;
  rt::trim_window(st, &s);
  EXPECT_EQ(st.seq_kv, 109);
  EXPECT_EQ(s.sk.n, 4096);
  EXPECT_EQ(static_cast<const char*>(s.k) - base, std::int64_t(891) * 4096 * 2);

  AttnProblem wide = problem(1, 8, 8, 1000, 1000, 128, true);
  wide.window = 1000;
  rt::trim_window(wide, nullptr);
  EXPECT_EQ(wide.window, 0) << "a window of every key";
  AttnProblem prefill = problem(1, 8, 8, 1000, 1000, 128, true);
  prefill.window = 999;
  rt::trim_window(prefill, nullptr);
  EXPECT_EQ(prefill.window, 999);
  EXPECT_EQ(prefill.seq_kv, 1000);

  AttnProblem padded = problem(1, 8, 8, 10, 1000, 100, true);  // no multiple of 8: padded copies
  padded.window = 50;
  AttnArgs pa;
  pa.k = base;
  rt::trim_window(padded, &pa);
  EXPECT_EQ(padded.seq_kv, 1000);
  EXPECT_FALSE(pa.strided);
  EXPECT_EQ(pa.k, base);
  AttnProblem packed = problem(3, 8, 8, 10, 1000, 128, true, Layout::NHD);
  packed.varlen = true;
  packed.total_q = 30;
  packed.total_kv = 3000;
  packed.window = 50;
  rt::trim_window(packed, nullptr);
  EXPECT_EQ(packed.seq_kv, 1000);
  EXPECT_EQ(packed.window, 50);
}

// Which kernels take a window (launch.cpp: has_window_entry, the modules with sage_attn_window:
// those with sage_attn_varlen), and the reason the others give.
// A paged KV cache's calls have a bucket of their own ("_paged"), by their queries and the keys'
// upper bound, which never takes a tuned winner of a dense bucket.
TEST(RuntimeKeys, PagedCachesHaveABucketOfTheirOwn) {
  const Buckets b = builtin_buckets();
  AttnProblem p = problem(16, 32, 8, 1, 8192, 128, false);
  const BucketKey dense = b.key_of(p, Policy::balanced);
  p.paged = true;
  p.page_size = 16;
  EXPECT_NO_THROW(p.validate());
  const BucketKey k = b.key_of(p, Policy::balanced);
  EXPECT_TRUE(k.paged);
  EXPECT_FALSE(dense.paged);
  EXPECT_NE(k, dense);
  EXPECT_EQ(k.seq_kv, dense.seq_kv);
  EXPECT_TRUE(k.str().ends_with("_balanced_paged")) << k.str();
  EXPECT_EQ(BucketKey::parse(k.str()), k);
  // A sliding window over a paged cache: a bucket of its own (its keys those a query sees).
  AttnProblem w = p;
  w.causal = true;
  w.window = 300;
  const BucketKey kw = b.key_of(w, Policy::balanced);
  EXPECT_TRUE(kw.paged && kw.window) << kw.str();
  EXPECT_TRUE(kw.str().ends_with("_window_paged")) << kw.str();
  EXPECT_EQ(BucketKey::parse(kw.str()), kw);
  EXPECT_EQ(kw.seq_kv, b.seq_bucket(300));
  // FP8 pages: a bucket of their own too ("_kv8" before "_paged"), with or without a window; kv8
  // belongs to paged keys only.
  AttnProblem f = p;
  f.kv_fp8 = true;
  const BucketKey kf = b.key_of(f, Policy::balanced);
  EXPECT_TRUE(kf.paged && kf.kv8 && !kf.window) << kf.str();
  EXPECT_TRUE(kf.str().ends_with("_balanced_kv8_paged")) << kf.str();
  EXPECT_EQ(BucketKey::parse(kf.str()), kf);
  EXPECT_NE(CacheKeyHash()(CacheKey{1, kf, 0, 0}), CacheKeyHash()(CacheKey{1, k, 0, 0}));
  f.causal = true;
  f.window = 300;
  const BucketKey kfw = b.key_of(f, Policy::balanced);
  EXPECT_TRUE(kfw.str().ends_with("_window_kv8_paged")) << kfw.str();
  EXPECT_EQ(BucketKey::parse(kfw.str()), kfw);
  EXPECT_THROW(BucketKey::parse(dense.str() + "_kv8"), Error);
  EXPECT_NE(f.str().find(" paged 16 fp8"), std::string::npos) << f.str();
  EXPECT_NE(CacheKeyHash()(CacheKey{1, k, 0, 0}), CacheKeyHash()(CacheKey{1, dense, 0, 0}));
  EXPECT_NE(p.str().find(" paged 16"), std::string::npos) << p.str();
  // Its queries' bucket is the next power of two up to 128 (the dense one's 1, 4, 8, 16, 128),
  // where the paged defaults' edges lie; past 128 the dense buckets.
  for (const auto& [q, want] : {std::pair{1, 1}, {2, 2}, {3, 4}, {5, 8}, {17, 32}, {24, 32}, {33, 64}, {64, 64},
                                {65, 128}, {128, 128}, {129, 256}, {1000, 1024}}) {
    p.seq_q = q;
    AttnProblem d = p;
    d.paged = false;
    EXPECT_EQ(b.key_of(p, Policy::balanced).seq_q, want) << q;
    if (q > 128) {
      EXPECT_EQ(b.key_of(d, Policy::balanced).seq_q, want) << q;
    }
  }
  p.seq_q = 1;
  p.page_size = 24;
  EXPECT_THROW(p.validate(), Error);
  p.page_size = 16;
  p.causal = true;
  p.window = 64;
  EXPECT_NO_THROW(p.validate());  // a sliding window over the cache
}

// Variable-length queries over a paged cache (sage_attention_varlen_paged) have a bucket apart from
// the dense-query paged calls' ("_varlen_paged"), by the longest sequence's queries on the paged
// buckets, and every kernel with the paged entry takes them (its sage_attn_varlen_paged), the
// decode schedule's too, which has no entry for variable-length batches of their own keys.
TEST(RuntimeKeys, VariableLengthQueriesOverAPagedCacheHaveABucketOfTheirOwn) {
  const Buckets b = builtin_buckets();
  AttnProblem p = problem(9, 32, 8, 37, 8192, 128, true);
  p.layout = Layout::NHD;
  p.paged = true;
  p.page_size = 16;
  const BucketKey paged = b.key_of(p, Policy::balanced);
  p.varlen = true;
  p.total_q = 45;
  EXPECT_NO_THROW(p.validate());
  const BucketKey k = b.key_of(p, Policy::balanced);
  EXPECT_TRUE(k.varlen && k.paged);
  EXPECT_NE(k, paged);
  EXPECT_EQ(k.seq_q, 64);  // the paged buckets: the next power of two up to 128
  EXPECT_TRUE(k.str().ends_with("_balanced_varlen_paged")) << k.str();
  EXPECT_EQ(BucketKey::parse(k.str()), k);
  EXPECT_NE(CacheKeyHash()(CacheKey{1, k, 0, 0}), CacheKeyHash()(CacheKey{1, paged, 0, 0}));
  EXPECT_NE(p.str().find(" varlen Tq45"), std::string::npos) << p.str();
  EXPECT_NE(p.str().find(" paged 16"), std::string::npos) << p.str();
  KernelConfig c;
  c.head_dim = 128;
  c.block_m = 16;
  c.block_n = 128;
  c.pipeline = "mma";
  c.qk = c.pv = "native";
  c.schedule = "decode";
  EXPECT_FALSE(has_varlen_entry(c));
  EXPECT_EQ(c.cannot_implement(p), "");
  c.schedule = "plain";
  c.block_m = 64;
  c.block_n = 64;
  EXPECT_EQ(c.cannot_implement(p), "");
  c.pipeline = "wgmma";
  c.tma = true;
  EXPECT_EQ(c.cannot_implement(p), "");
  c.schedule = "persistent";
  EXPECT_NE(c.cannot_implement(p).find("paged KV caches (with dense or variable-length queries) run on"),
            std::string::npos)
      << c.cannot_implement(p);
}

// The kernels that read a paged cache: the native mma.sync kernels of the decode schedule (every
// head dim) and of the plain one at head dims 64 and 128, the native wgmma kernels of the plain
// schedule (every head dim); no persistent or quantized kernel.
TEST(RuntimeKeys, PagedCachesRunOnTheNativeKernels) {
  AttnProblem p = problem(4, 8, 2, 1, 4096, 128, false);
  p.paged = true;
  p.page_size = 64;
  KernelConfig c;
  c.head_dim = 128;
  c.block_m = 16;
  c.block_n = 128;
  c.pipeline = "mma";
  c.qk = "native";
  c.pv = "native";
  c.schedule = "decode";
  EXPECT_TRUE(has_paged_entry(c));
  EXPECT_EQ(c.cannot_implement(p), "");
  // A sliding window over the cache: the mma.sync kernels' window entries.
  AttnProblem w = p;
  w.causal = true;
  w.window = 512;
  EXPECT_TRUE(has_paged_window_entry(c));
  EXPECT_EQ(c.cannot_implement(w), "");
  // FP8 pages: the same kernels' FP8 entries, where they have two stages or more (a ring of FP8
  // stages where the FP16 stages 1.. were).
  c.stages = 3;
  AttnProblem f8 = p;
  f8.kv_fp8 = true;
  EXPECT_TRUE(has_paged_fp8_entry(c)) << c.stages;
  EXPECT_EQ(c.cannot_implement(f8), "");
  {
    KernelConfig one = c;
    one.stages = 1;
    EXPECT_FALSE(has_paged_fp8_entry(one));
    EXPECT_NE(one.cannot_implement(f8).find("FP8 pages run on the native (unquantized) mma.sync kernels of two stages"),
              std::string::npos)
        << one.cannot_implement(f8);
  }
  c.head_dim = 256;
  EXPECT_TRUE(has_paged_entry(c));
  c.schedule = "plain";
  EXPECT_FALSE(has_paged_entry(c)) << "the plain head-dim-256 kernel";
  c.head_dim = 64;
  EXPECT_TRUE(has_paged_entry(c));
  c.qk = "int8";
  c.pv = "fp8";
  EXPECT_FALSE(has_paged_entry(c)) << "the quantized mma.sync kernels";
  c.qk = c.pv = "native";
  c.pipeline = "wgmma";
  c.tma = true;
  c.block_m = 128;
  EXPECT_TRUE(has_paged_entry(c)) << "the plain wgmma kernels";
  p.head_dim = 64;
  EXPECT_EQ(c.cannot_implement(p), "");
  // ... but not with a window: their TMA boxes of pages start at the sequence's first key.
  w.head_dim = 64;
  EXPECT_FALSE(has_paged_window_entry(c));
  EXPECT_NE(c.cannot_implement(w).find("sliding windows over a paged KV cache run on the native (unquantized) mma.sync"),
            std::string::npos)
      << c.cannot_implement(w);
  // FP8 pages: their FP8 entries (each tile converted into the FP16 tile wgmma reads), where two
  // FP16 slots of K and V, Q and the FP8 slots fit 227 KiB (two FP8 slots, else one) ...
  f8.head_dim = 64;
  EXPECT_TRUE(has_paged_fp8_entry(c));
  EXPECT_EQ(c.cannot_implement(f8), "");
  c.block_n = 64;
  EXPECT_EQ(paged_fp8_smem_bytes(c), 128 * 64 * 2 + 4 * 64 * 64 * 2 + 4 * 64 * 64 + 1024);
  c.head_dim = 256;
  EXPECT_EQ(paged_fp8_smem_bytes(c), 128 * 256 * 2 + 4 * 64 * 256 * 2 + 2 * 64 * 256 + 1024) << "one FP8 slot";
  EXPECT_TRUE(has_paged_fp8_entry(c));
  c.block_n = 128;
  EXPECT_FALSE(has_paged_fp8_entry(c)) << "128x128 tiles at head dim 256 do not fit";
  EXPECT_NE(c.cannot_implement(f8).find("FP8 pages run on"), std::string::npos) << c.cannot_implement(f8);
  c.head_dim = 64;
  // ... but no window.
  AttnProblem f8w = w;
  f8w.kv_fp8 = true;
  EXPECT_NE(c.cannot_implement(f8w).find("FP8 pages with a sliding window run on the native mma.sync"),
            std::string::npos)
      << c.cannot_implement(f8w);
  c.head_dim = 256;
  EXPECT_TRUE(has_paged_entry(c)) << "the plain wgmma kernel of head dim 256";
  c.head_dim = 64;
  c.schedule = "persistent_split";
  EXPECT_FALSE(has_paged_entry(c)) << "the persistent wgmma kernels";
  EXPECT_NE(c.cannot_implement(p).find("paged KV caches (with dense or variable-length queries) run on"),
            std::string::npos)
      << c.cannot_implement(p);
  c.schedule = "plain";
  c.pv = "fp8";
  EXPECT_FALSE(has_paged_entry(c)) << "the wgmma kernels of FP8 P.V";
  c.qk = "int8";
  EXPECT_FALSE(has_paged_entry(c)) << "the quantized wgmma kernels";
}

TEST(RuntimeKeys, WindowsRunOnTheKernelsThatTakeVariableLengthBatches) {
  AttnProblem p = problem(1, 8, 8, 4096, 4096, 128, true);
  p.window = 512;
  KernelConfig c;
  c.head_dim = 128;
  c.block_m = 128;
  c.block_n = 64;
  c.pipeline = "mma";
  c.qk = "native";
  c.pv = "native";
  c.schedule = "plain";
  EXPECT_TRUE(has_window_entry(c));
  EXPECT_EQ(c.cannot_implement(p), "");
  c.head_dim = 256;  // the mma.sync varlen entry spilled there: no window entry either
  EXPECT_FALSE(has_window_entry(c));
  c.head_dim = 128;
  c.schedule = "decode";  // dense calls' draft tokens over a window; no packed batch
  EXPECT_TRUE(has_window_entry(c));
  EXPECT_FALSE(has_varlen_entry(c));
  EXPECT_EQ(c.cannot_implement(p), "");
  c.schedule = "persistent_split";
  EXPECT_FALSE(has_window_entry(c));
  EXPECT_NE(c.cannot_implement(p).find("sliding windows run on"), std::string::npos) << c.cannot_implement(p);
  // The quantized mma.sync kernels: INT8 Q.K^T at per-thread granularity, FP16 or FP8 P.V, the
  // plain schedule, every head dim; dense calls only (a packed batch needs sage_attn_varlen).
  c.qk = "int8";
  c.schedule = "plain";
  for (const char* pv : {"fp8", "fp16", "fp16acc"}) {
    c.pv = pv;
    for (int d : {64, 128, 256}) {
      c.head_dim = d;
      EXPECT_TRUE(has_window_entry(c)) << "quantized mma.sync, " << pv << " P.V, head dim " << d;
      EXPECT_FALSE(has_varlen_entry(c));
    }
  }
  c.head_dim = 128;
  EXPECT_EQ(c.cannot_implement(p), "");
  AttnProblem packed = p;
  packed.varlen = true;
  packed.total_q = packed.total_kv = 4096;
  EXPECT_NE(c.cannot_implement(packed).find("variable-length batches run on"), std::string::npos)
      << "a packed window needs sage_attn_varlen: " << c.cannot_implement(packed);
  c.pv = "int8";
  EXPECT_FALSE(has_window_entry(c)) << "INT8 P.V (its LSE takes an entry of its own)";
  EXPECT_NE(c.cannot_implement(p).find("for dense calls, on the quantized mma.sync kernels"), std::string::npos)
      << c.cannot_implement(p);
  c.pv = "fp8";
  c.schedule = "overlap";
  EXPECT_FALSE(has_window_entry(c)) << "the overlap schedule";
  c.schedule = "plain";
  for (const char* g : {"per_warp", "per_block"}) {
    c.granularity = g;
    EXPECT_FALSE(has_window_entry(c)) << g;
  }
  c.granularity = "per_thread";
  c.qk = "int4";
  EXPECT_FALSE(has_window_entry(c)) << "INT4 Q.K^T";
  c.qk = "int8";
  c.pipeline = "wgmma";
  c.tma = true;
  c.fuse_q = true;
  EXPECT_TRUE(has_window_entry(c));
  c.schedule = "turns";
  EXPECT_TRUE(has_window_entry(c));
  c.fuse_q = false;
  EXPECT_FALSE(has_window_entry(c)) << "Q quantized by the preparation";
  c.fuse_q = true;
  for (const char* s : {"pingpong", "pingpong_overlap", "ws", "ws_overlap"}) {
    c.schedule = s;
    EXPECT_FALSE(has_window_entry(c)) << s;
  }
  c.qk = "native";
  c.pv = "native";
  c.schedule = "plain";
  c.head_dim = 256;
  EXPECT_TRUE(has_window_entry(c));
  for (const char* s : {"persistent", "persistent_overlap", "persistent_pingpong", "persistent_split"}) {
    c.schedule = s;
    EXPECT_FALSE(has_window_entry(c)) << s;
  }
  p.window = 0;
  p.head_dim = 256;
  EXPECT_EQ(c.cannot_implement(p), "") << "no window: every schedule";
}
}  // namespace
}  // namespace sage
