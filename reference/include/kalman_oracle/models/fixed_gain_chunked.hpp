// The chunked WY (UT-transform) form of the fixed-gain family (docs/math.md §7): the algorithm fla's
// chunked kernels follow (chunk_delta_rule, chunk_gated_delta_rule, chunk_kda, chunk_gla), written
// over the same scalar type T as the sequential reference (fixed_gain.hpp), so that over rationals
// it can be checked to equal the sequential form exactly, for any chunk size C >= 1.
//
// Derivation. Write every rule as the generic two-key step with a row scale r_t, an erase key e_t
// and a write key w_t:
//     S_t = D_t S_{t−1} + r_t w_t u_tᵀ,   u_t = v_t − (D_t S_{t−1})ᵀ e_t      (D_t = diag(α_t))
//   β-form (DeltaNet, GDN, KDA):  r_t = β_t, e_t = w_t = k_t    (fla's factorisation)
//   given gain κ (two-key rule):  r_t = 1,   e_t = k_t, w_t = κ_t
//   GLA (no erase):               r_t = 1,   e_t = 0,   w_t = k_t
// which is (I − r w eᵀ) D S + r w vᵀ, i.e. docs/math.md §7 in each case.
// Inside a chunk (local tokens t = 0..n−1 from the chunk-start state S), with Γ_t = α_0 ⊙ … ⊙ α_t
// (per channel) and the decay ratios ρ_tj = Γ_t / Γ_j (j ≤ t), induction on t gives
//     S_t = diag(Γ_t) S + Σ_{j≤t} diag(ρ_tj) w_j ũ_jᵀ,       ũ_j = r_j u_j (the pseudo-values)
// since D_t diag(Γ_{t−1}) = diag(Γ_t) and D_t diag(ρ_{t−1,j}) = diag(ρ_tj). Substituting into u_t:
//     ũ_t + Σ_{j<t} A_tj ũ_j = r_t v_t − r_t (Γ_t ⊙ e_t)ᵀ S,    A_tj = r_t e_tᵀ diag(ρ_tj) w_j
// so, with the strictly lower-triangular A (n x n), 𝒯 = (I + A)⁻¹ (forward substitution: the
// per-chunk triangular inverse), X the rows r_t (Γ_t ⊙ e_t)ᵀ and Y the rows r_t v_tᵀ:
//     W = 𝒯 X,   U = 𝒯 Y,   Ũ = U − W S                          (the WY / UT transform)
//     S_next = diag(Γ_{n−1}) S + Σ_{j<n} diag(ρ_{n−1,j}) w_j ũ_jᵀ   (the chunk carry)
//     o_t = Sᵀ (Γ_t ⊙ τ q_t) + Σ_{j≤t} [(τ q_t)ᵀ diag(ρ_tj) w_j] ũ_j  (inter + intra, read after write)
// For the β-form this is exactly fla's A = β_i k_iᵀ k_j (times the decay ratio), W = 𝒯(β ⊙ Γ ⊙ K),
// U = 𝒯(β ⊙ V), v_new = U − W S, S_next = Γ_last S + (K ⊙ Γ_last/Γ)ᵀ v_new. For the given gain κ the
// erase key of the row and the gain of the column meet: A_tj = k_tᵀ diag(ρ_tj) κ_j, W = 𝒯 (Γ ⊙ K),
// U = 𝒯 V, and the carry writes along κ. For GLA, A = 0, 𝒯 = I, W = 0, Ũ = V: fla's chunk_gla.
//
// Decays, as fla: log gates are summed inside the chunk (G_t = cumsum g, Γ_t = e^{G_t}) and the
// ratio is factored ρ_tj = e^{G_t} · e^{−G_j} (fla's chunk_kda does the same) while the chunk's decay
// stays within e^{−64} in every channel (G_{n−1} ≥ factored_log_decay_floor): both factors are then
// normal binary32 numbers with room to spare. A chunk that decays further (strong decay) takes the
// difference first, ρ_tj = e^{G_t − G_j} ≤ 1, and never forms e^{−G} (which overflows binary32 below
// about −88 and binary64 below −709; fla clamps its gates instead). The choice depends on the gates
// alone, the same in every scalar type and in gpu/'s kernel and twin. Linear decays use the
// cumulative product and its reciprocal, ρ_tj = Γ_t · (1/Γ_j): exact over rationals (Γ_j > 0 since
// every α ∈ (0, 1]).
//
// Tensor cores (scalar/operand_rounding.hpp; docs/error-model.md, "Tensor-core tiers"): every operand
// of the matrix products A, 𝒯X, 𝒯Y, WS, the inter-chunk read (Γ ⊙ τQ) S, the scores, scores · Ũ and
// the carry passes through round_operand, the identity unless a tensor_core_scope is open. The
// products whose factors are formed inside a product (A's and the scores' ρ_tj w_j) are then
// associated as a kernel forms them: (ρ w) first, or, inside a factored_decays_scope, factored as
// fla's chunk_kda and KalmanOracle's own kernel (gpu/) factor them on the tensor cores,
// (Γ_t e_t)(Γ_j⁻¹ w_j) and (Γ_t τq_t)(Γ_j⁻¹ w_j) (the same terms; to first order the same bound: each
// factor one operand rounding, one binary32 product); a strongly decaying chunk, which has no
// factors, is associated (ρ w) first either way. Without a tensor_core_scope every bit is as before.
#pragma once

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

