// The memory adjoint: the reverse pass of one head of the generic delta rule (docs/math.md §7, §9;
// docs/gradients.md, "The memory (delta rule)"), shared by the fixed-gain family and both KDN
// models, and the gather/scatter between a (batch, head) slice of a model's tensors and one head.
//
// Forward (models/delta_rule.hpp, fla's order), per token t, state S (K x V):
//     Ŝ_t = diag(α_t) S_{t−1}
//     S_t = Ŝ_t + w_t (v_t − Ŝ_tᵀ e_t)ᵀ      (erasing rules: e_t the erase key, w_t the write)
//     S_t = Ŝ_t + w_t v_tᵀ                   (GLA: no erase)
//     o_t = S_tᵀ (τ q_t)
// DeltaNet/GDN/KDA: e = k, w = β k; given gain (two-key rule, both KDNs): e = k, w = κ; GLA: w = k.
// Reverse (dS ← dS_T, then t = T..1), with res_t = v_t − Ŝ_tᵀ e_t:
//     dS   += τ q_t do_tᵀ ;  dq_t = τ S_t do_t ;  dτ += q_tᵀ S_t do_t
//     dw_t  = dS res_t ;  dres = dSᵀ w_t ;  dv_t = dres
//     dŜ    = dS − e_t dresᵀ ;  de_t = −Ŝ_t dres
//     dα_t,i = Σ_j dŜ_ij S_{t−1,ij} ;  dS ← diag(α_t) dŜ      (this is dS_{t−1})
// and dS_0 = dS at the end. The states S_t are recomputed forward first (stored: a reference).
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "kalman_oracle/detail/mutant.hpp"
#include "kalman_oracle/grad/common.hpp"
#include "kalman_oracle/grad/gates.hpp"
#include "kalman_oracle/models/gates.hpp"
#include "kalman_oracle/tensor/tensor.hpp"

