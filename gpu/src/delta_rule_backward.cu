// The chunked delta-rule backward (delta_rule_backward.hpp; docs/kernels.md, "The chunked delta-rule
// memory (backward, binary32)"), in five launches, the twin's (twin/delta_rule_backward_twin.hpp) in the same order:
//   1. operands   (a block of 1024 threads a (batch row, value head, chunk)): the gates, A / r and σ,
//                 𝒯, X, W, U, the carry keys and Γ ⊙ sq, into the chunk's record of the workspace;
//   2. states     (a block of 256 a (batch row, value head, 16 value columns), the chunks in order):
//                 S and Ũ;
//   3. cotangents (the same blocks, the chunks in reverse): dS' and dŨ; d_initial_state;
//   4. value sums (a block of 1024 a (batch row, value head, chunk), 16 value columns at a time
//                 through shared memory): R, dc, da, dσ, dW, dY (dv), d𝒯, dX, dA;
//   5. channels   (a block of 1024 a (batch row, key head, chunk), 16 channels at a time, the group's
//                 value heads in order): channel_token per (token, channel), the decay ratios' prefixes
//                 (four channels at a time) for the gates; dq, dk, dκ, dg, dβ.
// Every element is computed by one thread with the function of models/delta_rule_backward.cuh that the
// twin calls, from the same binary32 operands (staged in shared memory here, read from its vectors
// there; some sums interleaved four to a thread, each in its own order): kernel and twin agree bit for
// bit, and no atomics: run to run bit-identical. Binary32 on the CUDA cores: see delta_rule_backward.hpp
// for why, docs/kernels.md for what it costs.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>

#include "cuda_check.hpp"
#include "device_arena.hpp"
#include "kalman_oracle/gpu/delta_rule_backward.hpp"
#include "kalman_oracle/gpu/models/delta_rule_backward.cuh"

