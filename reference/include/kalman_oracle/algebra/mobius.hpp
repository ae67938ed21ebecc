// Möbius (fractional-linear) maps, docs/math.md §8.
//
// M = [[a, b], [c, d]] acts on x > 0 by x -> (a x + b) / (c x + d). Composition is the matrix
// product with the later map on the left, so Pi_t = M_t ... M_1 and x_t = Pi_t . x_0. M and c M
// (c != 0) act alike, which is what lets kernels rescale products (§8 fact 3).
#pragma once

#include <algorithm>
#include <ostream>
#include <stdexcept>
#include <string>

#include "kalman_oracle/detail/mutant.hpp"
#include "kalman_oracle/scalar/traits.hpp"

namespace kalman_oracle {

template <class T>
struct mobius {
  T a, b, c, d;  // [[a, b], [c, d]]
  friend bool operator==(const mobius&, const mobius&) = default;
  friend std::ostream& operator<<(std::ostream& os, const mobius& m) {
    return os << "[[" << m.a << ", " << m.b << "], [" << m.c << ", " << m.d << "]]";
  }
};

template <class T>
mobius<T> mobius_identity() {
  return {T(1), T(0), T(0), T(1)};
}

/// compose(later, earlier) = later * earlier (matrix product): first `earlier`, then `later`.
template <class T>
mobius<T> mobius_compose(const mobius<T>& later, const mobius<T>& earlier) {
  const mobius<T>& l = KALMAN_ORACLE_MUTANT(mobius_compose_commuted, later, earlier);
  const mobius<T>& e = KALMAN_ORACLE_MUTANT(mobius_compose_commuted, earlier, later);
  return {l.a * e.a + l.b * e.c, l.a * e.b + l.b * e.d,  //
          l.c * e.a + l.d * e.c, l.c * e.b + l.d * e.d};
}

/// The action x -> (a x + b) / (c x + d).
template <class T>
T mobius_apply(const mobius<T>& m, const T& x) {
  return (m.a * x + m.b) / (m.c * x + m.d);
}

template <class T>
T mobius_determinant(const mobius<T>& m) {
  return m.a * m.d - m.b * m.c;
}

/// s * M, entry by entry.
template <class T>
mobius<T> mobius_scale(const mobius<T>& m, const T& s) {
  return {KALMAN_ORACLE_MUTANT(mobius_rescale_one_entry, m.a * s, m.a), m.b * s, m.c * s, m.d * s};
}

/// How a product is normalised after a compose (§8 fact 3). Each choice is canonical: rescaling
/// c M and M (c > 0; for power_of_two, c a power of two) gives the same matrix, so schedules that
/// rescale at different places still agree exactly over exact arithmetic.
enum class rescale_mode {
  none,          // keep the raw product
  trace,         // divide by a + d (left alone if the trace is 0)
  max_entry,     // divide by the largest |entry| (left alone for the zero matrix)
  power_of_two,  // multiply by 2^-e, e the exponent of the largest |entry|: exact in binary formats
};

inline std::string to_string(rescale_mode mode) {
  switch (mode) {
    case rescale_mode::none: return "none";
    case rescale_mode::trace: return "trace";
    case rescale_mode::max_entry: return "max_entry";
    case rescale_mode::power_of_two: return "power_of_two";
  }
  throw std::invalid_argument("rescale_mode: unknown value");
}

template <class T>
T mobius_max_abs_entry(const mobius<T>& m) {
  using std::abs;
  return std::max({T(abs(m.a)), T(abs(m.b)), T(abs(m.c)), T(abs(m.d))});
}

/// Rescales M by a positive factor chosen by `mode`; the action is unchanged.
template <class T>
mobius<T> mobius_rescale(const mobius<T>& m, rescale_mode mode) {
  switch (mode) {
    case rescale_mode::none: return m;
    case rescale_mode::trace: {
      const T trace = m.a + m.d;
      if (trace == 0) return m;
      return mobius_scale(m, T(1) / trace);
    }
    case rescale_mode::max_entry: {
      const T largest = mobius_max_abs_entry(m);
      if (largest == 0) return m;
      return mobius_scale(m, T(1) / largest);
    }
    case rescale_mode::power_of_two: {
      const T largest = mobius_max_abs_entry(m);
      if (largest == 0) return m;
      const long e = scalar_traits<T>::exponent(largest);
      return mobius_scale(m, scalar_traits<T>::ldexp(T(1), -e));
    }
  }
  throw std::invalid_argument("mobius_rescale: unknown rescale_mode");
}

namespace detail {

/// The planted bug brent_kung_lossy_compose (see mobius_monoid): entry a multiplied by 1 + 2^-200, a
/// no-op in formats with fewer than 201 bits (binary64: 1 + 2^-200 rounds to 1), a change of the
/// map over rationals and in MPFR at 256 bits. Only the meta-test build evaluates it.
template <class T>
mobius<T> mobius_lossy(const mobius<T>& m) {
  mobius<T> nudged = m;
  nudged.a = m.a * (T(1) + scalar_traits<T>::ldexp(T(1), -200));
  return nudged;
}

}  // namespace detail

/// The Möbius monoid for the scans: compose, then rescale as chosen. (Planted bug
/// brent_kung_lossy_compose, named after the schedule it was first planted in; it lives here so
/// that scan/ knows nothing of Möbius maps: every compose's result off by a relative 2^-200 in one
/// entry. The schedules' rounding bound (docs/math.md, "Error bounds of the scans") holds for
/// correctly rounded composes only; the fold and the tree schedules associate the products
/// differently, so the nudges land on different partial products, and the schedules leave the
/// bound B_K <= 2^-241 (n <= 1000) of the fold by far: properties/scan_mpfr_within_bound.cpp.)
template <class T>
struct mobius_monoid {
  using value_type = mobius<T>;
  rescale_mode rescale = rescale_mode::none;
  value_type identity() const { return mobius_identity<T>(); }
  value_type compose(const value_type& later, const value_type& earlier) const {
    const value_type product = mobius_rescale(mobius_compose(later, earlier), rescale);
    return KALMAN_ORACLE_MUTANT(brent_kung_lossy_compose, product, detail::mobius_lossy(product));
  }
};

}  // namespace kalman_oracle
