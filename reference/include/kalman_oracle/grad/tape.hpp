// A small reverse-mode tape: tape_scalar<B> is a scalar type the SAME model templates run over
// (models/*.hpp, unchanged), recording every operation on a tape; one reverse sweep then gives the
// gradient of a scalar (the loss) with respect to every variable. This is the first independent
// truth of docs/gradients.md: the plain sequential model, differentiated by the chain rule applied
// operation by operation, with no knowledge of the hand-written adjoints in grad/*.hpp.
//
// Use:
//     tape<B> t;                                   // becomes this thread's active tape
//     tape_scalar<B> x = t.variable(B(2));          // an independent variable
//     tape_scalar<B> y = x * x + 3;                  // recorded
//     std::vector<B> adj = t.adjoints(y);            // adj[x.id()] == 2 * 2
// Values that do not depend on a variable (constants: literals, defaults, the query scale when not
// given) are not recorded. One tape per thread is active at a time (the innermost live one); an
// operation on recorded values with no active tape throws std::logic_error, so the models must run
// with run_options.threads = 1 (the default) when their inputs are tape variables.
//
// What the models need (checked by compiling every model over tape_scalar<mpfr_real> and
// tape_scalar<rational>): + − * / (and compound forms), unary minus, comparisons (on the value: the
// recorded branch is the primal run's), exp, log, sqrt, abs (inexact B only; the models call them
// only for inexact types), operator<<, scalar_traits (below), Eigen::NumTraits (dense and
// information forms), std::numbers::pi_v (the dense log likelihood; a constant). Every model,
// sequential and parallel, runs over the tape; nothing is restricted.
//
// Each node stores at most two parents with their local partial derivatives, computed in B at the
// current precision; the reverse sweep accumulates adj[parent] += adj[node] · partial. Over
// rationals everything is exact, so the tape's gradient is the exact gradient.
#pragma once

// Eigen must learn about the Boost number types before its own headers are read (as dense.hpp).
#include <Eigen/Core>
#include <boost/multiprecision/eigen.hpp>

#include <cmath>
#include <cstddef>
#include <limits>
#include <numbers>
#include <ostream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kalman_oracle/scalar/dual.hpp"  // detail::pi_for_constant, Eigen::WrappedScalarNumTraits
#include "kalman_oracle/scalar/traits.hpp"

namespace kalman_oracle {

template <class B>
class tape_scalar;

/// The recording. Constructing one makes it this thread's active tape until it is destroyed (tapes
/// nest: the previous one becomes active again).
template <class B>
class tape {
 public:
  static constexpr std::size_t none = std::numeric_limits<std::size_t>::max();

  struct node {
    std::size_t first = none, second = none;  // parents (none: absent)
    B first_partial{0}, second_partial{0};    // ∂node/∂first, ∂node/∂second
  };

  tape() : previous_(active_) { active_ = this; }
  tape(const tape&) = delete;
  tape& operator=(const tape&) = delete;
  ~tape() { active_ = previous_; }

  /// The active tape of this thread, or throws.
  static tape& active() {
    if (active_ == nullptr)
      throw std::logic_error(
          "tape_scalar: an operation on recorded values with no active tape on this thread "
          "(run the model with threads = 1 inside the tape's lifetime)");
    return *active_;
  }

  /// A new independent variable with the given value.
  tape_scalar<B> variable(const B& value);

  std::size_t size() const { return nodes_.size(); }

  /// adj[i] = ∂output/∂(node i), by one reverse sweep. A constant output gives all zeros.
  std::vector<B> adjoints(const tape_scalar<B>& output) const;

  std::size_t push(std::size_t first, B first_partial, std::size_t second = none, B second_partial = B(0)) {
    nodes_.push_back(node{first, second, std::move(first_partial), std::move(second_partial)});
    return nodes_.size() - 1;
  }

 private:
  std::vector<node> nodes_;
  tape* previous_;
  static inline thread_local tape* active_ = nullptr;
};

template <class B>
class tape_scalar {
 public:
  using base_type = B;
  static constexpr std::size_t constant_id = tape<B>::none;

  tape_scalar() : value_(0) {}
  template <class A>
  requires std::is_arithmetic_v<A> tape_scalar(A a) : value_(a) {}  // NOLINT: implicit, as for the built-in types
  tape_scalar(const B& value) : value_(value) {}                    // NOLINT: a constant

  const B& value() const { return value_; }
  /// The node of this value on the tape, or constant_id.
  std::size_t id() const { return id_; }
  bool recorded() const { return id_ != constant_id; }

  friend tape_scalar operator+(const tape_scalar& x, const tape_scalar& y) {
    return binary(x.value_ + y.value_, x, B(1), y, B(1));
  }
  friend tape_scalar operator-(const tape_scalar& x, const tape_scalar& y) {
    return binary(x.value_ - y.value_, x, B(1), y, B(-1));
  }
  friend tape_scalar operator*(const tape_scalar& x, const tape_scalar& y) {
    return binary(x.value_ * y.value_, x, y.value_, y, x.value_);
  }
  friend tape_scalar operator/(const tape_scalar& x, const tape_scalar& y) {
    B q = x.value_ / y.value_;
    if (!x.recorded() && !y.recorded()) return tape_scalar(std::move(q));
    B dx = B(1) / y.value_;
    B dy = -q / y.value_;
    return binary(std::move(q), x, std::move(dx), y, std::move(dy));
  }
  friend tape_scalar operator-(const tape_scalar& x) { return unary(B(-x.value_), x, B(-1)); }
  friend tape_scalar operator+(const tape_scalar& x) { return x; }
  tape_scalar& operator+=(const tape_scalar& y) { return *this = *this + y; }
  tape_scalar& operator-=(const tape_scalar& y) { return *this = *this - y; }
  tape_scalar& operator*=(const tape_scalar& y) { return *this = *this * y; }
  tape_scalar& operator/=(const tape_scalar& y) { return *this = *this / y; }

