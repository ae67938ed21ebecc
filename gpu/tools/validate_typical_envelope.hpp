// The typical envelope of validate's delta-rule checks at production shapes (docs/kernels.md, "validate",
// "The typical envelope"). Where the budget of an output or gradient reaches its scale (DeltaNet without
// decay: its forward's o and final_state under bf16-tc, its backward's dβ at K = 128 from T of a few
// thousand; the first-order bounds add every token's rounding at full weight, docs/error-model.md, "Where
// the bound stays loose") the budget cannot tell an honest kernel from one whose state is rounded to
// bfloat16; the fixtures' typical tier can (docs/error-model.md, "Typical tier"), but the fixtures'
// gradients stop short of these shapes (at K = V = 128, T <= 129). So validate runs the same kind of
// ensemble on the spot, on each sampled head and sequence: honest evaluations of the same outputs or
// gradients by other orders of operations, none of them the kernel's own code, and per element the envelope
//
//     typical_i = 16 · max(E_i, ρ R_i, Ē, 2^-24 |y_i|)   (capped at the element's budget),
//
// E_i the members' largest |member − binary64| at element i, R_i the element's budget (its own error
// scale), ρ the median over the output's compared elements of E_j / R_j and Ē the median of E_j: the
// fixtures' floor ρ s_i with two scales s_i, the element's budget and the output's largest |y|, the larger
// floor taken. Why both: an honest kernel whose association differs from every member's (the twin's dq in
// a chunk's first tokens, its dk under decay) errs up to about 12 times the largest member at single elements
// of millions, where one floor or the other is low (docs/kernels.md, "The typical envelope", measured). A
// kernel value within its budget but beyond the envelope is SUSPECT: nothing is proven wrong, but no honest
// evaluation the tool ran errs so.
#pragma once

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "kalman_oracle/gpu/delta_rule_backward.hpp"
#include "kalman_oracle/grad/common.hpp"
#include "kalman_oracle/models/fixed_gain.hpp"
#include "kalman_oracle/scalar/running_error.hpp"

namespace kalman_oracle::gpu::tools {

/// The members' largest error per element of each output (o, final_state) or gradient (by the reference's
/// input name: q, k, v, beta, gain, g, initial_state), in two parts whose envelopes add (the fixtures'
/// tensor-core checks add the accumulation's envelope to the operands', fixtures/lib/check.cpp).
struct ensemble_errors {
  /// The binary32 members: the sequential form (models/fixed_gain.hpp, grad/fixed_gain.hpp) with round to
  /// nearest and with a fused multiply-add wherever a product meets a sum, and the chunked WY form
  /// (models/fixed_gain_chunked.hpp, grad/fixed_gain_chunked.hpp) with chunks of 16, 32, 64, 128 and 256; for a
  /// tf32 backward the chunked ones only (the fixtures' chunked_typical).
  std::map<std::string, std::vector<double>> binary32;
  /// The members with rounded operands (tensor_core_scope): the chunked form with those five chunk sizes
  /// under both associations of the decays, with bfloat16 operands for the forward (bf16-tc) and 11-bit
  /// ones (tf32-tc) for a tf32 backward, which adds four with the operands rounded stochastically (each its
  /// own seed; fixtures/lib/typical.hpp says why). Empty for a binary32 backward.
  std::map<std::string, std::vector<double>> operands;
};

/// The forward's members on one head and sequence (`problem`: binary64 values of binary32 inputs, so
/// every member reads the kernel's inputs exactly) against the binary64 chunked form's `o` and
/// `final_state`. Single-threaded: the operand and association choices are this thread's scopes.
ensemble_errors run_forward_ensemble(const fixed_gain_inputs<double>& problem, const tensor<double>& o,
                                     const tensor<double>& final_state);

/// The backward's members with the cotangents `cot`, against the binary64 gradients `reference` (the
/// values of the running-error adjoint); `operands` the kernel's products (f32: no operand members).
ensemble_errors run_backward_ensemble(const fixed_gain_inputs<double>& problem, const cotangents<double>& cot,
                                      const gradients<running_error<double>>& reference,
                                      delta_rule_backward_operands operands);

/// One output's floors (above), from its compared elements.
struct typical_floor {
  double per_budget = 0;  ///< ρ: the median of E_j / R_j
  double absolute = 0;    ///< Ē: the median of E_j
  /// The element's floor. ρ = 0 (most members exact, or most budgets infinite) contributes nothing, not
  /// 0 · ∞ = NaN where the element's budget is infinite (the tier says nothing there): a NaN envelope would
  /// count the element beyond it.
  double at(double budget) const { return std::max(per_budget > 0 ? per_budget * budget : 0.0, absolute); }
};

/// The floors of one output from each compared element's largest member error and budget (elements with
/// a non-finite error or a zero budget are left out of ρ's median, non-finite errors out of Ē's).
typical_floor typical_floor_of(const std::vector<double>& largest, const std::vector<double>& budgets);

/// typical_i above, uncapped: check::typical_factor · max(largest_error, floor, 2^-24 |reference|).
double typical_envelope(double largest_error, double reference, double floor);

}  // namespace kalman_oracle::gpu::tools
