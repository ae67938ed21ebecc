// `kalman-oracle-gpu run` for the fixed-gain family's fixtures (gla, delta_net, gated_delta_net, kda):
// the chunked delta-rule kernel (or its CPU twin) on a fixture's inputs, written as a partial
// candidate holding o and final_state. The kernel computes in the bf16-tc tier's arithmetic (bfloat16
// operands, binary32 accumulation) and no gradients: check with
// `conform --arithmetic bf16-tc --outputs o,final_state` (docs/kernels.md, "Chunked delta-rule memory").
// With `gradients`, the chunked backward instead (delta_rule_backward.hpp; binary32, or with `operands`
// tf32 its products on the tensor cores) from the fixture's cotangents: a candidate holding every
// gradient and nothing else, checked with `conform --gradients-only` under the fixture's binary32
// gradient budgets (tf32: `--arithmetic tf32-tc`).
#pragma once

#include <vector>

#include "kalman_oracle/gpu/delta_rule_backward.hpp"
#include "kalman_oracle/gpu/delta_rule_chunked.hpp"
#include "kalman_oracle/io/safetensors.hpp"
#include "run_kla.hpp"

namespace kalman_oracle::gpu::tools {

/// The inputs of a whole fixture as the kernel reads them (broadcast to [B, T, …]; initial_state
/// [N, HV, K, V], one per sequence).
struct delta_rule_views {
  strided_input q, k, v, beta, kappa, g, initial_state;
};

/// Runs `p` (its rule, gate, sizes, dtype and τ set) over the sequences [starts[n], ends[n]) of B
/// rows of T tokens (varlen: B = 1, each sequence with its own prior), writing o [B, T, HV, V] and final_state
/// [N, HV, K, V]: one call of the kernel (or twin), a varlen batch through its cu_seqlens.
void run_delta_rule_sequences(delta_rule_problem p, const delta_rule_views& all, const std::vector<long long>& starts,
                              const std::vector<long long>& ends, bool varlen, long long B, long long T,
                              std::vector<float>& o, std::vector<float>& final_state, executor on);

/// The gradient buffers of run_delta_rule_backward_sequences, laid out as the fixture's gradients:
/// dq, dk [B, T, H, K]; dv [B, T, HV, V]; dbeta [B, T, HV]; dg [B, T, HV] or [B, T, HV, K];
/// dinitial_state [N, HV, K, V] (the ones the rule has; the others empty).
struct delta_rule_gradients {
  std::vector<float> dq, dk, dv, dbeta, dkappa, dg, dinitial_state;
};

/// The backward of run_delta_rule_sequences' problem from the cotangents d_o [B, T, HV, V] and
/// d_final_state [N, HV, K, V] (null: zero), in one call as the forward, its products in `operands`'
/// arithmetic; `grads` sized here.
void run_delta_rule_backward_sequences(delta_rule_problem p, const delta_rule_views& all,
                                       const std::vector<long long>& starts, const std::vector<long long>& ends,
                                       bool varlen, long long B, long long T, const float* d_o,
                                       const float* d_final_state, delta_rule_gradients& grads, executor on,
                                       delta_rule_backward_operands operands = delta_rule_backward_operands::f32);

/// The candidate for fixed-gain fixture `fixture` (read from `source`); a varlen fixture runs in one
/// call (cu_seqlens), forward and backward. With `gradients`: the backward's gradients only (input_error for a fixture
/// without cotangents), the backward's products in `operands`' arithmetic.
safetensors::file run_delta_rule(const safetensors::file& fixture, const std::string& source, executor on,
                                 bool gradients = false,
                                 delta_rule_backward_operands operands = delta_rule_backward_operands::f32);

}  // namespace kalman_oracle::gpu::tools
