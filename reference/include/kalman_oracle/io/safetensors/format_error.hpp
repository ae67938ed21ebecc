// The one exception of the safetensors reader and writer, and the helpers that give every message
// the same shape: "<source>: tensor '<name>': <the rule broken>".
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "kalman_oracle/tensor/input_error.hpp"
#include "kalman_oracle/tensor/shape.hpp"

namespace kalman_oracle::safetensors {

/// Thrown for any malformed file; the message names the source (file path or label), the tensor
/// where there is one, and the rule broken, e.g.
/// "cand.safetensors: tensor 'o': data_offsets [0, 12] hold 12 bytes, but F32 [2, 2] needs 16"
class format_error : public input_error {
 public:
  using input_error::input_error;
};

namespace detail {

inline std::string quote_name(std::string_view name) {
  // Built by appending: GCC 12 misreads "'" + std::string(name) as a copy of ~2^63 bytes when it is
  // inlined into some callers (a false -Wstringop-overflow).
  std::string quoted;
  quoted.reserve(name.size() + 2);
  quoted.append(1, '\'').append(name).append(1, '\'');
  return quoted;
}

/// "<source>: tensor 'x': " -- the prefix of every message about one tensor.
inline std::string tensor_prefix(std::string_view source, std::string_view name) {
  return std::string(source) + ": tensor " + quote_name(name) + ": ";
}

/// The row-major multi-index of a flat offset, for messages.
inline std::string index_string(const shape_t& shape, std::size_t flat) {
  shape_t idx(shape.size());
  for (std::size_t axis = shape.size(); axis-- > 0;) {
    idx[axis] = shape[axis] ? flat % shape[axis] : 0;
    if (shape[axis]) flat /= shape[axis];
  }
  return to_string(idx);
}

}  // namespace detail

}  // namespace kalman_oracle::safetensors
