// The chunked delta-rule memory on tensor cores (delta_rule_chunked.hpp; docs/kernels.md, "Chunked
// delta-rule memory"): one block per (batch row, value head, block of 64 value columns), 4 warps,
// walking the chunks of delta_rule_chunk_tokens tokens in order with the chunk-start state S (K x 64,
// binary32) in shared memory. Each chunk runs the twin's phases (twin/delta_rule_chunked_twin.hpp):
// gates and operands, A = (Γk)(Γ⁻¹k)ᵀ on the tensor cores, 𝒯 = (I + A)⁻¹ by forward substitution (one
// thread a column, binary32, the twin's order), W = 𝒯X and Ũ = 𝒯Y − WS, the scores and o, the carry;
// every matrix product by WMMA 16 x 16 x 16 with bfloat16 operands and binary32 accumulators, its
// operands rounded by round_to_bf16 exactly as the twin rounds them. The products' order of
// accumulation is the tensor cores' (not specified): kernel and twin agree to a bound.
#include <cuda_bf16.h>
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
constexpr int value_block = delta_rule_value_block;
constexpr int warps = 4, threads = 32 * warps;
constexpr int scratch_cols = 2 * chunk;  // >= C + C (A beside 𝒯), K, BV

using bf16_t = std::uint16_t;  // a bfloat16 operand's bits in shared memory

__device__ __forceinline__ bf16_t bf16_bits_of(float x) {
  const float r = round_to_bf16(x);
  std::uint32_t bits;
  __builtin_memcpy(&bits, &r, sizeof(bits));
  return static_cast<bf16_t>(bits >> 16);
}

__device__ __forceinline__ const __nv_bfloat16* as_bf16(const bf16_t* x) {
  return reinterpret_cast<const __nv_bfloat16*>(x);
}

/// Byte offsets of the shared-memory buffers (each 128-byte aligned) for key size K, value block BV.
struct shared_layout {
  int S, Sb, scratch, Tb, kg, kn, qg, Ub, P, G, beta, total;
  __host__ __device__ explicit shared_layout(int K, int BV) {
    int at = 0;
    const auto take = [&at](int bytes) {
      const int here = at;
      at += (bytes + 127) / 128 * 128;
      return here;
    };
    S = take(K * BV * 4);
    Sb = take(K * BV * 2);
    scratch = take(chunk * scratch_cols * 4);
    Tb = take(chunk * chunk * 2);
    kg = take(chunk * K * 2);
    kn = take(chunk * K * 2);
    qg = take(chunk * K * 2);
    Ub = take(chunk * BV * 2);
    P = take(chunk * chunk * 2);
    G = take(chunk * K * 4);
    beta = take(chunk * 4);
    total = at;
  }
};

using frag_a_row = wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major>;
using frag_a_col = wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::col_major>;
using frag_b_row = wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major>;
using frag_b_col = wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major>;
using frag_acc = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

/// acc += Σ_s A_s B_s over `steps` 16 x 16 x 16 products, A_s at a + s·a_step (leading dimension lda),
/// B_s at b + s·b_step (ldb): one row of tiles times one column of tiles.
template <class FragA, class FragB>
__device__ __forceinline__ void mma_steps(frag_acc& acc, const bf16_t* a, int lda, int a_step, const bf16_t* b, int ldb,
                                          int b_step, int steps) {
  for (int s = 0; s < steps; ++s) {
    FragA x;
    FragB y;
    wmma::load_matrix_sync(x, as_bf16(a + s * a_step), lda);
    wmma::load_matrix_sync(y, as_bf16(b + s * b_step), ldb);
    wmma::mma_sync(acc, x, y, acc);
  }
}

/// f(r0, c0) for each 16 x 16 tile of a rows x cols output, the tiles dealt to the warps in turn.
template <class F>
__device__ __forceinline__ void for_each_tile(int rows, int cols, F&& f) {
  const int across = cols / 16;
  for (int tile = static_cast<int>(threadIdx.x) / 32; tile < (rows / 16) * across; tile += warps)
    f(tile / across * 16, tile % across * 16);
}

