// The require_* checks of inputs, shared by every model. Each failure throws input_error with a
// message that names the tensor, the index and the rule broken, e.g.
//   "r: element [0, 3, 1] is -0.5; rule: observation noise must be > 0"
#pragma once

#include <sstream>
#include <string>

#include "kalman_oracle/scalar/traits.hpp"
#include "kalman_oracle/tensor/input_error.hpp"
#include "kalman_oracle/tensor/shape.hpp"
#include "kalman_oracle/tensor/tensor.hpp"

namespace kalman_oracle {

/// The tensor's shape must be exactly `expected`.
template <class T>
void require_shape(const tensor<T>& x, const shape_t& expected) {
  if (x.shape() != expected)
    throw input_error(x.name() + ": shape " + to_string(x.shape()) + ", expected " + to_string(expected));
}

/// Every element satisfies `ok`; the first one that does not is reported with `rule`.
template <class T, class Predicate>
void require_each(const tensor<T>& x, Predicate ok, const std::string& rule) {
  for (std::size_t i = 0; i < x.size(); ++i) {
    const T& v = x.data()[i];
    if (!scalar_traits<T>::is_finite(v) || !ok(v)) {
      std::ostringstream os;
      os << x.name() << ": element " << to_string(x.index_of(i)) << " is " << v
         << "; rule: " << (scalar_traits<T>::is_finite(v) ? rule : "must be finite (no NaN or infinity)");
      throw input_error(os.str());
    }
  }
}

template <class T>
void require_finite(const tensor<T>& x) {
  require_each(
      x, [](const T&) { return true; }, "must be finite");
}
template <class T>
void require_positive(const tensor<T>& x, const std::string& what) {
  require_each(
      x, [](const T& v) { return v > 0; }, what + " must be > 0");
}
template <class T>
void require_nonnegative(const tensor<T>& x, const std::string& what) {
  require_each(
      x, [](const T& v) { return v >= 0; }, what + " must be >= 0");
}

/// The sequence axis must not be empty (T = 0 has no outputs to certify).
inline void require_tokens(const std::string& name, std::size_t tokens) {
  if (tokens == 0) throw input_error(name + ": T = 0 tokens; rule: a sequence needs at least one token");
}

}  // namespace kalman_oracle
