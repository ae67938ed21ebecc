// What the KDN gain kernels and their backward share (gpu/src/kdn_gain.cu, kdn_gain_backward.cu;
// private to gpu/src): a lane's reads of one (sequence, head)'s inputs, the warp's sum over channels in
// kdn_channel_sum_twin's order, the covariance lanes and the chunks' scratch slots, and the launchers'
// view of the sequences (chunk map, grid width).
#pragma once

#include <cuda_runtime.h>

#include <vector>

#include "cuda_check.hpp"
#include "kalman_oracle/gpu/delta_rule_sequences.hpp"
#include "kalman_oracle/gpu/input_element.cuh"
#include "kalman_oracle/gpu/kdn_gain.hpp"
#include "kalman_oracle/gpu/models/kdn_gain.cuh"

namespace kalman_oracle::gpu {

/// The sum over channels of the lanes' partial sums: lane l's partial is its channels' terms added
/// in order from +0; the tree takes lane l + o into lane l for o = 16, 8, 4, 2, 1; every lane gets
/// lane 0's total (kdn_channel_sum_twin's order).
__device__ __forceinline__ float warp_channel_sum(float partial) {
  for (int offset = kdn_lanes / 2; offset > 0; offset /= 2)
    partial = add_rn(partial, __shfl_down_sync(0xffffffffu, partial, offset));
  return __shfl_sync(0xffffffffu, partial, 0);
}

/// The covariance lanes of a (sequence, head): one a channel (diagonal), or the head's one (isotropic).
template <kdn_form Form>
__device__ __forceinline__ int lanes_of(int K) {
  return Form == kdn_form::diagonal ? K : 1;
}

/// Where chunk c of sequence s, head h keeps its per-chunk values in the scratch, lane i at this + i
/// (the forward's totals and carries; the backward's maps, carries and, with L = 1, its dμ and dτ
/// partials): (h NC + first_chunk(s) + c) L, NC the problem's chunks (every sequence's), so that a
/// (sequence, head)'s chunks are consecutive for the carry's walk.
__device__ __forceinline__ long long chunk_slot(const delta_rule_chunk_map& map, const delta_rule_sequence& s,
                                                long long h, long long c, int L) {
  return (h * map.total_chunks + s.first_chunk + c) * L;
}

/// One (sequence, head)'s inputs as a lane reads them: token t is the sequence's (t0 + t of batch row b),
/// its prior the state row `state` (the batch row, or the sequence of a varlen batch).
template <class In>
struct kdn_head_reader {
  const kdn_gain_problem& p;
  long long b, h;
  long long t0 = 0, state = b;
  // Where this (row, head)'s token 0 is in k, q, g and ω, computed once: inside the token loops the key
  // head's division h / key_head_group was not hoisted (a 64-bit division a channel group and token, read
  // from the PTX), and these products are the same every token.
  long long k_base = b * p.k.stride[0] + t0 * p.k.stride[1] + h / p.key_head_group * p.k.stride[2];
  long long q_base = b * p.q.stride[0] + t0 * p.q.stride[1] + h / p.key_head_group * p.q.stride[2];
  long long g_base = b * p.g.stride[0] + t0 * p.g.stride[1] + h * p.g.stride[2];
  long long omega_base = b * p.omega.stride[0] + t0 * p.omega.stride[1] + h * p.omega.stride[2];
  __device__ float k(long long t, int i) const {
    return load_widened<In>(p.k, k_base + t * p.k.stride[1] + i * p.k.stride[3]);
  }
  __device__ float q(long long t, int i) const {
    return load_widened<In>(p.q, q_base + t * p.q.stride[1] + i * p.q.stride[3]);
  }
  __device__ float g(long long t, int i) const {
    return load_widened<In>(p.g, g_base + t * p.g.stride[1] + i * p.g.stride[3]);
  }
  __device__ float omega(long long t, int i) const {
    return load_widened<In>(p.omega, omega_base + t * p.omega.stride[1] + i * p.omega.stride[3]);
  }
  __device__ float r(long long t) const { return load_widened<In>(p.r, offset_of(p.r, b, t0 + t, h)); }
  __device__ float mu() const {
    return p.mu.data ? load_widened<In>(p.mu, offset_of(p.mu, h, 0, 0)) : static_cast<float>(p.key_dim);
  }
  __device__ float prior(int lane_channel) const {
    return p.initial_covariance.data
               ? load_widened<In>(p.initial_covariance, offset_of(p.initial_covariance, state, h, lane_channel))
               : 1.0f;
  }
};

/// What a launcher needs of the problem's sequences: the chunk map (with cu_seqlens its table copied to
/// `table`, device memory of N + 1 entries, from pageable memory on `stream`: the call returns once it is
/// staged, so the host vector may go), the longest sequence's chunks (the grid's width) and whether some
/// sequence is empty (the prior launch).
struct kdn_launch_sequences {
  delta_rule_chunk_map map;
  long long longest_chunks = 0;
  bool some_empty = false;
};

inline kdn_launch_sequences kdn_sequences_for_launch(const kdn_gain_problem& p, delta_rule_sequence_start* table,
                                                     cudaStream_t stream) {
  const std::vector<delta_rule_sequence_start> host_starts = delta_rule_sequence_starts(p);
  if (!host_starts.empty())
    check_cuda(cudaMemcpyAsync(table, host_starts.data(), host_starts.size() * sizeof(delta_rule_sequence_start),
                               cudaMemcpyHostToDevice, stream),
               "cudaMemcpyAsync(chunk map)");
  kdn_launch_sequences out;
  out.map = delta_rule_chunks(p, host_starts, host_starts.empty() ? nullptr : table);
  for (const delta_rule_sequence& s : delta_rule_sequence_list(p)) {
    out.longest_chunks = s.chunks > out.longest_chunks ? s.chunks : out.longest_chunks;
    out.some_empty = out.some_empty || s.tokens == 0;
  }
  return out;
}

}  // namespace kalman_oracle::gpu
