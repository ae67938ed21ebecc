// tf32_rn on the device (label `gpu`): the hardware's cvt.rn.tf32.f32, which the tf32 backward rounds
// its tensor-core operands with, gives the bits of tf32_rn_by_bits, which its twin computes on the host
// (and which CI checks against the reference's TF32 rounding), for every binary32 but NaNs.
#include <doctest/doctest.h>

#include <cstdio>

#include "kalman_oracle/gpu/tf32_probe.hpp"
#include "skip_without_device.hpp"

using namespace kalman_oracle::gpu;
using namespace kalman_oracle::gpu::testing;

TEST_SUITE("gpu") {
  TEST_CASE("gpu: cvt.rn.tf32.f32 equals tf32_rn_by_bits for every binary32") {
    if (skip_without_device()) return;
    long long first_bad = -1;
    const std::uint64_t wrong = device_tf32_mismatches(first_bad);
    CHECK_MESSAGE(wrong == 0, wrong << " values round differently, the first at bits " << first_bad);
    std::printf("gpu: cvt.rn.tf32.f32 == tf32_rn_by_bits for every non-NaN binary32 (2^32 - 2^24 + 2 values)\n");
  }
}
