// The chunked delta-rule memory on tensor cores (delta_rule_chunked.hpp; docs/kernels.md, "Chunked
// delta-rule memory"), in three launches as fla's chunked kernels are laid out, so that everything that
// does not depend on the state runs in parallel over the chunks:
//   1. prepare (one block of 8 warps a (batch row, value head, chunk)): the chunk's gate sums (one
//      thread a key channel, in token order) and operands (a thread eight channels of a token),
//      A = (Γk)(Γ⁻¹w)ᵀ and the scores (Γτq)(Γ⁻¹w)ᵀ on the tensor cores, 𝒯 = (I + A)⁻¹ by forward
//      substitution (one thread a column, binary32, sixteen rows at a time, each row's terms in the
//      twin's order),
//      bf(W) = bf(𝒯X) and 𝒯Y, bf(Γτq), P = bf(scores), the carry's keys and decay, all to the workspace;
//   2. state (one block a (batch row, value head, block of value columns), the chunks in order): from
//      the chunk-start state S, Ũ = 𝒯Y − bf(W) bf(S) and the carry S' = Γ_last ⊙ S + (keys)ᵀ bf(Ũ),
//      writing bf(S) and bf(Ũ) of each chunk to the workspace; each warp holds its 16 value columns of
//      the state in registers, transposed, and computes both products there with mma.sync (one
//      barrier a chunk; the next chunk's operands arrive by cp.async while this one computes);
//   3. output (one block a (batch row, value head, chunk, block of value columns)):
//      o = bf(Γτq) bf(S) + P bf(Ũ), every operand read from the workspace.
// Every quantity is the twin's (twin/delta_rule_chunked_twin.hpp), rounded at the twin's points: the
// workspace holds binary32 where the twin keeps binary32 (𝒯Y, the decays) and bfloat16 only for what
// the twin rounds to bfloat16 (tensor-core operands). Every matrix product is a tensor-core product
// with bfloat16 operands and binary32 accumulators (WMMA 16 x 16 x 16; mma.sync m16n8k16 in the state
// launch), in steps of 16 along the sum, whose order of accumulation inside a step is the tensor cores'
// (not specified): kernel and twin agree to a bound, not bit for bit. No atomics: run to run bit-identical.
#include <cuda_bf16.h>
#include <cuda_pipeline.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <cstdint>
#include <type_traits>
#include <vector>  // the benchmark build's clock marks

#include "cuda_check.hpp"
#include "device_arena.hpp"
#include "kalman_oracle/gpu/delta_rule_chunked.hpp"
#include "kalman_oracle/gpu/delta_rule_sequences.hpp"
#include "kalman_oracle/gpu/models/delta_rule_chunk.cuh"
#include "kalman_oracle/gpu/warp_mma.cuh"

