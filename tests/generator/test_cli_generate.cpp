// `sage-tune generate`, run as a real process: listing, explaining, JSON, emitting sources,
// and the exit codes and messages of bad input.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <regex>
#include <sys/wait.h>
#include <unistd.h>

#include "sage/common/strings.h"
#include "sage/gen/search_space.h"

namespace sage {
namespace {

namespace fs = std::filesystem;

const char* kTinySpace = R"(version: 1
archs:
  sm_80: {cc: 80, smem_max: 166912, features: [mma_int8]}
  sm_90a: {cc: 90, smem_max: 232448, features: [mma_int8, wgmma]}
axes:
  head_dim: {type: int, values: [64, 128], label: d}
  smooth_k: {type: bool, label: smk}
pipelines:
  tiny:
    template: tiny.cu.j2
    archs: [sm_80, sm_90a]
    axes: {head_dim: [64, 128], smooth_k: true}
    derived:
      threads: head_dim * 2
)";

const char* kTinyTemplate =
    "constexpr int kHeadDim = {{ head_dim }};\n"
    "constexpr int kThreads = {{ threads }};  // {{ arch.name }}\n";

struct Result {
  int rc = -1;
  std::string out;
  std::string err;
};

class CliGenerate : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           cat("sage_cli_generate_", ::getpid(), "_", info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Runs sage-tune with `args` (already shell-quoted where needed).
  Result run(const std::string& args) const {
    std::string out = (dir_ / "stdout").string(), err = (dir_ / "stderr").string();
    std::string cmd = cat("'", SAGE_TUNE_EXE, "' ", args, " >'", out, "' 2>'", err, "'");
    int status = std::system(cmd.c_str());
    Result r;
    r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = read_file(out);
    r.err = read_file(err);
    return r;
  }
  std::string write(const std::string& name, const std::string& text) const {
    std::string path = (dir_ / name).string();
    write_file_atomic(path, text);
    return path;
  }

  fs::path dir_;
};

std::size_t builtin_count(const std::string& arch, const std::string& pipeline = {}) {
  std::vector<std::string> pipelines;
  if (!pipeline.empty()) pipelines.push_back(pipeline);
  return gen::SearchSpace::builtin().enumerate({{arch}, "", pipelines}).variants.size();
}

TEST_F(CliGenerate, ListSm90aShowsEveryVariantAndCount) {
  Result r = run("generate --arch sm_90a --list");
  ASSERT_EQ(r.rc, 0) << r.err;
  gen::Enumeration en = gen::SearchSpace::builtin().enumerate({{"sm_90a"}, "", {}});
  ASSERT_GT(en.variants.size(), 0u);
  for (auto& v : en.variants) EXPECT_NE(r.out.find(v.name + " "), std::string::npos) << v.name;
  EXPECT_NE(r.out.find(cat("\n", en.variants.size(), " variants (sm_90a: ", en.variants.size(), ")\n")),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("sm_80"), std::string::npos);
  // key params and shared memory of the golden variant: 16 KiB Q + 2 x (8 KiB K + 8 KiB V)
  std::regex row(R"(attn_sm90a_mma_d128_m128_n64_w8_s2_qk-int8-thread_pv-fp8_smk_sch-plain_occ1 +sm_90a +mma +128 +128x64 +8 +2 +48\.0)");
  EXPECT_TRUE(std::regex_search(r.out, row)) << r.out;
}

TEST_F(CliGenerate, ExplainGroupsReasonsWithCounts) {
  Result r = run("generate --arch sm_80 --explain");
  ASSERT_EQ(r.rc, 0) << r.err;
  gen::Enumeration en = gen::SearchSpace::builtin().enumerate({{"sm_80"}, "", {}});
  EXPECT_NE(r.out.find(cat("pruned ", en.pruned.size(), " of ", en.pruned.size() + en.variants.size())),
            std::string::npos)
      << r.out;
  std::size_t fp8 = 0;
  for (auto& p : en.pruned) fp8 += p.rule == "requires pv=fp8: mma_fp8";
  ASSERT_GT(fp8, 0u);
  EXPECT_TRUE(std::regex_search(r.out, std::regex(cat(" +", fp8, "  requires pv=fp8: mma_fp8\n")))) << r.out;
  EXPECT_NE(r.out.find("pv=fp8 needs mma_fp8 (sm_89+), sm_80 lacks it"), std::string::npos);
}

TEST_F(CliGenerate, FilterExcludedShowInExplain) {
  Result r = run("generate --arch sm_90a --filter 'pv-fp8' --list --explain");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("excluded by filter"), std::string::npos);
  EXPECT_NE(r.out.find("attn_sm90a_mma_d128_m128_n64_w8_s2_qk-int8-thread_pv-fp8_smk_sch-plain_occ1 "), std::string::npos);
}

TEST_F(CliGenerate, SummaryWithoutAction) {
  Result r = run("generate");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("search space: configs/search_space.yaml"), std::string::npos) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex(cat(R"(mma +sm_90a +)", builtin_count("sm_90a", "mma"), " "))))
      << r.out;  // the kept mma variants of sm_90a (reference and wgmma are rows of their own)
  EXPECT_NE(r.out.find("pruned by rule:"), std::string::npos);
  EXPECT_NE(r.out.find("\ntotal "), std::string::npos);
}

