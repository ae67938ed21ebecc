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
// broadcast load. The diagonal form's map and emit passes recompute the leaves rather than store them
// ([B, T, HV, K] mobius maps would be four times the gates' bytes); the isotropic form's map pass stores
// each token's four scalars (kdn_isotropic_token: 16 bytes a token and head), so that its emit pass
// reads neither k, g nor q and sums nothing over channels.
#include <cuda_runtime.h>

#include "device_arena.hpp"
#include "kalman_oracle/gpu/kdn_gain.hpp"
#include "kalman_oracle/gpu/models/kdn_gain.cuh"
#include "kdn_head_reader.cuh"

namespace kalman_oracle::gpu {
namespace {

constexpr int warps_per_block = 4;  // four chunks per block

/// Token t's leaves for this lane's channels (the diagonal form), and their a, ω and keys (which the
/// emit pass's gain reads again: kept in registers rather than loaded a second time after the stores).
template <class In, int J>
__device__ void diagonal_token_leaves(const kdn_head_reader<In>& in, long long t, int lane, float mu, float r,
                                      mobius_f32 (&leaf)[J], float (&a)[J], float (&omega)[J], float (&key)[J]) {
  const int K = in.p.key_dim;
#pragma unroll
  for (int j = 0; j < J; ++j) {
    const int i = lane + j * kdn_lanes;
    if (i < K) {
      a[j] = kdn_decay_squared(in.g(t, i));
      omega[j] = in.omega(t, i);
      key[j] = in.k(t, i);
      leaf[j] = kdn_covariance_leaf(a[j], omega[j], kdn_diagonal_information(mu, key[j], r));
    }
  }
}

/// What the isotropic head's token t contributes besides its inputs ω_t and r_t, every lane alike: the
/// decay ā_t = Σα²/K, the information u_t = μ‖k_t‖²/(K r_t), ‖k_t‖² (the gain's) and Σ(τq)² (the
/// readout's); the sums over channels by warp_channel_sum. 16 bytes, so that the emit pass reads a
/// token's in one load.
struct alignas(16) kdn_isotropic_token {
  float decay, information, key_norm_squared, query_norm_squared;
};

template <class In, int J>
__device__ kdn_isotropic_token isotropic_token(const kdn_head_reader<In>& in, long long t, int lane, float mu,
                                               float r) {
  const int K = in.p.key_dim;
  float decay2 = 0.0f, keys = 0.0f, queries = 0.0f;
#pragma unroll
  for (int j = 0; j < J; ++j) {
    const int i = lane + j * kdn_lanes;
    if (i < K) {
      decay2 = add_rn(decay2, kdn_decay_squared(in.g(t, i)));
      const float key = in.k(t, i);
      keys = add_rn(keys, mul_rn(key, key));
      queries = add_rn(queries, kdn_scaled_query_squared(in.p.tau, in.q(t, i)));
    }
  }
  kdn_isotropic_token x;
  const float channels = static_cast<float>(K);
  x.decay = div_rn(warp_channel_sum(decay2), channels);
  x.key_norm_squared = warp_channel_sum(keys);
  x.query_norm_squared = warp_channel_sum(queries);
  x.information = kdn_isotropic_information(mu, x.key_norm_squared, channels, r);
  return x;
}

/// map: chunk c's total per covariance lane, at chunk_slot; the isotropic form's token scalars at
/// kdn_gain_chunk_tokens × chunk_slot + the token's place in its chunk. J: channels per lane, ⌈K/32⌉
/// rounded up to a power of two (the scan state of J channels lives in registers, so a small K must not
/// pay for K = 256's registers). The diagonal form at J = 4 (K = 128) is held to six blocks an SM: left
/// free it took 90 registers, five blocks, and its forward at B = 2, T = 16384, H = 16 ran 8% slower
/// (measured on the H100, docs/kernels.md, "The KDN gains: the diagonal map's registers, the isotropic
/// backward's map split"); the isotropic form held to eight blocks ran 2% slower, so it and the other
/// sizes are left to the compiler (0: no bound).
template <class In, kdn_form Form, int J>
__global__ void __launch_bounds__(kdn_lanes* warps_per_block, Form == kdn_form::diagonal && J == 4 ? 6 : 0)
    kdn_gain_map(const kdn_gain_problem p, mobius_f32* totals, kdn_isotropic_token* tokens,
                 const delta_rule_chunk_map map) {
  const int lane = threadIdx.x, chunk = blockIdx.x * warps_per_block + threadIdx.y;
  const delta_rule_sequence s = map.sequence(blockIdx.z);
  if (chunk >= s.chunks) return;
  const long long h = blockIdx.y, T = s.tokens;
  const kdn_head_reader<In> in{p, s.batch_row, h, s.first_token, s.state};
  const int K = p.key_dim, L = lanes_of<Form>(K);
  const float mu = in.mu();
  mobius_f32 local[J];
  const long long first = static_cast<long long>(chunk) * kdn_gain_chunk_tokens;
  const long long end = first + kdn_gain_chunk_tokens < T ? first + kdn_gain_chunk_tokens : T;
  if constexpr (Form == kdn_form::diagonal) {
    // Not unrolled: unrolled twice, 103 registers and no faster (measured on the H200).
#pragma unroll 1
    for (long long t = first; t < end; ++t) {
      mobius_f32 leaf[J];
      float a[J], omega[J], key[J];
      diagonal_token_leaves<In, J>(in, t, lane, mu, in.r(t), leaf, a, omega, key);
#pragma unroll
      for (int j = 0; j < J; ++j)
        if (lane + j * kdn_lanes < L) local[j] = t == first ? leaf[j] : mobius_compose(leaf[j], local[j]);
    }
  } else {
    // First every token's scalars and leaf, which do not depend on each other (a loop with no compose in
    // it, whose next token's loads need not wait on this token's chain), the leaves staged in shared
    // memory; then the leaves composed in order from there: the same operations in the same order as
    // one loop. Measured on the H200 at B = 2, T = 16384, H = 16, K = 128 (docs/kernels.md): the three
    // passes 1.06 ms with one loop here and the emit pass loading as it goes, 0.75 ms with this split and
    // the emit pass's staging; 1.27 ms with the first loop unrolled two or four times (more registers).
    __shared__ mobius_f32 staged_leaves[warps_per_block][kdn_gain_chunk_tokens];
    mobius_f32* leaves = staged_leaves[threadIdx.y];  // token t at t − first
    const long long token_slot = chunk_slot(map, s, h, chunk, 1) * kdn_gain_chunk_tokens - first;  // + t
#pragma unroll 1
    for (long long t = first; t < end; ++t) {
      const kdn_isotropic_token x = isotropic_token<In, J>(in, t, lane, mu, in.r(t));
      const mobius_f32 leaf = kdn_covariance_leaf(x.decay, in.omega(t, 0), x.information);
      if (lane == 0) {
        tokens[token_slot + t] = x;
        leaves[t - first] = leaf;
      }
    }
    __syncwarp();
    local[0] = leaves[0];
    for (long long t = first + 1; t < end; ++t) local[0] = mobius_compose(leaves[t - first], local[0]);
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
    kdn_gain_emit(const kdn_gain_problem p, const mobius_f32* carries, const kdn_isotropic_token* tokens,
                  const delta_rule_chunk_map map) {
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
  float a[J], omega[J], key[J], prior[J], previous[J], covariance[J], predicted[J];
  kdn_isotropic_token x{};  // the isotropic head's token, from the map pass
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
  // The isotropic head's chunk: its tokens' scalars (the map pass's), r and ω staged in shared memory
  // first, lane l loading tokens l and l + 32 at once, so that the scan below waits on no global load.
  constexpr int staged = Form == kdn_form::isotropic ? kdn_gain_chunk_tokens : 1;
  __shared__ kdn_isotropic_token staged_tokens[warps_per_block][staged];
  __shared__ float staged_r[warps_per_block][staged], staged_omega[warps_per_block][staged];
  if constexpr (Form == kdn_form::isotropic) {
    const long long token_slot = chunk_slot(map, s, h, chunk, 1) * kdn_gain_chunk_tokens;
    for (long long t = first + lane; t < end; t += kdn_lanes) {
      staged_tokens[threadIdx.y][t - first] = tokens[token_slot + t - first];
      staged_r[threadIdx.y][t - first] = in.r(t);
      staged_omega[threadIdx.y][t - first] = in.omega(t, 0);
    }
    __syncwarp();
  }
  for (long long t = first; t < end; ++t) {
    float r;
    if constexpr (Form == kdn_form::diagonal) {
      r = in.r(t);
      diagonal_token_leaves<In, J>(in, t, lane, mu, r, leaf, a, omega, key);
    } else {
      x = staged_tokens[threadIdx.y][t - first];
      r = staged_r[threadIdx.y][t - first];
      a[0] = x.decay;
      omega[0] = staged_omega[threadIdx.y][t - first];
      leaf[0] = kdn_covariance_leaf(a[0], omega[0], x.information);
    }
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
          innovation = add_rn(innovation, kdn_innovation_term(predicted[j], key[j]));
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
          if (p.gain) p.gain[row * K + i] = kdn_diagonal_gain(predicted[j], key[j], innovation);
        }
      }
      if (lane == 0) p.readout_variance[row] = readout;
    } else if (lane == 0) {
      if (p.predicted_covariance) p.predicted_covariance[row] = predicted[0];
      if (p.gain) p.gain[row] = kdn_isotropic_gain(predicted[0], x.key_norm_squared, r);
      p.readout_variance[row] = mul_rn(covariance[0], x.query_norm_squared);
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
  static_assert(sizeof(mobius_f32) == 16 && sizeof(kdn_isotropic_token) == 16, "kdn_gain_scratch_layout's sizes");
  const kdn_gain_scratch_layout layout(p);
  char* const bytes = static_cast<char*>(scratch);
  mobius_f32* totals = reinterpret_cast<mobius_f32*>(bytes);  // one slot a chunk, head and lane: chunk_slot
  mobius_f32* carries = reinterpret_cast<mobius_f32*>(bytes + layout.carries);
  kdn_isotropic_token* tokens = reinterpret_cast<kdn_isotropic_token*>(bytes + layout.token_scalars);
  const kdn_launch_sequences sequences =
      kdn_sequences_for_launch(p, reinterpret_cast<delta_rule_sequence_start*>(bytes + layout.chunk_table), stream);
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
  // The map pass gives the chunk totals the carries need (more than one chunk), and the isotropic
  // form's token scalars the emit pass reads (always).
  if (most > 1 || Form == kdn_form::isotropic) {
    kdn_gain_map<In, Form, J><<<grid, block, 0, stream>>>(p, totals, tokens, map);
    check_cuda(cudaGetLastError(), "kdn_gain_map");
  }
  if (most > 1) {
    kdn_gain_carry<Form><<<dim3(HV, N), kdn_lanes, 0, stream>>>(p, totals, carries, map);
    check_cuda(cudaGetLastError(), "kdn_gain_carry");
  }
  kdn_gain_emit<In, Form, J><<<grid, block, 0, stream>>>(p, carries, tokens, map);
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
