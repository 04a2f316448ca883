// sage-tune tune --dry-run: what a tune would measure, without a GPU (--arch), a compile or a
// database: each problem of this shard with its candidates (a paged bucket's: the variants whose
// kernels read its pages) and its default, first among them.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "sage/gen/search_space.h"
#include "sage/internal/launch.h"
#include "sage/tuner/problems.h"
#include "sage/tuner/tune.h"
#include "sage/tuner/variants.h"
#include "support/cli.h"

namespace sage {
namespace {
using test::CliRun;
using test::CliSandbox;

const char* kProblems =
    "version: 1\n"
    "buckets: {seq: [1024, 2048, 8192], bh: [32, 128]}\n"
    "policies:\n"
    "  balanced: {pv: [native, fp16, fp16acc, fp8], gaussian: {cos_min: 0.999, rel_l1_max: 0.04}, outliers: "
    "{cos_min: 0.9999, rel_l1_max: 0.01}}\n"
    "problems:\n"
    "  - {head_dim: [128], causal: [true], dtype: [fp16], layout: [HND], seq: [2048], bh: [128]}\n"
    "  - {head_dim: [128], causal: [true], dtype: [fp16], layout: [NHD], seq: [8192], seq_q: [1, 2048], bh: [128],\n"
    "     paged: true, kv8: [false, true]}\n";

// The variants of sm_90a at head dim 128 that serve `k`.
std::size_t serving(const tuner::ProblemKey& k) {
  gen::EnumerateOptions eo;
  eo.archs = {"sm_90a"};
  eo.pipelines = {"mma", "wgmma"};
  std::size_t n = 0;
  for (const auto& v : gen::SearchSpace::builtin().enumerate(eo).variants)
    if (v.get_int("head_dim") == 128 && tuner::serves(tuner::kernel_config(v), k)) ++n;
  return n;
}

TEST(CliTunePlan, ListsEachProblemsCandidatesAndDefaultWithoutAGpu) {
  CliSandbox s;
  s.write("p.yaml", kProblems);
  CliRun r = s.run("tune --dry-run --arch sm_90a --problems p.yaml --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["arch"], "sm_90a");
  ASSERT_EQ(j["problems"].size(), 5u) << r.out;  // a dense bucket, 2 query buckets x 2 page types
  const tuner::ProblemsConfig cfg = tuner::ProblemsConfig::from_file(s.path("p.yaml"));
  std::size_t total = 0;
  for (std::size_t i = 0; i < cfg.problems.size(); ++i) {
    const auto& e = j["problems"][i];
    const tuner::ProblemKey& k = cfg.problems[i];
    EXPECT_EQ(e["problem"], k.str());
    EXPECT_EQ(e["candidates"].size(), serving(k)) << k.str();
    EXPECT_EQ(e["default"], tuner::key_default("sm_90a", k)) << k.str();
    ASSERT_FALSE(e["candidates"].empty());
    EXPECT_EQ(e["candidates"][0], e["default"]) << k.str();  // measured first: the baseline
    for (const auto& c : e["candidates"])
      EXPECT_TRUE(tuner::serves(*tuner::variant_config("sm_90a", c.get<std::string>()), k)) << c;
    total += e["candidates"].size();
  }
  EXPECT_EQ(j["measurements"], total);
  // Paged buckets have far fewer candidates (the readers of pages) than the dense one.
  EXPECT_LT(j["problems"][1]["candidates"].size(), j["problems"][0]["candidates"].size());
  EXPECT_TRUE(j["problems"][2]["kv8"].get<bool>());
  // Nothing was written: no database.
  EXPECT_FALSE(std::filesystem::exists(s.path("tune.db")));
}

TEST(CliTunePlan, FilterAndShardNarrowThePlanAndTheTextSaysWhatItIs) {
  CliSandbox s;
  s.write("p.yaml", kProblems);
  CliRun r = s.run("tune --dry-run --arch sm_90a --problems p.yaml --shard 1/2 --filter 'qk-native_pv-native'");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("plan for sm_90a, policies balanced: nothing is compiled, measured or stored"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("d128_causal_fp16_NHD_q1_kv8192_bh128_balanced_paged"), std::string::npos) << r.out;  // problem 1
  EXPECT_NE(r.out.find("d128_causal_fp16_NHD_q2048_kv8192_bh128_balanced_paged"), std::string::npos) << r.out;  // 3
  EXPECT_EQ(r.out.find("_kv8_paged"), std::string::npos) << r.out;  // problems 2 and 4: the other shard
  EXPECT_NE(r.out.find("2 problems, "), std::string::npos) << r.out;
  // A filter that leaves the dense bucket's default out (2048 queries: not the decode schedule's):
  // the plan says so.
  CliRun d = s.run("tune --dry-run --arch sm_90a --problems p.yaml --shard 0/2 --filter 'sch-decode' --json");
  ASSERT_EQ(d.rc, 0) << d.err;
  const auto j = nlohmann::json::parse(d.out);
  const auto& dense = j["problems"][0];
  ASSERT_FALSE(dense["candidates"].empty()) << dense.dump();
  for (const auto& c : dense["candidates"]) EXPECT_NE(c.get<std::string>().find("sch-decode"), std::string::npos) << c;
  EXPECT_EQ(dense["default"].get<std::string>().find("sch-decode"), std::string::npos) << dense.dump();
  EXPECT_NE(dense["note"].get<std::string>().find("the default is not among the candidates"), std::string::npos)
      << dense.dump();
}

// The built-in set's variable-length and window buckets: their candidates are the variants that
// take such calls (every bucket of the set has some on sm_90a, sm_80 and sm_100: head dim 256's
// windows off sm_90a on the quantized mma.sync kernels). On an architecture where none does (a
// variable-length batch at head dim 256 off sm_90a), the plan says tune skips the bucket (tune:
// ProblemResult::skipped, no failure of the run).
TEST(CliTunePlan, VarlenAndWindowBucketsTakeTheirKernelsAndUnservableOnesAreSkipped) {
  CliSandbox s;
  for (const char* arch : {"sm_90a", "sm_80", "sm_100"}) {
    CliRun r = s.run(std::string("tune --dry-run --json --arch ") + arch);
    ASSERT_EQ(r.rc, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    int varlen = 0, window = 0, skipped = 0;
    for (const auto& e : j["problems"]) {
      const tuner::ProblemKey k = tuner::ProblemKey::parse(e["problem"].get<std::string>());
      EXPECT_EQ(e["varlen"].get<bool>(), k.varlen);
      EXPECT_EQ(e["window"].get<bool>(), k.window);
      varlen += k.varlen;
      window += k.window;
      const std::string why = tuner::unservable_why(arch, k);
      if (!why.empty()) {
        ++skipped;
        EXPECT_TRUE(e["candidates"].empty()) << e.dump();
        EXPECT_NE(e["note"].get<std::string>().find(why + ": tune skips it"), std::string::npos) << e.dump();
        continue;
      }
      ASSERT_FALSE(e["candidates"].empty()) << e.dump();
      EXPECT_EQ(e["candidates"][0], e["default"]) << e.dump();
      for (const auto& c : e["candidates"]) {
        const KernelConfig cfg = *tuner::variant_config(arch, c.get<std::string>());
        if (k.varlen) EXPECT_TRUE(has_varlen_entry(cfg)) << c;
        if (k.window) EXPECT_TRUE(has_window_entry(cfg)) << c;
      }
    }
    EXPECT_EQ(varlen, 2) << arch;
    EXPECT_EQ(window, 4) << arch;
    EXPECT_EQ(skipped, 0) << arch;
  }
  const auto w256 = tuner::ProblemKey::parse("d256_causal_fp16_NHD_q16384_kv1024_bh128_balanced_window");
  EXPECT_EQ(tuner::unservable_why("sm_80", w256), "");
  const auto v256 = tuner::ProblemKey::parse("d256_causal_fp16_NHD_q4096_kv4096_bh128_balanced_varlen");
  EXPECT_EQ(tuner::unservable_why("sm_80", v256), "no sm_80 variant takes variable-length batches at head dim 256");
  EXPECT_EQ(tuner::unservable_why("sm_90a", v256), "");
  std::string file = kProblems;
  file = file.substr(0, file.find("problems:\n")) +
         "problems:\n  - {head_dim: [256], causal: [true], dtype: [fp16], layout: [NHD], seq: [2048], bh: [128], "
         "varlen: true}\n";
  s.write("v256.yaml", file);
  CliRun r = s.run("tune --dry-run --json --arch sm_80 --problems v256.yaml");
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["problems"].size(), 1u) << r.out;
  EXPECT_TRUE(j["problems"][0]["candidates"].empty()) << r.out;
  EXPECT_NE(j["problems"][0]["note"].get<std::string>().find(
                "no sm_80 variant takes variable-length batches at head dim 256: tune skips it"),
            std::string::npos)
      << r.out;
}

TEST(CliTunePlan, BadArchOrArchWithoutDryRunIsAClearError) {
  CliSandbox s;
  CliRun bad = s.run("tune --dry-run --arch sm_75");
  EXPECT_NE(bad.rc, 0);
  EXPECT_NE(bad.err.find("unknown --arch 'sm_75'"), std::string::npos) << bad.err;
  CliRun lone = s.run("tune --arch sm_90a");
  EXPECT_NE(lone.rc, 0);
  EXPECT_NE(lone.err.find("--arch goes with --dry-run"), std::string::npos) << lone.err;
}

}  // namespace
}  // namespace sage
