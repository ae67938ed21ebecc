// What the KLA kernels (src/kla_forward.cu, src/kla_backward.cu) share: the block layout (every s
// of kla_channels_per_block consecutive channels of one batch row, one thread per element), a chunk
// of tokens' inputs staged in shared memory by the whole block (coalesced, asynchronously where the
// input is binary32), and the in-order sums over s (docs/kernels.md, "The fused KLA forward").
// Private to gpu/src.
#pragma once

#include <cuda_runtime.h>

#include "async_copy.cuh"
#include "device_arena.hpp"
#include "kalman_oracle/gpu/kla_forward.hpp"

namespace kalman_oracle::gpu {
namespace {

/// Copies one input element into the staging buffer, widened to binary32: asynchronously for binary32
/// inputs (cp.async, 4 bytes: the copy of the next chunk overlaps the arithmetic of this one), by a
/// plain load for 16-bit ones.
template <class In>
__device__ __forceinline__ void stage_element(float* to, const In* from) {
  *to = widen(*from);
}
template <>
__device__ __forceinline__ void stage_element<float>(float* to, const float* from) {
  copy_async(to, from);
}

/// The staged rows are token-fastest, kla_stage_row = chunk + 1 floats each: one thread reads its
/// consecutive tokens at fixed offsets from one address (immediate offsets once the token loop is
/// unrolled, instead of an address computed a token), and the odd row length puts consecutive s (or
/// channels) in distinct banks, for the staging writes and the reads alike.
constexpr int kla_stage_row = kla_chunk_tokens + 1;

/// One chunk's token inputs, staged in shared memory: q and k [S][row], v and Λ [channels][row],
/// and for the backward the cotangents dy and dy_var [channels][row]; token c of row r is at
/// r · kla_stage_row + c (kla_staged). A null q or dy is not staged.
struct kla_stage {
  float *q, *k, *v, *Lambda, *dy, *dy_var;
};

/// Where token c of row `row` (an s, or a channel of the block) lies in a staged array.
__host__ __device__ __forceinline__ int kla_staged(int row, int c) { return row * kla_stage_row + c; }

/// Floats of one staging buffer: q, k [S][row], v, Λ [channels][row], and with `cotangents`
/// dy, dy_var [channels][row].
__host__ __device__ __forceinline__ int kla_stage_floats(int S, int channels_per_block, bool cotangents) {
  return kla_stage_row * (2 * S + (cotangents ? 4 : 2) * channels_per_block);
}

/// A staging buffer laid out from `base` (kla_stage_floats of them).
__device__ __forceinline__ kla_stage kla_stage_at(float* base, int S, int channels_per_block, bool cotangents) {
  kla_stage st{};
  st.q = base;
  st.k = st.q + kla_stage_row * S;
  st.v = st.k + kla_stage_row * S;
  st.Lambda = st.v + kla_stage_row * channels_per_block;
  if (cotangents) {
    st.dy = st.Lambda + kla_stage_row * channels_per_block;
    st.dy_var = st.dy + kla_stage_row * channels_per_block;
  }
  return st;
}

/// Issues the copies of tokens [t0, t0 + count) into `stage`, coalesced (consecutive threads take
/// consecutive s, or consecutive channels). The block has channels_per_block · S threads, so a
/// thread's s (and its channel) is the same in every pass: no division a copied element.
template <class In>
__device__ __forceinline__ void stage_chunk(const kla_forward_problem& p, const kla_stage stage, long long b, int t0,
                                            int count, int m_first, int channels_here, int channels_per_block) {
  const int S = p.state, thread = static_cast<int>(threadIdx.x);
  const In* q = static_cast<const In*>(p.q.data);
  const In* k = static_cast<const In*>(p.k.data);
  const In* v = static_cast<const In*>(p.v.data);
  const In* Lambda = static_cast<const In*>(p.Lambda.data);
  const int j = thread % S, tokens_a_pass = channels_per_block;  // blockDim.x / S
  for (int c = thread / S; c < count; c += tokens_a_pass) {
    if (stage.q != nullptr) stage_element(stage.q + kla_staged(j, c), q + offset_of(p.q, b, t0 + c, j));
    stage_element(stage.k + kla_staged(j, c), k + offset_of(p.k, b, t0 + c, j));
  }
  const int channel = thread % channels_per_block;
  if (channel >= channels_here) return;
  for (int c = thread / channels_per_block; c < count; c += S) {  // blockDim.x / channels_per_block = S
    stage_element(stage.v + kla_staged(channel, c), v + offset_of(p.v, b, t0 + c, m_first + channel));
    stage_element(stage.Lambda + kla_staged(channel, c), Lambda + offset_of(p.Lambda, b, t0 + c, m_first + channel));
  }
}

/// Stages the cotangents of tokens [t0, t0 + count) (binary32, contiguous [B, T, M]; null: zero).
__device__ __forceinline__ void stage_cotangents(const float* dy, const float* dy_var, const kla_stage stage,
                                                 long long b, int T, int M, int t0, int count, int m_first,
                                                 int channels_here, int channels_per_block) {
  const int thread = static_cast<int>(threadIdx.x), channel = thread % channels_per_block;
  if (channel >= channels_here) return;
  for (int c = thread / channels_per_block; c < count; c += static_cast<int>(blockDim.x) / channels_per_block) {
    const long long at = (b * T + t0 + c) * M + m_first + channel;
    float* dy_to = stage.dy + kla_staged(channel, c);
    float* dy_var_to = stage.dy_var + kla_staged(channel, c);
    if (dy != nullptr)
      stage_element(dy_to, dy + at);
    else
      *dy_to = 0.0f;
    if (dy_var != nullptr)
      stage_element(dy_var_to, dy_var + at);
    else
      *dy_var_to = 0.0f;
  }
}

/// The problem with its inputs copied to the device (the host launchers'; outputs untouched).
inline kla_forward_problem kla_upload_inputs(device_arena& arena, const kla_forward_problem& host) {
  const long long B = host.batch, T = host.tokens, M = host.channels, S = host.state;
  kla_forward_problem device = host;
  device.q = arena.upload(host.q, {B, T, S}, host.dtype);
  device.k = arena.upload(host.k, {B, T, S}, host.dtype);
  device.v = arena.upload(host.v, {B, T, M}, host.dtype);
  device.Lambda = arena.upload(host.Lambda, {B, T, M}, host.dtype);
  device.a_bar = arena.upload(host.a_bar, {B, T, M, S}, host.dtype);
  device.p_bar = arena.upload(host.p_bar, {B, T, M, S}, host.dtype);
  device.lambda_0 = arena.upload(host.lambda_0, {B, M, S}, host.dtype);
  device.eta_0 = arena.upload(host.eta_0, {B, M, S}, host.dtype);
  return device;
}

/// Where a thread sits: batch row b, the block's first channel and how many it has (the last block
/// may have fewer), the thread's channel within the block (`local`), its channel m and its s.
struct kla_block_place {
  long long b;
  int m_first, channels_here, local, m, s;
  bool active;  ///< the thread has an element (local < channels_here)
};

__device__ __forceinline__ kla_block_place kla_place(int S, int M, int channels_per_block) {
  kla_block_place at;
  at.b = blockIdx.y;
  at.m_first = static_cast<int>(blockIdx.x) * channels_per_block;
  at.channels_here = min(channels_per_block, M - at.m_first);
  at.local = static_cast<int>(threadIdx.x) / S;
  at.s = static_cast<int>(threadIdx.x) % S;
  at.m = at.m_first + at.local;
  at.active = at.local < at.channels_here;
  return at;
}

/// Two rows of S terms each summed in order s = 0, 1, … from +0 (the reference's order; the twins
/// repeat it).
__device__ __forceinline__ void sum_rows_in_order(const float* first_row, const float* second_row, int S,
                                                  float& first_sum, float& second_sum) {
  first_sum = 0.0f;
  second_sum = 0.0f;
  for (int j = 0; j < S; ++j) {
    first_sum = add_rn(first_sum, first_row[j]);
    second_sum = add_rn(second_sum, second_row[j]);
  }
}

}  // namespace
}  // namespace kalman_oracle::gpu
