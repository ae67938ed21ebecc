// The KLA forward kernel with several elements a thread (docs/kernels.md, "KLA forward: several
// elements a thread"), for the S that kla_forward_split_for groups; src/kla_forward.cu launches it.
// Private to gpu/src.
//
// Why. With one thread an element (the other kernel in kla_forward.cu) a token cost 74 instructions
// a warp-step: the step and readout's own arithmetic about 35, the range checks 12, and the rest
// four shared-memory reads of the staged inputs, two writes of readout terms, the block's sums of
// those terms read back from shared memory, and the loop. Here a thread owns `Elements` consecutive
// s of one channel: one read of v and Λ serves them all, k and q arrive four at a time (one 16-byte
// read each), the thread adds its own readout terms in registers, and the `Lanes` threads of a
// channel add their sums by shuffles: no term buffer, no block-wide sum, and a barrier a chunk only
// for the staging.
//
// Order (the twin's kla_forward_readout_sum repeats it): a thread adds its terms in order of s from
// the first; the lanes' sums by a butterfly of __shfl_xor_sync with offsets 1, 2, … (lane j adds
// its sum and lane j ^ offset's, the same bits in both lanes since binary32 addition commutes); a
// lane without elements contributes +0.
#pragma once

#include <cuda_runtime.h>

#include "kalman_oracle/gpu/kla_forward.hpp"
#include "kalman_oracle/gpu/models/kla.cuh"
#include "kla_block.cuh"

