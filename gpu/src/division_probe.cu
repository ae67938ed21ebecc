// Kernels for division.cuh's device test (include/kalman_oracle/gpu/division_probe.hpp).
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "device_arena.hpp"
#include "kalman_oracle/gpu/division.cuh"
#include "kalman_oracle/gpu/division_probe.hpp"

namespace kalman_oracle::gpu {
namespace {

__global__ void quotients_kernel(const float* x, const float* d, float* by_divide, float* by_div_rn, long long n) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  by_divide[i] = divide(x[i], d[i]);
  by_div_rn[i] = __fdiv_rn(x[i], d[i]);
}

__global__ void significand_sweep_kernel(const float* dividends, int count, unsigned long long* mismatches,
                                         long long* first_bad) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= (static_cast<long long>(count) << 23)) return;
  const float x = dividends[i % count];
  const float d = __uint_as_float(0x3f800000u | static_cast<unsigned>(i / count));
  if (__float_as_uint(divide(x, d)) != __float_as_uint(__fdiv_rn(x, d))) {
    atomicAdd(mismatches, 1ull);
    atomicMin(reinterpret_cast<unsigned long long*>(first_bad), static_cast<unsigned long long>(i));
  }
}

/// Every d with exponent field `field` (both signs): the device's reciprocal_in_range against rcp.rn.f32.
__global__ void reciprocal_sweep_kernel(unsigned field, unsigned long long* mismatches, long long* first_bad) {
  const unsigned significand = blockIdx.x * blockDim.x + threadIdx.x;
  if (significand >= (1u << 23)) return;
  for (unsigned sign = 0; sign < 2; ++sign) {
    const unsigned bits = (sign << 31) | (field << 23) | significand;
    const float d = __uint_as_float(bits);
    if (__float_as_uint(reciprocal_in_range(d)) != __float_as_uint(__frcp_rn(d))) {
      atomicAdd(mismatches, 1ull);
      atomicMin(reinterpret_cast<unsigned long long*>(first_bad), static_cast<unsigned long long>(bits));
    }
  }
}

}  // namespace

std::uint64_t device_reciprocal_mismatches_in_range(long long& first_bad) {
  device_arena arena;
  auto* counters = static_cast<unsigned long long*>(arena.allocate(2 * sizeof(unsigned long long)));
  const unsigned long long initial[2] = {0ull, ~0ull};
  check_cuda(cudaMemcpy(counters, initial, sizeof initial, cudaMemcpyHostToDevice), "cudaMemcpy");
  for (unsigned field = 65; field <= 189; ++field)
    reciprocal_sweep_kernel<<<(1u << 23) / 256, 256>>>(field, counters, reinterpret_cast<long long*>(counters + 1));
  check_cuda(cudaGetLastError(), "reciprocal_sweep_kernel");
  unsigned long long result[2];
  check_cuda(cudaMemcpy(result, counters, sizeof result, cudaMemcpyDeviceToHost), "cudaMemcpy");
  first_bad = result[0] == 0 ? -1 : static_cast<long long>(result[1]);
  return result[0];
}

device_quotients device_quotients_of(const std::vector<float>& x, const std::vector<float>& d) {
  if (x.size() != d.size())
    throw std::invalid_argument("device_quotients_of: x has " + std::to_string(x.size()) + " values and d " +
                                std::to_string(d.size()) + "; want equal counts");
  const auto n = static_cast<long long>(x.size());
  device_quotients out{std::vector<float>(x.size()), std::vector<float>(x.size())};
  if (n == 0) return out;
  device_arena arena;
  const float* on_x = arena.upload(x.data(), n);
  const float* on_d = arena.upload(d.data(), n);
  float* by_divide = arena.poisoned(n);
  float* by_div_rn = arena.poisoned(n);
  quotients_kernel<<<static_cast<unsigned>((n + 255) / 256), 256>>>(on_x, on_d, by_divide, by_div_rn, n);
  check_cuda(cudaGetLastError(), "quotients_kernel");
  check_cuda(cudaDeviceSynchronize(), "quotients_kernel");
  device_arena::download(out.divide.data(), by_divide, n);
  device_arena::download(out.div_rn.data(), by_div_rn, n);
  return out;
}

std::uint64_t device_divide_mismatches_over_significands(const std::vector<float>& dividends, long long& first_bad) {
  if (dividends.empty() || dividends.size() > 256)
    throw std::invalid_argument("device_divide_mismatches_over_significands: " + std::to_string(dividends.size()) +
                                " dividends; want 1 to 256");
  const int count = static_cast<int>(dividends.size());
  device_arena arena;
  const float* on_dividends = arena.upload(dividends.data(), count);
  auto* counters = static_cast<unsigned long long*>(arena.allocate(2 * sizeof(unsigned long long)));
  const unsigned long long initial[2] = {0ull, ~0ull};
  check_cuda(cudaMemcpy(counters, initial, sizeof initial, cudaMemcpyHostToDevice), "cudaMemcpy");
  const long long pairs = static_cast<long long>(count) << 23;
  significand_sweep_kernel<<<static_cast<unsigned>((pairs + 255) / 256), 256>>>(
      on_dividends, count, counters, reinterpret_cast<long long*>(counters + 1));
  check_cuda(cudaGetLastError(), "significand_sweep_kernel");
  unsigned long long result[2];
  check_cuda(cudaMemcpy(result, counters, sizeof result, cudaMemcpyDeviceToHost), "cudaMemcpy");
  first_bad = result[0] == 0 ? -1 : static_cast<long long>(result[1]);
  return result[0];
}

}  // namespace kalman_oracle::gpu
