// Packaging: `cmake --install` of this build gives a prefix from which another project finds
// the runtime with find_package(sage) and links sage::runtime. The consumer is the example
// program in examples/, built on its own against the installed files only.
#include <gtest/gtest.h>

#include "runtime/runtime_fixtures.h"
#include "sage/common/cuda_driver.h"

namespace sage {
namespace {

namespace fs = std::filesystem;

TEST(RuntimePackage, InstalledPackageBuildsAndRunsTheExample) {
  const std::string bin = SAGE_BINARY_DIR;
  ASSERT_TRUE(fs::exists(bin + "/lib/libsage_runtime.so")) << "build the whole tree first (cmake --build " << bin << ")";
  test::ScratchDir dir("package");
  const std::string prefix = dir.file("prefix"), ex = dir.file("example");
  std::string cmake = test::cmake_cache_value(bin, "CMAKE_COMMAND");
  if (cmake.empty()) cmake = "cmake";
  const std::string generator = test::cmake_cache_value(bin, "CMAKE_GENERATOR");

  auto r = test::run_command(cat(test::quote(cmake), " --install ", test::quote(bin), " --prefix ", test::quote(prefix)),
                             dir.file("install.log"));
  ASSERT_EQ(r.rc, 0) << r.output;
  for (const char* f : {"include/sage/sage.h", "include/sage/sage.hpp"}) EXPECT_TRUE(fs::exists(prefix + "/" + f)) << f;
  // Internal headers stay out of the package.
  EXPECT_FALSE(fs::exists(prefix + "/include/sage/internal"));
  fs::path config;
  for (const auto& e : fs::recursive_directory_iterator(prefix))
    if (e.path().filename() == "sageConfig.cmake") config = e.path();
  ASSERT_FALSE(config.empty()) << r.output;
  EXPECT_TRUE(fs::exists(config.parent_path() / "sageConfigVersion.cmake"));
  EXPECT_TRUE(fs::exists(config.parent_path() / "sageTargets.cmake"));

  r = test::run_command(cat(test::quote(cmake), " -S ", test::quote(std::string(SAGE_SOURCE_DIR) + "/examples"), " -B ",
                            test::quote(ex), generator.empty() ? "" : " -G " + test::quote(generator),
                            " -DCMAKE_PREFIX_PATH=", test::quote(prefix)),
                        dir.file("configure.log"));
  ASSERT_EQ(r.rc, 0) << r.output;
  r = test::run_command(cat(test::quote(cmake), " --build ", test::quote(ex)), dir.file("build.log"));
  ASSERT_EQ(r.rc, 0) << r.output;

  // The program links the installed library (not the build tree's), and every dependency of it
  // resolves, NVRTC included (the installed library keeps its RUNPATH to the CUDA toolkit).
  const std::string exe = ex + "/sage_example";
  r = test::run_command("ldd " + test::quote(exe), dir.file("ldd.log"));
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_NE(r.output.find(prefix), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("not found"), std::string::npos) << r.output;

  test::ScopedEnv cache("SAGE_CACHE_DIR", dir.file("cache"));
  test::ScopedEnv db("SAGE_DB", dir.file("tune.db"));
  r = test::run_command(test::quote(exe), dir.file("run.log"));
  std::string why;
  if (cu::have_device(&why)) {
    EXPECT_EQ(r.rc, 0) << r.output;  // a real attention call, checked against the CPU
    EXPECT_NE(r.output.find("variant: attn_"), std::string::npos) << r.output;
  } else {
    EXPECT_EQ(r.rc, 2) << r.output;
    EXPECT_NE(r.output.find("no CUDA device"), std::string::npos) << r.output;
  }
}

}  // namespace
}  // namespace sage
