// sage-tune export and the static runtime it feeds: a database of real compiled kernels (NVRTC
// runs here, no GPU needed) is exported, with or without configs/defaults.yaml's defaults; the
// generated folder is built into a runtime with -DSAGE_WITH_NVRTC=OFF, installed, and used by a
// small C program found through find_package(sage). That runtime must not link NVRTC, SQLite or
// yaml-cpp, and must answer a problem it does not hold with SAGE_ERR_NOT_IN_BUILD before
// touching any device. (gpu_test_export.cpp checks on a GPU that the exported defaults compute
// what the JIT runtime computes.)
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "runtime/runtime_fixtures.h"
#include "sage/common/cuda_driver.h"
#include "sage/common/sha256.h"
#include "sage/internal/launch.h"
#include "sage/internal/runtime.h"
#include "sage/internal/static_table.h"

namespace sage {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const char* kArch = "sm_90a";

// CMake wraps long messages: compare with runs of white space collapsed to one blank.
std::string squash(const std::string& s) {
  std::string out;
  for (char c : s) {
    const bool blank = c == ' ' || c == '\n' || c == '\t';
    if (blank && !out.empty() && out.back() == ' ') continue;
    out += blank ? ' ' : c;
  }
  return out;
}

class RuntimeExport : public ::testing::Test {
 protected:
  void SetUp() override {
    // Compiled kernels are reused across test processes through a cache in the build tree.
    const std::string cache = cache_dir();
    dflt_ = tuner::default_variant(kArch, 128, "balanced");
    for (const auto& v : test::attention_variants(kArch, 128))
      if (v.name != dflt_ && other_.empty()) other_ = v.name;
    const tuner::KernelRecord a = test::compiled_kernel(test::variant_named(kArch, dflt_), cache);
    const tuner::KernelRecord b = test::compiled_kernel(test::variant_named(kArch, other_), cache);
    tuner::Store db(db_path());
    test::add_winner(db, test::fake_h100(), test::bucket(128, false, 4096, 128), a);
    test::add_winner(db, test::fake_h100(), test::bucket(128, true, 1024, 128), b);
    // Two winners export must skip, each for its own reason.
    tuner::Winner stale;
    stale.key = {test::fake_h100(), test::bucket(128, false, 16384, 128), "an-older-generator", tuner::nvrtc_version()};
    stale.variant = a.variant;
    stale.kernel_hash = a.hash;
    stale.median_us = 50;
    db.set_winner(stale);
    tuner::DeviceFingerprint a100{"NVIDIA A100-SXM4-80GB", 80, 108, 85899345920LL, 13000};
    test::add_winner(db, a100, test::bucket(128, false, 4096, 128), a);  // an sm_90a variant on an sm_80 GPU
  }
  std::string db_path() const { return dir_.file("tune.db"); }
  std::string out() const { return dir_.file("export"); }
  test::CommandResult sage_tune(const std::string& args) {
    // The defaults it compiles are cached with the fixture's kernels, across test processes.
    return test::run_command(cat("SAGE_CACHE_DIR=", test::quote(cache_dir()), " ", test::quote(SAGE_TUNE_EXE), " ", args),
                             dir_.file("cli.log"));
  }
  static std::string cache_dir() { return std::string(SAGE_BINARY_DIR) + "/test-cache/runtime-export"; }
  // Configures, builds and installs a static runtime with `tuned`; returns the install prefix.
  test::CommandResult cmake(const std::string& args, const std::string& log) {
    std::string exe = test::cmake_cache_value(SAGE_BINARY_DIR, "CMAKE_COMMAND");
    if (exe.empty()) exe = "cmake";
    return test::run_command(cat(test::quote(exe), " ", args), dir_.file(log));
  }
  std::string generator() const { return test::cmake_cache_value(SAGE_BINARY_DIR, "CMAKE_GENERATOR"); }