#include "kalman_oracle/detail/mutant.hpp"
#include "kalman_oracle/detail/parallel_for.hpp"
#include "kalman_oracle/models/fixed_gain.hpp"
#include "kalman_oracle/models/gates.hpp"
#include "kalman_oracle/models/wy_chunk_error_bound.hpp"
#include "kalman_oracle/models/wy_pseudo_value_error_bound.hpp"
#include "kalman_oracle/scalar/operand_rounding.hpp"
#include "kalman_oracle/scalar/traits.hpp"

namespace kalman_oracle {

/// The chunk size of fla's chunked kernels (BT = 64): the default of the chunked WY form here and of
/// the KDN parallel forms' memory (models/kdn_parallel.hpp).
inline constexpr std::size_t default_wy_chunk_size = 64;

/// The lowest summed log gate (natural log) at which a chunk's decay ratios are still factored,
/// ρ_tj = e^{G_t} · e^{−G_j} (see the top): e^{±64} keeps both factors normal binary32 numbers
/// (e^{−64} ≈ 1.6·10⁻²⁸, e^{64} ≈ 6.2·10²⁷) with room for the keys they multiply. Below it the
/// ratio is e^{G_t − G_j}, taken difference first. gpu/'s delta-rule kernel and twin use the same floor.
inline constexpr double factored_log_decay_floor = -64;

namespace detail::fixed_gain {
/// This thread's choice (factored_decays_scope): under tensor cores, A and the scores from the
/// factored operands (Γ_t e_t), (Γ_j⁻¹ w_j) instead of e_t and (ρ_tj w_j).
inline thread_local bool factored_decays = false;
}  // namespace detail::fixed_gain

/// Under tensor cores, associates A and the scores as fla's chunk_kda factors them, for its lifetime.
class factored_decays_scope {
 public:
  factored_decays_scope() : previous_(detail::fixed_gain::factored_decays) {
    detail::fixed_gain::factored_decays = true;
  }
  ~factored_decays_scope() { detail::fixed_gain::factored_decays = previous_; }
  factored_decays_scope(const factored_decays_scope&) = delete;
  factored_decays_scope& operator=(const factored_decays_scope&) = delete;

