// A safetensors file in memory: its tensors (name, dtype, shape, little-endian bytes) and its
// "__metadata__" strings, and the limits the reader and the writer share.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "kalman_oracle/io/safetensors/dtype.hpp"
#include "kalman_oracle/io/safetensors/encoding.hpp"
#include "kalman_oracle/io/safetensors/format_error.hpp"
#include "kalman_oracle/tensor/shape.hpp"

namespace kalman_oracle::safetensors {

struct tensor_entry {
  std::string name;
  dtype type = dtype::f64;
  shape_t shape;
  std::vector<std::uint8_t> bytes;  // little-endian, row-major, exactly element_count(shape)*dtype_size(type)

  friend bool operator==(const tensor_entry&, const tensor_entry&) = default;
};

/// The reference Rust implementation's limit: a header of at most 100 MB. This reader also caps the
/// rank: the models' tensors have a handful of axes ([B, T, H, D], states [B, H, K, V]); 16 leaves
/// room and bounds what a header can make the reader store per tensor.
inline constexpr std::uint64_t max_header_bytes = 100'000'000;
inline constexpr std::size_t max_rank = 16;

struct file {
  std::map<std::string, std::string> metadata;  // the "__metadata__" object (string -> string); may be empty
  std::vector<tensor_entry> tensors;  // any order in memory; written sorted by name (parse returns them sorted)

  const tensor_entry* find(std::string_view name) const {
    for (const tensor_entry& t : tensors)
      if (t.name == name) return &t;
    return nullptr;
  }
  const tensor_entry& at(std::string_view name, std::string_view source) const {
    if (const tensor_entry* t = find(name)) return *t;
    throw format_error(std::string(source) + ": no tensor " + detail::quote_name(name));
  }

  friend bool operator==(const file&, const file&) = default;
};

namespace detail {

/// bytes.size() must be the shape's element count times the dtype's size; `where` prefixes the message.
inline void require_byte_count(const tensor_entry& t, const std::string& where) {
  const auto need = checked_byte_count(t.shape, t.type);
  if (!need)
    throw format_error(where + std::string(dtype_name(t.type)) + " " + to_string(t.shape) +
                       ": the byte count overflows 64 bits");
  if (t.bytes.size() != *need)
    throw format_error(where + "holds " + std::to_string(t.bytes.size()) + " bytes, but " +
                       std::string(dtype_name(t.type)) + " " + to_string(t.shape) + " needs " + std::to_string(*need));
}

}  // namespace detail

}  // namespace kalman_oracle::safetensors