template <class In>
struct reader {
  const delta_rule_problem& p;
  long long b, h;
  __device__ float k(long long t, long long i) const {
    return load_widened<In>(p.k, offset_of(p.k, b, t, h / p.key_head_group, i));
  }
  __device__ float q(long long t, long long i) const {
    return load_widened<In>(p.q, offset_of(p.q, b, t, h / p.key_head_group, i));
  }
  __device__ float v(long long t, long long j) const { return load_widened<In>(p.v, offset_of(p.v, b, t, h, j)); }
  /// The write key: κ_t for the two-key rule, else k_t.
  __device__ float w(long long t, long long i) const {
    return p.rule == delta_rule_kind::two_key ? load_widened<In>(p.kappa, offset_of(p.kappa, b, t, h, i)) : k(t, i);
  }
  __device__ float beta(long long t) const {
    return p.rule == delta_rule_kind::beta_form ? load_widened<In>(p.beta, offset_of(p.beta, b, t, h)) : 1.0f;
  }
  __device__ float g(long long t, long long i) const {
    if (p.gate == delta_rule_gate::per_head) return load_widened<In>(p.g, offset_of(p.g, b, t, h));
    if (p.gate == delta_rule_gate::per_channel) return load_widened<In>(p.g, offset_of(p.g, b, t, h, i));
    return 0.0f;
  }
  __device__ float initial(long long i, long long j) const {
    return p.initial_state.data ? load_widened<In>(p.initial_state, offset_of(p.initial_state, b, h, i, j)) : 0.0f;
  }
};

