#include "sage/internal/green.h"

#include "sage/common/cuda_driver.h"
#include "sage/common/error.h"
#include "sage/common/strings.h"

namespace sage {

GreenPartition::GreenPartition(int sms) {
  const cu::Api& a = cu::api();
  if (!a.cuDeviceGetDevResource || !a.cuDevSmResourceSplitByCount || !a.cuDevResourceGenerateDesc ||
      !a.cuGreenCtxCreate || !a.cuGreenCtxDestroy || !a.cuGreenCtxStreamCreate || !a.cuCtxFromGreenCtx ||
      !a.cuStreamGetCtx_v2)
    throw Error(Errc::unsupported, "green contexts (a partition of the SMs) need a CUDA 12.5 driver or newer");
  CUdevice dev = 0;
  SAGE_CU(cuCtxGetDevice(&dev));
  CUdevResource all{};
  SAGE_CU(cuDeviceGetDevResource(dev, &all, CU_DEV_RESOURCE_TYPE_SM));
  if (sms < 1 || unsigned(sms) > all.sm.smCount)
    throw Error(Errc::invalid_argument, cat("a partition of ", sms, " SMs: this GPU has ", all.sm.smCount));
  CUdevResource part{}, rest{};
  unsigned groups = 1;
  SAGE_CU(cuDevSmResourceSplitByCount(&part, &groups, &all, &rest, 0, unsigned(sms)));
  if (groups < 1)
    throw Error(Errc::unsupported, cat("the driver made no partition of ", sms, " SMs (its smallest: ",
                                       all.sm.minSmPartitionSize, ", in steps of ", all.sm.smCoscheduledAlignment, ")"));
  CUdevResourceDesc desc = nullptr;
  SAGE_CU(cuDevResourceGenerateDesc(&desc, &part, 1));
  SAGE_CU(cuGreenCtxCreate(&green_, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM));
  try {
    SAGE_CU(cuGreenCtxStreamCreate(&stream_, green_, CU_STREAM_NON_BLOCKING, 0));
    SAGE_CU(cuCtxFromGreenCtx(&ctx_, green_));
  } catch (...) {
    if (stream_) a.cuStreamDestroy(stream_);
    a.cuGreenCtxDestroy(green_);
    throw;
  }
  sms_ = int(part.sm.smCount);
}

GreenPartition::~GreenPartition() {
  const cu::Api* a = cu::try_api();
  if (!a) return;
  if (stream_) a->cuStreamDestroy(stream_);
  if (green_) a->cuGreenCtxDestroy(green_);
}

}  // namespace sage
