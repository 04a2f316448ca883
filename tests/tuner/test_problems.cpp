// configs/problems.yaml: problem entries with a query-bucket list (decoding), the one-query
// bucket of the built-in boundaries, paged KV caches' buckets (paged, kv8, the paged section),
// variable-length batches' and sliding windows' (varlen, window, the varlen section).
#include <gtest/gtest.h>

#include <string>

#include "sage/common/error.h"
#include "sage/tuner/problems.h"

namespace sage::tuner {
namespace {

const char* kHead = R"(version: 1
buckets:
  seq: [1, 128, 1024, 4096, 32768]
  bh: [32, 128]
policies:
  balanced:
    pv: [native, fp8]
    gaussian: {cos_min: 0.999, rel_l1_max: 0.04}
    outliers: {cos_min: 0.9999, rel_l1_max: 0.01}
)";

ProblemsConfig parse(const std::string& problems) {
  return ProblemsConfig::from_string(std::string(kHead) + problems, "test.yaml");
}

std::string error_of(const std::string& problems) {
  try {
    parse(problems);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::parse_error) << e.what();  // naming file:line and the key
    return e.what();
  }
  ADD_FAILURE() << "expected an error";
  return "";
}

TEST(ProblemsConfig, SeqQListMakesDecodingProblemsOverEverySeq) {
  const ProblemsConfig cfg = parse(R"(problems:
  - head_dim: [128]
    causal: [false]
    dtype: [fp16]
    layout: [HND]
    seq: [4096, 32768]
    seq_q: [1]
    bh: [32]
)");
  ASSERT_EQ(cfg.problems.size(), 2u);
  EXPECT_EQ(cfg.problems[0].str(), "d128_noncausal_fp16_HND_q1_kv4096_bh32_balanced");
  EXPECT_EQ(cfg.problems[1].str(), "d128_noncausal_fp16_HND_q1_kv32768_bh32_balanced");
  const AttnProblem p = cfg.representative(cfg.problems[1]);
  EXPECT_EQ(p.seq_q, 1);
  EXPECT_EQ(p.seq_kv, 32768);
  // A one-query call of any key count keys into the one-query bucket.
  AttnProblem call = p;
  call.seq_kv = 20000;
  EXPECT_EQ(cfg.key_of(call, "balanced"), cfg.problems[1]);
}

TEST(ProblemsConfig, WithoutSeqQTheQueriesAreTheKeys) {
  const ProblemsConfig cfg = parse(R"(problems:
  - head_dim: [64]
    causal: [true]
    dtype: [bf16]
    layout: [NHD]
    seq: [1024]
    bh: [128]
)");
  ASSERT_EQ(cfg.problems.size(), 1u);
  EXPECT_EQ(cfg.problems[0].seq_q_bucket, 1024);
  EXPECT_EQ(cfg.problems[0].seq_kv_bucket, 1024);
}

TEST(ProblemsConfig, SeqQMustBeABucketBoundaryAndCausalAtMostTheKeys) {
  const std::string entry = R"(problems:
  - head_dim: [128]
    causal: [CAUSAL]
    dtype: [fp16]
    layout: [HND]
    seq: [1024]
    seq_q: [SEQQ]
    bh: [32]
)";
  auto with = [&](const char* causal, const char* seq_q) {
    std::string s = entry;
    s.replace(s.find("CAUSAL"), 6, causal);
    s.replace(s.find("SEQQ"), 4, seq_q);
    return s;
  };
  const std::string bad = error_of(with("false", "3"));
  EXPECT_NE(bad.find("problems[0].seq_q[0]"), std::string::npos) << bad;
  EXPECT_NE(bad.find("not a bucket boundary"), std::string::npos) << bad;
  const std::string causal = error_of(with("true", "4096"));
  EXPECT_NE(causal.find("seq_q <= seq"), std::string::npos) << causal;
  EXPECT_EQ(parse(with("true", "128")).problems[0].str(), "d128_causal_fp16_HND_q128_kv1024_bh32_balanced");
}

