// Error propagation through the two-key delta rule's exact step A_t = (I − κ_t k_tᵀ) D_t (docs/math.md
// §7; docs/error-model.md, "Diagonal KDN: contraction and a-posteriori bounds"): a bound e_t on
// ‖ε_t‖₂ for every value column, where ε_t = A_t ε_{t−1} + ℓ_t, ‖ℓ_t‖₂ <= L_t, ε_0 = 0.
//
// Why not the delta rules' recursion e_t = ‖A_t‖₂ e_{t−1} + L_t (check/delta_rule_bound.hpp): with a
// gain κ not parallel to the erase key k (the diagonal gain P̂k/(r + kᵀP̂k)), I − κkᵀ is an oblique
// projection whose 2-norm exceeds 1, so the product of per-token norms grows geometrically although
// the products of the A_t themselves contract. Hence tokens are grouped in segments of
// `segment_length`; inside a segment that started after token t0 the propagators
// Φ(t, s) = A_t ⋯ A_{s+1} are formed exactly for the carry (s = t0) and for every local error since,
// and
//     ε_t = Φ(t, t0) ε_{t0} + Σ_{t0 < s <= t} Φ(t, s) ℓ_s
// gives e_t = c(t) e_{t0} + Σ_s n(t, s) L_s with n(t, s) = min(Π_{s<r<=t} ρ_r, ‖Φ(t, s)‖_F) >= ‖Φ(t, s)‖₂
// (ρ_r >= ‖A_r‖₂, below), c(t) = n(t, t0) inside the segment and, at its end (the value carried on),
// c = min(n, ‖M^(2^m)‖_F^(1/2^(m+1))) with M = ΦᵀΦ: since M is symmetric positive semi-definite,
// ‖Φ‖₂² = λ_max(M) and λ_max^(2^m) <= ‖M^(2^m)‖_F <= √K λ_max^(2^m), so the bound is within K^(1/2^(m+2))
// of ‖Φ‖₂ (m = 4: within 1.07 for K = 64) where the Frobenius norm would lose √K.
//
// ρ_r: ‖(I − κkᵀ)D‖₂ <= ‖I − κkᵀ‖₂ max_i α_i, and I − κkᵀ is the identity off span{κ, k}; on that
// plane its squared singular values have product (1 − s)² (the determinant 1 − kᵀκ) and sum
// 2 − 2s + ‖κ‖²‖k‖² (the trace of (I − κkᵀ)ᵀ(I − κkᵀ) less K − 2), s = kᵀκ, so
//     ‖I − κkᵀ‖₂² = (S + √(S² − 4(1 − s)²)) / 2,   S = 2 − 2s + ‖κ‖²‖k‖²
// (S² >= 4(1 − s)² by Cauchy–Schwarz; with κ ∥ k it is max(1, |1 − s|), the delta rules' case).
//
// The adjoint direction (grad/memory.hpp's first-order bound of the memory adjoint): dS_{t−1} =
// A_tᵀ dS_t, so the propagators Ψ(s, t) = A_{s+1}ᵀ ⋯ A_tᵀ grow on the left by A_tᵀ = D (I − kκᵀ) as the
// adjoint runs from the last token down; ‖A_tᵀ‖₂ = ‖A_t‖₂, so ρ and the rest are the same.
// Errors that enter between steps (the adjoint adds τ q doᵀ) are inject()ed at the current point.
//
// The carry alone (`local_propagators::carry_only`): one propagator a segment, for the carried error,
// and each local error weighted by Π ρ since it entered (>= ‖Φ(t, s)‖₂ by submultiplicativity), so
//     e_t = c(t) e_{t0} + f_t,   f_t = ρ_t f_{t−1} + L_t,   f_{t0} = 0.
// It gives up the locals' own propagators, which pay only where ‖Φ(t, s)‖_F < Π ρ (steps of norm
// above 1, or products long enough to contract inside the segment), for a cost of K² a token instead
// of K² a token and local: long segments (hundreds of tokens, where products of the β-form rules'
// steps, each of norm 1, contract) then cost what short ones cost.
//
// Everything is evaluated in the working type T along the exact trajectory (MPFR in the generator);
// the caller inflates and rounds the result upward as for the other bounds.
#pragma once

#include <algorithm>
#include <cstddef>
#include <stdexcept>
#include <vector>

#include "kalman_oracle/detail/mutant.hpp"

namespace kalman_oracle::check {

/// ‖I − κkᵀ‖₂ for vectors κ, k (see the top).
template <class T>
T erase_write_norm(const std::vector<T>& gain, const std::vector<T>& key) {
  using std::sqrt;
  T s(0), g2(0), k2(0);
  for (std::size_t i = 0; i < key.size(); ++i) {
    s += key[i] * gain[i];
    g2 += gain[i] * gain[i];
    k2 += key[i] * key[i];
  }
  const T S = T(2) - T(2) * s + g2 * k2, det = (T(1) - s) * (T(1) - s);
  const T disc = S * S - T(4) * det;
  return sqrt((S + sqrt(disc > 0 ? disc : T(0))) / T(2));
}

/// Which way the errors run: through A_t (the state, token by token) or A_tᵀ (the adjoint, from the last
/// token down).
enum class propagation_direction { forward, adjoint };

/// Whether each local error gets its own propagator, or only the segment's carry does (see the top).
enum class local_propagators { each, carry_only };

template <class T>
class two_key_propagation {
 public:
  /// Squarings of ΦᵀΦ at a segment's end (see the top).
  static constexpr int carry_squarings = 4;

