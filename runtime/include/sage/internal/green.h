// A green context: a partition of the GPU's SMs with a stream of its own. Internal header.
#pragma once
#include <cuda.h>

namespace sage {

// A green context of at least `sms` SMs of the current context's device (the driver rounds the
// count up to its granularity: 8 SMs on Hopper) and a non-blocking stream of it. Work on
// stream() runs on those SMs only; memory and modules of the device's primary context serve it.
// What `sage-tune bench --sms` runs on, and the GPU tests' partitions. Throws Error(unsupported)
// where the driver has no green contexts (before CUDA 12.5), Error(invalid_argument) for a count
// outside 1 .. the device's SMs.
class GreenPartition {
 public:
  explicit GreenPartition(int sms);
  ~GreenPartition();
  GreenPartition(const GreenPartition&) = delete;
  GreenPartition& operator=(const GreenPartition&) = delete;

  int sms() const { return sms_; }                // the partition's SMs, as the driver made it
  CUstream stream() const { return stream_; }
  CUcontext context() const { return ctx_; }      // the green context as a CUcontext (to make current)

 private:
  CUgreenCtx green_ = nullptr;
  CUstream stream_ = nullptr;
  CUcontext ctx_ = nullptr;
  int sms_ = 0;
};

}  // namespace sage
