// Reference adjoint of the dense Kalman associative memory (docs/math.md §2, §3, §9; models/dense.hpp,
// models/information.hpp).
//
//     gradients<T> dense_backward(const dense_inputs<T>& in, const cotangents<T>& cot)
//     gradients<T> information_backward(const information_inputs<T>& in, const cotangents<T>& cot)
//
// Cotangents (full output shapes, any subset): "o" [B, T, H, V], "final_state" [B, H, K, V],
// "final_covariance" [B, H, K, K], "innovation_variance", "mahalanobis", "readout_variance",
// "log_likelihood" [B, T, H]; and, the information form's extra outputs, "final_precision"
// Y_T = P_T⁻¹ [B, H, K, K] and "final_information" H_T = Y_T S_T [B, H, K, V].
// Gradients, named as dense_inputs' fields: "q", "k", "v" [full]; "transition" (D_t: diagonal α,
// log gates g, or full, shaped as given; absent: D = I, reported as a full [B, T, H, K, K]
// gradient), "process_noise" (Ω_t: diagonal or full as given; absent: Ω = 0, reported full
// [B, T, H, K, K]), "r" as given, "initial_state" as given or [B, H, K, V], "initial_covariance"
// as given or [B, H, K, K], "scale".
//
// Symmetric inputs. P_0 and a full Ω are symmetric matrices; the model is a function of symmetric
// matrices only, so the meaningful gradient is the SYMMETRIC G with ⟨G, E⟩ = dL[E] for every
// symmetric perturbation E: we report sym(G) = (G + Gᵀ)/2 of any gradient G of any extension
// (grad/truth.hpp canonicalises the tape's gradient the same way). A derivative along a
// non-symmetric E depends on which entries the code happens to read, and is not defined.
//
// The information form computes the same posterior (docs/math.md §3), so its outputs are the same
// functions of the inputs and information_backward IS dense_backward; Y_T and H_T are functions of
// (S_T, P_T) and their cotangents are folded in first:
//     H_T = Y_T S_T :  dS_T += Y_T dH_T ;  dY_T += dH_T S_Tᵀ
//     Y_T = P_T⁻¹  :  dP_T += −Y_T dY_T Y_T                       (Y_T symmetric)
//
// The recursion (per head, dS ← dS_T, dP ← dP_T, t = T..1; τq = τ q_t; u = P̂ k, s = kᵀu + r,
// κ = u/s, e = v − Ŝᵀk, m = eᵀe/s, ll = −(V log 2πs + m)/2):
//     o_t = S_tᵀ τq :           dS += τq doᵀ ;  dq += τ S_t do ;  dτ += qᵀ S_t do
//     var_t = τqᵀ P_t τq :      dP += dvar τq τqᵀ ;  dq += 2τ dvar P_t τq ;  dτ += 2 dvar qᵀ P_t τq
//     ll, m, s outputs :        ds̄ = ds − V dll/(2s) − m dm̄/s ;  dm̄ = dm − dll/2 ;  dē = 2 e dm̄/s
//     S_t = Ŝ + κ eᵀ :          dŜ = dS ;  dκ = dS e ;  dē += dSᵀ κ
//     e = v − Ŝᵀ k :            dv = dē ;  dŜ −= k dēᵀ ;  dk −= Ŝ dē
//     κ = u / s :               dū = dκ / s ;  ds̄ −= uᵀdκ / s²
//     P_t = P̂ − u uᵀ / s :      dP̂ = dP ;  dū −= (dP + dPᵀ) u / s ;  ds̄ += uᵀ dP u / s²
//     s = kᵀ u + r :            dk += ds̄ u ;  dū += ds̄ k ;  dr = ds̄
//     u = P̂ k :                 dP̂ += dū kᵀ ;  dk += P̂ᵀ dū
//     P̂ = D P Dᵀ + Ω :          dD = dP̂ D Pᵀ + dP̂ᵀ D P ;  dΩ = dP̂ ;  dP ← Dᵀ dP̂ D      (dP_{t−1})
//     Ŝ = D S :                 dD += dŜ Sᵀ ;  dS ← Dᵀ dŜ                                 (dS_{t−1})
// Diagonal D: dα_i = dD_ii (log gates: dg_i = α_i dα_i; a scalar αI given as a last axis of 1
// sums over i by broadcasting); diagonal Ω: dω_i = dP̂_ii. End: dS_0 = dS, dP_0 = sym(dP).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kalman_oracle/grad/common.hpp"
#include "kalman_oracle/grad/gates.hpp"
#include "kalman_oracle/models/dense.hpp"
#include "kalman_oracle/models/information.hpp"

