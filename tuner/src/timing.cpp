#include "sage/tuner/timing.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "sage/common/cuda_driver.h"

namespace sage::tuner {

std::string TimingResult::str() const {
  char buf[128];
  std::snprintf(buf, sizeof buf, "median %.4f ms (p10 %.4f, p90 %.4f, n=%d%s)", median_ms, p10_ms, p90_ms, samples,
                abandoned ? ", abandoned" : "");
  return buf;
}

TimingResult summarize(std::vector<double> s) {
  TimingResult r;
  if (s.empty()) return r;
  std::sort(s.begin(), s.end());
  auto q = [&](double f) { return s[std::min(s.size() - 1, std::size_t(f * double(s.size() - 1) + 0.5))]; };
  r.samples = int(s.size());
  r.min_ms = s.front();
  r.median_ms = s.size() % 2 ? s[s.size() / 2] : 0.5 * (s[s.size() / 2 - 1] + s[s.size() / 2]);
  r.p10_ms = q(0.1);
  r.p90_ms = q(0.9);
  return r;
}

Timer::Timer(CUstream stream) : stream_(stream) {
  SAGE_CU(cuEventCreate(&start_, CU_EVENT_DEFAULT));
  SAGE_CU(cuEventCreate(&stop_, CU_EVENT_DEFAULT));
  CUdevice dev;
  SAGE_CU(cuCtxGetDevice(&dev));
  int l2 = 0;
  SAGE_CU(cuDeviceGetAttribute(&l2, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, dev));
  scratch_ = DeviceBuffer(std::size_t(std::max(l2, 1 << 20)) * 2);
}

Timer::~Timer() {
  if (const cu::Api* a = cu::try_api()) {
    if (start_) a->cuEventDestroy(start_);
    if (stop_) a->cuEventDestroy(stop_);
  }
}

void Timer::flush_l2() { SAGE_CU(cuMemsetD8Async(scratch_.dptr(), 0x5a, scratch_.size(), stream_)); }

TimingResult Timer::time(const std::function<void(int)>& run, const TimingOptions& o) {
  int next = 0;
  for (; next < o.warmup; ++next) run(next);
  if (o.warmup_ms > 0) {
    SAGE_CU(cuEventRecord(start_, stream_));
    run(next++);
    SAGE_CU(cuEventRecord(stop_, stream_));
    SAGE_CU(cuEventSynchronize(stop_));
    float ms = 0;
    SAGE_CU(cuEventElapsedTime(&ms, start_, stop_));
    const double runs = std::ceil(o.warmup_ms / std::max(double(ms), 1e-3));
    for (int i = 0; i < int(std::min(runs, 10000.0)); ++i) run(next++);
  }
  SAGE_CU(cuStreamSynchronize(stream_));
  std::vector<double> samples;
  double total = 0;
  for (int i = 0; i < o.max_samples; ++i) {
    if (o.flush_l2) flush_l2();
    SAGE_CU(cuEventRecord(start_, stream_));
    run(next + i);
    SAGE_CU(cuEventRecord(stop_, stream_));
    SAGE_CU(cuEventSynchronize(stop_));
    float ms = 0;
    SAGE_CU(cuEventElapsedTime(&ms, start_, stop_));
    samples.push_back(ms);
    total += ms;
    const int n = int(samples.size());
    if (o.abandon_above_ms > 0 && n >= std::max(3, o.min_samples / 2)) {
      if (summarize(samples).median_ms > o.abandon_above_ms) {
        TimingResult r = summarize(samples);
        r.abandoned = true;
        return r;
      }
    }
    if (n >= o.min_samples && total / 1e3 >= o.max_seconds) break;
  }
  return summarize(samples);
}

}  // namespace sage::tuner
