#include "sage/internal/device_buffer.h"

#include "sage/common/cuda_driver.h"
#include "sage/common/strings.h"

namespace sage {

DeviceBuffer::DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
  if (bytes == 0) return;
  SAGE_CU(cuMemAlloc(&ptr_, bytes));
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_)
    if (const cu::Api* a = cu::try_api()) a->cuMemFree(ptr_);
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_)
      if (const cu::Api* a = cu::try_api()) a->cuMemFree(ptr_);
    ptr_ = std::exchange(o.ptr_, 0);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

// The copies and the memset below run on the legacy default stream, which does not order
// with non-blocking streams: each one waits for the whole context before and after, so that
// it is complete (and nothing else is in flight on the buffer) when it returns.
void DeviceBuffer::upload(const void* src, std::size_t bytes) {
  if (bytes > bytes_) throw Error(Errc::invalid_argument, cat("upload of ", bytes, " bytes into a buffer of ", bytes_));
  if (!bytes) return;
  SAGE_CU(cuCtxSynchronize());
  SAGE_CU(cuMemcpyHtoD(ptr_, src, bytes));
  SAGE_CU(cuCtxSynchronize());
}

void DeviceBuffer::download(void* dst, std::size_t bytes) const {
  if (bytes > bytes_) throw Error(Errc::invalid_argument, cat("download of ", bytes, " bytes from a buffer of ", bytes_));
  if (!bytes) return;
  SAGE_CU(cuCtxSynchronize());
  SAGE_CU(cuMemcpyDtoH(dst, ptr_, bytes));
}

void DeviceBuffer::fill_bytes(unsigned char value) {
  if (!bytes_) return;
  SAGE_CU(cuCtxSynchronize());
  SAGE_CU(cuMemsetD8(ptr_, value, bytes_));
  SAGE_CU(cuCtxSynchronize());
}

}  // namespace sage