  friend bool operator==(const tape_scalar& x, const tape_scalar& y) { return x.value_ == y.value_; }
  friend bool operator!=(const tape_scalar& x, const tape_scalar& y) { return x.value_ != y.value_; }
  friend bool operator<(const tape_scalar& x, const tape_scalar& y) { return x.value_ < y.value_; }
  friend bool operator<=(const tape_scalar& x, const tape_scalar& y) { return x.value_ <= y.value_; }
  friend bool operator>(const tape_scalar& x, const tape_scalar& y) { return x.value_ > y.value_; }
  friend bool operator>=(const tape_scalar& x, const tape_scalar& y) { return x.value_ >= y.value_; }

  friend tape_scalar exp(const tape_scalar& x) {
    using std::exp;
    B e = exp(x.value_);
    B d = e;
    return unary(std::move(e), x, std::move(d));
  }
  friend tape_scalar log(const tape_scalar& x) {
    using std::log;
    return unary(B(log(x.value_)), x, B(B(1) / x.value_));
  }
  friend tape_scalar sqrt(const tape_scalar& x) {
    using std::sqrt;
    B r = sqrt(x.value_);
    B d = B(1) / (2 * r);
    return unary(std::move(r), x, std::move(d));
  }
  /// |x|, with derivative sign(x) (0 at 0).
  friend tape_scalar abs(const tape_scalar& x) {
    if (x.value_ > 0) return x;
    if (x.value_ < 0) return -x;
    return unary(x.value_, x, B(0));
  }
  /// x · 2^e with derivative 2^e (scalar_traits::ldexp; exact in binary formats).
  static tape_scalar scaled(const tape_scalar& x, B value, B factor) {
    return unary(std::move(value), x, std::move(factor));
  }

  friend std::ostream& operator<<(std::ostream& os, const tape_scalar& x) { return os << x.value_; }

 private:
  friend class tape<B>;
  tape_scalar(B value, std::size_t id) : value_(std::move(value)), id_(id) {}

  static tape_scalar unary(B value, const tape_scalar& x, B dx) {
    if (!x.recorded()) return tape_scalar(std::move(value));
    return tape_scalar(std::move(value), tape<B>::active().push(x.id_, std::move(dx)));
  }
  static tape_scalar binary(B value, const tape_scalar& x, B dx, const tape_scalar& y, B dy) {
    if (!x.recorded() && !y.recorded()) return tape_scalar(std::move(value));
    if (!y.recorded()) return tape_scalar(std::move(value), tape<B>::active().push(x.id_, std::move(dx)));
    if (!x.recorded()) return tape_scalar(std::move(value), tape<B>::active().push(y.id_, std::move(dy)));
    return tape_scalar(std::move(value), tape<B>::active().push(x.id_, std::move(dx), y.id_, std::move(dy)));
  }

  B value_;
  std::size_t id_ = constant_id;
};

template <class B>
tape_scalar<B> tape<B>::variable(const B& value) {
  nodes_.push_back(node{});
  return tape_scalar<B>(value, nodes_.size() - 1);
}

template <class B>
std::vector<B> tape<B>::adjoints(const tape_scalar<B>& output) const {
  std::vector<B> adj(nodes_.size(), B(0));
  if (!output.recorded()) return adj;
  adj.at(output.id()) = B(1);
  for (std::size_t i = output.id() + 1; i-- > 0;) {
    if (adj[i] == 0) continue;
    const node& n = nodes_[i];
    if (n.first != none) adj[n.first] += adj[i] * n.first_partial;
    if (n.second != none) adj[n.second] += adj[i] * n.second_partial;
  }
  return adj;
}

template <class B>
struct scalar_traits<tape_scalar<B>> {
  using base = scalar_traits<B>;
  static constexpr bool is_exact = base::is_exact;
  static constexpr bool is_interval = false;
  static std::string name() { return "tape<" + base::name() + ">"; }
  static unsigned precision_bits() { return base::precision_bits(); }
  static tape_scalar<B> unit_roundoff() { return tape_scalar<B>(base::unit_roundoff()); }
  static tape_scalar<B> from_double(double x) { return tape_scalar<B>(base::from_double(x)); }
  static double to_double(const tape_scalar<B>& x) { return base::to_double(x.value()); }
  /// Of the value (the power-of-two rescale's factor is a constant of the primal run).
  static long exponent(const tape_scalar<B>& x) { return base::exponent(x.value()); }
  static tape_scalar<B> ldexp(const tape_scalar<B>& x, long e) {
    return tape_scalar<B>::scaled(x, base::ldexp(x.value(), e), base::ldexp(B(1), e));
  }
  static bool is_finite(const tape_scalar<B>& x) { return base::is_finite(x.value()); }
};

}  // namespace kalman_oracle

/// std::numbers::pi_v for tape scalars (a constant; see the same specialisation in scalar/dual.hpp).
template <class B>
inline const kalman_oracle::tape_scalar<B> std::numbers::pi_v<kalman_oracle::tape_scalar<B>> =
    kalman_oracle::tape_scalar<B>(kalman_oracle::detail::pi_for_constant<B>());

namespace Eigen {
template <class B>
struct NumTraits<kalman_oracle::tape_scalar<B>> : WrappedScalarNumTraits<kalman_oracle::tape_scalar<B>> {};
}  // namespace Eigen