namespace kalman_oracle::gpu {

namespace {

namespace wmma = nvcuda::wmma;

constexpr int chunk = delta_rule_chunk_tokens;  // C
constexpr int warps = 4, threads = 32 * warps;
/// Value columns per block of the output launch (at most).
constexpr int output_value_block = delta_rule_value_block;
/// The state launch's block: warps that compute, 16 value columns each, and warps that only copy the
/// chunks' operands (0: the computing warps copy). docs/kernels.md has the shapes measured; benchmark
/// builds set both macros to measure others.
#ifndef KALMAN_ORACLE_DELTA_RULE_STATE_WARPS
constexpr int state_warps = 2, state_producer_warps = 2;
#else
constexpr int state_warps = KALMAN_ORACLE_DELTA_RULE_STATE_WARPS,
              state_producer_warps = KALMAN_ORACLE_DELTA_RULE_STATE_PRODUCERS;
#endif
/// The value columns of an output-launch block (and of the prepare launch's 𝒯Y blocks) for V columns.
__host__ __device__ constexpr int output_block_of(int V) { return V < output_value_block ? V : output_value_block; }
/// Chunks whose operands the state launch holds in shared memory at once: this one and the ones in flight
/// by cp.async.
constexpr int state_stages = 2;

using bf16_t = std::uint16_t;  // a bfloat16 operand's bits

/// A size known at compile time (known > 0) or else the run-time one: the kernels are compiled once for
/// fla's production sizes K = V = 128, where every index division by K, V or the value block folds into
/// shifts (docs/kernels.md has the measured gain), and once for any size.
__host__ __device__ constexpr int known_or(int known, int run_time) { return known > 0 ? known : run_time; }

/// x rounded to bfloat16 (nearest, ties to even), by the hardware's conversion (one instruction): for
/// every number, infinities included, the bits of the twin's round_to_bf16 (models/delta_rule_chunk.cuh);
/// a NaN stays a NaN (the twin keeps its high bits).
__device__ __forceinline__ bf16_t bf16_bits_of(float x) { return __bfloat16_as_ushort(__float2bfloat16_rn(x)); }

/// Two numbers rounded as bf16_bits_of, packed: lo in the low half (the lower address).
using warp_mma::bf16_pair;

__device__ __forceinline__ const __nv_bfloat16* as_bf16(const bf16_t* x) {
  return reinterpret_cast<const __nv_bfloat16*>(x);
}

/// Byte offsets of buffers carved one after another, each Align-byte aligned: shared memory (128) or
/// the workspace (256).
template <int Align, class Offset = int>
struct carver {
  Offset at = 0;
  __host__ __device__ Offset take(Offset bytes) {
    const Offset here = at;
    at += (bytes + Align - 1) / Align * Align;
    return here;
  }
};

using frag_a_row = wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major>;
using frag_a_col = wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::col_major>;
using frag_b_row = wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major>;
using frag_b_col = wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major>;
using frag_acc = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

/// acc += Σ_s A_s B_s over `steps` 16 x 16 x 16 products, A_s at a + s·a_step (leading dimension lda),
/// B_s at b + s·b_step (ldb): one row of tiles times one column of tiles (shared or global memory).
template <class FragA, class FragB>
__device__ __forceinline__ void mma_steps(frag_acc& acc, const bf16_t* a, int lda, int a_step, const bf16_t* b, int ldb,
                                          long long b_step, int steps) {
  for (int s = 0; s < steps; ++s) {
    FragA x;
    FragB y;
    wmma::load_matrix_sync(x, as_bf16(a + s * a_step), lda);
    wmma::load_matrix_sync(y, as_bf16(b + s * b_step), ldb);
    wmma::mma_sync(acc, x, y, acc);
  }
}

/// f(r0, c0) for each 16 x 16 tile of a rows x cols output, the tiles dealt to the warps in turn.
template <int Warps = warps, class F>
__device__ __forceinline__ void for_each_tile(int rows, int cols, F&& f) {
  const int across = cols / 16;
  for (int tile = static_cast<int>(threadIdx.x) / 32; tile < (rows / 16) * across; tile += Warps)
    f(tile / across * 16, tile % across * 16);
}

/// Gates a thread reads before it sums any (prepare's gate sums, below): one load latency covers 16.
constexpr int load_batch = 16;

/// x[offset + u·step], u = 0 … 7, widened: one 16-byte load (two for binary32) where the eight are
/// contiguous and 16-byte aligned (fla's layouts), else eight loads.
template <class In>
__device__ __forceinline__ void load_eight(const strided_input& x, long long offset, long long step, float (&out)[8]) {
  const In* first = static_cast<const In*>(x.data) + offset;
  if (step == 1 && reinterpret_cast<std::uintptr_t>(first) % 16 == 0) {
    if constexpr (sizeof(In) == 4) {
      const float4 lo = *reinterpret_cast<const float4*>(first), hi = *reinterpret_cast<const float4*>(first + 4);
      out[0] = lo.x, out[1] = lo.y, out[2] = lo.z, out[3] = lo.w;
      out[4] = hi.x, out[5] = hi.y, out[6] = hi.z, out[7] = hi.w;
    } else {
      const uint4 raw = *reinterpret_cast<const uint4*>(first);
      const std::uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        out[2 * u] = widen(In{static_cast<std::uint16_t>(words[u] & 0xffffu)});
        out[2 * u + 1] = widen(In{static_cast<std::uint16_t>(words[u] >> 16)});
      }
    }
    return;
  }
#pragma unroll
  for (int u = 0; u < 8; ++u) out[u] = load_widened<In>(x, offset + u * step);
}

/// The inputs of one (sequence, value head), each element's offset from a base computed once (the
/// key head h / key_head_group and the sequence's first token included): token t is the sequence's.
template <class In>
struct reader {
  const delta_rule_problem& p;
  long long k_base, q_base, v_base, kappa_base, beta_base, g_base, initial_base;
  __device__ reader(const delta_rule_problem& problem, const delta_rule_sequence& sequence, long long head)
      : p(problem) {
    const long long b = sequence.batch_row, t0 = sequence.first_token, h = head, key_head = h / p.key_head_group;
    k_base = offset_of(p.k, b, t0, key_head);
    q_base = offset_of(p.q, b, t0, key_head);
    v_base = offset_of(p.v, b, t0, h);
    kappa_base = offset_of(p.kappa, b, t0, h);
    beta_base = offset_of(p.beta, b, t0, h);
    g_base = offset_of(p.g, b, t0, h);
    initial_base = offset_of(p.initial_state, sequence.state, h, 0);
  }
  __device__ float k(int t, int i) const {
    return load_widened<In>(p.k, k_base + t * p.k.stride[1] + i * p.k.stride[3]);
  }
  __device__ float q(int t, int i) const {
    return load_widened<In>(p.q, q_base + t * p.q.stride[1] + i * p.q.stride[3]);
  }
  __device__ float v(int t, int j) const {
    return load_widened<In>(p.v, v_base + t * p.v.stride[1] + j * p.v.stride[3]);
  }
  /// Eight consecutive channels i … i + 7 of token t.
  __device__ void k_eight(int t, int i, float (&out)[8]) const {
    load_eight<In>(p.k, k_base + t * p.k.stride[1] + i * p.k.stride[3], p.k.stride[3], out);
  }
  __device__ void q_eight(int t, int i, float (&out)[8]) const {
    load_eight<In>(p.q, q_base + t * p.q.stride[1] + i * p.q.stride[3], p.q.stride[3], out);
  }
  __device__ void kappa_eight(int t, int i, float (&out)[8]) const {
    load_eight<In>(p.kappa, kappa_base + t * p.kappa.stride[1] + i * p.kappa.stride[3], p.kappa.stride[3], out);
  }
  __device__ void v_eight(int t, int j, float (&out)[8]) const {
    load_eight<In>(p.v, v_base + t * p.v.stride[1] + j * p.v.stride[3], p.v.stride[3], out);
  }
  /// A gate per channel: channels i … i + 7 of token t.
  __device__ void g_eight(int t, int i, float (&out)[8]) const {
    load_eight<In>(p.g, g_base + t * p.g.stride[1] + i * p.g.stride[3], p.g.stride[3], out);
  }
  /// Whether the write key is a tensor of its own (κ_t: the two-key rule), not k_t.
  __device__ bool writes_kappa() const { return p.rule == delta_rule_kind::two_key; }
  /// The write key: κ_t for the two-key rule, else k_t.
  __device__ float w(int t, int i) const {
    return writes_kappa() ? load_widened<In>(p.kappa, kappa_base + t * p.kappa.stride[1] + i * p.kappa.stride[3])
                          : k(t, i);
  }
  __device__ float beta(int t) const {
    return p.rule == delta_rule_kind::beta_form ? load_widened<In>(p.beta, beta_base + t * p.beta.stride[1]) : 1.0f;
  }
  __device__ float g(int t, int i) const {
    if (p.gate == delta_rule_gate::per_head) return load_widened<In>(p.g, g_base + t * p.g.stride[1]);
    if (p.gate == delta_rule_gate::per_channel)
      return load_widened<In>(p.g, g_base + t * p.g.stride[1] + i * p.g.stride[3]);
    return 0.0f;
  }
  __device__ float initial(int i, int j) const {
    return p.initial_state.data ? load_widened<In>(p.initial_state, initial_base + i * p.initial_state.stride[2] +
                                                                        j * p.initial_state.stride[3])
                                : 0.0f;
  }
};

/// Shared-memory rows are padded by 16 bytes, so that the 16 rows of a tensor-core tile fall in
/// different banks (an unpadded row of 128 bfloat16 puts all 16 in the same ones).
constexpr int pad_bf16 = 8, pad_f32 = 4;
/// A and the scores (binary32, C x C) and 𝒯 (bfloat16) in the prepare launch.
constexpr int ld_scores = chunk + pad_f32, ld_inverse = chunk + pad_bf16;

/// The workspace, per (value head h, chunk g of the problem's NC: delta_rule_chunk_map, sequence by
/// sequence), at index hc = h·NC + g, so that a sequence's chunks are consecutive; rows past the chunk's
/// last token are zero:
///   W [C, K] bf16: bf(𝒯X);  TY [C, V] binary32: 𝒯Y (GLA: v);  carry_keys [C, K] bf16:
///   bf(w ⊙ Γ_last Γ⁻¹);  last [K] binary32: Γ_last;  Q [C, K] bf16: bf(Γτq);  P [C, C] bf16: the
///   scores bf((Γτq)(Γ⁻¹w)ᵀ), causal;  U [V, C] bf16: bf(Ũ)ᵀ;  S [V, K] bf16: bf(chunk-start S)ᵀ
///   (transposed: the state launch holds Sᵀ and Ũᵀ in registers, and stores them as it holds them);
/// with cu_seqlens, the chunk map's table last (N + 1 delta_rule_sequence_start).
struct workspace_layout {
  std::vector<delta_rule_sequence_start> host_starts;  // delta_rule_sequence_starts(p)
  long long chunks = 0, W = 0, TY = 0, carry_keys = 0, last = 0, Q = 0, P = 0, U = 0, S = 0, starts = 0, total = 0;
  explicit workspace_layout(const delta_rule_problem& p) : host_starts(delta_rule_sequence_starts(p)) {
    chunks = delta_rule_chunks(p, host_starts, nullptr).total_chunks;
    const long long R = static_cast<long long>(p.heads) * chunks, K = p.key_dim, V = p.value_dim;
    carver<256, long long> c;
    W = c.take(R * chunk * K * 2);
    TY = c.take(R * chunk * V * 4);
    carry_keys = c.take(R * chunk * K * 2);
    last = c.take(R * K * 4);
    Q = c.take(R * chunk * K * 2);
    P = c.take(R * chunk * chunk * 2);
    U = c.take(R * chunk * V * 2);
    S = c.take(R * K * V * 2);
    starts = c.take(static_cast<long long>(host_starts.size() * sizeof(delta_rule_sequence_start)));
    total = c.at;
  }
};

struct workspace_views {
  bf16_t* W;
  float* TY;
  bf16_t* carry_keys;
  float* last;
  bf16_t* Q;
  bf16_t* P;
  bf16_t* U;
  bf16_t* S;
  delta_rule_sequence_start* starts;  // null without cu_seqlens
  workspace_views(const workspace_layout& L, void* base) {
    auto* bytes = static_cast<unsigned char*>(base);
    W = reinterpret_cast<bf16_t*>(bytes + L.W);
    TY = reinterpret_cast<float*>(bytes + L.TY);
    carry_keys = reinterpret_cast<bf16_t*>(bytes + L.carry_keys);
    last = reinterpret_cast<float*>(bytes + L.last);
    Q = reinterpret_cast<bf16_t*>(bytes + L.Q);
    P = reinterpret_cast<bf16_t*>(bytes + L.P);
    U = reinterpret_cast<bf16_t*>(bytes + L.U);
    S = reinterpret_cast<bf16_t*>(bytes + L.S);
    starts = L.host_starts.empty() ? nullptr : reinterpret_cast<delta_rule_sequence_start*>(bytes + L.starts);
  }
};

/// Chunk hc's place (hc = h·NC + g, above): its value head, its sequence, its first token in the
/// sequence and its number of tokens.
struct chunk_place {
  long long h = 0, hc = 0;
  delta_rule_sequence sequence;
  int c0 = 0, n = 0;
  __device__ chunk_place(const delta_rule_chunk_map& map, long long chunk_index) : hc(chunk_index) {
    h = hc / map.total_chunks;
    const long long g = hc % map.total_chunks;
    sequence = map.sequence(map.sequence_of_chunk(g));
    c0 = static_cast<int>(g - sequence.first_chunk) * chunk;
    n = sequence.tokens - c0 < chunk ? sequence.tokens - c0 : chunk;
  }
};

/// Column j of 𝒯 = (I + A)⁻¹ (A strictly lower, C x C, leading dimension ld_scores; rows past n zero)
/// by forward substitution in binary32, 𝒯_tj = −Σ_{m=j}^{t−1} A_tm 𝒯_mj with fma and m rising (the
/// twin's order), written rounded to bfloat16 into Tb (leading dimension ld_inverse) and kept in binary32
/// in Tf (the column as a row: Tf[j·ld_scores + m], so that a thread reads its own four entries in one
/// 16-byte load and a warp's loads fall in different banks).
/// The rows are taken sixteen at a time. A block's sixteen sums stay in registers: first the terms of
/// the earlier blocks' rows m (already known, read back from Tf), then, right-looking inside the block,
/// each entry as soon as it is known enters the later rows' sums. Either way each row's sum adds its
/// terms in the order m = j, j + 1, …: the same bits as the row-by-row order, with a chain of dependent
/// operations C long instead of C(C − 1)/2 and sixteen sums live instead of C (no spill). The terms
/// m < j are skipped, not added as zeros.
__device__ __forceinline__ void unit_lower_inverse_column(const float* A, int j, int n, float* Tf, bf16_t* Tb) {
  float* column_out = Tf + j * ld_scores;
  const int first = (j & ~31) & ~3;  // the warp's first column, rounded down to a group of four
#pragma unroll
  for (int b0 = 0; b0 < chunk; b0 += 16) {
    float s[16];
#pragma unroll
    for (int r = 0; r < 16; ++r) s[r] = 0.0f;
    // The earlier blocks' terms, four rows m at a time (the warp's columns j below b0 only).
    for (int m0 = first; m0 < b0; m0 += 4) {
      const float4 column = *reinterpret_cast<const float4*>(column_out + m0);
#pragma unroll
      for (int r = 0; r < 16; ++r) {
        const float4 a = *reinterpret_cast<const float4*>(A + (b0 + r) * ld_scores + m0);
        if (m0 >= j) s[r] = fma_rn(a.x, column.x, s[r]);
        if (m0 + 1 >= j) s[r] = fma_rn(a.y, column.y, s[r]);
        if (m0 + 2 >= j) s[r] = fma_rn(a.z, column.z, s[r]);
        if (m0 + 3 >= j) s[r] = fma_rn(a.w, column.w, s[r]);
      }
    }
    if (b0 + 16 <= first) {  // the whole block above the warp's columns: zeros
#pragma unroll
      for (int r = 0; r < 16; ++r) {
        column_out[b0 + r] = 0.0f;
        Tb[(b0 + r) * ld_inverse + j] = 0;
      }
      continue;
    }
    // Inside the block, right-looking, four rows m at a time.
#pragma unroll
    for (int q0 = 0; q0 < 16; q0 += 4) {
      float column[4];  // 𝒯_mj, m = b0 + q0 … b0 + q0 + 3
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int m = b0 + q0 + u;
#pragma unroll
        for (int w = 0; w < u; ++w)
          if (b0 + q0 + w >= j) s[q0 + u] = fma_rn(A[m * ld_scores + b0 + q0 + w], column[w], s[q0 + u]);
        column[u] = m < n ? (m == j ? 1.0f : (m > j ? -s[q0 + u] : 0.0f)) : 0.0f;
        Tb[m * ld_inverse + j] = bf16_bits_of(column[u]);
      }
      *reinterpret_cast<float4*>(column_out + b0 + q0) = make_float4(column[0], column[1], column[2], column[3]);
#pragma unroll
      for (int r = q0 + 4; r < 16; ++r) {
        const float4 a = *reinterpret_cast<const float4*>(A + (b0 + r) * ld_scores + b0 + q0);
        if (b0 + q0 >= j) s[r] = fma_rn(a.x, column[0], s[r]);
        if (b0 + q0 + 1 >= j) s[r] = fma_rn(a.y, column[1], s[r]);
        if (b0 + q0 + 2 >= j) s[r] = fma_rn(a.z, column[2], s[r]);
        if (b0 + q0 + 3 >= j) s[r] = fma_rn(a.w, column[3], s[r]);
      }
    }
  }
}

