// A running error bound carried beside the value (Wilkinson's running error analysis; Higham,
// Accuracy and Stability of Numerical Algorithms, §3.3): x = (value, err), where value is the exact
// result of the operations so far (in the base type B, e.g. MPFR at the working precision) and err
// is a first-order bound, in units of the unit roundoff u, on how far the same operations carried
// out in a floating-point arithmetic of unit roundoff u (round to nearest, no underflow) land from
// value:
//     x ± y   err = err_x + err_y + |x ± y|
//     x · y   err = err_x |y| + |x| err_y + |x y|
//     x / y   err = (err_x + |x / y| err_y) / |y| + |x / y|
//     √x      err = err_x / (2√x) + |√x|
//     exp x   err = e^x err_x + 2 e^x            (exp within 1 ulp: 2u relative)
//     log x   err = err_x / |x| + 2 |log x|      (log within 1 ulp)
//     |x|, −x err unchanged; constants and inputs err = 0 (they are exact as stored).
// Each rule is the first-order term of the exact error propagation (the product of two errors,
// O(u²), is dropped), so the bound is an estimate to first order, not a proof: docs/error-model.md,
// "Gradients: first-order running error", says what it covers. Running a template of the reference
// over running_error<B> gives, per output element, the first-order error bound of the binary32 (or
// any u) evaluation of that template in its own order of operations, along the exact trajectory.
//
// Comparisons look at the value only, so every branch is the exact run's.
#pragma once

// Eigen must learn about the Boost number types before its own headers are read (as dense.hpp).
#include <Eigen/Core>
#include <boost/multiprecision/eigen.hpp>

#include <concepts>
#include <numbers>
#include <ostream>
#include <string>
#include <type_traits>
#include <utility>

#include "kalman_oracle/detail/mutant.hpp"
#include "kalman_oracle/scalar/dual.hpp"
#include "kalman_oracle/scalar/operand_rounding.hpp"
#include "kalman_oracle/scalar/traits.hpp"

namespace kalman_oracle {

template <class B>
class running_error {
 public:
  using base_type = B;

  running_error() : value_(0), err_(0) {}
  template <class A>
  requires std::is_arithmetic_v<A> running_error(A a) : value_(a), err_(0) {}  // NOLINT: implicit, as built-ins
  running_error(const B& value) : value_(value), err_(0) {}                    // NOLINT
  running_error(B value, B err) : value_(std::move(value)), err_(std::move(err)) {}

  const B& value() const { return value_; }
  /// The first-order error bound in units of u.
  const B& error() const { return err_; }

  friend running_error operator+(const running_error& x, const running_error& y) {
    B v = x.value_ + y.value_;
    // (Planted bug running_error_sum_drops_rounding: a sum's own rounding not counted.)
    B e = x.err_ + y.err_ + KALMAN_ORACLE_MUTANT(running_error_sum_drops_rounding, magnitude(v), B(0));
    return {std::move(v), std::move(e)};
  }
  friend running_error operator-(const running_error& x, const running_error& y) {
    B v = x.value_ - y.value_;
    B e = x.err_ + y.err_ + magnitude(v);
    return {std::move(v), std::move(e)};
  }
  friend running_error operator*(const running_error& x, const running_error& y) {
    B v = x.value_ * y.value_;
    B e = x.err_ * magnitude(y.value_) + magnitude(x.value_) * y.err_ + magnitude(v);
    return {std::move(v), std::move(e)};
  }
  friend running_error operator/(const running_error& x, const running_error& y) {
    B q = x.value_ / y.value_;
    B e = (x.err_ + magnitude(q) * y.err_) / magnitude(y.value_) + magnitude(q);
    return {std::move(q), std::move(e)};
  }
  friend running_error operator-(const running_error& x) { return {B(-x.value_), x.err_}; }
  friend running_error operator+(const running_error& x) { return x; }
  running_error& operator+=(const running_error& y) { return *this = *this + y; }
  running_error& operator-=(const running_error& y) { return *this = *this - y; }
  running_error& operator*=(const running_error& y) { return *this = *this * y; }
  running_error& operator/=(const running_error& y) { return *this = *this / y; }

  friend bool operator==(const running_error& x, const running_error& y) { return x.value_ == y.value_; }
  friend bool operator!=(const running_error& x, const running_error& y) { return x.value_ != y.value_; }
  friend bool operator<(const running_error& x, const running_error& y) { return x.value_ < y.value_; }
  friend bool operator<=(const running_error& x, const running_error& y) { return x.value_ <= y.value_; }
  friend bool operator>(const running_error& x, const running_error& y) { return x.value_ > y.value_; }
  friend bool operator>=(const running_error& x, const running_error& y) { return x.value_ >= y.value_; }

  friend running_error exp(const running_error& x) {
    using std::exp;
    B v = exp(x.value_);
    B e = v * x.err_ + 2 * v;
    return {std::move(v), std::move(e)};
  }
  friend running_error log(const running_error& x) {
    using std::log;
    B v = log(x.value_);
    B e = x.err_ / magnitude(x.value_) + 2 * magnitude(v);
    return {std::move(v), std::move(e)};
  }
  friend running_error sqrt(const running_error& x) {
    using std::sqrt;
    B r = sqrt(x.value_);
    B e = (r > 0 ? B(x.err_ / (2 * r)) : B(0)) + r;
    return {std::move(r), std::move(e)};
  }
  friend running_error abs(const running_error& x) { return {magnitude(x.value_), x.err_}; }

