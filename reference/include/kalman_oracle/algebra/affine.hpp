// Affine maps x -> alpha x + rho, docs/math.md §8 fact 5 (the KLA information-mean recursion, §6).
// Composition, later map on the left: (a2, r2) o (a1, r1) = (a2 a1, a2 r1 + r2).
#pragma once

#include <ostream>

#include "kalman_oracle/detail/mutant.hpp"

namespace kalman_oracle {

template <class T>
struct affine {
  T alpha, rho;
  friend bool operator==(const affine&, const affine&) = default;
  friend std::ostream& operator<<(std::ostream& os, const affine& m) {
    return os << "(alpha=" << m.alpha << ", rho=" << m.rho << ")";
  }
};

template <class T>
affine<T> affine_identity() {
  return {T(1), T(0)};
}

/// compose(later, earlier): first `earlier`, then `later`.
template <class T>
affine<T> affine_compose(const affine<T>& later, const affine<T>& earlier) {
  return {later.alpha * earlier.alpha,
          KALMAN_ORACLE_MUTANT(affine_compose_wrong_rho, later.alpha * earlier.rho + later.rho,
                               earlier.alpha * later.rho + earlier.rho)};
}

template <class T>
T affine_apply(const affine<T>& m, const T& x) {
  return m.alpha * x + m.rho;
}

/// The affine monoid for the scans. Affine maps have no rescaling freedom: c (alpha, rho) is a
/// different map.
template <class T>
struct affine_monoid {
  using value_type = affine<T>;
  value_type identity() const { return affine_identity<T>(); }
  value_type compose(const value_type& later, const value_type& earlier) const {
    return affine_compose(later, earlier);
  }
};

}  // namespace kalman_oracle
