// The KLA backward kernels and their launchers (include/kalman_oracle/gpu/kla_backward.hpp;
// docs/kernels.md, "KLA backward"). Three passes, each block laid out as the forward's (every s of
// kla_channels_per_block consecutive channels of one batch row, one thread per element):
//   1. checkpoints: the forward fold per element, writing (λ, η) before every chunk of 16 tokens;
//   2. reverse: chunk by chunk from the last, the block stages the chunk's inputs and cotangents,
//      each thread recomputes its chunk's 16 states from the checkpoint into registers and runs the
//      reverse recursion of grad/kla.hpp over them (models/kla.cuh), in two halves of 8 tokens; after
//      each half the block sums the terms: dv, dΛ over s (one thread per (token, channel), s in
//      order), dq, dk over the block's channels (one thread per (token, s), channels in order) into
//      a per-block partial; dā, dp̄ accumulate per thread over the tokens (static) or are written
//      per token;
//   3. reduction: dq, dk summed over the blocks' partials in block order, static dā, dp̄ over the
//      batch rows in order.
// Every sum has a fixed order, so the result is bit-identical run to run and equals the twin's
// (twin/kla_backward_twin.hpp).
#include <cuda_runtime.h>

#include <cstddef>
#include <initializer_list>
#include <tuple>
#include <utility>

#include "device_arena.hpp"
#include "kalman_oracle/gpu/kla_backward.hpp"
#include "kalman_oracle/gpu/models/kla.cuh"
#include "kla_block.cuh"