 private:
  bool previous_;
};

namespace detail::fixed_gain {

/// Γ_t and 1/Γ_t per channel (n x K) of the chunk of n tokens starting at token c0: the decay from
/// the chunk start to just after local token t (see the top). Log gates are summed, G_t = cumsum g,
/// Γ_t = e^{G_t} and 1/Γ_t = e^{−G_t} (models/gates.hpp's rule applied to the sum); linear decays
/// multiplied, Γ_t = Π α and 1/Γ_t its reciprocal (exact over rationals). DeltaNet: all ones.
template <class T>
struct chunk_decays {
  std::vector<std::vector<T>> gamma, gamma_inv;
  std::vector<std::vector<T>> log_sum;  ///< G_t per channel (log gates only; empty otherwise)
  bool factored = true;                 ///< ρ_tj = Γ_t · Γ_j⁻¹ (else e^{G_t − G_j}; log gates only)
};

template <class T>
chunk_decays<T> cumulative_decays(const problem<T>& p, std::size_t b, std::size_t h, std::size_t c0, std::size_t n) {
  const std::size_t K = p.key_dim();
  chunk_decays<T> d;
  d.gamma.assign(n, std::vector<T>(K, T(1)));
  d.gamma_inv.assign(n, std::vector<T>(K, T(1)));
  if (!p.decays()) return d;
  if (p.gates() == gate_space::log) {
    std::vector<T> G(K, T(0));  // cumsum of the log gates
    d.log_sum.assign(n, std::vector<T>(K, T(0)));
    for (std::size_t t = 0; t < n; ++t)
      for (std::size_t i = 0; i < K; ++i) {
        G[i] += p.gate(b, c0 + t, h, i);
        d.log_sum[t][i] = G[i];
      }
    // Factored only while every channel's decay over the chunk stays above e^{floor} (G is
    // non-increasing: log gates are <= 0).
    for (std::size_t i = 0; i < K && n > 0; ++i)
      if (!(to_double(d.log_sum[n - 1][i]) >= factored_log_decay_floor)) d.factored = false;
    for (std::size_t t = 0; t < n; ++t)
      for (std::size_t i = 0; i < K; ++i) {
        d.gamma[t][i] = decay_of_log_gate(d.log_sum[t][i]);  // Γ_t = e^{G_t}
        // 1/Γ_t = e^{−G_t}, formed only where it is used (it overflows where the chunk decays strongly).
        d.gamma_inv[t][i] = d.factored ? decay_of_log_gate(T(-d.log_sum[t][i])) : T(0);
      }
  } else {
    std::vector<T> P(K, T(1));  // cumulative product of the decays
    for (std::size_t t = 0; t < n; ++t)
      for (std::size_t i = 0; i < K; ++i) {
        P[i] *= p.gate(b, c0 + t, h, i);
        d.gamma[t][i] = P[i];
        d.gamma_inv[t][i] = T(1) / P[i];
      }
  }
  return d;
}

/// Every intermediate of one chunk's forward pass from its start state S (see the top): the
/// per-token data r_t, e_t (erase key; unused for GLA), w_t (write key), v_t, q_t and τ q_t, the
/// cumulative decays, 𝒯 = (I + A)⁻¹, X, Y, W = 𝒯 X and Ũ = 𝒯 Y − W S. The forward pass reads its
/// outputs and carry from it; the chunked adjoint (grad/fixed_gain_chunked.hpp) recomputes it.
template <class T>
struct wy_chunk {
  std::size_t n = 0;
  std::vector<T> r;
  std::vector<std::vector<T>> e, w, v, q, sq, gamma, gamma_inv, Tm, X, Y, W, U;  // U holds Ũ
  std::vector<std::vector<T>> log_sum;                                           ///< G_t per channel (log gates only)
  bool factored = true;  ///< the decay ratios factored, Γ_t · Γ_j⁻¹ (see the top)
  /// Bounds (in error(), units of u) on |F|, F = (I + A)(𝒯̂ − 𝒯) the computed inverse's residual, n x n
  /// strictly lower: set by a scalar type that carries an error bound, inside a normwise_chunk_bound_scope
  /// (models/wy_pseudo_value_error_bound.hpp), for the chunked adjoint's bound on dA
  /// (grad/wy_chunk_adjoint_bound.hpp); empty otherwise.
  std::vector<std::vector<T>> inverse_residual;