namespace kalman_oracle {

namespace detail::grad {

/// Symmetrises the last two axes (K x K) of every matrix in x: (G + Gᵀ)/2.
template <class T>
void symmetrise_matrices(tensor<T>& x) {
  const std::size_t rank = x.rank();
  if (rank < 2) return;
  const std::size_t n = x.dim(rank - 1);
  if (x.dim(rank - 2) != n) return;
  const std::size_t per = n * n;
  for (std::size_t m = 0; m * per < x.size(); ++m)
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = i + 1; j < n; ++j) {
        T& a = x.data()[m * per + i * n + j];
        T& b = x.data()[m * per + j * n + i];
        const T mean = (a + b) / 2;
        a = mean;
        b = mean;
      }
}

}  // namespace detail::grad

template <class T>
gradients<T> dense_backward(const dense_inputs<T>& in, const cotangents<T>& cot) {
  using matrix = dense_matrix<T>;
  using vector = dense_vector<T>;
  using detail::dense::ix;
  using detail::dense::multiply;
  using detail::dense::transpose;
  using detail::grad::cotangent_at;
  const detail::dense::problem<T> pb(in);
  const std::size_t B = pb.batch, N = pb.tokens, H = pb.heads, K = pb.key_dim, V = pb.value_dim;
  detail::grad::require_known_cotangents(cot,
                                         {"o", "final_state", "final_covariance", "innovation_variance", "mahalanobis",
                                          "readout_variance", "log_likelihood", "final_precision", "final_information"},
                                         "dense / information");
  const tensor<T>* d_o = detail::grad::cotangent(cot, "o", {B, N, H, V});
  const tensor<T>* d_ST = detail::grad::cotangent(cot, "final_state", {B, H, K, V});
  const tensor<T>* d_PT = detail::grad::cotangent(cot, "final_covariance", {B, H, K, K});
  const tensor<T>* d_s = detail::grad::cotangent(cot, "innovation_variance", {B, N, H});
  const tensor<T>* d_m = detail::grad::cotangent(cot, "mahalanobis", {B, N, H});
  const tensor<T>* d_var = detail::grad::cotangent(cot, "readout_variance", {B, N, H});
  const tensor<T>* d_ll = detail::grad::cotangent(cot, "log_likelihood", {B, N, H});
  const tensor<T>* d_YT = detail::grad::cotangent(cot, "final_precision", {B, H, K, K});
  const tensor<T>* d_HT = detail::grad::cotangent(cot, "final_information", {B, H, K, V});

  const bool full_transition = in.transition && in.transition->form == dense_form::full;
  const bool full_noise = !in.process_noise || in.process_noise->form == dense_form::full;
  const shape_t matrix_full{B, N, H, K, K};
  tensor<T> dq("q", {B, N, H, K}), dk("k", {B, N, H, K}), dv("v", {B, N, H, V});
  broadcast_accumulator<T> dD("transition", in.transition ? in.transition->values.shape() : matrix_full,
                              full_transition || !in.transition ? matrix_full : shape_t{B, N, H, K});
  broadcast_accumulator<T> dW("process_noise", in.process_noise ? in.process_noise->values.shape() : matrix_full,
                              full_noise ? matrix_full : shape_t{B, N, H, K});
  broadcast_accumulator<T> dr("r", in.r.shape(), {B, N, H});
  broadcast_accumulator<T> dS0("initial_state", in.initial_state ? in.initial_state->shape() : shape_t{B, H, K, V},
                               {B, H, K, V});
  broadcast_accumulator<T> dP0(
      "initial_covariance", in.initial_covariance ? in.initial_covariance->shape() : shape_t{B, H, K, K}, {B, H, K, K});
  T dscale(0);
  const T value_count(static_cast<long>(V));

  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t h = 0; h < H; ++h) {
      // Forward (models/dense.hpp, the same formulas), storing what the reverse pass reads.
      std::vector<matrix> D(N), S(N + 1), P(N + 1), S_hat(N), P_hat(N);
      std::vector<vector> k(N), u(N), e(N), kappa(N);
      std::vector<T> s(N);
      S[0] = pb.initial_state(b, h);
      P[0] = pb.initial_covariance(b, h);
      for (std::size_t t = 0; t < N; ++t) {
        D[t] = pb.transition(b, t, h);
        k[t] = pb.key(b, t, h);
        const vector v = pb.value(b, t, h);
        S_hat[t] = multiply(D[t], S[t]);
        P_hat[t] = detail::dense::symmetric_from_upper<T>(multiply(multiply(D[t], P[t]), transpose(D[t])) +
                                                          pb.process_noise(b, t, h));
        u[t] = multiply(P_hat[t], k[t]);
        T quadratic(0);
        for (std::size_t i = 0; i < K; ++i) quadratic += k[t](ix(i)) * u[t](ix(i));
        s[t] = quadratic + pb.observation_noise(b, t, h);
        matrix P_new(ix(K), ix(K));
        for (std::size_t i = 0; i < K; ++i)
          for (std::size_t j = i; j < K; ++j) {
            P_new(ix(i), ix(j)) = P_hat[t](ix(i), ix(j)) - u[t](ix(i)) * u[t](ix(j)) / s[t];
            if (j != i) P_new(ix(j), ix(i)) = P_new(ix(i), ix(j));
          }
        P[t + 1] = P_new;
        kappa[t] = u[t] / s[t];
        e[t] = detail::dense::innovation<T>(S_hat[t], k[t], v);
        S[t + 1] = S_hat[t] + detail::dense::outer(kappa[t], e[t]);
      }

      // Final cotangents, with the information form's Y_T, H_T folded in.
      matrix dS = matrix::Zero(ix(K), ix(V)), dP = matrix::Zero(ix(K), ix(K));
      for (std::size_t i = 0; i < K; ++i) {
        for (std::size_t j = 0; j < V; ++j) dS(ix(i), ix(j)) = cotangent_at(d_ST, b, h, i, j);
        for (std::size_t j = 0; j < K; ++j) dP(ix(i), ix(j)) = cotangent_at(d_PT, b, h, i, j);
      }
      if (d_YT || d_HT) {
        const auto inverse = detail::information::spd_inverse<T>(P[N]);
        if (!inverse)
          throw input_error("information_backward: P_T is not positive definite at [b, h] = [" + std::to_string(b) +
                            ", " + std::to_string(h) + "]");
        const matrix& Y = *inverse;
        matrix dY = matrix::Zero(ix(K), ix(K)), dH = matrix::Zero(ix(K), ix(V));
        for (std::size_t i = 0; i < K; ++i) {
          for (std::size_t j = 0; j < K; ++j) dY(ix(i), ix(j)) = cotangent_at(d_YT, b, h, i, j);
          for (std::size_t j = 0; j < V; ++j) dH(ix(i), ix(j)) = cotangent_at(d_HT, b, h, i, j);
        }
        dS += multiply(Y, dH);
        dY += multiply(dH, transpose(S[N]));
        dP -= multiply(multiply(Y, dY), Y);
      }

      for (std::size_t t = N; t-- > 0;) {
        const matrix& St = S[t + 1];
        const matrix& Pt = P[t + 1];
        const vector q = pb.query(b, t, h);
        vector sq(ix(K));
        for (std::size_t i = 0; i < K; ++i) sq(ix(i)) = pb.tau * q(ix(i));
        vector d_query = vector::Zero(ix(K));
        // o_t = S_tᵀ τq.
        if (d_o) {
          for (std::size_t i = 0; i < K; ++i) {
            T row(0);
            for (std::size_t j = 0; j < V; ++j) {
              const T& d = (*d_o)(b, t, h, j);
              dS(ix(i), ix(j)) += sq(ix(i)) * d;
              row += St(ix(i), ix(j)) * d;
            }
            d_query(ix(i)) += pb.tau * row;
            dscale += q(ix(i)) * row;
          }
        }
        // var_t = τqᵀ P_t τq.
        const T dvar = cotangent_at(d_var, b, t, h);
        if (dvar != 0) {
          const vector Psq = multiply(Pt, sq);
          for (std::size_t i = 0; i < K; ++i) {
            for (std::size_t j = 0; j < K; ++j) dP(ix(i), ix(j)) += dvar * sq(ix(i)) * sq(ix(j));
            d_query(ix(i)) += 2 * pb.tau * dvar * Psq(ix(i));
            dscale += 2 * dvar * q(ix(i)) * Psq(ix(i));
          }
        }
        for (std::size_t i = 0; i < K; ++i) dq(b, t, h, i) = d_query(ix(i));

        // ll = −(V (log 2π + log s) + m)/2, m = eᵀe/s, and s itself.
        const T dll = cotangent_at(d_ll, b, t, h);
        const T dm = cotangent_at(d_m, b, t, h) - dll / 2;
        T e2(0);
        for (std::size_t j = 0; j < V; ++j) e2 += e[t](ix(j)) * e[t](ix(j));
        const T mahalanobis = e2 / s[t];
        T ds = cotangent_at(d_s, b, t, h) - value_count * dll / (2 * s[t]) - mahalanobis * dm / s[t];
        vector de(ix(V));
        for (std::size_t j = 0; j < V; ++j) de(ix(j)) = 2 * e[t](ix(j)) * dm / s[t];

        // S_t = Ŝ + κ eᵀ.
        matrix dS_hat = dS;
        vector dkappa(ix(K));
        for (std::size_t i = 0; i < K; ++i) {
          T acc(0);
          for (std::size_t j = 0; j < V; ++j) acc += dS(ix(i), ix(j)) * e[t](ix(j));
          dkappa(ix(i)) = acc;
        }
        for (std::size_t j = 0; j < V; ++j) {
          T acc(0);
          for (std::size_t i = 0; i < K; ++i) acc += dS(ix(i), ix(j)) * kappa[t](ix(i));
          de(ix(j)) += acc;
        }
        // e = v − Ŝᵀ k.
        vector d_key = vector::Zero(ix(K));
        for (std::size_t j = 0; j < V; ++j) dv(b, t, h, j) = de(ix(j));
        for (std::size_t i = 0; i < K; ++i) {
          T acc(0);
          for (std::size_t j = 0; j < V; ++j) {
            dS_hat(ix(i), ix(j)) -= k[t](ix(i)) * de(ix(j));
            acc += S_hat[t](ix(i), ix(j)) * de(ix(j));
          }
          d_key(ix(i)) -= acc;
        }
        // κ = u / s.
        vector du = dkappa / s[t];
        T u_dkappa(0);
        for (std::size_t i = 0; i < K; ++i) u_dkappa += u[t](ix(i)) * dkappa(ix(i));
        ds -= u_dkappa / (s[t] * s[t]);
        // P_t = P̂ − u uᵀ / s (planted bug grad_dense_missing_gain_term drops the u-term of dP).
        T u_dP_u(0);
        for (std::size_t i = 0; i < K; ++i) {
          T acc(0);
          for (std::size_t j = 0; j < K; ++j) {
            acc += (dP(ix(i), ix(j)) + dP(ix(j), ix(i))) * u[t](ix(j));
            u_dP_u += u[t](ix(i)) * dP(ix(i), ix(j)) * u[t](ix(j));
          }
          du(ix(i)) -= KALMAN_ORACLE_MUTANT(grad_dense_missing_gain_term, T(acc / s[t]), T(0));
        }
        ds += u_dP_u / (s[t] * s[t]);
        matrix dP_hat = dP;
        // s = kᵀ u + r.
        for (std::size_t i = 0; i < K; ++i) {
          d_key(ix(i)) += ds * u[t](ix(i));
          du(ix(i)) += ds * k[t](ix(i));
        }
        dr.add(ds, b, t, h);
        // u = P̂ k.
        for (std::size_t i = 0; i < K; ++i)
          for (std::size_t j = 0; j < K; ++j) {
            dP_hat(ix(i), ix(j)) += du(ix(i)) * k[t](ix(j));
            d_key(ix(j)) += P_hat[t](ix(i), ix(j)) * du(ix(i));
          }
        for (std::size_t i = 0; i < K; ++i) dk(b, t, h, i) = d_key(ix(i));
        // P̂ = D P Dᵀ + Ω and Ŝ = D S.
        const matrix dD_t = multiply(multiply(dP_hat, D[t]), transpose(P[t])) +
                            multiply(multiply(transpose(dP_hat), D[t]), P[t]) + multiply(dS_hat, transpose(S[t]));
        if (full_noise) {
          for (std::size_t i = 0; i < K; ++i)
            for (std::size_t j = 0; j < K; ++j) dW.add(dP_hat(ix(i), ix(j)), b, t, h, i, j);
        } else {
          for (std::size_t i = 0; i < K; ++i) dW.add(dP_hat(ix(i), ix(i)), b, t, h, i);
        }
        if (full_transition || !in.transition) {
          for (std::size_t i = 0; i < K; ++i)
            for (std::size_t j = 0; j < K; ++j) dD.add(dD_t(ix(i), ix(j)), b, t, h, i, j);
        } else {
          for (std::size_t i = 0; i < K; ++i)
            dD.add(gate_cotangent(dD_t(ix(i), ix(i)), D[t](ix(i), ix(i)), in.transition->space), b, t, h, i);
        }
        dP = multiply(multiply(transpose(D[t]), dP_hat), D[t]);
        dS = multiply(transpose(D[t]), dS_hat);
      }
      for (std::size_t i = 0; i < K; ++i) {
        for (std::size_t j = 0; j < V; ++j) dS0.add(dS(ix(i), ix(j)), b, h, i, j);
        for (std::size_t j = 0; j < K; ++j) dP0.add(dP(ix(i), ix(j)), b, h, i, j);
      }
    }

  gradients<T> out;
  out.set(std::move(dq));
  out.set(std::move(dk));
  out.set(std::move(dv));
  out.set(dD.take());
  tensor<T> noise = dW.take();
  if (full_noise) detail::grad::symmetrise_matrices(noise);
  out.set(std::move(noise));
  out.set(dr.take());
  out.set(dS0.take());
  tensor<T> prior = dP0.take();
  detail::grad::symmetrise_matrices(prior);
  out.set(std::move(prior));
  out.set(tensor<T>("scale", {}, std::vector<T>{dscale}));
  return out;
}

