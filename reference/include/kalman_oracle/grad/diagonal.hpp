// Reference adjoint of the diagonal Kalman Delta Network (docs/math.md §4, §9; models/diagonal.hpp).
//
//     gradients<T> diagonal_kdn_backward(const diagonal_kdn_inputs<T>& in, const cotangents<T>& cot)
//
// Cotangents (full output shapes, any subset): "o" [B, T, H, V], "final_state" [B, H, K, V],
// "final_covariance" (p_T) [B, H, K], "readout_variance" [B, T, H], and of the internals
// "predicted_covariance" (p̂_t) and "gain" (κ_t) [B, T, H, K] (grad/kdn_common.hpp). Gradients, named as
// diagonal_kdn_inputs' fields: "q", "k", "v" [full]; "g", "omega", "r" shaped as given; "mu" as
// given or [H]; "initial_covariance" as given or [B, H, K]; "initial_state" as given or
// [B, H, K, V]; "scale".
//
// Per head: the memory is the two-key rule with gain κ_t (grad/memory.hpp, memory_backward:
// e = k, w = κ), giving dκ_t (plus the gain's own cotangent), de_t, dα_t (memory part), dq, dv, dS_0, dτ. With
// p̂_t = α_t² ⊙ p_{t−1} + ω_t, D_t = r_t + Σ_i p̂_t,i k_t,i², κ_t = p̂_t ⊙ k_t / D_t,
// u_t = μ k_t ⊙ k_t / r_t, p_t = p̂_t / (1 + u_t ⊙ p̂_t), and the readout variance
// v_t = τ² Σ_i q_t,i² p_t,i, a SCALAR adjoint per channel p̄_t,i = ∂L/∂p_t,i runs backwards
// (p̄_T = dp_T), t = T..1:
//     p̄_t += dv_t τ² q_t ⊙ q_t ;  dq_t += 2 dv_t τ² q_t ⊙ p_t ;  dτ += 2 dv_t τ Σ_i q_t,i² p_t,i
//     dk_t = de_t + dκ_t ⊙ p̂_t / D_t ;  D̄_t = −Σ_i dκ_t,i κ_t,i / D_t
//     p̂̄_t = dκ_t ⊙ k_t / D_t + D̄_t k_t ⊙ k_t + p̄_t / (1 + u_t ⊙ p̂_t)² (+ dp̂_t, p̂_t's own cotangent)
//     dk_t += 2 D̄_t p̂_t ⊙ k_t ;  r̄_t = D̄_t
//     ū_t = −p̄_t ⊙ p_t ⊙ p_t   (= −p̄ p̂² / (1 + u p̂)²)
//     μ̄ += Σ_i ū_t,i k_t,i² / r_t ;  dk_t += 2 μ ū_t ⊙ k_t / r_t ;  r̄_t −= Σ_i ū_t,i u_t,i / r_t
//     dα_t += 2 α_t ⊙ p_{t−1} ⊙ p̂̄_t ;  ω̄_t = p̂̄_t ;  p̄_{t−1} = α_t² ⊙ p̂̄_t
// so ∂p_t,i/∂p_{t−1,i} = α² / (1 + u p̂)² = det/(C p + D)² of the leaf [[α², ω], [uα², 1 + uω]]
// (det α²): scalar adjoints through the covariance recursion, never through normalised 2×2
// products of the parallel form's scan. The gain couples the channels only through D_t.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kalman_oracle/detail/mutant.hpp"
#include "kalman_oracle/grad/common.hpp"
#include "kalman_oracle/grad/kdn_common.hpp"
#include "kalman_oracle/grad/memory.hpp"
#include "kalman_oracle/models/diagonal.hpp"
#include "kalman_oracle/models/kdn_parallel.hpp"

