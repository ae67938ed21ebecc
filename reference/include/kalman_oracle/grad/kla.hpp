// Reference adjoint of Kalman Linear Attention (docs/math.md §6, §9; models/kla.hpp).
//
//     gradients<T> kla_backward(const kla_inputs<T>& in, const cotangents<T>& cot)
//
// Cotangents (full output shapes, any subset): "y", "y_var" [B, T, M]; "final_lambda",
// "final_eta" [B, M, S]. L = Σ_t (⟨y_t, dy_t⟩ + ⟨y_var_t, dy_var_t⟩) + ⟨λ_T, dλ_T⟩ + ⟨η_T, dη_T⟩.
// Gradients, named as kla_inputs' fields: "q", "k" [B, T, S]; "v" [B, T, M]; "Lambda", "a_bar",
// "p_bar" shaped as given (sums over broadcast axes); "lambda_0", "eta_0" as given, or [B, M, S]
// for the defaults λ_0 = 1, η_0 = 0.
//
// The recursion (per element (m, s), scalar adjoints λ̄_t = ∂L/∂λ_t, η̄_t = ∂L/∂η_t, from
// λ̄_T = dλ_T, η̄_T = dη_T, for t = T..1; den_t = ā² + p̄ λ_{t−1}, α_t = ā / den_t):
//     readout of token t:  η̄_t += q dy / λ_t ;  λ̄_t −= (q dy η_t + q² dy_var) / λ_t²
//                          dq_t,s += Σ_m (dy η_t + 2 q dy_var) / λ_t
//     mean   η_t = α_t η_{t−1} + ρ_t :   ρ̄ = η̄_t ;  ᾱ = η̄_t η_{t−1} ;  η̄_{t−1} = α_t η̄_t
//     den̄   = −(λ̄_t λ_{t−1} + ᾱ ā) / den_t²        (den_t appears in λ_t and in α_t)
//     precision, a SCALAR adjoint through the Möbius step λ_t = M_t · λ_{t−1}:
//             λ̄_{t−1} = λ̄_t · ā² / den_t² + den̄ · p̄
//     where ā²/den_t² = det M_t / (C λ_{t−1} + D)² is the derivative of the leaf's action
//     (M_t = [[1 + p̄φ, ā²φ], [p̄, ā²]], det ā², C λ + D = den_t), and den̄·p̄ = −p̄ ā ᾱ / den_t² is the
//     mean decay's dependence on λ_{t−1}. Never an adjoint through normalised 2×2 products: the
//     scan's products are a device of the forward pass, and their rescaling (a free factor) has
//     no adjoint; the scalar recursion above is what a backward kernel runs (in reverse, after the
//     forward scan has produced every λ_t).
//     ā̄ += ᾱ / den_t + 2 ā den̄ ;  p̄̄ += den̄ λ_{t−1}
//     φ = Λ k², ρ = v Λ k :  Λ̄ += λ̄_t k² + ρ̄ v k ;  k̄ += 2 Λ k λ̄_t + ρ̄ v Λ ;  v̄ += ρ̄ Λ k
// and dλ_0 = λ̄_0, dη_0 = η̄_0.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kalman_oracle/grad/common.hpp"
#include "kalman_oracle/models/kla.hpp"
#include "kalman_oracle/models/kla_parallel.hpp"