  test::ScratchDir dir_{"export"};
  std::string dflt_, other_;
};

TEST_F(RuntimeExport, WritesEmbeddedCubinsDispatchTableAndCmake) {
  const auto r = sage_tune(cat("export --db ", test::quote(db_path()), " --out ", test::quote(out()), " --no-defaults --json"));
  ASSERT_EQ(r.rc, 0) << r.output;
  const json m = json::parse(read_file(out() + "/manifest.json"));
  EXPECT_EQ(json::parse(r.output.substr(r.output.find('{'))), m);  // --json prints the manifest
  ASSERT_EQ(m["kernels"].size(), 2u) << m.dump(2);
  ASSERT_EQ(m["skipped"].size(), 2u) << m.dump(2);
  std::set<std::string> buckets, variants;
  for (const auto& k : m["kernels"]) {
    buckets.insert(k["bucket"].get<std::string>());
    variants.insert(k["variant"].get<std::string>());
    EXPECT_EQ(k["arch"], kArch);
    EXPECT_EQ(k["device"], "NVIDIA H100 80GB HBM3");
  }
  EXPECT_EQ(buckets, (std::set<std::string>{"d128_noncausal_fp16_HND_q4096_kv4096_bh128_balanced",
                                            "d128_causal_fp16_HND_q1024_kv1024_bh128_balanced"}));
  EXPECT_EQ(variants, (std::set<std::string>{dflt_, other_}));
  const std::string skipped = m["skipped"].dump();
  EXPECT_NE(skipped.find("another generator"), std::string::npos) << skipped;
  EXPECT_NE(skipped.find("not a variant of this build's search space for sm_80"), std::string::npos) << skipped;

  const std::string src = read_file(out() + "/sage_tuned_kernels.cpp");
  EXPECT_NE(src.find("generated by `sage-tune export` -- do not edit"), std::string::npos);
  EXPECT_NE(src.find("const sage::rt::StaticKernel kKernels[]"), std::string::npos);
  EXPECT_NE(src.find("const StaticTable& static_table()"), std::string::npos);
  EXPECT_NE(src.find("\"d128_causal_fp16_HND_q1024_kv1024_bh128_balanced\""), std::string::npos);
  for (const std::string& v : {dflt_, other_})  // each variant's KernelConfig::str(), for the static launcher
    EXPECT_NE(src.find("\"" + tuner::kernel_config(test::variant_named(kArch, v)).str() + "\""), std::string::npos) << v;
  EXPECT_NE(src.find("kSeqBuckets[] = {1, 4, 8, 16, 128, 256, 512, 1024, 2048, 3072, 4096, 6144, 8192, 16384, 32768, 65536}"), std::string::npos);
  EXPECT_NE(src.find("kBhBuckets[] = {8, 16, 32, 128, 512}"), std::string::npos);
  EXPECT_NE(src.find("\\x7f\\x45\\x4c\\x46"), std::string::npos);  // a cubin: ELF magic
  const std::string cm = read_file(out() + "/sage_tuned.cmake");
  EXPECT_NE(cm.find("set(SAGE_TUNED_KERNEL_COUNT 2)"), std::string::npos) << cm;
  EXPECT_NE(cm.find("set(SAGE_TUNED_DEFAULT_COUNT 0)"), std::string::npos) << cm;
  EXPECT_NE(cm.find(cat("set(SAGE_TUNED_FORMAT ", rt::kStaticTableFormat, ")")), std::string::npos) << cm;
  EXPECT_EQ(src.find("kDefaults[]"), std::string::npos);  // --no-defaults
  EXPECT_TRUE(m["defaults"].empty()) << m.dump(2);
  const std::string abi = sha256_hex(read_file(std::string(SAGE_SOURCE_DIR) + "/templates/include/sage/params.h"));
  EXPECT_NE(cm.find("set(SAGE_TUNED_ABI_SHA256 \"" + abi + "\")"), std::string::npos) << cm;
}

// Winners of paged buckets (`sage-tune tune` with paged problems) travel in the table under their
// paged keys, which the static runtime matches as a JIT build does; a winner whose kernel reads no
// pages of its bucket's type is skipped, saying so.
TEST_F(RuntimeExport, PagedWinnersTravelUnderTheirPagedKeys) {
  std::string reader;
  for (const auto& v : test::attention_variants(kArch, 128))
    if (has_paged_fp8_entry(tuner::kernel_config(v))) {
      reader = v.name;
      break;
    }
  ASSERT_FALSE(reader.empty());
  ASSERT_FALSE(has_paged_entry(tuner::kernel_config(test::variant_named(kArch, dflt_)))) << dflt_;
  tuner::ProblemKey paged = test::bucket(128, true, 8192, 128);
  paged.layout = "NHD";
  paged.seq_q_bucket = 2;
  paged.paged = true;
  tuner::ProblemKey kv8 = paged;
  kv8.kv8 = true;
  {
    tuner::Store db(db_path());
    test::add_winner(db, test::fake_h100(), paged, test::compiled_kernel(test::variant_named(kArch, reader), cache_dir()));
    test::add_winner(db, test::fake_h100(), kv8, test::compiled_kernel(test::variant_named(kArch, dflt_), cache_dir()));
  }
  const auto r = sage_tune(cat("export --db ", test::quote(db_path()), " --out ", test::quote(out()), " --no-defaults --json"));
  ASSERT_EQ(r.rc, 0) << r.output;
  const json m = json::parse(read_file(out() + "/manifest.json"));
  ASSERT_EQ(m["kernels"].size(), 3u) << m.dump(2);
  bool found = false;
  for (const auto& k : m["kernels"])
    if (k["bucket"] == "d128_causal_fp16_NHD_q2_kv8192_bh128_balanced_paged") {
      found = true;
      EXPECT_EQ(k["variant"], reader);
    }
  EXPECT_TRUE(found) << m.dump(2);
  ASSERT_EQ(m["skipped"].size(), 3u) << m.dump(2);
  const std::string skipped = m["skipped"].dump();
  EXPECT_NE(skipped.find("d128_causal_fp16_NHD_q2_kv8192_bh128_balanced_kv8_paged"), std::string::npos) << skipped;
  EXPECT_NE(skipped.find("its kernel reads no FP8 pages"), std::string::npos) << skipped;
  const std::string src = read_file(out() + "/sage_tuned_kernels.cpp");
  EXPECT_NE(src.find("\"d128_causal_fp16_NHD_q2_kv8192_bh128_balanced_paged\""), std::string::npos);
  // The static runtime parses the table's keys as its own bucket keys.
  const rt::BucketKey back = rt::BucketKey::parse("d128_causal_fp16_NHD_q2_kv8192_bh128_balanced_paged");
  EXPECT_TRUE(back.paged);
  EXPECT_FALSE(back.kv8);
  EXPECT_EQ(back.str(), paged.str());
}

// Winners of variable-length and window buckets travel under their own keys too; one whose
// kernel takes no such calls is skipped, saying so.
TEST_F(RuntimeExport, VarlenAndWindowWinnersTravelUnderTheirKeys) {
  // (the table's winner is a taker: a second of them needs no other compile)
  ASSERT_TRUE(has_varlen_entry(tuner::kernel_config(test::variant_named(kArch, dflt_)))) << dflt_;
  std::string other;
  for (const auto& v : test::attention_variants(kArch, 128))
    if (!has_window_entry(tuner::kernel_config(v)) && v.pipeline == "mma") {
      other = v.name;
      break;
    }
  ASSERT_FALSE(other.empty());
  tuner::ProblemKey varlen = test::bucket(128, true, 4096, 128);
  varlen.layout = "NHD";
  varlen.varlen = true;
  tuner::ProblemKey window = test::bucket(128, true, 16384, 128);
  window.layout = "NHD";
  window.seq_kv_bucket = 4096;
  window.window = true;
  {
    tuner::Store db(db_path());
    test::add_winner(db, test::fake_h100(), varlen, test::compiled_kernel(test::variant_named(kArch, dflt_), cache_dir()));
    test::add_winner(db, test::fake_h100(), window, test::compiled_kernel(test::variant_named(kArch, other), cache_dir()));
  }
  const auto r = sage_tune(cat("export --db ", test::quote(db_path()), " --out ", test::quote(out()), " --no-defaults --json"));
  ASSERT_EQ(r.rc, 0) << r.output;
  const json m = json::parse(read_file(out() + "/manifest.json"));
  bool found = false;
  for (const auto& k : m["kernels"]) {
    EXPECT_NE(k["bucket"], window.str()) << m.dump(2);
    if (k["bucket"] == varlen.str()) {
      found = true;
      EXPECT_EQ(k["variant"], dflt_);
    }
  }
  EXPECT_TRUE(found) << m.dump(2);
  const std::string skipped = m["skipped"].dump();
  EXPECT_NE(skipped.find(window.str()), std::string::npos) << skipped;
  EXPECT_NE(skipped.find("its kernel takes no sliding window"), std::string::npos) << skipped;
  EXPECT_NE(read_file(out() + "/sage_tuned_kernels.cpp").find("\"" + varlen.str() + "\""), std::string::npos);
  const rt::BucketKey back = rt::BucketKey::parse(varlen.str());
  EXPECT_TRUE(back.varlen);
  EXPECT_FALSE(back.window);
  EXPECT_EQ(back.str(), varlen.str());
}

TEST_F(RuntimeExport, ArchFilterAndErrors) {
  auto r = sage_tune(cat("export --db ", test::quote(db_path()), " --out ", test::quote(out()), " --arch sm_80 --no-defaults"));
  EXPECT_EQ(r.rc, 8) << r.output;  // not found: no exportable sm_80 winner
  EXPECT_NE(r.output.find("no winner to export for sm_80"), std::string::npos) << r.output;
  r = sage_tune(cat("export --db ", test::quote(db_path()), " --out ", test::quote(out()), " --arch sm_90a --head-dim 64"
                    " --no-defaults"));
  EXPECT_EQ(r.rc, 8) << r.output;  // the winners are of head dim 128
  EXPECT_NE(r.output.find("no winner to export for sm_90a at head dim 64"), std::string::npos) << r.output;
  r = sage_tune(cat("export --out ", test::quote(out()), " --defaults-only"));
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_NE(r.output.find("--defaults-only needs --arch"), std::string::npos) << r.output;
  r = sage_tune(cat("export --out ", test::quote(out()), " --defaults-only --no-defaults --arch sm_80"));
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_NE(r.output.find("exclude each other"), std::string::npos) << r.output;
  r = sage_tune(cat("export --out ", test::quote(out()), " --defaults-only --arch sm_80 --head-dim 96"));
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_NE(r.output.find("--head-dim 96 is not a kernels' head dim (64, 128, 256)"), std::string::npos) << r.output;
  r = sage_tune(cat("export --db ", test::quote(db_path()), " --out ", test::quote(out()), " --arch sm_75"));
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_NE(r.output.find("--arch sm_75 is not a target"), std::string::npos) << r.output;
  r = sage_tune(cat("export --db ", test::quote(dir_.file("missing.db")), " --out ", test::quote(out())));
  EXPECT_EQ(r.rc, 8) << r.output;
  r = sage_tune(cat("export --db ", test::quote(db_path()), " --out ", test::quote(out()), " --arch sm_90a --no-defaults"));
  EXPECT_EQ(r.rc, 0) << r.output;
  EXPECT_NE(r.output.find("exported 2 winners, 2 distinct cubins"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("-DSAGE_WITH_NVRTC=OFF -DSAGE_TUNED_KERNELS="), std::string::npos) << r.output;
}

TEST_F(RuntimeExport, ConfigureRefusesAMismatchedAbiOrTableAndAJitBuild) {
  ASSERT_EQ(sage_tune(cat("export --db ", test::quote(db_path()), " --out ", test::quote(out()), " --no-defaults")).rc, 0);
  const std::string exported = read_file(out() + "/sage_tuned.cmake");
  std::string cm = exported;
  const auto at = cm.find("SAGE_TUNED_ABI_SHA256 \"") + 23;
  cm.replace(at, 64, std::string(64, '0'));
  write_file_atomic(out() + "/sage_tuned.cmake", cm);
  const std::string common = cat("-S ", test::quote(SAGE_SOURCE_DIR), " -G ", test::quote(generator()),
                                 " -DSAGE_BUILD_TESTS=OFF -DSAGE_BUILD_BENCH=OFF -DSAGE_BUILD_EXAMPLES=OFF ",
                                 "-DSAGE_BUILD_FUZZERS=OFF -DSAGE_TUNED_KERNELS=", test::quote(out()));
  auto r = cmake(cat(common, " -B ", test::quote(dir_.file("b1")), " -DSAGE_WITH_NVRTC=OFF"), "cfg1.log");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(squash(r.output).find("were exported for another kernel ABI"), std::string::npos) << r.output;
  r = cmake(cat(common, " -B ", test::quote(dir_.file("b2")), " -DSAGE_WITH_NVRTC=ON"), "cfg2.log");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(squash(r.output).find("SAGE_TUNED_KERNELS needs -DSAGE_WITH_NVRTC=OFF"), std::string::npos) << r.output;
  // A folder written for another layout of the table (an older sage-tune): its source would be
  // read with this tree's structs.
  cm = exported;
  const std::string fmt = cat("set(SAGE_TUNED_FORMAT ", rt::kStaticTableFormat, ")");
  ASSERT_NE(cm.find(fmt), std::string::npos) << cm;
  cm.replace(cm.find(fmt), fmt.size(), "set(SAGE_TUNED_FORMAT 1)");
  write_file_atomic(out() + "/sage_tuned.cmake", cm);
  r = cmake(cat(common, " -B ", test::quote(dir_.file("b3")), " -DSAGE_WITH_NVRTC=OFF"), "cfg3.log");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(squash(r.output).find("were exported by another version of sage-tune (table format '1'"), std::string::npos)
      << r.output;
}

// The whole path: export -> static build -> install -> a C consumer through find_package.
TEST_F(RuntimeExport, StaticBuildServesOnlyExportedBucketsWithoutNvrtc) {
  ASSERT_EQ(sage_tune(cat("export --db ", test::quote(db_path()), " --out ", test::quote(out()), " --no-defaults")).rc, 0);
  const std::string build = dir_.file("static"), prefix = dir_.file("prefix"), probe = dir_.file("probe");
  auto r = cmake(cat("-S ", test::quote(SAGE_SOURCE_DIR), " -B ", test::quote(build), " -G ", test::quote(generator()),
                     " -DCMAKE_BUILD_TYPE=Release -DSAGE_WITH_NVRTC=OFF -DSAGE_TUNED_KERNELS=", test::quote(out()),
                     " -DSAGE_BUILD_TESTS=OFF -DSAGE_BUILD_BENCH=OFF -DSAGE_BUILD_EXAMPLES=OFF -DSAGE_BUILD_FUZZERS=OFF"),
                 "configure.log");
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_NE(r.output.find("static build with 2 exported winners and 0 defaults"), std::string::npos) << r.output;
  // Only the runtime: the CI machine has two cores and builds the main tree too.
  r = cmake(cat("--build ", test::quote(build), " --target sage_runtime_shared -j 2"), "build.log");
  ASSERT_EQ(r.rc, 0) << r.output;
  r = cmake(cat("--install ", test::quote(build), " --prefix ", test::quote(prefix)), "install.log");
  ASSERT_EQ(r.rc, 0) << r.output;

  fs::create_directories(probe);
  write_file_atomic(probe + "/CMakeLists.txt",
                    "cmake_minimum_required(VERSION 3.24)\nproject(sage_probe LANGUAGES C)\n"
                    "find_package(sage REQUIRED)\nadd_executable(probe probe.c)\n"
                    "target_link_libraries(probe PRIVATE sage::runtime)\n");
  // C, to check that sage.h is a C header. The pointers are never dereferenced: a problem
  // outside the build is refused first, and the exported one only selects (no launch).
  write_file_atomic(probe + "/probe.c", R"(#include <stdio.h>
#include "sage/sage.h"
int main(void) {
  void* p = (void*)0x100000;
  sage_attention_desc d = sage_attention_desc_init(4, 32, 32, 4096, 4096, 64);
  sage_status s = sage_attention(&d, p, p, p, p, NULL, NULL, 0, NULL);
  printf("notinbuild %d %s\n", (int)s, sage_last_error());
  sage_attention_desc e = sage_attention_desc_init(4, 32, 32, 4000, 4000, 128);
  size_t bytes = 0;
  s = sage_workspace_size(&e, &bytes);
  printf("intable %d %zu %s\n", (int)s, bytes, sage_last_error());
  char name[256] = "";
  s = sage_variant_name(&e, name, sizeof name);
  printf("variant %d %s\n", (int)s, name);
  return 0;
}
)");
  r = cmake(cat("-S ", test::quote(probe), " -B ", test::quote(probe + "/build"), " -G ", test::quote(generator()),
                " -DCMAKE_PREFIX_PATH=", test::quote(prefix)),
            "probe-configure.log");
  ASSERT_EQ(r.rc, 0) << r.output;
  r = cmake(cat("--build ", test::quote(probe + "/build")), "probe-build.log");
  ASSERT_EQ(r.rc, 0) << r.output;

  // No NVRTC and no database in the runtime's or the program's dependencies.
  fs::path lib;
  for (const auto& e : fs::recursive_directory_iterator(prefix))
    if (e.path().filename() == "libsage_runtime.so") lib = e.path();
  ASSERT_FALSE(lib.empty()) << "libsage_runtime.so not installed under " << prefix;
  const auto needed = test::run_command("readelf -d " + test::quote(lib.string()), dir_.file("readelf.log"));
  ASSERT_EQ(needed.rc, 0) << needed.output;
  EXPECT_NE(needed.output.find("(NEEDED)"), std::string::npos) << needed.output;
  for (const char* lib_name : {"libnvrtc", "libsqlite3", "libyaml-cpp"})
    EXPECT_EQ(needed.output.find(lib_name), std::string::npos) << lib_name << " in\n" << needed.output;
  const std::string exe = probe + "/build/probe";
  const auto deps = test::run_command("ldd " + test::quote(exe), dir_.file("ldd.log"));
  ASSERT_EQ(deps.rc, 0) << deps.output;
  EXPECT_NE(deps.output.find("libsage_runtime.so"), std::string::npos) << deps.output;
  EXPECT_EQ(deps.output.find("libnvrtc"), std::string::npos) << deps.output;
  EXPECT_EQ(deps.output.find("not found"), std::string::npos) << deps.output;

  const auto run = test::run_command(test::quote(exe), dir_.file("probe.log"));
  ASSERT_EQ(run.rc, 0) << run.output;
  const std::vector<std::string> lines = split(run.output, '\n');
  ASSERT_GE(lines.size(), 3u) << run.output;
  EXPECT_TRUE(starts_with(lines[0], "notinbuild 3 ")) << lines[0];
  EXPECT_NE(lines[0].find("d64_noncausal_fp16_HND_q4096_kv4096_bh128_balanced is not in this build"), std::string::npos)
      << lines[0];
  EXPECT_NE(lines[0].find("2 kernels for 2 buckets"), std::string::npos) << lines[0];
  std::string why;
  if (!cu::have_device(&why)) {
    EXPECT_TRUE(starts_with(lines[1], "intable 7 ")) << lines[1];  // SAGE_ERR_NO_DEVICE
  } else {
    use_device(0);
    const int cc = tuner::fingerprint_device(0).cc;
    if (cc == 90) {
      EXPECT_TRUE(starts_with(lines[1], "intable 0 ")) << lines[1];
      EXPECT_EQ(lines[2], "variant 0 " + dflt_);
    } else {
      EXPECT_TRUE(starts_with(lines[1], "intable 3 ")) << lines[1];  // exported for sm_90a only
      EXPECT_NE(lines[1].find("in this build only for sm_90a"), std::string::npos) << lines[1];
    }
  }
}

}  // namespace
}  // namespace sage

