// The CPU twin of the fused KLA forward kernel (gpu/src/kla_forward.cu; docs/kernels.md, "KLA
// forward"): the kernel's schedule, run on the CPU over the same per-element arithmetic
// (models/kla.cuh). Per element (b, m, s) the kernel folds the tokens in order, as here; per (b, t,
// m) it sums the S readout terms in the order of its split (kla_forward_readout_sum), as here.
// Nothing else is ordered: the elements are independent. So the twin computes the kernel's bits,
// which the GPU test checks.
#pragma once

#include <vector>

#include "kalman_oracle/gpu/kla_forward.hpp"
#include "kalman_oracle/gpu/models/kla.cuh"

namespace kalman_oracle::gpu {

/// y or y_var of one (b, t, m) from its S readout terms, in the forward kernel's order
/// (kla_forward_split_for). Grouped: each lane sums its `elements` terms from the first, in order
/// (a lane without elements gives +0), then the lanes' sums are added pairwise, neighbours first
/// (lanes 0 + 1, 2 + 3, …, then those sums the same way): the kernel's butterfly of shuffles, whose
/// lane j adds its own sum and lane j ^ 2^level's, the same bits either way round (binary32
/// addition commutes). Otherwise in order s = 0, 1, … from +0. Every such order is a binary tree of
/// depth at most S − 1 over the S terms (and exact zeros), the readout bounds' hypothesis
/// (docs/error-model.md, "KLA").
inline float kla_forward_readout_sum(const float* terms, int S) {
  const kla_forward_split split = kla_forward_split_for(S);
  if (!split.grouped) {
    float sum = 0.0f;
    for (int s = 0; s < S; ++s) sum = add_rn(sum, terms[s]);
    return sum;
  }
  float lane_sums[32];
  for (int lane = 0; lane < split.lanes; ++lane) {
    const int first = lane * split.elements;
    if (first >= S) {
      lane_sums[lane] = 0.0f;
      continue;
    }
    float sum = terms[first];
    for (int g = 1; g < split.elements; ++g) sum = add_rn(sum, terms[first + g]);
    lane_sums[lane] = sum;
  }
  for (int width = split.lanes; width > 1; width /= 2)
    for (int i = 0; i < width / 2; ++i) lane_sums[i] = add_rn(lane_sums[2 * i], lane_sums[2 * i + 1]);
  return lane_sums[0];
}

namespace detail {

template <class In>
void kla_forward_twin_typed(const kla_forward_problem& p) {
  const long long B = p.batch, T = p.tokens, M = p.channels, S = p.state;
  std::vector<kla_element_state> state(static_cast<std::size_t>(M * S));
  std::vector<float> mean_terms(static_cast<std::size_t>(S)), variance_terms(static_cast<std::size_t>(S));
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
        for (long long s = 0; s < S; ++s) {
          kla_element_state& x = state[m * S + s];
          kla_readout_terms terms;
          x = kla_element_step_and_readout(x, load_widened<In>(p.a_bar, offset_of(p.a_bar, b, t, m, s)),
                                           load_widened<In>(p.p_bar, offset_of(p.p_bar, b, t, m, s)),
                                           load_widened<In>(p.k, offset_of(p.k, b, t, s)), precision, value,
                                           load_widened<In>(p.q, offset_of(p.q, b, t, s)), terms);
          mean_terms[s] = terms.mean;
          variance_terms[s] = terms.variance;
        }
        p.y[(b * T + t) * M + m] = kla_forward_readout_sum(mean_terms.data(), static_cast<int>(S));
        p.y_var[(b * T + t) * M + m] = kla_forward_readout_sum(variance_terms.data(), static_cast<int>(S));
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
