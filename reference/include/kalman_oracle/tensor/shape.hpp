// Shapes of row-major tensors (docs/math.md conventions: token-major [B, T, H, D], states
// [B, H, K, V]): the shape type, its text for messages, and its element count.
#pragma once

#include <cstddef>
#include <sstream>
#include <string>
#include <vector>

namespace kalman_oracle {

using shape_t = std::vector<std::size_t>;

inline std::string to_string(const shape_t& shape) {
  std::ostringstream os;
  os << '[';
  for (std::size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << ']';
  return os.str();
}

inline std::size_t element_count(const shape_t& shape) {
  std::size_t n = 1;
  for (std::size_t d : shape) n *= d;
  return n;
}

}  // namespace kalman_oracle
