// Device memory for the host-pointer launchers (kla_forward_host, kla_backward_host): uploads of
// strided inputs and float tensors, outputs poisoned with NaN, everything freed together (private to
// gpu/src).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <initializer_list>
#include <vector>

#include "cuda_check.hpp"
#include "kalman_oracle/gpu/input_element.cuh"
#include "kalman_oracle/gpu/strided_input.cuh"

namespace kalman_oracle::gpu {

class device_arena {
 public:
  device_arena() = default;
  device_arena(const device_arena&) = delete;
  device_arena& operator=(const device_arena&) = delete;
  ~device_arena() {
    for (void* block : blocks_) cudaFree(block);
  }

  /// At least `bytes` bytes (4 when `bytes` is 0, so that every pointer is a real one).
  void* allocate(std::size_t bytes) {
    void* block = nullptr;
    check_cuda(cudaMalloc(&block, std::max<std::size_t>(bytes, 4)), "cudaMalloc");
    blocks_.push_back(block);
    return block;
  }

  /// The elements of `x` that its strides reach over the full shape `dims`, copied to the device;
  /// the same view of them there. A null `x` stays null.
  strided_input upload(const strided_input& x, std::initializer_list<long long> dims, input_dtype dtype) {
    if (x.data == nullptr) return x;
    long long last = 0, axis = 0;
    for (const long long d : dims) last += x.stride[axis++] * (d > 0 ? d - 1 : 0);
    const std::size_t bytes = static_cast<std::size_t>(last + 1) * (dtype == input_dtype::f32 ? 4 : 2);
    strided_input on_device = x;
    on_device.data = allocate(bytes);
    check_cuda(cudaMemcpy(const_cast<void*>(on_device.data), x.data, bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
    return on_device;
  }

  /// `count` floats copied to the device (null when `x` is null), `shift` floats past the start of an
  /// allocation (cudaMalloc's: 256-byte aligned; a shift not a multiple of 4 gives a pointer that is not
  /// 16-byte aligned, as a caller's view into a larger tensor may be).
  const float* upload(const float* x, long long count, int shift = 0) {
    if (x == nullptr) return nullptr;
    float* block = static_cast<float*>(allocate(static_cast<std::size_t>(count + shift) * sizeof(float))) + shift;
    if (count > 0)
      check_cuda(cudaMemcpy(block, x, static_cast<std::size_t>(count) * sizeof(float), cudaMemcpyHostToDevice),
                 "cudaMemcpy");
    return block;
  }

  /// `count` floats, every bit set (NaN): an output a kernel fails to write stays NaN.
  float* poisoned(long long count) {
    const std::size_t bytes = std::max<std::size_t>(static_cast<std::size_t>(count) * sizeof(float), 4);
    void* block = allocate(bytes);
    check_cuda(cudaMemset(block, 0xff, bytes), "cudaMemset");
    return static_cast<float*>(block);
  }

  /// Copies `count` floats back to the host.
  static void download(float* to, const float* from, long long count) {
    if (count > 0)
      check_cuda(cudaMemcpy(to, from, static_cast<std::size_t>(count) * sizeof(float), cudaMemcpyDeviceToHost),
                 "cudaMemcpy");
  }

 private:
  std::vector<void*> blocks_;
};

}  // namespace kalman_oracle::gpu
