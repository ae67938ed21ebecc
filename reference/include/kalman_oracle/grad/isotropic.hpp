// Reference adjoint of the isotropic Kalman Delta Network (MATH.md §5, §9; models/isotropic.hpp).
//
//     gradients<T> isotropic_kdn_backward(const isotropic_kdn_inputs<T>& in, const cotangents<T>& cot)
//
// Cotangents (full output shapes, any subset): "o" [B, T, H, V], "final_state" [B, H, K, V],
// "final_covariance" (b_T) [B, H], "readout_variance" [B, T, H]. L is the sum of their inner
// products with the outputs. Gradients, named as isotropic_kdn_inputs' fields: "q", "k", "v"
// [full]; "g" (log or linear as in.gates), "omega", "r" shaped as given; "mu" as given or [H];
// "initial_covariance" as given or [B, H]; "initial_state" as given or [B, H, K, V]; "scale".
//
// Per head: the memory is KDA with β_t (grad/common.hpp, memory_backward: e = k, w = β k), which
// returns dw_t, de_t, dα_t (memory part), dq, dv, dS_0, dτ. Then, with a_t = mean_i α_t,i²,
// n_t = ‖k_t‖², c_t = μ n_t / (K r_t), b̂_t = a_t b_{t−1} + ω_t, b_t = b̂_t / (1 + c_t b̂_t),
// β_t = b̂_t / (r_t + b̂_t n_t), and the readout variance v_t = b_t τ² ‖q_t‖², a SCALAR adjoint
// b̄_t = ∂L/∂b_t runs backwards (b̄_T = db_T), t = T..1:
//     b̄_t += dv_t τ² ‖q_t‖² ;  dq_t += 2 dv_t b_t τ² q_t ;  dτ += 2 dv_t b_t τ ‖q_t‖²
//     β̄_t = k_tᵀ dw_t ;  dk_t = β_t dw_t + de_t
//     b̂̄_t = b̄_t / (1 + c_t b̂_t)² + β̄_t r_t / (r_t + b̂_t n_t)²
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

#include "kalman_oracle/grad/common.hpp"
#include "kalman_oracle/models/isotropic.hpp"
#include "kalman_oracle/models/kdn_parallel.hpp"

