// The KDN gain backward kernels and their launchers (include/kalman_oracle/gpu/kdn_gain_backward.hpp;
// docs/kernels.md, "KDN gain backward").
//
// Schedule (the twin, twin/kdn_gain_backward_twin.hpp, runs the same): the forward's p̂ (the gain
// kernels, unless given), then the reverse recursion of models/kdn_gain_backward.cuh as a chunked
// scan of affine maps, one warp per (sequence, head, chunk of 64 tokens), lane l keeping channels
// l, l + 32, … (diagonal) or, every lane alike, the head's one variance (isotropic). A sequence is a
// batch row, or one of cu_seqlens' (blockIdx.z; delta_rule_chunk_map says where its tokens and its
// chunks' scratch are, as in the forward):
//   map     each chunk's tokens' maps composed from its last token down, written to scratch (isotropic:
//           and each token's head scalars ‖k‖², Q, a, c, which the emit pass then reads, not forms);
//   carry   one warp per (sequence, head): y at the last chunk's end is the final covariance's
//           cotangent, y_end[c − 1] = F_c(y_end[c]);
//   emit    each chunk from its y_end, token by token downwards: every gradient, and y_{t−1};
//           dμ's and dτ's terms summed per lane over the chunk, then the warp's tree;
//   reduce  dq, dk over a key head's value heads (head order); per sequence, dμ per head over its
//           chunks and dτ = 2 Σ / τ over its (head, chunk)s, then both over the sequences in order.
// Every sum has a fixed order: bit-identical run to run, and equal to the twin; a packed batch gives
// its sequences' bits run one at a time (dμ, dτ: their sums in sequence order).
#include <cuda_runtime.h>

#include "device_arena.hpp"
#include "kalman_oracle/gpu/kdn_gain_backward.hpp"
#include "kalman_oracle/gpu/models/kdn_gain_backward.cuh"
#include "kdn_head_reader.cuh"

namespace kalman_oracle::gpu {
namespace {

constexpr int warps_per_block = 4;  // four chunks per block
constexpr int chunk_tokens = kdn_gain_backward_chunk_tokens;

/// The scratch, carved as kdn_gain_backward_scratch_counts says.
struct backward_scratch {
  float* predicted;  // [B, T, HV, L] (the forward's, when not given)
  float *forward_readout, *forward_final;
  void* forward_scratch;
  kdn_adjoint_affine* affine;       // [HV, NC, L] (chunk_slot)
  float* carries;                   // [HV, NC, L]
  float *mu_partial, *tau_partial;  // [HV, NC]
  float *q_parts, *k_parts;         // [B, T, HV, K]
  float4* token_scalars;            // [B, T, HV] (isotropic: the map pass's, for the emit pass)
  delta_rule_sequence_start* chunk_table;
};

backward_scratch carve(const kdn_gain_backward_problem& bp, void* scratch) {
  const kdn_gain_backward_scratch_counts n = kdn_gain_backward_scratch(bp);
  float* next = static_cast<float*>(scratch);
  const auto take = [&](long long floats) {
    float* part = next;
    next += floats;
    return part;
  };
  backward_scratch s{};
  s.predicted = take(n.predicted);
  s.forward_readout = take(n.forward_readout);
  s.forward_final = take(n.forward_final);
  s.forward_scratch = take(n.forward_scratch);
  s.affine = reinterpret_cast<kdn_adjoint_affine*>(take(n.affine));
  s.carries = take(n.carries);
  s.mu_partial = take(n.mu_partial);
  s.tau_partial = take(n.tau_partial);
  s.q_parts = take(n.q_parts);
  s.k_parts = take(n.k_parts);
  s.token_scalars = reinterpret_cast<float4*>(take(n.token_scalars));
  s.chunk_table = reinterpret_cast<delta_rule_sequence_start*>(take(n.chunk_table));
  return s;
}

/// A cotangent's element, 0 where none is given.
__device__ __forceinline__ float cotangent_or_zero(const float* x, long long at) { return x ? x[at] : 0.0f; }

/// One token's values on this lane: what the map and emit passes read or form.
template <int J>
struct token_values {
  float key[J], query[J], a[J], u[J], predicted[J], d_gain[J], d_predicted[J];
  float r, d_readout;
  float innovation, innovation_adjoint;  // diagonal: D, D̄
  float key2, queries, a_head, u_head;   // isotropic: n, Q, a, c
};

template <class In, kdn_form Form, int J>
struct token_loader {
  const kdn_gain_backward_problem& bp;
  const kdn_head_reader<In>& in;
  const float* predicted;
  float mu;
  int lane;

