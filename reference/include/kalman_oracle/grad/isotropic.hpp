// Reference adjoint of the isotropic Kalman Delta Network (docs/math.md §5, §9; models/isotropic.hpp).
//
//     gradients<T> isotropic_kdn_backward(const isotropic_kdn_inputs<T>& in, const cotangents<T>& cot)
//
// Cotangents (full output shapes, any subset): "o" [B, T, H, V], "final_state" [B, H, K, V],
// "final_covariance" (b_T) [B, H], "readout_variance" [B, T, H], and of the internals
// "predicted_covariance" (b̂_t) and "beta" (β_t) [B, T, H] (grad/kdn_common.hpp). L is the sum of their inner
// products with the outputs. Gradients, named as isotropic_kdn_inputs' fields: "q", "k", "v"
// [full]; "g" (log or linear as in.gates), "omega", "r" shaped as given; "mu" as given or [H];
// "initial_covariance" as given or [B, H]; "initial_state" as given or [B, H, K, V]; "scale".
//
// Per head: the memory is KDA with β_t (grad/memory.hpp, memory_backward: e = k, w = β k), which
// returns dw_t, de_t, dα_t (memory part), dq, dv, dS_0, dτ. Then, with a_t = mean_i α_t,i²,
// n_t = ‖k_t‖², c_t = μ n_t / (K r_t), b̂_t = a_t b_{t−1} + ω_t, b_t = b̂_t / (1 + c_t b̂_t),
// β_t = b̂_t / (r_t + b̂_t n_t), and the readout variance v_t = b_t τ² ‖q_t‖², a SCALAR adjoint
// b̄_t = ∂L/∂b_t runs backwards (b̄_T = db_T), t = T..1:
//     b̄_t += dv_t τ² ‖q_t‖² ;  dq_t += 2 dv_t b_t τ² q_t ;  dτ += 2 dv_t b_t τ ‖q_t‖²
//     β̄_t = k_tᵀ dw_t (+ dβ_t) ;  dk_t = β_t dw_t + de_t
//     b̂̄_t = b̄_t / (1 + c_t b̂_t)² + β̄_t r_t / (r_t + b̂_t n_t)² (+ db̂_t)
//     c̄_t = −b̄_t b̂_t² / (1 + c_t b̂_t)²
//     μ̄ += c̄_t n_t / (K r_t) ;  n̄_t = c̄_t μ / (K r_t) − β̄_t b̂_t² / (r_t + b̂_t n_t)² ;  dk_t += 2 n̄_t k_t
//     r̄_t = −c̄_t c_t / r_t − β̄_t b̂_t / (r_t + b̂_t n_t)²
//     ā_t = b̂̄_t b_{t−1} ;  dα_t,i += 2 α_t,i ā_t / K ;  ω̄_t = b̂̄_t
//     b̄_{t−1} = a_t b̂̄_t
// so ∂b_t/∂b_{t−1} = a_t / (1 + c_t b̂_t)² = det/(C b_{t−1} + D)² of the leaf
// [[a, ω], [c a, 1 + c ω]] (det a): a scalar adjoint through the covariance recursion, never
// through normalised 2×2 products of the parallel form's scan (their free scale has no adjoint).
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
#include "kalman_oracle/models/isotropic.hpp"
#include "kalman_oracle/models/kdn_parallel.hpp"

