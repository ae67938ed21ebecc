// The query scale tau of the readout o_t = S_t^T (tau q_t) (docs/math.md §2, §7), one rule for every
// model. Default: fla's 1/sqrt(K), computed as fla does for IEEE types (Python's K ** -0.5 in
// binary64, then the dtype), correctly rounded in MPFR (mpfr_rec_sqrt), exactly over rationals when
// K is a perfect square; otherwise exact types need tau given. A given tau must be finite and > 0.
#pragma once

#include <cmath>
#include <optional>
#include <sstream>
#include <string>
#include <type_traits>

#include "kalman_oracle/scalar/traits.hpp"
#include "kalman_oracle/tensor/input_error.hpp"

namespace kalman_oracle {

template <class T>
T query_scale(const std::optional<T>& given, std::size_t key_dim) {
  if (given) {
    if (!scalar_traits<T>::is_finite(*given) || !(*given > 0)) {
      std::ostringstream os;
      os << "scale: " << *given << "; rule: query scale tau must be finite and > 0";
      throw input_error(os.str());
    }
    return *given;
  }
  if constexpr (scalar_traits<T>::is_exact) {
    std::size_t root = 0;
    while ((root + 1) * (root + 1) <= key_dim) ++root;
    if (root * root != key_dim)
      throw input_error("scale: not given, and 1/sqrt(K) = 1/sqrt(" + std::to_string(key_dim) +
                        ") is irrational; rule: exact scalars need the query scale tau when K is not a perfect square");
    return T(1) / T(static_cast<long>(root));
  } else if constexpr (std::is_same_v<T, mpfr_real>) {
    T root_inverse;
    mpfr_rec_sqrt(root_inverse.backend().data(), T(static_cast<long>(key_dim)).backend().data(), MPFR_RNDN);
    return root_inverse;
  } else if constexpr (std::is_floating_point_v<T>) {
    return static_cast<T>(std::pow(static_cast<double>(key_dim), -0.5));
  } else {
    using std::sqrt;
    return T(1) / T(sqrt(T(static_cast<long>(key_dim))));
  }
}

}  // namespace kalman_oracle