  /// ρ_tj,i: the decay of channel i from just after token j to token t (j <= t): Γ_t · Γ_j⁻¹, or
  /// e^{G_t − G_j} in a strongly decaying chunk.
  T ratio(std::size_t t, std::size_t j, std::size_t i) const {
    return factored ? T(gamma[t][i] * gamma_inv[j][i]) : decay_of_log_gate(T(log_sum[t][i] - log_sum[j][i]));
  }
};

/// Σ_i left_ti ρ_tj,i w_ji (j <= t): A_tj / r_t with left = e (the erase keys), the score σ_tj with
/// left = τq. Under tensor cores its operands are rounded as a kernel forms them (see the top):
/// (Γ_t ⊙ left_t)(Γ_j⁻¹ ⊙ w_j) inside a factored_decays_scope where the chunk is factored, else
/// left_t and (ρ_tj ⊙ w_j); without, the plain product in that order. The forward and the chunked
/// adjoint (grad/fixed_gain_chunked.hpp) both form it here.
template <class T>
T wy_pair_dot(const wy_chunk<T>& c, const std::vector<std::vector<T>>& left, std::size_t t, std::size_t j,
              bool tensor_core) {
  const std::size_t K = left[t].size();
  T dot(0);
  if (tensor_core && factored_decays && c.factored)
    for (std::size_t i = 0; i < K; ++i)
      dot += round_operand(T(c.gamma[t][i] * left[t][i])) * round_operand(T(c.gamma_inv[j][i] * c.w[j][i]));
  else if (tensor_core)
    for (std::size_t i = 0; i < K; ++i)
      dot += round_operand(left[t][i]) * round_operand(T(c.ratio(t, j, i) * c.w[j][i]));
  else
    for (std::size_t i = 0; i < K; ++i) dot += left[t][i] * c.ratio(t, j, i) * c.w[j][i];
  return dot;
}

/// W = 𝒯X (n x K, stored in `W`) and the pseudo-values Ũ = 𝒯Y − W S (n x V, returned), every
/// matrix-product operand through round_operand.
template <class T>
std::vector<std::vector<T>> wy_pseudo_values(const std::vector<std::vector<T>>& Tm,
                                             const std::vector<std::vector<T>>& X, const std::vector<std::vector<T>>& Y,
                                             const std::vector<T>& S, std::vector<std::vector<T>>& W) {
  const std::size_t n = Tm.size(), K = X.empty() ? 0 : X[0].size(), V = Y.empty() ? 0 : Y[0].size();
  W.assign(n, std::vector<T>(K, T(0)));
  std::vector<std::vector<T>> U(n, std::vector<T>(V, T(0)));
  for (std::size_t t = 0; t < n; ++t)
    for (std::size_t m = 0; m <= t; ++m) {
      for (std::size_t j = 0; j < V; ++j) U[t][j] += round_operand(Tm[t][m]) * round_operand(Y[m][j]);
      for (std::size_t i = 0; i < K; ++i) W[t][i] += round_operand(Tm[t][m]) * round_operand(X[m][i]);
    }
  for (std::size_t t = 0; t < n; ++t)
    for (std::size_t j = 0; j < V; ++j) {
      T ws(0);
      for (std::size_t i = 0; i < K; ++i) ws += round_operand(W[t][i]) * round_operand(S[i * V + j]);
      U[t][j] -= ws;
    }
  return U;
}

/// The chunk of n tokens starting at token c0 of (b, h), from the chunk-start state S (K x V).
template <class T>
wy_chunk<T> wy_chunk_forward(const problem<T>& p, std::size_t b, std::size_t h, std::size_t c0, std::size_t n,
                             const std::vector<T>& S) {
  const std::size_t K = p.key_dim(), V = p.value_dim();
  wy_chunk<T> c;
  c.n = n;
  c.r.assign(n, T(1));
  c.e.resize(n), c.w.resize(n), c.v.resize(n), c.q.resize(n), c.sq.resize(n);
  for (std::size_t t = 0; t < n; ++t) {
    const std::size_t tok = c0 + t;
    c.e[t] = p.key(b, tok, h);
    c.v[t] = p.value(b, tok, h);
    c.q[t] = p.query(b, tok, h);
    c.sq[t] = c.q[t];
    for (auto& x : c.sq[t]) x = p.scale() * x;  // fla scales q first
    if (p.given_gain()) {
      c.w[t].resize(K);
      for (std::size_t i = 0; i < K; ++i) c.w[t][i] = p.kappa(b, tok, h, i);
    } else {
      c.w[t] = c.e[t];
      if (p.erases()) c.r[t] = p.beta(b, tok, h);
    }
  }

  // Γ_t and 1/Γ_t per channel (n x K): the cumulative decay inside the chunk.
  chunk_decays<T> decays = cumulative_decays(p, b, h, c0, n);
  c.gamma = std::move(decays.gamma);
  c.gamma_inv = std::move(decays.gamma_inv);
  c.log_sum = std::move(decays.log_sum);
  c.factored = decays.factored;

  const bool tensor_core = tensor_core_active<T>();
  // 𝒯 = (I + A)⁻¹ with A_tj = r_t e_tᵀ diag(ρ_tj) w_j (j < t): forward substitution on the
  // columns of the identity, 𝒯_jj = 1, 𝒯_tj = −Σ_{j≤m<t} A_tm 𝒯_mj. GLA: A = 0, 𝒯 = I.
  c.Tm.assign(n, std::vector<T>(n, T(0)));
  std::vector<std::vector<T>> A(n, std::vector<T>(n, T(0)));
  {
    if (p.erases())
      for (std::size_t t = 0; t < n; ++t)
        for (std::size_t j = 0; j < t; ++j) {
          A[t][j] = c.r[t] * wy_pair_dot(c, c.e, t, j, tensor_core);
        }
    for (std::size_t j = 0; j < n; ++j) {
      c.Tm[j][j] = T(1);
      for (std::size_t t = j + 1; t < n; ++t) {
        T sum(0);
        for (std::size_t m = j; m < t; ++m) sum += A[t][m] * c.Tm[m][j];
        c.Tm[t][j] = -sum;
      }
    }
  }

  // X rows r_t (Γ_t ⊙ e_t), Y rows r_t v_t; then Ũ = 𝒯Y − (𝒯X)S (the pseudo-values: fla's v_new).
  c.X.assign(n, std::vector<T>(K, T(0)));
  c.Y.assign(n, std::vector<T>(V, T(0)));
  for (std::size_t t = 0; t < n; ++t) {
    if (p.erases())
      for (std::size_t i = 0; i < K; ++i) c.X[t][i] = c.r[t] * (c.gamma[t][i] * c.e[t][i]);
    for (std::size_t j = 0; j < V; ++j) c.Y[t][j] = c.r[t] * c.v[t][j];
  }
  c.U = wy_pseudo_values(c.Tm, c.X, c.Y, S, c.W);
  // A scalar type that carries an error bound may bound Ũ's errors through 𝒯's structure instead
  // (models/wy_pseudo_value_error_bound.hpp); plain scalars ignore it.
  if (p.erases())
    bound_pseudo_values(c, A, S, [&](const std::vector<std::vector<T>>& Tm, std::vector<std::vector<T>>& W) {
      return wy_pseudo_values(Tm, c.X, c.Y, S, W);
    });
  return c;
}

/// The chunk carry: S' = diag(Γ_{n−1}) S + Σ_{j<n} diag(ρ_{n−1,j}) w_j ũ_jᵀ (planted bug
/// wy_chunk_carry_skips_last: the sum stops before the chunk's last token).
template <class T>
std::vector<T> wy_carry(const wy_chunk<T>& c, const std::vector<T>& S, std::size_t K, std::size_t V) {
  const std::size_t last = c.n - 1;
  const std::size_t carried = KALMAN_ORACLE_MUTANT(wy_chunk_carry_skips_last, c.n, c.n - 1);
  std::vector<T> next(K * V);
  for (std::size_t i = 0; i < K; ++i)
    for (std::size_t j = 0; j < V; ++j) {
      T s = c.gamma[last][i] * S[i * V + j];
      for (std::size_t m = 0; m < carried; ++m)
        s += round_operand(T(c.ratio(last, m, i) * c.w[m][i])) * round_operand(c.U[m][j]);
      next[i * V + j] = s;
    }
  return next;
}

/// The chunk's outputs (n x V): o_t = Sᵀ (Γ_t ⊙ τ q_t) (inter-chunk) + Σ_{j≤t} [(τ q_t)ᵀ diag(ρ_tj) w_j] ũ_j
/// (intra-chunk, causal with the diagonal: read after write).
template <class T>
std::vector<std::vector<T>> wy_outputs(const wy_chunk<T>& c, const std::vector<T>& S, std::size_t K, std::size_t V) {
  const bool tensor_core = tensor_core_active<T>();
  std::vector<std::vector<T>> rows(c.n, std::vector<T>(V, T(0)));
  for (std::size_t t = 0; t < c.n; ++t) {
    std::vector<T>& o = rows[t];
    for (std::size_t i = 0; i < K; ++i) {
      const T qg = c.gamma[t][i] * c.sq[t][i];
      for (std::size_t j = 0; j < V; ++j) o[j] += round_operand(S[i * V + j]) * round_operand(qg);
    }
    for (std::size_t m = 0; m <= t; ++m) {
      const T score = wy_pair_dot(c, c.sq, t, m, tensor_core);
      for (std::size_t j = 0; j < V; ++j) o[j] += round_operand(score) * round_operand(c.U[m][j]);
    }
  }
  return rows;
}

/// One (b, h) in chunks of `chunk_size` tokens. A scalar type that carries an error bound is told
/// of every chunk (models/wy_chunk_error_bound.hpp); plain scalars ignore it.
template <class T>
void run_head_chunked(const problem<T>& p, std::size_t b, std::size_t h, std::size_t chunk_size,
                      fixed_gain_outputs<T>& out) {
  const std::size_t K = p.key_dim(), V = p.value_dim(), tokens = p.tokens();
  std::vector<T> S = p.initial_state(b, h);  // the chunk-start state, K x V row-major
  wy_chunk_error_bound<T> bound;

  for (std::size_t c0 = 0; c0 < tokens; c0 += chunk_size) {
    const std::size_t n = std::min(chunk_size, tokens - c0);
    const wy_chunk<T> c = wy_chunk_forward(p, b, h, c0, n, S);
    std::vector<std::vector<T>> o = wy_outputs(c, S, K, V);
    std::vector<T> next = wy_carry(c, S, K, V);
    bound.chunk(c, p.erases(), S, o, next, [&](const std::vector<T>& from) {
      const wy_chunk<T> again = wy_chunk_forward(p, b, h, c0, n, from);
      return std::pair{wy_outputs(again, from, K, V), wy_carry(again, from, K, V)};
    });
    for (std::size_t t = 0; t < n; ++t)
      for (std::size_t j = 0; j < V; ++j) out.o(b, c0 + t, h, j) = o[t][j];
    S = std::move(next);
  }
  store_state(out, p, b, h, S);
}

}  // namespace detail::fixed_gain

/// The chunked WY form (see the top of this file) with chunks of `chunk_size` >= 1 tokens (the
/// last chunk may be shorter). Same inputs, validation and outputs as fixed_gain_forward.
template <class T>
fixed_gain_outputs<T> fixed_gain_chunked_forward(const fixed_gain_inputs<T>& inputs,
                                                 std::size_t chunk_size = default_wy_chunk_size,
                                                 const run_options& options = {}) {
  const detail::fixed_gain::problem<T> p(inputs);
  if (chunk_size == 0) throw input_error("chunk_size: 0; rule: a chunk needs at least one token");
  auto out = detail::fixed_gain::make_outputs(p, options);
  detail::parallel_for(p.batch() * p.heads(), options.threads, [&](std::size_t bh) {
    detail::fixed_gain::run_head_chunked(p, bh / p.heads(), bh % p.heads(), chunk_size, out);
  });
  return out;
}

}  // namespace kalman_oracle
