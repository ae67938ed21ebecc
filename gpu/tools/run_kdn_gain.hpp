// `kalman-oracle-gpu run` for KDN fixtures (kdn_diagonal, kdn_isotropic): the gain kernels (or their
// CPU twin) on a fixture's inputs, written as a partial candidate: final_covariance and
// readout_variance, and the internals predicted_covariance and gain (diagonal) or beta (isotropic)
// where the fixture stores them. The memory (o, final_state) and the gradients are not the gain
// kernels' (docs/kernels.md, "KDN gains"): check with `conform --outputs final_covariance,readout_variance`.
#pragma once

#include "kalman_oracle/io/safetensors.hpp"
#include "run_kla.hpp"

namespace kalman_oracle::gpu::tools {

/// The candidate for KDN fixture `fixture` (read from `source`); a varlen fixture runs sequence by
/// sequence.
safetensors::file run_kdn_gain(const safetensors::file& fixture, const std::string& source, executor on);

}  // namespace kalman_oracle::gpu::tools
