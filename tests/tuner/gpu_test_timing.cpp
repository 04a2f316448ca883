// The GPU timer's warm-up: a count of runs, and with warmup_ms a duration as well (a GPU out of
// idle raises its clocks over milliseconds; bench times short kernels after it).
#include <gtest/gtest.h>

#include "sage/common/cuda_driver.h"
#include "sage/internal/device_buffer.h"
#include "sage/internal/launch.h"
#include "sage/tuner/timing.h"
#include "support/gpu.h"

namespace sage {
namespace {

struct Counted {
  int calls = 0;
  tuner::TimingResult r;
};

// Times a 64 MiB memset (tens of microseconds) with the given warm-up.
Counted time_memset(int warmup, double warmup_ms, int samples) {
  use_device(0);
  CUstream stream;
  SAGE_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  Counted c;
  {
    DeviceBuffer buf(std::size_t(64) << 20);
    tuner::Timer timer(stream);
    tuner::TimingOptions o;
    o.warmup = warmup;
    o.warmup_ms = warmup_ms;
    o.min_samples = o.max_samples = samples;
    o.max_seconds = 0;
    c.r = timer.time(
        [&](int) {
          ++c.calls;
          SAGE_CU(cuMemsetD8Async(buf.dptr(), 0x3c, buf.size(), stream));
        },
        o);
    SAGE_CU(cuStreamSynchronize(stream));
  }
  cu::api().cuStreamDestroy(stream);
  return c;
}

TEST(Timer, WarmupCountAloneRunsExactlyThatManyExtraRuns) {
  SAGE_REQUIRE_GPU();
  const Counted c = time_memset(3, 0, 5);
  EXPECT_EQ(c.calls, 3 + 5);
  EXPECT_EQ(c.r.samples, 5);
  EXPECT_GT(c.r.median_ms, 0);
}

TEST(Timer, WarmupMsKeepsTheGpuBusyForAboutThatLongFirst) {
  SAGE_REQUIRE_GPU();
  const double warmup_ms = 20;
  const Counted c = time_memset(2, warmup_ms, 5);
  const int extra = c.calls - 2 - 5;  // the timed first run and the runs it sized
  ASSERT_GE(extra, 2) << c.r.str();
  // The run count comes from the first run's time, which at a low clock may be a few times the
  // median: the extra runs cover at least a third of warmup_ms at the median's speed, and the
  // memset is short enough that 20 ms takes many of them.
  EXPECT_GE(extra * c.r.median_ms, warmup_ms / 3) << extra << " runs, " << c.r.str();
  EXPECT_GE(extra, 10) << c.r.str();
}

}  // namespace
}  // namespace sage
