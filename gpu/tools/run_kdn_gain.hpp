// `kalman-oracle-gpu run` for KDN fixtures (kdn_diagonal, kdn_isotropic): the gain kernels (or their
// CPU twin) on a fixture's inputs, written as a partial candidate: final_covariance and
// readout_variance, and the internals predicted_covariance and gain (diagonal) or beta (isotropic)
// where the fixture stores them: check with `conform --outputs final_covariance,readout_variance`.
// With --with-memory the chunked delta-rule kernel adds the memory (o, final_state) on tensor cores.
// With --gradients, the whole KDN's backward instead: the memory's (the chunked delta-rule backward,
// binary32, or with `operands` tf32 its products on the tensor cores) from the fixture's cotangents of o and the final state, then the gain path's with the
// gain's cotangent that the memory's gives, the other cotangents from the fixture; the candidate holds
// the gradients alone (`conform --gradients-only`).
#pragma once

#include "kalman_oracle/gpu/delta_rule_backward.hpp"
#include "kalman_oracle/io/safetensors.hpp"
#include "run_kla.hpp"

namespace kalman_oracle::gpu::tools {

/// The candidate for KDN fixture `fixture` (read from `source`); a varlen fixture's gains, memory and their
/// backwards run in one call each (cu_seqlens). With `memory`, the chunked
/// delta-rule kernel (run_delta_rule.hpp) then runs the memory
/// with the gains just computed (the two-key rule with κ_t: the diagonal gain, or β_t k_t),
/// and the candidate holds o and final_state too, in the bf16-tc tier's arithmetic: check with
/// `conform --arithmetic bf16-tc --outputs o,final_state,final_covariance,readout_variance`.
safetensors::file run_kdn_gain(const safetensors::file& fixture, const std::string& source, executor on,
                               bool memory = false, bool gradients = false,
                               delta_rule_backward_operands operands = delta_rule_backward_operands::f32);

}  // namespace kalman_oracle::gpu::tools
