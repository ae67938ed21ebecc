// The kernel of tf32_probe.hpp: cvt.rn.tf32.f32 against the bit spelling, over every binary32.
#include <cuda_runtime.h>

#include "cuda_check.hpp"
#include "device_arena.hpp"
#include "kalman_oracle/gpu/float_ops.cuh"
#include "kalman_oracle/gpu/tf32_probe.hpp"

namespace kalman_oracle::gpu {
namespace {

/// Bit patterns high · 2^24 + (block, thread) for one value of `high` (the top 8 bits).
__global__ void tf32_sweep_kernel(unsigned high, unsigned long long* mismatches, long long* first_bad) {
  const unsigned low = blockIdx.x * blockDim.x + threadIdx.x;
  if (low >= (1u << 24)) return;
  const unsigned bits = (high << 24) | low;
  const float x = __uint_as_float(bits);
  if (x != x) return;  // NaN: a payload, not a value
  if (__float_as_uint(tf32_rn(x)) != __float_as_uint(tf32_rn_by_bits(x))) {
    atomicAdd(mismatches, 1ull);
    atomicMin(reinterpret_cast<unsigned long long*>(first_bad), static_cast<unsigned long long>(bits));
  }
}

}  // namespace

std::uint64_t device_tf32_mismatches(long long& first_bad) {
  device_arena arena;
  auto* counters = static_cast<unsigned long long*>(arena.allocate(2 * sizeof(unsigned long long)));
  const unsigned long long initial[2] = {0ull, ~0ull};
  check_cuda(cudaMemcpy(counters, initial, sizeof initial, cudaMemcpyHostToDevice), "cudaMemcpy");
  for (unsigned high = 0; high < 256; ++high)
    tf32_sweep_kernel<<<(1u << 24) / 256, 256>>>(high, counters, reinterpret_cast<long long*>(counters + 1));
  check_cuda(cudaGetLastError(), "tf32_sweep_kernel");
  unsigned long long result[2];
  check_cuda(cudaMemcpy(result, counters, sizeof result, cudaMemcpyDeviceToHost), "cudaMemcpy");
  first_bad = result[0] == 0 ? -1 : static_cast<long long>(result[1]);
  return result[0];
}

}  // namespace kalman_oracle::gpu