namespace kalman_oracle::gpu {
namespace {

constexpr int kla_backward_threads = 256;
/// The reverse pass sums its terms every 8 tokens (half a chunk): half the shared memory.
constexpr int kla_reverse_part = kla_chunk_tokens / 2;

struct kla_backward_scratch {
  float *checkpoint_lambda, *checkpoint_eta;  // [B, chunks, M, S]
  float *q_partial, *k_partial;               // [B, T, blocks, S]
  float *a_rows, *p_rows;                     // [B, M, S]
};

/// The forward step with IEEE divisions, out of line (kla_element_step's fallback, which inlined
/// doubled the recomputation's code).
__device__ __noinline__ kla_element_state kla_exact_step(kla_element_state previous, kla_element_decay decay, float key,
                                                         float precision, float value) {
  return kla_exact_step_inline{}(previous, decay, key, precision, value);
}
struct kla_exact_step_out_of_line {
  __device__ kla_element_state operator()(const kla_element_state& previous, const kla_element_decay& decay, float key,
                                          float precision, float value) const {
    return kla_exact_step(previous, decay, key, precision, value);
  }
};

/// The adjoint step's result and the adjoints it leaves, for the out-of-line fallback below.
struct kla_adjoint_token {
  kla_gradient_terms terms;
  kla_element_adjoint adjoint;
};

/// The reverse step with IEEE divisions (div_rn), out of line: the fallback where a value left the
/// shared-reciprocal range (inlined, it tripled the step's code).
__device__ __noinline__ kla_adjoint_token kla_exact_adjoint_step(kla_element_adjoint adjoint,
                                                                 kla_element_state previous, kla_element_state state,
                                                                 float a_bar, float p_bar, float key, float query,
                                                                 float precision, float value, float dy, float dy_var) {
  kla_adjoint_token out;
  out.terms =
      kla_element_adjoint_step(adjoint, previous, state, a_bar, p_bar, key, query, precision, value, dy, dy_var);
  out.adjoint = adjoint;
  return out;
}

/// The reverse step with its eight quotients through four shared reciprocals (λ_t, λ_t², den, den²)
/// and one range record (ā checked by the caller: `a_bar_in_range`), and one branch to the
/// fallback: the same bits as kla_element_adjoint_step (division.cuh), which the twin runs.
__device__ __forceinline__ kla_gradient_terms kla_adjoint_step_fast(
    kla_element_adjoint& adjoint, const kla_element_state& previous, const kla_element_state& state, float a_bar,
    bool a_bar_in_range, float p_bar, float key, float query, float precision, float value, float dy, float dy_var) {
  const kla_element_adjoint before = adjoint;
  markstein_division fast;
  fast.in_range = a_bar_in_range;  // ā's check, the caller's (once where ā is static)
  const kla_gradient_terms terms = kla_element_adjoint_step_by(fast, adjoint, previous, state, a_bar, p_bar, key, query,
                                                               precision, value, dy, dy_var);
  if (fast.in_range) [[likely]]
    return terms;
  const kla_adjoint_token exact =
      kla_exact_adjoint_step(before, previous, state, a_bar, p_bar, key, query, precision, value, dy, dy_var);
  adjoint = exact.adjoint;
  return exact.terms;
}

/// The length of a dq / dk term row (one (dq, dk) pair a channel of the block): the odd number of
/// channels_per_block and channels_per_block + 1, so that the writers (consecutive s, stride the row)
/// hit distinct banks. With one channel a block (S = 256) a row is one float, not two: that keeps
/// two blocks on an SM (the staged rows' padding had pushed the reverse kernel to 117.6 KiB).
__host__ __device__ __forceinline__ int kla_channel_row(int channels_per_block) { return channels_per_block | 1; }

/// The length of a dv / dΛ term row (one (dv, dΛ) pair an s): the odd number of S and S + 1, so that
/// the summing threads (consecutive channels, stride the row) hit distinct banks.
__host__ __device__ __forceinline__ int kla_state_row(int S) { return S | 1; }

int chunks_of(int T) { return (T + kla_chunk_tokens - 1) / kla_chunk_tokens; }

/// Floats of each scratch part: checkpoints [B, chunks, M, S], block partials [B, T, blocks, S],
/// per-row partials [B, M, S] (two of each).
struct kla_scratch_counts {
  std::size_t checkpoints, partials, rows;
};

kla_scratch_counts scratch_counts(const kla_forward_problem& p) {
  const std::size_t B = p.batch, T = p.tokens, M = p.channels, S = p.state;
  const std::size_t per_block = kla_channels_per_block(p.state, p.channels), blocks = (M + per_block - 1) / per_block;
  return {B * chunks_of(p.tokens) * M * S, B * T * blocks * S, B * M * S};
}

kla_backward_scratch carve(const kla_backward_problem& problem, void* scratch) {
  const kla_scratch_counts n = scratch_counts(problem.forward);
  float* next = static_cast<float*>(scratch);
  kla_backward_scratch out{};
  for (auto [to, count] :
       {std::pair{&out.checkpoint_lambda, n.checkpoints}, std::pair{&out.checkpoint_eta, n.checkpoints},
        std::pair{&out.q_partial, n.partials}, std::pair{&out.k_partial, n.partials}, std::pair{&out.a_rows, n.rows},
        std::pair{&out.p_rows, n.rows}}) {
    *to = next;
    next += count;
  }
  return out;
}

/// Pass 1: (λ, η) before every chunk, per element.
template <class In, bool TokenDecay>
__global__ void __launch_bounds__(kla_backward_threads)
    kla_checkpoint_kernel(const kla_forward_problem p, int channels_per_block, float* checkpoint_lambda,
                          float* checkpoint_eta) {
  extern __shared__ float shared[];
  const int S = p.state, M = p.channels, T = p.tokens, chunks = (T + kla_chunk_tokens - 1) / kla_chunk_tokens;
  const kla_block_place place = kla_place(S, M, channels_per_block);
  const long long b = place.b;
  const int m_first = place.m_first, channels_here = place.channels_here, local = place.local, m = place.m, s = place.s;
  const bool active = place.active;
  kla_stage stage{};
  stage.k = shared;
  stage.v = stage.k + kla_stage_row * S;
  stage.Lambda = stage.v + kla_stage_row * channels_per_block;

  kla_element_state x{1.0f, 0.0f};
  if (active) {
    if (p.lambda_0.data) x.lambda = load_widened<In>(p.lambda_0, offset_of(p.lambda_0, b, m, s));
    if (p.eta_0.data) x.eta = load_widened<In>(p.eta_0, offset_of(p.eta_0, b, m, s));
  }
  for (int chunk = 0; chunk < chunks; ++chunk) {
    const int t0 = chunk * kla_chunk_tokens, count = min(kla_chunk_tokens, T - t0);
    stage_chunk<In>(p, stage, b, t0, count, m_first, channels_here, channels_per_block);
    stage_commit();
    stage_wait<0>();
    __syncthreads();
    if (active) {
      const long long at = ((b * chunks + chunk) * M + m) * S + s;
      checkpoint_lambda[at] = x.lambda;
      checkpoint_eta[at] = x.eta;
      for (int c = 0; c < count; ++c) {
        const long long t = t0 + c;
        x = kla_element_step(x, load_widened<In>(p.a_bar, offset_of(p.a_bar, b, t, m, s)),
                             load_widened<In>(p.p_bar, offset_of(p.p_bar, b, t, m, s)), stage.k[kla_staged(s, c)],
                             stage.Lambda[kla_staged(local, c)], stage.v[kla_staged(local, c)],
                             kla_exact_step_out_of_line{});
      }
    }
    __syncthreads();
  }
}

/// Pass 2: the reverse recursion, chunk by chunk from the last.
template <class In, bool TokenDecay>
__global__ void __launch_bounds__(kla_backward_threads)
    kla_reverse_kernel(const kla_backward_problem problem, int channels_per_block, kla_backward_scratch scratch) {
  extern __shared__ float shared[];
  const kla_forward_problem& p = problem.forward;
  const int S = p.state, M = p.channels, T = p.tokens, chunks = (T + kla_chunk_tokens - 1) / kla_chunk_tokens;
  const int blocks = static_cast<int>(gridDim.x);
  const kla_block_place place = kla_place(S, M, channels_per_block);
  const long long b = place.b;
  const int m_first = place.m_first, channels_here = place.channels_here, local = place.local, m = place.m, s = place.s;
  const bool active = place.active;

  // Shared memory: two staging buffers (the chunk before this one in time is copied while this one
  // is computed), then the terms of half a chunk as pairs (one 8-byte write and read each): (dv, dΛ)
  // in rows of kla_state_row(S) per (token, channel); (dq, dk) in rows of
  // kla_channel_row(channels) per (token, s) (distinct banks for the writers and the summing
  // threads alike). Token j's pairs of this thread lie j · stride from its slot: the addresses are
  // formed once, not a token.
  const int stage_floats = kla_stage_floats(S, channels_per_block, true);
  const kla_stage stage_0 = kla_stage_at(shared, S, channels_per_block, true);
  const kla_stage stage_1 = kla_stage_at(shared + stage_floats, S, channels_per_block, true);
  const int s_row = kla_state_row(S), m_row = kla_channel_row(channels_per_block);
  float2* const v_Lambda_terms = reinterpret_cast<float2*>(shared + 2 * stage_floats);  // 2 · stage_floats is even
  float2* const q_k_terms = v_Lambda_terms + kla_reverse_part * channels_per_block * s_row;
  const int v_Lambda_stride = channels_per_block * s_row, q_k_stride = S * m_row;
  float2* const v_Lambda_slot = v_Lambda_terms + local * s_row + s;
  float2* const q_k_slot = q_k_terms + s * m_row + local;

  kla_element_adjoint adjoint{0.0f, 0.0f};
  if (active) {
    const long long at = (b * M + m) * S + s;
    if (problem.dfinal_lambda) adjoint.lambda = problem.dfinal_lambda[at];
    if (problem.dfinal_eta) adjoint.eta = problem.dfinal_eta[at];
  }
  float a_sum = 0.0f, p_sum = 0.0f;
  // Static ā, p̄: read once (per token they are read with each token, a_of and p_of).
  float a_static = 0.0f, p_static = 0.0f;
  if (!TokenDecay && active && T > 0) {
    a_static = load_widened<In>(p.a_bar, offset_of(p.a_bar, b, 0, m, s));
    p_static = load_widened<In>(p.p_bar, offset_of(p.p_bar, b, 0, m, s));
  }
  const bool a_static_in_range = in_markstein_range(a_static);  // the adjoint step's dividend ā, checked once
  const auto stage_tokens = [&](const kla_stage into, int chunk) {
    const int t0 = chunk * kla_chunk_tokens, count = min(kla_chunk_tokens, T - t0);
    stage_chunk<In>(p, into, b, t0, count, m_first, channels_here, channels_per_block);
    stage_cotangents(problem.dy, problem.dy_var, into, b, T, M, t0, count, m_first, channels_here, channels_per_block);
  };
  // Checkpoints: given by the forward (problem.checkpoint_*), or pass 1's.
  const float* checkpoint_lambda = problem.checkpoint_lambda ? problem.checkpoint_lambda : scratch.checkpoint_lambda;
  const float* checkpoint_eta = problem.checkpoint_eta ? problem.checkpoint_eta : scratch.checkpoint_eta;
  if (chunks > 0) stage_tokens(stage_0, chunks - 1);
  stage_commit();
  for (int chunk = chunks - 1, buffer = 0; chunk >= 0; --chunk, buffer ^= 1) {
    const int t0 = chunk * kla_chunk_tokens, count = min(kla_chunk_tokens, T - t0);
    if (chunk > 0) stage_tokens(buffer ? stage_0 : stage_1, chunk - 1);
    stage_commit();
    stage_wait<1>();  // this chunk's copies are done (the previous chunk's may still be in flight)
    __syncthreads();
    const kla_stage stage = buffer ? stage_1 : stage_0;

    // The chunk's states, recomputed from its checkpoint: states[c] before token t0 + c.
    kla_element_state states[kla_chunk_tokens + 1];
    float a_of[kla_chunk_tokens], p_of[kla_chunk_tokens];
    if (active) {
      const long long at = ((b * chunks + chunk) * M + m) * S + s;
      states[0] = {checkpoint_lambda[at], checkpoint_eta[at]};
#pragma unroll
      for (int c = 0; c < kla_chunk_tokens; ++c)
        if (c < count) {
          const long long t = t0 + c;
          a_of[c] = TokenDecay ? load_widened<In>(p.a_bar, offset_of(p.a_bar, b, t, m, s)) : a_static;
          p_of[c] = TokenDecay ? load_widened<In>(p.p_bar, offset_of(p.p_bar, b, t, m, s)) : p_static;
          states[c + 1] = kla_element_step(states[c], a_of[c], p_of[c], stage.k[kla_staged(s, c)],
                                           stage.Lambda[kla_staged(local, c)], stage.v[kla_staged(local, c)],
                                           kla_exact_step_out_of_line{});
        }
    }
#pragma unroll
    for (int half = 1; half >= 0; --half) {
      const int first = half * kla_reverse_part;
      const int here = max(0, min(kla_reverse_part, count - first));  // tokens of this half
      if (active) {
#pragma unroll
        for (int j = kla_reverse_part - 1; j >= 0; --j) {
          const int c = first + j;
          if (j < here) {
            const int cm = kla_staged(local, c);
            const kla_gradient_terms g = kla_adjoint_step_fast(
                adjoint, states[c], states[c + 1], a_of[c],
                TokenDecay ? in_markstein_range(a_of[c]) : a_static_in_range, p_of[c], stage.k[kla_staged(s, c)],
                stage.q[kla_staged(s, c)], stage.Lambda[cm], stage.v[cm], stage.dy[cm], stage.dy_var[cm]);
            v_Lambda_slot[j * v_Lambda_stride] = make_float2(g.v, g.Lambda);
            q_k_slot[j * q_k_stride] = make_float2(g.q, g.k);
            if (TokenDecay) {
              const long long at = ((b * T + t0 + c) * M + m) * S + s;
              problem.da_bar[at] = g.a_bar;
              problem.dp_bar[at] = g.p_bar;
            } else {
              a_sum = add_rn(a_sum, g.a_bar);
              p_sum = add_rn(p_sum, g.p_bar);
            }
          }
        }
      }
      __syncthreads();
      for (int o = static_cast<int>(threadIdx.x); o < here * channels_here; o += static_cast<int>(blockDim.x)) {
        const int j = o / channels_here, channel = o % channels_here;
        const float2* row = v_Lambda_terms + (j * channels_per_block + channel) * s_row;
        float v_sum = 0.0f, Lambda_sum = 0.0f;  // s in order from +0
        for (int i = 0; i < S; ++i) {
          const float2 pair = row[i];
          v_sum = add_rn(v_sum, pair.x);
          Lambda_sum = add_rn(Lambda_sum, pair.y);
        }
        const long long at = (b * T + t0 + first + j) * M + m_first + channel;
        problem.dv[at] = v_sum;
        problem.dLambda[at] = Lambda_sum;
      }
      for (int o = static_cast<int>(threadIdx.x); o < here * S; o += static_cast<int>(blockDim.x)) {
        const int j = o / S, i = o % S;
        const float2* row = q_k_terms + (j * S + i) * m_row;
        float q_sum = 0.0f, k_sum = 0.0f;  // the block's channels in order from +0
        for (int channel = 0; channel < channels_here; ++channel) {
          const float2 pair = row[channel];
          q_sum = add_rn(q_sum, pair.x);
          k_sum = add_rn(k_sum, pair.y);
        }
        const long long at = ((b * T + t0 + first + j) * blocks + blockIdx.x) * S + i;
        scratch.q_partial[at] = q_sum;
        scratch.k_partial[at] = k_sum;
      }
      __syncthreads();
    }
  }
  stage_wait<0>();
  if (active) {
    const long long at = (b * M + m) * S + s;
    problem.dlambda_0[at] = adjoint.lambda;
    problem.deta_0[at] = adjoint.eta;
    scratch.a_rows[at] = a_sum;
    scratch.p_rows[at] = p_sum;
  }
}

/// Pass 3a: dq, dk [b, t, s] = the blocks' partials in block order, from +0.
__global__ void kla_reduce_blocks_kernel(const float* __restrict__ q_partial, const float* __restrict__ k_partial,
                                         float* __restrict__ dq, float* __restrict__ dk, long long rows, int blocks,
                                         int S) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * S) return;
  const long long row = i / S, s = i % S;
  float q_sum = 0.0f, k_sum = 0.0f;
  for (int block = 0; block < blocks; ++block) {
    q_sum = add_rn(q_sum, q_partial[(row * blocks + block) * S + s]);
    k_sum = add_rn(k_sum, k_partial[(row * blocks + block) * S + s]);
  }
  dq[i] = q_sum;
  dk[i] = k_sum;
}