template <class In>
__global__ void __launch_bounds__(threads) delta_rule_kernel(const delta_rule_problem p) {
  extern __shared__ __align__(128) unsigned char smem[];
  const int K = p.key_dim, V = p.value_dim, BV = V < value_block ? V : value_block;
  const int blocks_v = (V + BV - 1) / BV;
  const long long b = blockIdx.x / (p.heads * blocks_v), h = (blockIdx.x / blocks_v) % p.heads;
  const int v0 = static_cast<int>(blockIdx.x % blocks_v) * BV;
  const int tid = threadIdx.x;
  const reader<In> in{p, b, h};
  const bool erases = p.rule != delta_rule_kind::gla;

  const shared_layout L(K, BV);
  float* S = reinterpret_cast<float*>(smem + L.S);
  bf16_t* Sb = reinterpret_cast<bf16_t*>(smem + L.Sb);
  float* scratch = reinterpret_cast<float*>(smem + L.scratch);
  bf16_t* Tb = reinterpret_cast<bf16_t*>(smem + L.Tb);
  bf16_t* kg = reinterpret_cast<bf16_t*>(smem + L.kg);  // Γk, then X = β Γ k, then bf(W)
  bf16_t* kn = reinterpret_cast<bf16_t*>(smem + L.kn);  // Γ⁻¹k
  bf16_t* qg = reinterpret_cast<bf16_t*>(smem + L.qg);  // Γ τq, then the carry's keys
  bf16_t* Ub = reinterpret_cast<bf16_t*>(smem + L.Ub);  // bf(β v), then bf(Ũ)
  bf16_t* P = reinterpret_cast<bf16_t*>(smem + L.P);
  float* G = reinterpret_cast<float*>(smem + L.G);
  float* beta = reinterpret_cast<float*>(smem + L.beta);

  for (int x = tid; x < K * BV; x += threads) {
    S[x] = in.initial(x / BV, v0 + x % BV);
    Sb[x] = bf16_bits_of(S[x]);
  }

  for (int c0 = 0; c0 < p.tokens; c0 += chunk) {
    const int n = p.tokens - c0 < chunk ? p.tokens - c0 : chunk;
    // Gates: one thread a channel sums its log gates in token order (the twin's order).
    if (tid < K) {
      float sum = 0.0f;
      for (int t = 0; t < chunk; ++t) {
        if (t < n) sum = add_rn(sum, in.g(c0 + t, tid));
        G[t * K + tid] = sum;
      }
    }
    if (tid < chunk) beta[tid] = tid < n ? in.beta(c0 + tid) : 0.0f;
    __syncthreads();
    // Operands: Γk, Γ⁻¹w (w = κ or k), Γτq (rows past n zero).
    for (int x = tid; x < chunk * K; x += threads) {
      const int t = x / K, i = x % K;
      if (t < n) {
        const float gamma = exp_f32(G[x]), inverse = exp_f32(-G[x]);
        kg[x] = bf16_bits_of(mul_rn(gamma, in.k(c0 + t, i)));
        kn[x] = bf16_bits_of(mul_rn(inverse, in.w(c0 + t, i)));
        qg[x] = bf16_bits_of(mul_rn(gamma, mul_rn(p.tau, in.q(c0 + t, i))));
      } else {
        kg[x] = kn[x] = qg[x] = 0;
      }
    }
    __syncthreads();

    if (erases) {
      // A = β ⊙ (Γk)(Γ⁻¹k)ᵀ, strictly lower, into scratch[t][m]; 16 tiles, 4 a warp.
      for_each_tile(chunk, chunk, [&](int t0, int m0) {
        frag_acc acc;
        wmma::fill_fragment(acc, 0.0f);
        if (m0 <= t0) mma_steps<frag_a_row, frag_b_col>(acc, kg + t0 * K, K, 16, kn + m0 * K, K, 16, K / 16);
        wmma::store_matrix_sync(scratch + t0 * scratch_cols + m0, acc, scratch_cols, wmma::mem_row_major);
      });
      __syncthreads();
      for (int x = tid; x < chunk * chunk; x += threads) {
        const int t = x / chunk, m = x % chunk;
        float& a = scratch[t * scratch_cols + m];
        a = (m < t && t < n) ? mul_rn(beta[t], a) : 0.0f;
      }
      __syncthreads();
      // 𝒯 = (I + A)⁻¹ into scratch[t][C + j]: thread j owns column j (the twin's order).
      if (tid < chunk) {
        const int j = tid;
        for (int t = 0; t < chunk; ++t) {
          float value = 0.0f;
          if (t == j && t < n) {
            value = 1.0f;
          } else if (t > j && t < n) {
            float s = 0.0f;
            for (int m = j; m < t; ++m)
              s = fma_rn(scratch[t * scratch_cols + m], scratch[m * scratch_cols + chunk + j], s);
            value = -s;
          }
          scratch[t * scratch_cols + chunk + j] = value;
        }
      }
      __syncthreads();
      for (int x = tid; x < chunk * chunk; x += threads)
        Tb[x] = bf16_bits_of(scratch[(x / chunk) * scratch_cols + chunk + x % chunk]);
      // X = β Γ k over Γk (recomputed: the twin rounds β·(Γk) from the unrounded Γk), Y = β v.
      for (int x = tid; x < chunk * K; x += threads) {
        const int t = x / K, i = x % K;
        kg[x] = t < n ? bf16_bits_of(mul_rn(beta[t], mul_rn(exp_f32(G[x]), in.k(c0 + t, i)))) : 0;
      }
      for (int x = tid; x < chunk * BV; x += threads) {
        const int t = x / BV, j = x % BV;
        Ub[x] = t < n ? bf16_bits_of(mul_rn(beta[t], in.v(c0 + t, v0 + j))) : 0;
      }
      __syncthreads();
      // W = 𝒯X into scratch[t][i] (the 𝒯 copy in scratch is no longer read).
      for_each_tile(chunk, K, [&](int t0, int i0) {
        frag_acc acc;
        wmma::fill_fragment(acc, 0.0f);
        mma_steps<frag_a_row, frag_b_row>(acc, Tb + t0 * chunk, chunk, 16, kg + i0, K, 16 * K, t0 / 16 + 1);
        wmma::store_matrix_sync(scratch + t0 * scratch_cols + i0, acc, scratch_cols, wmma::mem_row_major);
      });
      __syncthreads();
      for (int x = tid; x < chunk * K; x += threads) kg[x] = bf16_bits_of(scratch[(x / K) * scratch_cols + x % K]);
      __syncthreads();
      // Ũ = 𝒯Y − bf(W) bf(S) into scratch[t][j].
      for_each_tile(chunk, BV, [&](int t0, int j0) {
        frag_acc u, ws;
        wmma::fill_fragment(u, 0.0f);
        wmma::fill_fragment(ws, 0.0f);
        mma_steps<frag_a_row, frag_b_row>(u, Tb + t0 * chunk, chunk, 16, Ub + j0, BV, 16 * BV, t0 / 16 + 1);
        mma_steps<frag_a_row, frag_b_row>(ws, kg + t0 * K, K, 16, Sb + j0, BV, 16 * BV, K / 16);
        for (int e = 0; e < u.num_elements; ++e) u.x[e] = add_rn(u.x[e], -ws.x[e]);
        wmma::store_matrix_sync(scratch + t0 * scratch_cols + j0, u, scratch_cols, wmma::mem_row_major);
      });
      __syncthreads();
      for (int x = tid; x < chunk * BV; x += threads) Ub[x] = bf16_bits_of(scratch[(x / BV) * scratch_cols + x % BV]);
    } else {
      for (int x = tid; x < chunk * BV; x += threads) {
        const int t = x / BV, j = x % BV;
        Ub[x] = t < n ? bf16_bits_of(in.v(c0 + t, v0 + j)) : 0;
      }
    }
    __syncthreads();

    // Scores (Γτq)(Γ⁻¹k)ᵀ, causal with the diagonal, into P.
    for_each_tile(chunk, chunk, [&](int t0, int m0) {
      frag_acc acc;
      wmma::fill_fragment(acc, 0.0f);
      if (m0 <= t0) mma_steps<frag_a_row, frag_b_col>(acc, qg + t0 * K, K, 16, kn + m0 * K, K, 16, K / 16);
      wmma::store_matrix_sync(scratch + t0 * scratch_cols + m0, acc, scratch_cols, wmma::mem_row_major);
    });
    __syncthreads();
    for (int x = tid; x < chunk * chunk; x += threads) {
      const int t = x / chunk, m = x % chunk;
      P[x] = m <= t ? bf16_bits_of(scratch[t * scratch_cols + m]) : 0;
    }
    __syncthreads();
    // o = bf(Γτq) bf(S) + P bf(Ũ), one accumulator, into scratch, then the n rows to o.
    for_each_tile(chunk, BV, [&](int t0, int j0) {
      frag_acc acc;
      wmma::fill_fragment(acc, 0.0f);
      mma_steps<frag_a_row, frag_b_row>(acc, qg + t0 * K, K, 16, Sb + j0, BV, 16 * BV, K / 16);
      mma_steps<frag_a_row, frag_b_row>(acc, P + t0 * chunk, chunk, 16, Ub + j0, BV, 16 * BV, t0 / 16 + 1);
      wmma::store_matrix_sync(scratch + t0 * scratch_cols + j0, acc, scratch_cols, wmma::mem_row_major);
    });
    __syncthreads();
    for (int x = tid; x < n * BV; x += threads) {
      const int t = x / BV, j = x % BV;
      p.o[((b * p.tokens + c0 + t) * p.heads + h) * V + v0 + j] = scratch[t * scratch_cols + j];
    }
    // The carry's keys w ⊙ Γ_last Γ⁻¹ (w = κ or k; over qg, no longer read).
    for (int x = tid; x < chunk * K; x += threads) {
      const int t = x / K, i = x % K;
      qg[x] = t < n ? bf16_bits_of(mul_rn(mul_rn(exp_f32(G[(n - 1) * K + i]), exp_f32(-G[x])), in.w(c0 + t, i))) : 0;
    }
    __syncthreads();
    // S' = Γ_last ⊙ S + (carry keys)ᵀ bf(Ũ): the product into scratch (K x BV, leading dimension BV).
    for_each_tile(K, BV, [&](int i0, int j0) {
      frag_acc acc;
      wmma::fill_fragment(acc, 0.0f);
      mma_steps<frag_a_col, frag_b_row>(acc, qg + i0, K, 16 * K, Ub + j0, BV, 16 * BV, chunk / 16);
      wmma::store_matrix_sync(scratch + i0 * BV + j0, acc, BV, wmma::mem_row_major);
    });
    __syncthreads();
    for (int x = tid; x < K * BV; x += threads) {
      const float last = exp_f32(G[(n - 1) * K + x / BV]);
      S[x] = add_rn(mul_rn(last, S[x]), scratch[x]);
      Sb[x] = bf16_bits_of(S[x]);
    }
    __syncthreads();
  }
  for (int x = tid; x < K * BV; x += threads) p.final_state[((b * p.heads + h) * K + x / BV) * V + v0 + x % BV] = S[x];
}