TEST_F(CliGenerate, JsonIsWholeEnumeration) {
  Result r = run("generate --arch sm_90a --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  gen::Enumeration en = gen::SearchSpace::builtin().enumerate({{"sm_90a"}, "", {}});
  ASSERT_EQ(j.at("variants").size(), en.variants.size());
  ASSERT_EQ(j.at("pruned").size(), en.pruned.size());
  for (std::size_t i = 0; i < en.variants.size(); ++i) {
    const auto& v = j.at("variants").at(i);
    EXPECT_EQ(v.at("name"), en.variants[i].name);
    EXPECT_EQ(v.at("params_hash"), en.variants[i].params_hash);
    EXPECT_EQ(v.at("arch"), "sm_90a");
  }
  const auto& golden = *std::find_if(j.at("variants").begin(), j.at("variants").end(), [](auto& v) {
    return v.at("name") == "attn_sm90a_mma_d128_m128_n64_w8_s2_qk-int8-thread_pv-fp8_smk_sch-plain_occ1";
  });
  EXPECT_EQ(golden.at("params").at("head_dim"), 128);
  EXPECT_EQ(golden.at("params").at("smooth_k"), true);
  EXPECT_EQ(golden.at("params").at("pv"), "fp8");
  EXPECT_EQ(golden.at("derived").at("smem_bytes"), 49152);
  for (auto& p : j.at("pruned")) {
    EXPECT_FALSE(p.at("rule").get<std::string>().empty());
    EXPECT_FALSE(p.at("reason").get<std::string>().empty());
  }
  EXPECT_TRUE(j.at("pruned_by_rule").contains("requires qk=int4: mma_int4"));
}

TEST_F(CliGenerate, EmitWritesSourcesWithHeader) {
  std::string config = write("tiny.yaml", kTinySpace);
  write("templates/tiny.cu.j2", kTinyTemplate);
  fs::path out = dir_ / "out";
  Result r = run(cat("generate --config '", config, "' --templates '", (dir_ / "templates").string(),
                     "' --emit '", out.string(), "'"));
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("wrote 4 sources to"), std::string::npos) << r.out;
  std::size_t files = 0;
  for (auto& e : fs::directory_iterator(out)) files += e.path().extension() == ".cu";
  EXPECT_EQ(files, 4u);
  auto space = gen::SearchSpace::from_file(config);
  auto v = space.find("attn_sm90a_tiny_d128_smk");
  ASSERT_TRUE(v.has_value());
  std::string text = read_file((out / "attn_sm90a_tiny_d128_smk.cu").string());
  EXPECT_EQ(text, cat("// generated by sage-tune — do not edit\n"
                      "// variant: attn_sm90a_tiny_d128_smk\n"
                      "// template: tiny.cu.j2\n"
                      "// params_hash: ", v->params_hash, "\n"
                      "constexpr int kHeadDim = 128;\n"
                      "constexpr int kThreads = 256;  // sm_90a\n"));
}

TEST_F(CliGenerate, EmitMissingTemplateIsNotFound) {
  std::string config = write("tiny.yaml", kTinySpace);
  fs::create_directories(dir_ / "empty_templates");
  fs::path out = dir_ / "out";
  Result r = run(cat("generate --config '", config, "' --templates '",
                     (dir_ / "empty_templates").string(), "' --emit '", out.string(), "'"));
  EXPECT_EQ(r.rc, 8) << r.err;  // kNotFound
  EXPECT_NE(r.err.find("tiny.cu.j2"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(out));  // nothing written when rendering fails
}

TEST_F(CliGenerate, TemplatesWithoutEmitIsUsage) {
  Result r = run(cat("generate --templates '", dir_.string(), "'"));
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("--templates is only used with --emit"), std::string::npos) << r.err;
}

TEST_F(CliGenerate, UnknownArchIsUsage) {
  Result r = run("generate --arch sm_75 --list");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("unknown architecture 'sm_75' (declared: sm_80, sm_86, sm_89, sm_90a, sm_100, sm_120)"),
            std::string::npos)
      << r.err;
}

TEST_F(CliGenerate, InvalidRegexIsUsage) {
  Result r = run("generate --filter '(unclosed' --list");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("invalid filter regex '(unclosed'"), std::string::npos) << r.err;
}

TEST_F(CliGenerate, MalformedConfigIsParseErrorWithPlace) {
  std::string config = write("bad.yaml", "version: 1\narchs: {sm_80: [\n");
  Result r = run(cat("generate --config '", config, "' --list"));
  EXPECT_EQ(r.rc, 3);  // kParseError
  EXPECT_TRUE(std::regex_search(r.err, std::regex(config + R"(:[0-9]+:[0-9]+: malformed YAML)"))) << r.err;
}

TEST_F(CliGenerate, UnknownAxisValueInConfigNamesKey) {
  std::string text = kTinySpace;
  const std::string from = "head_dim: [64, 128], smooth_k";
  text.replace(text.find(from), from.size(), "head_dim: [64, 96], smooth_k");
  std::string config = write("bad_value.yaml", text);
  Result r = run(cat("generate --config '", config, "'"));
  EXPECT_EQ(r.rc, 3);
  EXPECT_NE(r.err.find(config + ":12:27: key 'pipelines.tiny.axes.head_dim': unknown value '96' "
                                "(allowed: 64, 128)"),
            std::string::npos)
      << r.err;
}

TEST_F(CliGenerate, MissingConfigIsNotFound) {
  Result r = run("generate --config /nonexistent/space.yaml");
  EXPECT_EQ(r.rc, 8);
  EXPECT_NE(r.err.find("/nonexistent/space.yaml"), std::string::npos);
}

}  // namespace
}  // namespace sage