TEST(ProblemsConfig, BuiltinBucketsGiveOneQueryAndDraftTokensBucketsOfTheirOwn) {
  const ProblemsConfig cfg = ProblemsConfig::builtin();
  // {value, bucket}: one query; draft tokens (2-4, 5-8, 9-16); keys past 32K a bucket of
  // their own up to 64K, and the largest boundary past it.
  const int seq[][2] = {{1, 1},   {2, 4},    {4, 4},   {5, 8},          {8, 8},
                        {9, 16},  {16, 16},  {17, 128}, {32769, 65536}, {1 << 20, 65536}};
  for (const auto& v : seq) EXPECT_EQ(cfg.seq_bucket(v[0]), v[1]) << v[0];
  // Few (sequence, query head) pairs: the draft-token defaults tell 8 and 16 from 32. None
  // between 32 and 128: the default tuning set's winners (bh 128) serve 33-128.
  const int bh[][2] = {{1, 8}, {8, 8}, {9, 16}, {16, 16}, {17, 32}, {33, 128}};
  for (const auto& v : bh) EXPECT_EQ(cfg.bh_bucket(v[0]), v[1]) << v[0];
  AttnProblem p;
  p.batch = 1;
  p.heads_q = 32;
  p.heads_kv = 8;
  p.seq_q = 1;
  p.seq_kv = 8000;
  p.head_dim = 128;
  EXPECT_EQ(cfg.key_of(p, "balanced").str(), "d128_noncausal_fp16_HND_q1_kv8192_bh32_balanced");
  // Llama 3.1 405B on one GPU of 8: 16 query heads over one kv head, 8 draft tokens over 20K keys.
  p.heads_q = 16;
  p.heads_kv = 1;
  p.seq_q = 8;
  p.seq_kv = 20000;
  EXPECT_EQ(cfg.key_of(p, "balanced").str(), "d128_noncausal_fp16_HND_q8_kv32768_bh16_balanced");
}

// Paged entries: buckets of paged KV caches (kv8: over FP8 pages), their query buckets powers of
// two up to 128, and the call keyed into them as the runtime keys it (paged_seq_q_bucket).
TEST(ProblemsConfig, PagedEntriesMakePagedBucketsOfEachPageType) {
  const ProblemsConfig cfg = parse(R"(paged:
  page_size: 32
  heads_kv: 4
problems:
  - head_dim: [128]
    causal: [true]
    dtype: [fp16]
    layout: [NHD]
    seq: [4096]
    seq_q: [2, 1024]
    bh: [128]
    paged: true
    kv8: [false, true]
)");
  ASSERT_EQ(cfg.problems.size(), 4u);
  EXPECT_EQ(cfg.problems[0].str(), "d128_causal_fp16_NHD_q2_kv4096_bh128_balanced_paged");
  EXPECT_EQ(cfg.problems[1].str(), "d128_causal_fp16_NHD_q2_kv4096_bh128_balanced_kv8_paged");
  EXPECT_EQ(cfg.problems[3].str(), "d128_causal_fp16_NHD_q1024_kv4096_bh128_balanced_kv8_paged");
  // The timed problem: pages of the section's size, its kv heads of 32 query heads, FP8 for kv8.
  const AttnProblem p = cfg.representative(cfg.problems[1]);
  EXPECT_TRUE(p.paged);
  EXPECT_TRUE(p.kv_fp8);
  EXPECT_EQ(p.page_size, 32);
  EXPECT_EQ(p.batch, 4);
  EXPECT_EQ(p.heads_q, 32);
  EXPECT_EQ(p.heads_kv, 4);
  EXPECT_EQ(p.seq_q, 2);
  EXPECT_EQ(p.seq_kv, 4096);
  EXPECT_FALSE(cfg.representative(cfg.problems[0]).kv_fp8);
  // A call of 2 queries over 3000 keys of FP8 pages keys into the kv8 bucket; 3 queries into
  // the next power of two, which this set does not tune.
  AttnProblem call = p;
  call.seq_kv = 3000;
  call.page_size = 16;
  EXPECT_EQ(cfg.key_of(call, "balanced"), cfg.problems[1]);
  call.seq_q = 3;
  EXPECT_EQ(cfg.key_of(call, "balanced").str(), "d128_causal_fp16_NHD_q4_kv4096_bh128_balanced_kv8_paged");
  // With a sliding window or variable-length queries a paged call has no paged bucket (the
  // defaults serve it): the dense key.
  call.window = 512;
  EXPECT_EQ(cfg.key_of(call, "balanced").str(), "d128_causal_fp16_NHD_q128_kv4096_bh128_balanced");
  call.window = 0;
  call.varlen = true;
  EXPECT_FALSE(cfg.key_of(call, "balanced").paged);
}

