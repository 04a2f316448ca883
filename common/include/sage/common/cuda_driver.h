// The CUDA driver API, loaded with dlopen at first use. Binaries therefore start (and
// report "no GPU") on machines without a driver, and nothing links libcuda at build time.
#pragma once
#include <cuda.h>

#include <string>

#include "sage/common/error.h"

namespace sage::cu {

#define SAGE_CU_FUNCTIONS(X)                                                              \
  X(cuInit) X(cuDriverGetVersion) X(cuDeviceGet) X(cuDeviceGetCount) X(cuDeviceGetName)   \
  X(cuDeviceGetAttribute) X(cuDeviceTotalMem) X(cuDeviceGetUuid) X(cuDeviceGetPCIBusId)   \
  X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease) X(cuDevicePrimaryCtxReset)     \
  X(cuDevicePrimaryCtxGetState) X(cuCtxSetCurrent)                                        \
  X(cuCtxGetCurrent) X(cuCtxGetDevice) X(cuCtxSynchronize) X(cuCtxPushCurrent)            \
  X(cuCtxPopCurrent) X(cuModuleLoadData) X(cuModuleLoadDataEx) X(cuModuleUnload)          \
  X(cuModuleGetFunction) X(cuModuleGetGlobal) X(cuFuncSetAttribute) X(cuFuncGetAttribute) \
  X(cuLaunchKernel) X(cuMemAlloc) X(cuMemFree) X(cuMemGetInfo) X(cuMemcpyHtoD)            \
  X(cuMemcpyDtoH) X(cuMemcpyDtoD) X(cuMemcpyHtoDAsync) X(cuMemcpyDtoHAsync)              \
  X(cuMemcpyDtoDAsync) X(cuMemsetD8Async) X(cuMemsetD32Async) X(cuMemsetD8)               \
  X(cuMemcpy2DAsync)                                                                      \
  X(cuMemAllocAsync) X(cuMemFreeAsync) X(cuStreamCreate) X(cuStreamDestroy)               \
  X(cuMemPoolCreate) X(cuMemPoolSetAttribute) X(cuMemAllocFromPoolAsync)                 \
  X(cuStreamSynchronize) X(cuStreamQuery) X(cuStreamGetCtx) X(cuEventCreate) X(cuEventDestroy) \
  X(cuEventRecord) X(cuEventSynchronize) X(cuEventElapsedTime) X(cuGetErrorName)          \
  X(cuGetErrorString) X(cuPointerGetAttribute) X(cuTensorMapEncodeTiled)                  \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessor) X(cuLaunchKernelEx)       \
  X(cuOccupancyMaxActiveClusters) X(cuStreamBeginCapture) X(cuStreamEndCapture)         \
  X(cuGraphInstantiate) X(cuGraphLaunch) X(cuGraphExecDestroy) X(cuGraphDestroy)          \
  X(cuThreadExchangeStreamCaptureMode)

// Functions of newer drivers, loaded where present (nullptr where not): green contexts (CUDA
// 12.4; cuStreamGetCtx_v2 12.5), whose streams run on a partition of the GPU's SMs; context
// IDs (12.0), which tell a primary context reset under the library from the one before;
// contexts of one's own (cuCtxCreate_v4, 12.5; for tests).
#define SAGE_CU_OPTIONAL_FUNCTIONS(X)                                                     \
  X(cuStreamGetCtx_v2) X(cuGreenCtxGetDevResource) X(cuCtxGetDevResource)                 \
  X(cuDeviceGetDevResource) X(cuDevSmResourceSplitByCount) X(cuDevResourceGenerateDesc)   \
  X(cuGreenCtxCreate) X(cuGreenCtxDestroy) X(cuGreenCtxStreamCreate) X(cuCtxFromGreenCtx)   \
  X(cuCtxGetId) X(cuCtxCreate) X(cuCtxDestroy)

struct Api {
#define SAGE_CU_MEMBER(fn) decltype(&::fn) fn = nullptr;
  SAGE_CU_FUNCTIONS(SAGE_CU_MEMBER)
  SAGE_CU_OPTIONAL_FUNCTIONS(SAGE_CU_MEMBER)
#undef SAGE_CU_MEMBER
};

// The loaded API, or nullptr when no driver is present (reason in *why if given).
const Api* try_api(std::string* why = nullptr);
// The loaded API; throws Error(no_device) when there is no driver.
const Api& api();
// True when a driver is present and at least one device is visible.
bool have_device(std::string* why = nullptr);

std::string error_string(CUresult r);
// Throws Error(cuda_error) naming the call when r != CUDA_SUCCESS.
void check(CUresult r, const char* call, const char* file, int line);

}  // namespace sage::cu

#define SAGE_CU(call) ::sage::cu::check(::sage::cu::api().call, #call, __FILE__, __LINE__)
