// binary32 with stochastic rounding: the arithmetic of the typical tier's ensemble (docs/error-model.md,
// "Typical tier"). Each operation's result r (computed in binary64 from binary32 operands: exact for
// products and for sums whose exponents differ by at most 29, otherwise within 2^-53 relative) is
// rounded to one of its two binary32 neighbours lo <= r <= hi, to hi with probability
// (r − lo) / (hi − lo). The rounding error is then unbiased and below one ulp, so a run over this type
// is one more "honest binary32 implementation" of the same order of operations, with rounding
// errors of the same size as round-to-nearest's (Monte Carlo arithmetic; Parker 1997; Connolly,
// Higham and Mary 2021): several runs with different seeds sample how much an honest evaluation of
// that order may err, element by element.
//
// The random bit of an operation is a hash of the seed, the operation and its operands' bits, not a
// stream: a run gives the same bits whatever the thread count and the scheduling (the fixtures' bytes
// must not depend on --jobs). The seed is per thread (stochastic_rounding_scope); a run keeps to its
// thread (run_options::threads = 1, which the fixture adapters use).
//
// Comparisons compare the binary32 values, so branches follow this run's own trajectory.
#pragma once

// Eigen must learn about the number type before its own headers are read (as dense.hpp).
#include <Eigen/Core>

#include <bit>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <limits>
#include <numbers>
#include <ostream>
#include <string>
#include <type_traits>

#include "kalman_oracle/scalar/dual.hpp"
#include "kalman_oracle/scalar/splitmix64.hpp"
#include "kalman_oracle/scalar/traits.hpp"

namespace kalman_oracle {

namespace detail::stochastic {

/// mix(seed) of this thread's stochastic rounding (stochastic_rounding_scope sets it).
inline thread_local std::uint64_t mixed_seed = 0;

/// splitmix64's finaliser (splitmix64.hpp): a well-mixed 64-bit function of its argument.
constexpr std::uint64_t mix(std::uint64_t z) { return splitmix64_mix(z); }

/// r rounded stochastically to binary32; `key` identifies the operation and its operands. f, the
/// nearest binary32 number, and its neighbour on r's side enclose r; the neighbour is taken with
/// probability |r − f| / |neighbour − f| (so lo or hi with the probabilities of the definition).
inline float round(double r, std::uint64_t key) {
  const float f = static_cast<float>(r);
  const double fd = f;
  if (fd == r || !std::isfinite(f)) return f;
  float other;
  if (f == 0) {
    other = std::copysign(0x1p-149f, static_cast<float>(r > 0 ? 1 : -1));
  } else {
    // One ulp away from zero when |r| > |f|, toward zero otherwise: the magnitude's bit pattern ± 1.
    const std::uint32_t bits = std::bit_cast<std::uint32_t>(f);
    other = std::bit_cast<float>(std::fabs(r) > std::fabs(fd) ? bits + 1 : bits - 1);
  }
  const double p = (r - fd) / (static_cast<double>(other) - fd);  // in (0, 1/2]; 0 when other is infinite
  const double draw = static_cast<double>(mix(key ^ mixed_seed) >> 11) * 0x1p-53;  // uniform in [0, 1)
  return draw < p ? other : f;
}

constexpr std::uint64_t key_of(unsigned op, float x, float y = 0) {
  return mix((static_cast<std::uint64_t>(std::bit_cast<std::uint32_t>(x)) << 32 | std::bit_cast<std::uint32_t>(y)) ^
             (static_cast<std::uint64_t>(op) << 58));
}

}  // namespace detail::stochastic

/// Sets this thread's stochastic rounding seed for its lifetime (restores the previous one).
class stochastic_rounding_scope {
 public:
  explicit stochastic_rounding_scope(std::uint64_t seed) : previous_(detail::stochastic::mixed_seed) {
    detail::stochastic::mixed_seed = detail::stochastic::mix(seed);
  }
  ~stochastic_rounding_scope() { detail::stochastic::mixed_seed = previous_; }
  stochastic_rounding_scope(const stochastic_rounding_scope&) = delete;
  stochastic_rounding_scope& operator=(const stochastic_rounding_scope&) = delete;

 private:
  std::uint64_t previous_;
};

class stochastic_binary32 {
 public:
  stochastic_binary32() = default;
  /// Constants and inputs: rounded to nearest, as a binary32 program writes them.
  template <class A>
  requires std::is_arithmetic_v<A> stochastic_binary32(A a) : v_(static_cast<float>(a)) {}  // NOLINT: as built-ins

  float value() const { return v_; }

