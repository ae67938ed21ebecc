// The KLA backward on the GPU (docs/kernels.md, "KLA backward"): every input's gradient from the
// scalar reverse recursion of grad/kla.hpp (docs/gradients.md), with a checkpoint of (λ, η) every
// 16 tokens and the chunk recomputed in registers; never an adjoint through 2×2 products. Plain C++;
// the kernels are in gpu/src/kla_backward.cu, the CPU twin in twin/kla_backward_twin.hpp.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "kalman_oracle/gpu/kla_forward.hpp"

namespace kalman_oracle::gpu {

/// One KLA backward problem: the forward problem's inputs (its outputs are not used), the
/// cotangents (binary32, contiguous; null: zero) dy, dy_var [B, T, M], dfinal_lambda,
/// dfinal_eta [B, M, S], and the gradients (binary32, contiguous): dq, dk [B, T, S]; dv, dLambda
/// [B, T, M]; da_bar, dp_bar [M, S] when ā and p̄ are static (strides along B and T 0), else
/// [B, T, M, S]; dlambda_0, deta_0 [B, M, S].
///
/// Supported layouts (std::invalid_argument otherwise): Λ [B, T, M] without broadcasting; ā and p̄
/// both static [M, S] or both [B, T, M, S], contiguous; λ₀, η₀ [B, M, S] or absent.
struct kla_backward_problem {
  kla_forward_problem forward;
  const float *dy = nullptr, *dy_var = nullptr, *dfinal_lambda = nullptr, *dfinal_eta = nullptr;
  /// The checkpoints a forward run on the same inputs wrote (kla_forward_problem::checkpoint_*):
  /// given, the backward does not run the forward again. Both or neither.
  const float *checkpoint_lambda = nullptr, *checkpoint_eta = nullptr;
  float *dq = nullptr, *dk = nullptr, *dv = nullptr, *dLambda = nullptr, *da_bar = nullptr, *dp_bar = nullptr,
        *dlambda_0 = nullptr, *deta_0 = nullptr;
};

/// True when ā is not static [M, S] (a stride along B or T is not 0, on an axis of extent > 1): then
/// ā and p̄ must both be [B, T, M, S] and so are their gradients.
inline bool kla_backward_decay_per_token(const kla_forward_problem& p) {
  return (p.batch > 1 && p.a_bar.stride[0] != 0) || (p.tokens > 1 && p.a_bar.stride[1] != 0);
}

/// std::invalid_argument naming the rule for sizes or layouts the kernels do not take.
inline void kla_backward_check(const kla_backward_problem& problem) {
  const kla_forward_problem& p = problem.forward;
  kla_check_sizes(p, "kla_backward");
  const auto fail = [](const std::string& what) { throw std::invalid_argument("kla_backward: " + what); };
  const long long B = p.batch, T = p.tokens, M = p.channels, S = p.state;
  // x's strides are those of a contiguous tensor of the given extents (an axis of extent 1 may have
  // any stride: it is never stepped along).
  const auto laid_out = [](const strided_input& x, std::initializer_list<std::pair<long long, long long>> axes) {
    int axis = 0;
    for (const auto& [extent, stride] : axes) {
      if (extent > 1 && x.stride[axis] != stride) return false;
      ++axis;
    }
    return true;
  };
  if (T > 0 && !laid_out(p.Lambda, {{B, T * M}, {T, M}, {M, 1}})) fail("Lambda must be [B, T, M], not broadcast");
  const bool per_token = kla_backward_decay_per_token(p);
  for (const auto* x : {&p.a_bar, &p.p_bar})
    if (T > 0 && !(per_token ? laid_out(*x, {{B, T * M * S}, {T, M * S}, {M, S}, {S, 1}})
                             : laid_out(*x, {{B, 0}, {T, 0}, {M, S}, {S, 1}})))
      fail(std::string(x == &p.a_bar ? "a_bar" : "p_bar") +
           ": the backward takes a_bar and p_bar both static [M, S] or both [B, T, M, S]");
  for (const auto* x : {&p.lambda_0, &p.eta_0})
    if (x->data != nullptr && !laid_out(*x, {{B, M * S}, {M, S}, {S, 1}}))
      fail(std::string(x == &p.lambda_0 ? "lambda_0" : "eta_0") + " must be [B, M, S] or absent");
  if ((problem.checkpoint_lambda == nullptr) != (problem.checkpoint_eta == nullptr))
    fail("checkpoint_lambda and checkpoint_eta: give both or neither");
  // With T = 0 the per-token gradients have no elements (and may be null).
  const bool tokens = T > 0;
  const std::tuple<const char*, const void*, bool> outputs[] = {{"dq", problem.dq, tokens},
                                                                {"dk", problem.dk, tokens},
                                                                {"dv", problem.dv, tokens},
                                                                {"dLambda", problem.dLambda, tokens},
                                                                {"da_bar", problem.da_bar, true},
                                                                {"dp_bar", problem.dp_bar, true},
                                                                {"dlambda_0", problem.dlambda_0, true},
                                                                {"deta_0", problem.deta_0, true}};
  for (const auto& [name, data, needed] : outputs)
    if (needed && data == nullptr) fail(std::string(name) + " is missing (a null pointer)");
}

/// Host vectors for every gradient of a problem, sized by its layout (for tests and tools).
struct kla_gradient_buffers {
  std::vector<float> dq, dk, dv, dLambda, da_bar, dp_bar, dlambda_0, deta_0;

  explicit kla_gradient_buffers(const kla_forward_problem& p) {
    const std::size_t B = static_cast<std::size_t>(p.batch), T = static_cast<std::size_t>(p.tokens),
                      M = static_cast<std::size_t>(p.channels), S = static_cast<std::size_t>(p.state);
    const std::size_t decays = kla_backward_decay_per_token(p) ? B * T * M * S : M * S;
    for (auto [to, count] : {std::pair{&dq, B * T * S}, std::pair{&dk, B * T * S}, std::pair{&dv, B * T * M},
                             std::pair{&dLambda, B * T * M}, std::pair{&da_bar, decays}, std::pair{&dp_bar, decays},
                             std::pair{&dlambda_0, B * M * S}, std::pair{&deta_0, B * M * S}})
      to->assign(count, 0.0f);
  }
  /// Points the problem's gradients at these vectors.
  void point(kla_backward_problem& g) {
    g.dq = dq.data();
    g.dk = dk.data();
    g.dv = dv.data();
    g.dLambda = dLambda.data();
    g.da_bar = da_bar.data();
    g.dp_bar = dp_bar.data();
    g.dlambda_0 = dlambda_0.data();
    g.deta_0 = deta_0.data();
  }
};

/// Scratch bytes the kernels need: checkpoints [B, ⌈T/16⌉, M, S] × 2, the per-block partial sums
/// over m of dq and dk [B, T, blocks, S] × 2 and the per-row partials of dā, dp̄ [B, M, S] × 2.
std::size_t kla_backward_scratch_bytes(const kla_backward_problem& problem);

/// Device pointers (asynchronous on problem.forward.stream); `scratch` holds kla_backward_scratch_bytes.
void kla_backward_device(const kla_backward_problem& problem, void* scratch);

/// Host pointers: copies in, poisons the gradients with NaN, runs, copies the gradients back.
void kla_backward_host(const kla_backward_problem& problem);

}  // namespace kalman_oracle::gpu
