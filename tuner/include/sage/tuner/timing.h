// GPU timing with CUDA events (METHOD.md): warm-up, L2 flushed before every sample, inputs
// rotated by the caller, median and spread over at least `min_samples`, and an early stop
// for a candidate that is clearly slower than the best so far.
#pragma once
#include <cuda.h>

#include <functional>
#include <string>
#include <vector>

#include "sage/internal/device_buffer.h"

namespace sage::tuner {

struct TimingOptions {
  int warmup = 2;
  // Then warm up for at least this long too (the run count from the first run's time): a GPU
  // that has been idle (a first call, a cooldown) needs milliseconds to raise its clocks, so
  // a short kernel's first samples would be timed while they ramp up. 0: the count alone.
  double warmup_ms = 0;
  int min_samples = 10;
  int max_samples = 30;
  double max_seconds = 2.0;  // stop sampling after this much measured time (past min_samples)
  bool flush_l2 = true;
  // Early stop: after min_samples/2 samples, give up when the running median is worse than
  // this many milliseconds (0: never). The tuner passes best * (1 + margin).
  double abandon_above_ms = 0;
};

struct TimingResult {
  double median_ms = 0, p10_ms = 0, p90_ms = 0, min_ms = 0;
  int samples = 0;
  bool abandoned = false;  // stopped early as clearly slower
  double spread() const { return median_ms > 0 ? (p90_ms - p10_ms) / median_ms : 0; }  // relative
  std::string str() const;
};

// Summary statistics of a set of samples (milliseconds).
TimingResult summarize(std::vector<double> samples_ms);

class Timer {
 public:
  explicit Timer(CUstream stream);
  ~Timer();
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;
  // Times `run(sample_index)` (which enqueues work on the stream).
  TimingResult time(const std::function<void(int)>& run, const TimingOptions& opts = {});
  CUstream stream() const { return stream_; }

 private:
  void flush_l2();
  CUstream stream_;
  CUevent start_ = nullptr, stop_ = nullptr;
  DeviceBuffer scratch_;  // twice the L2 size, overwritten before each sample
};

}  // namespace sage::tuner
