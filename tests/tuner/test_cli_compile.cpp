// `sage-tune compile` end to end: the real binary (SAGE_TUNE_EXE) with SAGE_CACHE_DIR in a
// temporary folder.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "sage/common/strings.h"
#include "sage/tuner/tune.h"

namespace sage {
namespace {

namespace fs = std::filesystem;

struct CliRun {
  int rc = -1;
  std::string out, err;
};

class CliCompile : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "sage-cli-compile-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  // Runs sage-tune with `args` (already shell-quoted), the cache in dir_/cache, or `cache_env`'s.
  CliRun run(const std::string& args, const std::string& cache_env = "") {
    std::string out = dir_ + "/stdout", err = dir_ + "/stderr";
    std::string cmd = cat(cache_env.empty() ? cat("SAGE_CACHE_DIR='", dir_, "/cache'") : cache_env, " '", SAGE_TUNE_EXE,
                          "' ", args, " >'", out, "' 2>'", err, "'");
    int status = std::system(cmd.c_str());
    CliRun r;
    r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = read_file(out);
    r.err = read_file(err);
    return r;
  }
  // Compiles exactly the variants `names` for `arch` (`compile --json`): each must build
  // without spilling. Returns the report's variants (empty when the command failed). Through the
  // PTX tests' cache in the build tree (test_compiler.cpp: compile_with_ptx), keeping each
  // module's PTX there (SAGE_CACHE_PTX): the defaults checked here are many of theirs, and a hit
  // is the very compile a miss would run (content-hash keys).
  nlohmann::json compile_without_spills(const std::string& arch, const std::set<std::string>& names) {
    std::string filter;
    for (const std::string& n : names) filter += (filter.empty() ? "^(" : "|") + n;
    filter += ")$";
    CliRun r = run("compile --arch " + arch + " --filter '" + filter + "' --json",
                   cat("SAGE_CACHE_PTX=1 SAGE_CACHE_DIR='", SAGE_BINARY_DIR, "/test-cache/shared'"));
    EXPECT_EQ(r.rc, 0) << r.out << r.err;
    if (r.rc != 0) return nlohmann::json::array();
    nlohmann::json v = nlohmann::json::parse(r.out).at("variants");
    EXPECT_EQ(v.size(), names.size()) << filter;
    for (const auto& x : v) {
      EXPECT_TRUE(x["ok"].get<bool>()) << x["name"];
      EXPECT_FALSE(x["spills"].get<bool>()) << x.dump(2);
    }
    return v;
  }
  std::string dir_;
};

struct Totals {
  long variants = -1, built = -1, hits = -1, failed = -1, spilled = -1;
};
// "12 variants for 1 architecture in 3.1 s: 12 built, 0 cache hits, 0 failed, 0 pruned for spilling"
Totals totals(const std::string& out) {
  static const std::regex re(
      R"((\d+) variants for \d+ architectures? in [^:]+: (\d+) built, (\d+) cache hits, (\d+) failed, (\d+) pruned for spilling)");
  std::smatch m;
  Totals t;
  if (std::regex_search(out, m, re)) {
    t.variants = std::stol(m[1]);
    t.built = std::stol(m[2]);
    t.hits = std::stol(m[3]);
    t.failed = std::stol(m[4]);
    t.spilled = std::stol(m[5]);
  }
  return t;
}

// One attention variant and the reference: small enough for a test, both kinds of template.
const char* kTwoVariants = "'d64_m64_n64_w4_s2_qk-int8-thread_pv-fp16_smk_sch-plain_occ1$|^reference'";

TEST_F(CliCompile, Sm80_SecondRunHitsTheCacheForEveryVariant) {
  CliRun first = run(cat("compile --arch sm_80 --filter ", kTwoVariants));
  ASSERT_EQ(first.rc, 0) << first.out << first.err;
  Totals a = totals(first.out);
  ASSERT_EQ(a.variants, 2) << first.out;
  EXPECT_EQ(a.failed, 0);
  EXPECT_EQ(a.hits, 0);
  EXPECT_EQ(a.built, a.variants);
  EXPECT_NE(first.out.find("median compile"), std::string::npos) << first.out;
  EXPECT_NE(first.err.find("compile ["), std::string::npos) << "no progress bar on stderr";

  CliRun second = run(cat("compile --arch sm_80 --filter ", kTwoVariants));
  ASSERT_EQ(second.rc, 0) << second.out << second.err;
  Totals b = totals(second.out);
  EXPECT_EQ(b.variants, a.variants);
  EXPECT_EQ(b.hits, a.variants) << second.out;
  EXPECT_EQ(b.built, 0);
  EXPECT_TRUE(fs::is_directory(dir_ + "/cache/cubins")) << "SAGE_CACHE_DIR not honoured";
}

TEST_F(CliCompile, JsonReportsEveryVariantWithResources) {
  CliRun r = run("compile --arch sm_90a --pipeline reference --json");
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.at("archs").size(), 1u);
  EXPECT_EQ(j["archs"][0]["arch"], "sm_90a");
  const auto& vs = j.at("variants");
  ASSERT_EQ(vs.size(), 1u);
  EXPECT_EQ(j["total"]["variants"].get<std::size_t>(), vs.size());
  const auto& v = vs[0];
  EXPECT_TRUE(v["ok"].get<bool>()) << v.dump(2);
  EXPECT_FALSE(v["cache_hit"].get<bool>());
  EXPECT_EQ(v["arch"], "sm_90a");
  EXPECT_EQ(v["key"].get<std::string>().size(), 64u);
  ASSERT_GT(v["kernels"].size(), 0u) << v.dump(2);
  for (const auto& k : v["kernels"]) EXPECT_GT(k["registers"].get<int>(), 0) << k.dump();
}