  two_key_propagation(std::size_t key_dim, std::size_t value_dim, std::size_t segment_length = 16,
                      propagation_direction direction = propagation_direction::forward,
                      local_propagators locals = local_propagators::each)
      : K_(key_dim),
        segment_length_(segment_length),
        direction_(direction),
        locals_mode_(locals),
        start_(value_dim, T(0)),
        now_(value_dim, T(0)),
        carried_(value_dim, T(0)),
        fresh_(value_dim, T(0)) {
    if (segment_length == 0) throw std::invalid_argument("two_key_propagation: segment_length must be positive");
    open_segment();
  }

  /// The bound on ‖ε‖₂ of value column j after the last step (before the first: 0).
  const T& bound(std::size_t j) const { return now_[j]; }

  /// The part of bound(j) carried through the last step: bound(j) less that step's own local error.
  const T& carried(std::size_t j) const { return carried_[j]; }

  /// An error of 2-norm at most `amount` enters value column j at the current point (after the last
  /// step, before the next): it is propagated from here as a local error is.
  void inject(std::size_t j, const T& amount) {
    // (Planted bug two_key_injection_not_propagated: counted now, forgotten by the next step.)
    const T propagated = KALMAN_ORACLE_MUTANT(two_key_injection_not_propagated, amount, T(0));
    if (at_segment_start())
      start_[j] += propagated;
    else if (locals_mode_ == local_propagators::carry_only)
      fresh_[j] += propagated;
    else
      locals_.back()[j] += propagated;
    now_[j] += amount;
  }

  /// ‖ε_j‖₂ <= `known` at the current point, known otherwise (entry by entry bounds): taken where the
  /// current point starts a segment (its bound is then a single number), ignored elsewhere.
  void tighten(std::size_t j, const T& known) {
    if (!at_segment_start() || !(known < start_[j])) return;
    start_[j] = known;
    now_[j] = known;
  }

  /// Advances through one token's exact step A = (I − κkᵀ) diag(α), whose local rounding in column j
  /// is at most local[j].
  void step(const std::vector<T>& alpha, const std::vector<T>& key, const std::vector<T>& gain,
            const std::vector<T>& local) {
    using std::abs;
    T dmax(0);
    for (const T& a : alpha) dmax = std::max(dmax, abs(a));
    const T rho = erase_write_norm(gain, key) * dmax;
    for (auto& p : propagators_) {
      apply_step(p.phi, alpha, key, gain);
      p.growth *= rho;
    }
    ++steps_;
    const bool closing = steps_ == segment_length_;
    if (locals_mode_ == local_propagators::carry_only) {
      T factor = std::min(propagators_[0].growth, frobenius(propagators_[0].phi));
      if (closing) factor = std::min(factor, spectral_upper(propagators_[0].phi));
      for (std::size_t j = 0; j < now_.size(); ++j) {
        // Π ρ >= ‖Φ(t, s)‖₂ for every local since the segment began (planted bug
        // two_key_carry_only_locals_not_grown: the locals kept at weight 1, too little where ρ > 1).
        fresh_[j] *= KALMAN_ORACLE_MUTANT(two_key_carry_only_locals_not_grown, rho, T(1));
        carried_[j] = factor * start_[j] + fresh_[j];
        fresh_[j] += local[j];
        now_[j] = carried_[j] + local[j];
        if (closing) start_[j] = KALMAN_ORACLE_MUTANT(two_key_bound_forgets_history, now_[j], fresh_[j]);
      }
      if (closing) open_segment();
      return;
    }
    propagators_.push_back({identity(), T(1)});
    locals_.push_back(local);
    // n(t, s) for the carry (index 0) and each local error.
    std::vector<T> factor(propagators_.size());
    for (std::size_t n = 0; n < propagators_.size(); ++n)
      factor[n] = std::min(propagators_[n].growth, frobenius(propagators_[n].phi));
    if (closing) factor[0] = std::min(factor[0], spectral_upper(propagators_[0].phi));
    for (std::size_t j = 0; j < now_.size(); ++j) {
      T carried = factor[0] * start_[j], fresh(0);
      for (std::size_t n = 1; n + 1 < propagators_.size(); ++n) fresh += factor[n] * locals_[n - 1][j];
      carried_[j] = carried + fresh;  // the newest local's propagator is the identity (factor 1)
      fresh += factor.back() * locals_.back()[j];
      now_[j] = carried + fresh;
      if (closing) start_[j] = KALMAN_ORACLE_MUTANT(two_key_bound_forgets_history, now_[j], fresh);
    }
    if (closing) open_segment();
  }

