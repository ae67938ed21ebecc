// `kalman-oracle-gpu validate --model kla`: the KLA forward kernel at production shapes, too large
// to certify in MPFR, against the binary64 reference run on the spot (docs/kernels.md, "validate").
#pragma once

#include <string>
#include <vector>

#include "kalman_oracle/gpu/kla_forward.hpp"

namespace kalman_oracle::gpu::tools {

struct kla_validate_shape {
  int B, T, M, S;
};

struct kla_validate_options {
  std::vector<kla_validate_shape> shapes;
  int sample_channels = 32;  ///< channels compared per shape (all s, all batch rows, all tokens)
  unsigned seed = 1;
  bool json = false;
  unsigned threads = 0;  ///< for the binary64 reference and the bounds; 0: all cores
  bool twin = false;     ///< the kernel's CPU twin instead of the kernel (small shapes, CI)
};

/// The binary32 inputs of one KLA problem, contiguous; ā, p̄ static [M, S].
struct kla_validate_inputs {
  std::vector<float> q, k, v, Lambda, a_bar, p_bar, lambda_0, eta_0;
};

/// A forward problem (binary32, host pointers) viewing `x` with sizes B, T, M, S; outputs and
/// checkpoints unset.
kla_forward_problem kla_problem_of(const kla_validate_inputs& x, int B, int T, int M, int S);

/// Runs every shape; prints one line (or JSON object) per shape and output; returns 0 when every
/// compared element is within its budget, 1 otherwise.
int validate_kla(const kla_validate_options& options);

}  // namespace kalman_oracle::gpu::tools
