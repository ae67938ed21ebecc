// The benchmarks' device buffers (docs/kernels.md, "Measured"): inputs filled from a cheap hash
// (gigabytes of inputs need no random engine), and the baseline every
// benchmark reports against, a device-to-device copy of the same bytes.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kalman_oracle/gpu/strided_input.cuh"
#include "timing.hpp"

namespace kalman_oracle::gpu::bench {

/// A value in [lo, hi) from a cheap hash of (i, salt).
inline float hashed(std::size_t i, unsigned salt, float lo, float hi) {
  const std::size_t h = (i * 2654435761u + salt * 40503u) ^ (i >> 13);
  return lo + (hi - lo) * static_cast<float>((h >> 5) % 100000) * 1e-5f;
}

/// `count` floats on the device, hashed(i, salt, lo, hi).
inline float* device_filled(std::size_t count, unsigned salt, float lo, float hi) {
  std::vector<float> host(count);
  for (std::size_t i = 0; i < count; ++i) host[i] = hashed(i, salt, lo, hi);
  float* ptr = nullptr;
  check(cudaMalloc(&ptr, count * sizeof(float)), "cudaMalloc");
  check(cudaMemcpy(ptr, host.data(), count * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy");
  return ptr;
}

/// Median milliseconds of a device-to-device copy moving `bytes` (half read, half written).
inline double copy_ms(std::size_t bytes, int repeats) {
  void *from = nullptr, *to = nullptr;
  check(cudaMalloc(&from, bytes / 2), "cudaMalloc");
  check(cudaMalloc(&to, bytes / 2), "cudaMalloc");
  check(cudaMemset(from, 0, bytes / 2), "cudaMemset");
  const double ms =
      median_ms(repeats, [&] { check(cudaMemcpyAsync(to, from, bytes / 2, cudaMemcpyDeviceToDevice), "copy"); });
  cudaFree(from);
  cudaFree(to);
  return ms;
}

/// `count` inputs in `dtype` on the device (bfloat16 by truncating the hashed binary32 values).
inline void* device_inputs(std::size_t count, unsigned salt, float lo, float hi, input_dtype dtype) {
  if (dtype == input_dtype::f32) return device_filled(count, salt, lo, hi);
  std::vector<std::uint16_t> host(count);
  for (std::size_t i = 0; i < count; ++i) {
    const float x = hashed(i, salt, lo, hi);
    std::uint32_t bits;
    std::memcpy(&bits, &x, 4);
    host[i] = static_cast<std::uint16_t>(bits >> 16);
  }
  void* ptr = nullptr;
  check(cudaMalloc(&ptr, count * 2), "cudaMalloc");
  check(cudaMemcpy(ptr, host.data(), count * 2, cudaMemcpyHostToDevice), "cudaMemcpy");
  return ptr;
}

}  // namespace kalman_oracle::gpu::bench