namespace kalman_oracle {

/// One step of KLA's precision recursion, λ_t = λ_{t−1} / (ā² + p̄ λ_{t−1}) + φ_t (models/kla.hpp,
/// the same operations in the same order). A function of its own so that a scalar type may give the
/// whole step a rule: the first-order running error (scalar/running_error.hpp) propagates λ's error
/// by the step's exact derivative ā²/den² (the Möbius contraction), which the rule-per-operation
/// cannot see (it takes |∂/∂λ| of numerator and denominator apart).
template <class T>
T kla_precision_step(const T& lambda_prev, const T& a, const T& p, const T& phi) {
  const T den = a * a + p * lambda_prev;
  return lambda_prev / den + phi;
}

template <class T>
gradients<T> kla_backward(const kla_inputs<T>& inputs, const cotangents<T>& cot) {
  const detail::kla_checked_inputs<T> in(inputs);
  const std::size_t B = in.dims.batch, N = in.dims.tokens, M = in.dims.channels, S = in.dims.state;
  detail::grad::require_known_cotangents(cot, {"y", "y_var", "final_lambda", "final_eta"}, "kla");
  const tensor<T>* d_y = detail::grad::cotangent(cot, "y", {B, N, M});
  const tensor<T>* d_yvar = detail::grad::cotangent(cot, "y_var", {B, N, M});
  const tensor<T>* d_lambda_T = detail::grad::cotangent(cot, "final_lambda", {B, M, S});
  const tensor<T>* d_eta_T = detail::grad::cotangent(cot, "final_eta", {B, M, S});
  using detail::grad::cotangent_at;

  tensor<T> dq("q", {B, N, S}), dk("k", {B, N, S}), dv("v", {B, N, M});
  broadcast_accumulator<T> dLambda("Lambda", inputs.Lambda.shape(), {B, N, M});
  broadcast_accumulator<T> da("a_bar", inputs.a_bar.shape(), {B, N, M, S});
  broadcast_accumulator<T> dp("p_bar", inputs.p_bar.shape(), {B, N, M, S});
  broadcast_accumulator<T> dlambda0("lambda_0", inputs.lambda_0 ? inputs.lambda_0->shape() : shape_t{B, M, S},
                                    {B, M, S});
  broadcast_accumulator<T> deta0("eta_0", inputs.eta_0 ? inputs.eta_0->shape() : shape_t{B, M, S}, {B, M, S});

  std::vector<T> lambda(N + 1), eta(N + 1);  // λ_0..λ_N, η_0..η_N of one element
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t m = 0; m < M; ++m)
      for (std::size_t s = 0; s < S; ++s) {
        // Forward (models/kla.hpp, line by line), storing the trajectory.
        lambda[0] = in.lambda_0(b, m, s);
        eta[0] = in.eta_0(b, m, s);
        for (std::size_t t = 0; t < N; ++t) {
          const T& a = in.a_bar(b, t, m, s);
          const T& p = in.p_bar(b, t, m, s);
          const T& key = in.k(b, t, s);
          const T& precision = in.Lambda(b, t, m);
          const T den = a * a + p * lambda[t];
          lambda[t + 1] = kla_precision_step(lambda[t], a, p, T(precision * key * key));
          eta[t + 1] = a / den * eta[t] + in.v(b, t, m) * precision * key;
        }
        // Reverse.
        T lam_bar = cotangent_at(d_lambda_T, b, m, s), eta_bar = cotangent_at(d_eta_T, b, m, s);
        for (std::size_t t = N; t-- > 0;) {
          const T& a = in.a_bar(b, t, m, s);
          const T& p = in.p_bar(b, t, m, s);
          const T& key = in.k(b, t, s);
          const T& query = in.q(b, t, s);
          const T& precision = in.Lambda(b, t, m);
          const T& value = in.v(b, t, m);
          const T& lam = lambda[t + 1];
          const T& lam_prev = lambda[t];
          // Readout of token t (read after write): y += q η_t / λ_t, y_var += q² / λ_t.
          const T dy = cotangent_at(d_y, b, t, m), dyv = cotangent_at(d_yvar, b, t, m);
          eta_bar += query * dy / lam;
          lam_bar -= (query * dy * eta[t + 1] + query * query * dyv) / (lam * lam);
          dq(b, t, s) += (dy * eta[t + 1] + 2 * query * dyv) / lam;
          // η_t = α_t η_{t−1} + ρ_t.
          const T den = a * a + p * lam_prev;
          const T alpha = a / den;
          const T rho_bar = eta_bar;
          const T alpha_bar = eta_bar * eta[t];
          // den_t enters λ_t = λ_{t−1}/den + φ and α_t = ā/den. The mean decay's share (planted bug
          // grad_kla_missing_mean_term drops it: α_t's dependence on λ_{t−1}, ā and p̄):
          const T den_bar_mean =
              KALMAN_ORACLE_MUTANT(grad_kla_missing_mean_term, T(-(alpha_bar * a) / (den * den)), T(0));
          const T den_bar = -(lam_bar * lam_prev) / (den * den) + den_bar_mean;
          // φ = Λ k², ρ = v Λ k.
          const T& phi_bar = lam_bar;
          dLambda.add(phi_bar * key * key + rho_bar * value * key, b, t, m);
          dk(b, t, s) += 2 * precision * key * phi_bar + rho_bar * value * precision;
          dv(b, t, m) += rho_bar * precision * key;
          da.add(alpha_bar / den + 2 * a * den_bar, b, t, m, s);
          // p̄̄ = den̄ λ_{t−1} (planted bug grad_kla_noise_wrong_time: λ_t, the wrong time index).
          dp.add(den_bar * KALMAN_ORACLE_MUTANT(grad_kla_noise_wrong_time, lam_prev, lam), b, t, m, s);
          // The scalar precision adjoint: ∂λ_t/∂λ_{t−1} = ā²/den² (= det/(Cλ+D)² of the leaf), plus
          // the mean decay's term p̄ · den̄_mean.
          lam_bar = lam_bar * (a * a) / (den * den) + p * den_bar_mean;
          eta_bar = alpha * eta_bar;
        }
        dlambda0.add(lam_bar, b, m, s);
        deta0.add(eta_bar, b, m, s);
      }

  gradients<T> out;
  out.set(std::move(dq));
  out.set(std::move(dk));
  out.set(std::move(dv));
  out.set(dLambda.take());
  out.set(da.take());
  out.set(dp.take());
  out.set(dlambda0.take());
  out.set(deta0.take());
  return out;
}

/// KLA as a model for grad/truth.hpp: the sequential form, or with `parallel` set the scan form
/// (models/kla_parallel.hpp, any schedule, rescale mode and recovery).
struct kla_model {
  template <class T>
  using inputs_type = kla_inputs<T>;
  std::optional<kla_scan_options> parallel;

  template <class T>
  kla_outputs<T> forward(const kla_inputs<T>& in) const {
    return parallel ? kla_parallel_forward(in, *parallel) : kla_forward(in);
  }
  template <class T>
  static gradients<T> backward(const kla_inputs<T>& in, const cotangents<T>& cot) {
    return kla_backward(in, cot);
  }
  template <class U, class T, class F>
  static kla_inputs<U> transform(const kla_inputs<T>& in, F&& f) {
    kla_inputs<U> out{f("q", in.q),         f("k", in.k),         f("v", in.v), f("Lambda", in.Lambda),
                      f("a_bar", in.a_bar), f("p_bar", in.p_bar), std::nullopt, std::nullopt};
    if (in.lambda_0) out.lambda_0 = f("lambda_0", *in.lambda_0);
    if (in.eta_0) out.eta_0 = f("eta_0", *in.eta_0);
    return out;
  }
  template <class T, class F>
  static void for_each_output(const kla_outputs<T>& out, F&& f) {
    f("y", out.y);
    f("y_var", out.y_var);
    f("final_lambda", out.final_lambda);
    f("final_eta", out.final_eta);
  }
  template <class T, class Inputs>
  static void canonicalise(gradients<T>&, const Inputs&) {}
};

}  // namespace kalman_oracle
