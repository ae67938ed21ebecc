// `kalman-oracle-gpu validate --model gla|delta_net|gated_delta_net|kda`: the chunked delta-rule kernel
// at production shapes, too large to certify in MPFR, against the binary64 chunked WY form run on the
// spot, under the bf16-tc tier's budget (docs/kernels.md, "validate").
#pragma once

#include <string>
#include <vector>

#include "kalman_oracle/gpu/delta_rule_chunked.hpp"

namespace kalman_oracle::gpu::tools {

struct delta_rule_validate_shape {
  int B, T, H, K, V;
};

struct delta_rule_validate_options {
  std::string model = "kda";  ///< gla, delta_net, gated_delta_net or kda
  std::vector<delta_rule_validate_shape> shapes;
  int sample_heads = 4;  ///< heads compared per shape (every batch row, token and channel of each)
  unsigned seed = 1;
  bool json = false;
  unsigned threads = 0;  ///< for the binary64 reference and budgets; 0: all cores
  bool twin = false;     ///< the kernel's CPU twin instead of the kernel (small shapes, CI)
};

/// Runs every shape; prints one line (or JSON object) per shape and output; returns 0 when every
/// compared element is within its budget, 1 otherwise.
int validate_delta_rule(const delta_rule_validate_options& options);

}  // namespace kalman_oracle::gpu::tools
