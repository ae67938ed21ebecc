// The chunked delta-rule backward (delta_rule_backward.hpp; docs/kernels.md, "The chunked delta-rule
// memory (backward, binary32 or tf32)"), in five launches, the twin's (twin/delta_rule_backward_twin.hpp) in the same order:
//   1. operands   (a block of 1024 threads a (batch row, value head, chunk)): the gates, A / r and σ,
//                 𝒯, X, W, U, the carry keys and Γ ⊙ sq, into the chunk's record of the workspace;
//   2. states     (a block of 512 a (sequence, value head, 16 value columns), the chunks in order):
//                 S and Ũ;
//   3. cotangents (the same blocks, the chunks in reverse): dS' and dŨ; d_initial_state;
//   4. value sums (a block of 1024 a (batch row, value head, chunk), 16 value columns at a time
//                 through shared memory): R, dc, da, dσ, dW, dY (dv), d𝒯, dX, dA; with the tensor
//                 cores a block of 512, dc, da, dσ, d𝒯, dW in the warps' registers through the stages
//                 and the next stage's operands copied in while one is summed;
//   5. channels   (a block of 1024 a (batch row, key head, chunk), 32 channels at a time, the group's
//                 value heads in order): dq and dk (a factored chunk: three products, factored_channel;
//                 a strongly decaying one: channel_token per (token, channel)), dκ, dβ, and one gate a
//                 head's dg (its decay ratios' prefixes once, from σ and A / r: head_pairs); then, for a
//                 gate a channel, channel_gates (a block of 1024 a (value head, chunk), 16 channels at a
//                 time): every channel's decay ratios' prefixes, four channels at a time, and dg.
// Every element is computed by one thread with the arithmetic of models/delta_rule_backward.cuh that the
// twin runs, from the same binary32 operands (staged in shared memory here, read from its vectors
// there): the matrix-like sums by register tiles (tiled_sums.cuh: a thread sums a small tile of
// elements, each in its own order), the pair sums and prefixes by the model's functions. Kernel and
// twin agree bit for bit, and no atomics: run to run bit-identical. Binary32 on the CUDA cores: see
// delta_rule_backward.hpp for why, docs/kernels.md for what it costs. With
// delta_rule_backward_operands::tf32 the products of launches 1 to 5 go to the tensor cores instead
// (product_sums: mma_sums.cuh, TF32 operands), kernel and twin then within the tf32-tc budget of each
// other (docs/kernels.md, "Tensor-core products (tf32)"); still no atomics, the same bits run to run.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>

#include "async_copy.cuh"
#include "cuda_check.hpp"
#include "delta_rule_backward_shifted.hpp"
#include "device_arena.hpp"
#include "kalman_oracle/gpu/delta_rule_backward.hpp"
#include "kalman_oracle/gpu/models/delta_rule_backward.cuh"
#include "mma_sums.cuh"
#include "tiled_sums.cuh"