namespace kalman_oracle::gpu {

namespace {

constexpr int C = delta_rule_backward_chunk_tokens;
constexpr int threads = 256;
/// Launches 1, 4 and 5 hold one block an SM for their shared memory, so a block's threads are all the
/// warps the SM has: 1024 of them hide shared-memory latency (H200, DeltaNet B = 2, T = 16384, H = 16,
/// 256 → 1024 threads: operands 22.1 → 12.6 ms, value sums 60.7 → 40.0 (43.9 with 512), channels
/// 10.2 → 6.3; docs/kernels.md). Launches 2 and 3 (small blocks, several an SM) keep 256. Which thread
/// sums an element does not change its sum's order: kernel = twin bit for bit at every block size.
constexpr int operands_threads = 1024, value_sums_threads = 1024, channels_threads = 1024;
/// Value columns of a block of launches 2 and 3, and of a stage of launch 4; channels of a stage of
/// launch 5 (K and V are multiples of 16: delta_rule_check).
constexpr int columns = 16;
/// Channels whose decay-ratio prefixes (C × C each) launch 5 holds at once.
constexpr int prefix_channels = 4;

/// f(e) for e = threadIdx.x, threadIdx.x + Threads, … below count (Threads: the block's).
template <int Threads = threads, class F>
__device__ __forceinline__ void for_each(int count, F&& f) {
  for (int e = static_cast<int>(threadIdx.x); e < count; e += Threads) f(e);
}

/// The inputs of one (batch row, value head), widened (the twin's delta_rule_reader).
template <class In>
struct device_reader {
  const delta_rule_problem& p;
  long long b, h;
  __device__ float k(long long t, long long i) const {
    return load_widened<In>(p.k, offset_of(p.k, b, t, h / p.key_head_group, i));
  }
  __device__ float q(long long t, long long i) const {
    return load_widened<In>(p.q, offset_of(p.q, b, t, h / p.key_head_group, i));
  }
  __device__ float v(long long t, long long j) const { return load_widened<In>(p.v, offset_of(p.v, b, t, h, j)); }
  __device__ float w(long long t, long long i) const {
    return p.rule == delta_rule_kind::two_key ? load_widened<In>(p.kappa, offset_of(p.kappa, b, t, h, i)) : k(t, i);
  }
  __device__ float beta(long long t) const {
    return p.rule == delta_rule_kind::beta_form ? load_widened<In>(p.beta, offset_of(p.beta, b, t, h)) : 1.0f;
  }
  __device__ float g(long long t, long long i) const {
    switch (p.gate) {
      case delta_rule_gate::none: return 0.0f;
      case delta_rule_gate::per_head: return load_widened<In>(p.g, offset_of(p.g, b, t, h));
      case delta_rule_gate::per_channel: return load_widened<In>(p.g, offset_of(p.g, b, t, h, i));
    }
    return 0.0f;
  }
  __device__ float initial(long long i, long long j) const {
    return p.initial_state.data ? load_widened<In>(p.initial_state, offset_of(p.initial_state, b, h, i, j)) : 0.0f;
  }
};

struct launch_args {
  delta_rule_backward_problem bp;
  backward_record rec;
  int chunks;
  float* ws;
  __device__ float* record(long long b, long long h, int c) const {
    return ws + ((b * bp.forward.heads + h) * chunks + c) * static_cast<long long>(rec.size());
  }
  __device__ int tokens_of(int c) const { return min(C, bp.forward.tokens - c * C); }
};

/// count terms fma(±x[k·xs], y[k·ys], acc), k rising (negate: −x, an exact negation).
struct fma_run {
  const float* x;
  int xs;
  const float* y;
  int ys;
  int count;
  bool negate;
};

/// For this thread's elements e < count (e = threadIdx.x + s·Threads), U at a time: acc = begin(e), then
/// the terms of run_of(e, 0), …, run_of(e, runs − 1) in order, then end(e, acc). The U sums run
/// interleaved (independent chains, so that a thread does not wait out each fma and shared-memory
/// load), each in its own order: every element is the twin's single sum exactly.
template <int U, int Threads = threads, class Begin, class Run, class End>
__device__ __forceinline__ void interleaved_sums(int count, int runs, Begin&& begin, Run&& run_of, End&& end) {
  for (int first = static_cast<int>(threadIdx.x); first < count; first += Threads * U) {
    float acc[U];
#pragma unroll
    for (int u = 0; u < U; ++u) acc[u] = first + u * Threads < count ? begin(first + u * Threads) : 0.0f;
    for (int s = 0; s < runs; ++s) {
      fma_run r[U];
      int longest = 0;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        r[u] = first + u * Threads < count ? run_of(first + u * Threads, s) : fma_run{nullptr, 0, nullptr, 0, 0, false};
        longest = max(longest, r[u].count);
      }
      for (int k = 0; k < longest; ++k)
#pragma unroll
        for (int u = 0; u < U; ++u)
          if (k < r[u].count) {
            const float x = r[u].x[k * r[u].xs];
            acc[u] = fma_rn(r[u].negate ? -x : x, r[u].y[k * r[u].ys], acc[u]);
          }
    }
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (first + u * Threads < count) end(first + u * Threads, acc[u]);
  }
}

/// A run of no terms.
__device__ __forceinline__ fma_run no_terms() { return {nullptr, 0, nullptr, 0, 0, false}; }

/// Shared-memory rows padded by one float where threads walk a column (different rows, one index
/// apart across the warp): the rows then start in different banks.
__host__ __device__ constexpr int padded(int width) { return width + 1; }

/// Launch 1's shared memory: e, w, sq, G, Γ, Γ⁻ [C × (K + 1)] (later r v [C × V] over them), 𝒯 and
/// A / r [C × C], r [C].
__host__ __device__ constexpr int operands_region(int K, int V) {
  return 6 * C * padded(K) > C * V ? 6 * C * padded(K) : C * V;
}

// ---- 1. operands ---------------------------------------------------------------------------------
template <class In>
__global__ void __launch_bounds__(operands_threads) operands_kernel(const launch_args a) {
  extern __shared__ float shared[];
  const delta_rule_problem& p = a.bp.forward;
  const int c = blockIdx.x, K = a.rec.K, V = a.rec.V, n = a.tokens_of(c), L = n - 1, c0 = c * C, KP = padded(K);
  const long long h = blockIdx.y, b = blockIdx.z;
  const device_reader<In> in{p, b, h};
  const bool erases = p.rule != delta_rule_kind::gla, decays = p.gate != delta_rule_gate::none;
  float *e = shared, *w = e + C * KP, *sq = w + C * KP, *G = sq + C * KP, *gam = G + C * KP, *gin = gam + C * KP,
        *Tm = shared + operands_region(K, V), *dot = Tm + C * C, *r = dot + C * C;
  float* ws = a.record(b, h, c);
  const backward_record& rec = a.rec;
  for_each<operands_threads>(n, [&](int t) { r[t] = in.beta(c0 + t); });
  for_each<operands_threads>(n * K, [&](int x) {
    const int t = x / K, i = x % K;
    e[t * KP + i] = in.k(c0 + t, i);
    w[t * KP + i] = in.w(c0 + t, i);
    sq[t * KP + i] = mul_rn(p.tau, in.q(c0 + t, i));
  });
  bool strong_here = false;
  for_each<operands_threads>(K, [&](int i) {  // the gates, one thread a channel, in token order
    strong_here =
        channel_gates([&](int t) { return in.g(c0 + t, i); }, n, decays, G + i, gam + i, gin + i, KP) || strong_here;
  });
  const bool strong = __syncthreads_or(strong_here) != 0;
  if (threadIdx.x == 0) ws[rec.strong()] = strong ? 1.0f : 0.0f;
  // A / r and σ (keyed_pair_sum; the rows padded: threads of a warp read different rows j).
  for_each<operands_threads>(n * n, [&](int x) {
    const int t = x / n, j = x % n;
    const float d = erases && j < t ? keyed_pair_sum(e + t * KP, w + j * KP, gam + t * KP, gin + j * KP, G + t * KP,
                                                     G + j * KP, strong, K)
                                    : 0.0f;
    dot[t * C + j] = d;
    ws[rec.dot() + t * C + j] = d;
    ws[rec.sigma() + t * C + j] =
        j <= t ? keyed_pair_sum(sq + t * KP, w + j * KP, gam + t * KP, gin + j * KP, G + t * KP, G + j * KP, strong, K)
               : 0.0f;
  });
  for_each<operands_threads>(n * K, [&](int x) {
    const int t = x / K, i = x % K, at = t * KP + i;
    ws[rec.carry() + x] = mul_rn(decay_ratio(strong, gam[L * KP + i], gin[at], G[L * KP + i], G[at]), w[at]);
    ws[rec.gsq() + x] = mul_rn(gam[at], sq[at]);
    ws[rec.G() + x] = G[at];
    ws[rec.gam() + x] = gam[at];
    ws[rec.gin() + x] = gin[at];
    if (t == L) ws[rec.gamma_last() + i] = gam[at];
  });
  __syncthreads();
  for_each<operands_threads>(n, [&](int j) {  // 𝒯, one thread a column, rows in order
    for (int t = 0; t < n; ++t) {
      float acc = 0.0f;
      for (int m = j; m < t; ++m) acc = fma_rn(mul_rn(r[t], dot[t * C + m]), Tm[m * C + j], acc);
      Tm[t * C + j] = t < j ? 0.0f : t == j ? 1.0f : -acc;
    }
  });
  // X = r Γ ⊙ e, over e (each element by its own thread; e is not read again).
  for_each<operands_threads>(n * K, [&](int x) {
    const int t = x / K, at = t * KP + x % K;
    e[at] = mul_rn(mul_rn(r[t], gam[at]), e[at]);
    ws[rec.X() + x] = e[at];
  });
  __syncthreads();
  for_each<operands_threads>(n * n, [&](int x) { ws[rec.Tm() + (x / n) * C + x % n] = Tm[(x / n) * C + x % n]; });
  interleaved_sums<4, operands_threads>(
      n * K, 1, [](int) { return 0.0f; },
      [&](int x, int) { return fma_run{Tm + (x / K) * C, 1, e + x % K, KP, x / K + 1, false}; },
      [&](int x, float acc) { ws[rec.W() + x] = acc; });
  __syncthreads();  // X read: Y = r v goes over it
  float* Y = shared;
  for_each<operands_threads>(n * V, [&](int x) { Y[x] = mul_rn(r[x / V], in.v(c0 + x / V, x % V)); });
  __syncthreads();
  interleaved_sums<4, operands_threads>(
      n * V, 1, [](int) { return 0.0f; },
      [&](int x, int) { return fma_run{Tm + (x / V) * C, 1, Y + x % V, V, x / V + 1, false}; },
      [&](int x, float acc) { ws[rec.U() + x] = acc; });
}

// ---- 2. states ------------------------------------------------------------------------------------
template <class In>
__global__ void __launch_bounds__(threads) states_kernel(const launch_args a) {
  extern __shared__ float shared[];
  const delta_rule_problem& p = a.bp.forward;
  const int K = a.rec.K, V = a.rec.V, j0 = blockIdx.x * columns;
  const long long h = blockIdx.y, b = blockIdx.z;
  const device_reader<In> in{p, b, h};
  const bool erases = p.rule != delta_rule_kind::gla;
  const backward_record& rec = a.rec;
  float *S = shared, *W = S + K * columns, *carry = W + C * K, *Ut = carry + C * K, *last = Ut + C * columns;
  for_each(K * columns, [&](int x) { S[x] = in.initial(x / columns, j0 + x % columns); });
  for (int c = 0; c < a.chunks; ++c) {
    float* ws = a.record(b, h, c);
    const int n = a.tokens_of(c);
    __syncthreads();  // S final for this chunk; the previous chunk's operands read
    for_each(K * columns, [&](int x) { ws[rec.S() + (x / columns) * V + j0 + x % columns] = S[x]; });
    for_each(n * K, [&](int x) {
      W[x] = ws[rec.W() + x];
      carry[x] = ws[rec.carry() + x];
    });
    for_each(K, [&](int i) { last[i] = ws[rec.gamma_last() + i]; });
    __syncthreads();
    // Ũ = U − W S (GLA: U). (One element a thread at a time: measured faster here than interleaved sums.)
    for_each(n * columns, [&](int x) {
      const int t = x / columns, j = x % columns;
      const float u = ws[rec.U() + t * V + j0 + j];
      Ut[x] = erases ? add_rn(u, -fma_sum(0.0f, W + t * K, 1, S + j, columns, K)) : u;
      ws[rec.Ut() + t * V + j0 + j] = Ut[x];
    });
    __syncthreads();
    // S' = Γ_L ⊙ S + Σ_m carry_m Ũ_mᵀ.
    for_each(K * columns, [&](int x) {
      const int i = x / columns, j = x % columns;
      S[x] = fma_rn(last[i], S[x], fma_sum(0.0f, carry + i, K, Ut + j, columns, n));
    });
  }
}

// ---- 3. cotangents --------------------------------------------------------------------------------
__global__ void __launch_bounds__(threads) cotangents_kernel(const launch_args a) {
  extern __shared__ float shared[];
  const delta_rule_backward_problem& bp = a.bp;
  const delta_rule_problem& p = bp.forward;
  const int K = a.rec.K, V = a.rec.V, j0 = blockIdx.x * columns;
  const long long h = blockIdx.y, b = blockIdx.z;
  const bool erases = p.rule != delta_rule_kind::gla;
  const backward_record& rec = a.rec;
  float *D = shared, *carry = D + K * columns, *gsq = carry + C * K, *W = gsq + C * K, *sigma = W + C * K,
        *d_o = sigma + C * C, *dUt = d_o + C * columns, *last = dUt + C * columns;
  for_each(K * columns, [&](int x) {
    D[x] = bp.d_final_state ? bp.d_final_state[((b * p.heads + h) * K + x / columns) * V + j0 + x % columns] : 0.0f;
  });
  for (int c = a.chunks - 1; c >= 0; --c) {
    float* ws = a.record(b, h, c);
    const int n = a.tokens_of(c), c0 = c * C;
    __syncthreads();
    for_each(K * columns, [&](int x) { ws[rec.D() + (x / columns) * V + j0 + x % columns] = D[x]; });
    for_each(n * K, [&](int x) {
      carry[x] = ws[rec.carry() + x];
      gsq[x] = ws[rec.gsq() + x];
      W[x] = ws[rec.W() + x];
    });
    for_each(n * C, [&](int x) { sigma[x] = ws[rec.sigma() + x]; });
    for_each(n * columns, [&](int x) {
      const int t = x / columns, j = x % columns;
      d_o[x] = bp.d_o ? bp.d_o[((b * p.tokens + c0 + t) * p.heads + h) * V + j0 + j] : 0.0f;
    });
    for_each(K, [&](int i) { last[i] = ws[rec.gamma_last() + i]; });
    __syncthreads();
    // dŨ_m = Σ_i carry_mi dS'_i + Σ_{t ≥ m} σ_tm do_t.
    // (One element a thread at a time: measured faster here than interleaved sums.)
    for_each(n * columns, [&](int x) {
      const int m = x / columns, j = x % columns;
      dUt[x] = fma_sum(fma_sum(0.0f, carry + m * K, 1, D + j, columns, K), sigma + m * C + m, C, d_o + m * columns + j,
                       columns, n - m);
      ws[rec.dUt() + m * V + j0 + j] = dUt[x];
    });
    __syncthreads();
    // dS = Γ_L ⊙ dS' + Σ_t (Γ ⊙ sq)_t do_tᵀ − Σ_m W_m dŨ_mᵀ.
    for_each(K * columns, [&](int x) {
      const int i = x / columns, j = x % columns;
      float acc = fma_sum(0.0f, gsq + i, K, d_o + j, columns, n);
      if (erases) acc = fnma_sum(acc, W + i, K, dUt + j, columns, n);
      D[x] = fma_rn(last[i], D[x], acc);
    });
  }
  __syncthreads();
  if (bp.d_initial_state)
    for_each(K * columns,
             [&](int x) { bp.d_initial_state[((b * p.heads + h) * K + x / columns) * V + j0 + x % columns] = D[x]; });
}

// ---- 4. value sums --------------------------------------------------------------------------------
/// Launch 4's shared memory: 𝒯 [C × (C + 1)], dσ, d𝒯, M [C × C], dc, da [K × C], dW [C × K], R [K], the
/// row scales' partial and r [C], and the stage: S, dS' [K × 17], Ũ, dŨ, do, v, Y, dY [C × 17], later
/// X [C × (K + 1)].
__host__ __device__ constexpr int value_sums_stage(int K) {
  return 2 * K * padded(columns) + 6 * C * padded(columns) > C * padded(K)
             ? 2 * K * padded(columns) + 6 * C * padded(columns)
             : C * padded(K);
}

template <class In>
__global__ void __launch_bounds__(value_sums_threads) value_sums_kernel(const launch_args a) {
  extern __shared__ float shared[];
  const delta_rule_backward_problem& bp = a.bp;
  const delta_rule_problem& p = bp.forward;
  const int c = blockIdx.x, K = a.rec.K, V = a.rec.V, n = a.tokens_of(c), c0 = c * C, KP = padded(K), CP = padded(C),
            TP = padded(columns);
  const long long h = blockIdx.y, b = blockIdx.z;
  const device_reader<In> in{p, b, h};
  const bool erases = p.rule != delta_rule_kind::gla;
  const backward_record& rec = a.rec;
  float* ws = a.record(b, h, c);
  float *Tm = shared, *dsigma = Tm + C * CP, *dTm = dsigma + C * C, *M = dTm + C * C, *dc = M + C * C, *da = dc + K * C,
        *dW = da + K * C, *R = dW + C * K, *drY = R + K, *r = drY + C, *stage = r + C;
  float *S = stage, *D = S + K * TP, *Ut = D + K * TP, *dUt = Ut + C * TP, *d_o = dUt + C * TP, *v = d_o + C * TP,
        *Y = v + C * TP, *dY = Y + C * TP;
  for_each<value_sums_threads>(n * n, [&](int x) { Tm[(x / n) * CP + x % n] = ws[rec.Tm() + (x / n) * C + x % n]; });
  for_each<value_sums_threads>(n, [&](int t) {
    r[t] = in.beta(c0 + t);
    drY[t] = 0.0f;
  });
  for_each<value_sums_threads>(K, [&](int i) { R[i] = 0.0f; });
  for_each<value_sums_threads>(K * n, [&](int x) { dc[(x / n) * C + x % n] = da[(x / n) * C + x % n] = 0.0f; });
  for_each<value_sums_threads>(n * n, [&](int x) { dsigma[(x / n) * C + x % n] = dTm[(x / n) * C + x % n] = 0.0f; });
  for_each<value_sums_threads>(n * K, [&](int x) { dW[x] = 0.0f; });
  for (int j0 = 0; j0 < V; j0 += columns) {
    __syncthreads();  // the previous stage read
    for_each<value_sums_threads>(K * columns, [&](int x) {
      const int i = x / columns, j = x % columns;
      S[i * TP + j] = ws[rec.S() + i * V + j0 + j];
      D[i * TP + j] = ws[rec.D() + i * V + j0 + j];
    });
    for_each<value_sums_threads>(n * columns, [&](int x) {
      const int t = x / columns, j = x % columns, at = t * TP + j;
      Ut[at] = ws[rec.Ut() + t * V + j0 + j];
      dUt[at] = ws[rec.dUt() + t * V + j0 + j];
      d_o[at] = bp.d_o ? bp.d_o[((b * p.tokens + c0 + t) * p.heads + h) * V + j0 + j] : 0.0f;
      v[at] = in.v(c0 + t, j0 + j);
      Y[at] = mul_rn(r[t], v[at]);
    });
    __syncthreads();
    for_each<value_sums_threads>(K, [&](int i) { R[i] = fma_sum(R[i], D + i * TP, 1, S + i * TP, 1, columns); });
    // dc_im += Σ_j dS'_ij Ũ_mj, da_it += Σ_j S_ij do_tj (this stage's columns).
    interleaved_sums<4, value_sums_threads>(
        K * n, 1, [&](int x) { return dc[(x / n) * C + x % n]; },
        [&](int x, int) { return fma_run{D + (x / n) * TP, 1, Ut + (x % n) * TP, 1, columns, false}; },
        [&](int x, float acc) { dc[(x / n) * C + x % n] = acc; });
    interleaved_sums<4, value_sums_threads>(
        K * n, 1, [&](int x) { return da[(x / n) * C + x % n]; },
        [&](int x, int) { return fma_run{S + (x / n) * TP, 1, d_o + (x % n) * TP, 1, columns, false}; },
        [&](int x, float acc) { da[(x / n) * C + x % n] = acc; });
    // dσ_tm += Σ_j do_tj Ũ_mj, d𝒯_tm += Σ_j dŨ_tj Y_mj (m ≤ t).
    interleaved_sums<4, value_sums_threads>(
        n * n, 1, [&](int x) { return dsigma[(x / n) * C + x % n]; },
        [&](int x, int) {
          return x % n <= x / n ? fma_run{d_o + (x / n) * TP, 1, Ut + (x % n) * TP, 1, columns, false} : no_terms();
        },
        [&](int x, float acc) { dsigma[(x / n) * C + x % n] = acc; });
    if (erases) {
      interleaved_sums<4, value_sums_threads>(
          n * n, 1, [&](int x) { return dTm[(x / n) * C + x % n]; },
          [&](int x, int) {
            return x % n <= x / n ? fma_run{dUt + (x / n) * TP, 1, Y + (x % n) * TP, 1, columns, false} : no_terms();
          },
          [&](int x, float acc) { dTm[(x / n) * C + x % n] = acc; });
      interleaved_sums<4, value_sums_threads>(
          n * K, 1, [&](int x) { return dW[x]; },
          [&](int x, int) { return fma_run{dUt + (x / K) * TP, 1, S + (x % K) * TP, 1, columns, false}; },
          [&](int x, float acc) { dW[x] = acc; });
    }
    // dY = 𝒯ᵀ dŨ; dv = r dY.
    interleaved_sums<4, value_sums_threads>(
        n * columns, 1, [](int) { return 0.0f; },
        [&](int x, int) {
          const int t = x / columns;
          return fma_run{Tm + t * CP + t, CP, dUt + t * TP + x % columns, TP, n - t, false};
        },
        [&](int x, float acc) {
          const int t = x / columns, j = x % columns;
          dY[t * TP + j] = acc;
          bp.dv[((b * p.tokens + c0 + t) * p.heads + h) * V + j0 + j] = mul_rn(r[t], acc);
        });
    __syncthreads();
    for_each<value_sums_threads>(n, [&](int t) { drY[t] = fma_sum(drY[t], dY + t * TP, 1, v + t * TP, 1, columns); });
  }
  __syncthreads();
  float* X = stage;
  for_each<value_sums_threads>(n * K, [&](int x) {
    dW[x] = -dW[x];
    X[(x / K) * KP + x % K] = ws[rec.X() + x];
  });
  for_each<value_sums_threads>(K, [&](int i) { ws[rec.R() + i] = R[i]; });
  for_each<value_sums_threads>(K * n, [&](int x) {
    const int i = x / n, m = x % n;
    ws[rec.dc() + i * C + m] = dc[i * C + m];
    ws[rec.da() + i * C + m] = da[i * C + m];
  });
  for_each<value_sums_threads>(n * n,
                               [&](int x) { ws[rec.dsigma() + (x / n) * C + x % n] = dsigma[(x / n) * C + x % n]; });
  __syncthreads();
  // d𝒯_tm += Σ_i dW_ti X_mi (m ≤ t); dX = 𝒯ᵀ dW.
  interleaved_sums<4, value_sums_threads>(
      n * n, 1, [&](int x) { return dTm[(x / n) * C + x % n]; },
      [&](int x, int) {
        return erases && x % n <= x / n ? fma_run{dW + (x / n) * K, 1, X + (x % n) * KP, 1, K, false} : no_terms();
      },
      [&](int x, float acc) { dTm[(x / n) * C + x % n] = acc; });
  interleaved_sums<4, value_sums_threads>(
      n * K, 1, [](int) { return 0.0f; },
      [&](int x, int) {
        const int t = x / K;
        return erases ? fma_run{Tm + t * CP + t, CP, dW + t * K + x % K, K, n - t, false} : no_terms();
      },
      [&](int x, float acc) { ws[rec.dX() + x] = acc; });
  __syncthreads();
  // M = 𝒯ᵀ d𝒯 (b < t).
  interleaved_sums<4, value_sums_threads>(
      n * n, 1, [](int) { return 0.0f; },
      [&](int x, int) {
        const int t = x / n;
        return erases && x % n < t ? fma_run{Tm + t * CP + t, CP, dTm + t * C + x % n, C, n - t, false} : no_terms();
      },
      [&](int x, float acc) {
        if (x % n < x / n) M[(x / n) * C + x % n] = acc;
      });
  __syncthreads();
  float* dA = dTm;  // d𝒯 is read by nothing after M
  // dA_tj = −Σ_{b ≤ j} M_tb 𝒯_jb (j < t).
  interleaved_sums<4, value_sums_threads>(
      n * n, 1, [](int) { return 0.0f; },
      [&](int x, int) {
        return erases && x % n < x / n ? fma_run{M + (x / n) * C, 1, Tm + (x % n) * CP, 1, x % n + 1, false}
                                       : no_terms();
      },
      [&](int x, float acc) {
        if (x % n < x / n) dA[(x / n) * C + x % n] = erases ? -acc : 0.0f;
      });
  __syncthreads();
  for_each<value_sums_threads>(n, [&](int t) {
    ws[rec.dr() + t] = fma_sum(drY[t], dA + t * C, 1, ws + rec.dot() + t * C, 1, t);
    for (int j = 0; j < n; ++j) ws[rec.dAr() + t * C + j] = j < t ? mul_rn(dA[t * C + j], r[t]) : 0.0f;
  });
}

// ---- 5. channels ----------------------------------------------------------------------------------
template <class In>
__global__ void __launch_bounds__(channels_threads) channels_kernel(const launch_args a) {
  extern __shared__ float shared[];
  const delta_rule_backward_problem& bp = a.bp;
  const delta_rule_problem& p = bp.forward;
  const int c = blockIdx.x, K = a.rec.K, n = a.tokens_of(c), c0 = c * C, group = p.key_head_group, H = p.heads / group;
  const long long key_head = blockIdx.y, b = blockIdx.z;
  const bool erases = p.rule != delta_rule_kind::gla, decays = p.gate != delta_rule_gate::none;
  const backward_record& rec = a.rec;
  float *dk = shared, *dq = dk + C * K, *dsigma = dq + C * K, *dAr = dsigma + C * C, *r = dAr + C * C,
        *head_sum = r + C, *beta_sum = head_sum + C, *e = beta_sum + C, *w = e + C * columns, *sq = w + C * columns,
        *gam = sq + C * columns, *gin = gam + C * columns, *G = gin + C * columns, *dX = G + C * columns,
        *dG = dX + C * columns, *F = dG + C * columns, *direct = F + C * columns, *da = direct + C * columns,
        *dc = da + columns * padded(C), *R = dc + columns * padded(C), *prefix = R + columns;
  for (int u = 0; u < group; ++u) {
    const long long h = key_head * group + u;
    const device_reader<In> in{p, b, h};
    const float* ws = a.record(b, h, c);
    const bool strong = ws[rec.strong()] != 0.0f;
    __syncthreads();  // the previous head's pairs read
    for_each<channels_threads>(n * n, [&](int x) {
      const int at = (x / n) * C + x % n;
      dsigma[at] = ws[rec.dsigma() + at];
      dAr[at] = ws[rec.dAr() + at];
    });
    for_each<channels_threads>(n, [&](int t) {
      r[t] = in.beta(c0 + t);
      head_sum[t] = 0.0f;
      beta_sum[t] = ws[rec.dr() + t];
    });
    const pair_inputs pairs{dsigma, dAr, r, C};
    for (int i0 = 0; i0 < K; i0 += columns) {
      __syncthreads();  // the previous slice read
      for_each<channels_threads>(n * columns, [&](int x) {
        const int t = x / columns, il = x % columns, i = i0 + il;
        e[x] = in.k(c0 + t, i);
        w[x] = in.w(c0 + t, i);
        sq[x] = mul_rn(p.tau, in.q(c0 + t, i));
        gam[x] = ws[rec.gam() + t * K + i];
        gin[x] = ws[rec.gin() + t * K + i];
        G[x] = ws[rec.G() + t * K + i];
        dX[x] = ws[rec.dX() + t * K + i];
        da[il * padded(C) + t] = ws[rec.da() + i * C + t];
        dc[il * padded(C) + t] = ws[rec.dc() + i * C + t];
      });
      for_each<channels_threads>(columns, [&](int il) { R[il] = ws[rec.R() + i0 + il]; });
      __syncthreads();
      // Channel il of the slice, as channel_token and the gates' sums read it.
      const auto channel_of = [&](int il) {
        return channel_inputs{e + il,
                              w + il,
                              sq + il,
                              gam + il,
                              gin + il,
                              G + il,
                              dX + il,
                              columns,
                              da + il * padded(C),
                              dc + il * padded(C),
                              R[il]};
      };
      for_each<channels_threads>(n * columns, [&](int x) {
        const int t = x / columns, il = x % columns, i = i0 + il;
        const channel_inputs ch = channel_of(il);
        const channel_token_gradient g = channel_token(ch, pairs, t, n, erases, decays, strong);
        const long long at = ((b * p.tokens + c0 + t) * p.heads + h) * K + i;
        const float dk_h = key_gradient(p.rule, g);
        if (p.rule == delta_rule_kind::two_key) bp.dkappa[at] = g.dw;
        const int acc = t * K + i;
        dk[acc] = u == 0 ? dk_h : add_rn(dk[acc], dk_h);
        dq[acc] = u == 0 ? mul_rn(p.tau, g.dsq) : add_rn(dq[acc], mul_rn(p.tau, g.dsq));
        direct[x] = g.direct;
      });
      if (decays)  // the decay ratios' part of the gates, prefix_channels channels at a time
        for (int c0l = 0; c0l < columns; c0l += prefix_channels) {
          __syncthreads();  // the previous channels' prefixes read
          for_each<channels_threads>(prefix_channels * n, [&](int x) {
            const int ch = x / n, t = x % n;
            const channel_inputs in_ch = channel_of(c0l + ch);
            decay_prefix(channel_pairs{in_ch, pairs, n, erases, strong}, t, prefix + (ch * C + t) * padded(C), 1);
          });
          __syncthreads();
          for_each<channels_threads>(prefix_channels * n, [&](int x) {
            const int ch = x / n, s = x % n;
            F[s * columns + c0l + ch] = decay_gate_share(prefix + ch * C * padded(C), padded(C), 1, s, n);
          });
        }
      __syncthreads();
      if (decays)
        for_each<channels_threads>(columns, [&](int il) { gate_cotangents(direct + il, F + il, dG + il, columns, n); });
      __syncthreads();
      for_each<channels_threads>(n, [&](int t) {
        const long long row = (b * p.tokens + c0 + t) * p.heads + h;
        for (int il = 0; il < columns; ++il) {
          if (decays && p.gate == delta_rule_gate::per_channel) bp.dg[row * K + i0 + il] = dG[t * columns + il];
          if (decays) head_sum[t] = add_rn(head_sum[t], dG[t * columns + il]);
          beta_sum[t] = fma_rn(dX[t * columns + il], mul_rn(gam[t * columns + il], e[t * columns + il]), beta_sum[t]);
        }
      });
    }
    for_each<channels_threads>(n, [&](int t) {
      const long long row = (b * p.tokens + c0 + t) * p.heads + h;
      if (p.gate == delta_rule_gate::per_head) bp.dg[row] = head_sum[t];
      if (p.rule == delta_rule_kind::beta_form) bp.dbeta[row] = beta_sum[t];
    });
  }
  __syncthreads();
  for_each<channels_threads>(n * K, [&](int x) {
    const int t = x / K, i = x % K;
    const long long at = ((b * p.tokens + c0 + t) * H + key_head) * K + i;
    bp.dk[at] = dk[x];
    bp.dq[at] = dq[x];
  });
}

// ---- launches -------------------------------------------------------------------------------------
template <class Kernel>
void allow_shared(Kernel kernel, std::size_t bytes, const char* name) {
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)), name);
}