namespace kalman_oracle {

template <class T>
gradients<T> diagonal_kdn_backward(const diagonal_kdn_inputs<T>& inputs, const cotangents<T>& cot) {
  const detail::diagonal_kdn_problem<T> pb(inputs);
  const detail::kdn_dims& d = pb.dims;
  const std::size_t B = d.batch, N = d.tokens, H = d.heads, K = d.key_dim;
  const auto cots = detail::grad::kdn_cotangents_of(pb, cot, "diagonal_kdn", "gain");
  detail::grad::kdn_gradients<T> grads(pb, inputs);
  using detail::grad::cotangent_at;

  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t h = 0; h < H; ++h) {
      const T mu = pb.mu(h);
      const T& tau = pb.tau;
      // Forward: covariances p_0..p_N, predictions p̂_t, denominators D_t, information u_t, and the
      // memory's gains w_t = κ_t.
      memory_head<T> m = detail::grad::kdn_memory_head(pb, inputs, b, h);
      std::vector<T> cov((N + 1) * K), predicted(N * K), info(N * K), denominator(N);
      for (std::size_t i = 0; i < K; ++i) cov[i] = pb.prior(b, h, i);
      for (std::size_t t = 0; t < N; ++t) {
        const T& r = pb.r(b, t, h);
        T den = r;
        for (std::size_t i = 0; i < K; ++i) {
          const std::size_t x = t * K + i;
          predicted[x] = m.alpha[x] * m.alpha[x] * cov[t * K + i] + pb.omega(b, t, h, i);
          den += predicted[x] * m.erase[x] * m.erase[x];
        }
        denominator[t] = den;
        for (std::size_t i = 0; i < K; ++i) {
          const std::size_t x = t * K + i;
          m.write[x] = predicted[x] * m.erase[x] / den;
          info[x] = mu * m.erase[x] * m.erase[x] / r;
          cov[(t + 1) * K + i] = kdn_posterior_step(predicted[x], info[x]);
        }
      }
      memory_head_gradients<T> gm = detail::grad::kdn_memory_backward(m, cots, b, h);
      // The internals' cotangents only where given: adding a zero is not free over running_error
      // (it counts a rounding), and would change the fixtures' first-order gradient budgets.
      if (cots.gain)
        for (std::size_t t = 0; t < N; ++t)
          for (std::size_t i = 0; i < K; ++i) gm.write[t * K + i] += (*cots.gain)(b, t, h, i);

      // Reverse: scalar covariance adjoints, one per channel.
      std::vector<T> cov_bar(K), predicted_bar(K);
      for (std::size_t i = 0; i < K; ++i) cov_bar[i] = cotangent_at(cots.final_covariance, b, h, i);
      for (std::size_t t = N; t-- > 0;) {
        const T& r = pb.r(b, t, h);
        const T dvar = cotangent_at(cots.readout_variance, b, t, h);
        const T& den = denominator[t];
        // v_t = τ² Σ q² p_t.
        for (std::size_t i = 0; i < K; ++i) {
          const std::size_t x = t * K + i;
          const T& q = m.query[x];
          cov_bar[i] += dvar * tau * tau * q * q;
          gm.query[x] += 2 * dvar * tau * tau * q * cov[(t + 1) * K + i];
          grads.scale += 2 * dvar * tau * q * q * cov[(t + 1) * K + i];
        }
        // κ_t = p̂_t ⊙ k_t / D_t, D_t = r_t + Σ p̂ k².
        T den_bar(0);
        for (std::size_t i = 0; i < K; ++i) den_bar -= gm.write[t * K + i] * m.write[t * K + i] / den;
        T r_bar = den_bar;
        T mu_bar(0);
        for (std::size_t i = 0; i < K; ++i) {
          const std::size_t x = t * K + i;
          const T& key = m.erase[x];
          const T& kappa_bar = gm.write[x];
          const T one_plus = T(1) + info[x] * predicted[x];
          predicted_bar[i] = kappa_bar * key / den + den_bar * key * key + cov_bar[i] / (one_plus * one_plus);
          if (cots.predicted_covariance) predicted_bar[i] += (*cots.predicted_covariance)(b, t, h, i);
          T key_bar = gm.erase[x] + kappa_bar * predicted[x] / den + 2 * den_bar * predicted[x] * key;
          // p_t = p̂ / (1 + u p̂), u = μ k² / r.
          const T& p_new = cov[(t + 1) * K + i];
          const T info_bar = -cov_bar[i] * p_new * p_new;
          mu_bar += info_bar * key * key / r;
          key_bar += 2 * mu * info_bar * key / r;
          r_bar -= info_bar * info[x] / r;
          grads.k(b, t, h, i) = key_bar;
          // p̂_t = α² p_{t−1} + ω (planted bug grad_kdn_covariance_wrong_time: p_t for p_{t−1}).
          const T& p_used = KALMAN_ORACLE_MUTANT(grad_kdn_covariance_wrong_time, cov[t * K + i], cov[(t + 1) * K + i]);
          gm.alpha[x] += 2 * m.alpha[x] * p_used * predicted_bar[i];
          grads.omega.add(predicted_bar[i], b, t, h, i);
          cov_bar[i] = m.alpha[x] * m.alpha[x] * predicted_bar[i];  // p̄_{t−1}
        }
        grads.r.add(r_bar, b, t, h);
        grads.mu.add(mu_bar, h);
      }
      for (std::size_t i = 0; i < K; ++i) grads.initial_covariance.add(cov_bar[i], b, h, i);
      detail::grad::kdn_scatter_memory(gm, m, b, h, pb.gates, grads);
    }
  return grads.take();
}

/// The diagonal KDN as a model for grad/truth.hpp: sequential, or with `parallel` set the scan
/// form (models/kdn_parallel.hpp); with `internals` its outputs include p̂_t and κ_t.
struct diagonal_kdn_model {
  template <class T>
  using inputs_type = diagonal_kdn_inputs<T>;
  std::optional<kdn_scan_options> parallel;
  bool internals = false;

  template <class T>
  diagonal_kdn_outputs<T> forward(const diagonal_kdn_inputs<T>& in) const {
    run_options options;
    options.internals = internals;
    return parallel ? diagonal_kdn_parallel(in, *parallel, options) : diagonal_kdn_forward(in, options);
  }
  template <class T>
  static gradients<T> backward(const diagonal_kdn_inputs<T>& in, const cotangents<T>& cot) {
    return diagonal_kdn_backward(in, cot);
  }
  template <class U, class T, class F>
  static diagonal_kdn_inputs<U> transform(const diagonal_kdn_inputs<T>& in, F&& f) {
    return detail::grad::transform_kdn_inputs<U>(in, std::forward<F>(f));
  }
  template <class T, class F>
  static void for_each_output(const diagonal_kdn_outputs<T>& out, F&& f) {
    detail::grad::kdn_outputs(out, out.gain, std::forward<F>(f));
  }
  template <class T, class Inputs>
  static void canonicalise(gradients<T>&, const Inputs&) {}
};

}  // namespace kalman_oracle