/// Eight numbers rounded to bfloat16 (bf16_bits_of, two a conversion) in one vector store.
__device__ __forceinline__ void store_eight(bf16_t* to, const float (&x)[8]) {
  *reinterpret_cast<uint4*>(to) =
      make_uint4(bf16_pair(x[0], x[1]), bf16_pair(x[2], x[3]), bf16_pair(x[4], x[5]), bf16_pair(x[6], x[7]));
}

/// Shared memory of the prepare launch (bytes) for key size K.
struct prepare_shared {
  int scratch, X, Tb, Ub, kg, kn, qg, beta, last, total;
  __host__ __device__ explicit prepare_shared(int K) {
    carver<128> c;
    const int w_floats = chunk * (K + pad_f32), scores_floats = 2 * chunk * ld_scores;
    // The summed log gates, then A and the scores, then W.
    scratch = c.take((w_floats > scores_floats ? w_floats : scores_floats) * 4);
    // X = β Γ k from the operands until it moves into Γk's place (once A is computed); then 𝒯 and Y's
    // blocks of value columns in the same room (Tb's bytes are a multiple of 128: Ub stays aligned).
    const int tb_bytes = chunk * ld_inverse * 2, ub_bytes = chunk * (output_value_block + pad_bf16) * 2,
              x_bytes = chunk * (K + pad_bf16) * 2;
    X = Tb = c.take(tb_bytes + ub_bytes > x_bytes ? tb_bytes + ub_bytes : x_bytes);
    Ub = Tb + tb_bytes;
    kg = c.take(chunk * (K + pad_bf16) * 2);  // Γk, then X
    kn = c.take(chunk * (K + pad_bf16) * 2);  // Γ⁻¹w
    qg = c.take(chunk * (K + pad_bf16) * 2);  // Γτq
    beta = c.take(chunk * 4);
    last = c.take(K * 4);  // Γ_last
    total = c.at;
  }
};

/// The prepare launch's blocks have 8 warps: its phases are short and separated by barriers, so it needs
/// many warps to cover the latency of its loads; two blocks fit on an SM.
constexpr int prepare_warps = 8, prepare_threads = 32 * prepare_warps;

#ifdef KALMAN_ORACLE_DELTA_RULE_PREPARE_CLOCKS
/// Benchmark builds only (docs/kernels.md, "Where the prepare launch's time goes"): thread 0 of each of
/// the first prepare_clock_blocks blocks writes clock64() at the start, after each barrier and at the end.
constexpr int prepare_clock_marks = 12, prepare_clock_blocks = 16384;
__device__ long long prepare_clocks[prepare_clock_blocks * prepare_clock_marks];
#define KALMAN_ORACLE_PREPARE_MARK(i)                                     \
  do {                                                                    \
    if (threadIdx.x == 0 && blockIdx.x < prepare_clock_blocks)            \
      prepare_clocks[blockIdx.x * prepare_clock_marks + (i)] = clock64(); \
  } while (0)
#else
#define KALMAN_ORACLE_PREPARE_MARK(i) \
  do {                                \
  } while (0)
#endif

/// A strongly decaying chunk's A (before β) and scores, per pair m <= t off the tensor cores (the twin's
/// association, twin/delta_rule_chunked_twin.hpp): ρ_tmi = e^{G_ti − G_mi}, z = bf(ρ_tmi w_mi),
/// A_tm = Σ_i bf(k_ti) z, scores_tm = Σ_i bf(τq_ti) z, binary32 sums in channel order; pairs past the
/// chunk or above the diagonal get 0. The summed gates G share A's room, so they are first copied to
/// `gates` (the room of Γ⁻¹w and Γτq, which such a chunk does not use: 2C(K + 8) bf16 ≥ CK floats).
/// Taken only where e^{−G} would overflow: no fast path. Written without per-thread arrays or calls:
/// versions that held the pairs in registers (the launch at 128 registers, from 115), in local memory,
/// or behind a __noinline__ call each slowed the prepare launch by 4% to 37% on the H200 though no
/// chunk took this path.
template <class In>
__device__ __forceinline__ void strongly_decaying_pairs(const reader<In>& in, const delta_rule_problem& p,
                                                        const float* G, int ldg, float* gates, int c0, int n, float* A,
                                                        float* scores) {
  const int K = p.key_dim;
  const bool per_channel = p.gate == delta_rule_gate::per_channel;
  const int width = per_channel ? K : 1;  // a gate per channel, or one per head (no gate: never here)
  for (int x = threadIdx.x; x < chunk * width; x += prepare_threads)
    gates[x] = per_channel ? G[(x / K) * ldg + x % K] : G[x];
  __syncthreads();
  for (int x = threadIdx.x; x < chunk * chunk; x += prepare_threads) {
    const int t = x / chunk, m = x % chunk;
    float a = 0.0f, s = 0.0f;
    if (m <= t && t < n)
      for (int i0 = 0; i0 < K; i0 += 8) {
        float key[8], query[8], write[8];
        in.k_eight(c0 + t, i0, key);
        in.q_eight(c0 + t, i0, query);
        if (in.writes_kappa())
          in.kappa_eight(c0 + m, i0, write);
        else
          in.k_eight(c0 + m, i0, write);
        for (int u = 0; u < 8; ++u) {
          const float gt = gates[per_channel ? t * K + i0 + u : t], gm = gates[per_channel ? m * K + i0 + u : m];
          const float z = round_to_bf16(mul_rn(exp_f32(add_rn(gt, -gm)), write[u]));
          a = fma_rn(round_to_bf16(key[u]), z, a);
          s = fma_rn(round_to_bf16(mul_rn(p.tau, query[u])), z, s);
        }
      }
    A[t * ld_scores + m] = a, scores[t * ld_scores + m] = s;
  }
}

