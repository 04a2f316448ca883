// GPU test helpers: skip with a message where no GPU (or not the needed architecture) is
// present, so that GPU tests pass on CI machines without one.
#pragma once
#include <gtest/gtest.h>

#include <string>

namespace sage::test {
// Empty when a usable GPU is present; otherwise the reason it is not.
std::string gpu_unavailable_reason();
// Compute capability of device 0 as 80, 86, 89, 90...; 0 without a GPU.
int device_cc();
}  // namespace sage::test

#define SAGE_REQUIRE_GPU()                                                  \
  do {                                                                      \
    std::string sage_why_ = ::sage::test::gpu_unavailable_reason();         \
    if (!sage_why_.empty()) GTEST_SKIP() << "no GPU: " << sage_why_;        \
  } while (0)

#define SAGE_REQUIRE_CC(min_cc)                                                         \
  do {                                                                                  \
    SAGE_REQUIRE_GPU();                                                                 \
    int sage_cc_ = ::sage::test::device_cc();                                           \
    if (sage_cc_ < (min_cc))                                                            \
      GTEST_SKIP() << "needs compute capability " << (min_cc) << ", device has " << sage_cc_; \
  } while (0)