  /// The values of token t that p_t needs: p̂, k, r and u (and ‖k‖², isotropic).
  __device__ void load_covariance_inputs(long long t, token_values<J>& x) const {
    const int K = bp.forward.key_dim;
    const long long row = row_of(t);
    x.r = in.r(t);
    if constexpr (Form == kdn_form::diagonal) {
#pragma unroll
      for (int j = 0; j < J; ++j) {
        const int i = lane + j * kdn_lanes;
        if (i < K) {
          x.key[j] = in.k(t, i);
          x.predicted[j] = predicted[row * K + i];
          x.u[j] = kdn_diagonal_information(mu, x.key[j], x.r);
        }
      }
    } else {
      float keys = 0.0f;
#pragma unroll
      for (int j = 0; j < J; ++j) {
        const int i = lane + j * kdn_lanes;
        if (i < K) {
          x.key[j] = in.k(t, i);
          keys = add_rn(keys, mul_rn(x.key[j], x.key[j]));
        }
      }
      x.key2 = warp_channel_sum(keys);
      x.predicted[0] = predicted[row];
      x.u_head = kdn_isotropic_information(mu, x.key2, static_cast<float>(K), x.r);
    }
  }

  /// Isotropic, with the head's token scalars as the map pass stored them (the same functions of the
  /// same inputs as load_covariance_inputs and load_rest form them, so the same bits): p̂, k, r, ‖k‖², c,
  /// and Q and a, which load_rest<false> then leaves alone.
  __device__ void load_covariance_inputs_stored(long long t, const float4* scalars, token_values<J>& x) const {
    const int K = bp.forward.key_dim;
    const long long row = row_of(t);
    x.r = in.r(t);
#pragma unroll
    for (int j = 0; j < J; ++j) {
      const int i = lane + j * kdn_lanes;
      if (i < K) x.key[j] = in.k(t, i);
    }
    x.predicted[0] = predicted[row];
    const float4 stored = scalars[row];
    x.key2 = stored.x, x.queries = stored.y, x.a_head = stored.z, x.u_head = stored.w;
  }

  /// The [B, T, HV] row of the head's token t.
  __device__ long long row_of(long long t) const {
    const kdn_gain_problem& p = bp.forward;
    return (in.b * p.tokens + in.t0 + t) * p.heads + in.h;
  }

  /// The rest of token t's values (after load_covariance_inputs). `Sums` false (isotropic, after
  /// load_covariance_inputs_stored): the channels' q and e^{2g} (which the gradients need one by one) and
  /// the cotangents, no sums over channels.
  template <bool Sums = true>
  __device__ void load_rest(long long t, token_values<J>& x) const {
    static_assert(Sums || Form == kdn_form::isotropic);
    const kdn_gain_problem& p = bp.forward;
    const int K = p.key_dim;
    const long long row = row_of(t);
    x.d_readout = cotangent_or_zero(bp.d_readout_variance, row);
    float decay = 0.0f, queries = 0.0f;
#pragma unroll
    for (int j = 0; j < J; ++j) {
      const int i = lane + j * kdn_lanes;
      if (i < K) {
        x.query[j] = in.q(t, i);
        x.a[j] = kdn_decay_squared(in.g(t, i));
        if constexpr (Sums) {
          decay = add_rn(decay, x.a[j]);
          queries = add_rn(queries, kdn_scaled_query_squared(p.tau, x.query[j]));
        }
      }
    }
    if constexpr (Form == kdn_form::diagonal) {
      float innovation = 0.0f;
#pragma unroll
      for (int j = 0; j < J; ++j) {
        const int i = lane + j * kdn_lanes;
        if (i < K) {
          x.d_gain[j] = cotangent_or_zero(bp.d_gain, row * K + i);
          x.d_predicted[j] = cotangent_or_zero(bp.d_predicted_covariance, row * K + i);
          innovation = add_rn(innovation, kdn_innovation_term(x.predicted[j], x.key[j]));
        }
      }
      x.innovation = add_rn(x.r, warp_channel_sum(innovation));
      float gain_terms = 0.0f;
#pragma unroll
      for (int j = 0; j < J; ++j)
        if (lane + j * kdn_lanes < K)
          gain_terms = add_rn(gain_terms, kdn_gain_adjoint_term(x.d_gain[j], x.predicted[j], x.key[j], x.innovation));
      x.innovation_adjoint = kdn_innovation_adjoint(warp_channel_sum(gain_terms), x.innovation);
    } else {
      x.d_gain[0] = cotangent_or_zero(bp.d_gain, row);
      x.d_predicted[0] = cotangent_or_zero(bp.d_predicted_covariance, row);
      if constexpr (Sums) {
        x.queries = warp_channel_sum(queries);
        x.a_head = div_rn(warp_channel_sum(decay), static_cast<float>(K));
      }
    }
  }

