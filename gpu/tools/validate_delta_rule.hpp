// `kalman-oracle-gpu validate --model gla|delta_net|gated_delta_net|kda`: the chunked delta-rule kernel
// at production shapes, too large to certify in MPFR, against the binary64 chunked WY form run on the
// spot, under the bf16-tc tier's budget (docs/kernels.md, "validate").
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <string>
#include <vector>

#include "kalman_oracle/gpu/delta_rule_backward.hpp"
#include "kalman_oracle/gpu/delta_rule_chunked.hpp"
#include "kalman_oracle/gpu/delta_rule_sequences.hpp"
#include "kalman_oracle/models/fixed_gain.hpp"

namespace kalman_oracle::gpu::tools {

/// B rows of T tokens each, H heads (one key head per value head), K, V; or, with sequences = N > 0,
/// one row (B = 1) of T tokens holding N sequences back to back (the kernels' cu_seqlens), their lengths
/// drawn by varlen_offsets.
struct delta_rule_validate_shape {
  int B, T, H, K, V;
  int sequences = 0;
};

/// The cu_seqlens of `sequences` sequences in T tokens (N + 1 offsets, 0 … T), drawn from `seed`:
/// lengths at the chunk edges first (0, 1, C − 1, C, C + 1, 2C − 1, 2C, 2C + 1 with C = 64, while the
/// tokens last and one sequence is left for the rest), the rest cut uniformly at random; the order
/// shuffled, so that sequences start anywhere in a chunk of the packed row.
std::vector<long long> varlen_offsets(int tokens, int sequences, unsigned seed);

struct delta_rule_validate_options {
  std::string model = "kda";  ///< gla, delta_net, gated_delta_net or kda
  std::vector<delta_rule_validate_shape> shapes;
  int sample_heads = 4;  ///< heads compared per shape (every batch row, token and channel of each)
  unsigned seed = 1;
  bool json = false;
  unsigned threads = 0;  ///< for the binary64 reference and budgets; 0: all cores
  bool twin = false;     ///< the kernel's CPU twin instead of the kernel (small shapes, CI)
  /// The backward's products: f32 (binary32, the sequential adjoint's budget) or tf32 (the tensor cores,
  /// the tf32-tc tier's budget of the chunked adjoint).
  delta_rule_backward_operands backward_operands = delta_rule_backward_operands::f32;
  /// An output or gradient beyond its typical envelope (SUSPECT) fails the run too.
  bool strict = false;
};

/// Runs every shape; prints one line (or JSON object) per shape and output; returns 0 when every
/// compared element is within its budget (and, with `strict`, every gradient within its typical
/// envelope), 1 otherwise.
int validate_delta_rule(const delta_rule_validate_options& options);

/// The sequences of a memory problem by their definition (batch row b, or cu_seqlens[n] … cu_seqlens[n + 1]
/// − 1 with states n), not through the kernels' chunk map (delta_rule_sequences.hpp), so that a bug there
/// is not copied into the reference's inputs.
std::vector<delta_rule_sequence> validate_sequences(const delta_rule_problem& p);

/// One sequence and head of a memory problem as the reference's one-row, one-head binary64 problem.
using memory_head_problem = std::function<fixed_gain_inputs<double>(const delta_rule_sequence& s, long long h)>;

/// Steps 3 and 4 of validate_delta_rule (validate_delta_rule.cpp), for any memory the kernel ran:
/// for each sequence (delta_rule_sequence_list: the batch rows, or cu_seqlens' sequences) of each
/// sampled head, `head_problem(s, h)` is run in the chunked WY form with the bf16-tc budget; the
/// kernel's o [B, T, H, V] and final_state [N, H, K, V] (N the sequences) are compared element by
/// element and one line (or JSON object, `shape` its fields) printed per output, headed by `label`.
/// Each element is held to the typical envelope of honest members run on the same head and sequence too
/// (validate_typical_envelope.hpp): beyond it but within budget, the output is SUSPECT. Returns 0 when
/// every element is within budget and, with `strict`, within its envelope.
int check_memory_against_reference(const delta_rule_validate_shape& n,
                                   const std::vector<delta_rule_sequence>& sequences, const std::vector<float>& out,
                                   const std::vector<float>& final_state, const std::vector<long long>& heads,
                                   const memory_head_problem& head_problem, unsigned threads, bool json,
                                   const std::string& label, const nlohmann::json& shape, bool strict = false);

}  // namespace kalman_oracle::gpu::tools