template <class In, int KD, int VD>
__global__ void __launch_bounds__(prepare_threads, 2)
    delta_rule_prepare_kernel(const delta_rule_problem p, const workspace_views ws, const delta_rule_chunk_map map) {
  extern __shared__ __align__(128) unsigned char smem[];
  KALMAN_ORACLE_PREPARE_MARK(0);
  const int K = known_or(KD, p.key_dim), V = known_or(VD, p.value_dim), tid = threadIdx.x, ldk = K + pad_bf16,
            ldg = K + pad_f32;
  const chunk_place place(map, blockIdx.x);
  const long long hc = place.hc;
  const int c0 = place.c0, n = place.n;
  const reader<In> in(p, place.sequence, place.h);
  const bool erases = p.rule != delta_rule_kind::gla;
  const prepare_shared L(K);
  float* scratch = reinterpret_cast<float*>(smem + L.scratch);
  float* G = scratch;  // the summed log gates: C x ldg (a gate per channel) or C (per head)
  float* A = scratch;
  float* scores = scratch + chunk * ld_scores;
  bf16_t* Tb = reinterpret_cast<bf16_t*>(smem + L.Tb);
  bf16_t* Xs = reinterpret_cast<bf16_t*>(smem + L.X);
  bf16_t* kg = reinterpret_cast<bf16_t*>(smem + L.kg);
  bf16_t* kn = reinterpret_cast<bf16_t*>(smem + L.kn);
  bf16_t* qg = reinterpret_cast<bf16_t*>(smem + L.qg);
  bf16_t* Ub = reinterpret_cast<bf16_t*>(smem + L.Ub);
  float* beta = reinterpret_cast<float*>(smem + L.beta);
  float* last = reinterpret_cast<float*>(smem + L.last);
  const int groups = K / 8;  // eight key channels a thread-step: one 16-byte load or store

  if (tid < chunk) beta[tid] = tid < n ? in.beta(c0 + tid) : 0.0f;
  if (p.gate == delta_rule_gate::per_channel) {
    for (int x = tid; x < chunk * groups; x += prepare_threads) {
      const int t = x / groups, i0 = x % groups * 8;
      float g[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      if (t < n) in.g_eight(c0 + t, i0, g);
#pragma unroll
      for (int u = 0; u < 8; ++u) G[t * ldg + i0 + u] = g[u];
    }
  } else if (p.gate == delta_rule_gate::per_head && tid < chunk) {
    G[tid] = tid < n ? in.g(c0 + tid, 0) : 0.0f;
  }
  __syncthreads();
  KALMAN_ORACLE_PREPARE_MARK(1);
  // The log gates summed in token order from 0, in place (the twin's order): channel i's by thread i,
  // a head's by thread 0.
  const bool per_channel = p.gate == delta_rule_gate::per_channel;
  if (p.gate != delta_rule_gate::none && tid < (per_channel ? K : 1)) {
    float* column = G + tid;
    const int step = per_channel ? ldg : 1;
    float sum = 0.0f;
    for (int t0 = 0; t0 < n; t0 += load_batch) {
      float g[load_batch];
#pragma unroll
      for (int u = 0; u < load_batch; ++u) g[u] = t0 + u < n ? column[(t0 + u) * step] : 0.0f;
#pragma unroll
      for (int u = 0; u < load_batch; ++u)
        if (t0 + u < n) column[(t0 + u) * step] = sum = add_rn(sum, g[u]);
    }
  }
  __syncthreads();
  KALMAN_ORACLE_PREPARE_MARK(2);
  // Σ_{s≤t} g_si: a per-head gate is the same for every channel; no gate, zero.
  const auto gate_sum = [&](int t, int i) {
    return per_channel ? G[t * ldg + i] : p.gate == delta_rule_gate::per_head ? G[t] : 0.0f;
  };
  if (tid < K) {
    last[tid] = exp_f32(gate_sum(n - 1, tid));
    ws.last[hc * K + tid] = last[tid];
  }
  // Factored decays (Γk, Γ⁻¹w on the tensor cores) unless some channel decays past e^{floor} over the
  // chunk (strong decay, where e^{−G} overflows: then per pair, below; models/delta_rule_chunk.cuh).
  const bool factored = __syncthreads_and(tid >= K || gate_sum(n - 1, tid) >= delta_rule_factored_log_decay_floor);
  KALMAN_ORACLE_PREPARE_MARK(3);
  // Operands, a thread eight channels of a token: Γk, Γ⁻¹w (w = κ or k), Γτq, the carry's keys
  // w ⊙ Γ_last Γ⁻¹ and X = β Γ k (rounded from the unrounded Γk, as the twin does); bf(Γτq) and the keys
  // also to the workspace, X into 𝒯's room in shared memory (GLA: into W's place in the workspace).
  // Compiled twice (factored or not), so that the factored chunks run exactly the loop they ran before
  // strongly decaying chunks had their own path.
  const auto operands = [&](auto factored_tag) {
    constexpr bool factored = decltype(factored_tag)::value;
    for (int x = tid; x < chunk * groups; x += prepare_threads) {
      const int t = x / groups, i0 = x % groups * 8;
      float key[8] = {0, 0, 0, 0, 0, 0, 0, 0}, write[8], query[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      if (t < n) {
        in.k_eight(c0 + t, i0, key);
        in.q_eight(c0 + t, i0, query);
      }
      if (t < n && in.writes_kappa()) {
        in.kappa_eight(c0 + t, i0, write);
      } else {
#pragma unroll
        for (int u = 0; u < 8; ++u) write[u] = key[u];
      }
      // The decays: none without a gate (Γ = Γ⁻¹ = 1, what e^0 gives), one pair a token for a gate per head.
      // A strongly decaying chunk forms no Γ⁻¹: its carry keys take e^{G_last − G_t} (`inverse` holds that).
      float gamma[8], inverse[8];
      if (p.gate == delta_rule_gate::per_channel) {
#pragma unroll
        for (int u = 0; u < 8; ++u) {
          const float sum = t < n ? G[t * ldg + i0 + u] : 0.0f;
          gamma[u] = exp_f32(sum);
          if constexpr (factored)
            inverse[u] = exp_f32(-sum);
          else
            inverse[u] = exp_f32(add_rn(G[(n - 1) * ldg + i0 + u], -sum));
        }
      } else {
        const float sum = p.gate == delta_rule_gate::per_head && t < n ? G[t] : 0.0f;
        const float one_gamma = sum == 0.0f ? 1.0f : exp_f32(sum);
        float one_inverse;
        if constexpr (factored)
          one_inverse = sum == 0.0f ? 1.0f : exp_f32(-sum);
        else
          one_inverse = exp_f32(add_rn(gate_sum(n - 1, 0), -sum));
#pragma unroll
        for (int u = 0; u < 8; ++u) gamma[u] = one_gamma, inverse[u] = one_inverse;
      }
      float key_g[8], write_g[8], query_g[8], carry_key[8], X[8];
#pragma unroll
      for (int u = 0; u < 8; ++u) {
        const float gk = mul_rn(gamma[u], key[u]);
        const bool real = t < n;  // rows past the chunk's last token are zero
        key_g[u] = real ? gk : 0.0f;
        X[u] = real ? mul_rn(beta[t], gk) : 0.0f;
        write_g[u] = real && factored ? mul_rn(inverse[u], write[u]) : 0.0f;
        query_g[u] = real ? mul_rn(gamma[u], mul_rn(p.tau, query[u])) : 0.0f;
        if constexpr (factored)
          carry_key[u] = real ? mul_rn(mul_rn(last[i0 + u], inverse[u]), write[u]) : 0.0f;
        else
          carry_key[u] = real ? mul_rn(inverse[u], write[u]) : 0.0f;
      }
      store_eight(kg + t * ldk + i0, key_g);
      store_eight(kn + t * ldk + i0, write_g);
      store_eight(qg + t * ldk + i0, query_g);
      const long long row = (hc * chunk + t) * K + i0;
      store_eight(ws.Q + row, query_g);
      store_eight(ws.carry_keys + row, carry_key);
      if (erases)
        store_eight(Xs + t * ldk + i0, X);
      else
        store_eight(ws.W + row, X);  // GLA: the state launch copies W but uses none of it; written all the same
    }
  };
  if (factored)
    operands(std::true_type{});
  else
    operands(std::false_type{});
  __syncthreads();
  KALMAN_ORACLE_PREPARE_MARK(4);
  if (factored) {
    // A = (Γk)(Γ⁻¹w)ᵀ (erasing rules) and the scores (Γτq)(Γ⁻¹w)ᵀ, the lower tiles, on the tensor cores.
    for_each_tile<prepare_warps>(chunk, 2 * chunk, [&](int t0, int m0) {
      const bool is_scores = m0 >= chunk;
      const int m = is_scores ? m0 - chunk : m0;
      frag_acc acc;
      wmma::fill_fragment(acc, 0.0f);
      if (m <= t0 && (is_scores || erases))
        mma_steps<frag_a_row, frag_b_col>(acc, (is_scores ? qg : kg) + t0 * ldk, ldk, 16, kn + m * ldk, ldk, 16,
                                          K / 16);
      wmma::store_matrix_sync((is_scores ? scores : A) + t0 * ld_scores + m, acc, ld_scores, wmma::mem_row_major);
    });
  } else {
    strongly_decaying_pairs(in, p, G, ldg, reinterpret_cast<float*>(kn), c0, n, A, scores);
  }
  __syncthreads();
  KALMAN_ORACLE_PREPARE_MARK(5);
  // β ⊙ A, strictly lower; P = bf(scores), causal with the diagonal, to the workspace: eight a thread-step.
  for (int x = tid; x < chunk * chunk / 8; x += prepare_threads) {
    const int t = x / (chunk / 8), m0 = x % (chunk / 8) * 8;
    float P[8];
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      const int m = m0 + u;
      A[t * ld_scores + m] = (m < t && t < n) ? mul_rn(beta[t], A[t * ld_scores + m]) : 0.0f;
      P[u] = m <= t ? scores[t * ld_scores + m] : 0.0f;
    }
    store_eight(ws.P + (hc * chunk + t) * chunk + m0, P);
  }
  // X into Γk's place (A is computed): its room is 𝒯's and Y's from the solve on.
  if (erases)
    for (int x = tid; x < chunk * groups; x += prepare_threads) {
      const int offset = (x / groups) * ldk + x % groups * 8;
      *reinterpret_cast<uint4*>(kg + offset) = *reinterpret_cast<const uint4*>(Xs + offset);
    }
  float* TY_out = ws.TY + hc * chunk * V;
  if (!erases) {
    // GLA: 𝒯 = I and no erasure; the state launch rounds v itself (Ũ = bf(v)).
    const int value_groups = V / 8;
    for (int x = tid; x < chunk * value_groups; x += prepare_threads) {
      const int t = x / value_groups, j0 = x % value_groups * 8;
      float value[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      if (t < n) in.v_eight(c0 + t, j0, value);
      float4* to = reinterpret_cast<float4*>(TY_out + t * V + j0);
      to[0] = make_float4(value[0], value[1], value[2], value[3]);
      to[1] = make_float4(value[4], value[5], value[6], value[7]);
    }
    KALMAN_ORACLE_PREPARE_MARK(11);
    return;
  }
  __syncthreads();
  KALMAN_ORACLE_PREPARE_MARK(6);
  // Warps 0-1 solve (one thread a column of 𝒯, the column in binary32 in the scores' place, which P has
  // left); meanwhile warps 2-7 load Y's first value columns, and its second block of value columns into
  // bf(Γτq)'s place where that has room (K >= BV; bf(Γτq) is in the workspace already).
  const int BV = output_block_of(V), ldu = BV + pad_bf16;
  const auto fill_values = [&](bf16_t* to, int v0, int first, int stride) {
    const int value_groups = BV / 8;
    for (int x = first; x < chunk * value_groups; x += stride) {
      const int t = x / value_groups, j0 = x % value_groups * 8;
      float value[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      if (t < n) in.v_eight(c0 + t, v0 + j0, value);
      float Y[8];
#pragma unroll
      for (int u = 0; u < 8; ++u) Y[u] = t < n ? mul_rn(beta[t], value[u]) : 0.0f;
      store_eight(to + t * ldu + j0, Y);
    }
  };
  bf16_t* Ub_second = qg;
  const bool second_filled_early = V > BV && K >= BV;
  if (tid < chunk) {
    unit_lower_inverse_column(A, tid, n, scores, Tb);
  } else {
    fill_values(Ub, 0, tid - chunk, prepare_threads - chunk);
    if (second_filled_early) fill_values(Ub_second, BV, tid - chunk, prepare_threads - chunk);
  }
  __syncthreads();
  KALMAN_ORACLE_PREPARE_MARK(7);
  // W = 𝒯X (C x K) into scratch, then bf(W) to the workspace.
  const int ldw = K + pad_f32;
  for_each_tile<prepare_warps>(chunk, K, [&](int t0, int i0) {
    frag_acc acc;
    wmma::fill_fragment(acc, 0.0f);
    mma_steps<frag_a_row, frag_b_row>(acc, Tb + t0 * ld_inverse, ld_inverse, 16, kg + i0, ldk, 16 * ldk, t0 / 16 + 1);
    wmma::store_matrix_sync(scratch + t0 * ldw + i0, acc, ldw, wmma::mem_row_major);
  });
  __syncthreads();
  KALMAN_ORACLE_PREPARE_MARK(8);
  for (int x = tid; x < chunk * groups; x += prepare_threads) {
    const int t = x / groups, i0 = x % groups * 8;
    float W[8];
#pragma unroll
    for (int u = 0; u < 8; ++u) W[u] = scratch[t * ldw + i0 + u];
    store_eight(ws.W + (hc * chunk + t) * K + i0, W);
  }
  // 𝒯Y, Y = bf(β v), by blocks of value columns, straight to the workspace (binary32).
  for (int v0 = 0; v0 < V; v0 += BV) {
    const bool early = v0 == BV && second_filled_early;
    if (v0 > 0 && !early) {
      fill_values(Ub, v0, tid, prepare_threads);
      __syncthreads();
    }
    const bf16_t* Y = early ? Ub_second : Ub;
    for_each_tile<prepare_warps>(chunk, BV, [&](int t0, int j0) {
      frag_acc acc;
      wmma::fill_fragment(acc, 0.0f);
      mma_steps<frag_a_row, frag_b_row>(acc, Tb + t0 * ld_inverse, ld_inverse, 16, Y + j0, ldu, 16 * ldu, t0 / 16 + 1);
      wmma::store_matrix_sync(TY_out + t0 * V + v0 + j0, acc, V, wmma::mem_row_major);
    });
    __syncthreads();
    KALMAN_ORACLE_PREPARE_MARK(v0 / BV < 2 ? 9 + v0 / BV : 10);
  }
  KALMAN_ORACLE_PREPARE_MARK(11);
}

/// Shared memory of the state launch (bytes) for key size K and blocks of Warps warps (16 value columns
/// a warp): the operands of Stages chunks (this chunk's and the next ones', arriving by cp.async). The
/// state itself is in registers.
template <int Warps, int Stages>
struct state_shared {
  static constexpr int value_columns = 16 * Warps, ld_ty = value_columns + pad_f32;
  int W, keys, TY, last, total;
  __host__ __device__ explicit state_shared(int K) {
    carver<128> c;
    W = c.take(Stages * chunk * (K + pad_bf16) * 2);
    keys = c.take(Stages * chunk * (K + pad_bf16) * 2);
    TY = c.take(Stages * chunk * ld_ty * 4);
    last = c.take(Stages * K * 4);
    total = c.at;
  }
};

/// Starts copying chunk hc's operands (bf(W), the carry's keys: C x K; 𝒯Y's columns v0 … v0 + BV − 1
/// below V, rows of ld_ty floats; the decay Γ_last: K) into one buffer of the state launch's shared
/// memory, 16 bytes a copy, the copying threads first, first + Stride, … in turn.
template <int Stride, int BV, int ld_ty>
__device__ __forceinline__ void fetch_chunk_operands(const workspace_views& ws, long long hc, int K, int V, int v0,
                                                     int first, bf16_t* W, bf16_t* keys, float* TY, float* last) {
  const int ldk = K + pad_bf16, row_copies = K / 8;  // 8 bfloat16 a copy
  const bf16_t* W_in = ws.W + hc * chunk * K;
  const bf16_t* keys_in = ws.carry_keys + hc * chunk * K;
  for (int x = first; x < chunk * row_copies; x += Stride) {
    const int t = x / row_copies, part = x % row_copies;
    __pipeline_memcpy_async(W + t * ldk + part * 8, W_in + t * K + part * 8, 16);
    __pipeline_memcpy_async(keys + t * ldk + part * 8, keys_in + t * K + part * 8, 16);
  }
  constexpr int ty_copies = BV / 4;  // 4 floats a copy
  const float* TY_in = ws.TY + hc * chunk * V + v0;
  for (int x = first; x < chunk * ty_copies; x += Stride) {
    const int t = x / ty_copies, part = x % ty_copies;
    if (v0 + part * 4 < V) __pipeline_memcpy_async(TY + t * ld_ty + part * 4, TY_in + t * V + part * 4, 16);
  }
  for (int x = first; x < K / 4; x += Stride) __pipeline_memcpy_async(last + x * 4, ws.last + hc * K + x * 4, 16);
  __pipeline_commit();
}

/// The state launch: one block a (sequence, value head, 16·Warps value columns), the chunks in order.
/// Each warp owns 16 value columns j and every key row i of the state, and keeps it transposed, Sᵀ
/// (16 x K), in registers as binary32 mma accumulators (warp_mma.cuh): tile n holds keys 8n … 8n + 7.
/// A chunk, all in the warp's registers but for the operands read from shared memory:
///   Ũᵀ = (𝒯Y)ᵀ − bf(S)ᵀ bf(W)ᵀ   (A = bf(Sᵀ): the state's accumulator pairs rounded; B = bf(W) by
///                                  ldmatrix: W's rows are Wᵀ's columns),
///   Sᵀ' = Sᵀ ⊙ Γ_last + bf(Ũ)ᵀ keys   (A = bf(Ũᵀ): Ũᵀ's accumulator pairs rounded; B = keys by
///                                  ldmatrix.trans),
/// each product from a zero accumulator and the sums after it in binary32, as the twin: the numbers of
/// the earlier shared-memory form (S = Γ_last ⊙ S + (keys)ᵀ bf(Ũ) with WMMA) transposed, the same
/// products summed in the same groups of 16. The workspace gets bf(S)ᵀ and bf(Ũ)ᵀ of each chunk (the
/// output launch reads them as column-major operands). One barrier a chunk: its operands have arrived,
/// and every warp is done with the buffer that the next cp.async overwrites. With Producers > 0 the
/// block has that many more warps, which only copy (warps Warps, Warps + 1, …: other schedulers than
/// the computing warps'), so that the computing warps issue no copies; with 0 every warp copies.
template <class In, int KD, int VD, int Warps, int Producers, int Stages>
__global__ void __launch_bounds__(32 * (Warps + Producers))
    delta_rule_state_kernel(const delta_rule_problem p, const workspace_views ws, const delta_rule_chunk_map map) {
  static_assert(Stages >= 2, "the chunk being computed and at least one in flight");
  using namespace warp_mma;
  using layout = state_shared<Warps, Stages>;
  constexpr int BV = layout::value_columns, ld_ty = layout::ld_ty;
  constexpr int copy_stride = 32 * (Producers > 0 ? Producers : Warps);
  constexpr int max_tiles = delta_rule_max_key_dim / 8;  // 16 x 8 state tiles along K, at most
  extern __shared__ __align__(128) unsigned char smem[];
  const int K = known_or(KD, p.key_dim), V = known_or(VD, p.value_dim), blocks_v = (V + BV - 1) / BV,
            ldk = K + pad_bf16, tiles = K / 8;
  const long long h = (blockIdx.x / blocks_v) % p.heads;
  const delta_rule_sequence sequence = map.sequence(blockIdx.x / (p.heads * blocks_v));
  const int v0 = static_cast<int>(blockIdx.x % blocks_v) * BV, chunks = sequence.chunks;
  const reader<In> in(p, sequence, h);
  const bool erases = p.rule != delta_rule_kind::gla;
  const layout L(K);
  const auto W_of = [&](int buffer) { return reinterpret_cast<bf16_t*>(smem + L.W) + buffer * chunk * ldk; };
  const auto keys_of = [&](int buffer) { return reinterpret_cast<bf16_t*>(smem + L.keys) + buffer * chunk * ldk; };
  const auto TY_of = [&](int buffer) { return reinterpret_cast<float*>(smem + L.TY) + buffer * chunk * ld_ty; };
  const auto last_of = [&](int buffer) { return reinterpret_cast<float*>(smem + L.last) + buffer * K; };

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c2 = lane % 4 * 2;
  const int j_warp = 16 * warp, j = v0 + j_warp + g;  // the lane's value columns: j and j + 8
  // A warp past V (V not a multiple of the block's columns) computes nothing but takes part in the
  // block's copies and barriers; so do the producer warps.
  const bool active = warp < Warps && v0 + j_warp < V;
  const bool copies = Producers == 0 || warp >= Warps;
  const int copy_first = static_cast<int>(threadIdx.x) - (Producers > 0 ? 32 * Warps : 0);
  const long long hc0 = h * map.total_chunks + sequence.first_chunk;

  // Sᵀ: S[n][0], S[n][1] at (j, i = 8n + c2, +1), S[n][2], S[n][3] at (j + 8, the same i).
  float S[max_tiles][4];
#pragma unroll
  for (int n = 0; n < max_tiles; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      S[n][e] = n < tiles && active ? in.initial(8 * n + c2 + (e & 1), j + (e >> 1) * 8) : 0.0f;
  // bf(Sᵀ) as A operands: Sb[s] covers keys 16s … 16s + 15 (tiles 2s, 2s + 1). Written to the workspace
  // for the chunk it starts ([V, K] rows: (j, i) at j·K + i).
  std::uint32_t Sb[max_tiles / 2][4];
  const auto round_state = [&](long long hc) {
    bf16_t* to = active && hc < hc0 + chunks ? ws.S + hc * K * V : nullptr;
#pragma unroll
    for (int s = 0; s < max_tiles / 2; ++s) {
      if (2 * s >= tiles) break;
      accumulator_pairs_as_a(Sb[s], S[2 * s], S[2 * s + 1]);
      if (to == nullptr) continue;
      const int i = 16 * s + c2;
      *reinterpret_cast<std::uint32_t*>(to + j * K + i) = Sb[s][0];
      *reinterpret_cast<std::uint32_t*>(to + (j + 8) * K + i) = Sb[s][1];
      *reinterpret_cast<std::uint32_t*>(to + j * K + i + 8) = Sb[s][2];
      *reinterpret_cast<std::uint32_t*>(to + (j + 8) * K + i + 8) = Sb[s][3];
    }
  };
  round_state(hc0);

  // One cp.async group a chunk (empty past the last), Stages − 1 of them in flight ahead of the chunk
  // being computed.
  const auto fetch = [&](int c) {
    const int buffer = c % Stages;
    if (c < chunks && copies)
      fetch_chunk_operands<copy_stride, BV, ld_ty>(ws, hc0 + c, K, V, v0, copy_first, W_of(buffer), keys_of(buffer),
                                                   TY_of(buffer), last_of(buffer));
    else
      __pipeline_commit();
  };
  for (int c = 0; c < Stages - 1; ++c) fetch(c);
  for (int c = 0; c < chunks; ++c) {
    const long long hc = hc0 + c;
    const int buffer = c % Stages;
    __pipeline_wait_prior(Stages - 2);
    __syncthreads();
    // The buffer of chunk c + Stages − 1 was last read in chunk c − 1, which every warp has finished.
    fetch(c + Stages - 1);
    if (!active) continue;
    const bf16_t* W = W_of(buffer);
    const bf16_t* keys = keys_of(buffer);
    const float* TY = TY_of(buffer) + j_warp + g;  // (t, the lane's column j) at TY[t·ld_ty]
    const float* last = last_of(buffer);
    // Ũᵀ, two token tiles (16 tokens) at a time, rounded into the A operands of the carry: Ua[r] covers
    // tokens 16r … 16r + 15. bf(Ũ)ᵀ to the workspace ([V, C] rows: (j, t) at j·C + t).
    std::uint32_t Ua[chunk / 16][4];
    bf16_t* U_out = ws.U + hc * chunk * V;
#pragma unroll
    for (int r = 0; r < chunk / 16; ++r) {
      float u[2][4];
#pragma unroll
      for (int half = 0; half < 2; ++half)
#pragma unroll
        for (int e = 0; e < 4; ++e) u[half][e] = TY[(16 * r + 8 * half + c2 + (e & 1)) * ld_ty + (e >> 1) * 8];
      if (erases) {
        float product[2][4] = {{0, 0, 0, 0}, {0, 0, 0, 0}};
#pragma unroll
        for (int s = 0; s < max_tiles / 2; ++s) {
          if (2 * s >= tiles) break;
          // Four 8 x 8 blocks of W: tokens 16r + {0, 8} (B's two column tiles) x keys 16s + {0, 8}.
          std::uint32_t w[4];
          load_matrices_x4<false>(w, W + (16 * r + (lane / 16) * 8 + lane % 8) * ldk + 16 * s + (lane / 8) % 2 * 8);
          mma_bf16_16x8x16(product[0], Sb[s], {w[0], w[1]});
          mma_bf16_16x8x16(product[1], Sb[s], {w[2], w[3]});
        }
#pragma unroll
        for (int half = 0; half < 2; ++half)
#pragma unroll
          for (int e = 0; e < 4; ++e) u[half][e] = add_rn(u[half][e], -product[half][e]);
      }
      accumulator_pairs_as_a(Ua[r], u[0], u[1]);
      const int t = 16 * r + c2;
      *reinterpret_cast<std::uint32_t*>(U_out + j * chunk + t) = Ua[r][0];
      *reinterpret_cast<std::uint32_t*>(U_out + (j + 8) * chunk + t) = Ua[r][1];
      *reinterpret_cast<std::uint32_t*>(U_out + j * chunk + t + 8) = Ua[r][2];
      *reinterpret_cast<std::uint32_t*>(U_out + (j + 8) * chunk + t + 8) = Ua[r][3];
    }
    // Sᵀ' = Sᵀ ⊙ Γ_last + bf(Ũ)ᵀ keys, two key tiles (16 keys) at a time.
#pragma unroll
    for (int s = 0; s < max_tiles / 2; ++s) {
      if (2 * s >= tiles) break;
      float product[2][4] = {{0, 0, 0, 0}, {0, 0, 0, 0}};
#pragma unroll
      for (int r = 0; r < chunk / 16; ++r) {
        // Four 8 x 8 blocks of the keys, transposed: tokens 16r + {0, 8} (the k halves) x keys 16s + {0, 8}.
        std::uint32_t k[4];
        load_matrices_x4<true>(k, keys + (16 * r + (lane / 8) % 2 * 8 + lane % 8) * ldk + 16 * s + (lane / 16) * 8);
        mma_bf16_16x8x16(product[0], Ua[r], {k[0], k[1]});
        mma_bf16_16x8x16(product[1], Ua[r], {k[2], k[3]});
      }
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int n = 2 * s + half;
        const float2 decay = *reinterpret_cast<const float2*>(last + 8 * n + c2);
        S[n][0] = add_rn(mul_rn(decay.x, S[n][0]), product[half][0]);
        S[n][1] = add_rn(mul_rn(decay.y, S[n][1]), product[half][1]);
        S[n][2] = add_rn(mul_rn(decay.x, S[n][2]), product[half][2]);
        S[n][3] = add_rn(mul_rn(decay.y, S[n][3]), product[half][3]);
      }
    }
    round_state(hc + 1);
  }
  if (!active) return;
  float* final_state = p.final_state + (sequence.state * p.heads + h) * K * V;
#pragma unroll
  for (int n = 0; n < max_tiles; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      if (n < tiles) final_state[(8 * n + c2 + (e & 1)) * V + j + (e >> 1) * 8] = S[n][e];
}

/// Shared memory of the output launch (bytes) for key size K and BV value columns: bf(Γτq), P, bf(S)ᵀ,
/// bf(Ũ)ᵀ (each row padded), and o staged.
struct output_shared {
  int Q, P, S, U, staged, total;
  __host__ __device__ output_shared(int K, int BV) {
    carver<128> c;
    Q = c.take(chunk * (K + pad_bf16) * 2);
    P = c.take(chunk * ld_inverse * 2);
    S = c.take(BV * (K + pad_bf16) * 2);
    U = c.take(BV * ld_inverse * 2);
    staged = c.take(chunk * (BV + pad_f32) * 4);
    total = c.at;
  }
};

/// Starts copying a rows x cols bfloat16 matrix (leading dimension ld_from in global memory) into
/// shared memory (leading dimension ld_to), 16 bytes a copy.
__device__ __forceinline__ void fetch_matrix(bf16_t* to, int ld_to, const bf16_t* from, long long ld_from, int rows,
                                             int cols) {
  const int row_copies = cols / 8;
  for (int x = threadIdx.x; x < rows * row_copies; x += threads) {
    const int r = x / row_copies, part = x % row_copies;
    __pipeline_memcpy_async(to + r * ld_to + part * 8, from + r * ld_from + part * 8, 16);
  }
}

template <class In, int KD, int VD>
__global__ void __launch_bounds__(threads)
    delta_rule_output_kernel(const delta_rule_problem p, const workspace_views ws, const delta_rule_chunk_map map,
                             const int value_block) {
  extern __shared__ __align__(128) unsigned char smem[];
  const int BV = known_or(VD > 0 ? output_block_of(VD) : 0, value_block);
  const int K = known_or(KD, p.key_dim), V = known_or(VD, p.value_dim), tid = threadIdx.x, blocks_v = V / BV;
  const int ldk = K + pad_bf16, ldo = BV + pad_f32;
  const chunk_place place(map, blockIdx.x / blocks_v);
  const long long hc = place.hc, h = place.h;
  const int v0 = static_cast<int>(blockIdx.x % blocks_v) * BV, c0 = place.c0, n = place.n;
  const output_shared L(K, BV);
  bf16_t* Q = reinterpret_cast<bf16_t*>(smem + L.Q);
  bf16_t* P = reinterpret_cast<bf16_t*>(smem + L.P);
  bf16_t* Sb = reinterpret_cast<bf16_t*>(smem + L.S);
  bf16_t* Ub = reinterpret_cast<bf16_t*>(smem + L.U);
  float* staged = reinterpret_cast<float*>(smem + L.staged);
  // The operands from the workspace, each once per block (the tiles of a warp share rows and columns).
  fetch_matrix(Q, ldk, ws.Q + hc * chunk * K, K, chunk, K);
  fetch_matrix(P, ld_inverse, ws.P + hc * chunk * chunk, chunk, chunk, chunk);
  // bf(S)ᵀ and bf(Ũ)ᵀ, as the state launch wrote them: rows j, K and C wide.
  fetch_matrix(Sb, ldk, ws.S + hc * K * V + v0 * K, K, BV, K);
  fetch_matrix(Ub, ld_inverse, ws.U + hc * chunk * V + v0 * chunk, chunk, BV, chunk);
  __pipeline_commit();
  __pipeline_wait_prior(0);
  __syncthreads();
  // o = bf(Γτq) bf(S) + P bf(Ũ), one accumulator.
  for_each_tile(chunk, BV, [&](int t0, int j0) {
    frag_acc acc;
    wmma::fill_fragment(acc, 0.0f);
    // bf(S) and bf(Ũ) column-major: the workspace holds them transposed (the state launch's registers).
    mma_steps<frag_a_row, frag_b_col>(acc, Q + t0 * ldk, ldk, 16, Sb + j0 * ldk, ldk, 16, K / 16);
    mma_steps<frag_a_row, frag_b_col>(acc, P + t0 * ld_inverse, ld_inverse, 16, Ub + j0 * ld_inverse, ld_inverse, 16,
                                      t0 / 16 + 1);
    wmma::store_matrix_sync(staged + t0 * ldo + j0, acc, ldo, wmma::mem_row_major);
  });
  __syncthreads();
  // Row t at o + t·HV·V: token c0 + t of the sequence, in its batch row.
  float* o = p.o + ((place.sequence.batch_row * p.tokens + place.sequence.first_token + c0) * p.heads + h) * V + v0;
  const long long ld_o = static_cast<long long>(p.heads) * V;
  if (reinterpret_cast<std::uintptr_t>(p.o) % 16 == 0) {  // V and v0 are multiples of 16: o's rows aligned too
    const int quads = BV / 4;
    for (int x = tid; x < n * quads; x += threads) {
      const int t = x / quads, j = x % quads * 4;
      *reinterpret_cast<float4*>(o + t * ld_o + j) = *reinterpret_cast<const float4*>(staged + t * ldo + j);
    }
  } else {
    for (int x = tid; x < n * BV; x += threads) o[(x / BV) * ld_o + x % BV] = staged[(x / BV) * ldo + x % BV];
  }
}

template <class Kernel>
void allow_shared(Kernel kernel, int bytes, const char* name) {
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes), name);
}

template <class In, int KD, int VD, int Warps, int Producers, int Stages>
void launch_state(const delta_rule_problem& p, const workspace_views& ws, const delta_rule_chunk_map& map,
                  cudaStream_t stream) {
  using layout = state_shared<Warps, Stages>;
  const layout L(p.key_dim);
  const auto kernel = delta_rule_state_kernel<In, KD, VD, Warps, Producers, Stages>;
  allow_shared(kernel, L.total, "cudaFuncSetAttribute(delta_rule_state_kernel)");
  const int BV = layout::value_columns, blocks_v = (p.value_dim + BV - 1) / BV;
  const long long blocks = map.sequences * p.heads * blocks_v;
  kernel<<<static_cast<unsigned>(blocks), 32 * (Warps + Producers), L.total, stream>>>(p, ws, map);
  check_cuda(cudaGetLastError(), "delta_rule_state_kernel launch");
}

template <class In, int KD, int VD>
void launch_prepare(const delta_rule_problem& p, const workspace_views& ws, const delta_rule_chunk_map& map,
                    cudaStream_t stream) {
  if (map.total_chunks == 0) return;
  const prepare_shared L(p.key_dim);
  const auto kernel = delta_rule_prepare_kernel<In, KD, VD>;
  allow_shared(kernel, L.total, "cudaFuncSetAttribute(delta_rule_prepare_kernel)");
  const long long blocks = p.heads * map.total_chunks;
  kernel<<<static_cast<unsigned>(blocks), prepare_threads, L.total, stream>>>(p, ws, map);
  check_cuda(cudaGetLastError(), "delta_rule_prepare_kernel launch");
}

template <class In, int KD, int VD>
void launch_output(const delta_rule_problem& p, const workspace_views& ws, const delta_rule_chunk_map& map,
                   cudaStream_t stream) {
  if (map.total_chunks == 0) return;
  const int V = p.value_dim, BV = output_block_of(V);
  const int bytes = output_shared(p.key_dim, BV).total;
  const auto kernel = delta_rule_output_kernel<In, KD, VD>;
  allow_shared(kernel, bytes, "cudaFuncSetAttribute(delta_rule_output_kernel)");
  const long long blocks = p.heads * map.total_chunks * (V / BV);
  kernel<<<static_cast<unsigned>(blocks), threads, bytes, stream>>>(p, ws, map, BV);
  check_cuda(cudaGetLastError(), "delta_rule_output_kernel launch");
}

/// The launches in `which` (all three by default), in order, compiled for K and V (0: any).
template <class In, int KD, int VD>
void launch_sized(const delta_rule_problem& p, void* workspace, const bool (&which)[3]) {
  const workspace_layout layout(p);
  const workspace_views ws(layout, workspace);
  const auto stream = static_cast<cudaStream_t>(p.stream);
  // The chunk map's table (cu_seqlens only) into the workspace, where the launches read it. From pageable
  // memory: the call returns once the table is staged, so the vector may go.
  if (ws.starts != nullptr)
    check_cuda(
        cudaMemcpyAsync(ws.starts, layout.host_starts.data(),
                        layout.host_starts.size() * sizeof(delta_rule_sequence_start), cudaMemcpyHostToDevice, stream),
        "cudaMemcpyAsync(chunk map)");
  const delta_rule_chunk_map map = delta_rule_chunks(p, layout.host_starts, ws.starts);
  if (which[0]) launch_prepare<In, KD, VD>(p, ws, map, stream);
  if (which[1]) launch_state<In, KD, VD, state_warps, state_producer_warps, state_stages>(p, ws, map, stream);
  if (which[2]) launch_output<In, KD, VD>(p, ws, map, stream);
}

/// The kernels compiled for K = V = 128 (fla's production size) where they apply, else for any size:
/// the same operations in the same order, so the same bits. Compiled apart for the inputs that run at
/// that size in production (bfloat16; binary32: the KDN memories' gains), not for float16, whose
/// K = V = 128 runs take the any-size kernels: each instantiation costs CI build time
/// (docs/testing.md, "CI time").
template <class In>
void launch(const delta_rule_problem& p, void* workspace, const bool (&which)[3]) {
  if constexpr (!std::is_same_v<In, f16_bits>) {
    if (p.key_dim == 128 && p.value_dim == 128) {
      launch_sized<In, 128, 128>(p, workspace, which);
      return;
    }
  }
  launch_sized<In, 0, 0>(p, workspace, which);
}

void launch_dtype(const delta_rule_problem& p, void* workspace, const bool (&which)[3]) {
  switch (p.dtype) {
    case input_dtype::f32: launch<float>(p, workspace, which); break;
    case input_dtype::bf16: launch<bf16_bits>(p, workspace, which); break;
    case input_dtype::f16: launch<f16_bits>(p, workspace, which); break;
  }
}

}  // namespace

std::size_t delta_rule_workspace_bytes(const delta_rule_problem& p) {
  delta_rule_check(p);
  return static_cast<std::size_t>(workspace_layout(p).total);
}

void delta_rule_device(const delta_rule_problem& p) {
  delta_rule_check(p);
  const auto stream = static_cast<cudaStream_t>(p.stream);
  void* workspace = p.workspace;
  if (workspace == nullptr)
    check_cuda(cudaMallocAsync(&workspace, delta_rule_workspace_bytes(p) + 4, stream), "cudaMallocAsync(workspace)");
  const bool all[3] = {true, true, true};
  launch_dtype(p, workspace, all);
  if (p.workspace == nullptr) check_cuda(cudaFreeAsync(workspace, stream), "cudaFreeAsync(workspace)");
}

void delta_rule_device_launch(const delta_rule_problem& p, delta_rule_launch which) {
  delta_rule_check(p);
  if (p.workspace == nullptr)
    throw std::runtime_error(
        "delta_rule_device_launch: the workspace is missing (it must hold the earlier launches' results)");
  const bool one[3] = {which == delta_rule_launch::prepare, which == delta_rule_launch::state,
                       which == delta_rule_launch::output};
  launch_dtype(p, p.workspace, one);
}

void delta_rule_host(const delta_rule_problem& host) {
  delta_rule_check(host);
  const long long B = host.batch, T = host.tokens, HV = host.heads, K = host.key_dim, V = host.value_dim,
                  H = HV / host.key_head_group, N = host.cu_seqlens ? host.sequences : B;
  device_arena arena;
  delta_rule_problem device = host;
  device.k = arena.upload(host.k, {B, T, H, K}, host.dtype);
  device.q = arena.upload(host.q, {B, T, H, K}, host.dtype);
  device.v = arena.upload(host.v, {B, T, HV, V}, host.dtype);
  device.beta = arena.upload(host.beta, {B, T, HV}, host.dtype);
  device.kappa = arena.upload(host.kappa, {B, T, HV, K}, host.dtype);
  device.g = host.gate == delta_rule_gate::per_channel ? arena.upload(host.g, {B, T, HV, K}, host.dtype)
                                                       : arena.upload(host.g, {B, T, HV}, host.dtype);
  device.initial_state = arena.upload(host.initial_state, {N, HV, K, V}, host.dtype);
  device.o = arena.poisoned(B * T * HV * V);
  device.final_state = arena.poisoned(N * HV * K * V);
  // The workspace poisoned too: a launch that reads what an earlier one failed to write reads NaN.
  device.workspace = arena.poisoned(static_cast<long long>((delta_rule_workspace_bytes(host) + 3) / 4));
  delta_rule_device(device);
  check_cuda(cudaDeviceSynchronize(), "delta_rule kernels");
  device_arena::download(host.o, device.o, B * T * HV * V);
  device_arena::download(host.final_state, device.final_state, N * HV * K * V);
}

#ifdef KALMAN_ORACLE_DELTA_RULE_PREPARE_CLOCKS
/// The prepare launch's marks (above), for the benchmark: zeroed before a launch; after it, the mean
/// cycles between consecutive marks over the blocks that wrote both (a block skips the marks of phases
/// it does not run: the previous mark it wrote counts), −1 where no block did.
void delta_rule_prepare_clocks_reset() {
  static const std::vector<long long> zeros(static_cast<std::size_t>(prepare_clock_blocks) * prepare_clock_marks);
  check_cuda(cudaMemcpyToSymbol(prepare_clocks, zeros.data(), zeros.size() * sizeof(long long)), "prepare clocks");
}
std::vector<long long> delta_rule_prepare_phase_cycles() {
  std::vector<long long> marks(static_cast<std::size_t>(prepare_clock_blocks) * prepare_clock_marks);
  check_cuda(cudaMemcpyFromSymbol(marks.data(), prepare_clocks, marks.size() * sizeof(long long)), "prepare clocks");
  std::vector<long long> phases;
  for (int m = 1; m < prepare_clock_marks; ++m) {
    double sum = 0, blocks = 0;
    for (std::size_t b = 0; b < static_cast<std::size_t>(prepare_clock_blocks); ++b) {
      const long long* block = marks.data() + b * prepare_clock_marks;
      long long previous = 0;
      for (int e = m - 1; e >= 0 && previous == 0; --e) previous = block[e];
      if (block[m] != 0 && previous != 0) sum += static_cast<double>(block[m] - previous), ++blocks;
    }
    phases.push_back(blocks > 0 ? static_cast<long long>(sum / blocks) : -1);
  }
  return phases;
}
#endif

}  // namespace kalman_oracle::gpu
