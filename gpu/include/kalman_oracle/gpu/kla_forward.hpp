// The fused KLA forward on the GPU (docs/kernels.md, "KLA forward"): v, Λ, k, q, ā, p̄, λ₀, η₀ →
// y, y_var and the final (λ, η), never writing a [B, T, M, S] tensor. Plain C++: callable from code
// that nvcc never sees; the kernel is in gpu/src/kla_forward.cu, its CPU twin in
// twin/kla_forward_twin.hpp.
#pragma once

#include <stdexcept>
#include <string>
#include <tuple>

#include "kalman_oracle/gpu/input_element.cuh"
#include "kalman_oracle/gpu/strided_input.cuh"

namespace kalman_oracle::gpu {

/// One KLA forward problem. Shapes (docs/math.md §6): q, k [B, T, S]; v, Lambda [B, T, M]; a_bar,
/// p_bar [B, T, M, S]; lambda_0, eta_0 [B, M, S] (data null: the defaults 1 and 0). Outputs binary32,
/// contiguous: y, y_var [B, T, M]; final_lambda, final_eta [B, M, S].
struct kla_forward_problem {
  int batch = 0, tokens = 0, channels = 0, state = 0;  // B, T, M, S
  input_dtype dtype = input_dtype::f32;
  strided_input q, k, v, Lambda, a_bar, p_bar, lambda_0, eta_0;
  float *y = nullptr, *y_var = nullptr, *final_lambda = nullptr, *final_eta = nullptr;
  /// Optional (training): (λ, η) before every chunk of kla_chunk_tokens tokens, [B, ⌈T/16⌉, M, S]
  /// each, for the backward (kla_backward_problem::checkpoint_*). Null: not written.
  float *checkpoint_lambda = nullptr, *checkpoint_eta = nullptr;
  /// The CUDA stream (a cudaStream_t) the device launchers use; null: the default stream.
  void* stream = nullptr;
};

/// Elements of each checkpoint tensor: B · ⌈T/16⌉ · M · S.
inline long long kla_checkpoint_count(const kla_forward_problem& p) {
  return static_cast<long long>(p.batch) * ((p.tokens + 15) / 16) * p.channels * p.state;
}

/// The largest state size S the kernel takes (one block holds every s of a channel).
inline constexpr int kla_forward_max_state = 256;

/// Tokens per chunk: the kernels stage a chunk's inputs in shared memory, and the backward keeps a
/// checkpoint of (λ, η) per chunk.
inline constexpr int kla_chunk_tokens = 16;

/// Channels per block of the KLA kernels: as many whole channels (S threads each) as 256 threads
/// hold, at most M. The backward's sums over m go channel by channel within a block, then block by
/// block, so its twin needs this too.
inline int kla_channels_per_block(int S, int M) {
  const int fit = 256 / S;
  return fit < 1 ? 1 : (fit < M ? fit : M);
}

/// How the forward kernel lays one channel's S elements over threads (docs/kernels.md, "KLA
/// forward: several elements a thread"). `grouped`: each thread takes `elements` consecutive s (4,
/// or 8 when S > 128), `lanes` threads a channel (the power of two that holds S; lanes past S have
/// no elements), and a channel's readout sums go in the order of the twin's kla_forward_readout_sum.
/// Otherwise (S not a multiple of `elements`) one thread takes one element and a channel's terms
/// are summed in order s = 0, 1, … from +0.
struct kla_forward_split {
  bool grouped;
  int elements, lanes;
};
inline kla_forward_split kla_forward_split_for(int S) {
  const int elements = S > 128 ? 8 : 4;
  if (S % elements != 0) return {false, 1, S};
  int lanes = 1;
  while (lanes * elements < S) lanes *= 2;
  return {true, elements, lanes};
}

/// std::invalid_argument ("<who>: ...") unless B, M >= 1, T >= 0 and 1 <= S <= 256.
inline void kla_check_sizes(const kla_forward_problem& p, const char* who) {
  const auto fail = [who](const std::string& what) { throw std::invalid_argument(std::string(who) + ": " + what); };
  if (p.batch < 1 || p.channels < 1 || p.tokens < 0)
    fail("B and M must be >= 1 and T >= 0, got B = " + std::to_string(p.batch) + ", M = " + std::to_string(p.channels) +
         ", T = " + std::to_string(p.tokens));
  if (p.state < 1 || p.state > kla_forward_max_state)
    fail("S = " + std::to_string(p.state) + ": the kernel takes 1 <= S <= " + std::to_string(kla_forward_max_state));
}

/// std::invalid_argument naming the rule when the sizes are out of range (kla_check_sizes) or a
/// tensor is missing. Values are the caller's business (a fixture's inputs are valid; models/kla.hpp
/// states the rules).
inline void kla_forward_check(const kla_forward_problem& p) {
  kla_check_sizes(p, "kla_forward");
  const auto fail = [](const std::string& what) { throw std::invalid_argument("kla_forward: " + what); };
  // With T = 0 the per-token tensors have no elements (and may be null); the final state is the prior.
  const bool per_token = p.tokens > 0;
  const std::tuple<const char*, const void*, bool> required[] = {{"q", p.q.data, per_token},
                                                                 {"k", p.k.data, per_token},
                                                                 {"v", p.v.data, per_token},
                                                                 {"Lambda", p.Lambda.data, per_token},
                                                                 {"a_bar", p.a_bar.data, per_token},
                                                                 {"p_bar", p.p_bar.data, per_token},
                                                                 {"y", p.y, per_token},
                                                                 {"y_var", p.y_var, per_token},
                                                                 {"final_lambda", p.final_lambda, true},
                                                                 {"final_eta", p.final_eta, true}};
  if ((p.checkpoint_lambda == nullptr) != (p.checkpoint_eta == nullptr))
    fail("checkpoint_lambda and checkpoint_eta: give both or neither");
  for (const auto& [name, data, needed] : required)
    if (needed && data == nullptr) fail(std::string(name) + " is missing (a null pointer)");
}

/// Runs the kernel on device pointers (asynchronous on problem.stream); std::runtime_error for a
/// CUDA error.
void kla_forward_device(const kla_forward_problem& problem);

/// The same problem with host pointers, for tests and the runner: copies every input to the device
/// (the extent its strides reach), poisons the outputs with NaN, runs, copies the outputs back.
void kla_forward_host(const kla_forward_problem& problem);

}  // namespace kalman_oracle::gpu