namespace kalman_oracle::gpu {

namespace {

constexpr int C = delta_rule_backward_chunk_tokens;
/// Launches 1, 4 and 5 hold one block an SM for their shared memory, so a block's threads are all the
/// warps the SM has: 1024 of them hide shared-memory latency (H200, DeltaNet B = 2, T = 16384, H = 16,
/// 256 → 1024 threads: operands 22.1 → 12.6 ms, value sums 60.7 → 40.0 (43.9 with 512), channels
/// 10.2 → 6.3; docs/kernels.md; launch 4 with the tensor cores takes 512: value_sums_threads_of). Which
/// thread sums an element does not change its sum's order: kernel = twin bit for bit at every block size.
constexpr int operands_threads = 1024, channels_threads = 1024;
/// Launches 2 and 3 run the chunks in order, a block a (batch row, value head, 16 value columns): 256
/// blocks at B = 2, H = 16, V = 128, two an SM (their shared memory), so 512 threads a block give an SM
/// 32 warps to hide its latencies with (H200, DeltaNet B = 2, T = 16384, H = 16: docs/kernels.md). Two
/// an SM also need at most 64 registers a thread: launch 3 took 93 and so held one block an SM, its 256
/// blocks in two waves (Nsight Compute, H100, 2026-12-06), hence its __launch_bounds__(state_threads, 2).
constexpr int state_threads = 512;
/// Value columns of a block of launches 2 and 3, and of a stage of launch 4; channels of a stage of
/// launch 5 (K and V are multiples of 16: delta_rule_check).
constexpr int columns = 16;
/// Channels whose decay-ratio prefixes (C × C each) launch 5 holds at once.
constexpr int prefix_channels = 4;

/// f(e) for e = threadIdx.x, threadIdx.x + Threads, … below count (Threads: the block's).
template <int Threads, class F>
__device__ __forceinline__ void for_each(int count, F&& f) {
  for (int e = static_cast<int>(threadIdx.x); e < count; e += Threads) f(e);
}

/// for_each with its loads issued first: for e = threadIdx.x + u · Threads, U of them at a time, every
/// value[u] = load(e), then every store(e, value[u]). A for_each whose body loads and stores waits out each
/// load's latency before the next (the readers' branches keep the compiler from moving a load above the
/// store before it), which in a launch of one block an SM nothing hides; here U loads a thread are in
/// flight at once. The same loads and stores, so the same bits. Launch 5's slices and pair cotangents
/// take it (0.4 to 1.6% faster with tf32, H100, 2026-12-07); launch 1's keys and values did not keep it:
/// with 8 and 4 loads in flight launch 1 took 0.45 to 0.9 ms longer (docs/kernels.md, "Staged loads").
template <int Threads, int U, class Load, class Store>
__device__ __forceinline__ void for_each_loaded(int count, Load&& load, Store&& store) {
  using value_type = decltype(load(0));
  for (int first = static_cast<int>(threadIdx.x); first < count; first += U * Threads) {
    value_type value[U];
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (first + u * Threads < count) value[u] = load(first + u * Threads);
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (first + u * Threads < count) store(first + u * Threads, value[u]);
  }
}

/// The inputs of one (sequence, value head), widened (the twin's delta_rule_reader): token t of the
/// sequence, in batch row b from token t0; its initial state s.
template <class In>
struct device_reader {
  const delta_rule_problem& p;
  int b, t0, s, h;  // each below 2^31 (B, T, N, HV are ints): 32-bit, to spare registers in launches 1, 4, 5
  __device__ device_reader(const delta_rule_problem& problem, const delta_rule_sequence& sequence, long long head)
      : p(problem),
        b(static_cast<int>(sequence.batch_row)),
        t0(static_cast<int>(sequence.first_token)),
        s(static_cast<int>(sequence.state)),
        h(static_cast<int>(head)) {}
  /// Token t read as token first_token + t of batch row batch_row (a chunk's reader: t within the chunk).
  __device__ device_reader(const delta_rule_problem& problem, int batch_row, int first_token, int state, long long head)
      : p(problem), b(batch_row), t0(first_token), s(state), h(static_cast<int>(head)) {}
  __device__ float k(long long t, long long i) const {
    return load_widened<In>(p.k, offset_of(p.k, b, t0 + t, h / p.key_head_group, i));
  }
  __device__ float q(long long t, long long i) const {
    return load_widened<In>(p.q, offset_of(p.q, b, t0 + t, h / p.key_head_group, i));
  }
  __device__ float v(long long t, long long j) const { return load_widened<In>(p.v, offset_of(p.v, b, t0 + t, h, j)); }
  __device__ float w(long long t, long long i) const {
    return p.rule == delta_rule_kind::two_key ? load_widened<In>(p.kappa, offset_of(p.kappa, b, t0 + t, h, i))
                                              : k(t, i);
  }
  __device__ float beta(long long t) const {
    return p.rule == delta_rule_kind::beta_form ? load_widened<In>(p.beta, offset_of(p.beta, b, t0 + t, h)) : 1.0f;
  }
  __device__ float g(long long t, long long i) const {
    switch (p.gate) {
      case delta_rule_gate::none: return 0.0f;
      case delta_rule_gate::per_head: return load_widened<In>(p.g, offset_of(p.g, b, t0 + t, h));
      case delta_rule_gate::per_channel: return load_widened<In>(p.g, offset_of(p.g, b, t0 + t, h, i));
    }
    return 0.0f;
  }
  __device__ float initial(long long i, long long j) const {
    return p.initial_state.data ? load_widened<In>(p.initial_state, offset_of(p.initial_state, s, h, i, j)) : 0.0f;
  }
};

/// The records: one per (value head h, chunk g of the problem's NC, sequence by sequence: the chunk map
/// of delta_rule_sequences.hpp), at h·NC + g.
struct launch_args {
  delta_rule_backward_problem bp;
  backward_record rec;
  delta_rule_chunk_map map;
  float* ws;
  /// Whether the products of launches 1 to 5 run on the tensor cores (delta_rule_backward_operands::tf32).
  __device__ bool tensor_cores() const { return bp.operands == delta_rule_backward_operands::tf32; }
  __device__ float* record(long long h, long long g) const {
    return ws + (h * map.total_chunks + g) * static_cast<long long>(rec.size());
  }
  /// The tokens of sequence s's chunk c.
  __device__ int tokens_of(const delta_rule_sequence& s, int c) const { return min(C, s.tokens - c * C); }
  /// The flattened token row of sequence s's token 0 in the [B, T, …] tensors (the twin's first_row).
  __device__ long long first_row(const delta_rule_sequence& s) const {
    return s.batch_row * bp.forward.tokens + s.first_token;
  }
};

/// Where chunk g's tokens are, for launches 1, 4 and 5 (a block a chunk): its batch row, the row's token
/// that is the chunk's token 0, and its number of tokens (each below 2^31: B and T are ints). Out of line,
/// so that the chunk map's search holds no registers in those launches, which run at the 64-register cap
/// of 1024 threads: the first varlen build, with the search inlined and each load at the sequence's token
/// c·C + t, spilled 156 bytes in launch 5 (8 before) and took 11% longer there (docs/kernels.md,
/// "Variable-length batches").
struct chunk_origin {
  int batch_row, first_token, tokens;
};
__device__ __noinline__ chunk_origin origin_of_chunk(const delta_rule_chunk_map map, int g) {
  const delta_rule_sequence s = map.sequence(map.sequence_of_chunk(g));
  const int c = static_cast<int>(g - s.first_chunk);
  return {static_cast<int>(s.batch_row), static_cast<int>(s.first_token) + c * C, min(C, s.tokens - c * C)};
}

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
template <int U, int Threads, class Begin, class Run, class End>
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

/// The row t of entry x of a lower triangle stored row by row (x = t(t + 1)/2 + j, j <= t).
__device__ __forceinline__ int triangle_row(int x) {
  int t = static_cast<int>((sqrtf(8.0f * static_cast<float>(x) + 1.0f) - 1.0f) * 0.5f);
  while ((t + 1) * (t + 2) / 2 <= x) ++t;  // the square root's rounding, either way
  while (t * (t + 1) / 2 > x) --t;
  return t;
}

/// A run of no terms.
__device__ __forceinline__ fma_run no_terms() { return {nullptr, 0, nullptr, 0, 0, false}; }

/// Shared-memory rows padded by one float where threads walk a column (different rows, one index
/// apart across the warp): the rows then start in different banks.
__host__ __device__ constexpr int padded(int width) { return width + 1; }

/// Row strides of launch 1's tensor-core operands: 𝒯 [C × (C + 4)], r v [C × (V + 4)] and, in a factored
/// chunk with the tensor cores, Γ e, Γ sq, Γ⁻ w and X [C × (K + 4)]. A TF32 fragment reads 8 rows g and 4
/// columns q at once (A's, or B's where B is read along its rows), or 4 rows q and 8 columns g (B read
/// down its columns): a stride of 4 mod 32 puts them in 4g + q or g + 4q, 32 different banks, where
/// K + 1 (g + q), C and V (q, or g) put 4 to 8 lanes in a bank (56% of the launch's shared wavefronts
/// were such conflicts: Nsight Compute, H100, 2026-12-06). The binary32 tiles read A's rows broadcast and
/// B along consecutive columns, so 𝒯 and r v are as conflict-free there, and its factored keys keep K + 1
/// (consecutive threads take consecutive rows of Γ⁻ w: with K + 4 they would share banks).
constexpr int inverse_stride = C + 4;
__host__ __device__ constexpr int value_row_stride(int V) { return V + 4; }
__host__ __device__ constexpr int factored_key_stride(int K, bool tensor_cores) { return tensor_cores ? K + 4 : K + 1; }
/// Launch 1's shared memory: e, w, sq, G, Γ, Γ⁻ [C × (K + 1)] (in a factored chunk later Γ e, Γ sq, Γ⁻ w,
/// X [C × factored_key_stride] over them; later r v [C × (V + 4)]), 𝒯 [C × inverse_stride], A [C × C],
/// r [C].
__host__ __device__ constexpr int operands_region(int K, int V) {
  return 6 * C * padded(K) > C * value_row_stride(V) ? 6 * C * padded(K) : C * value_row_stride(V);
}
__host__ __device__ constexpr int operands_floats(int K, int V) {
  return operands_region(K, V) + C * inverse_stride + C * C + C;
}

/// Rows of 𝒯 a block of launch 1's solve takes at once, their sums in registers (ptxas, launch 1 at its 64
/// registers a thread: 4 rows spill 4 bytes, 8 rows 12, 16 rows, as the forward's solve takes, 44 to 48).
constexpr int solve_rows = 8;

// ---- 1. operands ---------------------------------------------------------------------------------
template <class In>
__global__ void __launch_bounds__(operands_threads) operands_kernel(const launch_args a) {
  extern __shared__ float shared[];
  const delta_rule_problem& p = a.bp.forward;
  const int chunk_g = blockIdx.x;  // below 2^31: gridDim.x
  const long long h = blockIdx.y;
  // The chunk's reader: its token t is token t0 + t of batch row b (fewer values live than a sequence's
  // reader asked for the chunk's offset plus t).
  const chunk_origin origin = origin_of_chunk(a.map, chunk_g);
  const int K = a.rec.K, V = a.rec.V, n = origin.tokens, L = n - 1, KP = padded(K),
            KQ = factored_key_stride(K, a.tensor_cores()), b = origin.batch_row, t0 = origin.first_token;
  const device_reader<In> in(p, b, t0, 0, h);  // (no state read here)
  const bool erases = p.rule != delta_rule_kind::gla, decays = p.gate != delta_rule_gate::none;
  // A = r ⊙ (A / r) (strictly lower; what the solve for 𝒯 reads, each product r_t (A / r)_tm formed once).
  float *e = shared, *w = e + C * KP, *sq = w + C * KP, *G = sq + C * KP, *gam = G + C * KP, *gin = gam + C * KP,
        *Tm = shared + operands_region(K, V), *A = Tm + C * inverse_stride, *r = A + C * C;
  float *ws = a.record(h, chunk_g), *keyed_rows = shared;  // a factored chunk's Γ e, Γ sq, Γ⁻ w, X
  const backward_record& rec = a.rec;
  for_each<operands_threads>(n, [&](int t) { r[t] = in.beta(t); });
  for_each<operands_threads>(n * K, [&](int x) {
    const int t = x / K, i = x % K;
    e[t * KP + i] = in.k(t, i);
    w[t * KP + i] = in.w(t, i);
    sq[t * KP + i] = mul_rn(p.tau, in.q(t, i));
  });
  // The gates: loaded by the whole block into G's place (coalesced), then summed one thread a channel in
  // token order, each G_t overwriting the gate it has just read.
  if (decays) {
    for_each<operands_threads>(n * K, [&](int x) { G[(x / K) * KP + x % K] = in.g(x / K, x % K); });
    __syncthreads();
  }
  bool strong_here = false;
  for_each<operands_threads>(K, [&](int i) {
    strong_here =
        channel_gates([&](int t) { return G[t * KP + i]; }, n, decays, G + i, gam + i, gin + i, KP) || strong_here;
  });
  const bool strong = __syncthreads_or(strong_here) != 0;
  if (threadIdx.x == 0) ws[rec.strong()] = strong ? 1.0f : 0.0f;
  // The chunk's keyed operands into the record: the carry keys ρ_L ⊙ w, Γ ⊙ sq, G, Γ, Γ⁻, Γ_L.
  const auto write_keyed_operands = [&] {
    for_each<operands_threads>(n * K, [&](int x) {
      const int t = x / K, i = x % K, at = t * KP + i;
      ws[rec.carry() + x] = mul_rn(decay_ratio(strong, gam[L * KP + i], gin[at], G[L * KP + i], G[at]), w[at]);
      ws[rec.gsq() + x] = mul_rn(gam[at], sq[at]);
      ws[rec.G() + x] = G[at];
      ws[rec.gam() + x] = gam[at];
      ws[rec.gin() + x] = gin[at];
      if (t == L) ws[rec.gamma_last() + i] = gam[at];
    });
  };
  if (strong) {
    // A / r and σ over the pairs j <= t, one pair a thread, both sums from one decay ratio ρ_tj,i a term:
    // keyed_pair_sum's terms in its order, so the same bits, with ρ and the loads of w_j shared (the
    // rows padded: threads of a warp read different rows j). The pairs j > t are zeros. With one gate a
    // head every channel's G, Γ, Γ⁻ are the head's, so ρ_tj,i is one value for every i: one exponential
    // a pair rather than K, the same terms.
    const bool channel_gated = p.gate == delta_rule_gate::per_channel;
    for_each<operands_threads>(n * (n + 1) / 2, [&](int x) {
      const int t = triangle_row(x), j = x - t * (t + 1) / 2;
      const bool with_a = erases && j < t;
      const float *e_t = e + t * KP, *sq_t = sq + t * KP, *w_j = w + j * KP, *gam_t = gam + t * KP,
                  *gin_j = gin + j * KP, *G_t = G + t * KP, *G_j = G + j * KP;
      float d = 0.0f, s = 0.0f;
      const float head_rho = channel_gated ? 0.0f : decay_ratio(strong, gam_t[0], gin_j[0], G_t[0], G_j[0]);
      for (int i = 0; i < K; ++i) {
        const float rho = channel_gated ? decay_ratio(strong, gam_t[i], gin_j[i], G_t[i], G_j[i]) : head_rho;
        if (with_a) d = fma_rn(mul_rn(e_t[i], rho), w_j[i], d);
        s = fma_rn(mul_rn(sq_t[i], rho), w_j[i], s);
      }
      A[t * C + j] = mul_rn(r[t], d);
      ws[rec.dot() + t * C + j] = d;
      ws[rec.sigma() + t * C + j] = s;
    });
    for_each<operands_threads>(n * n, [&](int x) {
      const int t = x / n, j = x % n;
      if (j > t) A[t * C + j] = ws[rec.dot() + t * C + j] = ws[rec.sigma() + t * C + j] = 0.0f;
    });
  } else {
    // A factored chunk (ρ_tj,i = Γ_t,i Γ⁻_j,i): A / r = (Γ e)(Γ⁻ w)ᵀ and σ = (Γ sq)(Γ⁻ w)ᵀ, two products
    // over the channels from +0, i rising (factored_keys; register tiles, or the tensor cores with tf32).
    // The keyed operands go to the record first; then each thread forms its elements' Γ e, Γ sq, Γ⁻ w in
    // registers and X = r Γ ⊙ e into the record, and after a barrier writes the four (X read back from its
    // own stores) over e, w, sq, G with rows of factored_key_stride floats (K + 4 with the tensor cores:
    // conflict-free fragments). X held in registers too made the launch spill 28 bytes (ptxas).
    write_keyed_operands();
    constexpr int held = C * 128 / operands_threads;  // a thread's elements of n × K (K <= 128)
    float keyed[held][3];
#pragma unroll
    for (int u = 0; u < held; ++u) {
      const int x = static_cast<int>(threadIdx.x) + u * operands_threads, t = x / K, at = t * KP + x % K;
      if (x < n * K) {
        const factored_keys f = factored_keys_of(gam[at], gin[at], e[at], sq[at], w[at]);
        keyed[u][0] = f.gam_e;
        keyed[u][1] = f.gam_sq;
        keyed[u][2] = f.gin_w;
        ws[rec.X() + x] = mul_rn(mul_rn(r[t], gam[at]), e[at]);
      }
    }
    __syncthreads();  // e, w, sq, Γ, Γ⁻ read
#pragma unroll
    for (int u = 0; u < held; ++u) {
      const int x = static_cast<int>(threadIdx.x) + u * operands_threads, at = (x / K) * KQ + x % K;
      if (x < n * K) {
#pragma unroll
        for (int which = 0; which < 3; ++which) keyed_rows[which * C * KQ + at] = keyed[u][which];
        keyed_rows[3 * C * KQ + at] = ws[rec.X() + x];  // this thread's own store above
      }
    }
    __syncthreads();
    const float *gam_e = keyed_rows, *gam_sq = gam_e + C * KQ, *gin_w = gam_sq + C * KQ;
    if (erases)
      product_sums<2, 4, operands_threads>(
          a.tensor_cores(), n, n, [](int, int) { return 0.0f; },
          [&](int t, int j, float acc) {
            A[t * C + j] = j < t ? mul_rn(r[t], acc) : 0.0f;
            ws[rec.dot() + t * C + j] = j < t ? acc : 0.0f;
          },
          run_of<terms::all>({gam_e, KQ, 1}, {gin_w, KQ, 1}, K));
    else
      for_each<operands_threads>(n * n,
                                 [&](int x) { A[(x / n) * C + x % n] = ws[rec.dot() + (x / n) * C + x % n] = 0.0f; });
    product_sums<2, 4, operands_threads>(
        a.tensor_cores(), n, n, [](int, int) { return 0.0f; },
        [&](int t, int j, float acc) { ws[rec.sigma() + t * C + j] = j <= t ? acc : 0.0f; },
        run_of<terms::all>({gam_sq, KQ, 1}, {gin_w, KQ, 1}, K));
  }
  __syncthreads();
  if (threadIdx.x < n)  // 𝒯, one thread a column (models/delta_rule_backward.cuh)
    unit_lower_inverse_column_blocked<solve_rows>(A, C, static_cast<int>(threadIdx.x), n, Tm, inverse_stride);
  // While 64 threads solve for 𝒯, the others write a strongly decaying chunk's keyed operands (a
  // factored one's are written) and form its X = r Γ ⊙ e over e (each element by its own thread; e is
  // not read again; a factored chunk's X is formed).
  if (strong) {
    write_keyed_operands();
    for_each<operands_threads>(n * K, [&](int x) {
      const int t = x / K, at = t * KP + x % K;
      e[at] = mul_rn(mul_rn(r[t], gam[at]), e[at]);
      ws[rec.X() + x] = e[at];
    });
  }
  __syncthreads();
  for_each<operands_threads>(n * n,
                             [&](int x) { ws[rec.Tm() + (x / n) * C + x % n] = Tm[(x / n) * inverse_stride + x % n]; });
  // W = 𝒯X (W_ti = Σ_{m ≤ t} 𝒯_tm X_mi; register tiles: tiled_sums.cuh).
  const float* X = strong ? e : keyed_rows + 3 * C * KQ;
  product_sums<2, 4, operands_threads>(
      a.tensor_cores(), n, K, [](int, int) { return 0.0f; },
      [&](int t, int i, float acc) { ws[rec.W() + t * K + i] = acc; },
      run_of<terms::through_row>({Tm, inverse_stride, 1}, {X, 1, strong ? KP : KQ}, n));
  __syncthreads();  // X read: Y = r v goes over it
  float* Y = shared;
  const int YS = value_row_stride(V);
  for_each<operands_threads>(n * V, [&](int x) { Y[(x / V) * YS + x % V] = mul_rn(r[x / V], in.v(x / V, x % V)); });
  __syncthreads();
  // U = 𝒯Y.
  product_sums<2, 4, operands_threads>(
      a.tensor_cores(), n, V, [](int, int) { return 0.0f; },
      [&](int t, int j, float acc) { ws[rec.U() + t * V + j] = acc; },
      run_of<terms::through_row>({Tm, inverse_stride, 1}, {Y, 1, YS}, n));
}

// ---- 2. states ------------------------------------------------------------------------------------
// Row strides of launches 2 and 3's shared operands. The binary32 tiles read them along rows or broadcast
// (any stride will do: 16 and C as before); the tensor cores' fragments read 8 rows g and 4 columns q
// at once, which strides of K + 1 (g + q), 16 (g + 16 q) and C (g + 64 q) put in 2 to 8 lanes a bank. With
// the tensor cores: K + 4 for the keys (4 g + q along a row, g + 4 q down a column), 24 for the 16-column
// slices (g + 24 q: 32 banks) and C + 8 for σ (g + 8 q). The keys' K + 4 in binary32 too (K + 1 until
// 2026-12-07): every row then starts 16-byte aligned, so the chunk's operands come 16 bytes a copy
// (copy_rows_async).
__host__ __device__ constexpr int key_stride(int K) { return K + 4; }
__host__ __device__ constexpr int slice_stride(bool tensor_cores) { return tensor_cores ? columns + 8 : columns; }
__host__ __device__ constexpr int pair_stride(bool tensor_cores) { return tensor_cores ? C + 8 : C; }

template <class In>
__global__ void __launch_bounds__(state_threads) states_kernel(const launch_args a) {
  extern __shared__ float shared[];
  const delta_rule_problem& p = a.bp.forward;
  const int K = a.rec.K, V = a.rec.V, j0 = blockIdx.x * columns, KP = key_stride(K),
            CS = slice_stride(a.tensor_cores());
  const auto slice = [&](int x) { return (x / columns) * CS + x % columns; };  // x = row · columns + column
  const long long h = blockIdx.y;
  const delta_rule_sequence s = a.map.sequence(blockIdx.z);
  const device_reader<In> in(p, s, h);
  const bool erases = p.rule != delta_rule_kind::gla;
  const backward_record& rec = a.rec;
  float *S = shared, *W = S + K * CS, *carry = W + C * KP, *Ut = carry + C * KP, *last = Ut + C * CS;
  for_each<state_threads>(K * columns, [&](int x) { S[slice(x)] = in.initial(x / columns, j0 + x % columns); });
  for (int c = 0; c < s.chunks; ++c) {
    float* ws = a.record(h, s.first_chunk + c);
    const int n = a.tokens_of(s, c);
    __syncthreads();  // S final for this chunk; the previous chunk's operands read
    for_each<state_threads>(K * columns,
                            [&](int x) { ws[rec.S() + (x / columns) * V + j0 + x % columns] = S[slice(x)]; });
    // The chunk's operands by cp.async, all in flight at once (rows padded: a warp's threads read
    // several rows); U into Ũ's place, which Ũ = U − W S then overwrites element by element.
    copy_rows_async<state_threads>(W, KP, ws + rec.W(), K, n, K);
    copy_rows_async<state_threads>(carry, KP, ws + rec.carry(), K, n, K);
    copy_rows_async<state_threads>(Ut, CS, ws + rec.U() + j0, V, n, columns);
    copy_rows_async<state_threads>(last, K, ws + rec.gamma_last(), K, 1, K);
    stage_commit();
    stage_wait<0>();
    __syncthreads();
    // Ũ = U − W S (GLA: U; register tiles: tiled_sums.cuh).
    product_sums<2, 1, state_threads>(
        a.tensor_cores(), n, columns, [](int, int) { return 0.0f; },
        [&](int t, int j, float acc) {
          float& u = Ut[t * CS + j];
          if (erases) u = add_rn(u, -acc);
          ws[rec.Ut() + t * V + j0 + j] = u;
        },
        run_of<terms::all>({W, KP, 1}, {S, 1, CS}, erases ? K : 0));
    __syncthreads();
    // S' = Γ_L ⊙ S + Σ_m carry_m Ũ_mᵀ.
    product_sums<2, 2, state_threads>(
        a.tensor_cores(), K, columns, [](int, int) { return 0.0f; },
        [&](int i, int j, float acc) { S[i * CS + j] = fma_rn(last[i], S[i * CS + j], acc); },
        run_of<terms::all>({carry, 1, KP}, {Ut, 1, CS}, n));
  }
}

// ---- 3. cotangents --------------------------------------------------------------------------------
__global__ void __launch_bounds__(state_threads, 2) cotangents_kernel(const launch_args a) {
  extern __shared__ float shared[];
  const delta_rule_backward_problem& bp = a.bp;
  const delta_rule_problem& p = bp.forward;
  const int K = a.rec.K, V = a.rec.V, j0 = blockIdx.x * columns, KP = key_stride(K),
            CS = slice_stride(a.tensor_cores()), SP = pair_stride(a.tensor_cores());
  const auto slice = [&](int x) { return (x / columns) * CS + x % columns; };  // x = row · columns + column
  const long long h = blockIdx.y;
  const delta_rule_sequence s = a.map.sequence(blockIdx.z);
  const long long b = s.state, row0 = a.first_row(s);  // b: the sequence's states
  const bool erases = p.rule != delta_rule_kind::gla;
  const backward_record& rec = a.rec;
  // keys: the carry keys for dŨ, then W for dS (two C × K regions, not three: two blocks an SM).
  float *D = shared, *keys = D + K * CS, *gsq = keys + C * KP, *sigma = gsq + C * KP, *d_o = sigma + C * SP,
        *dUt = d_o + C * CS, *last = dUt + C * CS;
  for_each<state_threads>(K * columns, [&](int x) {
    D[slice(x)] =
        bp.d_final_state ? bp.d_final_state[((b * p.heads + h) * K + x / columns) * V + j0 + x % columns] : 0.0f;
  });
  for (int c = s.chunks - 1; c >= 0; --c) {
    float* ws = a.record(h, s.first_chunk + c);
    const int n = a.tokens_of(s, c), c0 = c * C;
    __syncthreads();  // dS' final; the previous chunk's operands read
    for_each<state_threads>(K * columns,
                            [&](int x) { ws[rec.D() + (x / columns) * V + j0 + x % columns] = D[slice(x)]; });
    // The chunk's operands by cp.async (rows padded: a warp's threads read several rows).
    copy_rows_async<state_threads>(keys, KP, ws + rec.carry(), K, n, K);
    copy_rows_async<state_threads>(gsq, KP, ws + rec.gsq(), K, n, K);
    copy_rows_async<state_threads>(sigma, SP, ws + rec.sigma(), C, n, C);
    if (bp.d_o)
      copy_rows_async<state_threads>(d_o, CS, bp.d_o + ((row0 + c0) * p.heads + h) * V + j0, p.heads * V, n, columns);
    else
      for_each<state_threads>(n * columns, [&](int x) { d_o[slice(x)] = 0.0f; });
    copy_rows_async<state_threads>(last, K, ws + rec.gamma_last(), K, 1, K);
    stage_commit();
    stage_wait<0>();
    __syncthreads();
    // dŨ_m = Σ_i carry_mi dS'_i + Σ_{t ≥ m} σ_tm do_t (register tiles: tiled_sums.cuh).
    product_sums<2, 1, state_threads>(
        a.tensor_cores(), n, columns, [](int, int) { return 0.0f; },
        [&](int m, int j, float acc) {
          dUt[m * CS + j] = acc;
          ws[rec.dUt() + m * V + j0 + j] = acc;
        },
        run_of<terms::all>({keys, KP, 1}, {D, 1, CS}, K), run_of<terms::from_row>({sigma, 1, SP}, {d_o, 1, CS}, n));
    __syncthreads();  // the carry keys read: W goes over them
    if (erases) {
      copy_rows_async<state_threads>(keys, KP, ws + rec.W(), K, n, K);
      stage_commit();
      stage_wait<0>();
      __syncthreads();
    }
    // dS = Γ_L ⊙ dS' + Σ_t (Γ ⊙ sq)_t do_tᵀ − Σ_m W_m dŨ_mᵀ.
    product_sums<2, 2, state_threads>(
        a.tensor_cores(), K, columns, [](int, int) { return 0.0f; },
        [&](int i, int j, float acc) { D[i * CS + j] = fma_rn(last[i], D[i * CS + j], acc); },
        run_of<terms::all>({gsq, 1, KP}, {d_o, 1, CS}, n),
        run_of<terms::all>({keys, 1, KP, true}, {dUt, 1, CS}, erases ? n : 0));
  }
  __syncthreads();
  if (bp.d_initial_state)
    for_each<state_threads>(K * columns, [&](int x) {
      bp.d_initial_state[((b * p.heads + h) * K + x / columns) * V + j0 + x % columns] = D[slice(x)];
    });
}

// ---- 4. value sums --------------------------------------------------------------------------------
/// Row strides of launch 4's accumulators (dσ, d𝒯 [C × C], dc, da [K × C], dW [C × K]): the width plus
/// 8, so that the tensor cores' accumulator fragments (rows g = 0 … 7, columns 2q + e: docs/kernels.md,
/// "Tensor-core products (tf32)") fall in two wavefronts where a stride of C or K, a multiple of 32, put
/// their 8 rows in one bank (8-way conflicts: 72% of the tf32 launch's shared wavefronts, Nsight Compute on
/// an H100). The binary32 tiles' rows are as conflict-free as before.
__host__ __device__ constexpr int accumulator_stride(int width) { return width + 8; }
/// Row stride of launch 4's stage (S, dS', Ũ, dŨ, do, v, Y, dY: 16 value columns a row): 17 for the binary32
/// tiles (a warp walks 16 or 32 rows of one column), 20 for the tensor cores' operand fragments (rows
/// g = 0 … 7 and columns q = 0 … 3 in 32 different banks: 20 g + q).
__host__ __device__ constexpr int stage_stride(bool tensor_cores) { return tensor_cores ? 20 : padded(columns); }
/// Launch 4's shared memory: 𝒯 [C × (C + 1)], dσ, d𝒯 [C × accumulator_stride(C)], M [C × C], dc, da
/// [K × accumulator_stride(C)], dW [C × accumulator_stride(K)], R [K], the row scales' partial and r [C],
/// and the stage: S, dS' [K × stage_stride], Ũ, dŨ, do, v, Y, dY [C × stage_stride], later X [C × (K + 1)].
__host__ __device__ constexpr int value_sums_stage(int K) {
  return 2 * K * stage_stride(true) + 6 * C * stage_stride(true) > C * padded(K)
             ? 2 * K * stage_stride(true) + 6 * C * stage_stride(true)
             : C * padded(K);
}
__host__ __device__ constexpr int value_sums_floats(int K, bool tensor_cores) {
  return C * padded(C) + 2 * C * accumulator_stride(C) + C * C + (tensor_cores ? 0 : 2 * K * accumulator_stride(C)) +
         C * accumulator_stride(K) + K + 2 * C + (tensor_cores ? 2 : 1) * value_sums_stage(K);
}

/// Launch 4 with the tensor cores: the five sums that run through every stage of 16 value columns (dc,
/// da, dW, dσ, d𝒯) as 16 × 16 tiles whose accumulators stay in their warp's registers from the first
/// stage to the last (until 2026-12-07 each stage's mma_sums read every accumulator from shared memory
/// and wrote it back). Warp w of W holds tiles w, w + W, … of each sum: of dc_im (A = dS', B = Ũ;
/// K × n), da_it (S, do; K × n), dW_ti (dŨ, S; n × K), and of the lower triangles of dσ_tm (do, Ũ) and
/// d𝒯_tm (dŨ, Y) (n × n, the tiles with column tile <= row tile, dσ's then d𝒯's). At K = 128, C = 64:
/// 32, 32, 32 and 20 tiles (K <= 128: delta_rule_check).
constexpr int value_square_tiles = (128 / 16) * (C / 16), value_triangle_tiles = (C / 16) * (C / 16 + 1);
/// Launch 4's threads: 1024 in binary32 (its register tiles live one product at a time), 512 with the
/// tensor cores, whose warps hold their tiles' accumulators through the stages (2 tiles of each sum a
/// warp: 64 registers of accumulators, within the 128 that 512 threads allow, ptxas then spilling 100 bytes,
/// about 25 spill loads a thread a stage; with 1024, 32 of the 64, ptxas spilled 400 bytes).
__host__ __device__ constexpr int value_sums_threads_of(bool tensor_cores) { return tensor_cores ? 512 : 1024; }
/// A warp's tiles of one sum: ⌈tiles / warps⌉.
__host__ __device__ constexpr int value_tiles_of(int tiles, int threads) {
  return (tiles + threads / 32 - 1) / (threads / 32);
}

/// TensorCores: the products on the tensor cores (delta_rule_backward_operands::tf32), else register tiles in
/// binary32; two instantiations, so that neither carries the other's registers.
template <class In, bool TensorCores>
__global__ void __launch_bounds__(value_sums_threads_of(TensorCores)) value_sums_kernel(const launch_args a) {
  constexpr int Threads = value_sums_threads_of(TensorCores);
  extern __shared__ float shared[];
  const delta_rule_backward_problem& bp = a.bp;
  const delta_rule_problem& p = bp.forward;
  const int chunk_g = blockIdx.x;  // below 2^31: gridDim.x
  const long long h = blockIdx.y;
  const chunk_origin origin = origin_of_chunk(a.map, chunk_g);  // as launch 1
  const int K = a.rec.K, V = a.rec.V, n = origin.tokens, KP = padded(K), CP = padded(C), TP = stage_stride(TensorCores),
            AP = accumulator_stride(C), WP = accumulator_stride(K), b = origin.batch_row, t0 = origin.first_token;
  const device_reader<In> in(p, b, t0, 0, h);
  const bool erases = p.rule != delta_rule_kind::gla;
  const backward_record& rec = a.rec;
  float* ws = a.record(h, chunk_g);
  // dc and da in shared memory in binary32 only (with the tensor cores they stay in registers).
  float *Tm = shared, *dsigma = Tm + C * CP, *dTm = dsigma + C * AP, *M = dTm + C * AP, *dc = M + C * C,
        *da = dc + K * AP, *dW = TensorCores ? dc : da + K * AP, *R = dW + C * WP, *drY = R + K, *r = drY + C,
        *stage = r + C;
  for_each<Threads>(n * n, [&](int x) { Tm[(x / n) * CP + x % n] = ws[rec.Tm() + (x / n) * C + x % n]; });
  for_each<Threads>(n, [&](int t) {
    r[t] = in.beta(t);
    drY[t] = 0.0f;
  });
  for_each<Threads>(K, [&](int i) { R[i] = 0.0f; });
  if constexpr (!TensorCores)
    for_each<Threads>(K * n, [&](int x) { dc[(x / n) * AP + x % n] = da[(x / n) * AP + x % n] = 0.0f; });
  for_each<Threads>(n * n, [&](int x) { dsigma[(x / n) * AP + x % n] = dTm[(x / n) * AP + x % n] = 0.0f; });
  for_each<Threads>(n * K, [&](int x) { dW[(x / K) * WP + x % K] = 0.0f; });
  // With the tensor cores, this warp's tiles of the five sums (value_square_tiles above) and their
  // accumulators, kept through the stages.
  constexpr int warps = Threads / 32, SQ = value_tiles_of(value_square_tiles, Threads),
                TT = value_tiles_of(value_triangle_tiles, Threads);
  const int warp = static_cast<int>(threadIdx.x) >> 5, RT = (n + 15) / 16, KT = K / 16, square = KT * RT,
            triangle = RT * (RT + 1) / 2;
  float dc_sums[SQ][2][4] = {}, da_sums[SQ][2][4] = {}, dW_sums[SQ][2][4] = {}, triangle_sums[TT][2][4] = {};
  // Triangle tile u of this warp: dσ's or d𝒯's, its first row and column (recomputed where needed rather
  // than held: registers are what the accumulators need).
  struct triangle_tile {
    bool held, of_dT;
    int r0, c0;
  };
  const auto triangle_tile_of = [&](int u) {
    const int y = warp + u * warps, z = y >= triangle ? y - triangle : y, rt = triangle_row(z);
    return triangle_tile{TensorCores && y < (erases ? 2 : 1) * triangle, y >= triangle, rt * 16,
                         (z - rt * (rt + 1) / 2) * 16};
  };
  // The stages, 16 value columns each: S, dS' [K × TP], Ũ, dŨ, do, v, Y = r v, dY [C × TP]. With the tensor
  // cores two of them, and stage s + 1's binary32 operands (S, dS', Ũ, dŨ, do) come by cp.async and its
  // values v into registers while stage s is summed: its loads no longer wait between two barriers.
  const int stages = V / columns, stage_floats = value_sums_stage(K);
  const auto stage_of = [&](int s) { return stage + (TensorCores ? (s & 1) * stage_floats : 0); };
  const auto load_operands = [&](int s, float* st) {  // S, dS', Ũ, dŨ, do of stage s
    const int j0 = s * columns;
    float *S = st, *D = S + K * TP, *Ut = D + K * TP, *dUt = Ut + C * TP, *d_o = dUt + C * TP;
    const float* d_o_rows =
        bp.d_o ? bp.d_o + ((static_cast<long long>(b) * p.tokens + t0) * p.heads + h) * V + j0 : nullptr;
    if constexpr (TensorCores) {
      copy_rows_async<Threads>(S, TP, ws + rec.S() + j0, V, K, columns);
      copy_rows_async<Threads>(D, TP, ws + rec.D() + j0, V, K, columns);
      copy_rows_async<Threads>(Ut, TP, ws + rec.Ut() + j0, V, n, columns);
      copy_rows_async<Threads>(dUt, TP, ws + rec.dUt() + j0, V, n, columns);
      if (d_o_rows) copy_rows_async<Threads>(d_o, TP, d_o_rows, static_cast<long long>(p.heads) * V, n, columns);
      stage_commit();
    } else {
      for_each<Threads>(K * columns, [&](int x) {
        const int i = x / columns, j = x % columns;
        S[i * TP + j] = ws[rec.S() + i * V + j0 + j];
        D[i * TP + j] = ws[rec.D() + i * V + j0 + j];
      });
      for_each<Threads>(n * columns, [&](int x) {
        const int t = x / columns, j = x % columns, at = t * TP + j;
        Ut[at] = ws[rec.Ut() + t * V + j0 + j];
        dUt[at] = ws[rec.dUt() + t * V + j0 + j];
        if (d_o_rows) d_o[at] = d_o_rows[static_cast<long long>(t) * p.heads * V + j];
      });
    }
    if (!d_o_rows) for_each<Threads>(n * columns, [&](int x) { d_o[(x / columns) * TP + x % columns] = 0.0f; });
  };
  // Stage s's values, this thread's elements x = threadIdx.x + u · Threads of n × columns.
  constexpr int value_loads = (C * columns + Threads - 1) / Threads;
  float values[value_loads];
  const auto load_values = [&](int s) {
#pragma unroll
    for (int u = 0; u < value_loads; ++u) {
      const int x = static_cast<int>(threadIdx.x) + u * Threads;
      values[u] = x < n * columns ? in.v(x / columns, s * columns + x % columns) : 0.0f;
    }
  };
  const auto store_values = [&](float* st) {
    float *v = st + 2 * K * TP + 3 * C * TP, *Y = v + C * TP;
#pragma unroll
    for (int u = 0; u < value_loads; ++u) {
      const int x = static_cast<int>(threadIdx.x) + u * Threads, t = x / columns, at = t * TP + x % columns;
      if (x < n * columns) {
        v[at] = values[u];
        Y[at] = mul_rn(r[t], values[u]);
      }
    }
  };
  if constexpr (TensorCores) {
    load_operands(0, stage_of(0));
    load_values(0);
    __syncthreads();  // r
    store_values(stage_of(0));
  }
  for (int s = 0; s < stages; ++s) {
    const int j0 = s * columns;
    float* st = stage_of(s);
    float *S = st, *D = S + K * TP, *Ut = D + K * TP, *dUt = Ut + C * TP, *d_o = dUt + C * TP, *v = d_o + C * TP,
          *Y = v + C * TP, *dY = Y + C * TP;
    if constexpr (TensorCores) {
      stage_wait<0>();
      __syncthreads();  // stage s landed and stored; stage s − 1 (the other buffer) read
      if (s + 1 < stages) {
        load_operands(s + 1, stage_of(s + 1));
        load_values(s + 1);
      }
    } else {
      __syncthreads();  // the previous stage read
      load_operands(s, st);
      load_values(s);
      store_values(st);
      __syncthreads();
    }
    for_each<Threads>(K, [&](int i) { R[i] = fma_sum(R[i], D + i * TP, 1, S + i * TP, 1, columns); });
    if constexpr (TensorCores) {
      // This warp's tiles take the stage's 16 terms (mma_slice16: the operations of mma_sums for these
      // runs, so the bits of its per-stage calls before 2026-12-07).
#pragma unroll
      for (int u = 0; u < SQ; ++u) {
        const int y = warp + u * warps;
        if (y < square) {
          mma_slice16(D, Ut, TP, (y / RT) * 16, (y % RT) * 16, K, n, dc_sums[u]);
          mma_slice16(S, d_o, TP, (y / RT) * 16, (y % RT) * 16, K, n, da_sums[u]);
          if (erases) mma_slice16(dUt, S, TP, (y / KT) * 16, (y % KT) * 16, n, K, dW_sums[u]);
        }
      }
#pragma unroll
      for (int u = 0; u < TT; ++u) {
        const triangle_tile tile = triangle_tile_of(u);
        if (tile.held)
          mma_slice16(tile.of_dT ? dUt : d_o, tile.of_dT ? Y : Ut, TP, tile.r0, tile.c0, n, n, triangle_sums[u]);
      }
    } else {
      // dc_im += Σ_j dS'_ij Ũ_mj, da_it += Σ_j S_ij do_tj (this stage's columns; register tiles: tiled_sums.cuh).
      product_sums<2, 4, Threads>(
          TensorCores, K, n, [&](int i, int m) { return dc[i * AP + m]; },
          [&](int i, int m, float acc) { dc[i * AP + m] = acc; }, run_of<terms::all>({D, TP, 1}, {Ut, TP, 1}, columns));
      product_sums<2, 4, Threads>(
          TensorCores, K, n, [&](int i, int t) { return da[i * AP + t]; },
          [&](int i, int t, float acc) { da[i * AP + t] = acc; },
          run_of<terms::all>({S, TP, 1}, {d_o, TP, 1}, columns));
      // dσ_tm += Σ_j do_tj Ũ_mj, d𝒯_tm += Σ_j dŨ_tj Y_mj (m ≤ t: the tiles sum the others too, unstored).
      product_sums<2, 2, Threads>(
          TensorCores, n, n, [&](int t, int m) { return dsigma[t * AP + m]; },
          [&](int t, int m, float acc) {
            if (m <= t) dsigma[t * AP + m] = acc;
          },
          run_of<terms::all>({d_o, TP, 1}, {Ut, TP, 1}, columns));
      if (erases) {
        product_sums<2, 2, Threads>(
            TensorCores, n, n, [&](int t, int m) { return dTm[t * AP + m]; },
            [&](int t, int m, float acc) {
              if (m <= t) dTm[t * AP + m] = acc;
            },
            run_of<terms::all>({dUt, TP, 1}, {Y, TP, 1}, columns));
        product_sums<2, 4, Threads>(
            TensorCores, n, K, [&](int t, int i) { return dW[t * WP + i]; },
            [&](int t, int i, float acc) { dW[t * WP + i] = acc; },
            run_of<terms::all>({dUt, TP, 1}, {S, TP, 1}, columns));
      }
    }
    // dY = 𝒯ᵀ dŨ (dY_tj = Σ_{a ≥ t} 𝒯_at dŨ_aj); dv = r dY.
    product_sums<1, 1, Threads>(
        TensorCores, n, columns, [](int, int) { return 0.0f; },
        [&](int t, int j, float acc) {
          dY[t * TP + j] = acc;
          bp.dv[((static_cast<long long>(b) * p.tokens + t0 + t) * p.heads + h) * V + j0 + j] = mul_rn(r[t], acc);
        },
        run_of<terms::from_row>({Tm, 1, CP}, {dUt, 1, TP}, n));
    if (TensorCores && s + 1 < stages) store_values(stage_of(s + 1));
    __syncthreads();
    for_each<Threads>(n, [&](int t) { drY[t] = fma_sum(drY[t], dY + t * TP, 1, v + t * TP, 1, columns); });
  }
  if constexpr (TensorCores) {
    // The accumulators out, element e of column tile nt as mma_sums stores it: dc and da straight to the
    // record, dW and the triangles' lower parts (column <= row) to shared memory.
    const int lane = static_cast<int>(threadIdx.x) & 31, g = lane >> 2, q = lane & 3;
    const auto store = [&](const float(&tile)[2][4], int r0, int c0, int rows, int cols, bool lower, auto&& out) {
#pragma unroll
      for (int nt = 0; nt < 2; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int row = r0 + g + (e >= 2 ? 8 : 0), col = c0 + 8 * nt + 2 * q + (e & 1);
          if (row < rows && col < cols && (!lower || col <= row)) out(row, col, tile[nt][e]);
        }
    };
#pragma unroll
    for (int u = 0; u < SQ; ++u) {
      const int y = warp + u * warps;
      if (y >= square) continue;
      store(dc_sums[u], (y / RT) * 16, (y % RT) * 16, K, n, false,
            [&](int i, int m, float x) { ws[rec.dc() + i * C + m] = x; });
      store(da_sums[u], (y / RT) * 16, (y % RT) * 16, K, n, false,
            [&](int i, int t, float x) { ws[rec.da() + i * C + t] = x; });
      if (erases)
        store(dW_sums[u], (y / KT) * 16, (y % KT) * 16, n, K, false,
              [&](int t, int i, float x) { dW[t * WP + i] = x; });
    }
#pragma unroll
    for (int u = 0; u < TT; ++u) {
      const triangle_tile tile = triangle_tile_of(u);
      if (tile.held)
        store(triangle_sums[u], tile.r0, tile.c0, n, n, true,
              [&](int t, int m, float x) { (tile.of_dT ? dTm : dsigma)[t * AP + m] = x; });
    }
  }
  __syncthreads();
  float* X = stage;
  for_each<Threads>(n * K, [&](int x) {
    dW[(x / K) * WP + x % K] = -dW[(x / K) * WP + x % K];
    X[(x / K) * KP + x % K] = ws[rec.X() + x];
  });
  for_each<Threads>(K, [&](int i) { ws[rec.R() + i] = R[i]; });
  if constexpr (!TensorCores)
    for_each<Threads>(K * n, [&](int x) {
      const int i = x / n, m = x % n;
      ws[rec.dc() + i * C + m] = dc[i * AP + m];
      ws[rec.da() + i * C + m] = da[i * AP + m];
    });
  for_each<Threads>(n * n, [&](int x) { ws[rec.dsigma() + (x / n) * C + x % n] = dsigma[(x / n) * AP + x % n]; });
  __syncthreads();
  // d𝒯_tm += Σ_i dW_ti X_mi (m ≤ t); dX = 𝒯ᵀ dW (dX_ti = Σ_{a ≥ t} 𝒯_at dW_ai; GLA: 0).
  if (erases)
    product_sums<2, 2, Threads>(
        TensorCores, n, n, [&](int t, int m) { return dTm[t * AP + m]; },
        [&](int t, int m, float acc) {
          if (m <= t) dTm[t * AP + m] = acc;
        },
        run_of<terms::all>({dW, WP, 1}, {X, KP, 1}, K));
  product_sums<2, 4, Threads>(
      TensorCores, n, K, [](int, int) { return 0.0f; },
      [&](int t, int i, float acc) { ws[rec.dX() + t * K + i] = acc; },
      run_of<terms::from_row>({Tm, 1, CP}, {dW, 1, WP}, erases ? n : 0));
  __syncthreads();
  // M = 𝒯ᵀ d𝒯 (M_tb = Σ_{a ≥ t} 𝒯_at d𝒯_ab, b < t).
  if (erases)
    tiled_sums<2, 2, Threads>(
        n, n, [](int, int) { return 0.0f; },
        [&](int t, int bb, float acc) {
          if (bb < t) M[t * C + bb] = acc;
        },
        run_of<terms::from_row>({Tm, 1, CP}, {dTm, 1, AP}, n));
  __syncthreads();
  // dA over d𝒯, which nothing reads after M, rows C + 1 apart: the row sums below walk a column of
  // it, a row a thread.
  float* dA = dTm;
  // dA_tj = −Σ_{b ≤ j} M_tb 𝒯_jb (j < t).
  interleaved_sums<4, Threads>(
      n * n, 1, [](int) { return 0.0f; },
      [&](int x, int) {
        return erases && x % n < x / n ? fma_run{M + (x / n) * C, 1, Tm + (x % n) * CP, 1, x % n + 1, false}
                                       : no_terms();
      },
      [&](int x, float acc) {
        if (x % n < x / n) dA[(x / n) * CP + x % n] = erases ? -acc : 0.0f;
      });
  __syncthreads();
  for_each<Threads>(n,
                    [&](int t) { ws[rec.dr() + t] = fma_sum(drY[t], dA + t * CP, 1, ws + rec.dot() + t * C, 1, t); });
  for_each<Threads>(n * n, [&](int x) {  // coalesced: consecutive threads, consecutive j
    const int t = x / n, j = x % n;
    ws[rec.dAr() + t * C + j] = j < t ? mul_rn(dA[t * CP + j], r[t]) : 0.0f;
  });
}

// ---- 5. channels ----------------------------------------------------------------------------------
/// The decay ratios' part of the gates (models/delta_rule_backward.cuh, decay_prefix and decay_gate_share:
/// the same sums in the same order) for `sets` tables at once (channels, or the head), every thread of the
/// block taking part. A thread a (set, row segment k, token t), t fastest (a warp: 32 rows at one column,
/// the pair cotangents' rows CP apart): segment(set, t, k, sink) runs the segment's terms and running sums
/// in registers (decay_segment_sums) and its total goes to segment_sums; then, the row's totals before k
/// summed (decay_ordered_sum), its P_t(s) into prefix (C × CP a set); then a thread a (set, column segment
/// k, column s), s fastest: decay_share_segment; then out(set, s, F(s)) for s < n. Ends synchronised.
template <class Segment, class Out>
__device__ __forceinline__ void decay_gate_shares(int sets, int n, float* prefix, float* segment_sums,
                                                  const Segment& segment, const Out& out) {
  constexpr int CP = padded(C);
  static_assert(decay_segments * decay_segment_terms == C, "the decay prefixes' segments cover a chunk");
  static_assert(prefix_channels * decay_segments * C == channels_threads, "a thread a row segment");
  const int set = threadIdx.x / (decay_segments * C), k = threadIdx.x / C % decay_segments, t = threadIdx.x % C;
  const bool active = set < sets && t < n;
  float* totals = segment_sums + set * decay_segments * C + t;  // segment k' of row t at [k'·C]
  float running[decay_segment_terms];
  if (active) totals[k * C] = segment(set, t, k, [&](int u, float sum) { running[u] = sum; });
  __syncthreads();
  if (active) {
    const float off = decay_ordered_sum(totals, C, k);
    float* P = prefix + (set * C + t) * CP;
    if (k == 0) P[0] = 0.0f;
#pragma unroll
    for (int u = 0; u < decay_segment_terms; ++u) {
      const int s = k * decay_segment_terms + 1 + u;
      if (s <= t) P[s] = add_rn(off, running[u]);
    }
  }
  __syncthreads();
  if (active)
    segment_sums[(set * decay_segments + k) * C + t] = decay_share_segment(prefix + set * C * CP, CP, 1, t, n, k);
  __syncthreads();
  for_each<channels_threads>(sets * C, [&](int x) {
    const int s = x % C, of = x / C;
    if (s < n) out(of, s, decay_ordered_sum(segment_sums + of * decay_segments * C + s, C, decay_segments));
  });
  __syncthreads();
}

/// Channels of a slice of launch 5's first kernel: 32, so that its products (64 × 32 outputs) give eight
/// warps a tile each and a block loads K / 32 slices (docs/kernels.md, "Launch 5 in two kernels"); the
/// gates kernel's slices are `columns` (16) wide, its prefixes four channels at a time.
constexpr int channel_columns = 32;

/// A slice of up to Width channels of a chunk in launch 5's shared memory (both of its kernels): e, w, sq,
/// Γ, Γ⁻, G and dX, seven consecutive arrays from e; da and dc channel-major ([il · CP + t]); R [il].
/// ChannelMajor: the seven arrays too (rows of CP floats, tokens fastest: the gates' kernel, whose decay
/// prefixes walk a channel's tokens, a warp 32 of them, in 32 banks); else token-major ([t · Width + il]:
/// the first kernel, whose products and channel_token read the slice's channels of a token).
template <bool ChannelMajor, int Width>
struct channel_slice {
  static constexpr int array_floats = ChannelMajor ? Width * padded(C) : C * Width;
  float *e, *da, *dc, *R;
  __device__ float* array(int which) const { return e + which * array_floats; }  // 0 e … 5 G, 6 dX
  /// Where (token t, channel il) is in an array.
  __device__ static int at(int t, int il) { return ChannelMajor ? il * padded(C) + t : t * Width + il; }
  /// Channel il of the slice, as channel_token, the products and the gates' sums read it.
  __device__ channel_inputs channel(int il) const {
    const int first = at(0, il), ld = ChannelMajor ? 1 : Width;
    return {array(0) + first,
            array(1) + first,
            array(2) + first,
            array(3) + first,
            array(4) + first,
            array(5) + first,
            array(6) + first,
            ld,
            da + il * padded(C),
            dc + il * padded(C),
            R[il]};
  }
  /// A slice's floats from its first array.
  __host__ __device__ static constexpr int floats() { return 7 * array_floats + 2 * Width * padded(C) + Width; }
  __device__ static channel_slice from(float* first) {
    float* d = first + 7 * array_floats;
    return {first, d, d + Width * padded(C), d + 2 * Width * padded(C)};
  }
};

/// Channels i0 … i0 + width − 1 (width <= Width) of value head `in.h`'s chunk into the slice, every thread
/// of the block (the reads coalesced: consecutive threads, consecutive channels).
template <class In, bool ChannelMajor, int Width>
__device__ void load_channel_slice(const channel_slice<ChannelMajor, Width>& s, const device_reader<In>& in,
                                   const float* ws, const backward_record& rec, float tau, int i0, int width, int n) {
  const int K = rec.K, CP = padded(C);
  struct channel_values {
    float k, w, q, gam, gin, G, dX;
  };
  for_each_loaded<channels_threads, 1>(
      n * width,
      [&](int x) {
        const int t = x / width, i = i0 + x % width, at = t * K + i;
        return channel_values{in.k(t, i),         in.w(t, i),       in.q(t, i),       ws[rec.gam() + at],
                              ws[rec.gin() + at], ws[rec.G() + at], ws[rec.dX() + at]};
      },
      [&](int x, const channel_values& got) {
        const int y = s.at(x / width, x % width);
        s.array(0)[y] = got.k;
        s.array(1)[y] = got.w;
        s.array(2)[y] = mul_rn(tau, got.q);
        s.array(3)[y] = got.gam;
        s.array(4)[y] = got.gin;
        s.array(5)[y] = got.G;
        s.array(6)[y] = got.dX;
      });
  for_each<channels_threads>(width * C, [&](int x) {  // da, dc are channel-major: tokens fastest
    const int il = x / C, t = x % C;
    if (t < n) {
      s.da[il * CP + t] = ws[rec.da() + (i0 + il) * C + t];
      s.dc[il * CP + t] = ws[rec.dc() + (i0 + il) * C + t];
    }
  });
  for_each<channels_threads>(width, [&](int il) { s.R[il] = ws[rec.R() + i0 + il]; });
}

/// The chunk's pair cotangents dσ and dA r (rows CP apart: the decay prefixes' warps read 32 rows at one
/// column) and the row scales r, every thread of the block.
template <class In>
__device__ pair_inputs load_pairs(const device_reader<In>& in, const float* ws, const backward_record& rec, int n,
                                  float* dsigma, float* dAr, float* r) {
  const int CP = padded(C);
  for_each_loaded<channels_threads, 2>(  // indices over C, a constant: shifts, not divisions by n
      C * C,
      [&](int x) {
        return x / C < n && x % C < n ? float2{ws[rec.dsigma() + x], ws[rec.dAr() + x]} : float2{0.0f, 0.0f};
      },
      [&](int x, float2 got) {
        if (x / C < n && x % C < n) {
          dsigma[x / C * CP + x % C] = got.x;
          dAr[x / C * CP + x % C] = got.y;
        }
      });
  for_each<channels_threads>(n, [&](int t) { r[t] = in.beta(t); });
  return {dsigma, dAr, r, CP};
}

/// Row stride of launch 5's product columns (Γ⁻ w, Γ sq, Γ e, de: [t · stride + il]): 8 floats past the
/// slice's width, so that a tensor-core B fragment (rows k = lane % 4, columns lane / 4) falls in 32 banks.
constexpr int product_column_stride = channel_columns + 8;

/// Launch 5's first kernel's shared memory in floats: dk, dq [C × K]; dσ, dA r [C × CP]; r, the head's
/// direct sums, dβ's sums, c_j [C]; the slice (after the last slice: one gate a head's σ, A / r and
/// prefixes, C × CP each); direct [C × channel_columns]; F, dG [C]; the products' columns [4 × C ×
/// product_column_stride]; the segments' sums.
__host__ __device__ constexpr int channels_floats(int K) {
  return 2 * C * K + 2 * C * padded(C) + 4 * C + channel_slice<false, channel_columns>::floats() + C * channel_columns +
         2 * C + 4 * C * product_column_stride + prefix_channels * decay_segments * C;
}

/// Launch 5, a block a (key head, chunk): dq, dk (dκ), dβ for every rule, and one gate a head's dg, by
/// slices of channel_columns channels. A factored chunk (not strongly decaying) takes its dq and dk sums as
/// three products (factored_channel), a strongly decaying one channel_token per (token, channel). A gate
/// a channel's decay-ratio prefixes and dg are channel_gates_kernel's: compiled beside the products they
/// raised this kernel's spills from 40 to 152 bytes a thread (H200, 2026-12-06; docs/kernels.md, "Launch
/// 5 in two kernels").
template <class In>
__global__ void __launch_bounds__(channels_threads) channels_kernel(const launch_args a) {
  extern __shared__ float shared[];
  const delta_rule_backward_problem& bp = a.bp;
  const delta_rule_problem& p = bp.forward;
  const int chunk_g = blockIdx.x;  // below 2^31: gridDim.x
  const long long key_head = blockIdx.y;
  const chunk_origin origin = origin_of_chunk(a.map, chunk_g);  // as launch 1
  const int K = a.rec.K, n = origin.tokens, group = p.key_head_group, H = p.heads / group, b = origin.batch_row,
            t0 = origin.first_token;
  const bool erases = p.rule != delta_rule_kind::gla, head_gated = p.gate == delta_rule_gate::per_head;
  const backward_record& rec = a.rec;
  const int CP = padded(C);
  constexpr int W = channel_columns, S = product_column_stride;
  using slice_layout = channel_slice<false, W>;
  float *dk = shared, *dq = dk + C * K, *dsigma = dq + C * K, *dAr = dsigma + C * CP, *r = dAr + C * CP,
        *head_sum = r + C, *beta_sum = head_sum + C, *carry = beta_sum + C, *slice_at = carry + C,
        *direct = slice_at + slice_layout::floats(), *F = direct + C * W, *dG = F + C, *gin_w = dG + C,
        *gam_sq = gin_w + C * S, *gam_e = gam_sq + C * S, *de = gam_e + C * S, *segment_sums = de + C * S;
  const auto slice = slice_layout::from(slice_at);
  // One gate a head (head_pairs): the head's σ, A / r (rows CP apart, as the pair cotangents) and
  // prefixes in the slice's place, once the slices are done.
  float *head_sigma = slice_at, *head_dot = head_sigma + C * CP, *head_prefix = head_dot + C * CP;
  static_assert(3 * C * padded(C) <= slice_layout::floats(), "head_pairs' tables fit");
  for (int u = 0; u < group; ++u) {
    const long long h = key_head * group + u;
    const device_reader<In> in(p, b, t0, 0, h);  // (no state read here)
    const float* ws = a.record(h, chunk_g);
    const bool strong = ws[rec.strong()] != 0.0f;
    __syncthreads();  // the previous head's pairs read
    const pair_inputs pairs = load_pairs(in, ws, rec, n, dsigma, dAr, r);
    for_each<channels_threads>(n, [&](int t) {
      head_sum[t] = 0.0f;  // one gate a head: Σ_i direct_ti (then dg_t)
      carry[t] = 0.0f;     // one gate a head: c_t (head_pairs)
      beta_sum[t] = ws[rec.dr() + t];
    });
    for (int i0 = 0; i0 < K; i0 += W) {
      const int width = min(W, K - i0);  // K is a multiple of 16: the last slice of 16 where K / 16 is odd
      __syncthreads();                   // the previous slice read
      load_channel_slice(slice, in, ws, rec, p.tau, i0, width, n);
      __syncthreads();
      // This value head's share of dq and dk at (token t, channel i0 + il).
      const auto add_dq = [&](int t, int il, float dsq) {
        const int acc = t * K + i0 + il;
        dq[acc] = u == 0 ? mul_rn(p.tau, dsq) : add_rn(dq[acc], mul_rn(p.tau, dsq));
      };
      const auto add_dk = [&](int t, int il, const channel_token_gradient& g) {
        const float dk_h = key_gradient(p.rule, g);
        if (p.rule == delta_rule_kind::two_key)
          bp.dkappa[((static_cast<long long>(b) * p.tokens + t0 + t) * p.heads + h) * K + i0 + il] = g.dw;
        const int acc = t * K + i0 + il;
        dk[acc] = u == 0 ? dk_h : add_rn(dk[acc], dk_h);
      };
      if (strong) {  // channel_token, a thread a (token, channel)
        for_each<channels_threads>(n * width, [&](int x) {
          const int t = x / width, il = x % width;
          const channel_token_gradient g = channel_token(slice.channel(il), pairs, t, n, erases, head_gated, strong);
          add_dq(t, il, g.dsq);
          add_dk(t, il, g);
          direct[t * W + il] = g.direct;
        });
      } else {  // factored: three products (factored_channel)
        for_each<channels_threads>(n * width, [&](int x) {
          const int t = x / width, il = x % width;
          const channel_inputs ch = slice.channel(il);
          const factored_channel f{ch, pairs, n};
          gin_w[t * S + il] = f.gin_w(t);
          gam_sq[t * S + il] = f.gam_sq(t);
          gam_e[t * S + il] = f.gam_e(t);
          if (head_gated) direct[t * W + il] = channel_direct(ch, pairs, t, n, erases);
        });
        __syncthreads();
        const auto with_channel = [&](int il, auto&& use) {
          const channel_inputs ch = slice.channel(il);
          return use(factored_channel{ch, pairs, n});
        };
        const bool tensor_cores = a.tensor_cores();
        product_sums<1, 1, channels_threads>(
            tensor_cores, n, width,
            [&](int t, int il) { return with_channel(il, [&](const factored_channel& f) { return f.dsq_begin(t); }); },
            [&](int t, int il, float acc) {
              add_dq(t, il, with_channel(il, [&](const factored_channel& f) { return f.dsq(t, acc); }));
            },
            run_of<terms::through_row>({dsigma, CP, 1}, {gin_w, 1, S}, n));
        if (erases)
          product_sums<1, 1, channels_threads>(
              tensor_cores, n, width,
              [&](int t, int il) { return with_channel(il, [&](const factored_channel& f) { return f.de_begin(t); }); },
              [&](int t, int il, float acc) {
                de[t * S + il] = with_channel(il, [&](const factored_channel& f) { return f.de(t, acc); });
              },
              run_of<terms::through_row>({dAr, CP, 1}, {gin_w, 1, S}, n));
        __syncthreads();  // de complete
        product_sums<1, 1, channels_threads>(
            tensor_cores, n, width,
            [&](int t, int il) { return with_channel(il, [&](const factored_channel& f) { return f.dw_begin(t); }); },
            [&](int t, int il, float acc) {
              channel_token_gradient g{};
              g.dw = with_channel(il, [&](const factored_channel& f) { return f.dw(t, acc); });
              if (erases) g.de = de[t * S + il];
              add_dk(t, il, g);
            },
            run_of<terms::from_row>({dsigma, 1, CP}, {gam_sq, 1, S}, n),
            run_of<terms::from_row>({dAr, 1, CP}, {gam_e, 1, S}, erases ? n : 0));
      }
      __syncthreads();
      if (head_gated)  // c_j's terms of the slice's channels, i rising
        for_each<channels_threads>(n, [&](int j) {
          for (int il = 0; il < width; ++il)
            carry[j] = carry_term(channel_pairs{slice.channel(il), pairs, n, erases, strong}, j, carry[j]);
        });
      for_each<channels_threads>(n, [&](int t) {
        for (int il = 0; il < width; ++il) {
          if (head_gated) head_sum[t] = add_rn(head_sum[t], direct[t * W + il]);
          const int y = slice_layout::at(t, il);
          beta_sum[t] = fma_rn(slice.array(6)[y], mul_rn(slice.array(3)[y], slice.array(0)[y]), beta_sum[t]);
        }
      });
    }
    if (head_gated) {   // one gate a head: the head's pair terms (head_pairs), prefixes, gate shares
      __syncthreads();  // c_j complete; the slice's region free
      for_each<channels_threads>(C * C, [&](int x) {
        if (x / C < n && x % C < n) {
          head_sigma[x / C * CP + x % C] = ws[rec.sigma() + x];
          head_dot[x / C * CP + x % C] = ws[rec.dot() + x];
        }
      });
      __syncthreads();
      const head_pairs q{pairs, head_sigma, head_dot, carry, n, erases};
      decay_gate_shares(
          1, n, head_prefix, segment_sums,
          [&](int, int t, int k, auto&& sink) { return decay_segment_sums(q, t, k, sink); },
          [&](int, int s, float share) { F[s] = share; });
      __syncthreads();
      if (threadIdx.x == 0) gate_cotangents(head_sum, F, dG, 1, n);
      __syncthreads();
    }
    for_each<channels_threads>(n, [&](int t) {
      const long long row = (static_cast<long long>(b) * p.tokens + t0 + t) * p.heads + h;
      if (head_gated) bp.dg[row] = dG[t];
      if (p.rule == delta_rule_kind::beta_form) bp.dbeta[row] = beta_sum[t];
    });
  }
  __syncthreads();
  for_each<channels_threads>(n * K, [&](int x) {
    const int t = x / K, i = x % K;
    const long long at = ((static_cast<long long>(b) * p.tokens + t0 + t) * H + key_head) * K + i;
    bp.dk[at] = dk[x];
    bp.dq[at] = dq[x];
  });
}

/// Launch 5's second kernel's shared memory in floats: dσ, dA r [C × CP]; r [C]; the slice (channel-major);
/// every channel's direct parts and F, then dg [C × K each]; prefix_channels prefix tables [C × CP]; the
/// segments' sums.
__host__ __device__ constexpr int channel_gates_floats(int K) {
  return 2 * C * padded(C) + C + channel_slice<true, columns>::floats() + 2 * C * K + prefix_channels * C * padded(C) +
         prefix_channels * decay_segments * C;
}

/// Launch 5 with a gate a channel (GLA, KDA, the KDNs' two-key rule), a block a (value head, chunk):
/// every channel's log-gate cotangent dg, its part through Γ_t alone (channel_direct) and its decay
/// ratios' part (decay_gate_shares over decay_prefix's sums, prefix_channels channels at a time), the
/// twin's sums in the twin's order. The slice is held channel-major: the prefixes' pair terms read their
/// channel's values along the tokens, a warp 32 rows at one column (until 2026-12-07 each group of
/// channels was first copied so from a token-major slice, whose 16-float rows put a warp's reads in two
/// banks). Each channel's dg is a chain of n dependent sums (gate_cotangents): they run once, a thread a
/// channel, after every slice, rather than 16 at a time while the block waits (docs/kernels.md,
/// "Launch 5 in two kernels").
template <class In>
__global__ void __launch_bounds__(channels_threads) channel_gates_kernel(const launch_args a) {
  extern __shared__ float shared[];
  const delta_rule_problem& p = a.bp.forward;
  const int chunk_g = blockIdx.x;  // below 2^31: gridDim.x
  const long long h = blockIdx.y;
  const chunk_origin origin = origin_of_chunk(a.map, chunk_g);
  const int K = a.rec.K, n = origin.tokens, b = origin.batch_row, t0 = origin.first_token;
  const bool erases = p.rule != delta_rule_kind::gla;
  const backward_record& rec = a.rec;
  const int CP = padded(C);
  using slice_layout = channel_slice<true, columns>;
  // direct and F token-major ([t · K + i]; F(t), then dg_t); the segments' sums [prefix_channels ×
  // decay_segments × C].
  float *dsigma = shared, *dAr = dsigma + C * CP, *r = dAr + C * CP, *slice_at = r + C,
        *direct = slice_at + slice_layout::floats(), *F = direct + C * K, *prefix = F + C * K,
        *segment_sums = prefix + prefix_channels * C * CP;
  const auto slice = slice_layout::from(slice_at);
  const device_reader<In> in(p, b, t0, 0, h);
  const float* ws = a.record(h, chunk_g);
  const bool strong = ws[rec.strong()] != 0.0f;
  const pair_inputs pairs = load_pairs(in, ws, rec, n, dsigma, dAr, r);
  for (int i0 = 0; i0 < K; i0 += columns) {
    __syncthreads();  // the previous slice read (the first time: the pairs loaded)
    load_channel_slice(slice, in, ws, rec, p.tau, i0, columns, n);
    __syncthreads();
    for_each<channels_threads>(n * columns, [&](int x) {
      const int t = x / columns, il = x % columns;
      direct[t * K + i0 + il] = channel_direct(slice.channel(il), pairs, t, n, erases);
    });
    for (int c0l = 0; c0l < columns; c0l += prefix_channels)
      decay_gate_shares(
          prefix_channels, n, prefix, segment_sums,
          [&](int ch, int t, int k, auto&& sink) {
            const channel_inputs in_ch = slice.channel(c0l + ch);
            const channel_pairs q{in_ch, pairs, n, erases, strong};
            return decay_segment_sums(channel_pairs_of_row{q, q.row(t)}, t, k, sink);
          },
          [&](int ch, int s, float share) { F[s * K + i0 + c0l + ch] = share; });
  }
  // (decay_gate_shares ends synchronised.) dg_s in F's place: each reads F(s) before it writes dg_s there.
  for_each<channels_threads>(K, [&](int i) { gate_cotangents(direct + i, F + i, F + i, K, n); });
  __syncthreads();
  for_each<channels_threads>(n * K, [&](int x) {
    a.bp.dg[((static_cast<long long>(b) * p.tokens + t0 + x / K) * p.heads + h) * K + x % K] = F[x];
  });
}

// ---- launches -------------------------------------------------------------------------------------
template <class Kernel>
void allow_shared(Kernel kernel, std::size_t bytes, const char* name) {
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)), name);
  // Every launch wants all the shared memory an SM has (launches 2 and 3: two blocks of about 111 KB).
  check_cuda(
      cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared),
      name);
}