TEST_F(CliCompile, KeepWritesCubinAndLogPerVariant) {
  CliRun r = run(cat("compile --arch sm_80 --pipeline reference --keep '", dir_, "/kept'"));
  ASSERT_EQ(r.rc, 0) << r.err;
  std::string stem = dir_ + "/kept/sm_80/reference_sm80";
  ASSERT_TRUE(fs::exists(stem + ".cubin")) << stem;
  EXPECT_EQ(read_file(stem + ".cubin").compare(0, 4, "\x7f" "ELF"), 0);
  EXPECT_NE(read_file(stem + ".log").find("ptxas info"), std::string::npos);
}

TEST_F(CliCompile, CompileErrorNamesVariantAndPlace) {
  // Redefining the reference kernel's parameter struct breaks it inside the embedded headers.
  CliRun r = run("compile --arch sm_80 --pipeline reference --nvrtc-option=-DSageRefParams=int");
  EXPECT_EQ(r.rc, 4) << r.out << r.err;
  EXPECT_NE(r.err.find("variant reference_sm80 (sm_80) failed to compile"), std::string::npos) << r.err;
  EXPECT_TRUE(std::regex_search(r.err, std::regex(R"(\n  sage/[\w/]+\.(h|cuh):\d+: error: )"))) << r.err;
  EXPECT_EQ(totals(r.out).failed, 1) << r.out;
}

TEST_F(CliCompile, SpillingVariantIsPrunedNotFailed) {
  // The widest sm_80 tile at occupancy 3: ptxas spills it (NVRTC 13.0). The report must
  // agree with the resources either way; the spill-specific checks need it to spill.
  const std::string args =
      "compile --arch sm_80 --filter 'd128_m64_n128_w4_s2_qk-int8-thread_pv-fp16acc_smk_sch-plain_occ3$'";
  CliRun js = run(args + " --json");
  ASSERT_EQ(js.rc, 0) << js.err;
  nlohmann::json j = nlohmann::json::parse(js.out);
  ASSERT_EQ(j.at("variants").size(), 1u);
  const auto& v = j["variants"][0];
  bool any = false;
  for (const auto& k : v["kernels"]) any |= k["spill_stores"].get<int>() > 0 || k["spill_loads"].get<int>() > 0;
  EXPECT_EQ(v["spills"].get<bool>(), any);
  EXPECT_EQ(j["total"]["spilled"].get<int>(), any ? 1 : 0);
  if (!any) GTEST_SKIP() << v["name"] << " no longer spills: pick a spilling variant for this test";
  EXPECT_EQ(v["pruned"].get<std::string>().rfind("spills ", 0), 0u) << v.dump(2);

  CliRun text = run(args);  // now a cache hit: the pruning reason comes from the stored report
  EXPECT_EQ(text.rc, 0) << text.err;
  EXPECT_TRUE(std::regex_search(text.out, std::regex(R"(pruned: spills \d+ B stores / \d+ B loads in sage_attn)")))
      << text.out;
  EXPECT_EQ(totals(text.out).spilled, 1);
  EXPECT_EQ(totals(text.out).hits, 1);

  CliRun strict = run(args + " --fail-on-spill");
  EXPECT_EQ(strict.rc, 1) << strict.out << strict.err;
  EXPECT_NE(strict.err.find("--fail-on-spill"), std::string::npos) << strict.err;
}

