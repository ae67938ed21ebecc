// The KDN gain kernels and their launchers (include/kalman_oracle/gpu/kdn_gain.hpp; docs/kernels.md,
// "KDN gains").
//
// Schedule: the chunked Möbius scan of the covariance leaves (scan/chunked.hpp's map/carry/emit,
// chunks of kdn_gain_chunk_tokens), one warp per (sequence, head, chunk), lane l keeping the scan
// state of channels l, l + 32, … (diagonal) or, every lane alike, the head's one variance
// (isotropic). A sequence is a batch row, or one of cu_seqlens' (blockIdx.z; delta_rule_chunk_map says
// where its tokens and its chunks' scratch are). Three launches:
//   map    each chunk's total (its leaves composed in order), written to scratch;
//   carry  one warp per (sequence, head) walks the chunk totals: carry[c] = total[c−1] ∘ carry[c−1];
//   emit   each chunk again: the local prefixes, composed with the chunk's carry and applied to the
//          prior, give p_t; with p_{t−1} the prediction, then the gain and the readout variance, whose
//          sums over channels are lane-ordered partial sums and a shuffle tree (warp_channel_sum,
//          kdn_channel_sum_twin's order).
// Every channel's inputs are read by consecutive lanes (coalesced); the per-head r and μ are one
// broadcast load. The map and emit passes recompute the leaves rather than store them ([B, T, HV, K]
// mobius maps would be four times the gates' bytes).
#include <cuda_runtime.h>

#include "device_arena.hpp"
#include "kalman_oracle/gpu/kdn_gain.hpp"
#include "kalman_oracle/gpu/models/kdn_gain.cuh"
#include "kdn_head_reader.cuh"

