// Forward-mode dual numbers over any scalar type of the reference (MPFR, rationals, binary64):
// x = value + tangent·ε with ε² = 0. Running a model template over dual<B> with the inputs'
// tangents set to a direction u gives, in each output's tangent, the directional derivative of
// that output along u (one forward pass, no tape): the "cheap" truth of docs/gradients.md, which
// the properties compare with ⟨adjoint gradient, u⟩ (what gradcheck's fast mode does).
//
// What the reference models need from a scalar, and what dual<B> provides:
//   + − * / (binary, unary minus, compound assignment), with B, int, long and double operands;
//   comparisons (== != < <= > >=) on the VALUE only, so every branch the models take (validation,
//   rescale choices, pivots) is the branch the primal run takes;
//   exp, log, sqrt, abs (only for inexact B: over rationals the models never call them);
//   operator<< (error messages), scalar_traits (below), Eigen::NumTraits (below: dense and
//   information forms keep their matrices in Eigen containers).
// abs'(0) is taken as 0 (a one-sided choice; the models take abs only of Möbius entries, which
// are >= 0, in the max-entry rescale whose factor drops out of every action).
//
// Precision: value and tangent are B values made at B's current precision (precision_scope).
#pragma once

// Eigen must learn about the Boost number types before its own headers are read (as dense.hpp).
#include <Eigen/Core>
#include <boost/multiprecision/eigen.hpp>

#include <cmath>
#include <concepts>
#include <numbers>
#include <ostream>
#include <string>
#include <type_traits>
#include <utility>

#include "kalman_oracle/scalar/traits.hpp"

namespace kalman_oracle {

template <class B>
class dual {
 public:
  using base_type = B;

  dual() : value_(0), tangent_(0) {}
  template <class A>
  requires std::is_arithmetic_v<A> dual(A a) : value_(a), tangent_(0) {}  // NOLINT: implicit, as for the built-in types
  dual(const B& value) : value_(value), tangent_(0) {}                    // NOLINT
  dual(B value, B tangent) : value_(std::move(value)), tangent_(std::move(tangent)) {}

  const B& value() const { return value_; }
  const B& tangent() const { return tangent_; }

  friend dual operator+(const dual& x, const dual& y) { return {x.value_ + y.value_, x.tangent_ + y.tangent_}; }
  friend dual operator-(const dual& x, const dual& y) { return {x.value_ - y.value_, x.tangent_ - y.tangent_}; }
  friend dual operator*(const dual& x, const dual& y) {
    return {x.value_ * y.value_, x.tangent_ * y.value_ + x.value_ * y.tangent_};
  }
  friend dual operator/(const dual& x, const dual& y) {
    B q = x.value_ / y.value_;
    B t = (x.tangent_ - q * y.tangent_) / y.value_;
    return {std::move(q), std::move(t)};
  }
  friend dual operator-(const dual& x) { return {B(-x.value_), B(-x.tangent_)}; }
  friend dual operator+(const dual& x) { return x; }
  dual& operator+=(const dual& y) { return *this = *this + y; }
  dual& operator-=(const dual& y) { return *this = *this - y; }
  dual& operator*=(const dual& y) { return *this = *this * y; }
  dual& operator/=(const dual& y) { return *this = *this / y; }

  friend bool operator==(const dual& x, const dual& y) { return x.value_ == y.value_; }
  friend bool operator!=(const dual& x, const dual& y) { return x.value_ != y.value_; }
  friend bool operator<(const dual& x, const dual& y) { return x.value_ < y.value_; }
  friend bool operator<=(const dual& x, const dual& y) { return x.value_ <= y.value_; }
  friend bool operator>(const dual& x, const dual& y) { return x.value_ > y.value_; }
  friend bool operator>=(const dual& x, const dual& y) { return x.value_ >= y.value_; }

