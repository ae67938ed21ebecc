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

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <optional>
#include <span>
#include <vector>

#include "kalman_oracle/algebra/rank_one_update_norm.hpp"
#include "kalman_oracle/check/two_key_propagation.hpp"
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

template <class B>
class running_error;  // scalar/running_error.hpp

/// The hook through which a scalar type that carries an error bound replaces the entrywise
/// propagation of the memory's steps by a norm-wise one (one object per state: S forward, dS in
/// reverse): step() is told that `after` = step(`before`) for token t of a K x V state (`step`
/// recomputes it from any state). Plain scalars have nothing to bound.
template <class T>
struct memory_error_bound {
  explicit memory_error_bound(check::propagation_direction) {}
  template <class Step>
  void step(const memory_head<T>&, std::size_t, const std::vector<T>&, std::vector<T>&, Step&&) {}
};

/// The first-order running error (scalar/running_error.hpp, docs/error-model.md, "Gradients:
/// first-order running error"). Per operation it carries the delta step's errors through
/// |I − w eᵀ| entry by entry, which grows like (1 + β‖k‖₁²)^t although the exact step is
/// non-expansive (DeltaNet at T = 1000 reached 10⁶⁹ u). Both steps act on each column j of the
/// state alone, by A_t = (I − w_t e_tᵀ) diag(α_t) (forward) or its transpose (adjoint), so the
/// error after the step is A_t ε + ℓ, ℓ the step's own first-order error with an exact `before`
/// (the step recomputed on the values, errors of w, e, α, v included). This carries a bound N_j on
/// ‖ε_j‖₂ per column from step to step (entry bounds would lose √K every step):
///     N_j ← ‖A_t‖₂ N_j + ‖err(ℓ)_j‖₂,   and each entry's bound is min(entrywise, ‖A_t‖₂ N_j + err(ℓ)_ij).
/// Whatever the caller does to the state between steps (the adjoint adds τ q do_tᵀ) shows as the
/// growth of the entries' bounds since the last step, which is added to N_j in 2-norm.
///
/// The per-step norms miss what the products of the steps do: a norm of 1 a step (the β-form rules)
/// adds every token's rounding at full weight although the product of a few K steps with keys that
/// span the key space contracts, and where a step's norm exceeds 1 (the two-key rule of the diagonal
/// KDN: a gain κ not parallel to its key makes I − κeᵀ an oblique projection) the products of the
/// norms grow geometrically although the products of the steps contract. So two more bounds run beside
/// N_j, each entry taking the smallest (check/two_key_propagation.hpp, forward or adjoint): for every
/// erasing rule from the first token, the exact products over segments of long_segment_length(K)
/// tokens, for what entered before the segment and, where that is cheap (locals_propagated), for each
/// token's local error since (`long_segments`); where it is not, the long segments carry only their
/// carry (one propagator, K² a token), and from the first token whose step's norm exceeds 1 the exact
/// propagators over segments of 16 tokens, for the carry and each local error, run too (`segments`).
/// Their propagators are formed in binary64 (an estimate's arithmetic; what covers their rounding is
/// at propagation_inflation below).
template <class B>
struct memory_error_bound<running_error<B>> {
  std::vector<B> column_norm;  ///< N_j; empty before the first step (then ‖err(before)_j‖₂)
  std::vector<B> entry_error;  ///< the entries' bounds as the last step left them
  check::propagation_direction direction;
  std::optional<check::two_key_propagation<double>> long_segments;  ///< erasing rules, from the first step
  std::optional<check::two_key_propagation<double>> segments;       ///< K > 32: from the first step of norm > 1

  explicit memory_error_bound(check::propagation_direction d) : direction(d) {}