template <class In>
void launch(const delta_rule_problem& p) {
  const int BV = p.value_dim < value_block ? p.value_dim : value_block;
  const shared_layout L(p.key_dim, BV);
  const auto kernel = delta_rule_kernel<In>;
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, L.total),
             "cudaFuncSetAttribute(delta_rule_kernel)");
  const long long blocks = static_cast<long long>(p.batch) * p.heads * ((p.value_dim + BV - 1) / BV);
  kernel<<<static_cast<unsigned>(blocks), threads, L.total, static_cast<cudaStream_t>(p.stream)>>>(p);
  check_cuda(cudaGetLastError(), "delta_rule_kernel launch");
}

}  // namespace

void delta_rule_device(const delta_rule_problem& p) {
  delta_rule_check(p);
  switch (p.dtype) {
    case input_dtype::f32: launch<float>(p); break;
    case input_dtype::bf16: launch<bf16_bits>(p); break;
    case input_dtype::f16: launch<f16_bits>(p); break;
  }
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
  delta_rule_device(device);
  check_cuda(cudaDeviceSynchronize(), "delta_rule_kernel");
  device_arena::download(host.o, device.o, B * T * HV * V);
  device_arena::download(host.final_state, device.final_state, B * HV * K * V);
}

}  // namespace kalman_oracle::gpu