  friend dual exp(const dual& x) {
    using std::exp;
    B e = exp(x.value_);
    B t = e * x.tangent_;
    return {std::move(e), std::move(t)};
  }
  friend dual log(const dual& x) {
    using std::log;
    return {B(log(x.value_)), B(x.tangent_ / x.value_)};
  }
  friend dual sqrt(const dual& x) {
    using std::sqrt;
    B r = sqrt(x.value_);
    B t = x.tangent_ / (2 * r);
    return {std::move(r), std::move(t)};
  }
  friend dual abs(const dual& x) {
    if (x.value_ > 0) return x;
    if (x.value_ < 0) return -x;
    return {x.value_, B(0)};
  }

  friend std::ostream& operator<<(std::ostream& os, const dual& x) { return os << x.value_; }

 private:
  B value_, tangent_;
};

template <class B>
struct scalar_traits<dual<B>> {
  using base = scalar_traits<B>;
  static constexpr bool is_exact = base::is_exact;
  static constexpr bool is_interval = false;
  static std::string name() { return "dual<" + base::name() + ">"; }
  static unsigned precision_bits() { return base::precision_bits(); }
  static dual<B> unit_roundoff() { return dual<B>(base::unit_roundoff()); }
  static dual<B> from_double(double x) { return dual<B>(base::from_double(x)); }
  static double to_double(const dual<B>& x) { return base::to_double(x.value()); }
  /// Of the value: the power-of-two rescale picks its factor from the primal run (a constant
  /// factor, whose action drops out, docs/math.md §8 fact 3).
  static long exponent(const dual<B>& x) { return base::exponent(x.value()); }
  static dual<B> ldexp(const dual<B>& x, long e) { return {base::ldexp(x.value(), e), base::ldexp(x.tangent(), e)}; }
  static bool is_finite(const dual<B>& x) { return base::is_finite(x.value()) && base::is_finite(x.tangent()); }
};

namespace detail {
/// π in B for the constant below: MPFR's correctly rounded π at the precision in force when it is
/// first made, binary64/32 from <numbers>.
template <class B>
B pi_for_constant() {
  if constexpr (std::is_same_v<B, mpfr_real>) {
    mpfr_real pi;
    mpfr_const_pi(pi.backend().data(), MPFR_RNDN);
    return pi;
  } else if constexpr (std::is_floating_point_v<B>) {
    return std::numbers::pi_v<B>;
  } else {
    return B(std::numbers::pi);
  }
}
}  // namespace detail

}  // namespace kalman_oracle

/// std::numbers::pi_v for duals ([math.constants] allows specialising it for a program-defined
/// type): dense.hpp's log marginal likelihood reads it. It is a constant (tangent 0), made once, at
/// the MPFR precision in force at static initialisation; so the dual's VALUE of the log likelihood
/// may carry a less precise log 2π, while its tangent (the derivative) does not depend on π at all.
template <class B>
inline const kalman_oracle::dual<B> std::numbers::pi_v<kalman_oracle::dual<B>> =
    kalman_oracle::dual<B>(kalman_oracle::detail::pi_for_constant<B>());

namespace Eigen {
/// dual numbers as Eigen scalars (the dense and information forms use Eigen matrices as containers
/// and for +, − and division by a scalar; products are the models' own loops).
/// The Eigen traits of a scalar that wraps a base type B (dual numbers here; grad/tape.hpp's tape
/// scalars and scalar/running_error.hpp's running error bounds too): a real, non-integer, signed
/// type that needs initialisation, with costs of a few base operations.
template <class S>
struct WrappedScalarNumTraits : GenericNumTraits<S> {
  using Real = S;
  using NonInteger = S;
  using Literal = double;
  using Nested = S;
  enum {
    IsComplex = 0,
    IsInteger = 0,
    IsSigned = 1,
    RequireInitialization = 1,
    ReadCost = 2,
    AddCost = 8,
    MulCost = 24,
  };
};
template <class B>
struct NumTraits<kalman_oracle::dual<B>> : WrappedScalarNumTraits<kalman_oracle::dual<B>> {};
}  // namespace Eigen
