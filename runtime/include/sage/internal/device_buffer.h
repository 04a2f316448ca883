// RAII device memory through the driver API. Internal header.
#pragma once
#include <cuda.h>

#include <cstddef>
#include <utility>
#include <vector>

namespace sage {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes);  // throws Error(cuda_error) on failure
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, 0)), bytes_(std::exchange(o.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* get() const { return reinterpret_cast<void*>(ptr_); }
  template <class T>
  T* as() const { return reinterpret_cast<T*>(ptr_); }
  CUdeviceptr dptr() const { return ptr_; }
  std::size_t size() const { return bytes_; }
  // upload, download and fill_bytes are synchronous with respect to every stream of the
  // context (they wait for all work before and after): for tests and set-up, not hot paths.
  void upload(const void* src, std::size_t bytes);
  void download(void* dst, std::size_t bytes) const;
  template <class T>
  std::vector<T> to_host(std::size_t count) const {
    std::vector<T> v(count);
    download(v.data(), count * sizeof(T));
    return v;
  }
  void fill_bytes(unsigned char value);  // synchronous memset

 private:
  CUdeviceptr ptr_ = 0;
  std::size_t bytes_ = 0;
};

}  // namespace sage