  /// Token t's map on lane channel j.
  __device__ kdn_adjoint_affine step(const token_values<J>& x, int j) const {
    if constexpr (Form == kdn_form::diagonal)
      return kdn_diagonal_adjoint_step(bp.forward.tau, x.query[j], x.d_readout, x.key[j], x.a[j], x.predicted[j],
                                       x.u[j], x.d_gain[j], x.innovation, x.innovation_adjoint, x.d_predicted[j]);
    else
      return kdn_isotropic_adjoint_step(x.d_readout, x.queries, x.key2, x.a_head, x.predicted[0], x.u_head, x.r,
                                        x.d_gain[0], x.d_predicted[0]);
  }
};

/// map: chunk c's composed map per covariance lane.
template <class In, kdn_form Form, int J>
__global__ void __launch_bounds__(kdn_lanes* warps_per_block)
    kdn_gain_backward_map(const kdn_gain_backward_problem bp, const float* predicted, kdn_adjoint_affine* totals,
                          float4* token_scalars, const delta_rule_chunk_map map) {
  const int lane = threadIdx.x, chunk = blockIdx.x * warps_per_block + threadIdx.y;
  const delta_rule_sequence s = map.sequence(blockIdx.z);
  if (chunk >= s.chunks) return;
  const kdn_gain_problem& p = bp.forward;
  const long long h = blockIdx.y, T = s.tokens;
  const kdn_head_reader<In> in{p, s.batch_row, h, s.first_token, s.state};
  const token_loader<In, Form, J> load{bp, in, predicted, in.mu(), lane};
  const int L = lanes_of<Form>(p.key_dim);
  const long long first = static_cast<long long>(chunk) * chunk_tokens;
  const long long end = first + chunk_tokens < T ? first + chunk_tokens : T;
  kdn_adjoint_affine total[J];
  if constexpr (Form == kdn_form::diagonal) {
    for (long long t = end - 1; t >= first; --t) {
      token_values<J> x;
      load.load_covariance_inputs(t, x);
      load.load_rest(t, x);
#pragma unroll
      for (int j = 0; j < J; ++j)
        if (lane + j * kdn_lanes < L) {
          const kdn_adjoint_affine step = load.step(x, j);
          total[j] = t == end - 1 ? step : kdn_adjoint_then(total[j], step);
        }
    }
  } else {
    // The head's steps first, which do not depend on each other (a loop with no composition in it, so
    // that a token's loads and sums over channels need not wait on the chain), staged in shared memory;
    // then composed from the chunk's last token down: the same operations in the same order as one
    // loop (the forward's map pass does the same: "The isotropic head's token scalars", docs/kernels.md).
    // 12% off the isotropic backward at B = 2, T = 16384, H = 16 on the H100 (docs/kernels.md); the emit
    // pass split the same way (the chain apart from the loads) was 26% slower, and is not.
    __shared__ kdn_adjoint_affine staged_steps[warps_per_block][chunk_tokens];
    kdn_adjoint_affine* steps = staged_steps[threadIdx.y];  // token t at t − first
#pragma unroll 1
    for (long long t = first; t < end; ++t) {
      token_values<J> x;
      load.load_covariance_inputs(t, x);
      load.load_rest(t, x);
      const kdn_adjoint_affine step = load.step(x, 0);
      if (lane == 0) {
        steps[t - first] = step;
        // The token's scalars, for the emit pass (which would otherwise form its sums over channels again).
        token_scalars[load.row_of(t)] = make_float4(x.key2, x.queries, x.a_head, x.u_head);
      }
    }
    __syncwarp();
    total[0] = steps[end - 1 - first];
    for (long long t = end - 2; t >= first; --t) total[0] = kdn_adjoint_then(total[0], steps[t - first]);
  }
  kdn_adjoint_affine* out = totals + chunk_slot(map, s, h, chunk, L);
#pragma unroll
  for (int j = 0; j < J; ++j)
    if (lane + j * kdn_lanes < L) out[lane + j * kdn_lanes] = total[j];
}

/// carry: y at every chunk's end, one warp per (sequence, head).
template <kdn_form Form>
__global__ void __launch_bounds__(kdn_lanes)
    kdn_gain_backward_carry(const kdn_gain_backward_problem bp, const kdn_adjoint_affine* totals, float* carries,
                            const delta_rule_chunk_map map) {
  const long long h = blockIdx.x;
  const delta_rule_sequence s = map.sequence(blockIdx.y);
  const int L = lanes_of<Form>(bp.forward.key_dim), chunks = s.chunks;
  const long long base = chunk_slot(map, s, h, 0, L);
  constexpr int batch = 8;  // the totals loaded a batch ahead of the applications that need them
  for (int i = threadIdx.x; i < L; i += kdn_lanes) {
    float y = cotangent_or_zero(bp.d_final_covariance, (s.state * bp.forward.heads + h) * L + i);
    for (int c = chunks - 1; c >= 0; c -= batch) {
      kdn_adjoint_affine total[batch];
#pragma unroll
      for (int v = 0; v < batch; ++v)
        if (c - v > 0) total[v] = totals[base + static_cast<long long>(c - v) * L + i];
#pragma unroll
      for (int v = 0; v < batch; ++v)
        if (c - v >= 0) {
          carries[base + static_cast<long long>(c - v) * L + i] = y;
          if (c - v > 0) y = kdn_adjoint_apply(total[v], y);
        }
    }
  }
}

/// emit: every token's gradients, from its chunk's carry downwards. Four blocks an SM up to J = 4 (K <= 128):
/// the token loop is latency-bound, and without the bound the diagonal form at J = 4 took 138 registers,
/// three blocks an SM, and ran 16–38% slower on the H200 than at 126 (measured: docs/kernels.md, "The KDN
/// gain backward on packed batches"); at J = 8 the bound would spill. `Stored` (isotropic, where the map pass
/// ran): the head's token scalars read from the map pass's `token_scalars`, not formed again.
template <class In, kdn_form Form, int J, bool Stored>
__global__ void __launch_bounds__(kdn_lanes* warps_per_block, J <= 4 ? 4 : 1)
    kdn_gain_backward_emit(const kdn_gain_backward_problem bp, const float* predicted, const float* carries,
                           float* mu_partial, float* tau_partial, float* q_parts, float* k_parts,
                           const float4* token_scalars, const delta_rule_chunk_map map) {
  static_assert(!Stored || Form == kdn_form::isotropic);
  const int lane = threadIdx.x, chunk = blockIdx.x * warps_per_block + threadIdx.y;
  const delta_rule_sequence s = map.sequence(blockIdx.z);
  if (chunk >= s.chunks) return;
  const kdn_gain_problem& p = bp.forward;
  const long long h = blockIdx.y, T = s.tokens, HV = p.heads;
  const long long group = p.key_head_group, H = HV / group;
  const kdn_head_reader<In> in{p, s.batch_row, h, s.first_token, s.state};
  const float mu = in.mu();
  const token_loader<In, Form, J> load{bp, in, predicted, mu, lane};
  const int K = p.key_dim, L = lanes_of<Form>(K);
  const float channels = static_cast<float>(K);
  // Diagonal: lane l's channels l, l + 32, …; isotropic: every lane holds the head's one adjoint
  // (each lane forms its own channels' dk, dg from it).
  const auto lane_channel = [&](int j) { return Form == kdn_form::diagonal ? lane + j * kdn_lanes : 0; };
  const auto holds = [&](int j) { return Form == kdn_form::diagonal ? lane + j * kdn_lanes < L : j == 0; };
  float y[J];
#pragma unroll
  for (int j = 0; j < J; ++j)
    if (holds(j)) y[j] = carries[chunk_slot(map, s, h, chunk, L) + lane_channel(j)];
  float* dq = group > 1 ? q_parts : bp.dq;
  float* dk = group > 1 ? k_parts : bp.dk;
  float mu_lane = 0.0f, tau_lane = 0.0f;
  const long long first = static_cast<long long>(chunk) * chunk_tokens;
  const long long end = first + chunk_tokens < T ? first + chunk_tokens : T;
  token_values<J> x, before;
  const auto load_covariance_inputs = [&](long long t, token_values<J>& v) {
    if constexpr (Stored)
      load.load_covariance_inputs_stored(t, token_scalars, v);
    else
      load.load_covariance_inputs(t, v);
  };
  load_covariance_inputs(end - 1, x);
  for (long long t = end - 1; t >= first; --t) {
    load.template load_rest<!Stored>(t, x);
    // p_{t−1}: the prior at t = 0, else the posterior of p̂_{t−1} (whose inputs the next step reuses).
    float previous[J];
    if (t > 0) load_covariance_inputs(t - 1, before);
#pragma unroll
    for (int j = 0; j < J; ++j)
      if (holds(j))
        previous[j] =
            t == 0 ? in.prior(lane_channel(j))
                   : kdn_posterior(before.predicted[j], Form == kdn_form::diagonal ? before.u[j] : before.u_head);
    const long long token = s.batch_row * p.tokens + s.first_token + t;  // in [B, T]
    const long long row = token * HV + h;
    const long long key_row = group > 1 ? row : token * H + h / group;
    if constexpr (Form == kdn_form::diagonal) {
      float r_terms = 0.0f;
#pragma unroll
      for (int j = 0; j < J; ++j) {
        const int i = lane + j * kdn_lanes;
        if (i < K) {
          const kdn_diagonal_token_gradients gi = kdn_diagonal_token_adjoint(
              y[j], p.tau, x.query[j], x.d_readout, x.key[j], x.a[j], x.predicted[j], previous[j], x.u[j], x.r, mu,
              x.d_gain[j], x.innovation, x.innovation_adjoint, x.d_predicted[j]);
          dq[key_row * K + i] = gi.dq;
          dk[key_row * K + i] = gi.dk;
          bp.dg[row * K + i] = gi.dg;
          bp.domega[row * K + i] = gi.domega;
          r_terms = add_rn(r_terms, gi.r_term);
          mu_lane = add_rn(mu_lane, gi.mu_term);
          tau_lane = add_rn(tau_lane, gi.tau_term);
          y[j] = gi.y_previous;
        }
      }
      const float dr = add_rn(x.innovation_adjoint, -warp_channel_sum(r_terms));
      if (lane == 0) bp.dr[row] = dr;
    } else {
      const kdn_isotropic_token_gradients gh =
          kdn_isotropic_token_adjoint(y[0], x.d_readout, x.queries, x.key2, x.a_head, x.predicted[0], previous[0],
                                      x.u_head, x.r, mu, channels, x.d_gain[0], x.d_predicted[0]);
#pragma unroll
      for (int j = 0; j < J; ++j) {
        const int i = lane + j * kdn_lanes;
        if (i < K) {
          dq[key_row * K + i] = kdn_isotropic_query_gradient(gh.readout_scale, p.tau, x.query[j]);
          dk[key_row * K + i] = mul_rn(add_rn(gh.n_bar, gh.n_bar), x.key[j]);
          bp.dg[row * K + i] = kdn_isotropic_gate_gradient(gh.a_bar, x.a[j], channels);
        }
      }
      if (lane == 0) {
        bp.domega[row] = gh.domega;
        bp.dr[row] = gh.dr;
        mu_lane = add_rn(mu_lane, gh.mu_term);
        tau_lane = add_rn(tau_lane, gh.tau_term);
      }
      y[0] = gh.y_previous;
    }
    if (t > first) x = before;  // p̂_{t−1}, k_{t−1}, r_{t−1}, u_{t−1} (and ‖k_{t−1}‖²)
  }
  const float mu_sum = warp_channel_sum(mu_lane), tau_sum = warp_channel_sum(tau_lane);
  if (lane == 0) {
    mu_partial[chunk_slot(map, s, h, chunk, 1)] = mu_sum;
    tau_partial[chunk_slot(map, s, h, chunk, 1)] = tau_sum;
  }
  if (chunk == 0) {
#pragma unroll
    for (int j = 0; j < J; ++j) {
      const int i = lane + j * kdn_lanes;
      if (i < L) bp.dinitial_covariance[(s.state * HV + h) * L + i] = y[j];
    }
  }
}

/// A sequence without tokens: its prior's gradient is its final covariance's cotangent.
template <kdn_form Form>
__global__ void kdn_gain_backward_prior(const kdn_gain_backward_problem bp, const delta_rule_chunk_map map) {
  const long long h = blockIdx.x;
  const delta_rule_sequence s = map.sequence(blockIdx.y);
  if (s.tokens != 0) return;
  const int L = lanes_of<Form>(bp.forward.key_dim);
  for (int i = threadIdx.x; i < L; i += blockDim.x) {
    const long long at = (s.state * bp.forward.heads + h) * L + i;
    bp.dinitial_covariance[at] = cotangent_or_zero(bp.d_final_covariance, at);
  }
}

/// dμ per head and dτ, one block: per sequence, dμ's partials over its chunks and dτ = 2 Σ / τ with Σ
/// over its (head, chunk)s, each in index order from +0 (what a call for that sequence alone computes);
/// then each over the sequences in order, from the first sequence's value (so that one sequence gives
/// a one-sequence call's bits, the sign of a zero included). The sums' loads batched ahead of their adds.
__global__ void kdn_gain_backward_reduce(const kdn_gain_backward_problem bp, const float* mu_partial,
                                         const float* tau_partial, const delta_rule_chunk_map map) {
  const long long HV = bp.forward.heads, NC = map.total_chunks;
  // sum + Σ_{c < n} partial[c] in the order of c.
  const auto ordered_sum = [](float sum, const float* partial, long long n) {
    constexpr int batch = 8;
    for (long long at = 0; at < n; at += batch) {
      float v[batch];
#pragma unroll
      for (int u = 0; u < batch; ++u)
        if (at + u < n) v[u] = partial[at + u];
#pragma unroll
      for (int u = 0; u < batch; ++u)
        if (at + u < n) sum = add_rn(sum, v[u]);
    }
    return sum;
  };
  if (bp.dmu)
    for (long long h = threadIdx.x; h < HV; h += blockDim.x) {
      float total = 0.0f;
      for (long long n = 0; n < map.sequences; ++n) {
        const delta_rule_sequence s = map.sequence(n);
        const float own = ordered_sum(0.0f, mu_partial + h * NC + s.first_chunk, s.chunks);
        total = n == 0 ? own : add_rn(total, own);
      }
      bp.dmu[h] = total;
    }
  if (bp.dtau) {
    // A sequence's (head, chunk) partials, head-major (the order of the sum), staged a tile at a time
    // into shared memory by the whole block, then added by thread 0: its chain of adds no longer waits
    // on a global load every eight terms (0.33 ms of the diagonal backward at B = 2, T = 16384, H = 16).
    constexpr int tile = 2048;
    __shared__ float staged[tile];
    float total = 0.0f;
    for (long long n = 0; n < map.sequences; ++n) {
      const delta_rule_sequence s = map.sequence(n);
      const long long terms = HV * s.chunks;
      float sum = 0.0f;
      for (long long at = 0; at < terms; at += tile) {
        const int m = static_cast<int>(terms - at < tile ? terms - at : tile);
        __syncthreads();  // the tile before is added
        for (int i = threadIdx.x; i < m; i += blockDim.x) {
          const long long term = at + i, h = term / s.chunks;
          staged[i] = tau_partial[h * NC + s.first_chunk + (term - h * s.chunks)];
        }
        __syncthreads();
        if (threadIdx.x == 0) sum = ordered_sum(sum, staged, m);
      }
      const float own = div_rn(add_rn(sum, sum), bp.forward.tau);
      total = n == 0 ? own : add_rn(total, own);
    }
    if (threadIdx.x == 0) bp.dtau[0] = total;
  }
}

/// dq, dk over a key head's value heads, in head order.
__global__ void kdn_gain_backward_key_heads(const kdn_gain_backward_problem bp, const float* q_parts,
                                            const float* k_parts) {
  const kdn_gain_problem& p = bp.forward;
  const long long group = p.key_head_group, HV = p.heads, H = HV / group, K = p.key_dim;
  const long long n = static_cast<long long>(p.batch) * p.tokens * H * K;
  for (long long at = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; at < n;
       at += static_cast<long long>(gridDim.x) * blockDim.x) {
    const long long i = at % K, hk = at / K % H, bt = at / K / H;
    const long long from = (bt * HV + hk * group) * K + i;
    float q = q_parts[from], k = k_parts[from];
    for (long long j = 1; j < group; ++j) {
      q = add_rn(q, q_parts[from + j * K]);
      k = add_rn(k, k_parts[from + j * K]);
    }
    bp.dq[at] = q;
    bp.dk[at] = k;
  }
}

template <class In, kdn_form Form, int J>
void launch_typed(const kdn_gain_backward_problem& bp, const backward_scratch& s, const float* predicted) {
  const kdn_gain_problem& p = bp.forward;
  const cudaStream_t stream = static_cast<cudaStream_t>(p.stream);
  // With cu_seqlens the chunk map's table in the scratch.
  const kdn_launch_sequences sequences = kdn_sequences_for_launch(p, s.chunk_table, stream);
  const delta_rule_chunk_map& map = sequences.map;
  const long long most = sequences.longest_chunks;
  const bool empty = sequences.some_empty;
  const unsigned N = static_cast<unsigned>(map.sequences), HV = static_cast<unsigned>(p.heads);
  if (empty) {
    kdn_gain_backward_prior<Form><<<dim3(HV, N), kdn_lanes, 0, stream>>>(bp, map);
    check_cuda(cudaGetLastError(), "kdn_gain_backward_prior");
  }
  if (most > 0) {
    const dim3 block(kdn_lanes, warps_per_block),
        grid(static_cast<unsigned>((most + warps_per_block - 1) / warps_per_block), HV, N);
    if (most > 1) {
      kdn_gain_backward_map<In, Form, J><<<grid, block, 0, stream>>>(bp, predicted, s.affine, s.token_scalars, map);
      check_cuda(cudaGetLastError(), "kdn_gain_backward_map");
    }
    kdn_gain_backward_carry<Form><<<dim3(HV, N), kdn_lanes, 0, stream>>>(bp, s.affine, s.carries, map);
    check_cuda(cudaGetLastError(), "kdn_gain_backward_carry");
    // The isotropic emit reads the map pass's token scalars where it ran (a sequence of one chunk: no map).
    if (Form == kdn_form::isotropic && most > 1)
      kdn_gain_backward_emit<In, Form, J, Form == kdn_form::isotropic><<<grid, block, 0, stream>>>(
          bp, predicted, s.carries, s.mu_partial, s.tau_partial, s.q_parts, s.k_parts, s.token_scalars, map);
    else
      kdn_gain_backward_emit<In, Form, J, false><<<grid, block, 0, stream>>>(
          bp, predicted, s.carries, s.mu_partial, s.tau_partial, s.q_parts, s.k_parts, s.token_scalars, map);
    check_cuda(cudaGetLastError(), "kdn_gain_backward_emit");
    if (p.key_head_group > 1) {
      kdn_gain_backward_key_heads<<<1024, 256, 0, stream>>>(bp, s.q_parts, s.k_parts);
      check_cuda(cudaGetLastError(), "kdn_gain_backward_key_heads");
    }
  }
  kdn_gain_backward_reduce<<<1, 256, 0, stream>>>(bp, s.mu_partial, s.tau_partial, map);
  check_cuda(cudaGetLastError(), "kdn_gain_backward_reduce");
}

template <class In, kdn_form Form>
void launch_channels(const kdn_gain_backward_problem& bp, const backward_scratch& s, const float* predicted) {
  static_assert(kdn_gain_max_key_dim == 8 * kdn_lanes);
  const int K = bp.forward.key_dim;
  if (K <= kdn_lanes) return launch_typed<In, Form, 1>(bp, s, predicted);
  if (K <= 2 * kdn_lanes) return launch_typed<In, Form, 2>(bp, s, predicted);
  if (K <= 4 * kdn_lanes) return launch_typed<In, Form, 4>(bp, s, predicted);
  return launch_typed<In, Form, 8>(bp, s, predicted);
}

template <class In>
void launch_form(const kdn_gain_backward_problem& bp, const backward_scratch& s, const float* predicted) {
  if (bp.forward.form == kdn_form::diagonal) return launch_channels<In, kdn_form::diagonal>(bp, s, predicted);
  return launch_channels<In, kdn_form::isotropic>(bp, s, predicted);
}

}  // namespace

void kdn_gain_backward_device(const kdn_gain_backward_problem& problem, void* scratch) {
  kdn_gain_backward_check(problem);
  const backward_scratch s = carve(problem, scratch);
  const float* predicted = problem.predicted_covariance;
  if (predicted == nullptr) {  // the forward's p̂, into scratch
    kdn_gain_problem f = problem.forward;
    f.predicted_covariance = s.predicted;
    f.gain = nullptr;
    f.readout_variance = s.forward_readout;
    f.final_covariance = s.forward_final;
    kdn_gain_device(f, s.forward_scratch);
    predicted = s.predicted;
  }
  switch (problem.forward.dtype) {
    case input_dtype::f32: return launch_form<float>(problem, s, predicted);
    case input_dtype::bf16: return launch_form<bf16_bits>(problem, s, predicted);
    case input_dtype::f16: return launch_form<f16_bits>(problem, s, predicted);
  }
}

void kdn_gain_backward_host(const kdn_gain_backward_problem& host) {
  kdn_gain_backward_check(host);
  const kdn_gain_problem& f = host.forward;
  const long long B = f.batch, T = f.tokens, HV = f.heads, K = f.key_dim, H = HV / f.key_head_group;
  const long long L = kdn_gain_channels(f), N = f.cu_seqlens != nullptr ? f.sequences : B;
  const bool diagonal = f.form == kdn_form::diagonal;
  device_arena arena;
  kdn_gain_backward_problem device = host;
  kdn_gain_problem& d = device.forward;
  d.k = arena.upload(f.k, {B, T, H, K}, f.dtype);
  d.q = arena.upload(f.q, {B, T, H, K}, f.dtype);
  d.g = arena.upload(f.g, {B, T, HV, K}, f.dtype);
  d.omega = diagonal ? arena.upload(f.omega, {B, T, HV, K}, f.dtype) : arena.upload(f.omega, {B, T, HV}, f.dtype);
  d.r = arena.upload(f.r, {B, T, HV}, f.dtype);
  d.mu = arena.upload(f.mu, {HV}, f.dtype);
  d.initial_covariance = diagonal ? arena.upload(f.initial_covariance, {N, HV, K}, f.dtype)
                                  : arena.upload(f.initial_covariance, {N, HV}, f.dtype);
  d.predicted_covariance = d.gain = d.readout_variance = d.final_covariance = nullptr;
  device.predicted_covariance = arena.upload(host.predicted_covariance, B * T * HV * L);
  device.d_gain = arena.upload(host.d_gain, B * T * HV * L);
  device.d_predicted_covariance = arena.upload(host.d_predicted_covariance, B * T * HV * L);
  device.d_readout_variance = arena.upload(host.d_readout_variance, B * T * HV);
  device.d_final_covariance = arena.upload(host.d_final_covariance, N * HV * L);
  device.dq = arena.poisoned(B * T * H * K);
  device.dk = arena.poisoned(B * T * H * K);
  device.dg = arena.poisoned(B * T * HV * K);
  device.domega = arena.poisoned(B * T * HV * L);
  device.dr = arena.poisoned(B * T * HV);
  device.dmu = host.dmu ? arena.poisoned(HV) : nullptr;
  device.dinitial_covariance = arena.poisoned(N * HV * L);
  device.dtau = host.dtau ? arena.poisoned(1) : nullptr;
  void* scratch = arena.allocate(static_cast<std::size_t>(kdn_gain_backward_scratch_bytes(device)));
  kdn_gain_backward_device(device, scratch);
  check_cuda(cudaDeviceSynchronize(), "kdn_gain_backward kernels");
  const auto download = [](float* to, const float* from, long long n) {
    if (to && n > 0) device_arena::download(to, from, n);
  };
  download(host.dq, device.dq, B * T * H * K);
  download(host.dk, device.dk, B * T * H * K);
  download(host.dg, device.dg, B * T * HV * K);
  download(host.domega, device.domega, B * T * HV * L);
  download(host.dr, device.dr, B * T * HV);
  download(host.dmu, device.dmu, HV);
  download(host.dinitial_covariance, device.dinitial_covariance, N * HV * L);
  download(host.dtau, device.dtau, 1);
}

}  // namespace kalman_oracle::gpu
