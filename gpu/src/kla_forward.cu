// The fused KLA forward kernels and their launchers (include/kalman_oracle/gpu/kla_forward.hpp;
// docs/kernels.md, "KLA forward"). Where kla_forward_split_for(S) groups the elements (S a multiple
// of 4: every benchmark shape) the launcher runs kla_forward_grouped.cuh's kernel, several elements
// a thread; otherwise the kernel here.
//
// Schedule. One thread per element (b, m, s) folds the tokens in order with the per-element
// arithmetic of models/kla.cuh, keeping (λ, η) in registers: the sequential recursion of
// models/kla.hpp, never a [B, T, M, S] tensor in memory. A block holds every s of
// `channels_per_block` consecutive channels of one batch row (channels_per_block · S <= 256
// threads). Tokens go in chunks of 16. A chunk's q, k, v and Λ are staged in shared memory by the
// whole block, coalesced, the copy of chunk i + 1 (cp.async for binary32 inputs) overlapping the
// arithmetic of chunk i: one thread per element reading its own inputs from global memory waited a
// memory latency per token (7.2 ms at the benchmark shape, docs/kernels.md). Each thread writes its
// readout terms for the chunk to shared memory, then one thread per (token, channel) sums the S
// terms in order s = 0, 1, … from +0 (the reference's order, so the twin can repeat it) and writes
// y and y_var, consecutive threads consecutive channels. The rows of the term buffer are S + 1
// floats long, so that the summing threads (stride S + 1) and the writing threads (stride 1) both
// hit distinct banks.
#include <cuda_runtime.h>

#include <cstddef>

#include "device_arena.hpp"
#include "kalman_oracle/gpu/kla_forward.hpp"
#include "kalman_oracle/gpu/models/kla.cuh"
#include "kla_block.cuh"
#include "kla_forward_grouped.cuh"

