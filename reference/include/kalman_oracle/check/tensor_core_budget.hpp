// The tensor-core tiers' first-order budget per element (docs/error-model.md, "Tensor-core tiers"), in
// one place for the fixture generator (fixtures/lib/tensor_core_tier.cpp) and for checking a kernel
// on the spot against a binary64 run (gpu/tools/validate_delta_rule.cpp, the GPU tests).
//
// A chunked form run over running_error<double> gives per element a first-order error bound in units
// of u = 2^-24 (scalar/running_error.hpp). The chunk-start state's errors are carried entry by entry or
// norm-wise (models/wy_chunk_error_bound.hpp); each carry is run without operand rounding (E_acc) and
// with operands rounded to each format whose tier the budget must serve (bfloat16, u_op = 2^-8; 11
// significand bits, 2^-11, binary16 and TF32 alike). The stored budget of a format with unit roundoff
// u_op is the line 2 (u E_acc + u_op E_op), E_op per unit u_op. Entry by entry every contribution is
// non-negative and linear in u_op, so one rounded run fixes the line. Norm-wise the runs keep, entry
// by entry, the smaller of two bounds (the carried errors; the structured bounds inside a chunk's
// reverse), so the bound is not affine in u_op and a line through two of its points need not bound it
// at a third: E_op is the largest chord slope (rounded - plain) / (u_op / u) over the formats run,
// which puts the line at or above the direct run at each of them (until 2026-12-05 only the bfloat16
// run was made, and the line fell short of direct 11-bit runs by up to 2.3% on a gradient). Element by
// element the carry with the smaller budget at the comparison format is kept. The factor 2 covers the
// second-order terms the running error drops (an estimate, not a proof).
#pragma once

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <limits>

#include "kalman_oracle/scalar/operand_rounding.hpp"

namespace kalman_oracle::check {

/// One element's first-order error terms: E_acc in units of u = 2^-24 (the binary32 arithmetic) and
/// E_op per unit u_op (the operand roundings); infinite where the runs are not finite.
struct tensor_core_terms {
  double accumulation = 0, operand = 0;

  bool finite() const { return std::isfinite(accumulation) && std::isfinite(operand); }
  /// 2 u E_acc: the fixtures' <output>.tc_bound.
  double accumulation_budget() const {
    return finite() ? 2 * 0x1p-24 * accumulation : std::numeric_limits<double>::infinity();
  }
  /// 2 E_op: the fixtures' <output>.tc_operand_bound (per unit u_op).
  double operand_budget() const { return finite() ? 2 * operand : std::numeric_limits<double>::infinity(); }
  /// The budget of a kernel whose matrix-product operands are rounded to a format of unit roundoff
  /// u_op, binary32 accumulation: 2 (u E_acc + u_op E_op).
  double budget(double operand_unit_roundoff) const {
    return accumulation_budget() + operand_unit_roundoff * operand_budget();
  }
};

/// One rounded run of a carry: the operands rounded to a format of unit roundoff `unit_roundoff`, the
/// element's running error `error` (units of u).
struct operand_rounded_run {
  double unit_roundoff = 0, error = 0;
};

/// One carry's terms: E_acc its run without operand rounding, E_op the largest chord slope over its
/// rounded runs (per unit u_op; 0 where rounding added nothing), so that the line is at or above each
/// rounded run at that run's u_op. Infinite where a run is not finite.
inline tensor_core_terms tensor_core_carry_terms(double plain, std::initializer_list<operand_rounded_run> rounded) {
  constexpr double infinite = std::numeric_limits<double>::infinity();
  // Not finite (overflow, NaN) where a run is not: the tier then says nothing there.
  if (!std::isfinite(plain)) return {infinite, infinite};
  tensor_core_terms t{plain, 0};
  for (const operand_rounded_run& r : rounded) {
    if (!(r.unit_roundoff > 0)) continue;  // u_op = 0 (no operand rounding): the plain run itself
    if (!std::isfinite(r.error)) return {infinite, infinite};
    t.operand = std::max(t.operand, (r.error - plain) / (r.unit_roundoff / 0x1p-24));
  }
  return t;
}

/// Of the two carries' terms, the one whose budget at `compare_unit_roundoff` is the smaller (a
/// non-finite one never wins); infinite both where neither is finite. Not finite where binary64's
/// exponent range does not hold the form's decay ratios (a chunk's log gates summing below about -709:
/// strong decay): the tier says nothing there.
inline tensor_core_terms smaller_tensor_core_terms(const tensor_core_terms& entrywise,
                                                   const tensor_core_terms& normwise, double compare_unit_roundoff) {
  const double ratio = compare_unit_roundoff / 0x1p-24;
  const double e = entrywise.accumulation + ratio * entrywise.operand;
  const double n = normwise.accumulation + ratio * normwise.operand;
  tensor_core_terms kept = (!std::isfinite(e) || n < e) ? normwise : entrywise;
  if (!kept.finite()) kept.accumulation = kept.operand = std::numeric_limits<double>::infinity();
  return kept;
}

/// The terms of one element from its four running errors (units of u): without operand rounding and
/// with operands rounded to a format of unit roundoff `u_op`, the chunk-start errors carried entry by
/// entry and norm-wise: the budget of that format alone (validate's and the GPU tests' on-the-spot
/// check, which run the kernel's own format).
inline tensor_core_terms tensor_core_first_order_terms(double plain, double rounded, double plain_normwise,
                                                       double rounded_normwise, double u_op) {
  return smaller_tensor_core_terms(tensor_core_carry_terms(plain, {{u_op, rounded}}),
                                   tensor_core_carry_terms(plain_normwise, {{u_op, rounded_normwise}}), u_op);
}

}  // namespace kalman_oracle::check
