// The chunked delta-rule memory's backward (docs/kernels.md, "The chunked delta-rule memory (backward,
// binary32 or tf32)"): every input's gradient of the fixed-gain family's memory (GLA, DeltaNet, Gated DeltaNet, KDA,
// the β-form memory of the isotropic KDN and the two-key memory of the diagonal KDN; docs/math.md §7) from
// the cotangents of o and the final state, by the chunked WY adjoint of docs/gradients.md ("Fixed gain,
// chunked WY form"), chunk by chunk, each chunk recomputed from its start state.
//
// Arithmetic (delta_rule_backward_operands below): by default binary32 throughout, on the CUDA cores,
// every sum in a fixed order with one fused multiply-add a term (models/delta_rule_backward.cuh): the
// kernel (gpu/src/delta_rule_backward.cu) and its CPU twin (twin/delta_rule_backward_twin.hpp) agree bit
// for bit, and the twin is held to the fixtures' binary32 gradient budget. Or the matrix products on the
// tensor cores with TF32 operands (the `tf32-tc` tier, whose gradient budgets verify where bfloat16's reach
// the scale: docs/error-model.md, "Tensor-core tiers"). Plain C++ here.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

#include "kalman_oracle/gpu/delta_rule_chunked.hpp"
#include "kalman_oracle/gpu/delta_rule_sequences.hpp"
#include "kalman_oracle/gpu/models/delta_rule_backward.cuh"

