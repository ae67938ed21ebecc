// Tensor entries from values (binary64, binary32, raw 16-bit float patterns, integers) and values
// from entries: every element as an exact double, or an integer tensor as int64s.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "kalman_oracle/io/safetensors/dtype.hpp"
#include "kalman_oracle/io/safetensors/encoding.hpp"
#include "kalman_oracle/io/safetensors/file.hpp"
#include "kalman_oracle/io/safetensors/format_error.hpp"
#include "kalman_oracle/tensor/input_error.hpp"
#include "kalman_oracle/tensor/shape.hpp"

namespace kalman_oracle::safetensors {

namespace detail {
template <class U, class T>
tensor_entry make_entry(std::string name, dtype type, shape_t shape, std::span<const T> values) {
  const auto need = checked_byte_count(shape, type);
  if (!need || *need / dtype_size(type) != values.size())
    throw input_error(name + ": shape " + to_string(shape) + " holds " +
                      (need ? std::to_string(*need / dtype_size(type)) : std::string("too many")) + " elements, got " +
                      std::to_string(values.size()));
  tensor_entry t{std::move(name), type, std::move(shape), {}};
  t.bytes.reserve(*need);
  for (const T& v : values) store_le<U>(t.bytes, std::bit_cast<U>(v));
  return t;
}
}  // namespace detail

inline tensor_entry make_f64(std::string name, shape_t shape, std::span<const double> values) {
  return detail::make_entry<std::uint64_t>(std::move(name), dtype::f64, std::move(shape), values);
}
inline tensor_entry make_f32(std::string name, shape_t shape, std::span<const float> values) {
  return detail::make_entry<std::uint32_t>(std::move(name), dtype::f32, std::move(shape), values);
}
/// Raw binary16 or bfloat16 patterns (the rounding to them is rounding.hpp's job).
inline tensor_entry make_bits16(std::string name, dtype type, shape_t shape, std::span<const std::uint16_t> bits) {
  if (type != dtype::f16 && type != dtype::bf16)
    throw input_error(name + ": make_bits16 takes F16 or BF16, got " + std::string(dtype_name(type)));
  return detail::make_entry<std::uint16_t>(std::move(name), type, std::move(shape), bits);
}
inline tensor_entry make_i64(std::string name, shape_t shape, std::span<const std::int64_t> values) {
  return detail::make_entry<std::uint64_t>(std::move(name), dtype::i64, std::move(shape), values);
}
inline tensor_entry make_i8(std::string name, shape_t shape, std::span<const std::int8_t> values) {
  return detail::make_entry<std::uint8_t>(std::move(name), dtype::i8, std::move(shape), values);
}

/// The exact value of an IEEE 754 binary16 pattern.
inline double half_to_double(std::uint16_t bits) { return detail::binary_bits_to_double(bits, 10, 5); }
/// The exact value of a bfloat16 pattern (binary32's top half).
inline double bfloat16_to_double(std::uint16_t bits) { return detail::binary_bits_to_double(bits, 7, 8); }

/// Every element as a double: exact for the float dtypes (subnormals, infinities, -0 and NaN
/// payloads kept) and for integers a double holds; an I64 element it does not (|v| > 2^53 and not
/// a multiple of the spacing there) is a format_error naming the tensor and the element.
inline std::vector<double> to_doubles(const tensor_entry& t) {
  const std::string p = "tensor " + detail::quote_name(t.name) + ": ";
  detail::require_byte_count(t, p);
  const std::size_t n = t.bytes.size() / dtype_size(t.type);
  const std::uint8_t* b = t.bytes.data();
  std::vector<double> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    switch (t.type) {
      case dtype::f64: out[i] = std::bit_cast<double>(detail::load_le<std::uint64_t>(b + 8 * i)); break;
      case dtype::f32: out[i] = detail::binary_bits_to_double(detail::load_le<std::uint32_t>(b + 4 * i), 23, 8); break;
      case dtype::f16: out[i] = half_to_double(detail::load_le<std::uint16_t>(b + 2 * i)); break;
      case dtype::bf16: out[i] = bfloat16_to_double(detail::load_le<std::uint16_t>(b + 2 * i)); break;
      case dtype::i64: {
        const auto v = std::bit_cast<std::int64_t>(detail::load_le<std::uint64_t>(b + 8 * i));
        const auto d = static_cast<double>(v);  // rounds when |v| > 2^53
        // 2^63 itself is out of int64's range: the cast back is only defined below it.
        if (d >= 9223372036854775808.0 || static_cast<std::int64_t>(d) != v)
          throw format_error(p + "I64 element " + detail::index_string(t.shape, i) + " is " + std::to_string(v) +
                             ", which a double cannot hold exactly");
        out[i] = d;
        break;
      }
      case dtype::i32: out[i] = std::bit_cast<std::int32_t>(detail::load_le<std::uint32_t>(b + 4 * i)); break;
      case dtype::i8: out[i] = static_cast<std::int8_t>(b[i]); break;
      case dtype::u8: out[i] = b[i]; break;
    }
  }
  return out;
}

/// Every element of an integer tensor (I64, I32, I8, U8) as an int64; a float dtype is a
/// format_error (no silent truncation of a value that was meant as a real).
inline std::vector<std::int64_t> to_int64s(const tensor_entry& t) {
  const std::string p = "tensor " + detail::quote_name(t.name) + ": ";
  switch (t.type) {
    case dtype::f64:
    case dtype::f32:
    case dtype::f16:
    case dtype::bf16:
      throw format_error(p + "dtype " + std::string(dtype_name(t.type)) +
                         " is a floating-point type; integers are read from I64, I32, I8 or U8");
    default: break;
  }
  detail::require_byte_count(t, p);
  const std::size_t n = t.bytes.size() / dtype_size(t.type);
  const std::uint8_t* b = t.bytes.data();
  std::vector<std::int64_t> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    switch (t.type) {
      case dtype::i64: out[i] = std::bit_cast<std::int64_t>(detail::load_le<std::uint64_t>(b + 8 * i)); break;
      case dtype::i32: out[i] = std::bit_cast<std::int32_t>(detail::load_le<std::uint32_t>(b + 4 * i)); break;
      case dtype::i8: out[i] = static_cast<std::int8_t>(b[i]); break;
      default: out[i] = b[i]; break;  // u8
    }
  }
  return out;
}

}  // namespace kalman_oracle::safetensors