template <class In>
void launch(const delta_rule_backward_problem& bp, float* workspace, const bool (&which)[5]) {
  const delta_rule_problem& p = bp.forward;
  const auto stream = static_cast<cudaStream_t>(p.stream);
  const int K = p.key_dim, V = p.value_dim, chunks = (p.tokens + C - 1) / C;
  const launch_args a{bp, delta_rule_backward_record(p), chunks, workspace};
  const unsigned B = static_cast<unsigned>(p.batch), HV = static_cast<unsigned>(p.heads),
                 H = HV / static_cast<unsigned>(p.key_head_group);
  constexpr std::size_t f = sizeof(float);
  const std::size_t operands = f * (operands_region(K, V) + 2 * C * C + C),
                    states = f * (K * columns + 2 * C * K + C * columns + K),
                    cotangents = f * (K * columns + 3 * C * K + C * C + 2 * C * columns + K),
                    value_sums = f * (C * padded(C) + 3 * C * C + 3 * K * C + K + 2 * C + value_sums_stage(K)),
                    channels = f * (2 * C * K + 2 * C * C + 3 * C + 10 * C * columns + 2 * columns * padded(C) +
                                    columns + prefix_channels * C * padded(C));
  allow_shared(operands_kernel<In>, operands, "cudaFuncSetAttribute(operands_kernel)");
  allow_shared(states_kernel<In>, states, "cudaFuncSetAttribute(states_kernel)");
  allow_shared(cotangents_kernel, cotangents, "cudaFuncSetAttribute(cotangents_kernel)");
  allow_shared(value_sums_kernel<In>, value_sums, "cudaFuncSetAttribute(value_sums_kernel)");
  allow_shared(channels_kernel<In>, channels, "cudaFuncSetAttribute(channels_kernel)");
  const dim3 per_chunk(static_cast<unsigned>(chunks), HV, B), per_columns(static_cast<unsigned>(V / columns), HV, B);
  if (which[0] && chunks > 0) operands_kernel<In><<<per_chunk, operands_threads, operands, stream>>>(a);
  check_cuda(cudaGetLastError(), "operands_kernel");
  if (which[1]) states_kernel<In><<<per_columns, threads, states, stream>>>(a);
  check_cuda(cudaGetLastError(), "states_kernel");
  if (which[2]) cotangents_kernel<<<per_columns, threads, cotangents, stream>>>(a);
  check_cuda(cudaGetLastError(), "cotangents_kernel");
  if (which[3] && chunks > 0) value_sums_kernel<In><<<per_chunk, value_sums_threads, value_sums, stream>>>(a);
  check_cuda(cudaGetLastError(), "value_sums_kernel");
  if (which[4] && chunks > 0)
    channels_kernel<In><<<dim3(static_cast<unsigned>(chunks), H, B), channels_threads, channels, stream>>>(a);
  check_cuda(cudaGetLastError(), "channels_kernel");
}

