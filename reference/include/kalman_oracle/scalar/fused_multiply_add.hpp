// binary32 with fused multiply-add: the arithmetic of the f32-fma tier's ensemble member
// (docs/error-model.md, "Arithmetic tiers"). A product is not rounded where it is made: x * y returns
// a fused_product, the exact value (two binary32 significands of 24 bits multiply into 48 bits, which
// binary64 holds exactly; the proxy keeps the factors). A sum or difference with a fused_product as
// an operand is one fused multiply-add, fma(x, y, c), rounded once (std::fma over float is correctly
// rounded). Anywhere else, a fused_product converts to its rounded value, as a compiler that
// contracts x * y + c does (nvcc's default, -ffp-contract=fast on CPUs): so a run over this type is one
// honest binary32 evaluation of the reference's order with contraction wherever a product meets a
// sum, every rounding at most u relative and no other change.
//
// Comparisons and the elementary functions are binary32's (round to nearest, the platform's libm).
#pragma once

// Eigen must learn about the number type before its own headers are read (as dense.hpp).
#include <Eigen/Core>

#include <cmath>
#include <numbers>
#include <ostream>
#include <string>
#include <type_traits>

#include "kalman_oracle/scalar/dual.hpp"  // Eigen::WrappedScalarNumTraits
#include "kalman_oracle/scalar/traits.hpp"

namespace kalman_oracle {

class fused_product;

class fused_binary32 {
 public:
  fused_binary32() = default;
  /// Constants and inputs: rounded to nearest, as a binary32 program writes them.
  template <class A>
  requires std::is_arithmetic_v<A> fused_binary32(A a) : v_(static_cast<float>(a)) {}  // NOLINT: as built-ins

  float value() const { return v_; }
  static fused_binary32 from(float f) {
    fused_binary32 r;
    r.v_ = f;
    return r;
  }

  fused_binary32& operator+=(fused_binary32 y) { return *this = from(v_ + y.v_); }
  fused_binary32& operator-=(fused_binary32 y) { return *this = from(v_ - y.v_); }
  fused_binary32& operator*=(fused_binary32 y) { return *this = from(v_ * y.v_); }
  fused_binary32& operator/=(fused_binary32 y) { return *this = from(v_ / y.v_); }
  fused_binary32& operator+=(const fused_product& p);  // s += x * y: one fused multiply-add
  fused_binary32& operator-=(const fused_product& p);

 private:
  float v_ = 0;
};

/// x * y, exact until it is used: a fused multiply-add when it meets a sum, rounded otherwise.
class fused_product {
 public:
  fused_product(float x, float y) : x_(x), y_(y) {}
  float x() const { return x_; }
  float y() const { return y_; }
  /// The product rounded to binary32 (where no sum absorbs it).
  operator fused_binary32() const { return fused_binary32::from(x_ * y_); }  // NOLINT: the point
  fused_binary32 rounded() const { return *this; }