TEST(ProblemsConfig, PagedEntriesAreChecked) {
  const std::string entry = R"(problems:
  - head_dim: [128]
    causal: [true]
    dtype: [fp16]
    layout: [NHD]
    seq: [4096]
    seq_q: [SEQQ]
    bh: [128]
EXTRA)";
  auto with = [&](const char* seq_q, const std::string& extra) {
    std::string s = entry;
    s.replace(s.find("SEQQ"), 4, seq_q);
    s.replace(s.find("EXTRA"), 5, extra);
    return s;
  };
  // 8 queries: a paged bucket (a power of two up to 128), no dense one (no boundary).
  EXPECT_EQ(parse(with("8", "    paged: true\n")).problems[0].seq_q_bucket, 8);
  EXPECT_NE(error_of(with("8", "")).find("not a bucket boundary"), std::string::npos);
  const std::string three = error_of(with("3", "    paged: true\n"));
  EXPECT_NE(three.find("problems[0].seq_q[0]"), std::string::npos) << three;
  EXPECT_NE(three.find("no paged query bucket"), std::string::npos) << three;
  const std::string kv8 = error_of(with("8", "    kv8: [true]\n"));
  EXPECT_NE(kv8.find("problems[0].kv8"), std::string::npos) << kv8;
  EXPECT_NE(kv8.find("needs paged: true"), std::string::npos) << kv8;
  const std::string page = error_of("paged: {page_size: 24}\n" + with("8", "    paged: true\n"));
  EXPECT_NE(page.find("paged.page_size"), std::string::npos) << page;
  EXPECT_NE(page.find("power of two"), std::string::npos) << page;
  const std::string heads = error_of("paged: {heads_kv: 5}\n" + with("8", "    paged: true\n"));
  EXPECT_NE(heads.find("must divide the 32 query heads"), std::string::npos) << heads;
}

// The built-in set tunes paged buckets: decoding to prefill chunks over FP16 and FP8 pages.
TEST(ProblemsConfig, BuiltinSetHasPagedBucketsOfBothPageTypes) {
  const ProblemsConfig cfg = ProblemsConfig::builtin();
  EXPECT_EQ(cfg.paged.page_size, 16);
  int paged = 0, kv8 = 0;
  for (const ProblemKey& k : cfg.problems) {
    paged += k.paged;
    kv8 += k.kv8;
    if (k.paged) EXPECT_EQ(ProblemKey::parse(k.str()), k);
  }
  EXPECT_GT(paged, 0);
  EXPECT_GT(kv8, 0);
  EXPECT_LT(kv8, paged);
}