  friend std::ostream& operator<<(std::ostream& os, const running_error& x) { return os << x.value_; }

 private:
  static B magnitude(const B& x) {
    using std::abs;
    return abs(x);
  }
  B value_, err_;
};

/// KLA's precision step λ/(ā² + p̄λ) + φ (grad/kla.hpp, kla_precision_step) as one rule: the
/// inputs' errors through the step's exact derivatives (∂/∂λ = ā²/den², ∂/∂ā = −2āλ/den²,
/// ∂/∂p̄ = −λ²/den², ∂/∂φ = 1), plus the step's own roundings to first order (ā², p̄λ and their sum:
/// den's relative error, carried into the quotient; the quotient; the final sum).
template <class B>
running_error<B> kla_precision_step(const running_error<B>& lambda_prev, const running_error<B>& a,
                                    const running_error<B>& p, const running_error<B>& phi) {
  using std::abs;
  const B& l = lambda_prev.value();
  const B a2 = a.value() * a.value(), pl = p.value() * l, den = a2 + pl;
  const B q = l / den, den2 = den * den;
  B v = q + phi.value();
  const B propagated = a2 / den2 * lambda_prev.error() + abs(2 * a.value() * l / den2) * a.error() +
                       l * l / den2 * p.error() + phi.error();
  const B local = abs(q) * ((abs(a2) + abs(pl) + abs(den)) / abs(den) + 1) + abs(v);
  return {std::move(v), propagated + local};
}

/// The KDN covariance update b̂ / (1 + c b̂) (grad/kdn_common.hpp, kdn_posterior_step) as one rule:
/// the inputs' errors through the exact derivatives (∂/∂b̂ = 1/den², ∂/∂c = −b̂²/den², den = 1 + c b̂),
/// plus the step's own roundings to first order (c b̂ and the sum: den's relative error, carried into
/// the quotient; the quotient).
template <class B>
running_error<B> kdn_posterior_step(const running_error<B>& predicted, const running_error<B>& c) {
  using std::abs;
  const B& p = predicted.value();
  const B cp = c.value() * p, den = 1 + cp, den2 = den * den;
  B v = p / den;
  // (Planted bug kdn_posterior_rule_drops_propagated: the predicted covariance's error forgotten.)
  const B propagated = KALMAN_ORACLE_MUTANT(kdn_posterior_rule_drops_propagated, B(predicted.error() / den2), B(0)) +
                       p * p / den2 * c.error();
  const B local = abs(v) * ((abs(cp) + abs(den)) / abs(den) + 1);
  return {std::move(v), propagated + local};
}

/// A tensor core's operand rounding (scalar/operand_rounding.hpp): |fl_op(x) − x| <= u_op |x|, in
/// units of u = 2^-24 (the binary32 accumulation's) u_op / u |x|, added to x's bound.
template <class B>
running_error<B> round_operand(const running_error<B>& x) {
  using std::abs;
  const operand_format f = current_operand_format();
  if (f == operand_format::none) return x;
  // Planted bug running_error_drops_operand_rounding: the bound forgets the operand's rounding (the
  // tensor-core tiers' properties then fail against the binary32 emulation, which still rounds).
  return {x.value(), x.error() + KALMAN_ORACLE_MUTANT(running_error_drops_operand_rounding,
                                                      B(operand_unit_roundoff(f) / 0x1p-24) * abs(x.value()), B(0))};
}

template <class B>
struct scalar_traits<running_error<B>> {
  using base = scalar_traits<B>;
  static constexpr bool is_exact = false;
  static constexpr bool is_interval = false;
  static std::string name() { return "running_error<" + base::name() + ">"; }
  static unsigned precision_bits() { return base::precision_bits(); }
  static running_error<B> unit_roundoff() { return running_error<B>(base::unit_roundoff()); }
  static running_error<B> from_double(double x) { return running_error<B>(base::from_double(x)); }
  static double to_double(const running_error<B>& x) { return base::to_double(x.value()); }
  /// Of the value: a power-of-two rescale is exact (its error scales with it).
  static long exponent(const running_error<B>& x) { return base::exponent(x.value()); }
  static running_error<B> ldexp(const running_error<B>& x, long e) {
    return {base::ldexp(x.value(), e), base::ldexp(x.error(), e)};
  }
  static bool is_finite(const running_error<B>& x) { return base::is_finite(x.value()) && base::is_finite(x.error()); }
};

}  // namespace kalman_oracle

/// std::numbers::pi_v (dense.hpp's log likelihood reads it): a constant, exact as stored.
template <class B>
inline const kalman_oracle::running_error<B> std::numbers::pi_v<kalman_oracle::running_error<B>> =
    kalman_oracle::running_error<B>(kalman_oracle::detail::pi_for_constant<B>());

namespace Eigen {
template <class B>
struct NumTraits<kalman_oracle::running_error<B>> : WrappedScalarNumTraits<kalman_oracle::running_error<B>> {};
}  // namespace Eigen
