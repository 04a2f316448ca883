#include "support/gpu.h"

#include "sage/common/cuda_driver.h"

namespace sage::test {
std::string gpu_unavailable_reason() {
  std::string why;
  if (!cu::have_device(&why)) return why.empty() ? "no CUDA device" : why;
  return {};
}

int device_cc() {
  if (!gpu_unavailable_reason().empty()) return 0;
  const auto& a = cu::api();
  CUdevice d;
  if (a.cuDeviceGet(&d, 0) != CUDA_SUCCESS) return 0;
  int major = 0, minor = 0;
  a.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d);
  a.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d);
  return major * 10 + minor;
}
}  // namespace sage::test
