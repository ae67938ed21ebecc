// `kalman-oracle-gpu validate`, the chunked delta-rule memory's backward (docs/kernels.md, "validate"):
// the backward kernel (or its twin) at production shapes against the reference's sequential adjoint in
// binary64, run on the spot, under the fixtures' gradient budget (docs/error-model.md, "Gradients:
// first-order running error"). Shared by `validate --model gla|delta_net|gated_delta_net|kda` and the
// KDN memory of `validate --model kdn_*` (the two-key rule with the gain kernels' κ).
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <string>
#include <vector>

#include "kalman_oracle/gpu/delta_rule_backward.hpp"
#include "kalman_oracle/gpu/delta_rule_chunked.hpp"
#include "kalman_oracle/models/fixed_gain.hpp"
#include "validate_delta_rule.hpp"

namespace kalman_oracle::gpu::tools {

/// For the memory problem `forward` (inputs as the forward ran them, one key head per value head; its
/// outputs are not read): cotangents of o and the final state drawn uniform in [-1, 1] from `seed`, the
/// backward on the whole problem (`twin`: the CPU twin, else the CUDA kernel), gradients poisoned with
/// NaN first; then, for each sequence (a batch row, or one of cu_seqlens') of each sampled head,
/// `head_problem(s, h)` (one sequence, one head, binary64: the same values) through the reference's sequential adjoint (grad/fixed_gain.hpp) over
/// running_error<double>, which gives the binary64 gradient and its first-order error bound at once.
/// Every element of dq, dk, dv, dβ or dκ, dg and d_initial_state is compared against
/// 2 (2⁻²⁴ + 2⁻⁵³) × that bound: the fixtures' budget plus the binary64 run's own (an estimate, labelled
/// so); one line (or JSON object, `shape` its fields) per gradient, headed by `label`. Returns 0 when
/// every element is within budget. With `operands` tf32 the backward's products run on the tensor cores
/// (delta_rule_backward_operands::tf32), and the reference is the chunked adjoint (grad/fixed_gain_chunked.hpp,
/// chunks of 64) in a tensor_core_scope of TF32 over running_error<double>: the `tf32-tc` tier's gradient
/// budget, 2 (u E_acc + 2⁻¹¹ E_op), of the form the kernel computes (one carry, entry by entry: an estimate).
/// Beside the budget, each element is held to the typical envelope of honest binary32 members run on the same
/// head and sequence (validate_typical_envelope.hpp): beyond it but within budget, the gradient is SUSPECT,
/// which fails the check (returns 1) only with `strict`.
int check_memory_backward_against_reference(const delta_rule_problem& forward, bool twin, unsigned seed,
                                            const std::vector<long long>& heads,
                                            const memory_head_problem& head_problem, unsigned threads, bool json,
                                            const std::string& label, const nlohmann::json& shape,
                                            delta_rule_backward_operands operands = delta_rule_backward_operands::f32,
                                            bool strict = false);

}  // namespace kalman_oracle::gpu::tools
