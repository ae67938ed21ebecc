// `kalman-oracle-gpu run` for the fixed-gain family's fixtures (gla, delta_net, gated_delta_net, kda):
// the chunked delta-rule kernel (or its CPU twin) on a fixture's inputs, written as a partial
// candidate holding o and final_state. The kernel computes in the bf16-tc tier's arithmetic (bfloat16
// operands, binary32 accumulation) and no gradients: check with
// `conform --arithmetic bf16-tc --outputs o,final_state` (docs/kernels.md, "Chunked delta-rule memory").
#pragma once

#include <vector>

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
/// [N, HV, K, V].
void run_delta_rule_sequences(delta_rule_problem p, const delta_rule_views& all, const std::vector<long long>& starts,
                              const std::vector<long long>& ends, bool varlen, long long B, long long T,
                              std::vector<float>& o, std::vector<float>& final_state, executor on);

/// The candidate for fixed-gain fixture `fixture` (read from `source`); a varlen fixture runs
/// sequence by sequence.
safetensors::file run_delta_rule(const safetensors::file& fixture, const std::string& source, executor on);

}  // namespace kalman_oracle::gpu::tools