/// Pass 3b: static dā, dp̄ [m, s] = the batch rows in order, from +0.
__global__ void kla_reduce_rows_kernel(const float* __restrict__ a_rows, const float* __restrict__ p_rows,
                                       float* __restrict__ da, float* __restrict__ dp, int B, long long elements) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= elements) return;
  float a_sum = 0.0f, p_sum = 0.0f;
  for (int b = 0; b < B; ++b) {
    a_sum = add_rn(a_sum, a_rows[b * elements + i]);
    p_sum = add_rn(p_sum, p_rows[b * elements + i]);
  }
  da[i] = a_sum;
  dp[i] = p_sum;
}

std::size_t checkpoint_shared_bytes(int S, int per_block) {
  return sizeof(float) * (static_cast<std::size_t>(kla_stage_row) * (S + 2 * per_block));
}

std::size_t reverse_shared_bytes(int S, int per_block) {
  const std::size_t part = kla_reverse_part, s = S, c = per_block, c_row = kla_channel_row(per_block);
  return sizeof(float) * 2 * static_cast<std::size_t>(kla_stage_floats(S, per_block, true)) +
         sizeof(float2) * (part * c * kla_state_row(S) + part * s * c_row);
}

template <class In, bool TokenDecay>
void launch(const kla_backward_problem& problem, const kla_backward_scratch& scratch) {
  const kla_forward_problem& p = problem.forward;
  const int per_block = kla_channels_per_block(p.state, p.channels);
  const dim3 grid((p.channels + per_block - 1) / per_block, p.batch);
  const int threads = per_block * p.state;
  const auto stream = static_cast<cudaStream_t>(p.stream);
  if (p.tokens > 0 && problem.checkpoint_lambda == nullptr) {  // no checkpoints from the forward
    auto* checkpoint = &kla_checkpoint_kernel<In, TokenDecay>;
    const std::size_t shared_1 = checkpoint_shared_bytes(p.state, per_block);
    check_cuda(
        cudaFuncSetAttribute(checkpoint, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared_1)),
        "cudaFuncSetAttribute(kla_checkpoint_kernel)");
    checkpoint<<<grid, threads, shared_1, stream>>>(p, per_block, scratch.checkpoint_lambda, scratch.checkpoint_eta);
    check_cuda(cudaGetLastError(), "kla_checkpoint_kernel");
  }
  auto* reverse = &kla_reverse_kernel<In, TokenDecay>;
  const std::size_t shared_2 = reverse_shared_bytes(p.state, per_block);
  check_cuda(cudaFuncSetAttribute(reverse, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared_2)),
             "cudaFuncSetAttribute(kla_reverse_kernel)");
  reverse<<<grid, threads, shared_2, stream>>>(problem, per_block, scratch);
  check_cuda(cudaGetLastError(), "kla_reverse_kernel");
  const long long rows = static_cast<long long>(p.batch) * p.tokens;
  if (rows > 0) {
    const long long outputs = rows * p.state;
    kla_reduce_blocks_kernel<<<static_cast<unsigned>((outputs + 255) / 256), 256, 0, stream>>>(
        scratch.q_partial, scratch.k_partial, problem.dq, problem.dk, rows, static_cast<int>(grid.x), p.state);
    check_cuda(cudaGetLastError(), "kla_reduce_blocks_kernel");
  }
  if (!TokenDecay) {
    const long long elements = static_cast<long long>(p.channels) * p.state;
    kla_reduce_rows_kernel<<<static_cast<unsigned>((elements + 255) / 256), 256, 0, stream>>>(
        scratch.a_rows, scratch.p_rows, problem.da_bar, problem.dp_bar, p.batch, elements);
    check_cuda(cudaGetLastError(), "kla_reduce_rows_kernel");
  }
}

