// The KDN gain path on the GPU (docs/kernels.md, "KDN gains"): from the gates g, the noises ω and r,
// the information scale μ, the keys and queries and the prior covariance, the per-token predictions,
// gains and readout variances and the final covariance of the diagonal (§4, κ_t) or isotropic (§5,
// β_t) KDN. The memory S_t that these gains write is the chunked delta-rule kernel's (not here).
// Plain C++: the kernels are in gpu/src/kdn_gain.cu, their CPU twin in twin/kdn_gain_twin.hpp.
#pragma once

#include <stdexcept>
#include <string>
#include <tuple>

#include "kalman_oracle/gpu/delta_rule_sequences.hpp"
#include "kalman_oracle/gpu/input_element.cuh"
#include "kalman_oracle/gpu/sequence_offsets.hpp"
#include "kalman_oracle/gpu/strided_input.cuh"

namespace kalman_oracle::gpu {

/// Which covariance the KDN keeps: one variance per key channel, or one per head.
enum class kdn_form { diagonal, isotropic };

/// One problem: one sequence per batch row, or (cu_seqlens) one batch row holding N sequences back to
/// back. Shapes, with HV value heads and H = HV / key_head_group query/key heads (fla's grouped value
/// heads), and N = B without cu_seqlens:
///   k, q [B, T, H, K] (read for value head h at key head h / key_head_group)
///   g [B, T, HV, K]; omega [B, T, HV, K] (diagonal) or [B, T, HV] (isotropic); r [B, T, HV];
///   mu [HV] (null: μ = K); initial_covariance [N, HV, K] or [N, HV] (null: 1).
/// Outputs, binary32, contiguous:
///   predicted_covariance [B, T, HV, K] or [B, T, HV]; gain [B, T, HV, K] (κ) or [B, T, HV] (β);
///   readout_variance [B, T, HV]; final_covariance [N, HV, K] or [N, HV].
/// predicted_covariance and gain may be null (not written).
struct kdn_gain_problem {
  kdn_form form = kdn_form::diagonal;
  int batch = 0, tokens = 0, heads = 0, key_dim = 0;  // B, T, HV, K
  int key_head_group = 1;                             // HV / H
  input_dtype dtype = input_dtype::f32;
  strided_input k, q, g, omega, r, mu, initial_covariance;
  float tau = 0;  ///< the query scale, as the reference computes it: float(K ** -0.5) (query_scale.hpp)
  float *predicted_covariance = nullptr, *gain = nullptr, *readout_variance = nullptr, *final_covariance = nullptr;
  void* stream = nullptr;  ///< a cudaStream_t; null: the default stream
  /// A variable-length batch (fla's cu_seqlens; B = 1), as delta_rule_problem's: null, or `sequences` + 1
  /// token offsets in host memory (sequence_offsets.hpp); sequence n runs from initial_covariance[n] to
  /// final_covariance[n]. The forward and backward kernels take it.
  const long long* cu_seqlens = nullptr;
  int sequences = 0;
};

/// Tokens per chunk of the covariance scan (scan/chunked.hpp's map/carry/emit with this chunk size,
/// one of the orders the fixtures' bounds cover: check/contraction_bound.hpp, covered_scans).
inline constexpr int kdn_gain_chunk_tokens = 64;
static_assert(kdn_gain_chunk_tokens == delta_rule_chunk_tokens,
              "the sequences' chunk map (delta_rule_sequences.hpp) counts chunks of 64 tokens");
/// The largest K: each of a warp's 32 lanes keeps K / 32 channels' scan state in registers.
inline constexpr int kdn_gain_max_key_dim = 256;

/// Covariance lanes of one (batch row, head): K channels, or one.
inline int kdn_gain_channels(const kdn_gain_problem& p) { return p.form == kdn_form::diagonal ? p.key_dim : 1; }

/// std::invalid_argument naming the rule for sizes out of range or a missing input (`who` names
/// the caller in messages: kdn_gain, kdn_gain_backward).
inline void kdn_gain_check_inputs(const kdn_gain_problem& p, const std::string& who) {
  const auto fail = [&](const std::string& what) { throw std::invalid_argument(who + ": " + what); };
  if (p.batch < 1 || p.heads < 1 || p.tokens < 0)
    fail("B and HV must be >= 1 and T >= 0, got B = " + std::to_string(p.batch) + ", HV = " + std::to_string(p.heads) +
         ", T = " + std::to_string(p.tokens));
  if (p.key_dim < 1 || p.key_dim > kdn_gain_max_key_dim)
    fail("K = " + std::to_string(p.key_dim) + ": the kernels take 1 <= K <= " + std::to_string(kdn_gain_max_key_dim));
  if (p.key_head_group < 1 || p.heads % p.key_head_group != 0)
    fail("key_head_group = " + std::to_string(p.key_head_group) + " must divide HV = " + std::to_string(p.heads));
  if (!(p.tau > 0)) fail("tau must be > 0 (the query scale)");
  check_sequence_offsets(p.cu_seqlens, p.sequences, p.batch, p.tokens, fail);
  if (p.sequences > 65535)
    fail("sequences = " + std::to_string(p.sequences) + " (rule: at most 65535, a grid dimension)");
  const bool per_token = p.tokens > 0;
  const std::tuple<const char*, const void*, bool> required[] = {{"k", p.k.data, per_token},
                                                                 {"q", p.q.data, per_token},
                                                                 {"g", p.g.data, per_token},
                                                                 {"omega", p.omega.data, per_token},
                                                                 {"r", p.r.data, per_token}};
  for (const auto& [name, data, needed] : required)
    if (needed && data == nullptr) fail(std::string(name) + " is missing (a null pointer)");
}

/// std::invalid_argument naming the rule for sizes out of range or a missing tensor.
inline void kdn_gain_check(const kdn_gain_problem& p) {
  kdn_gain_check_inputs(p, "kdn_gain");
  if (p.tokens > 0 && p.readout_variance == nullptr)
    throw std::invalid_argument("kdn_gain: readout_variance is missing (a null pointer)");
  if (p.final_covariance == nullptr)
    throw std::invalid_argument("kdn_gain: final_covariance is missing (a null pointer)");
}

/// Where kdn_gain_device keeps its scratch, in bytes from its start: the chunk totals and carries of the
/// covariance scan (16 bytes a chunk, head and covariance lane, each), the isotropic form's token scalars
/// (16 bytes a chunk's token and head), and with cu_seqlens the chunk map's table after them. The one
/// spelling of the layout, for the byte count and the launcher's carve.
struct kdn_gain_scratch_layout {
  long long carries, token_scalars, chunk_table, bytes;
  explicit kdn_gain_scratch_layout(const kdn_gain_problem& p) {
    const std::vector<delta_rule_sequence_start> starts = delta_rule_sequence_starts(p);
    const long long chunk_heads = delta_rule_chunks(p, starts, nullptr).total_chunks * p.heads;
    const long long scan_bytes = chunk_heads * kdn_gain_channels(p) * 16;
    carries = scan_bytes;
    token_scalars = 2 * scan_bytes;
    chunk_table = token_scalars + (p.form == kdn_form::isotropic ? chunk_heads * kdn_gain_chunk_tokens * 16 : 0);
    bytes = chunk_table + static_cast<long long>(starts.size() * sizeof(delta_rule_sequence_start));
  }
};

/// Scratch bytes kdn_gain_device needs (kdn_gain_scratch_layout).
inline long long kdn_gain_scratch_bytes(const kdn_gain_problem& p) { return kdn_gain_scratch_layout(p).bytes; }

/// Runs the kernels on device pointers, `scratch` of kdn_gain_scratch_bytes (asynchronous on
/// problem.stream); std::runtime_error for a CUDA error.
void kdn_gain_device(const kdn_gain_problem& problem, void* scratch);

/// The same problem with host pointers: copies the inputs to the device (the extent their strides
/// reach), poisons the outputs with NaN, runs, copies the outputs back.
void kdn_gain_host(const kdn_gain_problem& problem);

}  // namespace kalman_oracle::gpu
