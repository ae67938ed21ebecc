// Tensor-core arithmetic (docs/error-model.md, "Tensor-core tiers"): a matrix product whose operands
// are rounded once to a narrow format (bfloat16, binary16 or TF32) and whose products are summed in
// binary32. The chunked forms (models/fixed_gain_chunked.hpp) pass every matrix-product operand
// through round_operand(x), which is the identity unless a tensor_core_scope is open on this thread:
//   * over float, the operand is rounded to nearest-even in the scope's format (an emulation of a
//     tensor-core kernel: its fp32 accumulation is the float arithmetic around it), or stochastically
//     where a stochastic_operand_scope is open too (the tiers' typical ensembles);
//   * over running_error<B>, the operand's own rounding, at most u_op |x|, is added to its first-order
//     error bound (in units of u = 2^-24: u_op / u |x|).
// Every other scalar type (rationals, MPFR, intervals) ignores the scope.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

#include "kalman_oracle/scalar/splitmix64.hpp"

namespace kalman_oracle {

template <class B>
class running_error;

/// The format a tensor core rounds its operands to (none: binary32 operands, plain arithmetic).
enum class operand_format { none, bf16, f16, tf32 };

inline std::string_view to_string(operand_format f) {
  switch (f) {
    case operand_format::none: return "none";
    case operand_format::bf16: return "bf16";
    case operand_format::f16: return "f16";
    case operand_format::tf32: return "tf32";
  }
  throw std::invalid_argument("operand_format: unknown value");
}

/// The format whose to_string is `name`, or nothing (the caller reports a bad name with its own rule).
inline std::optional<operand_format> operand_format_named(std::string_view name) {
  for (const operand_format f : {operand_format::none, operand_format::bf16, operand_format::f16, operand_format::tf32})
    if (to_string(f) == name) return f;
  return std::nullopt;
}

/// Significand bits (the implicit bit included): bfloat16 8, binary16 11, TF32 11.
inline int operand_precision(operand_format f) {
  switch (f) {
    case operand_format::none: return 24;
    case operand_format::bf16: return 8;
    case operand_format::f16: return 11;
    case operand_format::tf32: return 11;
  }
  throw std::invalid_argument("operand_format: unknown value");
}

/// The unit roundoff of an operand's rounding, 2^-p (normal range; binary16's narrower exponent range
/// is a hypothesis of the tier's budgets: docs/error-model.md).
inline double operand_unit_roundoff(operand_format f) { return std::ldexp(1.0, -operand_precision(f)); }

namespace detail::operands {
inline thread_local operand_format current = operand_format::none;
/// 0: operands round to nearest-even; otherwise splitmix64_mix(seed) of stochastic_operand_scope.
inline thread_local std::uint64_t stochastic_seed = 0;
}  // namespace detail::operands

/// Opens tensor-core operand rounding on this thread for its lifetime (restores the previous format).
class tensor_core_scope {
 public:
  explicit tensor_core_scope(operand_format f) : previous_(detail::operands::current) { detail::operands::current = f; }
  ~tensor_core_scope() { detail::operands::current = previous_; }
  tensor_core_scope(const tensor_core_scope&) = delete;
  tensor_core_scope& operator=(const tensor_core_scope&) = delete;

 private:
  operand_format previous_;
};

inline operand_format current_operand_format() { return detail::operands::current; }

/// x rounded to nearest-even with p significand bits and binary32's exponent range (bfloat16, TF32;
/// binary16's smaller range is not modelled: its overflow and subnormals are outside the tier).
inline float round_to_precision(float x, int p) {
  if (!std::isfinite(x) || x == 0 || p >= 24) return x;
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(x);
  const int drop = 24 - p;
  const std::uint32_t half = 1u << (drop - 1), mask = (1u << drop) - 1;
  const std::uint32_t low = bits & mask, base = bits & ~mask;
  // Ties to even: round up when above half, or at half with the kept part odd.
  const bool up = low > half || (low == half && ((base >> drop) & 1u));
  return std::bit_cast<float>(up ? base + (1u << drop) : base);
}

/// x rounded stochastically to p significand bits (binary32's exponent range): to its neighbour away
/// from zero with probability (dropped bits) / 2^(24 − p), toward zero otherwise, so the rounding is
/// unbiased and below one unit in the last kept place. The draw is splitmix64_mix of x's significand
/// bits and `mixed_seed`: as with round-to-nearest, the same value rounds the same way throughout a run,
/// and so do −x and 2^e x (the rounding commutes with the sign and with powers of two); a run's bits do
/// not depend on the thread count.
inline float round_to_precision_stochastically(float x, int p, std::uint64_t mixed_seed) {
  if (!std::isfinite(x) || x == 0 || p >= 24) return x;
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(x);
  const int drop = 24 - p;
  const std::uint32_t mask = (1u << drop) - 1;
  const std::uint32_t low = bits & mask, base = bits & ~mask;
  // A uniform draw in [0, 2^drop): below `low` with probability low / 2^drop.
  const auto draw = static_cast<std::uint32_t>(splitmix64_mix((bits & 0x007fffffu) ^ mixed_seed) >> (64 - drop));
  return std::bit_cast<float>(draw < low ? base + (1u << drop) : base);
}

/// Opens stochastic operand rounding on this thread for its lifetime (restores the previous seed):
/// inside a tensor_core_scope, round_operand over float rounds stochastically with this seed instead
/// of to nearest. The tensor-core tiers' typical ensembles use it for members whose operand roundings
/// are independent of the round-to-nearest members' (docs/error-model.md, "Typical tier", "Independent
/// operand roundings for the gradients").
class stochastic_operand_scope {
 public:
  explicit stochastic_operand_scope(std::uint64_t seed) : previous_(detail::operands::stochastic_seed) {
    detail::operands::stochastic_seed = splitmix64_mix(seed);
  }
  ~stochastic_operand_scope() { detail::operands::stochastic_seed = previous_; }
  stochastic_operand_scope(const stochastic_operand_scope&) = delete;
  stochastic_operand_scope& operator=(const stochastic_operand_scope&) = delete;

 private:
  std::uint64_t previous_;
};

/// Whether T's products round their operands now: a tensor_core_scope is open and T is float or a
/// running_error (the types that model it).
template <class T>
struct models_tensor_cores : std::false_type {};
template <>
struct models_tensor_cores<float> : std::true_type {};
template <class B>
struct models_tensor_cores<running_error<B>> : std::true_type {};
template <class T>
bool tensor_core_active() {
  return models_tensor_cores<T>::value && detail::operands::current != operand_format::none;
}

/// The identity for every scalar type but float and running_error (running_error.hpp).
template <class T>
const T& round_operand(const T& x) {
  return x;
}

inline float round_operand(float x) {
  const operand_format f = detail::operands::current;
  if (f == operand_format::none) return x;
  const std::uint64_t seed = detail::operands::stochastic_seed;
  return seed == 0 ? round_to_precision(x, operand_precision(f))
                   : round_to_precision_stochastically(x, operand_precision(f), seed);
}

}  // namespace kalman_oracle
