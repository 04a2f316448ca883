// What decides and supplies a bucket's kernel. Each build links exactly one provider:
// src/jit/ (databases, defaults, NVRTC) or src/static/ (the exported table). Private to the
// runtime's sources.
#pragma once
#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "sage/internal/runtime.h"

namespace sage::rt::provider {

// The device behind the caller's context, as selection sees it.
struct Device {
  CUcontext ctx = nullptr;
  CUdevice dev = 0;  // the driver's device handle, which is its ordinal
  int cc = 0;        // 80, 86, 89, 90...
  std::string name;
  int sms = 0;  // its SMs
};

// A chosen kernel and its cubin.
struct Resolved {
  Selection selection;        // config, variant, source, timings so far
  std::string cubin_storage;  // owns the cubin when it came from a database or the compiler
  const char* cubin = nullptr;  // the cubin (into cubin_storage or a static array)
  std::size_t cubin_size = 0;
};

// Bucket boundaries of this build (constant for the process).
const Buckets& buckets();
// Throws Error(not_in_build) when this build can never serve `key` (a static build whose
// table lacks the bucket). Called before the device is touched.
void precheck(const BucketKey& key);
// Chooses and obtains the kernel for `key` on `dev` (whose context is current). `p` is the
// call that asked (for messages). Throws Error: unsupported, not_in_build, jit_disabled,
// compile_failed, io_error...
Resolved resolve(const BucketKey& key, const AttnProblem& p, const Device& dev);
// NVRTC compiles this process ran (0 in static builds).
std::uint64_t compile_count();
// Drops database handles and counters (rt::reset()).
void reset();
// "JIT" or "static", for messages.
const char* kind();

}  // namespace sage::rt::provider