/// The information form has the dense form's posterior (docs/math.md §3): the same gradient (see the top).
template <class T>
gradients<T> information_backward(const information_inputs<T>& in, const cotangents<T>& cot) {
  return dense_backward(in, cot);
}

/// The dense filter as a model for grad/truth.hpp: the moment form (models/dense.hpp), or with
/// `information` set the information form (models/information.hpp), whose gradient is the same.
struct dense_model {
  template <class T>
  using inputs_type = dense_inputs<T>;
  bool information = false;

  template <class T>
  information_outputs<T> forward(const dense_inputs<T>& in) const {
    if (information) return information_forward(in);
    information_outputs<T> out;
    static_cast<dense_outputs<T>&>(out) = dense_forward(in);
    return out;
  }
  template <class T>
  static gradients<T> backward(const dense_inputs<T>& in, const cotangents<T>& cot) {
    return dense_backward(in, cot);
  }
  template <class U, class T, class F>
  static dense_inputs<U> transform(const dense_inputs<T>& in, F&& f) {
    dense_inputs<U> out;
    out.q = f("q", in.q);
    out.k = f("k", in.k);
    out.v = f("v", in.v);
    if (in.transition)
      out.transition =
          dense_transition<U>{in.transition->form, in.transition->space, f("transition", in.transition->values)};
    if (in.process_noise)
      out.process_noise = dense_process_noise<U>{in.process_noise->form, f("process_noise", in.process_noise->values)};
    out.r = f("r", in.r);
    if (in.initial_state) out.initial_state = f("initial_state", *in.initial_state);
    if (in.initial_covariance) out.initial_covariance = f("initial_covariance", *in.initial_covariance);
    if (in.scale) out.scale = f("scale", tensor<T>("scale", {}, std::vector<T>{*in.scale})).data()[0];
    return out;
  }
  /// The outputs both forms have (and, for the information form, Y_T and H_T; the moment form
  /// leaves them empty, so they contribute nothing there).
  template <class T, class F>
  static void for_each_output(const information_outputs<T>& out, F&& f) {
    f("o", out.o);
    f("final_state", out.final_state);
    f("final_covariance", out.final_covariance);
    f("innovation_variance", out.innovation_variance);
    f("mahalanobis", out.mahalanobis);
    f("readout_variance", out.readout_variance);
    if (out.log_likelihood) f("log_likelihood", *out.log_likelihood);
    if (out.final_precision.size() > 0 && !out.final_precision.shape().empty())
      f("final_precision", out.final_precision);
    if (out.final_information.size() > 0 && !out.final_information.shape().empty())
      f("final_information", out.final_information);
  }
  /// P_0 and a full Ω are symmetric inputs: their gradients are symmetrised (see the top).
  template <class T>
  static void canonicalise(gradients<T>& g, const dense_inputs<T>& in) {
    if (tensor<T>* p0 = g.find("initial_covariance")) detail::grad::symmetrise_matrices(*p0);
    if (in.process_noise && in.process_noise->form == dense_form::full)
      if (tensor<T>* w = g.find("process_noise")) detail::grad::symmetrise_matrices(*w);
  }
};

}  // namespace kalman_oracle
