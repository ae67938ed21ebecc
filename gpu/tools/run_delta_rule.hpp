// `kalman-oracle-gpu run` for the fixed-gain family's fixtures (gla, delta_net, gated_delta_net, kda):
// the chunked delta-rule kernel (or its CPU twin) on a fixture's inputs, written as a partial
// candidate holding o and final_state. The kernel computes in the bf16-tc tier's arithmetic (bfloat16
// operands, binary32 accumulation) and no gradients: check with
// `conform --arithmetic bf16-tc --outputs o,final_state` (docs/kernels.md, "Chunked delta-rule memory").
#pragma once

#include "kalman_oracle/io/safetensors.hpp"
#include "run_kla.hpp"

namespace kalman_oracle::gpu::tools {

/// The candidate for fixed-gain fixture `fixture` (read from `source`); a varlen fixture runs
/// sequence by sequence.
safetensors::file run_delta_rule(const safetensors::file& fixture, const std::string& source, executor on);

}  // namespace kalman_oracle::gpu::tools
