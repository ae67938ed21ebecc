// The tensor-core tiers' first-order budget per element (docs/error-model.md, "Tensor-core tiers"), in
// one place for the fixture generator (fixtures/lib/tensor_core_tier.cpp) and for checking a kernel
// on the spot against a binary64 run (gpu/tools/validate_delta_rule.cpp, the GPU tests).
//
// A chunked form run over running_error<double> gives per element a first-order error bound in units
// of u = 2^-24 (scalar/running_error.hpp). Four runs: the chunk-start state's errors carried entry by
// entry or norm-wise (models/wy_chunk_error_bound.hpp), each without operand rounding (E_acc) and with
// bfloat16 operands (E_acc + (u_op / u) E_op). E_op is their difference over u_op / u = 2^16. Entry by
// entry every contribution is non-negative and linear in u_op, so the line through the pair's two points
// is the bound at every u_op <= 2^-8. Norm-wise the runs keep, entry by entry, the smaller of two bounds
// (the carried errors; the structured bounds inside a chunk's reverse), and a minimum of affine terms is
// concave: the line is then not a bound by construction between its points. Measured against direct
// 11-bit runs (docs/error-model.md, "Tensor-core tiers"): on the default suite the line falls short at
// u_op = 2^-11 by at most 2.3% (a gradient; outputs by rounding only), inside the factor 2. Element by
// element the pair with the smaller bfloat16 budget is kept. The budget of a format with unit roundoff
// u_op is 2 (u E_acc + u_op E_op): the factor 2 covers the second-order terms the running error drops
// (an estimate, not a proof).
#pragma once

#include <algorithm>
#include <cmath>
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

/// The terms of one element from its four running errors (units of u): without and with bfloat16
/// operands, the chunk-start errors carried entry by entry and norm-wise.
inline tensor_core_terms tensor_core_first_order_terms(double plain, double rounded, double plain_normwise,
                                                       double rounded_normwise) {
  const double ratio = operand_unit_roundoff(operand_format::bf16) / 0x1p-24;
  tensor_core_terms entrywise{plain, std::max(0.0, (rounded - plain) / ratio)};
  const tensor_core_terms normwise{plain_normwise, std::max(0.0, (rounded_normwise - plain_normwise) / ratio)};
  // Compared at u_op = 2^-8 (in units of u: E_acc + 2^16 E_op); a non-finite one never wins.
  const bool entrywise_finite = std::isfinite(entrywise.accumulation + entrywise.operand);
  if (normwise.accumulation + ratio * normwise.operand < entrywise.accumulation + ratio * entrywise.operand ||
      !entrywise_finite)
    entrywise = normwise;
  if (!entrywise.finite()) {
    // Not finite where binary64's exponent range does not hold the form's decay ratios (a chunk's log
    // gates summing below about -709: strong decay): the tier says nothing there.
    entrywise.accumulation = entrywise.operand = std::numeric_limits<double>::infinity();
  }
  return entrywise;
}

}  // namespace kalman_oracle::check