namespace kalman_oracle {

template <class T>
gradients<T> isotropic_kdn_backward(const isotropic_kdn_inputs<T>& inputs, const cotangents<T>& cot) {
  const detail::isotropic_kdn_problem<T> pb(inputs);
  const detail::kdn_dims& d = pb.dims;
  const std::size_t B = d.batch, N = d.tokens, H = d.heads, K = d.key_dim;
  const auto cots = detail::grad::kdn_cotangents_of(pb, cot, "isotropic_kdn", "beta");
  detail::grad::kdn_gradients<T> grads(pb, inputs);
  using detail::grad::cotangent_at;
  const T channels(static_cast<long>(K));

  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t h = 0; h < H; ++h) {
      const T mu = pb.mu(h);
      const T& tau = pb.tau;
      // Forward: the covariance path (stored) and the memory's gains w_t = β_t k_t.
      memory_head<T> m = detail::grad::kdn_memory_head(pb, inputs, b, h);
      std::vector<T> cov(N + 1), predicted(N), a(N), n(N), c(N), beta(N), q2(N);
      cov[0] = pb.prior(b, h);
      for (std::size_t t = 0; t < N; ++t) {
        T alpha2(0), key2(0), query2(0);
        for (std::size_t i = 0; i < K; ++i) {
          const std::size_t x = t * K + i;
          alpha2 += m.alpha[x] * m.alpha[x];
          key2 += m.erase[x] * m.erase[x];
          query2 += m.query[x] * m.query[x];
        }
        const T& r = pb.r(b, t, h);
        a[t] = alpha2 / channels;
        n[t] = key2;
        q2[t] = query2;
        predicted[t] = a[t] * cov[t] + pb.omega(b, t, h);
        c[t] = mu * key2 / (channels * r);
        cov[t + 1] = kdn_posterior_step(predicted[t], c[t]);
        beta[t] = predicted[t] / (r + predicted[t] * key2);
        for (std::size_t i = 0; i < K; ++i) m.write[t * K + i] = beta[t] * m.erase[t * K + i];
      }
      memory_head_gradients<T> gm = detail::grad::kdn_memory_backward(m, cots, b, h);

      // Reverse: the scalar covariance adjoint.
      T cov_bar = cotangent_at(cots.final_covariance, b, h);
      for (std::size_t t = N; t-- > 0;) {
        const T& r = pb.r(b, t, h);
        const T dvar = cotangent_at(cots.readout_variance, b, t, h);
        // v_t = b_t τ² ‖q_t‖².
        cov_bar += dvar * tau * tau * q2[t];
        for (std::size_t i = 0; i < K; ++i)
          gm.query[t * K + i] += 2 * dvar * cov[t + 1] * tau * tau * m.query[t * K + i];
        grads.scale += 2 * dvar * cov[t + 1] * tau * q2[t];
        // w_t = β_t k_t, e_t = k_t.
        T beta_bar = cotangent_at(cots.gain, b, t, h);
        for (std::size_t i = 0; i < K; ++i) {
          const std::size_t x = t * K + i;
          beta_bar += m.erase[x] * gm.write[x];
          grads.k(b, t, h, i) = beta[t] * gm.write[x] + gm.erase[x];
        }
        const T one_plus = T(1) + c[t] * predicted[t];
        const T gain_den = r + predicted[t] * n[t];
        // (The prediction's cotangent only where given: a zero added would count a rounding over
        // running_error, diagonal.hpp.)
        T predicted_bar = cov_bar / (one_plus * one_plus) + beta_bar * r / (gain_den * gain_den);
        if (cots.predicted_covariance) predicted_bar += (*cots.predicted_covariance)(b, t, h);
        const T c_bar = -cov_bar * predicted[t] * predicted[t] / (one_plus * one_plus);
        grads.mu.add(c_bar * n[t] / (channels * r), h);
        const T n_bar = c_bar * mu / (channels * r) - beta_bar * predicted[t] * predicted[t] / (gain_den * gain_den);
        for (std::size_t i = 0; i < K; ++i) grads.k(b, t, h, i) += 2 * n_bar * m.erase[t * K + i];
        grads.r.add(-c_bar * c[t] / r - beta_bar * predicted[t] / (gain_den * gain_den), b, t, h);
        // b̂_t = a_t b_{t−1} + ω_t (planted bug grad_kdn_covariance_wrong_time: b_t for b_{t−1}).
        const T a_bar = predicted_bar * KALMAN_ORACLE_MUTANT(grad_kdn_covariance_wrong_time, cov[t], cov[t + 1]);
        for (std::size_t i = 0; i < K; ++i) gm.alpha[t * K + i] += 2 * m.alpha[t * K + i] * a_bar / channels;
        grads.omega.add(predicted_bar, b, t, h);
        cov_bar = a[t] * predicted_bar;  // b̄_{t−1}
      }
      grads.initial_covariance.add(cov_bar, b, h);
      detail::grad::kdn_scatter_memory(gm, m, b, h, pb.gates, grads);
    }
  return grads.take();
}

/// The isotropic KDN as a model for grad/truth.hpp: sequential, or with `parallel` set the scan
/// form (models/kdn_parallel.hpp); with `internals` its outputs include b̂_t and β_t.
struct isotropic_kdn_model {
  template <class T>
  using inputs_type = isotropic_kdn_inputs<T>;
  std::optional<kdn_scan_options> parallel;
  bool internals = false;

  template <class T>
  isotropic_kdn_outputs<T> forward(const isotropic_kdn_inputs<T>& in) const {
    run_options options;
    options.internals = internals;
    return parallel ? isotropic_kdn_parallel(in, *parallel, options) : isotropic_kdn_forward(in, options);
  }
  template <class T>
  static gradients<T> backward(const isotropic_kdn_inputs<T>& in, const cotangents<T>& cot) {
    return isotropic_kdn_backward(in, cot);
  }
  template <class U, class T, class F>
  static isotropic_kdn_inputs<U> transform(const isotropic_kdn_inputs<T>& in, F&& f) {
    return detail::grad::transform_kdn_inputs<U>(in, std::forward<F>(f));
  }
  template <class T, class F>
  static void for_each_output(const isotropic_kdn_outputs<T>& out, F&& f) {
    detail::grad::kdn_outputs(out, out.beta, std::forward<F>(f));
  }
  template <class T, class Inputs>
  static void canonicalise(gradients<T>&, const Inputs&) {}
};

}  // namespace kalman_oracle
