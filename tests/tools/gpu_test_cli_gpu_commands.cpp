// The GPU commands' happy paths on a small problem set: tune stores winners that list shows,
// verify re-checks them, tune --resume skips what is stored, bench and devices report.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "sage/common/cuda_driver.h"
#include "sage/common/strings.h"
#include "sage/tuner/problems.h"
#include "sage/tuner/tune.h"
#include "support/cli.h"
#include "support/gpu.h"

namespace sage {
namespace {
using test::CliRun;
using test::CliSandbox;

const char* kProblems =
    "version: 1\n"
    "buckets: {seq: [1024, 2048], bh: [32]}\n"
    "policies:\n"
    "  balanced: {pv: [fp16, fp16acc, fp8], gaussian: {cos_min: 0.999, rel_l1_max: 0.04}, outliers: {cos_min: 0.9999, rel_l1_max: 0.01}}\n"
    "  accurate: {pv: [fp16, fp16acc], gaussian: {cos_min: 0.9999, rel_l1_max: 0.02}, outliers: {cos_min: 0.99999, rel_l1_max: 0.005}}\n"
    "timing: {min_samples: 4, max_samples: 6, max_seconds: 0.2}\n"
    "problems: [{head_dim: [128], causal: [false, true], dtype: [fp16], layout: [HND], seq: [1024], bh: [32]}]\n";
// Three variants, the sm_90a/sm_80 defaults for d128 among them on their architectures.
const char* kFilter = "'d128_m(128_n128_w8_s2|128_n64_w8_s2|64_n64_w4_s2)_qk-int8-thread_pv-fp16acc_smk_sch-plain_occ1$'";

TEST(CliGpu, TuneListVerifyResume) {
  SAGE_REQUIRE_GPU();
  CliSandbox s;
  s.write("p.yaml", kProblems);
  CliRun t = s.run(std::string("tune -q --problems p.yaml --policy balanced,accurate --filter ") + kFilter + " --json");
  ASSERT_EQ(t.rc, 0) << t.out << t.err;
  auto doc = nlohmann::json::parse(t.out);
  ASSERT_EQ(doc["results"].size(), 4u) << t.out;  // 2 problems x 2 policies
  for (const auto& r : doc["results"]) {
    EXPECT_FALSE(r["winner"].get<std::string>().empty()) << r.dump();
    EXPECT_GT(r["tops"].get<double>(), 0) << r.dump();
    EXPECT_EQ(r["candidates"].get<int>(), 3) << r.dump();
  }
  CliRun l = s.run("list --json");
  ASSERT_EQ(l.rc, 0) << l.err;
  EXPECT_EQ(nlohmann::json::parse(l.out)["winners"].size(), 4u) << l.out;  // 2 problems x 2 policies
  CliRun v = s.run("verify");
  EXPECT_EQ(v.rc, 0) << v.out << v.err;
  EXPECT_NE(v.out.find("4 winners checked"), std::string::npos) << v.out;
  EXPECT_NE(v.out.find(", 0 bad"), std::string::npos) << v.out;
  CliRun again = s.run(std::string("tune -q --problems p.yaml --policy balanced,accurate --resume --filter ") + kFilter + " --json");
  ASSERT_EQ(again.rc, 0) << again.err;
  for (const auto& r : nlohmann::json::parse(again.out)["results"]) EXPECT_EQ(r["resumed"].get<int>(), 3) << r.dump();
}

// Paged problems: tune measures the variants whose kernels read pages (of each page type),
// gates them over shuffled pages against the reference, stores each bucket's winner under its
// paged key; list shows them, verify re-checks them over pages, select serves them.
TEST(CliGpu, TunePagedBucketsOverBothPageTypes) {
  SAGE_REQUIRE_CC(80);
  CliSandbox s;
  s.write("p.yaml",
          "version: 1\n"
          "buckets: {seq: [1024, 2048], bh: [32]}\n"
          "policies:\n"
          "  balanced: {pv: [native, fp16, fp16acc, fp8], gaussian: {cos_min: 0.999, rel_l1_max: 0.04}, outliers: "
          "{cos_min: 0.9999, rel_l1_max: 0.01}}\n"
          "timing: {min_samples: 4, max_samples: 6, max_seconds: 0.2}\n"
          "paged: {page_size: 16, heads_kv: 8}\n"
          "problems: [{head_dim: [128], causal: [true], dtype: [fp16], layout: [NHD], seq: [2048], seq_q: [1, 128], "
          "bh: [32], paged: true, kv8: [false, true]}]\n");
  // Two readers of pages (both with FP8 entries) and a quantized kernel that reads none.
  const std::string filter =
      "'d128_m(16_n64_w4_s2_qk-native_pv-native_sch-decode|64_n64_w4_s2_qk-native_pv-native_sch-plain|"
      "128_n128_w8_s2_qk-int8-thread_pv-fp16acc_smk_sch-plain)_occ1$'";
  CliRun t = s.run("tune -q --problems p.yaml --filter " + filter + " --json");
  ASSERT_EQ(t.rc, 0) << t.out << t.err;
  const auto doc = nlohmann::json::parse(t.out);
  ASSERT_EQ(doc["results"].size(), 4u) << t.out;  // 2 query buckets x 2 page types
  std::set<std::string> keys;
  for (const auto& r : doc["results"]) {
    EXPECT_EQ(r["candidates"].get<int>(), 2) << r.dump();
    EXPECT_EQ(r["passed"].get<int>(), 2) << r.dump();
    const std::string w = r["winner"].get<std::string>();
    EXPECT_NE(w.find("qk-native_pv-native"), std::string::npos) << r.dump();
    EXPECT_GT(r["tops"].get<double>(), 0) << r.dump();
    keys.insert(r["problem"].get<std::string>());
  }
  for (const char* k : {"d128_causal_fp16_NHD_q1_kv2048_bh32_balanced_paged",
                        "d128_causal_fp16_NHD_q128_kv2048_bh32_balanced_kv8_paged"})
    EXPECT_TRUE(keys.count(k)) << k << " in " << t.out;
  CliRun l = s.run("list --problem _kv8_paged --json");
  ASSERT_EQ(l.rc, 0) << l.err;
  EXPECT_EQ(nlohmann::json::parse(l.out)["winners"].size(), 2u) << l.out;
  CliRun v = s.run("verify");
  EXPECT_EQ(v.rc, 0) << v.out << v.err;
  EXPECT_NE(v.out.find("4 winners checked"), std::string::npos) << v.out;
  EXPECT_NE(v.out.find(", 0 bad"), std::string::npos) << v.out;
  // select: this GPU's winner for a decoding call over FP8 pages of that bucket.
  CliRun sel = s.run("select -d 128 -n 1 --seq-kv 2000 --batch 1 --heads 32 --heads-kv 8 --causal yes --layout NHD "
                     "--paged 16 --kv-fp8 --json");
  ASSERT_EQ(sel.rc, 0) << sel.err;
  const auto j = nlohmann::json::parse(sel.out);
  EXPECT_EQ(j["source"], "user DB") << sel.out;
  EXPECT_EQ(j["bucket"], "d128_causal_fp16_NHD_q1_kv2048_bh32_balanced_kv8_paged") << sel.out;
  std::string want;
  for (const auto& r : doc["results"])
    if (r["problem"] == j["bucket"]) want = r["winner"];
  EXPECT_EQ(j["variant"], want) << sel.out;
}

// Variable-length and sliding-window problems: tune measures the variants whose kernels take
// such calls (and no other), gates a batch's sequences each against its own reference and a
// window's queries against the windowed reference, stores each bucket's winner under its own
// key; list shows them, verify re-checks them, select and bench --tuned serve them.
TEST(CliGpu, TuneVarlenAndWindowBuckets) {
  SAGE_REQUIRE_CC(80);
  CliSandbox s;
  s.write("p.yaml",
          "version: 1\n"
          "buckets: {seq: [128, 1024, 2048], bh: [32, 128]}\n"
          "policies:\n"
          "  balanced: {pv: [native, fp16, fp16acc, fp8], gaussian: {cos_min: 0.999, rel_l1_max: 0.04}, outliers: "
          "{cos_min: 0.9999, rel_l1_max: 0.01}}\n"
          "timing: {min_samples: 4, max_samples: 6, max_seconds: 0.2}\n"
          "varlen: {lengths: [1.0, 0.75, 0.5, 0.25], heads_kv: 8}\n"
          "problems:\n"
          "  - {head_dim: [128], causal: [true], dtype: [fp16], layout: [NHD], seq: [2048], bh: [128], varlen: true}\n"
          "  - {head_dim: [128], causal: [true], dtype: [fp16], layout: [NHD], seq: [128], seq_q: [2048], bh: [32], "
          "window: true}\n");
  // Two native plain mma.sync kernels (varlen and window entries everywhere), sm_90a's quantized
  // varlen kernel, a quantized mma.sync kernel that takes dense windows only (per-thread INT8 Q.K^T)
  // and one that takes neither (per-warp).
  const std::string filter =
      "'d128_m(64_n64_w4_s2_qk-native_pv-native_sch-plain_occ1|128_n128_w8_s2_qk-native_pv-native_sch-plain_occ1|"
      "128_n128_w8_s2_qk-int8-thread_pv-fp16acc_smk_sch-plain_occ1|128_n64_w8_s2_qk-int8-warp_pv-fp16_smk_sch-plain_"
      "occ1|64_n128_wg1_s2_qk-int8-thread_pv-fp8_smk_rsum_fq_tma_sch-plain_occ3)$'";
  const std::string arch = tuner::arch_for_cc(tuner::fingerprint_device(0).cc);
  CliRun t = s.run("tune -q --problems p.yaml --filter " + filter + " --json");
  ASSERT_EQ(t.rc, 0) << t.out << t.err;
  const auto doc = nlohmann::json::parse(t.out);
  ASSERT_EQ(doc["results"].size(), 2u) << t.out;
  std::map<std::string, std::string> won;
  for (const auto& r : doc["results"]) {
    const bool window = r["problem"].get<std::string>().find("_window") != std::string::npos;
    EXPECT_EQ(r["candidates"].get<int>(), (arch == "sm_90a" ? 3 : 2) + (window ? 1 : 0)) << r.dump();
    EXPECT_GE(r["passed"].get<int>(), 2) << r.dump();
    const std::string w = r["winner"].get<std::string>();
    EXPECT_EQ(w.find("qk-int8-warp"), std::string::npos) << r.dump();
    if (!window) {
      EXPECT_EQ(w.find("pv-fp16acc"), std::string::npos) << r.dump();
    }
    EXPECT_GT(r["tops"].get<double>(), 0) << r.dump();
    won[r["problem"].get<std::string>()] = w;
  }
  const std::string vkey = "d128_causal_fp16_NHD_q2048_kv2048_bh128_balanced_varlen";
  const std::string wkey = "d128_causal_fp16_NHD_q2048_kv128_bh32_balanced_window";
  ASSERT_TRUE(won.count(vkey)) << t.out;
  ASSERT_TRUE(won.count(wkey)) << t.out;
  CliRun l = s.run("list --problem _varlen --json");
  ASSERT_EQ(l.rc, 0) << l.err;
  EXPECT_EQ(nlohmann::json::parse(l.out)["winners"].size(), 1u) << l.out;
  CliRun v = s.run("verify");
  EXPECT_EQ(v.rc, 0) << v.out << v.err;
  EXPECT_NE(v.out.find("2 winners checked"), std::string::npos) << v.out;
  EXPECT_NE(v.out.find(", 0 bad"), std::string::npos) << v.out;
  // select: this GPU's winners for a packed batch of 4 x 32 heads whose longest sequence has
  // 1500 tokens, and for a window of 100 keys over 2000 tokens.
  CliRun sv = s.run("select -d 128 -n 1500 --batch 4 --heads 32 --heads-kv 8 --causal yes --varlen --json");
  ASSERT_EQ(sv.rc, 0) << sv.err;
  auto j = nlohmann::json::parse(sv.out);
  EXPECT_EQ(j["source"], "user DB") << sv.out;
  EXPECT_EQ(j["bucket"], vkey) << sv.out;
  EXPECT_EQ(j["variant"], won[vkey]) << sv.out;
  CliRun sw = s.run("select -d 128 -n 2000 --batch 1 --heads 32 --causal yes --layout NHD --window 100 --json");
  ASSERT_EQ(sw.rc, 0) << sw.err;
  j = nlohmann::json::parse(sw.out);
  EXPECT_EQ(j["source"], "user DB") << sw.out;
  EXPECT_EQ(j["bucket"], wkey) << sw.out;
  EXPECT_EQ(j["variant"], won[wkey]) << sw.out;
  // bench --tuned times the varlen winner.
  CliRun b = s.run("bench --tuned --varlen 2000,1500,1000,500 -d 128 --causal yes --heads 32 --heads-kv 8 --samples 2 "
                   "--cooldown 0 --json");
  ASSERT_EQ(b.rc, 0) << b.out << b.err;
  const auto bdoc = nlohmann::json::parse(b.out);
  ASSERT_EQ(bdoc["results"].size(), 1u) << b.out;
  EXPECT_EQ(bdoc["results"][0]["variant"], won[vkey]) << b.out;
}

// tune --devices 0,1: a worker per GPU, the problems dealt out between them, each measured on
// its own device and stored for it; verify re-checks every winner.
TEST(CliGpu, TuneDealsTheProblemsOutToEveryDeviceAsked) {
  SAGE_REQUIRE_GPU();
  int n = 0;
  SAGE_CU(cuDeviceGetCount(&n));
  CliSandbox s;
  s.write("p.yaml", kProblems);
  // A device that is not there is refused before anything is compiled or measured.
  CliRun bad = s.run(cat("tune -q --problems p.yaml --devices 0,", n));
  EXPECT_EQ(bad.rc, 2) << bad.err;
  EXPECT_NE(bad.err.find(cat("device ", n, " does not exist (", n, " visible)")), std::string::npos) << bad.err;
  if (n < 2) GTEST_SKIP() << "needs two GPUs; " << n << " visible";
  CliRun t = s.run(std::string("tune -q --problems p.yaml --policy balanced --devices 0,1 --filter ") + kFilter +
                   " --json");
  ASSERT_EQ(t.rc, 0) << t.out << t.err;
  auto doc = nlohmann::json::parse(t.out);
  ASSERT_EQ(doc["devices"].size(), 2u) << t.out;
  ASSERT_EQ(doc["results"].size(), 2u) << t.out;  // 2 problems x 1 policy
  std::set<int> measured_on;
  for (const auto& r : doc["results"]) {
    EXPECT_FALSE(r["winner"].get<std::string>().empty()) << r.dump();
    EXPECT_GT(r["tops"].get<double>(), 0) << r.dump();
    EXPECT_EQ(r["passed"].get<int>(), 3) << r.dump();
    measured_on.insert(r["device"].get<int>());
  }
  EXPECT_EQ(measured_on, (std::set<int>{0, 1})) << t.out;
  CliRun v = s.run("verify");
  EXPECT_EQ(v.rc, 0) << v.out << v.err;
  EXPECT_NE(v.out.find("2 winners checked"), std::string::npos) << v.out;
  EXPECT_NE(v.out.find(", 0 bad"), std::string::npos) << v.out;
}

TEST(CliGpu, BenchPrintsTopsAndPrepBandwidth) {
  SAGE_REQUIRE_GPU();
  CliSandbox s;
  // 8K keys: a quantized default everywhere; 1K: on Hopper the native (unquantized) family,
  // which has no preparation to time. Measured short first, reported in the order given.
  CliRun b = s.run("bench -d 64 -n 8192,1024 --causal no --batch 1 --heads 8 --samples 3 --cooldown 0.1 --json");
  ASSERT_EQ(b.rc, 0) << b.out << b.err;
  auto doc = nlohmann::json::parse(b.out);
  ASSERT_EQ(doc["results"].size(), 2u);
  EXPECT_EQ(doc["results"][0]["seq"].get<int>(), 8192);
  EXPECT_EQ(doc["results"][1]["seq"].get<int>(), 1024);
  int quantized = 0;
  for (const auto& r : doc["results"]) {
    EXPECT_GT(r["tops"].get<double>(), 1.0) << r.dump();
    // How the variant ran the call (launch_text): its tiles, or its persistent grid.
    const std::string launch = r["launch"].get<std::string>();
    EXPECT_TRUE(launch.find(" key tiles") != std::string::npos || launch.find(" CTAs (persistent, ") != std::string::npos)
        << r.dump();
    if (r["variant"].get<std::string>().find("qk-native") != std::string::npos) {
      EXPECT_EQ(r["prep_ms"].get<double>(), 0.0) << r.dump();
      EXPECT_EQ(r["prep_tbps"].get<double>(), 0.0) << r.dump();
      // One launch: the kernel columns are the end-to-end measurement.
      EXPECT_EQ(r["attn_ms"].get<double>(), r["e2e_ms"].get<double>()) << r.dump();
    } else {
      ++quantized;
      EXPECT_GT(r["prep_tbps"].get<double>(), 0.01) << r.dump();
    }
  }
  EXPECT_GE(quantized, 1) << b.out;
  CliRun bad = s.run("bench --variant no_such_variant");
  EXPECT_EQ(bad.rc, 8) << bad.err;
  // A bad shape anywhere in the grid is refused before anything is measured.
  CliRun shape = s.run("bench -d 64 -n 1024,2048 --seq-kv 1536 --causal yes --samples 1");
  EXPECT_EQ(shape.rc, 2) << shape.err;
  EXPECT_NE(shape.err.find("causal needs seq <= --seq-kv"), std::string::npos) << shape.err;
  EXPECT_EQ(shape.out.find("TOPS"), std::string::npos) << shape.out;
}

// bench --varlen: one variable-length batch a head dim and mask, timed on the varlen default (a
// variant with the entry), its TOPS from the sequences' own pairs; a variant without the entry
// is refused, naming why.
// bench --window: the causal cells with a sliding window on the kernel the runtime picks for it
// (a window default), TOPS over the pairs it shows; a variant without the window entry, and a
// window without a causal mask, are refused with the reason.
// bench --paged: decoding over a paged cache (its pages shuffled) on the paged default, and a
// variant that reads no paged cache is refused.
TEST(CliGpu, BenchTimesAPagedCache) {
  SAGE_REQUIRE_GPU();
  CliSandbox s;
  const std::string arch = tuner::arch_for_cc(tuner::fingerprint_device(0).cc);
  CliRun b = s.run("bench -d 64,128 -n 1,32 --seq-kv 4096 -b 2 --heads 8 --heads-kv 2 --causal yes --paged 16 "
                   "--layout NHD --samples 3 --cooldown 0 --json");
  ASSERT_EQ(b.rc, 0) << b.out << b.err;
  const auto doc = nlohmann::json::parse(b.out);
  ASSERT_EQ(doc["results"].size(), 4u);
  for (const auto& r : doc["results"]) {
    EXPECT_GT(r["tops"].get<double>(), 0.01) << r.dump();
    EXPECT_EQ(r["page_size"].get<int>(), 16) << r.dump();
    EXPECT_EQ(r["variant"].get<std::string>(),
              tuner::default_variant(arch, r["head_dim"].get<int>(), "balanced", 4096, 1, r["seq"].get<int>(), false, 16,
                                     0, false, false, true))
        << r.dump();
  }
  CliRun other = s.run(cat("bench -n 1 --seq-kv 4096 -b 1 -d 128 --causal no --paged 16 --samples 1 --variant ",
                           tuner::default_variant(arch, 128, "balanced", 4096, 0, 4096)));
  EXPECT_EQ(other.rc, 2) << other.err;
  EXPECT_NE(other.err.find("reads no paged KV cache"), std::string::npos) << other.err;
  CliRun ragged = s.run("bench -n 1 --seq-kv 1000 -b 1 -d 128 --causal no --paged 16 --samples 1");
  EXPECT_EQ(ragged.rc, 2) << ragged.err;
  EXPECT_NE(ragged.err.find("must fill whole pages"), std::string::npos) << ragged.err;
}

TEST(CliGpu, BenchTimesASlidingWindow) {
  SAGE_REQUIRE_GPU();
  CliSandbox s;
  const std::string arch = tuner::arch_for_cc(tuner::fingerprint_device(0).cc);
  CliRun b = s.run("bench -d 64,128 -n 3000 -b 1 --heads 8 --heads-kv 2 --causal both --window 700 --samples 3 "
                   "--cooldown 0 --json");
  ASSERT_EQ(b.rc, 0) << b.out << b.err;
  const auto doc = nlohmann::json::parse(b.out);
  ASSERT_EQ(doc["results"].size(), 4u);
  int windowed = 0;
  for (const auto& r : doc["results"]) {
    EXPECT_GT(r["tops"].get<double>(), 1.0) << r.dump();
    if (!r["causal"].get<bool>()) {
      EXPECT_FALSE(r.contains("window")) << "the window is the causal cells'";
      continue;
    }
    ++windowed;
    EXPECT_EQ(r["window"].get<int>(), 700) << r.dump();
    const std::string v = r["variant"].get<std::string>();
    EXPECT_EQ(v, tuner::default_variant(arch, r["head_dim"].get<int>(), "balanced", 700, 0, 3000, false, 8, 0, false,
                                        true))
        << r.dump();
  }
  EXPECT_EQ(windowed, 2);
  // (the dense default at 2K keys: sm_90a's persistent native kernel, elsewhere a quantized
  // mma.sync one)
  CliRun other = s.run(cat("bench -n 1024 -b 1 -d 128 --causal yes --window 100 --samples 1 --variant ",
                           tuner::default_variant(arch, 128, "balanced", 2048, 0, 2048)));
  EXPECT_EQ(other.rc, 2) << other.err;
  EXPECT_NE(other.err.find("takes no sliding window"), std::string::npos) << other.err;
  CliRun nc = s.run("bench -n 1024 -b 1 -d 128 --causal no --window 100 --samples 1");
  EXPECT_EQ(nc.rc, 2) << nc.err;
  EXPECT_NE(nc.err.find("needs --causal yes"), std::string::npos) << nc.err;
}

TEST(CliGpu, BenchTimesAVariableLengthBatch) {
  SAGE_REQUIRE_GPU();
  CliSandbox s;
  const std::string arch = tuner::arch_for_cc(tuner::fingerprint_device(0).cc);
  // The accurate policy: the native plain kernels (no preparation).
  CliRun b = s.run("bench --varlen 1000x3,64,0,2000 -d 64,128 --causal both --heads 8 --heads-kv 2 --samples 3 "
                   "--cooldown 0 --json --policy accurate");
  ASSERT_EQ(b.rc, 0) << b.out << b.err;
  auto doc = nlohmann::json::parse(b.out);
  ASSERT_EQ(doc["results"].size(), 4u);
  for (const auto& r : doc["results"]) {
    EXPECT_EQ(r["seq"].get<int>(), 5064) << r.dump();  // the packed tokens
    EXPECT_EQ(r["varlen"].size(), 6u) << r.dump();
    EXPECT_GT(r["tops"].get<double>(), 1.0) << r.dump();
    EXPECT_NE(r["variant"].get<std::string>().find("qk-native_pv-native"), std::string::npos) << r.dump();
    EXPECT_NE(r["variant"].get<std::string>().find("plain"), std::string::npos) << r.dump();
  }
  // The default policy past 1K keys: on sm_90a the quantized kernels' entry, its preparation timed
  // apart (elsewhere the native kernels).
  CliRun q = s.run("bench --varlen 2000x2,700 -d 128 --causal no --heads 8 --heads-kv 2 --samples 3 --cooldown 0 --json");
  ASSERT_EQ(q.rc, 0) << q.out << q.err;
  const auto qdoc = nlohmann::json::parse(q.out);
  ASSERT_EQ(qdoc["results"].size(), 1u);
  const auto& r = qdoc["results"][0];
  if (arch == "sm_90a") {
    EXPECT_NE(r["variant"].get<std::string>().find("qk-int8-thread_pv-fp8"), std::string::npos) << r.dump();
    EXPECT_NE(r["variant"].get<std::string>().find("_fq_tma_"), std::string::npos) << r.dump();
    EXPECT_GT(r["prep_ms"].get<double>(), 0.0) << r.dump();
    EXPECT_GT(r["attn_ms"].get<double>(), 0.0) << r.dump();
  } else {
    EXPECT_NE(r["variant"].get<std::string>().find("qk-native_pv-native"), std::string::npos) << r.dump();
  }
  EXPECT_GT(r["tops"].get<double>(), 1.0) << r.dump();
  // A variant without the entry (the dense default at 2K keys: sm_90a's persistent native kernel,
  // elsewhere a quantized mma.sync one) is refused with the reason.
  CliRun other = s.run(cat("bench --varlen 512x2 -d 128 --causal no --samples 1 --variant ",
                           tuner::default_variant(arch, 128, "balanced", 2048, 0, 2048)));
  EXPECT_EQ(other.rc, 2) << other.err;
  EXPECT_NE(other.err.find("has no entry for variable-length batches"), std::string::npos) << other.err;
}

// bench --sms: the calls run on a green context of that many SMs, sized to them (the persistent
// grid of the partition's CTAs), and the report says so; a count the GPU lacks is refused.
TEST(CliGpu, BenchRunsOnAGreenContextOfTheSmsAsked) {
  SAGE_REQUIRE_GPU();
  CliSandbox s;
  CliRun b = s.run("bench -d 128 -n 4096 --causal no --batch 1 --heads 8 --samples 3 --cooldown 0 --json --sms 16");
  if (b.rc != 0 && b.err.find("need a CUDA 12.5 driver") != std::string::npos) GTEST_SKIP() << b.err;
  ASSERT_EQ(b.rc, 0) << b.out << b.err;
  auto doc = nlohmann::json::parse(b.out);
  ASSERT_EQ(doc["results"].size(), 1u);
  const auto& r = doc["results"][0];
  EXPECT_EQ(r["sms"].get<int>(), 16) << r.dump();
  EXPECT_NE(r["launch"].get<std::string>().find("on 16 SMs"), std::string::npos) << r.dump();
  EXPECT_GT(r["tops"].get<double>(), 1.0) << r.dump();
  CliRun whole = s.run("bench -d 128 -n 4096 --causal no --batch 1 --heads 8 --samples 3 --cooldown 0 --json");
  ASSERT_EQ(whole.rc, 0) << whole.err;
  const auto whole_doc = nlohmann::json::parse(whole.out);
  const auto& w = whole_doc["results"][0];
  EXPECT_GT(w["sms"].get<int>(), 16) << w.dump();
  EXPECT_EQ(w["launch"].get<std::string>().find(" SMs"), std::string::npos) << w.dump();
  CliRun too_many = s.run("bench -d 128 -n 1024 --causal no --samples 1 --sms 100000");
  EXPECT_NE(too_many.rc, 0);
  EXPECT_NE(too_many.err.find("a partition of 100000 SMs: this GPU has"), std::string::npos) << too_many.err;
}

// select without --arch: this GPU's architecture and its databases. The sandbox's user DB
// does not exist (and a lookup never creates it), so the answer is the default of the call's
// bucket, batch x query heads included, with the reason the winner lookup gave.
TEST(CliGpu, SelectConsultsThisGpusDatabasesThenTheDefault) {
  SAGE_REQUIRE_CC(80);
  CliSandbox s;
  CliRun r = s.run("select -d 128 -n 4096 --batch 1 --heads 8 --heads-kv 1 --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  const std::string arch = tuner::arch_for_cc(test::device_cc());
  EXPECT_EQ(j["arch"], arch);
  EXPECT_FALSE(j["device"].get<std::string>().empty()) << r.out;
  EXPECT_EQ(j["source"], "default") << r.out;
  EXPECT_EQ(j["variant"], tuner::default_variant(arch, 128, "balanced", 4096, 0, 4096, false, 8)) << r.out;
  EXPECT_NE(j["why"].get<std::string>().find("no tuned winner"), std::string::npos) << r.out;
  EXPECT_FALSE(std::filesystem::exists(s.path("tune.db")));
}

TEST(CliGpu, DevicesListsTheGpu) {
  SAGE_REQUIRE_GPU();
  CliSandbox s;
  CliRun d = s.run("devices --json");
  ASSERT_EQ(d.rc, 0) << d.err;
  auto doc = nlohmann::json::parse(d.out);
  ASSERT_FALSE(doc["devices"].empty());
  EXPECT_GE(doc["devices"][0]["cc"].get<int>(), 80);
  EXPECT_FALSE(doc["devices"][0]["arch"].get<std::string>().empty());
}

}  // namespace
}  // namespace sage
