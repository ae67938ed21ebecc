// How values sit in a safetensors data buffer: little-endian, row-major, element_count(shape) ×
// dtype_size bytes per tensor (safetensors README, "Format"); and the exact widening of the narrow
// IEEE 754 patterns (binary16, bfloat16, binary32) to double.
#pragma once

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "kalman_oracle/io/safetensors/dtype.hpp"
#include "kalman_oracle/tensor/shape.hpp"

namespace kalman_oracle::safetensors {

namespace detail {

/// element_count(shape) * dtype_size(t), or nullopt when it overflows 64 bits. The product is
/// folded left to right as the reference Rust implementation does (checked_mul per axis), so
/// [2^32, 2^32, 0] overflows there and here alike, while [0, 2^32, 2^32] holds no element.
inline std::optional<std::uint64_t> checked_byte_count(const shape_t& shape, dtype t) {
  std::uint64_t n = 1;
  for (std::size_t d : shape)
    if (__builtin_mul_overflow(n, static_cast<std::uint64_t>(d), &n)) return std::nullopt;
  if (__builtin_mul_overflow(n, static_cast<std::uint64_t>(dtype_size(t)), &n)) return std::nullopt;
  return n;
}

template <class U>
U load_le(const std::uint8_t* p) {
  U v = 0;
  for (std::size_t i = 0; i < sizeof(U); ++i) v |= static_cast<U>(static_cast<U>(p[i]) << (8 * i));
  return v;
}

template <class U>
void store_le(std::vector<std::uint8_t>& out, U v) {
  for (std::size_t i = 0; i < sizeof(U); ++i) out.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
}

/// The exact double of an IEEE 754 binary pattern with `fraction_bits` trailing significand bits
/// and `exponent_bits` exponent bits (binary16, bfloat16, binary32: all of them widen exactly,
/// their subnormals included, since double has more precision and range). A NaN keeps its sign and
/// its payload, moved to the top of double's fraction as a hardware widening does, but without
/// quieting a signalling NaN: the bits are data here, not an operand.
inline double binary_bits_to_double(std::uint32_t bits, int fraction_bits, int exponent_bits) {
  const std::uint32_t exponent_mask = (std::uint32_t{1} << exponent_bits) - 1;
  const bool negative = ((bits >> (fraction_bits + exponent_bits)) & 1) != 0;
  const std::uint32_t biased = (bits >> fraction_bits) & exponent_mask;
  const std::uint32_t fraction = bits & ((std::uint32_t{1} << fraction_bits) - 1);
  const std::uint64_t sign = negative ? std::uint64_t{1} << 63 : 0;
  if (biased == exponent_mask)  // inf (fraction 0) or NaN
    return std::bit_cast<double>(sign | (std::uint64_t{0x7FF} << 52) |
                                 (static_cast<std::uint64_t>(fraction) << (52 - fraction_bits)));
  if (biased == 0 && fraction == 0) return std::bit_cast<double>(sign);  // +-0
  // Normal: (2^f + fraction) 2^(biased - bias - f); subnormal: fraction 2^(1 - bias - f).
  const int bias = static_cast<int>(exponent_mask >> 1);
  const std::uint32_t significand = biased == 0 ? fraction : fraction | (std::uint32_t{1} << fraction_bits);
  const int exponent = (biased == 0 ? 1 : static_cast<int>(biased)) - bias - fraction_bits;
  const double magnitude = std::ldexp(static_cast<double>(significand), exponent);  // exact: a power-of-two scaling
  return negative ? -magnitude : magnitude;
}

}  // namespace detail

}  // namespace kalman_oracle::safetensors
