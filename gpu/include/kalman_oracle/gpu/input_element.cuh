// Input elements a kernel reads: binary32, bfloat16 or binary16, each widened to binary32 exactly
// (every bfloat16 and binary16 value is a binary32 value), so that a kernel's arithmetic is binary32
// whatever its inputs (docs/kernels.md, "Inputs"). The widening is written once, with integer
// operations only, for host and device: kernel and twin read the same values.
#pragma once

#include <cstdint>

#include "kalman_oracle/gpu/float_ops.cuh"

namespace kalman_oracle::gpu {

/// The element types of a kernel's inputs (the safetensors dtypes F32, BF16, F16).
enum class input_dtype { f32, bf16, f16 };

/// A bfloat16 or binary16 value as its 16 stored bits (no CUDA header needed on the host).
struct bf16_bits {
  std::uint16_t bits;
};
struct f16_bits {
  std::uint16_t bits;
};

KALMAN_ORACLE_HD float float_from_bits(std::uint32_t bits) {
  float x;
  static_assert(sizeof(x) == sizeof(bits));
  __builtin_memcpy(&x, &bits, sizeof(x));
  return x;
}

KALMAN_ORACLE_HD float widen(float x) { return x; }

/// bfloat16 is the top half of a binary32: widening appends 16 zero bits.
KALMAN_ORACLE_HD float widen(bf16_bits x) { return float_from_bits(static_cast<std::uint32_t>(x.bits) << 16); }

/// binary16 (1 sign, 5 exponent, 10 fraction bits, bias 15) to binary32 (bias 127), exactly,
/// subnormals, infinities and NaNs included.
KALMAN_ORACLE_HD float widen(f16_bits x) {
  const std::uint32_t sign = static_cast<std::uint32_t>(x.bits & 0x8000u) << 16;
  std::uint32_t exponent = (x.bits >> 10) & 0x1fu;
  std::uint32_t fraction = x.bits & 0x3ffu;
  if (exponent == 0x1fu) return float_from_bits(sign | 0x7f800000u | (fraction << 13));  // inf, NaN
  if (exponent == 0) {
    if (fraction == 0) return float_from_bits(sign);  // ±0
    // Subnormal: fraction · 2^-24; normalise it (at most 10 shifts).
    exponent = 1;
    while ((fraction & 0x400u) == 0) {
      fraction <<= 1;
      --exponent;
    }
    fraction &= 0x3ffu;
  }
  return float_from_bits(sign | ((exponent + 112u) << 23) | (fraction << 13));
}

}  // namespace kalman_oracle::gpu