namespace kalman_oracle::gpu {
namespace {

constexpr int warps_per_block = 4;  // four chunks per block

/// Token t's leaves for this lane's channels (diagonal), or the head's leaf (isotropic, every lane
/// alike, the sums over channels by warp_channel_sum). Also returns ‖k‖² (isotropic), which the
/// gain reuses.
template <class In, kdn_form Form, int J>
__device__ void token_leaves(const kdn_head_reader<In>& in, long long t, int lane, float mu, float r,
                             mobius_f32 (&leaf)[J], float (&a)[J], float (&omega)[J], float& key2) {
  const int K = in.p.key_dim;
  if constexpr (Form == kdn_form::diagonal) {
#pragma unroll
    for (int j = 0; j < J; ++j) {
      const int i = lane + j * kdn_lanes;
      if (i < K) {
        a[j] = kdn_decay_squared(in.g(t, i));
        omega[j] = in.omega(t, i);
        leaf[j] = kdn_covariance_leaf(a[j], omega[j], kdn_diagonal_information(mu, in.k(t, i), r));
      }
    }
  } else {
    float decay2 = 0.0f, keys = 0.0f;
#pragma unroll
    for (int j = 0; j < J; ++j) {
      const int i = lane + j * kdn_lanes;
      if (i < K) {
        decay2 = add_rn(decay2, kdn_decay_squared(in.g(t, i)));
        const float key = in.k(t, i);
        keys = add_rn(keys, mul_rn(key, key));
      }
    }
    decay2 = warp_channel_sum(decay2);
    key2 = warp_channel_sum(keys);
    const float channels = static_cast<float>(K);
    a[0] = div_rn(decay2, channels);
    omega[0] = in.omega(t, 0);
    leaf[0] = kdn_covariance_leaf(a[0], omega[0], kdn_isotropic_information(mu, key2, channels, r));
  }
}

template <kdn_form Form>
__device__ __forceinline__ int lanes_of(int K) {
  return Form == kdn_form::diagonal ? K : 1;
}

/// Where chunk c of sequence s, head h keeps its total and its carry (lane i at this + i):
/// (h NC + first_chunk(s) + c) L, NC the problem's chunks (every sequence's), so that a (sequence,
/// head)'s chunks are consecutive for the carry's walk.
__device__ __forceinline__ long long chunk_slot(const delta_rule_chunk_map& map, const delta_rule_sequence& s,
                                                long long h, long long c, int L) {
  return (h * map.total_chunks + s.first_chunk + c) * L;
}

/// map: chunk c's total per covariance lane, at chunk_slot. J: channels per lane, ⌈K/32⌉ rounded up to
/// a power of two (the scan state of J channels lives in registers, so a small K must not pay for
/// K = 256's registers).
template <class In, kdn_form Form, int J>
__global__ void __launch_bounds__(kdn_lanes* warps_per_block)
    kdn_gain_map(const kdn_gain_problem p, mobius_f32* totals, const delta_rule_chunk_map map) {
  const int lane = threadIdx.x, chunk = blockIdx.x * warps_per_block + threadIdx.y;
  const delta_rule_sequence s = map.sequence(blockIdx.z);
  if (chunk >= s.chunks) return;
  const long long h = blockIdx.y, T = s.tokens;
  const kdn_head_reader<In> in{p, s.batch_row, h, s.first_token, s.state};
  const int K = p.key_dim, L = lanes_of<Form>(K);
  const float mu = in.mu();
  mobius_f32 local[J], leaf[J];
  float a[J], omega[J], key2 = 0.0f;
  const long long first = static_cast<long long>(chunk) * kdn_gain_chunk_tokens;
  const long long end = first + kdn_gain_chunk_tokens < T ? first + kdn_gain_chunk_tokens : T;
  for (long long t = first; t < end; ++t) {
    token_leaves<In, Form, J>(in, t, lane, mu, in.r(t), leaf, a, omega, key2);
#pragma unroll
    for (int j = 0; j < J; ++j)
      if (lane + j * kdn_lanes < L) local[j] = t == first ? leaf[j] : mobius_compose(leaf[j], local[j]);
  }
  mobius_f32* out = totals + chunk_slot(map, s, h, chunk, L);
#pragma unroll
  for (int j = 0; j < J; ++j)
    if (lane + j * kdn_lanes < L) out[lane + j * kdn_lanes] = local[j];
}

/// carry: carry[c] for c >= 1 (carry[0] is never read), one warp per (sequence, head).
template <kdn_form Form>
__global__ void __launch_bounds__(kdn_lanes) kdn_gain_carry(const kdn_gain_problem p, const mobius_f32* totals,
                                                            mobius_f32* carries, const delta_rule_chunk_map map) {
  const int lane = threadIdx.x;
  const long long h = blockIdx.x;
  const delta_rule_sequence s = map.sequence(blockIdx.y);
  const int L = lanes_of<Form>(p.key_dim), chunks = s.chunks;
  if (chunks < 2) return;  // one chunk: no carry
  const long long base = chunk_slot(map, s, h, 0, L);
  // The totals are loaded a batch ahead of the composes that need them: the chain of composes is
  // sequential (scan/chunked.hpp's carry), its loads need not be.
  constexpr int batch = 8;
  for (int i = lane; i < L; i += kdn_lanes) {
    mobius_f32 carry = totals[base + i];  // carry[1] = total[0]
    carries[base + L + i] = carry;
    for (int c = 2; c < chunks; c += batch) {
      mobius_f32 total[batch];
#pragma unroll
      for (int u = 0; u < batch; ++u)
        if (c + u < chunks) total[u] = totals[base + static_cast<long long>(c + u - 1) * L + i];
#pragma unroll
      for (int u = 0; u < batch; ++u)
        if (c + u < chunks) {
          carry = mobius_compose(total[u], carry);
          carries[base + static_cast<long long>(c + u) * L + i] = carry;
        }
    }
  }
}

/// emit: every token's prediction, gain and readout variance; the final covariance at the end.
template <class In, kdn_form Form, int J>
__global__ void __launch_bounds__(kdn_lanes* warps_per_block)
    kdn_gain_emit(const kdn_gain_problem p, const mobius_f32* carries, const delta_rule_chunk_map map) {
  const int lane = threadIdx.x, chunk = blockIdx.x * warps_per_block + threadIdx.y;
  const delta_rule_sequence s = map.sequence(blockIdx.z);
  const int chunks = s.chunks;
  if (chunk >= chunks) return;
  const long long h = blockIdx.y, T = s.tokens, HV = p.heads;
  const kdn_head_reader<In> in{p, s.batch_row, h, s.first_token, s.state};
  const int K = p.key_dim, L = lanes_of<Form>(K);
  const float mu = in.mu();
  const mobius_f32* carry = carries + chunk_slot(map, s, h, chunk, L);
  mobius_f32 local[J], leaf[J];
  float a[J], omega[J], prior[J], previous[J], covariance[J], predicted[J], key2 = 0.0f;
#pragma unroll
  for (int j = 0; j < J; ++j) {
    const int i = lane + j * kdn_lanes;
    if (i < L) {
      prior[j] = in.prior(i);
      previous[j] = chunk == 0 ? prior[j] : mobius_apply(carry[i], prior[j]);
      covariance[j] = previous[j];
    }
  }
  const long long first = static_cast<long long>(chunk) * kdn_gain_chunk_tokens;
  const long long end = first + kdn_gain_chunk_tokens < T ? first + kdn_gain_chunk_tokens : T;
  for (long long t = first; t < end; ++t) {
    const float r = in.r(t);
    token_leaves<In, Form, J>(in, t, lane, mu, r, leaf, a, omega, key2);
#pragma unroll
    for (int j = 0; j < J; ++j) {
      const int i = lane + j * kdn_lanes;
      if (i < L) {
        local[j] = t == first ? leaf[j] : mobius_compose(leaf[j], local[j]);
        const mobius_f32 prefix = chunk == 0 ? local[j] : mobius_compose(local[j], carry[i]);
        covariance[j] = mobius_apply(prefix, prior[j]);
        predicted[j] = kdn_predict(a[j], previous[j], omega[j]);
        previous[j] = covariance[j];
      }
    }
    const long long row = (s.batch_row * p.tokens + s.first_token + t) * HV + h;  // [B, T, HV]
    if constexpr (Form == kdn_form::diagonal) {
      float innovation = 0.0f, readout = 0.0f;
#pragma unroll
      for (int j = 0; j < J; ++j) {
        const int i = lane + j * kdn_lanes;
        if (i < K) {
          innovation = add_rn(innovation, kdn_innovation_term(predicted[j], in.k(t, i)));
          readout = add_rn(readout, mul_rn(kdn_scaled_query_squared(p.tau, in.q(t, i)), covariance[j]));
        }
      }
      innovation = add_rn(r, warp_channel_sum(innovation));
      readout = warp_channel_sum(readout);
#pragma unroll
      for (int j = 0; j < J; ++j) {
        const int i = lane + j * kdn_lanes;
        if (i < K) {
          if (p.predicted_covariance) p.predicted_covariance[row * K + i] = predicted[j];
          if (p.gain) p.gain[row * K + i] = kdn_diagonal_gain(predicted[j], in.k(t, i), innovation);
        }
      }
      if (lane == 0) p.readout_variance[row] = readout;
    } else {
      float queries = 0.0f;
#pragma unroll
      for (int j = 0; j < J; ++j) {
        const int i = lane + j * kdn_lanes;
        if (i < K) queries = add_rn(queries, kdn_scaled_query_squared(p.tau, in.q(t, i)));
      }
      queries = warp_channel_sum(queries);
      if (lane == 0) {
        if (p.predicted_covariance) p.predicted_covariance[row] = predicted[0];
        if (p.gain) p.gain[row] = kdn_isotropic_gain(predicted[0], key2, r);
        p.readout_variance[row] = mul_rn(covariance[0], queries);
      }
    }
  }
  if (chunk == chunks - 1) {
#pragma unroll
    for (int j = 0; j < J; ++j) {
      const int i = lane + j * kdn_lanes;
      if (i < L) p.final_covariance[(s.state * HV + h) * L + i] = covariance[j];
    }
  }
}

/// A sequence without tokens: its final covariance is its prior.
template <class In, kdn_form Form>
__global__ void kdn_gain_prior(const kdn_gain_problem p, const delta_rule_chunk_map map) {
  const long long h = blockIdx.x;
  const delta_rule_sequence s = map.sequence(blockIdx.y);
  if (s.tokens != 0) return;
  const kdn_head_reader<In> in{p, s.batch_row, h, s.first_token, s.state};
  const int L = lanes_of<Form>(p.key_dim);
  for (int i = threadIdx.x; i < L; i += blockDim.x) p.final_covariance[(s.state * p.heads + h) * L + i] = in.prior(i);
}

template <class In, kdn_form Form, int J>
void launch_typed(const kdn_gain_problem& p, void* scratch) {
  const cudaStream_t stream = static_cast<cudaStream_t>(p.stream);
  // Scratch: the totals and the carries (one slot a chunk, head and lane each: chunk_slot), then with
  // cu_seqlens the chunk map's table.
  const long long slots =
      delta_rule_chunks(p, delta_rule_sequence_starts(p), nullptr).total_chunks * p.heads * kdn_gain_channels(p);
  mobius_f32* totals = static_cast<mobius_f32*>(scratch);
  mobius_f32* carries = totals + slots;
  const kdn_launch_sequences sequences =
      kdn_sequences_for_launch(p, reinterpret_cast<delta_rule_sequence_start*>(carries + slots), stream);
  const delta_rule_chunk_map& map = sequences.map;
  const long long most = sequences.longest_chunks;
  const bool empty = sequences.some_empty;
  const unsigned N = static_cast<unsigned>(map.sequences), HV = static_cast<unsigned>(p.heads);
  if (empty) {
    kdn_gain_prior<In, Form><<<dim3(HV, N), kdn_lanes, 0, stream>>>(p, map);
    check_cuda(cudaGetLastError(), "kdn_gain_prior");
  }
  if (most == 0) return;
  const dim3 block(kdn_lanes, warps_per_block),
      grid(static_cast<unsigned>((most + warps_per_block - 1) / warps_per_block), HV, N);
  if (most > 1) {
    kdn_gain_map<In, Form, J><<<grid, block, 0, stream>>>(p, totals, map);
    check_cuda(cudaGetLastError(), "kdn_gain_map");
    kdn_gain_carry<Form><<<dim3(HV, N), kdn_lanes, 0, stream>>>(p, totals, carries, map);
    check_cuda(cudaGetLastError(), "kdn_gain_carry");
  }
  kdn_gain_emit<In, Form, J><<<grid, block, 0, stream>>>(p, carries, map);
  check_cuda(cudaGetLastError(), "kdn_gain_emit");
}

template <class In, kdn_form Form>
void launch_channels(const kdn_gain_problem& p, void* scratch) {
  static_assert(kdn_gain_max_key_dim == 8 * kdn_lanes);
  if (p.key_dim <= kdn_lanes) return launch_typed<In, Form, 1>(p, scratch);
  if (p.key_dim <= 2 * kdn_lanes) return launch_typed<In, Form, 2>(p, scratch);
  if (p.key_dim <= 4 * kdn_lanes) return launch_typed<In, Form, 4>(p, scratch);
  return launch_typed<In, Form, 8>(p, scratch);
}

template <class In>
void launch_form(const kdn_gain_problem& p, void* scratch) {
  if (p.form == kdn_form::diagonal) return launch_channels<In, kdn_form::diagonal>(p, scratch);
  return launch_channels<In, kdn_form::isotropic>(p, scratch);
}

}  // namespace

void kdn_gain_device(const kdn_gain_problem& problem, void* scratch) {
  kdn_gain_check(problem);
  switch (problem.dtype) {
    case input_dtype::f32: return launch_form<float>(problem, scratch);
    case input_dtype::bf16: return launch_form<bf16_bits>(problem, scratch);
    case input_dtype::f16: return launch_form<f16_bits>(problem, scratch);
  }
}

void kdn_gain_host(const kdn_gain_problem& host) {
  kdn_gain_check(host);
  const long long B = host.batch, T = host.tokens, HV = host.heads, K = host.key_dim, H = HV / host.key_head_group;
  const long long L = kdn_gain_channels(host), N = host.cu_seqlens != nullptr ? host.sequences : B;
  const bool diagonal = host.form == kdn_form::diagonal;
  device_arena arena;
  kdn_gain_problem device = host;
  device.k = arena.upload(host.k, {B, T, H, K}, host.dtype);
  device.q = arena.upload(host.q, {B, T, H, K}, host.dtype);
  device.g = arena.upload(host.g, {B, T, HV, K}, host.dtype);
  device.omega =
      diagonal ? arena.upload(host.omega, {B, T, HV, K}, host.dtype) : arena.upload(host.omega, {B, T, HV}, host.dtype);
  device.r = arena.upload(host.r, {B, T, HV}, host.dtype);
  device.mu = arena.upload(host.mu, {HV}, host.dtype);
  device.initial_covariance = diagonal ? arena.upload(host.initial_covariance, {N, HV, K}, host.dtype)
                                       : arena.upload(host.initial_covariance, {N, HV}, host.dtype);
  device.predicted_covariance = host.predicted_covariance ? arena.poisoned(B * T * HV * L) : nullptr;
  device.gain = host.gain ? arena.poisoned(B * T * HV * L) : nullptr;
  device.readout_variance = arena.poisoned(B * T * HV);
  device.final_covariance = arena.poisoned(N * HV * L);
  void* scratch = arena.allocate(static_cast<std::size_t>(kdn_gain_scratch_bytes(host)));
  kdn_gain_device(device, scratch);
  check_cuda(cudaDeviceSynchronize(), "kdn_gain kernels");
  if (host.predicted_covariance)
    device_arena::download(host.predicted_covariance, device.predicted_covariance, B * T * HV * L);
  if (host.gain) device_arena::download(host.gain, device.gain, B * T * HV * L);
  device_arena::download(host.readout_variance, device.readout_variance, B * T * HV);
  device_arena::download(host.final_covariance, device.final_covariance, N * HV * L);
}

}  // namespace kalman_oracle::gpu
