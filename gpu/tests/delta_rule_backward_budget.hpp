// The chunked delta-rule backward's gradients (the twin's or the kernel's) against the reference adjoint,
// shared by its twin test and its GPU test: grad/fixed_gain_chunked.hpp in binary64 with chunks of 64 and,
// per element, the fixtures' gradient budget of a tier (docs/error-model.md, "Gradients: first-order
// running error"; "Tensor-core tiers"): 2 u × the first-order running error bound of the reference's own
// adjoint (the same template over running_error<double>, in a tensor_core_scope of the tier's operand
// format: each operand's rounding, u_op |x|, enters the bound), u = 2^-24, plus the binary64 reference's
// own (u = 2^-53). An estimate, as the fixtures' gradient budgets are.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "delta_rule_backward_cases.hpp"
#include "gradient_budget.hpp"
#include "kalman_oracle/grad/fixed_gain_chunked.hpp"
#include "kalman_oracle/scalar/operand_rounding.hpp"
#include "kalman_oracle/scalar/running_error.hpp"

namespace kalman_oracle::gpu::testing {

/// x as a tensor<S> of `shape`; with group > 1 (q and k, given per key head) each value head reads its
/// key head.
template <class S>
tensor<S> as_tensor(const char* name, const std::vector<float>& x, shape_t shape, int group = 1) {
  tensor<S> out(name, shape);
  const std::size_t HV = shape[2], inner = shape.size() > 3 ? shape[3] : 1, rows = shape[0] * shape[1];
  for (std::size_t row = 0; row < rows; ++row)
    for (std::size_t h = 0; h < HV; ++h)
      for (std::size_t i = 0; i < inner; ++i)
        out.data()[(row * HV + h) * inner + i] =
            S(static_cast<double>(x[(row * (HV / group) + h / group) * inner + i]));
  return out;
}

/// The reference's chunked adjoint (chunks of 64) of case c over x, in scalar S.
template <class S>
gradients<S> reference_gradients(const backward_case& c, const drawn& x, float tau) {
  const std::size_t B = c.B, T = c.T, HV = c.H * c.group, K = c.K, V = c.V;
  fixed_gain_inputs<S> in;
  const std::string rule = c.rule;
  in.rule = rule == "gla"               ? fixed_gain_rule::gla
            : rule == "delta_net"       ? fixed_gain_rule::delta_net
            : rule == "gated_delta_net" ? fixed_gain_rule::gated_delta_net
                                        : fixed_gain_rule::kda;
  in.q = as_tensor<S>("q", x.q, {B, T, HV, K}, c.group);
  in.k = as_tensor<S>("k", x.k, {B, T, HV, K}, c.group);
  in.v = as_tensor<S>("v", x.v, {B, T, HV, V});
  if (has_beta(c)) in.beta = as_tensor<S>("beta", x.beta, {B, T, HV});
  if (two_key(c)) in.gain = as_tensor<S>("gain", x.kappa, {B, T, HV, K});
  if (has_gate(c)) in.g = gate_per_head(c) ? as_tensor<S>("g", x.g, {B, T, HV}) : as_tensor<S>("g", x.g, {B, T, HV, K});
  if (c.initial) in.initial_state = as_tensor<S>("initial_state", x.initial, {B, HV, K, V});
  in.scale = S(static_cast<double>(tau));
  cotangents<S> cot;
  if (!x.d_o.empty()) cot.set(as_tensor<S>("o", x.d_o, {B, T, HV, V}));
  if (!x.d_final.empty()) cot.set(as_tensor<S>("final_state", x.d_final, {B, HV, K, V}));
  return fixed_gain_chunked_backward(in, cot, delta_rule_backward_chunk_tokens);
}

/// The reference's gradients of case c and their budgets' running errors under `tier` (none: binary32;
/// tf32: the `tf32-tc` tier), computed once and compared against any number of runs.
struct reference_budget {
  gradients<double> values;
  gradients<running_error<double>> errors;
  reference_budget(const backward_case& c, const drawn& x, float tau, operand_format tier)
      : values(reference_gradients<double>(c, x, tau)), errors([&] {
          const tensor_core_scope scope(tier);
          return reference_gradients<running_error<double>>(c, x, tau);
        }()) {}

  /// The worst share of the budget over every gradient of `r` (T > 0).
  worst_ratio share_of(const backward_case& c, const backward_run& r) const {
    worst_ratio worst;
    const std::size_t B = c.B, T = c.T, H = c.H, K = c.K;
    const auto compare = [&](const char* name, const std::vector<float>& got, const char* ref_name) {
      if (values.at(ref_name).size() != got.size()) {
        worst.ratio = HUGE_VAL;
        worst.where = std::string(name) + ": " + std::to_string(got.size()) + " values against the reference's " +
                      std::to_string(values.at(ref_name).size());
        return;
      }
      add_elements(worst, name, got, values.at(ref_name), errors.at(ref_name));
    };
    // dq, dk: the reference's per value head, summed over a key head's group.
    add_key_head_sums(worst, "dq", r.dq, values.at("q"), errors.at("q"), B * T, H, c.group, K);
    add_key_head_sums(worst, "dk", r.dk, values.at("k"), errors.at("k"), B * T, H, c.group, K);
    compare("dv", r.dv, "v");
    if (has_beta(c)) compare("dbeta", r.dbeta, "beta");
    if (two_key(c)) compare("dkappa", r.dkappa, "gain");
    if (has_gate(c)) compare("dg", r.dg, "g");
    if (c.initial) compare("d_initial_state", r.d_initial, "initial_state");
    return worst;
  }
};

}  // namespace kalman_oracle::gpu::testing