namespace kalman_oracle::gpu {
namespace {

constexpr int kla_threads_per_block = 256;

/// The term buffers (two of [chunk][channels][S + 1]) and two staging buffers of a chunk's inputs.
std::size_t kla_shared_bytes(int S, int channels_per_block) {
  const std::size_t chunk = kla_chunk_tokens, channels = static_cast<std::size_t>(channels_per_block),
                    state = static_cast<std::size_t>(S);
  return sizeof(float) * (2 * chunk * channels * (state + 1) +
                          2 * static_cast<std::size_t>(kla_stage_floats(S, channels_per_block, false)));
}

/// TokenDecay: ā or p̄ varies with the token (stride along T not 0), read per token from global
/// memory; otherwise each thread reads its ā and p̄ once.
template <class In, bool TokenDecay>
__global__ void __launch_bounds__(kla_threads_per_block)
    kla_forward_kernel(const kla_forward_problem p, int channels_per_block) {
  extern __shared__ float shared[];
  const int S = p.state, M = p.channels, T = p.tokens;
  const int row = S + 1;
  float* mean_terms = shared;
  float* variance_terms = mean_terms + kla_chunk_tokens * channels_per_block * row;
  // Two staging buffers: chunk i + 1 is copied while chunk i is computed. (Chosen by a select, not
  // an array index, which would put them in local memory.)
  float* const staging = variance_terms + kla_chunk_tokens * channels_per_block * row;
  const kla_stage stage_0 = kla_stage_at(staging, S, channels_per_block, false);
  const kla_stage stage_1 =
      kla_stage_at(staging + kla_stage_floats(S, channels_per_block, false), S, channels_per_block, false);

  const kla_block_place place = kla_place(S, M, channels_per_block);
  const long long b = place.b;
  const int m_first = place.m_first, channels_here = place.channels_here, local = place.local, m = place.m, s = place.s;
  const bool active = place.active;

  const In* a_at = static_cast<const In*>(p.a_bar.data) + offset_of(p.a_bar, b, 0, m, s);
  const In* p_at = static_cast<const In*>(p.p_bar.data) + offset_of(p.p_bar, b, 0, m, s);
  const long long a_step = p.a_bar.stride[1], p_step = p.p_bar.stride[1];
  kla_element_state x{1.0f, 0.0f};
  float a_bar = 0.0f, p_bar = 0.0f;
  const int term_slot = local * row + s;  // this element's readout terms: token c at c · channels_per_block · row + it
  const int sum_channel = static_cast<int>(threadIdx.x) % channels_per_block,
            sum_token = static_cast<int>(threadIdx.x) / channels_per_block;
  if (active) {
    if (p.lambda_0.data) x.lambda = load_widened<In>(p.lambda_0, offset_of(p.lambda_0, b, m, s));
    if (p.eta_0.data) x.eta = load_widened<In>(p.eta_0, offset_of(p.eta_0, b, m, s));
    if (!TokenDecay && T > 0) {  // with T = 0 there is no ā or p̄ to read
      a_bar = widen(*a_at);
      p_bar = widen(*p_at);
    }
  }

  if (T > 0) stage_chunk<In>(p, stage_0, b, 0, min(kla_chunk_tokens, T), m_first, channels_here, channels_per_block);
  stage_commit();
  for (int t0 = 0, buffer = 0; t0 < T; t0 += kla_chunk_tokens, buffer ^= 1) {
    const int count = min(kla_chunk_tokens, T - t0);
    const int next_t0 = t0 + kla_chunk_tokens;
    if (next_t0 < T)
      stage_chunk<In>(p, buffer ? stage_0 : stage_1, b, next_t0, min(kla_chunk_tokens, T - next_t0), m_first,
                      channels_here, channels_per_block);
    stage_commit();
    stage_wait<1>();  // this chunk's copies are done (the next chunk's may still be in flight)
    __syncthreads();
    const kla_stage in = buffer ? stage_1 : stage_0;
    if (active && p.checkpoint_lambda != nullptr) {
      const long long at =
          ((b * ((T + kla_chunk_tokens - 1) / kla_chunk_tokens) + t0 / kla_chunk_tokens) * M + m) * S + s;
      p.checkpoint_lambda[at] = x.lambda;
      p.checkpoint_eta[at] = x.eta;
    }
    if (active) {
      const float *k_row = in.k + kla_staged(s, 0), *q_row = in.q + kla_staged(s, 0);
      const float *Lambda_row = in.Lambda + kla_staged(local, 0), *v_row = in.v + kla_staged(local, 0);
      const int term_stride = channels_per_block * row;
      const auto token = [&](int c) {
        if (TokenDecay) {
          a_bar = widen(*a_at);
          p_bar = widen(*p_at);
          a_at += a_step;
          p_at += p_step;
        }
        kla_readout_terms out;
        x = kla_element_step_and_readout(x, a_bar, p_bar, k_row[c], Lambda_row[c], v_row[c], q_row[c], out);
        mean_terms[c * term_stride + term_slot] = out.mean;
        variance_terms[c * term_stride + term_slot] = out.variance;
      };
      // A full chunk in an unrolled loop: the staged reads at fixed offsets, the loop's bookkeeping
      // once in eight tokens (it was a sixth of the instructions; 8 measured faster than 4 or 16,
      // which needs 80 registers: docs/kernels.md).
      if (count == kla_chunk_tokens) {
#pragma unroll 8
        for (int c = 0; c < kla_chunk_tokens; ++c) token(c);
      } else {
        for (int c = 0; c < count; ++c) token(c);
      }
    }
    __syncthreads();
    // The sums: thread (sum_token, sum_channel) and every S-th token after it (the block has
    // channels_per_block · S threads), consecutive threads consecutive channels (coalesced writes).
    if (sum_channel < channels_here) {
      for (int c = sum_token; c < count; c += S) {
        const float* mean_row = mean_terms + (c * channels_per_block + sum_channel) * row;
        const float* variance_row = variance_terms + (c * channels_per_block + sum_channel) * row;
        float y, y_var;
        sum_rows_in_order(mean_row, variance_row, S, y, y_var);
        const long long out_at = (b * T + t0 + c) * M + m_first + sum_channel;
        p.y[out_at] = y;
        p.y_var[out_at] = y_var;
      }
    }
    // The next iteration's copies go to the buffer read above: the __syncthreads before its
    // arithmetic orders them after every read (the sums read only the term buffers).
  }
  stage_wait<0>();
  if (active) {
    const long long out_at = (b * M + m) * S + s;
    p.final_lambda[out_at] = x.lambda;
    p.final_eta[out_at] = x.eta;
  }
}

template <class In, bool TokenDecay>
void launch(const kla_forward_problem& p) {
  const int per_block = kla_channels_per_block(p.state, p.channels);
  const std::size_t shared = kla_shared_bytes(p.state, per_block);
  auto* kernel = &kla_forward_kernel<In, TokenDecay>;
  // Up to 130 KiB (S = 1, 256 channels a block): above the 48 KiB a launch gets without asking.
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared)),
             "cudaFuncSetAttribute(kla_forward_kernel)");
  const dim3 grid((p.channels + per_block - 1) / per_block, p.batch);
  kernel<<<grid, per_block * p.state, shared, static_cast<cudaStream_t>(p.stream)>>>(p, per_block);
  check_cuda(cudaGetLastError(), "kla_forward_kernel");
}