namespace kalman_oracle::gpu {

/// The arithmetic of the matrix products (docs/kernels.md, "The chunked delta-rule memory (backward)"):
///   f32  binary32 fused multiply-adds on the CUDA cores, every sum in a fixed order: kernel = twin bit
///        for bit, judged by the fixtures' binary32 gradient budgets (`--arithmetic f32`);
///   tf32 the products that docs/gradients.md's table of tensor-core adjoints lists (W, U, Ũ, S', dŨ,
///        dS, dc, da, dσ, dW, dY, d𝒯, dX; a factored chunk's A / r, σ and, without a gate a channel, its
///        sums for dq and dk) on the tensor cores: operands rounded to TF32
///        (nearest, ties to even), binary32 accumulation in the tensor cores' order (mma.sync m16n8k8);
///        everything else as f32. The `tf32-tc` tier (`--arithmetic tf32-tc`); kernel and twin agree
///        to that tier's budget, not bit for bit.
enum class delta_rule_backward_operands { f32, tf32 };

/// The forward problem (its inputs, cu_seqlens included; its outputs o and final_state are not read or
/// written), the cotangents (binary32, contiguous; null: zero) and the gradients (binary32, contiguous;
/// the ones the rule has must be given), N = B or the sequences of cu_seqlens:
///   d_o [B, T, HV, V], d_final_state [N, HV, K, V];
///   dq, dk [B, T, H, K] (summed over a key head's value heads), dv [B, T, HV, V],
///   dbeta [B, T, HV] (β-form), dkappa [B, T, HV, K] (two-key),
///   dg [B, T, HV] (per-head gate) or [B, T, HV, K] (per channel), d_initial_state [N, HV, K, V].
/// The query scale τ is a constant here (fla's `scale`): no gradient.
struct delta_rule_backward_problem {
  delta_rule_problem forward;
  const float *d_o = nullptr, *d_final_state = nullptr;
  float *dq = nullptr, *dk = nullptr, *dv = nullptr, *dbeta = nullptr, *dkappa = nullptr, *dg = nullptr,
        *d_initial_state = nullptr;
  delta_rule_backward_operands operands = delta_rule_backward_operands::f32;
  /// delta_rule_backward_workspace_bytes(problem) bytes of device memory, 256-byte aligned; null: the
  /// launcher allocates it on the stream.
  void* workspace = nullptr;
};

/// Tokens per chunk of the backward (its own knob: it recomputes every chunk in binary32 and shares
/// nothing with the forward launch).
inline constexpr int delta_rule_backward_chunk_tokens = 64;
static_assert(delta_rule_backward_chunk_tokens == delta_rule_chunk_tokens,
              "the chunk map (delta_rule_sequences.hpp) counts chunks of the forward's size");
/// The largest V the backward takes (its first launch's shared memory; the forward takes more).
inline constexpr int delta_rule_backward_max_value_dim = 768;

/// std::invalid_argument naming the rule: the forward's checks (its outputs aside), and every gradient
/// the rule has given.
inline void delta_rule_backward_check(const delta_rule_backward_problem& p) {
  delta_rule_problem forward = p.forward;
  float unused = 0;
  forward.o = forward.final_state = &unused;  // the backward writes neither
  delta_rule_check(forward);
  if (p.forward.cu_seqlens != nullptr && p.forward.sequences > 65535)
    throw std::invalid_argument("delta_rule_backward: sequences = " + std::to_string(p.forward.sequences) +
                                ": the backward takes at most 65535 (a grid dimension of its state launches)");
  if (p.forward.batch > 65535)
    throw std::invalid_argument("delta_rule_backward: B = " + std::to_string(p.forward.batch) +
                                ": the backward takes at most 65535 (a grid dimension of its state launches)");
  if (p.forward.value_dim > delta_rule_backward_max_value_dim)
    throw std::invalid_argument("delta_rule_backward: V = " + std::to_string(p.forward.value_dim) +
                                ": the backward takes V up to " + std::to_string(delta_rule_backward_max_value_dim) +
                                " (its first launch holds a chunk's r v, C x V, in shared memory)");
  const auto fail = [](const std::string& what) {
    throw std::invalid_argument("delta_rule_backward: " + what + " is missing (a null pointer)");
  };
  const bool per_token = p.forward.tokens > 0;
  if (per_token && (p.dq == nullptr || p.dk == nullptr || p.dv == nullptr)) fail("dq, dk or dv");
  if (per_token && p.forward.rule == delta_rule_kind::beta_form && p.dbeta == nullptr) fail("dbeta");
  if (per_token && p.forward.rule == delta_rule_kind::two_key && p.dkappa == nullptr) fail("dkappa");
  if (per_token && p.forward.gate != delta_rule_gate::none && p.dg == nullptr) fail("dg");
}

/// One chunk record's layout for this problem (models/delta_rule_backward.cuh).
inline backward_record delta_rule_backward_record(const delta_rule_problem& p) {
  return {delta_rule_backward_chunk_tokens, p.key_dim, p.value_dim};
}

/// The workspace for this problem: one record (backward_record: 5C² + 10CK + 3CV + 2KV + 2K + C + 1
/// floats, rounded up to 64) per chunk of each sequence and value head, C = delta_rule_backward_chunk_tokens:
/// 640 KB at K = V = 128, 5.2 GB at B = 2, T = 16384, HV = 16 (measured: 5 247 074 304 bytes); with
/// cu_seqlens, the chunk map's table after them (16 bytes a sequence, and 16 more).
inline std::size_t delta_rule_backward_workspace_bytes(const delta_rule_backward_problem& problem) {
  const delta_rule_problem& p = problem.forward;
  const std::vector<delta_rule_sequence_start> starts = delta_rule_sequence_starts(p);
  const std::size_t chunks = static_cast<std::size_t>(delta_rule_chunks(p, starts, nullptr).total_chunks);
  return chunks * static_cast<std::size_t>(p.heads) * static_cast<std::size_t>(delta_rule_backward_record(p).size()) *
             sizeof(float) +
         starts.size() * sizeof(delta_rule_sequence_start);
}

/// Runs the five launches on device pointers (asynchronous on forward.stream).
void delta_rule_backward_device(const delta_rule_backward_problem& problem);

/// The five launches of delta_rule_backward_device (gpu/src/delta_rule_backward.cu, docs/kernels.md).
enum class delta_rule_backward_launch { operands, states, cotangents, value_sums, channels };

/// One of the five launches alone, for the benchmark's breakdown of the time: problem.workspace must be
/// given and hold what the earlier launches wrote (run delta_rule_backward_device once first).
void delta_rule_backward_device_launch(const delta_rule_backward_problem& problem, delta_rule_backward_launch which);

/// The same problem with host pointers: copies in, poisons the gradients and the workspace with NaN,
/// runs, copies the gradients back.
void delta_rule_backward_host(const delta_rule_backward_problem& problem);

}  // namespace kalman_oracle::gpu
