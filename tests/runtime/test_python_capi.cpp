// The Python binding's ctypes layer (python/tests/test_capi.py) against this build's
// libsage_runtime.so, so that ctest covers it: no PyTorch and no GPU needed.
#include <gtest/gtest.h>

#include "runtime/runtime_fixtures.h"

namespace sage {
namespace {

TEST(RuntimePython, CtypesBindingAgainstThisBuild) {
  test::ScratchDir dir("python");
  if (test::run_command("python3 --version", dir.file("version.log")).rc != 0) GTEST_SKIP() << "no python3";
  const std::string lib = std::string(SAGE_BINARY_DIR) + "/lib/libsage_runtime.so";
  ASSERT_TRUE(std::filesystem::exists(lib)) << "build the whole tree first";
  const auto r = test::run_command(
      cat("cd ", test::quote(SAGE_SOURCE_DIR), " && SAGETUNE_LIB=", test::quote(lib),
          " python3 -B -m unittest discover -s python/tests -p 'test_capi*.py' -v"),
      dir.file("unittest.log"));
  EXPECT_EQ(r.rc, 0) << r.output;
  EXPECT_NE(r.output.find("OK"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace sage