template <class In, bool TokenDecay, int Elements, int Lanes>
void launch_grouped(const kla_forward_problem& p) {
  // Whole warps even where M is small (the butterfly's shuffles take every lane of a warp); threads
  // of channels past M only take part in them.
  const int per_block = kla_grouped_threads / Lanes;
  const std::size_t shared = kla_grouped_shared_bytes(p.state, per_block);
  auto* kernel = &kla_forward_grouped_kernel<In, TokenDecay, Elements, Lanes>;
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared)),
             "cudaFuncSetAttribute(kla_forward_grouped_kernel)");
  const dim3 grid((p.channels + per_block - 1) / per_block, p.batch);
  kernel<<<grid, per_block * Lanes, shared, static_cast<cudaStream_t>(p.stream)>>>(p, per_block);
  check_cuda(cudaGetLastError(), "kla_forward_grouped_kernel");
}

/// The kernel of kla_forward_split_for(S): grouped (Elements, Lanes as compile-time knobs) or one
/// element a thread.
template <class In, bool TokenDecay>
void launch_split(const kla_forward_problem& p) {
  const kla_forward_split split = kla_forward_split_for(p.state);
  if (!split.grouped) return launch<In, TokenDecay>(p);
  if (split.elements == 8) return launch_grouped<In, TokenDecay, 8, 32>(p);
  switch (split.lanes) {
    case 1: return launch_grouped<In, TokenDecay, 4, 1>(p);
    case 2: return launch_grouped<In, TokenDecay, 4, 2>(p);
    case 4: return launch_grouped<In, TokenDecay, 4, 4>(p);
    case 8: return launch_grouped<In, TokenDecay, 4, 8>(p);
    case 16: return launch_grouped<In, TokenDecay, 4, 16>(p);
    default: return launch_grouped<In, TokenDecay, 4, 32>(p);
  }
}

template <class In>
void launch_typed(const kla_forward_problem& p) {
  const bool token_decay = p.a_bar.stride[1] != 0 || p.p_bar.stride[1] != 0;
  token_decay ? launch_split<In, true>(p) : launch_split<In, false>(p);
}

}  // namespace

void kla_forward_device(const kla_forward_problem& problem) {
  kla_forward_check(problem);
  switch (problem.dtype) {
    case input_dtype::f32: return launch_typed<float>(problem);
    case input_dtype::bf16: return launch_typed<bf16_bits>(problem);
    case input_dtype::f16: return launch_typed<f16_bits>(problem);
  }
}

void kla_forward_host(const kla_forward_problem& host) {
  kla_forward_check(host);
  const long long B = host.batch, T = host.tokens, M = host.channels, S = host.state;
  device_arena arena;
  kla_forward_problem device = kla_upload_inputs(arena, host);
  device.y = arena.poisoned(B * T * M);
  device.y_var = arena.poisoned(B * T * M);
  device.final_lambda = arena.poisoned(B * M * S);
  device.final_eta = arena.poisoned(B * M * S);
  const long long checkpoints = kla_checkpoint_count(host);
  if (host.checkpoint_lambda != nullptr) {
    device.checkpoint_lambda = arena.poisoned(checkpoints);
    device.checkpoint_eta = arena.poisoned(checkpoints);
  }
  kla_forward_device(device);
  check_cuda(cudaDeviceSynchronize(), "kla_forward_kernel");
  device_arena::download(host.y, device.y, B * T * M);
  device_arena::download(host.y_var, device.y_var, B * T * M);
  device_arena::download(host.final_lambda, device.final_lambda, B * M * S);
  device_arena::download(host.final_eta, device.final_eta, B * M * S);
  if (host.checkpoint_lambda != nullptr) {
    device_arena::download(host.checkpoint_lambda, device.checkpoint_lambda, checkpoints);
    device_arena::download(host.checkpoint_eta, device.checkpoint_eta, checkpoints);
  }
}

}  // namespace kalman_oracle::gpu
