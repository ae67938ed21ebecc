// scalar_traits<T>: what generic code needs to know about a scalar type beyond its arithmetic.
//
//   is_exact        arithmetic is exact (rationals): unit roundoff 0, equality tests are exact
//   is_interval     values are enclosures (MPFI)
//   name()          for messages and reports
//   precision_bits  significand bits of new values, the implicit bit included; 0 when exact
//   unit_roundoff   u = 2^-p for rounding to nearest at precision p; 0 when exact
//   from_double     the exact value of a double (every type here holds binary64 values exactly,
//                   float excepted, which rounds)
//   to_double       nearest double (intervals: of the midpoint)
//   exponent(x)     e with 2^e <= |x| < 2^(e+1), for x != 0 (exact; used by power-of-two rescaling)
//   ldexp(x, e)     x * 2^e, exact unless it overflows or underflows the format
//   is_finite(x)    neither NaN nor infinite (always true for rationals)
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>

#include "kalman_oracle/scalar/precision_scope.hpp"
#include "kalman_oracle/scalar/types.hpp"

namespace kalman_oracle {

template <class T>
struct scalar_traits;  // specialised below for every supported scalar type

namespace detail {
template <class F>
struct ieee_traits {
  static constexpr bool is_exact = false;
  static constexpr bool is_interval = false;
  static unsigned precision_bits() { return std::numeric_limits<F>::digits; }
  static F unit_roundoff() { return std::ldexp(F(1), -std::numeric_limits<F>::digits); }
  static F from_double(double x) { return static_cast<F>(x); }
  static double to_double(F x) { return static_cast<double>(x); }
  static long exponent(F x) { return std::ilogb(x); }
  static F ldexp(F x, long e) { return std::ldexp(x, static_cast<int>(e)); }
  static bool is_finite(F x) { return std::isfinite(x); }
};
}  // namespace detail

template <>
struct scalar_traits<float> : detail::ieee_traits<float> {
  static std::string name() { return "binary32"; }
};

template <>
struct scalar_traits<double> : detail::ieee_traits<double> {
  static std::string name() { return "binary64"; }
};

template <>
struct scalar_traits<mpfr_real> {
  static constexpr bool is_exact = false;
  static constexpr bool is_interval = false;
  static std::string name() { return "mpfr" + std::to_string(precision_bits()); }
  static unsigned precision_bits() { return precision_scope::bits(); }
  static mpfr_real unit_roundoff() { return ldexp(mpfr_real(1), -static_cast<long>(precision_bits())); }
  static mpfr_real from_double(double x) {
    mpfr_real r;  // at the current default precision (>= 53 bits in every scope we open)
    mpfr_set_d(r.backend().data(), x, MPFR_RNDN);
    return r;
  }
  static double to_double(const mpfr_real& x) { return mpfr_get_d(x.backend().data(), MPFR_RNDN); }
  static long exponent(const mpfr_real& x) { return mpfr_get_exp(x.backend().data()) - 1; }
  static mpfr_real ldexp(const mpfr_real& x, long e) {
    mpfr_real r;
    mpfr_mul_2si(r.backend().data(), x.backend().data(), e, MPFR_RNDN);
    return r;
  }
  static bool is_finite(const mpfr_real& x) { return mpfr_number_p(x.backend().data()) != 0; }
};

template <>
struct scalar_traits<mpfi_interval> {
  static constexpr bool is_exact = false;
  static constexpr bool is_interval = true;
  static std::string name() { return "mpfi" + std::to_string(precision_bits()); }
  static unsigned precision_bits() { return precision_scope::bits(); }
  static mpfi_interval unit_roundoff() { return ldexp(mpfi_interval(1), -static_cast<long>(precision_bits())); }
  static mpfi_interval from_double(double x) {
    mpfi_interval r;
    mpfi_set_d(r.backend().data(), x);
    return r;
  }
  static double to_double(const mpfi_interval& x) {
    mpfr_t mid;
    mpfr_init2(mid, static_cast<mpfr_prec_t>(precision_bits()));
    mpfi_mid(mid, x.backend().data());
    const double d = mpfr_get_d(mid, MPFR_RNDN);
    mpfr_clear(mid);
    return d;
  }
  /// Exponent of the larger endpoint in magnitude.
  static long exponent(const mpfi_interval& x) {
    mpfr_t m;
    mpfr_init2(m, static_cast<mpfr_prec_t>(precision_bits()));
    mpfi_mag(m, x.backend().data());
    const long e = mpfr_get_exp(m) - 1;
    mpfr_clear(m);
    return e;
  }
  static mpfi_interval ldexp(const mpfi_interval& x, long e) {
    mpfi_interval r;
    mpfi_mul_2si(r.backend().data(), x.backend().data(), e);
    return r;
  }
  static bool is_finite(const mpfi_interval& x) { return mpfi_bounded_p(x.backend().data()) != 0; }
};

template <>
struct scalar_traits<rational> {
  static constexpr bool is_exact = true;
  static constexpr bool is_interval = false;
  static std::string name() { return "rational"; }
  static unsigned precision_bits() { return 0; }
  static rational unit_roundoff() { return rational(0); }
  static rational from_double(double x) {
    if (!std::isfinite(x)) throw std::domain_error("rational: cannot hold a non-finite double");
    return rational(x);  // exact: every finite double is a dyadic rational
  }
  static double to_double(const rational& x) { return mpq_get_d(x.backend().data()); }
  static long exponent(const rational& x) {
    if (x == 0) throw std::domain_error("exponent of zero");
    const integer num = abs(mp::numerator(x));
    const integer den = mp::denominator(x);
    long e = static_cast<long>(mp::msb(num)) - static_cast<long>(mp::msb(den));
    // num/den lies in [2^(e-1), 2^(e+1)); one comparison settles which binade.
    if (e >= 0 ? num < (den << static_cast<unsigned>(e)) : (num << static_cast<unsigned>(-e)) < den) --e;
    return e;
  }
  static rational ldexp(const rational& x, long e) {
    rational r;
    if (e >= 0)
      mpq_mul_2exp(r.backend().data(), x.backend().data(), static_cast<mp_bitcnt_t>(e));
    else
      mpq_div_2exp(r.backend().data(), x.backend().data(), static_cast<mp_bitcnt_t>(-e));
    return r;
  }
  static bool is_finite(const rational&) { return true; }
};

/// Shorthands so generic code reads like mathematics.
template <class T>
T unit_roundoff() {
  return scalar_traits<T>::unit_roundoff();
}
template <class T>
T from_double(double x) {
  return scalar_traits<T>::from_double(x);
}
template <class T>
double to_double(const T& x) {
  return scalar_traits<T>::to_double(x);
}

}  // namespace kalman_oracle