void launch_dtype(const delta_rule_backward_problem& bp, float* ws, const bool (&which)[5]) {
  switch (bp.forward.dtype) {
    case input_dtype::f32: launch<float>(bp, ws, which); break;
    case input_dtype::bf16: launch<bf16_bits>(bp, ws, which); break;
    case input_dtype::f16: launch<f16_bits>(bp, ws, which); break;
  }
}

}  // namespace

void delta_rule_backward_device(const delta_rule_backward_problem& bp) {
  delta_rule_backward_check(bp);
  const auto stream = static_cast<cudaStream_t>(bp.forward.stream);
  void* workspace = bp.workspace;
  if (workspace == nullptr)
    check_cuda(cudaMallocAsync(&workspace, delta_rule_backward_workspace_bytes(bp) + 4, stream),
               "cudaMallocAsync(workspace)");
  const bool all[5] = {true, true, true, true, true};
  launch_dtype(bp, static_cast<float*>(workspace), all);
  if (bp.workspace == nullptr) check_cuda(cudaFreeAsync(workspace, stream), "cudaFreeAsync(workspace)");
}

void delta_rule_backward_device_launch(const delta_rule_backward_problem& bp, delta_rule_backward_launch which) {
  delta_rule_backward_check(bp);
  if (bp.workspace == nullptr)
    throw std::runtime_error(
        "delta_rule_backward_device_launch: the workspace is missing (it must hold the earlier launches' results)");
  bool one[5] = {false, false, false, false, false};
  one[static_cast<int>(which)] = true;
  launch_dtype(bp, static_cast<float*>(bp.workspace), one);
}