template <class In>
void launch_typed(const kla_backward_problem& problem, const kla_backward_scratch& scratch) {
  kla_backward_decay_per_token(problem.forward) ? launch<In, true>(problem, scratch)
                                                : launch<In, false>(problem, scratch);
}

}  // namespace

std::size_t kla_backward_scratch_bytes(const kla_backward_problem& problem) {
  kla_backward_check(problem);
  const kla_scratch_counts n = scratch_counts(problem.forward);
  return sizeof(float) * 2 * (n.checkpoints + n.partials + n.rows);
}

void kla_backward_device(const kla_backward_problem& problem, void* scratch) {
  kla_backward_check(problem);
  const kla_backward_scratch parts = carve(problem, scratch);
  switch (problem.forward.dtype) {
    case input_dtype::f32: return launch_typed<float>(problem, parts);
    case input_dtype::bf16: return launch_typed<bf16_bits>(problem, parts);
    case input_dtype::f16: return launch_typed<f16_bits>(problem, parts);
  }
}

void kla_backward_host(const kla_backward_problem& host) {
  kla_backward_check(host);
  const kla_forward_problem& hp = host.forward;
  const long long B = hp.batch, T = hp.tokens, M = hp.channels, S = hp.state;
  const long long decays = kla_backward_decay_per_token(hp) ? B * T * M * S : M * S;
  device_arena arena;
  kla_backward_problem device = host;
  device.forward = kla_upload_inputs(arena, hp);
  device.dy = arena.upload(host.dy, B * T * M);
  device.dy_var = arena.upload(host.dy_var, B * T * M);
  device.dfinal_lambda = arena.upload(host.dfinal_lambda, B * M * S);
  device.dfinal_eta = arena.upload(host.dfinal_eta, B * M * S);
  device.checkpoint_lambda = arena.upload(host.checkpoint_lambda, kla_checkpoint_count(hp));
  device.checkpoint_eta = arena.upload(host.checkpoint_eta, kla_checkpoint_count(hp));
  const std::tuple<float*, float**, long long> gradients[] = {{host.dq, &device.dq, B * T * S},
                                                              {host.dk, &device.dk, B * T * S},
                                                              {host.dv, &device.dv, B * T * M},
                                                              {host.dLambda, &device.dLambda, B * T * M},
                                                              {host.da_bar, &device.da_bar, decays},
                                                              {host.dp_bar, &device.dp_bar, decays},
                                                              {host.dlambda_0, &device.dlambda_0, B * M * S},
                                                              {host.deta_0, &device.deta_0, B * M * S}};
  for (const auto& [on_host, on_device, count] : gradients) *on_device = arena.poisoned(count);
  kla_backward_device(device, arena.allocate(kla_backward_scratch_bytes(device)));
  check_cuda(cudaDeviceSynchronize(), "kla_backward kernels");
  for (const auto& [on_host, on_device, count] : gradients) device_arena::download(on_host, *on_device, count);
}

}  // namespace kalman_oracle::gpu
