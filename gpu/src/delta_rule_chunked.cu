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
//      writing bf(S) and bf(Ũ) of each chunk to the workspace, each warp its own rows (two barriers a
//      chunk; the next chunk's operands arrive by cp.async while this one computes);
//   3. output (one block a (batch row, value head, chunk, block of value columns)):
//      o = bf(Γτq) bf(S) + P bf(Ũ), every operand read from the workspace.
// Every quantity is the twin's (twin/delta_rule_chunked_twin.hpp), rounded at the twin's points: the
// workspace holds binary32 where the twin keeps binary32 (𝒯Y, the decays) and bfloat16 only for what
// the twin rounds to bfloat16 (tensor-core operands). Every matrix product is WMMA 16 x 16 x 16 with
// bfloat16 operands and binary32 accumulators, whose order of accumulation is the tensor cores' (not
// specified): kernel and twin agree to a bound, not bit for bit. No atomics: run to run bit-identical.
#include <cuda_bf16.h>
#include <cuda_pipeline.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <cstdint>

#include "cuda_check.hpp"
#include "device_arena.hpp"
#include "kalman_oracle/gpu/delta_rule_chunked.hpp"
#include "kalman_oracle/gpu/models/delta_rule_chunk.cuh"

namespace kalman_oracle::gpu {

namespace {

namespace wmma = nvcuda::wmma;

constexpr int chunk = delta_rule_chunk_tokens;  // C
constexpr int warps = 4, threads = 32 * warps;
/// Value columns per block: of the output launch (at most), and of the state launch (16: more blocks,
/// two an SM, for the one launch that walks the chunks in order).
constexpr int output_value_block = delta_rule_value_block, state_value_block = 16;
/// Chunks whose operands the state launch holds in shared memory at once: this one and the ones in flight
/// by cp.async.
constexpr int state_stages = 2;

using bf16_t = std::uint16_t;  // a bfloat16 operand's bits

/// A size known at compile time (known > 0) or else the run-time one: the kernels are compiled once for
/// fla's production sizes K = V = 128, where every index division by K, V or the value block folds into
/// shifts (docs/kernels.md: 0.44 -> 0.31 ms for the output launch), and once for any size.
__host__ __device__ constexpr int known_or(int known, int run_time) { return known > 0 ? known : run_time; }

/// x rounded to bfloat16 (nearest, ties to even), by the hardware's conversion (one instruction): for
/// every number, infinities included, the bits of the twin's round_to_bf16 (models/delta_rule_chunk.cuh);
/// a NaN stays a NaN (the twin keeps its high bits).
__device__ __forceinline__ bf16_t bf16_bits_of(float x) { return __bfloat16_as_ushort(__float2bfloat16_rn(x)); }

/// Two numbers rounded as bf16_bits_of, packed: lo in the low half (the lower address).
__device__ __forceinline__ std::uint32_t bf16x2_bits_of(float lo, float hi) {
  const __nv_bfloat162 pair = __floats2bfloat162_rn(lo, hi);
  std::uint32_t bits;
  __builtin_memcpy(&bits, &pair, sizeof(bits));
  return bits;
}

/// Four numbers rounded as bf16_bits_of, packed into 8 bytes (one vector store).
__device__ __forceinline__ uint2 bf16x4_bits_of(const float4& x) {
  return make_uint2(bf16x2_bits_of(x.x, x.y), bf16x2_bits_of(x.z, x.w));
}

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

constexpr int load_batch = 16;

/// use(x, load(x)) for x = first, first + stride, ... below count, the loads of load_batch of them
/// issued before any is used: these loops read global memory at low occupancy, and one latency then
/// covers load_batch elements instead of one.
template <class Load, class Use>
__device__ __forceinline__ void for_each_loaded(int first, int count, int stride, Load&& load, Use&& use) {
  using value_type = decltype(load(0));
  for (int base = first; base < count; base += stride * load_batch) {
    value_type value[load_batch];
#pragma unroll
    for (int u = 0; u < load_batch; ++u)
      if (base + u * stride < count) value[u] = load(base + u * stride);
#pragma unroll
    for (int u = 0; u < load_batch; ++u)
      if (base + u * stride < count) use(base + u * stride, value[u]);
  }
}

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

/// The inputs of one (batch row, value head), each element's offset from a base computed once (the
/// key head h / key_head_group included).
template <class In>
struct reader {
  const delta_rule_problem& p;
  long long k_base, q_base, v_base, kappa_base, beta_base, g_base, initial_base;
  __device__ reader(const delta_rule_problem& problem, long long batch_row, long long head) : p(problem) {
    const long long b = batch_row, h = head, key_head = h / p.key_head_group;
    k_base = offset_of(p.k, b, 0, key_head);
    q_base = offset_of(p.q, b, 0, key_head);
    v_base = offset_of(p.v, b, 0, h);
    kappa_base = offset_of(p.kappa, b, 0, h);
    beta_base = offset_of(p.beta, b, 0, h);
    g_base = offset_of(p.g, b, 0, h);
    initial_base = offset_of(p.initial_state, b, h, 0);
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

/// The workspace, per (batch row b, value head h, chunk c), at index hc = (b·HV + h)·NT + c; rows
/// past the chunk's last token are zero:
///   W [C, K] bf16: bf(𝒯X);  TY [C, V] binary32: 𝒯Y (GLA: v);  carry_keys [C, K] bf16:
///   bf(w ⊙ Γ_last Γ⁻¹);  last [K] binary32: Γ_last;  Q [C, K] bf16: bf(Γτq);  P [C, C] bf16: the
///   scores bf((Γτq)(Γ⁻¹w)ᵀ), causal;  U [C, V] bf16: bf(Ũ);  S [K, V] bf16: bf(chunk-start S).
struct workspace_layout {
  long long chunks = 0, W = 0, TY = 0, carry_keys = 0, last = 0, Q = 0, P = 0, U = 0, S = 0, total = 0;
  explicit workspace_layout(const delta_rule_problem& p) {
    chunks = (p.tokens + chunk - 1) / chunk;
    const long long R = static_cast<long long>(p.batch) * p.heads * chunks, K = p.key_dim, V = p.value_dim;
    carver<256, long long> c;
    W = c.take(R * chunk * K * 2);
    TY = c.take(R * chunk * V * 4);
    carry_keys = c.take(R * chunk * K * 2);
    last = c.take(R * K * 4);
    Q = c.take(R * chunk * K * 2);
    P = c.take(R * chunk * chunk * 2);
    U = c.take(R * chunk * V * 2);
    S = c.take(R * K * V * 2);
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
  *reinterpret_cast<uint4*>(to) = make_uint4(bf16x2_bits_of(x[0], x[1]), bf16x2_bits_of(x[2], x[3]),
                                             bf16x2_bits_of(x[4], x[5]), bf16x2_bits_of(x[6], x[7]));
}

/// Shared memory of the prepare launch (bytes) for key size K.
struct prepare_shared {
  int scratch, Tb, kg, kn, qg, Ub, beta, last, total;
  __host__ __device__ explicit prepare_shared(int K) {
    carver<128> c;
    const int w_floats = chunk * (K + pad_f32), scores_floats = 2 * chunk * ld_scores;
    // The summed log gates, then A and the scores, then W.
    scratch = c.take((w_floats > scores_floats ? w_floats : scores_floats) * 4);
    Tb = c.take(chunk * ld_inverse * 2);
    kg = c.take(chunk * (K + pad_bf16) * 2);  // Γk, then X = β Γ k
    kn = c.take(chunk * (K + pad_bf16) * 2);  // Γ⁻¹w
    qg = c.take(chunk * (K + pad_bf16) * 2);  // Γτq
    Ub = c.take(chunk * (output_value_block + pad_bf16) * 2);
    beta = c.take(chunk * 4);
    last = c.take(K * 4);  // Γ_last
    total = c.at;
  }
};

/// The prepare launch's blocks have 8 warps: its phases are short and separated by barriers, so it needs
/// many warps to cover the latency of its loads; two blocks fit on an SM.
constexpr int prepare_warps = 8, prepare_threads = 32 * prepare_warps;

template <class In, int KD, int VD>
__global__ void __launch_bounds__(prepare_threads, 2)
    delta_rule_prepare_kernel(const delta_rule_problem p, const workspace_views ws, const int chunks) {
  extern __shared__ __align__(128) unsigned char smem[];
  const int K = known_or(KD, p.key_dim), V = known_or(VD, p.value_dim), tid = threadIdx.x, ldk = K + pad_bf16,
            ldg = K + pad_f32;
  const long long hc = blockIdx.x, bh = hc / chunks;
  const int c0 = static_cast<int>(hc % chunks) * chunk, n = p.tokens - c0 < chunk ? p.tokens - c0 : chunk;
  const reader<In> in(p, bh / p.heads, bh % p.heads);
  const bool erases = p.rule != delta_rule_kind::gla;
  const prepare_shared L(K);
  float* scratch = reinterpret_cast<float*>(smem + L.scratch);
  float* G = scratch;  // the summed log gates: C x ldg (a gate per channel) or C (per head)
  float* A = scratch;
  float* scores = scratch + chunk * ld_scores;
  bf16_t* Tb = reinterpret_cast<bf16_t*>(smem + L.Tb);
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
  // Σ_{s≤t} g_si: a per-head gate is the same for every channel; no gate, zero.
  const auto gate_sum = [&](int t, int i) {
    return per_channel ? G[t * ldg + i] : p.gate == delta_rule_gate::per_head ? G[t] : 0.0f;
  };
  if (tid < K) {
    last[tid] = exp_f32(gate_sum(n - 1, tid));
    ws.last[hc * K + tid] = last[tid];
  }
  __syncthreads();
  // Operands, a thread eight channels of a token: Γk, Γ⁻¹w (w = κ or k), Γτq, the carry's keys
  // w ⊙ Γ_last Γ⁻¹ and X = β Γ k (rounded from the unrounded Γk, as the twin does); bf(Γτq), the keys
  // and X also to the workspace (X in W's place: shared memory has no room for it yet).
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
    float gamma[8], inverse[8];
    if (p.gate == delta_rule_gate::per_channel) {
#pragma unroll
      for (int u = 0; u < 8; ++u) {
        const float sum = t < n ? G[t * ldg + i0 + u] : 0.0f;
        gamma[u] = exp_f32(sum), inverse[u] = exp_f32(-sum);
      }
    } else {
      const float sum = p.gate == delta_rule_gate::per_head && t < n ? G[t] : 0.0f;
      const float one_gamma = sum == 0.0f ? 1.0f : exp_f32(sum), one_inverse = sum == 0.0f ? 1.0f : exp_f32(-sum);
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
      write_g[u] = real ? mul_rn(inverse[u], write[u]) : 0.0f;
      query_g[u] = real ? mul_rn(gamma[u], mul_rn(p.tau, query[u])) : 0.0f;
      carry_key[u] = real ? mul_rn(mul_rn(last[i0 + u], inverse[u]), write[u]) : 0.0f;
    }
    store_eight(kg + t * ldk + i0, key_g);
    store_eight(kn + t * ldk + i0, write_g);
    store_eight(qg + t * ldk + i0, query_g);
    const long long row = (hc * chunk + t) * K + i0;
    store_eight(ws.Q + row, query_g);
    store_eight(ws.carry_keys + row, carry_key);
    store_eight(ws.W + row, X);  // X = β Γ k, until W replaces it below
  }
  __syncthreads();
  // A = (Γk)(Γ⁻¹w)ᵀ (erasing rules) and the scores (Γτq)(Γ⁻¹w)ᵀ, the lower tiles, on the tensor cores.
  for_each_tile<prepare_warps>(chunk, 2 * chunk, [&](int t0, int m0) {
    const bool is_scores = m0 >= chunk;
    const int m = is_scores ? m0 - chunk : m0;
    frag_acc acc;
    wmma::fill_fragment(acc, 0.0f);
    if (m <= t0 && (is_scores || erases))
      mma_steps<frag_a_row, frag_b_col>(acc, (is_scores ? qg : kg) + t0 * ldk, ldk, 16, kn + m * ldk, ldk, 16, K / 16);
    wmma::store_matrix_sync((is_scores ? scores : A) + t0 * ld_scores + m, acc, ld_scores, wmma::mem_row_major);
  });
  __syncthreads();
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
    return;
  }
  __syncthreads();
  // Warps 0-1 solve (one thread a column of 𝒯, the column in binary32 in the scores' place, which P has
  // left); meanwhile warps 2-7 bring X back from the workspace into Γk's place (the block's own writes,
  // visible after the barrier above) and Y's first value columns, and its second block of value columns
  // into bf(Γτq)'s place where that has room (K >= BV; bf(Γτq) is in the workspace already).
  const int BV = V < output_value_block ? V : output_value_block, ldu = BV + pad_bf16;
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
    const uint4* X = reinterpret_cast<const uint4*>(ws.W + hc * chunk * K);
    for (int x = tid - chunk; x < chunk * groups; x += prepare_threads - chunk)
      *reinterpret_cast<uint4*>(kg + (x / groups) * ldk + x % groups * 8) = X[x];
    fill_values(Ub, 0, tid - chunk, prepare_threads - chunk);
    if (second_filled_early) fill_values(Ub_second, BV, tid - chunk, prepare_threads - chunk);
  }
  __syncthreads();
  // W = 𝒯X (C x K) into scratch, then bf(W) to the workspace.
  const int ldw = K + pad_f32;
  for_each_tile<prepare_warps>(chunk, K, [&](int t0, int i0) {
    frag_acc acc;
    wmma::fill_fragment(acc, 0.0f);
    mma_steps<frag_a_row, frag_b_row>(acc, Tb + t0 * ld_inverse, ld_inverse, 16, kg + i0, ldk, 16 * ldk, t0 / 16 + 1);
    wmma::store_matrix_sync(scratch + t0 * ldw + i0, acc, ldw, wmma::mem_row_major);
  });
  __syncthreads();
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
  }
}

/// Shared memory of the state launch (bytes) for key size K and BV value columns: the state, its
/// bfloat16 copy, the operands of Stages chunks (this chunk's and the next ones', arriving by cp.async),
/// scratch, bf(Ũ).
template <int BV, int Stages>
struct state_shared {
  static constexpr int ldv = BV + pad_bf16, ldv32 = BV + pad_f32;
  int S, Sb, W, keys, TY, last, scratch, Ub, total;
  __host__ __device__ explicit state_shared(int K) {
    carver<128> c;
    S = c.take(K * BV * 4);
    Sb = c.take(K * ldv * 2);
    W = c.take(Stages * chunk * (K + pad_bf16) * 2);
    keys = c.take(Stages * chunk * (K + pad_bf16) * 2);
    TY = c.take(Stages * chunk * ldv32 * 4);
    last = c.take(Stages * K * 4);
    scratch = c.take((K > chunk ? K : chunk) * ldv32 * 4);
    Ub = c.take(chunk * ldv * 2);
    total = c.at;
  }
};

/// Starts copying chunk hc's operands (bf(W), the carry's keys: C x K; 𝒯Y's columns v0..v0+BV; the
/// decay Γ_last: K) into one buffer of the state launch's shared memory, 16 bytes a copy.
template <int BV>
__device__ __forceinline__ void fetch_chunk_operands(const workspace_views& ws, long long hc, int K, int V, int v0,
                                                     bf16_t* W, bf16_t* keys, float* TY, float* last) {
  const int ldk = K + pad_bf16, row_copies = K / 8;  // 8 bfloat16 a copy
  const bf16_t* W_in = ws.W + hc * chunk * K;
  const bf16_t* keys_in = ws.carry_keys + hc * chunk * K;
  for (int x = threadIdx.x; x < chunk * row_copies; x += threads) {
    const int t = x / row_copies, part = x % row_copies;
    __pipeline_memcpy_async(W + t * ldk + part * 8, W_in + t * K + part * 8, 16);
    __pipeline_memcpy_async(keys + t * ldk + part * 8, keys_in + t * K + part * 8, 16);
  }
  constexpr int ty_copies = BV / 4;  // 4 floats a copy
  const float* TY_in = ws.TY + hc * chunk * V + v0;
  for (int x = threadIdx.x; x < chunk * ty_copies; x += threads) {
    const int t = x / ty_copies, part = x % ty_copies;
    __pipeline_memcpy_async(TY + t * (BV + pad_f32) + part * 4, TY_in + t * V + part * 4, 16);
  }
  for (int x = threadIdx.x; x < K / 4; x += threads)
    __pipeline_memcpy_async(last + x * 4, ws.last + hc * K + x * 4, 16);
  __pipeline_commit();
}

template <class In, int KD, int VD, int BV, int Stages>
__global__ void __launch_bounds__(threads)
    delta_rule_state_kernel(const delta_rule_problem p, const workspace_views ws, const int chunks) {
  extern __shared__ __align__(128) unsigned char smem[];
  using layout = state_shared<BV, Stages>;
  constexpr int ldv = layout::ldv, ldv32 = layout::ldv32;
  const int K = known_or(KD, p.key_dim), V = known_or(VD, p.value_dim), tid = threadIdx.x, blocks_v = V / BV,
            ldk = K + pad_bf16;
  const long long b = blockIdx.x / (p.heads * blocks_v), h = (blockIdx.x / blocks_v) % p.heads;
  const int v0 = static_cast<int>(blockIdx.x % blocks_v) * BV;
  const reader<In> in(p, b, h);
  const bool erases = p.rule != delta_rule_kind::gla;
  const layout L(K);
  float* S = reinterpret_cast<float*>(smem + L.S);
  bf16_t* Sb = reinterpret_cast<bf16_t*>(smem + L.Sb);
  float* scratch = reinterpret_cast<float*>(smem + L.scratch);
  bf16_t* Ub = reinterpret_cast<bf16_t*>(smem + L.Ub);
  const auto W_of = [&](int buffer) { return reinterpret_cast<bf16_t*>(smem + L.W) + buffer * chunk * ldk; };
  const auto keys_of = [&](int buffer) { return reinterpret_cast<bf16_t*>(smem + L.keys) + buffer * chunk * ldk; };
  const auto TY_of = [&](int buffer) { return reinterpret_cast<float*>(smem + L.TY) + buffer * chunk * ldv32; };
  const auto last_of = [&](int buffer) { return reinterpret_cast<float*>(smem + L.last) + buffer * K; };

  // Each warp owns rows of the chunk (Ũ) and rows of the state (the carry): row tiles warp, warp + 4, …
  // Its own rows it computes, rounds and updates without waiting for the others, so that a chunk needs
  // two barriers: one before Ũ (the chunk's operands have arrived, every row of bf(S) is the chunk
  // start's) and one before the carry (every row of bf(Ũ) is written).
  const int warp = tid / 32, lane = tid % 32;
  const long long hc0 = (b * p.heads + h) * chunks;
  for_each_loaded(
      tid, K * BV, threads, [&](int x) { return in.initial(x / BV, v0 + x % BV); },
      [&](int x, float value) {
        S[x] = value;
        Sb[(x / BV) * ldv + x % BV] = bf16_bits_of(value);
        if (chunks > 0) ws.S[hc0 * K * V + (x / BV) * V + v0 + x % BV] = bf16_bits_of(value);
      });
  // One cp.async group a chunk (empty past the last), Stages − 1 of them in flight ahead of the chunk
  // being computed.
  const auto fetch = [&](int c) {
    const int buffer = c % Stages;
    if (c < chunks)
      fetch_chunk_operands<BV>(ws, hc0 + c, K, V, v0, W_of(buffer), keys_of(buffer), TY_of(buffer), last_of(buffer));
    else
      __pipeline_commit();
  };
  for (int c = 0; c < Stages - 1; ++c) fetch(c);
  for (int c = 0; c < chunks; ++c) {
    const long long hc = hc0 + c;
    const int buffer = c % Stages;
    __pipeline_wait_prior(Stages - 2);
    __syncthreads();
    // The buffer of chunk c + Stages − 1 was last read by chunk c − 1's carry, which every warp has
    // finished.
    fetch(c + Stages - 1);
    const bf16_t* W = W_of(buffer);
    const bf16_t* keys = keys_of(buffer);
    const float* TY = TY_of(buffer);
    const float* last = last_of(buffer);
    // Ũ = 𝒯Y − bf(W) bf(S) (GLA: v), the warp's rows, into scratch (C x BV), then bf(Ũ) to Ub and the
    // workspace.
    bf16_t* U_out = ws.U + hc * chunk * V + v0;
    for (int t0 = warp * 16; t0 < chunk; t0 += warps * 16) {
      if (erases) {
        for (int j0 = 0; j0 < BV; j0 += 16) {
          frag_acc u, product;
          wmma::load_matrix_sync(u, TY + t0 * ldv32 + j0, ldv32, wmma::mem_row_major);
          wmma::fill_fragment(product, 0.0f);
          mma_steps<frag_a_row, frag_b_row>(product, W + t0 * ldk, ldk, 16, Sb + j0, ldv, 16 * ldv, K / 16);
          for (int e = 0; e < u.num_elements; ++e) u.x[e] = add_rn(u.x[e], -product.x[e]);
          wmma::store_matrix_sync(scratch + t0 * ldv32 + j0, u, ldv32, wmma::mem_row_major);
        }
        __syncwarp();
      }
      // Four columns a lane-step: 16-byte loads, 8-byte stores (rows of Ub, scratch, TY and the
      // workspace's U all start on 16-byte boundaries: BV, V are multiples of 16).
      const float* U = erases ? scratch : TY;
      constexpr int quads = BV / 4;
      for (int x = lane; x < 16 * quads; x += 32) {
        const int t = t0 + x / quads, j = x % quads * 4;
        const uint2 rounded = bf16x4_bits_of(*reinterpret_cast<const float4*>(U + t * ldv32 + j));
        *reinterpret_cast<uint2*>(Ub + t * ldv + j) = rounded;
        *reinterpret_cast<uint2*>(U_out + t * V + j) = rounded;
      }
    }
    __syncthreads();
    // S' = Γ_last ⊙ S + (carry keys)ᵀ bf(Ũ), the warp's rows: the product into scratch (K x BV), then S,
    // bf(S) and, for the next chunk, bf(S) to the workspace. (The warp's scratch rows are its own in both
    // uses: Ũ's rows warp·16 … and the state's rows warp·16 …, warp·16 + 64 ….)
    bf16_t* S_next = c + 1 < chunks ? ws.S + (hc + 1) * K * V + v0 : nullptr;
    for (int i0 = warp * 16; i0 < K; i0 += warps * 16) {
      for (int j0 = 0; j0 < BV; j0 += 16) {
        frag_acc acc;
        wmma::fill_fragment(acc, 0.0f);
        mma_steps<frag_a_col, frag_b_row>(acc, keys + i0, ldk, 16 * ldk, Ub + j0, ldv, 16 * ldv, chunk / 16);
        wmma::store_matrix_sync(scratch + i0 * ldv32 + j0, acc, ldv32, wmma::mem_row_major);
      }
      __syncwarp();
      constexpr int quads = BV / 4;
      for (int x = lane; x < 16 * quads; x += 32) {
        const int i = i0 + x / quads, j = x % quads * 4;
        float4& s = *reinterpret_cast<float4*>(S + i * BV + j);
        const float4 product = *reinterpret_cast<const float4*>(scratch + i * ldv32 + j);
        const float decay = last[i];
        s.x = add_rn(mul_rn(decay, s.x), product.x);
        s.y = add_rn(mul_rn(decay, s.y), product.y);
        s.z = add_rn(mul_rn(decay, s.z), product.z);
        s.w = add_rn(mul_rn(decay, s.w), product.w);
        const uint2 rounded = bf16x4_bits_of(s);
        *reinterpret_cast<uint2*>(Sb + i * ldv + j) = rounded;
        if (S_next) *reinterpret_cast<uint2*>(S_next + i * V + j) = rounded;
      }
      __syncwarp();
    }
  }
  __syncthreads();
  for (int x = tid; x < K * BV; x += threads) p.final_state[((b * p.heads + h) * K + x / BV) * V + v0 + x % BV] = S[x];
}

/// Shared memory of the output launch (bytes) for key size K and BV value columns: bf(Γτq), P, bf(S),
/// bf(Ũ) (each row padded), and o staged.
struct output_shared {
  int Q, P, S, U, staged, total;
  __host__ __device__ output_shared(int K, int BV) {
    carver<128> c;
    Q = c.take(chunk * (K + pad_bf16) * 2);
    P = c.take(chunk * ld_inverse * 2);
    S = c.take(K * (BV + pad_bf16) * 2);
    U = c.take(chunk * (BV + pad_bf16) * 2);
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
    delta_rule_output_kernel(const delta_rule_problem p, const workspace_views ws, const int chunks,
                             const int value_block) {
  extern __shared__ __align__(128) unsigned char smem[];
  const int BV = known_or(VD < output_value_block ? VD : output_value_block, value_block);
  const int K = known_or(KD, p.key_dim), V = known_or(VD, p.value_dim), tid = threadIdx.x, blocks_v = V / BV;
  const int ldk = K + pad_bf16, ldv = BV + pad_bf16, ldo = BV + pad_f32;
  const long long hc = blockIdx.x / blocks_v, bh = hc / chunks;
  const int v0 = static_cast<int>(blockIdx.x % blocks_v) * BV;
  const long long b = bh / p.heads, h = bh % p.heads;
  const int c0 = static_cast<int>(hc % chunks) * chunk, n = p.tokens - c0 < chunk ? p.tokens - c0 : chunk;
  const output_shared L(K, BV);
  bf16_t* Q = reinterpret_cast<bf16_t*>(smem + L.Q);
  bf16_t* P = reinterpret_cast<bf16_t*>(smem + L.P);
  bf16_t* Sb = reinterpret_cast<bf16_t*>(smem + L.S);
  bf16_t* Ub = reinterpret_cast<bf16_t*>(smem + L.U);
  float* staged = reinterpret_cast<float*>(smem + L.staged);
  // The operands from the workspace, each once per block (the tiles of a warp share rows and columns).
  fetch_matrix(Q, ldk, ws.Q + hc * chunk * K, K, chunk, K);
  fetch_matrix(P, ld_inverse, ws.P + hc * chunk * chunk, chunk, chunk, chunk);
  fetch_matrix(Sb, ldv, ws.S + hc * K * V + v0, V, K, BV);
  fetch_matrix(Ub, ldv, ws.U + hc * chunk * V + v0, V, chunk, BV);
  __pipeline_commit();
  __pipeline_wait_prior(0);
  __syncthreads();
  // o = bf(Γτq) bf(S) + P bf(Ũ), one accumulator.
  for_each_tile(chunk, BV, [&](int t0, int j0) {
    frag_acc acc;
    wmma::fill_fragment(acc, 0.0f);
    mma_steps<frag_a_row, frag_b_row>(acc, Q + t0 * ldk, ldk, 16, Sb + j0, ldv, 16 * ldv, K / 16);
    mma_steps<frag_a_row, frag_b_row>(acc, P + t0 * ld_inverse, ld_inverse, 16, Ub + j0, ldv, 16 * ldv, t0 / 16 + 1);
    wmma::store_matrix_sync(staged + t0 * ldo + j0, acc, ldo, wmma::mem_row_major);
  });
  __syncthreads();
  float* o = p.o + ((b * p.tokens + c0) * p.heads + h) * V + v0;  // row t at o + t·HV·V
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

template <class In, int KD, int VD, int BV, int Stages>
void launch_state(const delta_rule_problem& p, const workspace_views& ws, int chunks, cudaStream_t stream) {
  const state_shared<BV, Stages> L(p.key_dim);
  const auto kernel = delta_rule_state_kernel<In, KD, VD, BV, Stages>;
  allow_shared(kernel, L.total, "cudaFuncSetAttribute(delta_rule_state_kernel)");
  const long long blocks = static_cast<long long>(p.batch) * p.heads * (p.value_dim / BV);
  kernel<<<static_cast<unsigned>(blocks), threads, L.total, stream>>>(p, ws, chunks);
  check_cuda(cudaGetLastError(), "delta_rule_state_kernel launch");
}

template <class In, int KD, int VD>
void launch_prepare(const delta_rule_problem& p, const workspace_views& ws, int chunks, cudaStream_t stream) {
  if (chunks == 0) return;
  const prepare_shared L(p.key_dim);
  const auto kernel = delta_rule_prepare_kernel<In, KD, VD>;
  allow_shared(kernel, L.total, "cudaFuncSetAttribute(delta_rule_prepare_kernel)");
  const long long blocks = static_cast<long long>(p.batch) * p.heads * chunks;
  kernel<<<static_cast<unsigned>(blocks), prepare_threads, L.total, stream>>>(p, ws, chunks);
  check_cuda(cudaGetLastError(), "delta_rule_prepare_kernel launch");
}

template <class In, int KD, int VD>
void launch_output(const delta_rule_problem& p, const workspace_views& ws, int chunks, cudaStream_t stream) {
  if (chunks == 0) return;
  const int V = p.value_dim, BV = V < output_value_block ? V : output_value_block;
  const int bytes = output_shared(p.key_dim, BV).total;
  const auto kernel = delta_rule_output_kernel<In, KD, VD>;
  allow_shared(kernel, bytes, "cudaFuncSetAttribute(delta_rule_output_kernel)");
  const long long blocks = static_cast<long long>(p.batch) * p.heads * chunks * (V / BV);
  kernel<<<static_cast<unsigned>(blocks), threads, bytes, stream>>>(p, ws, chunks, BV);
  check_cuda(cudaGetLastError(), "delta_rule_output_kernel launch");
}

/// The launches in `which` (all three by default), in order, compiled for K and V (0: any).
template <class In, int KD, int VD>
void launch_sized(const delta_rule_problem& p, void* workspace, const bool (&which)[3]) {
  const workspace_layout layout(p);
  const workspace_views ws(layout, workspace);
  const auto stream = static_cast<cudaStream_t>(p.stream);
  const int chunks = static_cast<int>(layout.chunks);
  if (which[0]) launch_prepare<In, KD, VD>(p, ws, chunks, stream);
  if (which[1]) launch_state<In, KD, VD, state_value_block, state_stages>(p, ws, chunks, stream);
  if (which[2]) launch_output<In, KD, VD>(p, ws, chunks, stream);
}

/// The kernels compiled for K = V = 128 (fla's production size) where they apply, else for any size:
/// the same operations in the same order, so the same bits.
template <class In>
void launch(const delta_rule_problem& p, void* workspace, const bool (&which)[3]) {
  if (p.key_dim == 128 && p.value_dim == 128)
    launch_sized<In, 128, 128>(p, workspace, which);
  else
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
                  H = HV / host.key_head_group;
  device_arena arena;
  delta_rule_problem device = host;
  device.k = arena.upload(host.k, {B, T, H, K}, host.dtype);
  device.q = arena.upload(host.q, {B, T, H, K}, host.dtype);
  device.v = arena.upload(host.v, {B, T, HV, V}, host.dtype);
  device.beta = arena.upload(host.beta, {B, T, HV}, host.dtype);
  device.kappa = arena.upload(host.kappa, {B, T, HV, K}, host.dtype);
  device.g = host.gate == delta_rule_gate::per_channel ? arena.upload(host.g, {B, T, HV, K}, host.dtype)
                                                       : arena.upload(host.g, {B, T, HV}, host.dtype);
  device.initial_state = arena.upload(host.initial_state, {B, HV, K, V}, host.dtype);
  device.o = arena.poisoned(B * T * HV * V);
  device.final_state = arena.poisoned(B * HV * K * V);
  // The workspace poisoned too: a launch that reads what an earlier one failed to write reads NaN.
  device.workspace = arena.poisoned(static_cast<long long>((delta_rule_workspace_bytes(host) + 3) / 4));
  delta_rule_device(device);
  check_cuda(cudaDeviceSynchronize(), "delta_rule kernels");
  device_arena::download(host.o, device.o, B * T * HV * V);
  device_arena::download(host.final_state, device.final_state, B * HV * K * V);
}

}  // namespace kalman_oracle::gpu