void delta_rule_backward_host(const delta_rule_backward_problem& host) {
  delta_rule_backward_check(host);
  const delta_rule_problem& hp = host.forward;
  const long long B = hp.batch, T = hp.tokens, HV = hp.heads, K = hp.key_dim, V = hp.value_dim,
                  H = HV / hp.key_head_group;
  device_arena arena;
  delta_rule_backward_problem device = host;
  delta_rule_problem& p = device.forward;
  p.k = arena.upload(hp.k, {B, T, H, K}, hp.dtype);
  p.q = arena.upload(hp.q, {B, T, H, K}, hp.dtype);
  p.v = arena.upload(hp.v, {B, T, HV, V}, hp.dtype);
  p.beta = arena.upload(hp.beta, {B, T, HV}, hp.dtype);
  p.kappa = arena.upload(hp.kappa, {B, T, HV, K}, hp.dtype);
  p.g = hp.gate == delta_rule_gate::per_channel ? arena.upload(hp.g, {B, T, HV, K}, hp.dtype)
                                                : arena.upload(hp.g, {B, T, HV}, hp.dtype);
  p.initial_state = arena.upload(hp.initial_state, {B, HV, K, V}, hp.dtype);
  p.o = p.final_state = nullptr;
  device.d_o = arena.upload(host.d_o, B * T * HV * V);
  device.d_final_state = arena.upload(host.d_final_state, B * HV * K * V);
  const auto out = [&](float* x, long long count) { return x ? arena.poisoned(count) : nullptr; };
  const long long G = hp.gate == delta_rule_gate::per_channel ? K : 1;
  device.dq = out(host.dq, B * T * H * K);
  device.dk = out(host.dk, B * T * H * K);
  device.dv = out(host.dv, B * T * HV * V);
  device.dbeta = out(host.dbeta, B * T * HV);
  device.dkappa = out(host.dkappa, B * T * HV * K);
  device.dg = out(host.dg, B * T * HV * G);
  device.d_initial_state = out(host.d_initial_state, B * HV * K * V);
  // The workspace poisoned too: a launch that reads what an earlier one failed to write reads NaN.
  device.workspace = arena.poisoned(static_cast<long long>((delta_rule_backward_workspace_bytes(host) + 3) / 4));
  delta_rule_backward_device(device);
  check_cuda(cudaDeviceSynchronize(), "delta_rule_backward kernels");
  const auto back = [](float* to, const float* from, long long count) {
    if (to) device_arena::download(to, from, count);
  };
  back(host.dq, device.dq, B * T * H * K);
  back(host.dk, device.dk, B * T * H * K);
  back(host.dv, device.dv, B * T * HV * V);
  back(host.dbeta, device.dbeta, B * T * HV);
  back(host.dkappa, device.dkappa, B * T * HV * K);
  back(host.dg, device.dg, B * T * HV * G);
  back(host.d_initial_state, device.d_initial_state, B * HV * K * V);
}

}  // namespace kalman_oracle::gpu