namespace kalman_oracle {

template <class T>
struct memory_head {
  std::size_t tokens = 0, key_dim = 0, value_dim = 0;
  bool erases = true;
  T tau{1};
  // Per token, row-major [t * K + i] / [t * V + j]:
  std::vector<T> alpha, erase, write, value, query;  // α, e (unused without erase), w, v, q
  std::vector<T> initial_state;                      // S_0, K x V
};

template <class T>
struct memory_head_gradients {
  std::vector<T> alpha, erase, write, value, query;  // dL/d(each), same layout as memory_head
  std::vector<T> initial_state;                      // dL/dS_0
  T tau{0};
};

/// The memory adjoint of one head (see above). `d_output` is do [t * V + j] (empty: zero) and
/// `d_final_state` dS_T (K x V; empty: zero).
template <class T>
memory_head_gradients<T> memory_backward(const memory_head<T>& m, std::span<const T> d_output,
                                         std::span<const T> d_final_state) {
  const std::size_t N = m.tokens, K = m.key_dim, V = m.value_dim;
  // Forward, storing S_0..S_N and Ŝ_1..Ŝ_N and the residuals.
  std::vector<std::vector<T>> S(N + 1), S_hat(N), residual(N);
  S[0] = m.initial_state;
  for (std::size_t t = 0; t < N; ++t) {
    S_hat[t] = S[t];
    for (std::size_t i = 0; i < K; ++i)
      for (std::size_t j = 0; j < V; ++j) S_hat[t][i * V + j] *= m.alpha[t * K + i];
    residual[t].assign(V, T(0));
    for (std::size_t j = 0; j < V; ++j) {
      T predicted(0);
      if (m.erases)
        for (std::size_t i = 0; i < K; ++i) predicted += S_hat[t][i * V + j] * m.erase[t * K + i];
      residual[t][j] = m.value[t * V + j] - predicted;
    }
    S[t + 1] = S_hat[t];
    for (std::size_t i = 0; i < K; ++i)
      for (std::size_t j = 0; j < V; ++j) S[t + 1][i * V + j] += m.write[t * K + i] * residual[t][j];
  }

  memory_head_gradients<T> g;
  g.alpha.assign(N * K, T(0));
  g.erase.assign(N * K, T(0));
  g.write.assign(N * K, T(0));
  g.value.assign(N * V, T(0));
  g.query.assign(N * K, T(0));
  std::vector<T> dS(K * V, T(0));
  if (!d_final_state.empty())
    for (std::size_t x = 0; x < K * V; ++x) dS[x] = d_final_state[x];

  std::vector<T> d_res(V);
  for (std::size_t t = N; t-- > 0;) {
    const std::vector<T>& St = S[t + 1];
    // o_t = S_tᵀ (τ q_t).
    if (!d_output.empty()) {
      for (std::size_t i = 0; i < K; ++i) {
        T row(0);
        for (std::size_t j = 0; j < V; ++j) {
          const T& d_o = d_output[t * V + j];
          dS[i * V + j] += m.tau * m.query[t * K + i] * d_o;
          row += St[i * V + j] * d_o;
        }
        g.query[t * K + i] += m.tau * row;
        g.tau += m.query[t * K + i] * row;
      }
    }
    // S_t = Ŝ_t + w_t res_tᵀ, res_t = v_t − Ŝ_tᵀ e_t (GLA: res_t = v_t).
    for (std::size_t i = 0; i < K; ++i) {
      T dw(0);
      for (std::size_t j = 0; j < V; ++j) dw += dS[i * V + j] * residual[t][j];
      g.write[t * K + i] += dw;
    }
    for (std::size_t j = 0; j < V; ++j) {
      T r(0);
      for (std::size_t i = 0; i < K; ++i) r += dS[i * V + j] * m.write[t * K + i];
      d_res[j] = r;
      g.value[t * V + j] += r;
    }
    if (m.erases) {
      for (std::size_t i = 0; i < K; ++i) {
        T de(0);
        for (std::size_t j = 0; j < V; ++j) de += S_hat[t][i * V + j] * d_res[j];
        // de_t = −Ŝ_t dres (planted bug grad_memory_erase_sign: the sign flipped).
        g.erase[t * K + i] += KALMAN_ORACLE_MUTANT(grad_memory_erase_sign, T(-de), de);
        for (std::size_t j = 0; j < V; ++j) dS[i * V + j] -= m.erase[t * K + i] * d_res[j];  // dŜ = dS − e dresᵀ
      }
    }
    // Ŝ_t = diag(α_t) S_{t−1}: dα and dS_{t−1}.
    for (std::size_t i = 0; i < K; ++i) {
      T da(0);
      for (std::size_t j = 0; j < V; ++j) da += dS[i * V + j] * S[t][i * V + j];
      g.alpha[t * K + i] += da;
      for (std::size_t j = 0; j < V; ++j) dS[i * V + j] *= m.alpha[t * K + i];
    }
  }
  g.initial_state = std::move(dS);
  return g;
}

// ---- Gather and scatter: one (batch, head) slice of a model's tensors <-> one memory head ------------

namespace detail::grad {

/// Token rows of head (b, h) of a [B, T, H, D] tensor, row-major [t * D + d]; empty for nullptr (an
/// output without a cotangent: memory_backward reads empty as zero).
template <class T>
std::vector<T> head_tokens(const tensor<T>* x, std::size_t b, std::size_t h) {
  if (x == nullptr) return {};
  const std::size_t N = x->dim(1), D = x->dim(3);
  std::vector<T> rows(N * D);
  for (std::size_t t = 0; t < N; ++t)
    for (std::size_t d = 0; d < D; ++d) rows[t * D + d] = (*x)(b, t, h, d);
  return rows;
}

/// The K x V state of head (b, h) of a [B, H, K, V] tensor, row-major [i * V + j]; empty for nullptr.
template <class T>
std::vector<T> head_state(const tensor<T>* x, std::size_t b, std::size_t h) {
  if (x == nullptr) return {};
  const std::size_t K = x->dim(2), V = x->dim(3);
  std::vector<T> state(K * V);
  for (std::size_t i = 0; i < K; ++i)
    for (std::size_t j = 0; j < V; ++j) state[i * V + j] = (*x)(b, h, i, j);
  return state;
}

/// The memory head of (b, h) with erase key e = k (every erasing rule and both KDNs, see the top),
/// q, k, v read from their [B, T, H, ·] tensors, α_{t,i} = decay(t, i), and S_0 and τ given. The
/// write keys w are left zero for the caller: they are the model's gain (β k, κ, or k for GLA).
template <class T, class Decay>
memory_head<T> gather_memory_head(const tensor<T>& q, const tensor<T>& k, const tensor<T>& v, std::size_t b,
                                  std::size_t h, Decay decay, bool erases, const T& tau, std::vector<T> initial_state) {
  const std::size_t N = k.dim(1), K = k.dim(3), V = v.dim(3);
  memory_head<T> m;
  m.tokens = N, m.key_dim = K, m.value_dim = V, m.erases = erases, m.tau = tau;
  m.alpha.resize(N * K), m.erase.resize(N * K), m.write.assign(N * K, T(0)), m.query.resize(N * K);
  m.value.resize(N * V);
  for (std::size_t t = 0; t < N; ++t) {
    for (std::size_t i = 0; i < K; ++i) {
      m.alpha[t * K + i] = decay(t, i);
      m.erase[t * K + i] = k(b, t, h, i);
      m.query[t * K + i] = q(b, t, h, i);
    }
    for (std::size_t j = 0; j < V; ++j) m.value[t * V + j] = v(b, t, h, j);
  }
  m.initial_state = std::move(initial_state);
  return m;
}

/// Scatters what every memory adjoint returns the same way: dq and dv into their full [B, T, H, ·]
/// tensors (each element of head (b, h) is written once), dS_0 into its broadcast accumulator.
template <class T>
void scatter_memory_gradients(const memory_head_gradients<T>& gm, std::size_t b, std::size_t h, tensor<T>& dq,
                              tensor<T>& dv, broadcast_accumulator<T>& d_initial_state) {
  const std::size_t N = dq.dim(1), K = dq.dim(3), V = dv.dim(3);
  for (std::size_t t = 0; t < N; ++t) {
    for (std::size_t i = 0; i < K; ++i) dq(b, t, h, i) = gm.query[t * K + i];
    for (std::size_t j = 0; j < V; ++j) dv(b, t, h, j) = gm.value[t * V + j];
  }
  for (std::size_t i = 0; i < K; ++i)
    for (std::size_t j = 0; j < V; ++j) d_initial_state.add(gm.initial_state[i * V + j], b, h, i, j);
}

/// Scatters dα of per-channel gates ([B, T, H, K]: GLA, KDA, both KDNs) as dL/dg (grad/gates.hpp).
template <class T>
void scatter_channel_gates(const memory_head_gradients<T>& gm, const memory_head<T>& m, std::size_t b, std::size_t h,
                           gate_space gates, broadcast_accumulator<T>& dg) {
  for (std::size_t t = 0; t < m.tokens; ++t)
    for (std::size_t i = 0; i < m.key_dim; ++i) {
      const std::size_t x = t * m.key_dim + i;
      dg.add(gate_cotangent(gm.alpha[x], m.alpha[x], gates), b, t, h, i);
    }
}

}  // namespace detail::grad

}  // namespace kalman_oracle
