// configs/problems.yaml: problem entries with a query-bucket list (decoding), the one-query
// bucket of the built-in boundaries, and paged KV caches' buckets (paged, kv8, the paged section).
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

}  // namespace
}  // namespace sage::tuner