  template <class Step>
  void step(const memory_head<running_error<B>>& m, std::size_t t, const std::vector<running_error<B>>& before,
            std::vector<running_error<B>>& after, Step&& recompute) {
    using std::sqrt;
    const std::size_t K = m.key_dim, V = m.value_dim;
    const B norm = operator_norm(m, t);
    std::vector<running_error<B>> exact_before(before.size());
    for (std::size_t x = 0; x < before.size(); ++x) exact_before[x] = running_error<B>(before[x].value());
    const std::vector<running_error<B>> local = recompute(exact_before);
    const bool first = column_norm.empty();
    column_norm.resize(V);
    entry_error.resize(K * V);
    // Per column: ‖err(before)_j‖₂, the growth since the last step, ‖err(ℓ)_j‖₂.
    std::vector<B> before_norm(V), growth_norm(V), local_norm(V);
    for (std::size_t j = 0; j < V; ++j) {
      B entries(0), growth(0), locals(0);
      for (std::size_t i = 0; i < K; ++i) {
        const B& e = before[i * V + j].error();
        entries += e * e;
        if (!first && e > entry_error[i * V + j]) growth += (e - entry_error[i * V + j]) * (e - entry_error[i * V + j]);
        locals += local[i * V + j].error() * local[i * V + j].error();
      }
      before_norm[j] = sqrt(entries), growth_norm[j] = sqrt(growth), local_norm[j] = sqrt(locals);
    }
    // The bound of column j's error carried into the step: ‖err(before)_j‖₂, or N_j plus the growth
    // since the last step where that is smaller (where a propagation starts, rounded upward).
    const auto carried_in = [&](std::size_t j) {
      B carried = before_norm[j];
      if (!first && column_norm[j] + growth_norm[j] < carried) carried = column_norm[j] + growth_norm[j];
      return carried;
    };
    const auto advance = [&](std::optional<check::two_key_propagation<double>>& propagation, bool start,
                             std::size_t length, check::local_propagators locals) {
      if (!propagation && start) {
        propagation.emplace(K, V, length, direction, locals);
        for (std::size_t j = 0; j < V; ++j) propagation->inject(j, upward(carried_in(j)));
      } else if (propagation) {
        for (std::size_t j = 0; j < V; ++j) {
          propagation->inject(j, upward(growth_norm[j]));
          propagation->tighten(j, upward(before_norm[j]));
        }
      }
    };
    advance(long_segments, m.erases, long_segment_length(K),
            locals_propagated(K) ? check::local_propagators::each : check::local_propagators::carry_only);
    advance(segments, !locals_propagated(K) && m.erases && norm > B(1 + oblique_threshold), segment_length,
            check::local_propagators::each);
    if (long_segments || segments) {
      std::vector<double> alpha(K), erase(K), write(K), local_upward(V);
      for (std::size_t i = 0; i < K; ++i) {
        alpha[i] = to_double(m.alpha[t * K + i].value());
        erase[i] = to_double(m.erase[t * K + i].value());
        write[i] = to_double(m.write[t * K + i].value());
      }
      for (std::size_t j = 0; j < V; ++j) local_upward[j] = upward(local_norm[j]);
      if (long_segments) long_segments->step(alpha, erase, write, local_upward);
      if (segments) segments->step(alpha, erase, write, local_upward);
    }
    for (std::size_t j = 0; j < V; ++j) {
      B carried = carried_in(j) * norm;
      // The binary64 propagators' error: relative, and absolute up to ι times the weights that the
      // per-step norms give the same errors (see propagation_inflation).
      const B per_step = carried;
      for (const auto* propagation : {&long_segments, &segments})
        if (*propagation) {
          const B propagated =
              B((*propagation)->carried(j)) * B(1 + propagation_inflation) + B(propagation_inflation) * per_step;
          if (propagated < carried) carried = propagated;
        }
      // (Planted bug memory_error_bound_drops_carried: the error carried into the step forgotten.)
      carried = KALMAN_ORACLE_MUTANT(memory_error_bound_drops_carried, carried, B(0));
      B after_entries(0);
      for (std::size_t i = 0; i < K; ++i) {
        running_error<B>& x = after[i * V + j];
        const B normwise = carried + local[i * V + j].error();
        if (normwise < x.error()) x = running_error<B>(x.value(), normwise);
        entry_error[i * V + j] = x.error();
        after_entries += x.error() * x.error();
      }
      column_norm[j] = carried + local_norm[j];
      if (sqrt(after_entries) < column_norm[j]) column_norm[j] = sqrt(after_entries);
      if (long_segments) long_segments->tighten(j, upward(column_norm[j]));
      if (segments) segments->tighten(j, upward(column_norm[j]));
    }
  }

  /// The product of the β-form rules' steps contracts only once a segment's keys span the key space,
  /// which random keys do in a few K tokens (DeltaNet, K = 16, unit keys, β ∈ [0, 1]: ‖Φ‖₂ 0.9996 over
  /// 16 tokens, 0.90 over 32, 0.59 over 64, 0.17 over 128; docs/error-model.md, "Exact products over
  /// segments"): segments of 8K tokens, at least 16 and at most 2²¹/K (propagation_inflation; K > 512).
  static std::size_t long_segment_length(std::size_t K) {
    return std::max<std::size_t>(16, std::min<std::size_t>(8 * K, (std::size_t{1} << 21) / K));
  }
  /// Whether the long segments give each token's local error its own propagator too: where that costs at
  /// most 2¹⁸ multiply-adds a token and direction (8K propagators of K² entries: K <= 32), about what the
  /// adjoint itself costs at K = V = 128. They pay where products inside a segment contract (the
  /// default suite's K = 16 fixtures: the shares of the budgets 1.14 to 1.22 times those with the carry
  /// alone, and all of the oblique steps' gain), and then the oblique steps' own segments are not needed.
  static bool locals_propagated(std::size_t K) { return 8 * K * K * K <= (std::size_t{1} << 18); }
  /// The oblique steps' segments where the long ones carry only their carry (K > 32): a propagator for
  /// each local error, K² a token and local.
  static constexpr std::size_t segment_length = 16;
  /// They start at the first token whose step's norm exceeds 1 by more than rounding: the β-form
  /// rules' norm is exactly 1 for β‖k‖² ∈ [0, 2] (with α = 1), and its evaluation at the working
  /// precision may land an ulp above, which must not switch the bound (and the fixtures' bytes) on
  /// rounding noise.
  static constexpr double oblique_threshold = 0x1p-40;
  /// ι: a propagator is a product of at most long_segment_length(K) <= 2²¹/K steps, each a rank-one
  /// update formed with K-term sums in binary64, so its entries err by about 2 · 2²¹ · 2⁻⁵³ = 2⁻³¹ times
  /// the norms of the partial products, which the per-step norms bound; the bound taken is the
  /// propagation's times 1 + ι plus ι times the per-step norms' (and the values entering it rounded
  /// upward and inflated by 1 + ι).
  static constexpr double propagation_inflation = 0x1p-30;

