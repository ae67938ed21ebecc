// `kalman-oracle-gpu validate --model gla|delta_net|gated_delta_net|kda`: the chunked delta-rule kernel
// at production shapes, too large to certify in MPFR, against the binary64 chunked WY form run on the
// spot, under the bf16-tc tier's budget (docs/kernels.md, "validate").
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <string>
#include <vector>

#include "kalman_oracle/gpu/delta_rule_chunked.hpp"
#include "kalman_oracle/models/fixed_gain.hpp"

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

/// Steps 3 and 4 of validate_delta_rule (validate_delta_rule.cpp), for any memory the kernel ran:
/// for each batch row of each sampled head, `head_problem(b, h)` (one row, one head, binary64) is run
/// in the chunked WY form with the bf16-tc budget; the kernel's o [B, T, H, V] and final_state
/// [B, H, K, V] are compared element by element and one line (or JSON object, `shape` its fields)
/// printed per output, headed by `label`. Returns 0 when every element is within budget.
int check_memory_against_reference(
    const delta_rule_validate_shape& n, const std::vector<float>& out, const std::vector<float>& final_state,
    const std::vector<long long>& heads,
    const std::function<fixed_gain_inputs<double>(long long b, long long h)>& head_problem, unsigned threads, bool json,
    const std::string& label, const nlohmann::json& shape);

}  // namespace kalman_oracle::gpu::tools