template <class In>
void launch(const delta_rule_backward_problem& bp, float* workspace, const bool (&which)[5]) {
  const delta_rule_problem& p = bp.forward;
  const auto stream = static_cast<cudaStream_t>(p.stream);
  const int K = p.key_dim, V = p.value_dim;
  const backward_record rec = delta_rule_backward_record(p);
  // The chunk map's table (cu_seqlens only) after the records, copied in from pageable memory (the call
  // returns once it is staged, so the vector may go).
  const std::vector<delta_rule_sequence_start> starts = delta_rule_sequence_starts(p);
  const long long chunks = delta_rule_chunks(p, starts, nullptr).total_chunks;
  auto* table = starts.empty() ? nullptr
                               : reinterpret_cast<delta_rule_sequence_start*>(
                                     workspace + chunks * p.heads * static_cast<long long>(rec.size()));
  if (table != nullptr)
    check_cuda(cudaMemcpyAsync(table, starts.data(), starts.size() * sizeof(delta_rule_sequence_start),
                               cudaMemcpyHostToDevice, stream),
               "cudaMemcpyAsync(chunk map)");
  const launch_args a{bp, rec, delta_rule_chunks(p, starts, table), workspace};
  const unsigned N = static_cast<unsigned>(a.map.sequences), HV = static_cast<unsigned>(p.heads),
                 H = HV / static_cast<unsigned>(p.key_head_group);
  constexpr std::size_t f = sizeof(float);
  const std::size_t operands = f * operands_floats(K, V),
                    states = f * (K * slice_stride(true) + 2 * C * key_stride(K) + C * slice_stride(true) + K),
                    cotangents = f * (K * slice_stride(true) + 2 * C * key_stride(K) + C * pair_stride(true) +
                                      2 * C * slice_stride(true) + K),
                    value_sums = f * value_sums_floats(K, false), value_sums_tf32 = f * value_sums_floats(K, true),
                    channels = f * channels_floats(K), channel_gates = f * channel_gates_floats(K);
  allow_shared(operands_kernel<In>, operands, "cudaFuncSetAttribute(operands_kernel)");
  allow_shared(states_kernel<In>, states, "cudaFuncSetAttribute(states_kernel)");
  allow_shared(cotangents_kernel, cotangents, "cudaFuncSetAttribute(cotangents_kernel)");
  allow_shared(value_sums_kernel<In, false>, value_sums, "cudaFuncSetAttribute(value_sums_kernel)");
  allow_shared(value_sums_kernel<In, true>, value_sums_tf32, "cudaFuncSetAttribute(value_sums_kernel)");
  allow_shared(channels_kernel<In>, channels, "cudaFuncSetAttribute(channels_kernel)");
  allow_shared(channel_gates_kernel<In>, channel_gates, "cudaFuncSetAttribute(channel_gates_kernel)");
  const dim3 per_chunk(static_cast<unsigned>(chunks), HV, 1), per_columns(static_cast<unsigned>(V / columns), HV, N);
  if (which[0] && chunks > 0) operands_kernel<In><<<per_chunk, operands_threads, operands, stream>>>(a);
  check_cuda(cudaGetLastError(), "operands_kernel");
  if (which[1]) states_kernel<In><<<per_columns, state_threads, states, stream>>>(a);
  check_cuda(cudaGetLastError(), "states_kernel");
  if (which[2]) cotangents_kernel<<<per_columns, state_threads, cotangents, stream>>>(a);
  check_cuda(cudaGetLastError(), "cotangents_kernel");
  if (which[3] && chunks > 0) {
    if (bp.operands == delta_rule_backward_operands::tf32)
      value_sums_kernel<In, true><<<per_chunk, value_sums_threads_of(true), value_sums_tf32, stream>>>(a);
    else
      value_sums_kernel<In, false><<<per_chunk, value_sums_threads_of(false), value_sums, stream>>>(a);
  }
  check_cuda(cudaGetLastError(), "value_sums_kernel");
  if (which[4] && chunks > 0)
    channels_kernel<In><<<dim3(static_cast<unsigned>(chunks), H, 1), channels_threads, channels, stream>>>(a);
  check_cuda(cudaGetLastError(), "channels_kernel");
  if (which[4] && chunks > 0 && p.gate == delta_rule_gate::per_channel)
    channel_gates_kernel<In><<<per_chunk, channels_threads, channel_gates, stream>>>(a);
  check_cuda(cudaGetLastError(), "channel_gates_kernel");
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

void delta_rule_backward_host(const delta_rule_backward_problem& host) { delta_rule_backward_host_shifted(host, 0); }

void delta_rule_backward_host_shifted(const delta_rule_backward_problem& host, int d_o_shift) {
  delta_rule_backward_check(host);
  const delta_rule_problem& hp = host.forward;
  const long long B = hp.batch, T = hp.tokens, HV = hp.heads, K = hp.key_dim, V = hp.value_dim,
                  H = HV / hp.key_head_group, N = hp.cu_seqlens ? hp.sequences : B;
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
  p.initial_state = arena.upload(hp.initial_state, {N, HV, K, V}, hp.dtype);
  p.o = p.final_state = nullptr;
  device.d_o = arena.upload(host.d_o, B * T * HV * V, d_o_shift);
  device.d_final_state = arena.upload(host.d_final_state, N * HV * K * V);
  const auto out = [&](float* x, long long count) { return x ? arena.poisoned(count) : nullptr; };
  const long long G = hp.gate == delta_rule_gate::per_channel ? K : 1;
  device.dq = out(host.dq, B * T * H * K);
  device.dk = out(host.dk, B * T * H * K);
  device.dv = out(host.dv, B * T * HV * V);
  device.dbeta = out(host.dbeta, B * T * HV);
  device.dkappa = out(host.dkappa, B * T * HV * K);
  device.dg = out(host.dg, B * T * HV * G);
  device.d_initial_state = out(host.d_initial_state, N * HV * K * V);
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
  back(host.d_initial_state, device.d_initial_state, N * HV * K * V);
}

}  // namespace kalman_oracle::gpu
