// Tensor-core arithmetic (docs/error-model.md, "Tensor-core tiers"): a matrix product whose operands
// are rounded once to a narrow format (bfloat16, binary16 or TF32) and whose products are summed in
// binary32. The chunked forms (models/fixed_gain_chunked.hpp) pass every matrix-product operand
// through round_operand(x), which is the identity unless a tensor_core_scope is open on this thread:
//   * over float, the operand is rounded to nearest-even in the scope's format (an emulation of a
//     tensor-core kernel: its fp32 accumulation is the float arithmetic around it);
//   * over running_error<B>, the operand's own rounding, at most u_op |x|, is added to its first-order
//     error bound (in units of u = 2^-24: u_op / u |x|).
// Every other scalar type (rationals, MPFR, intervals) ignores the scope.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

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
  return f == operand_format::none ? x : round_to_precision(x, operand_precision(f));
}

}  // namespace kalman_oracle