namespace kalman_oracle {

template <class T>
gradients<T> isotropic_kdn_backward(const isotropic_kdn_inputs<T>& inputs, const cotangents<T>& cot) {
  const detail::isotropic_kdn_problem<T> pb(inputs);
  const detail::kdn_dims& d = pb.dims;
  const std::size_t B = d.batch, N = d.tokens, H = d.heads, K = d.key_dim, V = d.value_dim;
  detail::grad::require_known_cotangents(cot, {"o", "final_state", "final_covariance", "readout_variance"},
                                        "isotropic_kdn");
  const tensor<T>* d_o = detail::grad::cotangent(cot, "o", {B, N, H, V});
  const tensor<T>* d_final = detail::grad::cotangent(cot, "final_state", {B, H, K, V});
  const tensor<T>* d_bT = detail::grad::cotangent(cot, "final_covariance", {B, H});
  const tensor<T>* d_var = detail::grad::cotangent(cot, "readout_variance", {B, N, H});
  using detail::grad::cotangent_at;
  const T channels(static_cast<long>(K));

  tensor<T> dq("q", {B, N, H, K}), dk("k", {B, N, H, K}), dv("v", {B, N, H, V});
  broadcast_accumulator<T> dg("g", inputs.g.shape(), {B, N, H, K});
  broadcast_accumulator<T> domega("omega", inputs.omega.shape(), {B, N, H});
  broadcast_accumulator<T> dr("r", inputs.r.shape(), {B, N, H});
  broadcast_accumulator<T> dmu("mu", inputs.mu ? inputs.mu->shape() : shape_t{H}, {H});
  broadcast_accumulator<T> db0("initial_covariance",
                               inputs.initial_covariance ? inputs.initial_covariance->shape() : shape_t{B, H}, {B, H});
  broadcast_accumulator<T> ds0("initial_state", inputs.initial_state ? inputs.initial_state->shape() : shape_t{B, H, K, V},
                               {B, H, K, V});
  T dscale(0);

  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t h = 0; h < H; ++h) {
      const T mu = pb.mu(h);
      const T& tau = pb.tau;
      // Forward: the covariance path (stored) and the memory problem.
      std::vector<T> cov(N + 1), predicted(N), a(N), n(N), c(N), beta(N), q2(N);
      memory_head<T> m;
      m.tokens = N, m.key_dim = K, m.value_dim = V, m.erases = true, m.tau = tau;
      m.alpha.resize(N * K), m.erase.resize(N * K), m.write.resize(N * K), m.value.resize(N * V), m.query.resize(N * K);
      m.initial_state.resize(K * V);
      for (std::size_t i = 0; i < K; ++i)
        for (std::size_t j = 0; j < V; ++j) m.initial_state[i * V + j] = pb.s0(b, h, i, j);
      cov[0] = pb.b0(b, h);
      for (std::size_t t = 0; t < N; ++t) {
        T alpha2(0), key2(0), query2(0);
        for (std::size_t i = 0; i < K; ++i) {
          const std::size_t x = t * K + i;
          m.alpha[x] = pb.decay(b, t, h, i);
          m.erase[x] = inputs.k(b, t, h, i);
          m.query[x] = inputs.q(b, t, h, i);
          alpha2 += m.alpha[x] * m.alpha[x];
          key2 += m.erase[x] * m.erase[x];
          query2 += m.query[x] * m.query[x];
        }
        for (std::size_t j = 0; j < V; ++j) m.value[t * V + j] = inputs.v(b, t, h, j);
        const T& r = pb.r(b, t, h);
        a[t] = alpha2 / channels;
        n[t] = key2;
        q2[t] = query2;
        predicted[t] = a[t] * cov[t] + pb.omega(b, t, h);
        c[t] = mu * key2 / (channels * r);
        cov[t + 1] = predicted[t] / (T(1) + c[t] * predicted[t]);
        beta[t] = predicted[t] / (r + predicted[t] * key2);
        for (std::size_t i = 0; i < K; ++i) m.write[t * K + i] = beta[t] * m.erase[t * K + i];
      }

      std::vector<T> d_out, d_state;
      if (d_o) {
        d_out.resize(N * V);
        for (std::size_t t = 0; t < N; ++t)
          for (std::size_t j = 0; j < V; ++j) d_out[t * V + j] = (*d_o)(b, t, h, j);
      }
      if (d_final) {
        d_state.resize(K * V);
        for (std::size_t i = 0; i < K; ++i)
          for (std::size_t j = 0; j < V; ++j) d_state[i * V + j] = (*d_final)(b, h, i, j);
      }
      memory_head_gradients<T> gm = memory_backward<T>(m, d_out, d_state);
      dscale += gm.tau;

      // Reverse: the scalar covariance adjoint.
      T cov_bar = cotangent_at(d_bT, b, h);
      for (std::size_t t = N; t-- > 0;) {
        const T& r = pb.r(b, t, h);
        const T dvar = cotangent_at(d_var, b, t, h);
        // v_t = b_t τ² ‖q_t‖².
        cov_bar += dvar * tau * tau * q2[t];
        for (std::size_t i = 0; i < K; ++i) gm.query[t * K + i] += 2 * dvar * cov[t + 1] * tau * tau * m.query[t * K + i];
        dscale += 2 * dvar * cov[t + 1] * tau * q2[t];
        // w_t = β_t k_t, e_t = k_t.
        T beta_bar(0);
        for (std::size_t i = 0; i < K; ++i) {
          const std::size_t x = t * K + i;
          beta_bar += m.erase[x] * gm.write[x];
          dk(b, t, h, i) = beta[t] * gm.write[x] + gm.erase[x];
        }
        const T one_plus = T(1) + c[t] * predicted[t];
        const T gain_den = r + predicted[t] * n[t];
        const T predicted_bar = cov_bar / (one_plus * one_plus) + beta_bar * r / (gain_den * gain_den);
        const T c_bar = -cov_bar * predicted[t] * predicted[t] / (one_plus * one_plus);
        dmu.add(c_bar * n[t] / (channels * r), h);
        const T n_bar = c_bar * mu / (channels * r) - beta_bar * predicted[t] * predicted[t] / (gain_den * gain_den);
        for (std::size_t i = 0; i < K; ++i) dk(b, t, h, i) += 2 * n_bar * m.erase[t * K + i];
        dr.add(-c_bar * c[t] / r - beta_bar * predicted[t] / (gain_den * gain_den), b, t, h);
        // b̂_t = a_t b_{t−1} + ω_t (planted bug grad_kdn_covariance_wrong_time: b_t for b_{t−1}).
        const T a_bar = predicted_bar * KALMAN_ORACLE_MUTANT(grad_kdn_covariance_wrong_time, cov[t], cov[t + 1]);
        for (std::size_t i = 0; i < K; ++i) gm.alpha[t * K + i] += 2 * m.alpha[t * K + i] * a_bar / channels;
        domega.add(predicted_bar, b, t, h);
        cov_bar = a[t] * predicted_bar;  // b̄_{t−1}
      }
      db0.add(cov_bar, b, h);

      for (std::size_t t = 0; t < N; ++t) {
        for (std::size_t i = 0; i < K; ++i) {
          const std::size_t x = t * K + i;
          dq(b, t, h, i) = gm.query[x];
          dg.add(gate_cotangent(gm.alpha[x], m.alpha[x], inputs.gates), b, t, h, i);
        }
        for (std::size_t j = 0; j < V; ++j) dv(b, t, h, j) = gm.value[t * V + j];
      }
      for (std::size_t i = 0; i < K; ++i)
        for (std::size_t j = 0; j < V; ++j) ds0.add(gm.initial_state[i * V + j], b, h, i, j);
    }

