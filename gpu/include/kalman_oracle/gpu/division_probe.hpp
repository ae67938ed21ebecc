// The device's side of division.cuh's claims, for gpu/tests/division_gpu_test.cpp: the kernels'
// reciprocal against rcp.rn.f32 over the whole range, and divide(x, d) against the device's IEEE
// division (div.rn.f32) on the same pairs.
// Plain C++; the kernels are in gpu/src/division_probe.cu.
#pragma once

#include <cstdint>
#include <vector>

namespace kalman_oracle::gpu {

/// Over every d with |d| in [2^-62, 2^63) (both signs, 2 · 125 · 2^23 values): how many have a
/// reciprocal_in_range different from rcp.rn.f32's RN(1/d); `first_bad` the first one's bits, or -1.
std::uint64_t device_reciprocal_mismatches_in_range(long long& first_bad);

/// The device's divide(x[i], d[i]) and div.rn.f32's x[i] / d[i] for each pair.
struct device_quotients {
  std::vector<float> divide, div_rn;
};
device_quotients device_quotients_of(const std::vector<float>& x, const std::vector<float>& d);

/// Over every divisor significand (d in [1, 2), all 2^23) and each of `dividends`: how many pairs
/// the device's divide and div.rn.f32 give different bits for; `first_bad` the first such pair's
/// index (dividend index + dividends.size() · divisor significand), or -1.
std::uint64_t device_divide_mismatches_over_significands(const std::vector<float>& dividends, long long& first_bad);

}  // namespace kalman_oracle::gpu