// Variable-length entries: buckets of packed batches (NHD), timed on sequences of the varlen
// section's fractions of the bucket's longest, over its kv heads; the call keyed as the runtime.
TEST(ProblemsConfig, VarlenEntriesMakeVarlenBucketsOfTheSectionsSequences) {
  const ProblemsConfig cfg = parse(R"(varlen:
  lengths: [1.0, 0.5]
  heads_kv: 4
problems:
  - head_dim: [64]
    causal: [true]
    dtype: [fp16]
    layout: [NHD]
    seq: [4096]
    bh: [128]
    varlen: true
)");
  ASSERT_EQ(cfg.problems.size(), 1u);
  const ProblemKey& k = cfg.problems[0];
  EXPECT_EQ(k.str(), "d64_causal_fp16_NHD_q4096_kv4096_bh128_balanced_varlen");
  const SeqLens s = cfg.sequences(k);
  EXPECT_EQ(s.q, (std::vector<int>{4096, 2048, 4096, 2048}));  // 128 / 32 sequences, the fractions in turn
  EXPECT_EQ(s.kv, s.q);
  const AttnProblem p = cfg.representative(k);
  EXPECT_TRUE(p.varlen);
  EXPECT_EQ(p.layout, Layout::NHD);
  EXPECT_EQ(p.batch, 4);
  EXPECT_EQ(p.heads_q, 32);
  EXPECT_EQ(p.heads_kv, 4);
  EXPECT_EQ(p.seq_q, 4096);
  EXPECT_EQ(p.seq_kv, 4096);
  EXPECT_EQ(p.total_q, 12288);
  EXPECT_EQ(p.total_kv, 12288);
  EXPECT_EQ(p.window, 0);
  // The call keys into it: a batch whose longest sequence has 3000 tokens.
  AttnProblem call = p;
  call.seq_q = call.seq_kv = 3000;
  EXPECT_EQ(cfg.key_of(call, "balanced"), k);
  EXPECT_TRUE(cfg.sequences(cfg.problems[0]).kv.size() == 4u);
  // A dense bucket has no sequences.
  ProblemKey dense = k;
  dense.varlen = false;
  EXPECT_TRUE(cfg.sequences(dense).empty());
}

// Window entries: seq the windows, seq_q the queries; every query of the timed call sees the
// whole window; a dense call is keyed as trimmed (one whose window holds every key is dense).
TEST(ProblemsConfig, WindowEntriesMakeWindowBucketsOfTheirWindows) {
  const ProblemsConfig cfg = parse(R"(problems:
  - head_dim: [128]
    causal: [true]
    dtype: [fp16]
    layout: [NHD]
    seq: [1024]
    seq_q: [32768]
    bh: [128]
    window: true
  - head_dim: [128]
    causal: [true]
    dtype: [fp16]
    layout: [NHD]
    seq: [1024]
    seq_q: [4096]
    bh: [128]
    window: true
    varlen: true
)");
  ASSERT_EQ(cfg.problems.size(), 2u);
  const ProblemKey& w = cfg.problems[0];
  EXPECT_EQ(w.str(), "d128_causal_fp16_NHD_q32768_kv1024_bh128_balanced_window");
  AttnProblem p = cfg.representative(w);
  EXPECT_FALSE(p.varlen);
  EXPECT_EQ(p.window, 1024);
  EXPECT_EQ(p.seq_q, 32768);
  EXPECT_EQ(p.seq_kv, 32768 + 1023);
  EXPECT_EQ(p.window_skip(), 0);                    // every key is seen by some query
  EXPECT_EQ(p.flops(), 4.0 * 4 * 32 * 32768.0 * 1024 * 128);  // each query sees the whole window
  EXPECT_EQ(cfg.key_of(p, "balanced"), w);
  // A prompt of 20000 tokens under a window of 700 keys; one of 500 under a window of 700 holds
  // every key in the window: a plain causal call.
  AttnProblem call = p;
  call.seq_q = call.seq_kv = 20000;
  call.window = 700;
  EXPECT_EQ(cfg.key_of(call, "balanced"), w);
  call.seq_q = call.seq_kv = 500;
  EXPECT_EQ(cfg.key_of(call, "balanced").str(), "d128_causal_fp16_NHD_q1024_kv1024_bh128_balanced");
  // Variable-length with a window: each sequence's keys its queries + window - 1.
  const ProblemKey& vw = cfg.problems[1];
  EXPECT_EQ(vw.str(), "d128_causal_fp16_NHD_q4096_kv1024_bh128_balanced_varlen_window");
  const SeqLens s = cfg.sequences(vw);
  ASSERT_EQ(s.q.size(), 4u);
  EXPECT_EQ(s.q[1], 3072);
  EXPECT_EQ(s.kv[1], 3072 + 1023);
  p = cfg.representative(vw);
  EXPECT_TRUE(p.varlen);
  EXPECT_EQ(p.window, 1024);
  EXPECT_EQ(p.seq_q, 4096);
  EXPECT_EQ(p.seq_kv, 4096 + 1023);
  EXPECT_EQ(cfg.key_of(p, "balanced"), vw);
}