namespace kalman_oracle::gpu {
namespace {

/// Threads a block: four warps (at the benchmark shape, 512 blocks: all resident at once, 3.9 an SM).
constexpr int kla_grouped_threads = 128;
/// Tokens a full chunk's loop takes a pass (1, 2 and 4 measured; 4 fastest).
constexpr int kla_grouped_unroll = 4;

/// One chunk's staged inputs: q and k [token][S] (s fastest: a thread's Elements values in 16-byte
/// reads), v and Λ [channel][kla_stage_row] (token fastest, the odd row keeping the block's channels
/// in distinct banks).
struct kla_grouped_stage {
  float *q, *k, *v, *Lambda;
};

/// Shared memory of the grouped kernel: two staging buffers. The q and k arrays come first, so each
/// starts on a 16-byte boundary (S is a multiple of 4).
inline std::size_t kla_grouped_shared_bytes(int S, int channels_per_block) {
  return sizeof(float) * 2 *
         (2 * static_cast<std::size_t>(kla_chunk_tokens) * S +
          2 * static_cast<std::size_t>(kla_stage_row) * channels_per_block);
}

__device__ __forceinline__ kla_grouped_stage kla_grouped_stage_at(float* shared, int S, int channels_per_block,
                                                                  int buffer) {
  const int token_floats = kla_chunk_tokens * S, channel_floats = kla_stage_row * channels_per_block;
  kla_grouped_stage st;
  st.q = shared + (2 * buffer) * token_floats;
  st.k = st.q + token_floats;
  st.v = shared + 4 * token_floats + (2 * buffer) * channel_floats;
  st.Lambda = st.v + channel_floats;
  return st;
}

/// Where a thread's copies start in stage_grouped_chunk and how they advance (fixed for the
/// launch: computed once, not a chunk).
struct kla_grouped_copy_plan {
  int token_0, s_0, token_step, s_step;                  // q, k: (token, s) over [count][S]
  int v_token_0, channel_0, v_token_step, channel_step;  // v, Λ: (token, channel) over [count][channels]
};

__device__ __forceinline__ kla_grouped_copy_plan kla_grouped_copy_plan_for(int S, int channels_per_block) {
  const int threads = static_cast<int>(blockDim.x), thread = static_cast<int>(threadIdx.x);
  return {thread / S,
          thread % S,
          threads / S,
          threads % S,
          thread / channels_per_block,
          thread % channels_per_block,
          threads / channels_per_block,
          threads % channels_per_block};
}

/// Issues the copies of tokens [t0, t0 + count) into `st`, coalesced: consecutive threads take
/// consecutive s (q, k) or consecutive channels (v, Λ); a thread's position advances by the block's
/// size each pass (`plan`), without a division a copied element.
template <class In>
__device__ __forceinline__ void stage_grouped_chunk(const kla_forward_problem& p, const kla_grouped_stage& st,
                                                    const kla_grouped_copy_plan& plan, long long b, int t0, int count,
                                                    int m_first, int channels_here, int channels_per_block) {
  const int S = p.state;
  const In* q = static_cast<const In*>(p.q.data);
  const In* k = static_cast<const In*>(p.k.data);
  const In* v = static_cast<const In*>(p.v.data);
  const In* Lambda = static_cast<const In*>(p.Lambda.data);
  for (int c = plan.token_0, s = plan.s_0; c < count;) {
    stage_element(st.q + c * S + s, q + offset_of(p.q, b, t0 + c, s));
    stage_element(st.k + c * S + s, k + offset_of(p.k, b, t0 + c, s));
    c += plan.token_step;
    s += plan.s_step;
    if (s >= S) {
      s -= S;
      ++c;
    }
  }
  for (int c = plan.v_token_0, channel = plan.channel_0; c < count;) {
    if (channel < channels_here) {
      stage_element(st.v + kla_staged(channel, c), v + offset_of(p.v, b, t0 + c, m_first + channel));
      stage_element(st.Lambda + kla_staged(channel, c), Lambda + offset_of(p.Lambda, b, t0 + c, m_first + channel));
    }
    c += plan.v_token_step;
    channel += plan.channel_step;
    if (channel >= channels_per_block) {
      channel -= channels_per_block;
      ++c;
    }
  }
}

/// One element's token (step and readout terms) with IEEE divisions: the fallback where a value
/// left the shared-reciprocal range (division.cuh). Out of line: inlined, the fallbacks of four
/// elements and four unrolled tokens made the token loop four times the size of its fast path.
struct kla_element_token {
  kla_element_state state;
  kla_readout_terms terms;
};
__device__ __noinline__ kla_element_token kla_exact_token(kla_element_state previous, kla_element_decay decay,
                                                          float key, float precision, float value, float query) {
  ieee_division exact;
  kla_element_token out;
  out.state = kla_element_step_by(exact, previous, decay, key, precision, value);
  out.terms = kla_readout_by(exact, out.state, query);
  return out;
}

/// Elements consecutive s of one channel a thread, Lanes threads a channel (kla_forward_split_for),
/// kla_grouped_threads / Lanes channels a block. TokenDecay as in kla_forward_kernel.
template <class In, bool TokenDecay, int Elements, int Lanes>
__global__ void __launch_bounds__(kla_grouped_threads)
    kla_forward_grouped_kernel(const kla_forward_problem p, int channels_per_block) {
  static_assert(Elements % 4 == 0 && (Lanes & (Lanes - 1)) == 0 && Lanes <= 32);
  extern __shared__ float4 shared_vectors[];
  float* const shared = reinterpret_cast<float*>(shared_vectors);
  const int S = p.state, M = p.channels, T = p.tokens;
  const int thread = static_cast<int>(threadIdx.x), lane = thread % Lanes, local = thread / Lanes;
  const long long b = blockIdx.y;
  const int m_first = static_cast<int>(blockIdx.x) * channels_per_block;
  const int channels_here = min(channels_per_block, M - m_first), m = m_first + local, s_first = lane * Elements;
  const bool writes = local < channels_here;        // this thread's channel exists
  const bool has_elements = writes && s_first < S;  // and this lane has elements

  kla_element_state x[Elements];
  kla_element_decay decay[Elements];
  const In* a_at = static_cast<const In*>(p.a_bar.data) + offset_of(p.a_bar, b, 0, m, s_first);
  const In* p_at = static_cast<const In*>(p.p_bar.data) + offset_of(p.p_bar, b, 0, m, s_first);
  const long long a_s = p.a_bar.stride[3], p_s = p.p_bar.stride[3];
  // Range records (division.cuh): the step's dividends λ_{t−1} and ā are checked once where they
  // are known, not a token: ā where it is static, λ₀ here, and each λ_t as the readout's divisor
  // (or, after a token that left the range, again from the exact step's result).
  bool decay_in_range = true, state_in_range = true;
#pragma unroll
  for (int g = 0; g < Elements; ++g) {
    x[g] = {1.0f, 0.0f};
    decay[g] = kla_decay(1.0f, 0.0f);
    if (has_elements) {
      if (p.lambda_0.data) x[g].lambda = load_widened<In>(p.lambda_0, offset_of(p.lambda_0, b, m, s_first + g));
      if (p.eta_0.data) x[g].eta = load_widened<In>(p.eta_0, offset_of(p.eta_0, b, m, s_first + g));
      if (!TokenDecay && T > 0) {  // with T = 0 there is no ā or p̄ to read
        decay[g] = kla_decay(widen(a_at[g * a_s]), widen(p_at[g * p_s]));
        decay_in_range = decay_in_range && in_markstein_range(decay[g].a_bar);
      }
    }
    state_in_range = state_in_range && in_markstein_range(x[g].lambda);
  }

  const kla_grouped_copy_plan plan = kla_grouped_copy_plan_for(S, channels_per_block);
  if (T > 0)
    stage_grouped_chunk<In>(p, kla_grouped_stage_at(shared, S, channels_per_block, 0), plan, b, 0,
                            min(kla_chunk_tokens, T), m_first, channels_here, channels_per_block);
  stage_commit();
  const int chunks = (T + kla_chunk_tokens - 1) / kla_chunk_tokens;
  for (int t0 = 0, buffer = 0; t0 < T; t0 += kla_chunk_tokens, buffer ^= 1) {
    const int count = min(kla_chunk_tokens, T - t0), next_t0 = t0 + kla_chunk_tokens;
    // This chunk's copies are done, every thread's (the wait, then the barrier), and every thread is
    // past its reads of the previous chunk, whose buffer the next chunk's copies now take: one
    // barrier a chunk, and the copy of chunk i + 1 overlaps the arithmetic of chunk i.
    stage_wait<0>();
    __syncthreads();
    if (next_t0 < T)
      stage_grouped_chunk<In>(p, kla_grouped_stage_at(shared, S, channels_per_block, buffer ^ 1), plan, b, next_t0,
                              min(kla_chunk_tokens, T - next_t0), m_first, channels_here, channels_per_block);
    stage_commit();
    const kla_grouped_stage in = kla_grouped_stage_at(shared, S, channels_per_block, buffer);
    if (has_elements && p.checkpoint_lambda != nullptr) {
      const long long at = ((b * chunks + t0 / kla_chunk_tokens) * M + m) * S + s_first;
#pragma unroll
      for (int g = 0; g < Elements; ++g) {
        p.checkpoint_lambda[at + g] = x[g].lambda;
        p.checkpoint_eta[at + g] = x[g].eta;
      }
    }
    const float *Lambda_row = in.Lambda + kla_staged(local, 0), *v_row = in.v + kla_staged(local, 0);
    float* y_at = p.y + (b * T + t0) * M + m;  // token c's outputs, advanced a token
    float* y_var_at = p.y_var + (b * T + t0) * M + m;
    const auto token = [&](int c) {
      float mean = 0.0f, variance = 0.0f;
      if (has_elements) {
        float key[Elements], query[Elements];
#pragma unroll
        for (int g = 0; g < Elements; g += 4) {
          const float4 k4 = *reinterpret_cast<const float4*>(in.k + c * S + s_first + g);
          const float4 q4 = *reinterpret_cast<const float4*>(in.q + c * S + s_first + g);
          key[g] = k4.x, key[g + 1] = k4.y, key[g + 2] = k4.z, key[g + 3] = k4.w;
          query[g] = q4.x, query[g + 1] = q4.y, query[g + 2] = q4.z, query[g + 3] = q4.w;
        }
        const float precision = Lambda_row[c], value = v_row[c];
        if (TokenDecay) {
          decay_in_range = true;
#pragma unroll
          for (int g = 0; g < Elements; ++g) {
            decay[g] = kla_decay(widen(a_at[g * a_s]), widen(p_at[g * p_s]));
            decay_in_range = decay_in_range && in_markstein_range(decay[g].a_bar);
          }
        }
        // The thread's elements through shared reciprocals with one range record for all of them,
        // and one branch: straight-line code over the elements, whose independent chains then
        // overlap (a branch an element, as kla_element_step_and_readout has, serialised them).
        // Either way each element's values are the IEEE ones (division.cuh).
        kla_element_state next[Elements];
        kla_readout_terms out[Elements];
        markstein_division fast;
        fast.in_range = decay_in_range && state_in_range;
#pragma unroll
        for (int g = 0; g < Elements; ++g) {
          next[g] = kla_element_step_by(fast, x[g], decay[g], key[g], precision, value);
          out[g] = kla_readout_by(fast, next[g], query[g]);  // checks λ_t, the next token's dividend
        }
        if (!fast.in_range) [[unlikely]] {
          state_in_range = true;
#pragma unroll
          for (int g = 0; g < Elements; ++g) {
            const kla_element_token exact = kla_exact_token(x[g], decay[g], key[g], precision, value, query[g]);
            next[g] = exact.state;
            out[g] = exact.terms;
            state_in_range = state_in_range && in_markstein_range(next[g].lambda);
          }
        } else {
          state_in_range = true;
        }
#pragma unroll
        for (int g = 0; g < Elements; ++g) {
          x[g] = next[g];
          mean = g == 0 ? out[g].mean : add_rn(mean, out[g].mean);
          variance = g == 0 ? out[g].variance : add_rn(variance, out[g].variance);
        }
        if (TokenDecay) {
          a_at += p.a_bar.stride[1];
          p_at += p.p_bar.stride[1];
        }
      }
#pragma unroll
      for (int offset = 1; offset < Lanes; offset *= 2) {
        mean = add_rn(mean, __shfl_xor_sync(0xffffffffu, mean, offset));
        variance = add_rn(variance, __shfl_xor_sync(0xffffffffu, variance, offset));
      }
      if (writes && lane == 0) {
        *y_at = mean;
        *y_var_at = variance;
      }
      y_at += M;
      y_var_at += M;
    };
    if (count == kla_chunk_tokens) {
#pragma unroll kla_grouped_unroll
      for (int c = 0; c < kla_chunk_tokens; ++c) token(c);
    } else {
      for (int c = 0; c < count; ++c) token(c);
    }
  }
  if (has_elements) {
#pragma unroll
    for (int g = 0; g < Elements; ++g) {
      const long long out_at = (b * M + m) * S + s_first + g;
      p.final_lambda[out_at] = x[g].lambda;
      p.final_eta[out_at] = x[g].eta;
    }
  }
}

}  // namespace
}  // namespace kalman_oracle::gpu
