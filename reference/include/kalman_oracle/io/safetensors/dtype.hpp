// The element types of a safetensors file this reader supports, their header names and sizes
// (safetensors README, "Format": the "dtype" field of a tensor).
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

namespace kalman_oracle::safetensors {

enum class dtype { f64, f32, f16, bf16, i64, i32, i8, u8 };

/// The dtype's name in a safetensors header.
inline std::string_view dtype_name(dtype t) {
  switch (t) {
    case dtype::f64: return "F64";
    case dtype::f32: return "F32";
    case dtype::f16: return "F16";
    case dtype::bf16: return "BF16";
    case dtype::i64: return "I64";
    case dtype::i32: return "I32";
    case dtype::i8: return "I8";
    case dtype::u8: return "U8";
  }
  return "?";
}

/// Bytes per element.
inline std::size_t dtype_size(dtype t) {
  switch (t) {
    case dtype::f64:
    case dtype::i64: return 8;
    case dtype::f32:
    case dtype::i32: return 4;
    case dtype::f16:
    case dtype::bf16: return 2;
    case dtype::i8:
    case dtype::u8: return 1;
  }
  return 0;
}

/// The dtype a header name denotes; nullopt for names this reader does not support (the format
/// also has BOOL, I16, U16, U32, U64 and the 8-bit floats, which no model here reads).
inline std::optional<dtype> parse_dtype(std::string_view name) {
  for (dtype t : {dtype::f64, dtype::f32, dtype::f16, dtype::bf16, dtype::i64, dtype::i32, dtype::i8, dtype::u8})
    if (dtype_name(t) == name) return t;
  return std::nullopt;
}

}  // namespace kalman_oracle::safetensors
