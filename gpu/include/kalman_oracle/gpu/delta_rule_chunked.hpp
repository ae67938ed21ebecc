// The chunked delta-rule memory on tensor cores (docs/kernels.md, "Chunked delta-rule memory"): the
// fixed-gain family's forward (GLA, DeltaNet, Gated DeltaNet, KDA; docs/math.md §7) by the chunked WY
// form of reference/include/kalman_oracle/models/fixed_gain_chunked.hpp, every matrix-product operand
// rounded to bfloat16 and every product accumulated in binary32 (the `bf16-tc` arithmetic tier,
// docs/error-model.md, "Tensor-core tiers"). Plain C++: the kernel is in gpu/src/delta_rule_chunked.cu,
// its CPU twin in twin/delta_rule_chunked_twin.hpp.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>
#include <tuple>

#include "kalman_oracle/gpu/input_element.cuh"
#include "kalman_oracle/gpu/sequence_offsets.hpp"
#include "kalman_oracle/gpu/strided_input.cuh"

namespace kalman_oracle::gpu {

/// Which rule: GLA writes without erasing (β = 1, 𝒯 = I); the β-form rules (DeltaNet, GDN, KDA, the
/// isotropic KDN's memory with its β_t) erase and write along the key with the strength β; the two-key
/// rule (the diagonal KDN's memory) erases along the key and writes along a given gain κ_t
/// (S_t = (I − κ_t k_tᵀ) D_t S_{t−1} + κ_t v_tᵀ, docs/math.md §7).
enum class delta_rule_kind { gla, beta_form, two_key };
/// The log gate g (decay α = e^g): none (DeltaNet), one per head and token (GDN), one per key channel
/// (GLA, KDA).
enum class delta_rule_gate { none, per_head, per_channel };

/// One problem: one sequence per batch row, or (cu_seqlens) one batch row holding N sequences back to
/// back. Shapes, with HV value heads and H = HV / key_head_group query/key heads (fla's layouts and
/// grouped value heads), and N = B without cu_seqlens:
///   q, k [B, T, H, K]; v [B, T, HV, V]; beta [B, T, HV] (β-form); kappa [B, T, HV, K] (two-key);
///   g [B, T, HV] (per head) or [B, T, HV, K] (per channel); initial_state [N, HV, K, V] (null: zero).
/// Outputs binary32, contiguous: o [B, T, HV, V], final_state [N, HV, K, V].
struct delta_rule_problem {
  delta_rule_kind rule = delta_rule_kind::beta_form;
  delta_rule_gate gate = delta_rule_gate::none;
  int batch = 0, tokens = 0, heads = 0, key_dim = 0, value_dim = 0;  // B, T, HV, K, V
  int key_head_group = 1;                                            // HV / H
  input_dtype dtype = input_dtype::f32;
  strided_input q, k, v, beta, kappa, g, initial_state;
  float tau = 0;  ///< the query scale, as the reference computes it: float(K ** -0.5) (query_scale.hpp)
  float *o = nullptr, *final_state = nullptr;
  void* stream = nullptr;  ///< a cudaStream_t; null: the default stream
  /// delta_rule_workspace_bytes(problem) bytes of device memory, 256-byte aligned, for what the three
  /// launches pass on (docs/kernels.md); null: delta_rule_device allocates it on the stream.
  void* workspace = nullptr;
  /// A variable-length batch (fla's cu_seqlens; B = 1): null, or `sequences` + 1 token offsets
  /// 0 = cu_seqlens[0] <= cu_seqlens[1] <= … <= cu_seqlens[N] = T in host memory (the launches' grids
  /// follow the lengths). Sequence n is tokens cu_seqlens[n] … cu_seqlens[n + 1] − 1, run from
  /// initial_state[n] to final_state[n]; an empty one's final state is its initial state.
  const long long* cu_seqlens = nullptr;
  int sequences = 0;
};

/// Tokens per chunk (fla's BT; the reference's default_wy_chunk_size).
inline constexpr int delta_rule_chunk_tokens = 64;
/// The largest K (a chunk's operands, K wide, in one block's shared memory) and the value columns one
/// block of the output launch computes (docs/kernels.md, "Chunked delta-rule memory").
inline constexpr int delta_rule_max_key_dim = 128;
inline constexpr int delta_rule_value_block = 64;

/// std::invalid_argument naming the rule for sizes out of range or a missing tensor.
inline void delta_rule_check(const delta_rule_problem& p) {
  const auto fail = [](const std::string& what) { throw std::invalid_argument("delta_rule: " + what); };
  if (p.batch < 1 || p.heads < 1 || p.tokens < 0)
    fail("B and HV must be >= 1 and T >= 0, got B = " + std::to_string(p.batch) + ", HV = " + std::to_string(p.heads) +
         ", T = " + std::to_string(p.tokens));
  if (p.key_dim < 16 || p.key_dim > delta_rule_max_key_dim || p.key_dim % 16 != 0)
    fail("K = " + std::to_string(p.key_dim) + ": the kernel takes K in {16, 32, ..., " +
         std::to_string(delta_rule_max_key_dim) + "} (whole 16 x 16 tensor-core tiles)");
  if (p.value_dim < 16 || p.value_dim % 16 != 0 ||
      (p.value_dim > delta_rule_value_block && p.value_dim % delta_rule_value_block != 0))
    fail("V = " + std::to_string(p.value_dim) + ": the kernel takes V a multiple of 16 up to " +
         std::to_string(delta_rule_value_block) + ", or a multiple of " + std::to_string(delta_rule_value_block) +
         " (whole tiles, whole value blocks)");
  if (p.key_head_group < 1 || p.heads % p.key_head_group != 0)
    fail("key_head_group = " + std::to_string(p.key_head_group) + " must divide HV = " + std::to_string(p.heads));
  if (!(p.tau > 0)) fail("tau must be > 0 (the query scale)");
  check_sequence_offsets(p.cu_seqlens, p.sequences, p.batch, p.tokens, fail);
  const bool per_token = p.tokens > 0;
  const std::tuple<const char*, const void*, bool> required[] = {
      {"q", p.q.data, per_token},
      {"k", p.k.data, per_token},
      {"v", p.v.data, per_token},
      {"beta", p.beta.data, per_token && p.rule == delta_rule_kind::beta_form},
      {"kappa", p.kappa.data, per_token && p.rule == delta_rule_kind::two_key},
      {"g", p.g.data, per_token && p.gate != delta_rule_gate::none},
      {"o", p.o, per_token},
      {"final_state", p.final_state, true}};
  for (const auto& [name, data, needed] : required)
    if (needed && data == nullptr) fail(std::string(name) + " is missing (a null pointer)");
}

/// The workspace the kernels need for this problem: 6K + 6V + 2C + (2KV + 4K)/C bytes per token and
/// value head, C = delta_rule_chunk_tokens (1.15 GB at B = 2, T = 16384, HV = 16, K = V = 128), counted
/// over whole chunks of each sequence, and with cu_seqlens 16 bytes a sequence more (the chunk map's table).
std::size_t delta_rule_workspace_bytes(const delta_rule_problem& problem);

/// Runs the kernels on device pointers (asynchronous on problem.stream); std::runtime_error for a CUDA
/// error.
void delta_rule_device(const delta_rule_problem& problem);

/// The three launches of delta_rule_device (docs/kernels.md): prepare (the chunks' operands), state (the
/// chunks in order), output.
enum class delta_rule_launch { prepare, state, output };

/// One of the three launches alone, for the benchmark's breakdown of the time: problem.workspace must be
/// given and hold what the earlier launches wrote (run delta_rule_device once first).
void delta_rule_device_launch(const delta_rule_problem& problem, delta_rule_launch which);

/// The same problem with host pointers: copies the inputs to the device (the extent their strides
/// reach), poisons the outputs with NaN, runs, copies the outputs back.
void delta_rule_host(const delta_rule_problem& problem);

}  // namespace kalman_oracle::gpu
