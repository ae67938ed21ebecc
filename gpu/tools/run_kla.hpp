// `kalman-oracle-gpu run` for KLA fixtures: the fused forward kernel and, where the fixture has
// cotangents, the backward kernels (or their CPU twins) on a fixture's inputs, written as a candidate
// holding y, y_var, final_lambda, final_eta and the fixture's gradients (binary32).
#pragma once

#include "kalman_oracle/io/safetensors.hpp"

namespace kalman_oracle::gpu::tools {

enum class executor { twin, cuda };

/// The candidate for KLA fixture `fixture` (read from `source`).
safetensors::file run_kla(const safetensors::file& fixture, const std::string& source, executor on);

}  // namespace kalman_oracle::gpu::tools
