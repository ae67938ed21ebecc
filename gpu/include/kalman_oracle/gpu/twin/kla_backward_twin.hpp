// The CPU twin of the KLA backward kernels (gpu/src/kla_backward.cu; docs/kernels.md, "KLA
// backward"): the same per-element arithmetic (models/kla.cuh) and the same order of every sum.
//   - Per element (b, m, s): the forward trajectory (the kernel recomputes it from checkpoints,
//     which are values of the same fold), then the reverse recursion token by token.
//   - dv, dΛ [b, t, m]: the S terms in order s = 0, 1, … from +0.
//   - dq, dk [b, t, s]: per block of kla_channels_per_block channels, its terms in channel order
//     from +0; then the blocks' partial sums in block order from +0.
//   - dā, dp̄ static: per element, the terms from the last token to the first, from +0; then the
//     batch rows in order from +0. Per token: the term itself.
//   - dλ₀, dη₀: the adjoints left after token 0.
// Checkpoints given with the problem are not read: the twin's own trajectory has the same values
// (the GPU test checks the kernel's checkpoints against the forward twin's).
#pragma once

#include <vector>

#include "kalman_oracle/gpu/kla_backward.hpp"
#include "kalman_oracle/gpu/models/kla.cuh"

namespace kalman_oracle::gpu {

namespace detail {

template <class In>
void kla_backward_twin_typed(const kla_backward_problem& problem) {
  const kla_forward_problem& p = problem.forward;
  const long long B = p.batch, T = p.tokens, M = p.channels, S = p.state;
  const long long per_block = kla_channels_per_block(p.state, p.channels);
  const long long blocks = (M + per_block - 1) / per_block;
  const bool per_token = kla_backward_decay_per_token(p);
  const auto cotangent = [](const float* x, long long at) { return x ? x[at] : 0.0f; };
  // Terms of one batch row, per (t, m, s): the sums run over them afterwards in the kernel's order.
  std::vector<float> q_terms(T * M * S), k_terms(T * M * S), v_terms(T * M * S), Lambda_terms(T * M * S);
  std::vector<float> a_rows(B * M * S), p_rows(B * M * S);  // dā, dp̄ per batch row (static case)
  std::vector<kla_element_state> trajectory(T + 1);
  for (long long b = 0; b < B; ++b) {
    for (long long m = 0; m < M; ++m)
      for (long long s = 0; s < S; ++s) {
        trajectory[0] = {p.lambda_0.data ? load_widened<In>(p.lambda_0, offset_of(p.lambda_0, b, m, s)) : 1.0f,
                         p.eta_0.data ? load_widened<In>(p.eta_0, offset_of(p.eta_0, b, m, s)) : 0.0f};
        for (long long t = 0; t < T; ++t)
          trajectory[t + 1] = kla_element_step(
              trajectory[t], load_widened<In>(p.a_bar, offset_of(p.a_bar, b, t, m, s)),
              load_widened<In>(p.p_bar, offset_of(p.p_bar, b, t, m, s)), load_widened<In>(p.k, offset_of(p.k, b, t, s)),
              load_widened<In>(p.Lambda, offset_of(p.Lambda, b, t, m)), load_widened<In>(p.v, offset_of(p.v, b, t, m)));
        kla_element_adjoint adjoint{cotangent(problem.dfinal_lambda, (b * M + m) * S + s),
                                    cotangent(problem.dfinal_eta, (b * M + m) * S + s)};
        float a_sum = 0.0f, p_sum = 0.0f;
        for (long long t = T; t-- > 0;) {
          const kla_gradient_terms g = kla_element_adjoint_step(
              adjoint, trajectory[t], trajectory[t + 1], load_widened<In>(p.a_bar, offset_of(p.a_bar, b, t, m, s)),
              load_widened<In>(p.p_bar, offset_of(p.p_bar, b, t, m, s)), load_widened<In>(p.k, offset_of(p.k, b, t, s)),
              load_widened<In>(p.q, offset_of(p.q, b, t, s)), load_widened<In>(p.Lambda, offset_of(p.Lambda, b, t, m)),
              load_widened<In>(p.v, offset_of(p.v, b, t, m)), cotangent(problem.dy, (b * T + t) * M + m),
              cotangent(problem.dy_var, (b * T + t) * M + m));
          const long long at = (t * M + m) * S + s;
          q_terms[at] = g.q;
          k_terms[at] = g.k;
          v_terms[at] = g.v;
          Lambda_terms[at] = g.Lambda;
          if (per_token) {
            problem.da_bar[((b * T + t) * M + m) * S + s] = g.a_bar;
            problem.dp_bar[((b * T + t) * M + m) * S + s] = g.p_bar;
          } else {
            a_sum = add_rn(a_sum, g.a_bar);
            p_sum = add_rn(p_sum, g.p_bar);
          }
        }
        a_rows[(b * M + m) * S + s] = a_sum;
        p_rows[(b * M + m) * S + s] = p_sum;
        problem.dlambda_0[(b * M + m) * S + s] = adjoint.lambda;
        problem.deta_0[(b * M + m) * S + s] = adjoint.eta;
      }
    for (long long t = 0; t < T; ++t) {
      for (long long m = 0; m < M; ++m) {
        float v_sum = 0.0f, Lambda_sum = 0.0f;
        for (long long s = 0; s < S; ++s) {
          v_sum = add_rn(v_sum, v_terms[(t * M + m) * S + s]);
          Lambda_sum = add_rn(Lambda_sum, Lambda_terms[(t * M + m) * S + s]);
        }
        problem.dv[(b * T + t) * M + m] = v_sum;
        problem.dLambda[(b * T + t) * M + m] = Lambda_sum;
      }
      for (long long s = 0; s < S; ++s) {
        float q_total = 0.0f, k_total = 0.0f;
        for (long long block = 0; block < blocks; ++block) {
          float q_block = 0.0f, k_block = 0.0f;
          for (long long m = block * per_block; m < M && m < (block + 1) * per_block; ++m) {
            q_block = add_rn(q_block, q_terms[(t * M + m) * S + s]);
            k_block = add_rn(k_block, k_terms[(t * M + m) * S + s]);
          }
          q_total = add_rn(q_total, q_block);
          k_total = add_rn(k_total, k_block);
        }
        problem.dq[(b * T + t) * S + s] = q_total;
        problem.dk[(b * T + t) * S + s] = k_total;
      }
    }
  }
  if (!per_token)
    for (long long i = 0; i < M * S; ++i) {
      float a_total = 0.0f, p_total = 0.0f;
      for (long long b = 0; b < B; ++b) {
        a_total = add_rn(a_total, a_rows[b * M * S + i]);
        p_total = add_rn(p_total, p_rows[b * M * S + i]);
      }
      problem.da_bar[i] = a_total;
      problem.dp_bar[i] = p_total;
    }
}

}  // namespace detail

/// The twin on host pointers (kla_backward.hpp's problem).
inline void kla_backward_twin(const kla_backward_problem& problem) {
  kla_backward_check(problem);
  switch (problem.forward.dtype) {
    case input_dtype::f32: return detail::kla_backward_twin_typed<float>(problem);
    case input_dtype::bf16: return detail::kla_backward_twin_typed<bf16_bits>(problem);
    case input_dtype::f16: return detail::kla_backward_twin_typed<f16_bits>(problem);
  }
}

}  // namespace kalman_oracle::gpu