  friend stochastic_binary32 operator+(stochastic_binary32 x, stochastic_binary32 y) {
    return from(detail::stochastic::round(double(x.v_) + double(y.v_), detail::stochastic::key_of(1, x.v_, y.v_)));
  }
  friend stochastic_binary32 operator-(stochastic_binary32 x, stochastic_binary32 y) {
    return from(detail::stochastic::round(double(x.v_) - double(y.v_), detail::stochastic::key_of(2, x.v_, y.v_)));
  }
  friend stochastic_binary32 operator*(stochastic_binary32 x, stochastic_binary32 y) {
    return from(detail::stochastic::round(double(x.v_) * double(y.v_), detail::stochastic::key_of(3, x.v_, y.v_)));
  }
  friend stochastic_binary32 operator/(stochastic_binary32 x, stochastic_binary32 y) {
    return from(detail::stochastic::round(double(x.v_) / double(y.v_), detail::stochastic::key_of(4, x.v_, y.v_)));
  }
  friend stochastic_binary32 operator-(stochastic_binary32 x) { return from(-x.v_); }
  friend stochastic_binary32 operator+(stochastic_binary32 x) { return x; }
  stochastic_binary32& operator+=(stochastic_binary32 y) { return *this = *this + y; }
  stochastic_binary32& operator-=(stochastic_binary32 y) { return *this = *this - y; }
  stochastic_binary32& operator*=(stochastic_binary32 y) { return *this = *this * y; }
  stochastic_binary32& operator/=(stochastic_binary32 y) { return *this = *this / y; }

  friend bool operator==(stochastic_binary32 x, stochastic_binary32 y) { return x.v_ == y.v_; }
  friend bool operator!=(stochastic_binary32 x, stochastic_binary32 y) { return x.v_ != y.v_; }
  friend bool operator<(stochastic_binary32 x, stochastic_binary32 y) { return x.v_ < y.v_; }
  friend bool operator<=(stochastic_binary32 x, stochastic_binary32 y) { return x.v_ <= y.v_; }
  friend bool operator>(stochastic_binary32 x, stochastic_binary32 y) { return x.v_ > y.v_; }
  friend bool operator>=(stochastic_binary32 x, stochastic_binary32 y) { return x.v_ >= y.v_; }

  // The elementary functions: the binary64 value, rounded stochastically (an honest binary32 libm
  // is within an ulp or so; this one is within one ulp).
  friend stochastic_binary32 exp(stochastic_binary32 x) {
    return from(detail::stochastic::round(std::exp(double(x.v_)), detail::stochastic::key_of(5, x.v_)));
  }
  friend stochastic_binary32 expm1(stochastic_binary32 x) {
    return from(detail::stochastic::round(std::expm1(double(x.v_)), detail::stochastic::key_of(6, x.v_)));
  }
  friend stochastic_binary32 log(stochastic_binary32 x) {
    return from(detail::stochastic::round(std::log(double(x.v_)), detail::stochastic::key_of(7, x.v_)));
  }
  friend stochastic_binary32 sqrt(stochastic_binary32 x) {
    return from(detail::stochastic::round(std::sqrt(double(x.v_)), detail::stochastic::key_of(8, x.v_)));
  }
  friend stochastic_binary32 abs(stochastic_binary32 x) { return from(std::fabs(x.v_)); }

  friend std::ostream& operator<<(std::ostream& os, stochastic_binary32 x) { return os << x.v_; }

 private:
  static stochastic_binary32 from(float f) {
    stochastic_binary32 r;
    r.v_ = f;
    return r;
  }
  float v_ = 0;
};

template <>
struct scalar_traits<stochastic_binary32> {
  static constexpr bool is_exact = false;
  static constexpr bool is_interval = false;
  static std::string name() { return "binary32 (stochastic rounding)"; }
  static unsigned precision_bits() { return 24; }
  static stochastic_binary32 unit_roundoff() { return stochastic_binary32(0x1p-24); }
  static stochastic_binary32 from_double(double x) { return stochastic_binary32(x); }
  static double to_double(stochastic_binary32 x) { return static_cast<double>(x.value()); }
  static long exponent(stochastic_binary32 x) { return std::ilogb(x.value()); }
  /// Exact, as for binary32, unless it overflows or underflows.
  static stochastic_binary32 ldexp(stochastic_binary32 x, long e) {
    return stochastic_binary32(std::ldexp(x.value(), static_cast<int>(e)));
  }
  static bool is_finite(stochastic_binary32 x) { return std::isfinite(x.value()); }
};

}  // namespace kalman_oracle

/// std::numbers::pi_v (dense.hpp's log likelihood reads it): binary32's π.
template <>
inline const kalman_oracle::stochastic_binary32 std::numbers::pi_v<kalman_oracle::stochastic_binary32> =
    kalman_oracle::stochastic_binary32(std::numbers::pi_v<float>);

namespace Eigen {
template <>
struct NumTraits<kalman_oracle::stochastic_binary32> : WrappedScalarNumTraits<kalman_oracle::stochastic_binary32> {};
}  // namespace Eigen