  gradients<T> out;
  out.set(std::move(dq));
  out.set(std::move(dk));
  out.set(std::move(dv));
  out.set(dg.take());
  out.set(domega.take());
  out.set(dr.take());
  out.set(dmu.take());
  out.set(db0.take());
  out.set(ds0.take());
  out.set(tensor<T>("scale", {}, std::vector<T>{dscale}));
  return out;
}

/// The KDN models' inputs differ only in shapes, so one transform serves both.
namespace detail::grad {
template <class U, class T, template <class> class Inputs, class F>
Inputs<U> transform_kdn_inputs(const Inputs<T>& in, F&& f) {
  Inputs<U> out;
  out.q = f("q", in.q);
  out.k = f("k", in.k);
  out.v = f("v", in.v);
  out.g = f("g", in.g);
  out.gates = in.gates;
  out.omega = f("omega", in.omega);
  out.r = f("r", in.r);
  if (in.mu) out.mu = f("mu", *in.mu);
  if (in.initial_covariance) out.initial_covariance = f("initial_covariance", *in.initial_covariance);
  if (in.initial_state) out.initial_state = f("initial_state", *in.initial_state);
  if (in.scale) out.scale = f("scale", tensor<T>("scale", {}, std::vector<T>{*in.scale})).data()[0];
  return out;
}
template <class Outputs, class F>
void kdn_outputs(const Outputs& out, F&& f) {
  f("o", out.o);
  f("final_state", out.final_state);
  f("final_covariance", out.final_covariance);
  f("readout_variance", out.readout_variance);
}
}  // namespace detail::grad

/// The isotropic KDN as a model for grad/truth.hpp: sequential, or with `parallel` set the scan
/// form (models/kdn_parallel.hpp).
struct isotropic_kdn_model {
  template <class T>
  using inputs_type = isotropic_kdn_inputs<T>;
  std::optional<kdn_scan_options> parallel;

  template <class T>
  isotropic_kdn_outputs<T> forward(const isotropic_kdn_inputs<T>& in) const {
    return parallel ? isotropic_kdn_parallel(in, *parallel) : isotropic_kdn_forward(in);
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
    detail::grad::kdn_outputs(out, std::forward<F>(f));
  }
  template <class T, class Inputs>
  static void canonicalise(gradients<T>&, const Inputs&) {}
};

}  // namespace kalman_oracle