 private:
  float x_, y_;
};

inline fused_binary32& fused_binary32::operator+=(const fused_product& p) {
  return *this = from(std::fma(p.x(), p.y(), v_));
}
inline fused_binary32& fused_binary32::operator-=(const fused_product& p) {
  return *this = from(std::fma(-p.x(), p.y(), v_));
}

// Namespace-scope (not hidden friends), so that argument-dependent lookup finds them for a
// fused_product operand too, which then converts to its rounded value.
inline fused_product operator*(fused_binary32 x, fused_binary32 y) { return {x.value(), y.value()}; }
inline fused_binary32 operator+(fused_binary32 x, fused_binary32 y) {
  return fused_binary32::from(x.value() + y.value());
}
inline fused_binary32 operator-(fused_binary32 x, fused_binary32 y) {
  return fused_binary32::from(x.value() - y.value());
}
inline fused_binary32 operator/(fused_binary32 x, fused_binary32 y) {
  return fused_binary32::from(x.value() / y.value());
}
inline fused_binary32 operator-(fused_binary32 x) { return fused_binary32::from(-x.value()); }
inline fused_binary32 operator+(fused_binary32 x) { return x; }

// The contractions: a product meeting a sum or a difference.
inline fused_binary32 operator+(const fused_product& p, fused_binary32 c) {
  return fused_binary32::from(std::fma(p.x(), p.y(), c.value()));
}
inline fused_binary32 operator+(fused_binary32 c, const fused_product& p) {
  return fused_binary32::from(std::fma(p.x(), p.y(), c.value()));
}
inline fused_binary32 operator-(const fused_product& p, fused_binary32 c) {
  return fused_binary32::from(std::fma(p.x(), p.y(), -c.value()));
}
inline fused_binary32 operator-(fused_binary32 c, const fused_product& p) {
  return fused_binary32::from(std::fma(-p.x(), p.y(), c.value()));
}
/// x1 y1 ± x2 y2: the second product rounded, the first fused (one of the two orders a compiler picks).
inline fused_binary32 operator+(const fused_product& p, const fused_product& q) { return p + q.rounded(); }
inline fused_binary32 operator-(const fused_product& p, const fused_product& q) { return p - q.rounded(); }
/// −(x y) is exact: the proxy of (−x) y.
inline fused_product operator-(const fused_product& p) { return {-p.x(), p.y()}; }
inline fused_product operator*(const fused_product& p, const fused_product& q) { return p.rounded() * q.rounded(); }
inline fused_binary32 operator/(const fused_product& p, const fused_product& q) { return p.rounded() / q.rounded(); }

inline bool operator==(fused_binary32 x, fused_binary32 y) { return x.value() == y.value(); }
inline bool operator!=(fused_binary32 x, fused_binary32 y) { return x.value() != y.value(); }
inline bool operator<(fused_binary32 x, fused_binary32 y) { return x.value() < y.value(); }
inline bool operator<=(fused_binary32 x, fused_binary32 y) { return x.value() <= y.value(); }
inline bool operator>(fused_binary32 x, fused_binary32 y) { return x.value() > y.value(); }
inline bool operator>=(fused_binary32 x, fused_binary32 y) { return x.value() >= y.value(); }

// The elementary functions: binary32's (the same libm calls as a float run).
inline fused_binary32 exp(fused_binary32 x) { return fused_binary32::from(std::exp(x.value())); }
inline fused_binary32 expm1(fused_binary32 x) { return fused_binary32::from(std::expm1(x.value())); }
inline fused_binary32 log(fused_binary32 x) { return fused_binary32::from(std::log(x.value())); }
inline fused_binary32 sqrt(fused_binary32 x) { return fused_binary32::from(std::sqrt(x.value())); }
inline fused_binary32 abs(fused_binary32 x) { return fused_binary32::from(std::fabs(x.value())); }

inline std::ostream& operator<<(std::ostream& os, fused_binary32 x) { return os << x.value(); }

template <>
struct scalar_traits<fused_binary32> {
  static constexpr bool is_exact = false;
  static constexpr bool is_interval = false;
  static std::string name() { return "binary32 (fused multiply-add)"; }
  static unsigned precision_bits() { return 24; }
  static fused_binary32 unit_roundoff() { return fused_binary32(0x1p-24); }
  static fused_binary32 from_double(double x) { return fused_binary32(x); }
  static double to_double(fused_binary32 x) { return static_cast<double>(x.value()); }
  static long exponent(fused_binary32 x) { return std::ilogb(x.value()); }
  /// Exact, as for binary32, unless it overflows or underflows.
  static fused_binary32 ldexp(fused_binary32 x, long e) {
    return fused_binary32(std::ldexp(x.value(), static_cast<int>(e)));
  }
  static bool is_finite(fused_binary32 x) { return std::isfinite(x.value()); }
};

}  // namespace kalman_oracle

/// std::numbers::pi_v (dense.hpp's log likelihood reads it): binary32's π.
template <>
inline const kalman_oracle::fused_binary32 std::numbers::pi_v<kalman_oracle::fused_binary32> =
    kalman_oracle::fused_binary32(std::numbers::pi_v<float>);

namespace Eigen {
template <>
struct NumTraits<kalman_oracle::fused_binary32> : WrappedScalarNumTraits<kalman_oracle::fused_binary32> {};
}  // namespace Eigen
