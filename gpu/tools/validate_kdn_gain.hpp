// `kalman-oracle-gpu validate --model kdn_diagonal|kdn_isotropic`: the KDN gain kernels at
// production shapes, too large to certify in MPFR, against the binary64 reference run on the spot
// (docs/kernels.md, "validate").
#pragma once

#include <vector>

#include "kalman_oracle/gpu/kdn_gain.hpp"

namespace kalman_oracle::gpu::tools {

/// B rows of T tokens, H heads (one key head per value head), K; or, with sequences = N > 0, one row
/// (B = 1) of T tokens holding N sequences (cu_seqlens, drawn by validate_delta_rule.hpp's varlen_offsets).
struct kdn_gain_validate_shape {
  int B, T, H, K;
  int sequences = 0;
};

struct kdn_gain_validate_options {
  kdn_form form = kdn_form::diagonal;
  std::vector<kdn_gain_validate_shape> shapes;
  int sample_heads = 4;  ///< heads compared per shape (every batch row, token and channel of each)
  unsigned seed = 1;
  bool json = false;
  unsigned threads = 0;  ///< for the binary64 reference and bounds; 0: all cores
  bool twin = false;     ///< the kernels' CPU twin instead of the kernels (small shapes, CI)
  /// The memory's output or gradient beyond its typical envelope (SUSPECT) fails the run too.
  bool strict = false;
};

/// Runs every shape; prints one line (or JSON object) per shape and output; returns 0 when every
/// compared element is within its budget, 1 otherwise.
int validate_kdn_gain(const kdn_gain_validate_options& options);

}  // namespace kalman_oracle::gpu::tools