namespace sage {
namespace {

// --defaults-only: an architecture's configs/defaults.yaml entries at one head dim, in the
// list's order, with their kernels; the static runtime built from them lets every kind of call
// of that head dim through to the device (none of them is "not in this build"), and answers
// another head dim with SAGE_ERR_NOT_IN_BUILD naming what it holds.
TEST_F(RuntimeExport, DefaultsOnlyExportServesEveryKindOfCallAtItsHeadDims) {
  const char* arch = "sm_86";  // mma.sync kernels: quick to compile on the CI machine
  auto r = sage_tune(cat("export --defaults-only --arch ", arch, " --head-dim 64 --out ", test::quote(out()), " --json"));
  ASSERT_EQ(r.rc, 0) << r.output;
  const json m = json::parse(read_file(out() + "/manifest.json"));
  EXPECT_TRUE(m["kernels"].empty()) << m.dump(2);
  EXPECT_EQ(m["db"], "");
  EXPECT_EQ(m["format"], rt::kStaticTableFormat);
  // Every entry of the list at head dim 64, in its order, each with the variant it names.
  std::vector<std::pair<int, std::string>> want;
  std::set<std::string> kernels;
  for (const tuner::DefaultEntry& e : tuner::default_entries(arch))
    if (e.rule.head_dim == 64) {
      want.emplace_back(e.line, *tuner::entry_variant(arch, e));
      kernels.insert(want.back().second);
    }
  ASSERT_GE(want.size(), 4u);  // decoding, short, long, varlen, paged...
  ASSERT_EQ(m["defaults"].size(), want.size()) << m.dump(2);
  for (std::size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(m["defaults"][i]["arch"], arch);
    EXPECT_EQ(m["defaults"][i]["line"], want[i].first) << i;
    EXPECT_EQ(m["defaults"][i]["variant"], want[i].second) << i;
    EXPECT_GT(m["defaults"][i]["cubin_bytes"].get<std::size_t>(), 1000u);
  }
  EXPECT_EQ(m["default_kernels"], kernels.size());
  const std::string src = read_file(out() + "/sage_tuned_kernels.cpp");
  EXPECT_NE(src.find("const sage::rt::StaticDefault kDefaults[]"), std::string::npos);
  EXPECT_NE(src.find(cat("static_assert(kStaticTableFormat == ", rt::kStaticTableFormat)), std::string::npos);
  EXPECT_EQ(src.find("kKernels[]"), std::string::npos);  // no winners
  // The defaults are compiled without -lineinfo (no line tables, no PTX text for profilers):
  // the first cubin's bytes, decoded from its \xHH escapes, name no such section.
  EXPECT_EQ(m["defaults_lineinfo"], false);
  {
    const std::size_t at = src.find("kCubin0[] =");
    ASSERT_NE(at, std::string::npos);
    std::string bytes;
    for (std::size_t i = at; i + 3 < src.size() && src.compare(i, 6, "    ;\n") != 0; ++i)
      if (src[i] == '\\' && src[i + 1] == 'x') {
        bytes += char(std::stoi(src.substr(i + 2, 2), nullptr, 16));
        i += 3;
      }
    ASSERT_GT(bytes.size(), 1000u);
    EXPECT_EQ(bytes.compare(0, 4, "\x7f" "ELF"), 0);
    EXPECT_NE(bytes.find(".text.sage_attn"), std::string::npos);
    EXPECT_EQ(bytes.find(".nv_debug_ptx_txt"), std::string::npos);
    EXPECT_EQ(bytes.find(".debug_line"), std::string::npos);
  }
  const std::string cm = read_file(out() + "/sage_tuned.cmake");
  EXPECT_NE(cm.find(cat("set(SAGE_TUNED_DEFAULT_COUNT ", want.size(), ")")), std::string::npos) << cm;

  const std::string build = dir_.file("static"), probe = dir_.file("probe");
  r = cmake(cat("-S ", test::quote(SAGE_SOURCE_DIR), " -B ", test::quote(build), " -G ", test::quote(generator()),
                " -DCMAKE_BUILD_TYPE=Release -DSAGE_WITH_NVRTC=OFF -DSAGE_TUNED_KERNELS=", test::quote(out()),
                " -DSAGE_BUILD_TESTS=OFF -DSAGE_BUILD_BENCH=OFF -DSAGE_BUILD_EXAMPLES=OFF -DSAGE_BUILD_FUZZERS=OFF"),
            "configure.log");
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_NE(r.output.find(cat("static build with 0 exported winners and ", want.size(), " defaults (", kernels.size(),
                              " kernels)")),
            std::string::npos)
      << r.output;
  r = cmake(cat("--build ", test::quote(build), " --target sage_runtime_shared -j 2"), "build.log");
  ASSERT_EQ(r.rc, 0) << r.output;
  std::string lib;
  for (const auto& e : fs::recursive_directory_iterator(build))
    if (e.path().filename() == "libsage_runtime.so") lib = e.path().parent_path().string();
  ASSERT_FALSE(lib.empty());

  // Pointers that are never dereferenced: every call stops at the device or before it.
  fs::create_directories(probe);
  write_file_atomic(probe + "/probe.c", R"(#include <stdio.h>
#include "sage/sage.h"
static void* p = (void*)0x100000;
static void line(const char* name, sage_status s) { printf("%s %d %s\n", name, (int)s, sage_last_error()); }
static sage_status paged(int d) {
  sage_attention_desc desc = sage_attention_desc_init(4, 32, 8, 1, 4096, d);
  sage_paged_kv kv = {p, p, {0, 0, 0}, {0, 0, 0}, (const int*)p, (const int*)p, 16, 256, 1024};
  return sage_attention_paged(&desc, &kv, p, p, NULL, NULL, 0, NULL);
}
int main(void) {
  sage_attention_desc d = sage_attention_desc_init(4, 32, 32, 4096, 4096, 64);
  line("dense64", sage_attention(&d, p, p, p, p, NULL, NULL, 0, NULL));
  d.causal = 1;
  d.window = 512;
  line("window64", sage_attention(&d, p, p, p, p, NULL, NULL, 0, NULL));
  sage_attention_desc e = sage_attention_desc_init(3, 16, 4, 1000, 1000, 64);
  e.layout = SAGE_LAYOUT_NHD;
  sage_varlen vl = {(const int*)p, (const int*)p, 1500, 1500};
  line("varlen64", sage_attention_varlen(&e, &vl, p, p, p, p, NULL, NULL, 0, NULL));
  e.layout = SAGE_LAYOUT_HND;
  line("paged64", paged(64));
  line("paged128", paged(128));
  d.head_dim = 128;
  line("dense128", sage_attention(&d, p, p, p, p, NULL, NULL, 0, NULL));
  return 0;
}
)");
  r = test::run_command(cat("cc -o ", test::quote(probe + "/probe"), " ", test::quote(probe + "/probe.c"), " -I",
                            test::quote(std::string(SAGE_SOURCE_DIR) + "/runtime/include"), " -L", test::quote(lib),
                            " -Wl,-rpath,", test::quote(lib), " -lsage_runtime"),
                        dir_.file("probe-build.log"));
  ASSERT_EQ(r.rc, 0) << r.output;
  const auto run = test::run_command(test::quote(probe + "/probe"), dir_.file("probe.log"));
  ASSERT_EQ(run.rc, 0) << run.output;
  const std::vector<std::string> lines = split(trim(run.output), '\n');
  ASSERT_EQ(lines.size(), 6u) << run.output;
  std::string why;
  const bool device = cu::have_device(&why);
  const bool sm86 = device && (use_device(0), tuner::arch_for_cc(tuner::fingerprint_device(0).cc) == arch);
  for (int i = 0; i < 4; ++i) {
    if (!device) {
      EXPECT_TRUE(starts_with(lines[i], cat(split(lines[i], ' ')[0], " 7 "))) << lines[i];  // SAGE_ERR_NO_DEVICE
    } else if (!sm86) {
      EXPECT_NE(lines[i].find(" 3 "), std::string::npos) << lines[i];  // the defaults of another architecture
      EXPECT_NE(lines[i].find("Export " + tuner::arch_for_cc(tuner::fingerprint_device(0).cc) + "'s defaults"),
                std::string::npos)
          << lines[i];
    }
  }
  EXPECT_TRUE(starts_with(lines[0], "dense64 ")) << lines[0];
  for (int i : {4, 5}) {
    EXPECT_NE(lines[i].find(" 3 "), std::string::npos) << lines[i];  // SAGE_ERR_NOT_IN_BUILD, before the device
    EXPECT_NE(lines[i].find("the defaults for sm_86 head dims 64"), std::string::npos) << lines[i];
  }
  EXPECT_NE(lines[4].find("paged KV caches (sage_attention_paged) at head dim 128"), std::string::npos) << lines[4];
}

}  // namespace
}  // namespace sage
