// An exported static runtime serves what a JIT build serves, with the same kernels: `sage-tune
// export --defaults-only` for this GPU's architecture, a static build of it (no NVRTC, no
// database), and the C program tests/runtime/export_probe.c built against it and against the
// JIT runtime of this build tree. The program makes calls of every kind (dense short and long,
// few (sequence, head) pairs, rows of 16 but not 32 bytes, decoding, a sliding window, a
// variable-length batch, paged caches with dense and with variable-length queries, FP16 and FP8
// pages) and prints
// each one's status and a hash of O's and the LSE's bytes: the two builds must print the same
// lines, and every call must succeed.
#include <gtest/gtest.h>

#include "runtime/runtime_fixtures.h"
#include "sage/common/archs.h"
#include "sage/common/cuda_driver.h"

namespace sage {
namespace {

class RuntimeExportGpu : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    std::string why;
    if (!cu::have_device(&why)) GTEST_SKIP() << "no GPU: " << why;
    use_device(0);
    arch_ = target_arch_for_cc(tuner::fingerprint_device(0).cc);
    if (arch_.empty()) GTEST_SKIP() << "this GPU is not a target of sage-tune";
  }
  test::CommandResult run(const std::string& cmd, const std::string& log) {
    // The GPU tests' cubin cache: kernels compiled ahead of time there are not compiled again.
    return test::run_command(cat("SAGE_CACHE_DIR=", test::quote(std::string(SAGE_BINARY_DIR) + "/test-cache/runtime-gpu"),
                                 " ", cmd),
                             dir_.file(log));
  }
  test::CommandResult cmake(const std::string& args, const std::string& log) {
    std::string exe = test::cmake_cache_value(SAGE_BINARY_DIR, "CMAKE_COMMAND");
    if (exe.empty()) exe = "cmake";
    return run(cat(test::quote(exe), " ", args), log);
  }
  // Builds export_probe.c against the runtime library in `lib_dir`, as `name` in the scratch folder.
  test::CommandResult build_probe(const std::string& lib_dir, const std::string& name) {
    return run(cat("cc -O1 -o ", test::quote(dir_.file(name)), " ", test::quote(std::string(SAGE_SOURCE_DIR) + "/tests/runtime/export_probe.c"),
                   " -I", test::quote(std::string(SAGE_SOURCE_DIR) + "/runtime/include"), " -L", test::quote(lib_dir),
                   " -Wl,-rpath,", test::quote(lib_dir), " -lsage_runtime -lcuda"),
               name + ".build.log");
  }

  std::string arch_;
  test::ScratchDir dir_{"export-gpu"};
};

TEST_P(RuntimeExportGpu, StaticDefaultsGiveTheJitBuildsBits) {
  const int d = GetParam();
  const std::string out = dir_.file("export"), build = dir_.file("static"), prefix = dir_.file("prefix");
  auto r = run(cat(test::quote(SAGE_TUNE_EXE), " export --defaults-only --arch ", arch_, " --head-dim ", d, " --out ",
                   test::quote(out)),
               "export.log");
  ASSERT_EQ(r.rc, 0) << r.output;
  r = cmake(cat("-S ", test::quote(SAGE_SOURCE_DIR), " -B ", test::quote(build), " -G ",
                test::quote(test::cmake_cache_value(SAGE_BINARY_DIR, "CMAKE_GENERATOR")),
                " -DCMAKE_BUILD_TYPE=Release -DSAGE_WITH_NVRTC=OFF -DSAGE_TUNED_KERNELS=", test::quote(out),
                " -DSAGE_BUILD_TESTS=OFF -DSAGE_BUILD_BENCH=OFF -DSAGE_BUILD_EXAMPLES=OFF -DSAGE_BUILD_FUZZERS=OFF"),
            "configure.log");
  ASSERT_EQ(r.rc, 0) << r.output;
  r = cmake(cat("--build ", test::quote(build), " --target sage_runtime_shared"), "build.log");
  ASSERT_EQ(r.rc, 0) << r.output;
  r = cmake(cat("--install ", test::quote(build), " --prefix ", test::quote(prefix)), "install.log");
  ASSERT_EQ(r.rc, 0) << r.output;
  std::string static_lib;
  for (const auto& e : std::filesystem::recursive_directory_iterator(prefix))
    if (e.path().filename() == "libsage_runtime.so") static_lib = e.path().parent_path().string();
  ASSERT_FALSE(static_lib.empty()) << "libsage_runtime.so not installed under " << prefix;

  const std::string jit_exe = dir_.file("probe_jit"), static_exe = dir_.file("probe_static");
  r = build_probe(std::string(SAGE_BINARY_DIR) + "/lib", "probe_jit");
  ASSERT_EQ(r.rc, 0) << r.output;
  r = build_probe(static_lib, "probe_static");
  ASSERT_EQ(r.rc, 0) << r.output;
  // SAGE_LOG=1 writes each selection to stderr, kept apart from the lines compared.
  const auto jit = run(cat("SAGE_LOG=1 ", test::quote(jit_exe), " ", d, " 2>", test::quote(dir_.file("jit.stderr"))), "jit.log");
  ASSERT_EQ(jit.rc, 0) << jit.output << read_file(dir_.file("jit.stderr"));
  const auto stat =
      run(cat("SAGE_LOG=1 ", test::quote(static_exe), " ", d, " 2>", test::quote(dir_.file("static.stderr"))), "static.log");
  ASSERT_EQ(stat.rc, 0) << stat.output << read_file(dir_.file("static.stderr"));
  const std::vector<std::string> a = split(trim(jit.output), '\n'), b = split(trim(stat.output), '\n');
  ASSERT_EQ(a.size(), 15u) << jit.output;
  ASSERT_EQ(a.size(), b.size()) << "JIT:\n" << jit.output << "static:\n" << stat.output;
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_NE(a[i].find(" ok "), std::string::npos) << a[i];
    EXPECT_EQ(a[i], b[i]) << "JIT and static builds differ; selections in " << dir_.file("jit.stderr") << " and "
                          << dir_.file("static.stderr");
  }
  // The static build served every call from its exported defaults.
  const std::string log = read_file(dir_.file("static.stderr"));
  EXPECT_NE(log.find("static table"), std::string::npos) << log;
  EXPECT_EQ(log.find("JIT compile"), std::string::npos) << log;
}

INSTANTIATE_TEST_SUITE_P(HeadDims, RuntimeExportGpu, ::testing::Values(64, 128),
                         [](const auto& info) { return cat("d", info.param); });

}  // namespace
}  // namespace sage