// The variants Hopper serves by default (configs/defaults.yaml, every head dimension, short
// and long sequences and decoding: the persistent overlapped native kernel, the plain native
// kernel, the quantized ones, and at D=256 the quantized and native wgmma kernels and the
// native mma.sync one) fit their
// registers: ptxas reports no spills and does not serialize their wgmmas (issue "Kernels II":
// no local-memory traffic in the chosen variants).
TEST_F(CliCompile, Sm90a_DefaultsNeitherSpillNorSerializeWgmma) {
  std::set<std::string> names;
  for (int d : {64, 128, 256})
    for (int n : {1024, 2048, 4096, 8192, 0})
      for (int causal : {0, 1})
        for (int seq_q : {0, 1}) names.insert(tuner::default_variant("sm_90a", d, "balanced", n, causal, seq_q));
  for (const auto& v : compile_without_spills("sm_90a", names))
    for (const auto& k : v["kernels"]) EXPECT_FALSE(k["wgmma_serialized"].get<bool>()) << v["name"] << " " << k.dump();
}

// Off Hopper head dim 256 runs the mma.sync kernels, native and quantized (INT8 Q.K^T with each
// arch's P.V), whose O alone takes 128 registers a thread: every head-dim-256 default of
// sm_80, sm_86 and sm_89 (decoding, short and long calls, every policy; 32-key tiles, which
// the 99 KiB of sm_86 and sm_89 hold) fits its registers without spilling.
TEST_F(CliCompile, HeadDim256DefaultsOfAmpereAndAdaDoNotSpill) {
  for (const char* arch : {"sm_80", "sm_86", "sm_89"}) {
    std::set<std::string> names;
    for (const char* policy : {"balanced", "accurate"})
      for (int n : {1024, 0})
        for (int seq_q : {0, 1}) names.insert(tuner::default_variant(arch, 256, policy, n, 0, seq_q));
    ASSERT_GE(names.size(), 2u) << arch << ": the native and a quantized kernel";
    for (const std::string& n : names) EXPECT_NE(n.find("_d256_"), std::string::npos) << n;
    compile_without_spills(arch, names);
  }
}

// Blackwell runs sm_89's defaults compiled for its own targets (configs/defaults.yaml): each
// of them (decoding, short and long calls, head dims 64 to 256, every policy) compiles for
// sm_100 and sm_120 and fits its registers without spilling, and its cubin is that arch's.
TEST_F(CliCompile, BlackwellDefaultsCompileForTheirArchWithoutSpills) {
  for (const char* arch : {"sm_100", "sm_120"}) {
    std::set<std::string> names;
    for (int d : {64, 128, 256})
      for (const char* policy : {"balanced", "accurate"})
        for (int n : {1024, 0})
          for (int seq_q : {0, 1, 64}) names.insert(tuner::default_variant(arch, d, policy, n, 0, seq_q));
    ASSERT_GE(names.size(), 7u) << arch;  // decoding, short and quantized calls of D=64 and 128, and D=256
    const std::string tag = std::string("attn_") + (std::string(arch) == "sm_100" ? "sm100" : "sm120") + "_mma_";
    for (const std::string& n : names) EXPECT_EQ(n.rfind(tag, 0), 0u) << n;
    for (const auto& v : compile_without_spills(arch, names)) EXPECT_EQ(v["arch"].get<std::string>(), arch) << v.dump();
  }
}

TEST_F(CliCompile, InvalidArchIsAUsageError) {
  CliRun r = run("compile --arch sm_75");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("--arch"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("'sm_75'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("sm_90a"), std::string::npos) << r.err;  // says what is valid
}

TEST_F(CliCompile, InvalidFilterIsAUsageError) {
  CliRun r = run("compile --arch sm_80 --filter '('");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("--filter"), std::string::npos) << r.err;
}

TEST_F(CliCompile, UnknownPipelineIsAUsageError) {
  CliRun r = run("compile --arch sm_80 --pipeline warp_specialized");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("--pipeline"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("'warp_specialized'"), std::string::npos) << r.err;
}

TEST_F(CliCompile, FilterMatchingNothingIsNotFound) {
  CliRun r = run("compile --arch sm_80 --filter 'no_variant_is_named_like_this'");
  EXPECT_EQ(r.rc, 8);
  EXPECT_NE(r.err.find("no variant"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace sage
