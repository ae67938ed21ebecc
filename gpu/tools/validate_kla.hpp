// `kalman-oracle-gpu validate --model kla`: the KLA forward kernel at production shapes, too large
// to certify in MPFR, against the binary64 reference run on the spot (docs/kernels.md, "validate").
#pragma once

#include <string>
#include <vector>

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

/// Runs every shape; prints one line (or JSON object) per shape and output; returns 0 when every
/// compared element is within its budget, 1 otherwise.
int validate_kla(const kla_validate_options& options);

}  // namespace kalman_oracle::gpu::tools
