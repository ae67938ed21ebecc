// The CPU twin of the fused KLA forward kernel (gpu/src/kla_forward.cu; docs/kernels.md, "KLA
// forward"): the kernel's schedule, run on the CPU over the same per-element arithmetic
// (models/kla.cuh). Per element (b, m, s) the kernel folds the tokens in order, as here; per (b, t,
// m) it sums the S readout terms in order s = 0, 1, … from +0, as here. Nothing else is ordered: the
// elements are independent. So the twin computes the kernel's bits, which the GPU test checks.
#pragma once

#include <vector>

#include "kalman_oracle/gpu/kla_forward.hpp"
#include "kalman_oracle/gpu/models/kla.cuh"

namespace kalman_oracle::gpu {

namespace detail {

template <class In>
void kla_forward_twin_typed(const kla_forward_problem& p) {
  const long long B = p.batch, T = p.tokens, M = p.channels, S = p.state;
  std::vector<kla_element_state> state(static_cast<std::size_t>(M * S));
  for (long long b = 0; b < B; ++b) {
    for (long long m = 0; m < M; ++m)
      for (long long s = 0; s < S; ++s)
        state[m * S + s] = {p.lambda_0.data ? load_widened<In>(p.lambda_0, offset_of(p.lambda_0, b, m, s)) : 1.0f,
                            p.eta_0.data ? load_widened<In>(p.eta_0, offset_of(p.eta_0, b, m, s)) : 0.0f};
    const long long chunks = (T + kla_chunk_tokens - 1) / kla_chunk_tokens;
    for (long long t = 0; t < T; ++t) {
      if (p.checkpoint_lambda != nullptr && t % kla_chunk_tokens == 0)
        for (long long i = 0; i < M * S; ++i) {
          p.checkpoint_lambda[(b * chunks + t / kla_chunk_tokens) * M * S + i] = state[i].lambda;
          p.checkpoint_eta[(b * chunks + t / kla_chunk_tokens) * M * S + i] = state[i].eta;
        }
      for (long long m = 0; m < M; ++m) {
        const float precision = load_widened<In>(p.Lambda, offset_of(p.Lambda, b, t, m));
        const float value = load_widened<In>(p.v, offset_of(p.v, b, t, m));
        float y = 0.0f, y_var = 0.0f;
        for (long long s = 0; s < S; ++s) {
          kla_element_state& x = state[m * S + s];
          kla_readout_terms terms;
          x = kla_element_step_and_readout(x, load_widened<In>(p.a_bar, offset_of(p.a_bar, b, t, m, s)),
                                           load_widened<In>(p.p_bar, offset_of(p.p_bar, b, t, m, s)),
                                           load_widened<In>(p.k, offset_of(p.k, b, t, s)), precision, value,
                                           load_widened<In>(p.q, offset_of(p.q, b, t, s)), terms);
          y = add_rn(y, terms.mean);
          y_var = add_rn(y_var, terms.variance);
        }
        p.y[(b * T + t) * M + m] = y;
        p.y_var[(b * T + t) * M + m] = y_var;
      }
    }
    for (long long i = 0; i < M * S; ++i) {
      p.final_lambda[b * M * S + i] = state[i].lambda;
      p.final_eta[b * M * S + i] = state[i].eta;
    }
  }
}

}  // namespace detail

/// The twin on host pointers (kla_forward.hpp's problem).
inline void kla_forward_twin(const kla_forward_problem& problem) {
  kla_forward_check(problem);
  switch (problem.dtype) {
    case input_dtype::f32: return detail::kla_forward_twin_typed<float>(problem);
    case input_dtype::bf16: return detail::kla_forward_twin_typed<bf16_bits>(problem);
    case input_dtype::f16: return detail::kla_forward_twin_typed<f16_bits>(problem);
  }
}

}  // namespace kalman_oracle::gpu