  static double to_double(const B& x) { return static_cast<double>(x); }
  /// x rounded up to binary64 and inflated as the propagators' results are.
  static double upward(const B& x) { return std::nextafter(to_double(x), HUGE_VAL) * (1 + propagation_inflation); }

  /// ‖A_t‖₂ <= max α · ‖I − w eᵀ‖₂ (algebra/rank_one_update_norm.hpp: for the β-form rules
  /// max(1, |1 − β‖k‖²|), so 1 when β‖k‖² ∈ [0, 2]); GLA (no erase): max α.
  static B operator_norm(const memory_head<running_error<B>>& m, std::size_t t) {
    const std::size_t K = m.key_dim;
    B max_alpha(0), s(0), ww(0), ee(0);
    for (std::size_t i = 0; i < K; ++i) {
      const B& a = m.alpha[t * K + i].value();
      if (a > max_alpha) max_alpha = a;
      if (!m.erases) continue;
      const B& w = m.write[t * K + i].value();
      const B& e = m.erase[t * K + i].value();
      s += w * e, ww += w * w, ee += e * e;
    }
    if (!m.erases) return max_alpha;
    return max_alpha * rank_one_update_norm(s, ww, ee);
  }
};

template <class T>
struct memory_head_gradients {
  std::vector<T> alpha, erase, write, value, query;  // dL/d(each), same layout as memory_head
  std::vector<T> initial_state;                      // dL/dS_0
  T tau{0};
};

/// S_t from S_{t−1} (the forward step above, in its order), for memory_error_bound.
template <class T>
std::vector<T> memory_forward_step(const memory_head<T>& m, std::size_t t, const std::vector<T>& from) {
  const std::size_t K = m.key_dim, V = m.value_dim;
  std::vector<T> hat = from;
  for (std::size_t i = 0; i < K; ++i)
    for (std::size_t j = 0; j < V; ++j) hat[i * V + j] *= m.alpha[t * K + i];
  std::vector<T> next = hat;
  for (std::size_t j = 0; j < V; ++j) {
    T predicted(0);
    if (m.erases)
      for (std::size_t i = 0; i < K; ++i) predicted += hat[i * V + j] * m.erase[t * K + i];
    const T residual = m.value[t * V + j] - predicted;
    for (std::size_t i = 0; i < K; ++i) next[i * V + j] += m.write[t * K + i] * residual;
  }
  return next;
}

/// dS_{t−1} from dS_t after the readout's term (the reverse step above: dŜ = dS − e (dSᵀw)ᵀ, then
/// diag(α) dŜ), for memory_error_bound.
template <class T>
std::vector<T> memory_adjoint_step(const memory_head<T>& m, std::size_t t, const std::vector<T>& from) {
  const std::size_t K = m.key_dim, V = m.value_dim;
  std::vector<T> d = from;
  if (m.erases)
    for (std::size_t j = 0; j < V; ++j) {
      T r(0);
      for (std::size_t i = 0; i < K; ++i) r += from[i * V + j] * m.write[t * K + i];
      for (std::size_t i = 0; i < K; ++i) d[i * V + j] -= m.erase[t * K + i] * r;
    }
  for (std::size_t i = 0; i < K; ++i)
    for (std::size_t j = 0; j < V; ++j) d[i * V + j] *= m.alpha[t * K + i];
  return d;
}

/// The memory adjoint of one head (see above). `d_output` is do [t * V + j] (empty: zero) and
/// `d_final_state` dS_T (K x V; empty: zero).
template <class T>
memory_head_gradients<T> memory_backward(const memory_head<T>& m, std::span<const T> d_output,
                                         std::span<const T> d_final_state) {
  const std::size_t N = m.tokens, K = m.key_dim, V = m.value_dim;
  // Forward, storing S_0..S_N and Ŝ_1..Ŝ_N and the residuals.
  std::vector<std::vector<T>> S(N + 1), S_hat(N), residual(N);
  memory_error_bound<T> state_error(check::propagation_direction::forward),
      adjoint_error(check::propagation_direction::adjoint);
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
    state_error.step(m, t, S[t], S[t + 1], [&](const std::vector<T>& from) { return memory_forward_step(m, t, from); });
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
    const std::vector<T> dS_t = dS;  // for memory_error_bound below
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
    adjoint_error.step(m, t, dS_t, dS, [&](const std::vector<T>& from) { return memory_adjoint_step(m, t, from); });
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
