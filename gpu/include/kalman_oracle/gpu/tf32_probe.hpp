// The device's side of tf32_rn's claim (float_ops.cuh), for gpu/tests/tf32_rounding_gpu_test.cpp: the
// hardware's conversion cvt.rn.tf32.f32, which the tensor-core backward feeds its products with, gives
// the bits of tf32_rn_by_bits, which its twin computes on the host.
// Plain C++; the kernel is in gpu/src/tf32_probe.cu.
#pragma once

#include <cstdint>

namespace kalman_oracle::gpu {

/// Over every binary32 bit pattern but NaNs (2^32 − 2^24 + 2 values): how many have tf32_rn (the
/// device's cvt.rn.tf32.f32) different from tf32_rn_by_bits; `first_bad` the first one's bits, or -1.
std::uint64_t device_tf32_mismatches(long long& first_bad);

}  // namespace kalman_oracle::gpu