 private:
  struct propagator {
    std::vector<T> phi;  ///< K x K row-major
    T growth;            ///< Π ρ since the propagator's start
  };

  std::vector<T> identity() const {
    std::vector<T> m(K_ * K_, T(0));
    for (std::size_t i = 0; i < K_; ++i) m[i * K_ + i] = T(1);
    return m;
  }
  void open_segment() {
    propagators_.clear();
    locals_.clear();
    std::fill(fresh_.begin(), fresh_.end(), T(0));
    steps_ = 0;
    propagators_.push_back({identity(), T(1)});
  }
  /// No step taken since the segment began: the current point's bound is start_ alone.
  bool at_segment_start() const { return steps_ == 0; }
  /// Φ ← (I − κkᵀ) D Φ (forward): rows scaled by α, then the rank-one correction −κ (kᵀ DΦ); or
  /// Ψ ← D (I − kκᵀ) Ψ (adjoint): the correction −k (κᵀΨ), then rows scaled by α.
  void apply_step(std::vector<T>& phi, const std::vector<T>& alpha, const std::vector<T>& key,
                  const std::vector<T>& gain) const {
    // (Planted bug two_key_adjoint_steps_forward: the adjoint propagated through A_t, not A_tᵀ.)
    if (KALMAN_ORACLE_MUTANT(two_key_adjoint_steps_forward, direction_ == propagation_direction::adjoint, false)) {
      std::vector<T> row(K_, T(0));  // κᵀ Ψ
      for (std::size_t i = 0; i < K_; ++i)
        for (std::size_t c = 0; c < K_; ++c) row[c] += gain[i] * phi[i * K_ + c];
      for (std::size_t i = 0; i < K_; ++i)
        for (std::size_t c = 0; c < K_; ++c) phi[i * K_ + c] = alpha[i] * (phi[i * K_ + c] - key[i] * row[c]);
      return;
    }
    std::vector<T> row(K_, T(0));  // kᵀ D Φ
    for (std::size_t i = 0; i < K_; ++i)
      for (std::size_t c = 0; c < K_; ++c) {
        phi[i * K_ + c] *= alpha[i];
        row[c] += key[i] * phi[i * K_ + c];
      }
    for (std::size_t i = 0; i < K_; ++i)
      for (std::size_t c = 0; c < K_; ++c) phi[i * K_ + c] -= gain[i] * row[c];
  }
  T frobenius(const std::vector<T>& m) const {
    using std::sqrt;
    T sum(0);
    for (const T& x : m) sum += x * x;
    return sqrt(sum);
  }
  /// ‖(ΦᵀΦ)^(2^m)‖_F^(1/2^(m+1)) >= ‖Φ‖₂ (see the top).
  T spectral_upper(const std::vector<T>& phi) const {
    using std::sqrt;
    std::vector<T> m = product(phi, phi, true), scales;
    for (int n = 0; n < carry_squarings; ++n) {
      // Keep the entries of order 1 (a common factor is taken out and its root put back).
      T scale = frobenius(m);
      if (scale == 0) return T(0);
      for (T& x : m) x /= scale;
      m = product(m, m, false);
      scales.push_back(scale);
    }
    T result = frobenius(m);
    // ‖M^(2^m)‖_F = result · Π scale_n^(2^(m−n)), n = 0..m−1; take the 2^(m+1)-th root factor by factor.
    T root = sqrt(result);
    for (int n = 0; n < carry_squarings; ++n) root = sqrt(root);
    for (int n = 0; n < carry_squarings; ++n) {
      T f = sqrt(scales[n]);  // scale^(2^(m−n)) under the 2^(m+1)-th root is scale^(1/2^(n+1))
      for (int r = 0; r < n; ++r) f = sqrt(f);
      root *= f;
    }
    return root;
  }
  /// A B, or Aᵀ A when `gram` (B ignored).
  std::vector<T> product(const std::vector<T>& a, const std::vector<T>& b, bool gram) const {
    std::vector<T> out(K_ * K_, T(0));
    for (std::size_t i = 0; i < K_; ++i)
      for (std::size_t l = 0; l < K_; ++l) {
        const T x = gram ? a[l * K_ + i] : a[i * K_ + l];
        if (x == 0) continue;
        for (std::size_t c = 0; c < K_; ++c) out[i * K_ + c] += x * (gram ? a[l * K_ + c] : b[l * K_ + c]);
      }
    return out;
  }

  std::size_t K_, segment_length_;
  propagation_direction direction_;
  local_propagators locals_mode_;
  std::vector<T> start_;    ///< e_{t0} per column
  std::vector<T> now_;      ///< e_t per column
  std::vector<T> carried_;  ///< e_t less the last step's local error, per column
  std::vector<T> fresh_;    ///< carry_only: f_t, the segment's locals weighted by Π ρ, per column
  std::size_t steps_ = 0;   ///< steps taken since the segment began
  std::vector<propagator> propagators_;
  std::vector<std::vector<T>> locals_;  ///< each: L_s per column, s in the segment
};

}  // namespace kalman_oracle::check