TEST(ProblemsConfig, VarlenAndWindowEntriesAreChecked) {
  const std::string entry = R"(problems:
  - head_dim: [128]
    causal: [CAUSAL]
    dtype: [fp16]
    layout: [LAYOUT]
    seq: [1024]
    seq_q: [SEQQ]
    bh: [128]
EXTRA)";
  auto with = [&](const char* causal, const char* layout, const char* seq_q, const std::string& extra) {
    std::string s = entry;
    s.replace(s.find("CAUSAL"), 6, causal);
    s.replace(s.find("LAYOUT"), 6, layout);
    s.replace(s.find("SEQQ"), 4, seq_q);
    s.replace(s.find("EXTRA"), 5, extra);
    return s;
  };
  const std::string hnd = error_of(with("true", "HND", "1024", "    varlen: true\n"));
  EXPECT_NE(hnd.find("problems[0].layout[0]"), std::string::npos) << hnd;
  EXPECT_NE(hnd.find("layout NHD"), std::string::npos) << hnd;
  const std::string noncausal = error_of(with("false", "NHD", "4096", "    window: true\n"));
  EXPECT_NE(noncausal.find("problems[0].causal[0]"), std::string::npos) << noncausal;
  EXPECT_NE(noncausal.find("a sliding window is causal"), std::string::npos) << noncausal;
  const std::string one = error_of(with("true", "NHD", "1", "    window: true\n"));
  EXPECT_NE(one.find("problems[0].seq_q[0]"), std::string::npos) << one;
  EXPECT_NE(one.find("dense call of the window's keys"), std::string::npos) << one;
  const std::string paged = error_of(with("true", "NHD", "128", "    window: true\n    paged: true\n"));
  EXPECT_NE(paged.find("not tuned"), std::string::npos) << paged;
  // A window's queries may pass its keys (the bucket's seq is the window).
  EXPECT_EQ(parse(with("true", "NHD", "4096", "    window: true\n")).problems[0].seq_q_bucket, 4096);
  const std::string fr = error_of("varlen: {lengths: [0.5, 0.25]}\n" + with("true", "NHD", "1024", "    varlen: true\n"));
  EXPECT_NE(fr.find("varlen.lengths"), std::string::npos) << fr;
  EXPECT_NE(fr.find("the bucket's longest"), std::string::npos) << fr;
  const std::string zero = error_of("varlen: {lengths: [1.0, 0]}\n" + with("true", "NHD", "1024", "    varlen: true\n"));
  EXPECT_NE(zero.find("varlen.lengths[1]"), std::string::npos) << zero;
  const std::string heads = error_of("varlen: {heads_kv: 3}\n" + with("true", "NHD", "1024", "    varlen: true\n"));
  EXPECT_NE(heads.find("must divide the 32 query heads"), std::string::npos) << heads;
}

// The built-in set tunes variable-length batches and sliding windows too.
TEST(ProblemsConfig, BuiltinSetHasVarlenAndWindowBuckets) {
  const ProblemsConfig cfg = ProblemsConfig::builtin();
  EXPECT_EQ(cfg.varlen.lengths, (std::vector<double>{1.0, 0.75, 0.5, 0.25}));
  int varlen = 0, window = 0;
  for (const ProblemKey& k : cfg.problems) {
    varlen += k.varlen;
    window += k.window;
    if (k.varlen || k.window) {
      EXPECT_EQ(ProblemKey::parse(k.str()), k);
      EXPECT_EQ(k.layout, "NHD");
      EXPECT_EQ(cfg.key_of(cfg.representative(k), k.policy), k) << k.str();
    }
  }
  EXPECT_GT(varlen, 0);
  EXPECT_GT(window, 0);
}

}  // namespace
}  // namespace sage::tuner
