// Structured first-order bounds inside one chunk's reverse (grad/fixed_gain_chunked.hpp; docs/error-model.md,
// "The chunked binary32 tier", Gradients): where the running error, which takes every error through
// |·| entry by entry, loses the chunk's exact identities, and what replaces it.
//
// Why. Each quantity of the reverse errs by its local roundings (the same operations from exact values)
// plus the exact first-order response to the errors of the reverse's inputs: the end-state cotangent
// dS', the chunk-start state S and the recomputed forward (𝒯 = (I + A)⁻¹, W = 𝒯X, Ũ = 𝒯(Y − XS)). That
// response is linear, and in exact arithmetic the chunk's products collapse:
//   (a) dŨ ∋ C dS' (C_mi = ρ_Lm,i w_mi, the carry's keys) reaches dY = 𝒯ᵀdŨ as M δdS' with M = 𝒯ᵀC;
//       entry by entry the running error takes |𝒯ᵀ| |C| instead of |M| (𝒯's entries are large, M's are
//       not: M's rows are the keys as the rest of the chunk leaves them). So dY's second bound is the
//       running error of 𝒯ᵀ dŨ with dŨ formed from dS''s exact values, plus |M| e (e: dS''s errors).
//   (b) d𝒯 = dŨYᵀ + dWXᵀ = dŨ Zᵀ (dW = −dŨSᵀ, Z = Y − XS), so dA = −𝒯ᵀ d𝒯 𝒯ᵀ = −(𝒯ᵀdŨ)(𝒯Z)ᵀ = −dY Ũᵀ.
//       Its first-order change: with 𝒯̂ = 𝒯(I + F) (F = (I + A)(𝒯̂ − 𝒯), the residual that
//       models/wy_pseudo_value_error_bound.hpp bounds),
//           δdA = −(𝒯ᵀ δdŨ) Ũᵀ − dY (𝒯F Z + 𝒯(δY − δX S) − W δS)ᵀ + Fᵀ(−dY Ũᵀ) + (local),
//       where 𝒯ᵀδdŨ is within dY's error and the bracket is how Ũ = 𝒯(Y − XS) moves, within Ũ's error:
//           err(dA) <= local + err(dY) |Ũ|ᵀ + |dY| err(Ũ)ᵀ + |F|ᵀ |dY Ũᵀ|.
//       The running error instead takes dŨ's errors through |𝒯ᵀ| · |Y|, |S| |X| · |𝒯ᵀ|, losing both
//       𝒯's structure and the cancellation Y − XS.
//   (c) dX = −dY Sᵀ, so err(dX) <= local + |F|ᵀ |dX| + err(dY) |S|ᵀ + |dY| err(S)ᵀ.
//   (d) Log gates: dg_s = Σ_{t≥s} dG_t, and a pair's dρ_tj enters dG_t as +dρ_tj ρ_tj and dG_j as
//       −dρ_tj ρ_tj, so it reaches dg_s only for j < s <= t; the running error counts it for every
//       s <= t and again for every s <= j.
// Each quantity keeps, entry by entry, the smaller of its running error and the bound here (both bound the
// same error), so nothing is looser than before. Under tensor cores (operands rounded,
// scalar/operand_rounding.hpp) the local runs count the operand roundings; with the minima the bound is not
// affine in u_op (check/tensor_core_budget.hpp says how the tiers' line is fitted to it). Used with
// the norm-wise carry (normwise_chunk_bound_scope) on rules that erase, where the chunk carries its
// inverse's residual; elsewhere, and for plain scalars, nothing changes. (b) and (c) are checked against
// exact perturbations by properties/check_wy_adjoint_pair_bound.cpp, all of them against binary32 and
// tensor-core runs by properties/check_memory_gradient_bound.cpp.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "kalman_oracle/detail/mutant.hpp"
#include "kalman_oracle/models/wy_chunk_error_bound.hpp"
#include "kalman_oracle/scalar/operand_rounding.hpp"
#include "kalman_oracle/scalar/running_error.hpp"

namespace kalman_oracle {

/// x with its error bounds dropped (plain scalars: x itself): the exact values a local bound starts from.
template <class T>
T without_errors(const T& x) {
  return x;
}
template <class B>
running_error<B> without_errors(const running_error<B>& x) {
  return running_error<B>(x.value());
}
template <class T>
std::vector<T> without_errors(const std::vector<T>& x) {
  std::vector<T> exact;
  exact.reserve(x.size());
  for (const T& v : x) exact.push_back(without_errors(v));
  return exact;
}

/// Whether chunk c's reverse takes the bounds above: inside a normwise_chunk_bound_scope, on a chunk
/// whose inverse's residual a scalar that carries a bound has set (never for plain scalars).
template <class Chunk>
bool structured_adjoint_bound(const Chunk& c) {
  return detail::fixed_gain::normwise_chunk_bound && c.n > 0 && !c.inverse_residual.empty();
}

/// (a): dY's second bound, from dU_exact (dŨ formed from dS's exact values, its other terms as dŨ's)
/// and dS's errors (entry bounds e): the running error of 𝒯ᵀ dU_exact (in the backward's order) plus
/// |M| e; each entry keeps the smaller of this and its own. Plain scalars: nothing.
template <class T, class Chunk>
void bound_carried_cotangent(const Chunk&, const std::vector<T>&, const std::vector<std::vector<T>>&,
                             std::vector<std::vector<T>>&) {}

template <class B, class Chunk>
void bound_carried_cotangent(const Chunk& c, const std::vector<running_error<B>>& dS,
                             const std::vector<std::vector<running_error<B>>>& dU_exact,
                             std::vector<std::vector<running_error<B>>>& dY) {
  using R = running_error<B>;
  using std::abs;
  const std::size_t n = c.n, L = n - 1, K = c.w[0].size(), V = dS.size() / K;
  std::vector<std::vector<B>> M(n, std::vector<B>(K, B(0)));  // 𝒯ᵀ C, C_mi = ρ_Lm,i w_mi
  for (std::size_t m = 0; m < n; ++m)
    for (std::size_t i = 0; i < K; ++i) {
      const B carry_key = R(c.ratio(L, m, i) * c.w[m][i]).value();
      for (std::size_t t = 0; t <= m; ++t) M[t][i] += c.Tm[m][t].value() * carry_key;
    }
  std::vector<std::vector<R>> again(n, std::vector<R>(V, R(0)));  // 𝒯ᵀ dU_exact, as step 4 forms dY
  for (std::size_t t = 0; t < n; ++t)
    for (std::size_t m = 0; m <= t; ++m)
      for (std::size_t j = 0; j < V; ++j) again[m][j] += round_operand(c.Tm[t][m]) * round_operand(dU_exact[t][j]);
  for (std::size_t t = 0; t < n; ++t)
    for (std::size_t j = 0; j < V; ++j) {
      B reached(0);  // (|M| e)_tj
      for (std::size_t i = 0; i < K; ++i) reached += abs(M[t][i]) * dS[i * V + j].error();
      const B bound = again[t][j].error() + reached;
      if (bound < dY[t][j].error()) dY[t][j] = R(dY[t][j].value(), bound);
    }
}

/// (b): dA's bound (n x n, strictly lower) from `local` (the same products as dA from exact values) and
/// dY = 𝒯ᵀ dŨ; each entry keeps the smaller of this and its own. Plain scalars: nothing.
template <class T, class Chunk>
void bound_key_pair_cotangent(const Chunk&, const std::vector<std::vector<T>>&, const std::vector<std::vector<T>>&,
                              std::vector<std::vector<T>>&) {}

template <class B, class Chunk>
void bound_key_pair_cotangent(const Chunk& c, const std::vector<std::vector<running_error<B>>>& local,
                              const std::vector<std::vector<running_error<B>>>& dY,
                              std::vector<std::vector<running_error<B>>>& dA) {
  using R = running_error<B>;
  using std::abs;
  const std::size_t n = c.n, V = c.U[0].size();
  // |dY Ũᵀ| (values), every (a, j): the exact dA off the triangle too, for F's share.
  std::vector<std::vector<B>> full(n, std::vector<B>(n, B(0)));
  for (std::size_t a = 0; a < n; ++a)
    for (std::size_t j = 0; j < n; ++j) {
      B sum(0);
      for (std::size_t col = 0; col < V; ++col) sum += dY[a][col].value() * c.U[j][col].value();
      full[a][j] = abs(sum);
    }
  for (std::size_t t = 0; t < n; ++t)
    for (std::size_t j = 0; j < t; ++j) {
      B through_pseudo_values(0), through_inverse(0);
      for (std::size_t col = 0; col < V; ++col)
        through_pseudo_values +=
            // (Planted bug wy_adjoint_bound_drops_cotangent_error: dY's errors forgotten, as if dŨ were exact.)
            KALMAN_ORACLE_MUTANT(wy_adjoint_bound_drops_cotangent_error, dY[t][col].error() * abs(c.U[j][col].value()),
                                 B(0)) +
            abs(dY[t][col].value()) * c.U[j][col].error();
      for (std::size_t a = t + 1; a < n; ++a) through_inverse += c.inverse_residual[a][t].error() * full[a][j];
      const B bound = local[t][j].error() + through_pseudo_values + through_inverse;
      if (bound < dA[t][j].error()) dA[t][j] = R(dA[t][j].value(), bound);
    }
}

/// (c): dX's bound from dW_local (dW = −dŨ Sᵀ from exact values, its local roundings in its errors), dY
/// and S; each entry keeps the smaller of this and its own. Plain scalars: nothing.
template <class T, class Chunk>
void bound_key_cotangent(const Chunk&, const std::vector<std::vector<T>>&, const std::vector<std::vector<T>>&,
                         const std::vector<T>&, std::vector<std::vector<T>>&) {}

template <class B, class Chunk>
void bound_key_cotangent(const Chunk& c, const std::vector<std::vector<running_error<B>>>& dW_local,
                         const std::vector<std::vector<running_error<B>>>& dY, const std::vector<running_error<B>>& S,
                         std::vector<std::vector<running_error<B>>>& dX) {
  using R = running_error<B>;
  using std::abs;
  const std::size_t n = c.n, K = dX[0].size(), V = dY[0].size();
  for (std::size_t m = 0; m < n; ++m)
    for (std::size_t i = 0; i < K; ++i) {
      R local(0);  // 𝒯ᵀ dW from exact 𝒯, in the backward's order
      for (std::size_t t = m; t < n; ++t) local += round_operand(R(c.Tm[t][m].value())) * round_operand(dW_local[t][i]);
      B bound = local.error();
      for (std::size_t a = m + 1; a < n; ++a) bound += c.inverse_residual[a][m].error() * abs(dX[a][i].value());
      for (std::size_t j = 0; j < V; ++j)
        bound += dY[m][j].error() * abs(S[i * V + j].value()) + abs(dY[m][j].value()) * S[i * V + j].error();
      if (bound < dX[m][i].error()) dX[m][i] = R(dX[m][i].value(), bound);
    }
}

/// (d), log gates: the gates' cotangent d_gate (n x K, dg_s = Σ_{t≥s} dG_t) from `local` (the same sums
/// from exact dρ, dΓ, dΓ⁻) plus the propagated errors: dΓ_t's and dΓ⁻_t's (before the pairs' shares;
/// `inverse_weight_is_one` where dΓ⁻ holds log-gate cotangents, the unfactored chunk) for every s <= t,
/// dρ_tj's for j < s <= t. Each entry keeps the smaller of this and its own. Plain scalars: nothing.
template <class T, class Chunk>
void bound_log_gate_cotangent(const Chunk&, const std::vector<std::vector<std::vector<T>>>&,
                              const std::vector<std::vector<T>>&, const std::vector<std::vector<T>>&,
                              const std::vector<std::vector<T>>&, std::vector<std::vector<T>>&) {}

template <class B, class Chunk>
void bound_log_gate_cotangent(const Chunk& c, const std::vector<std::vector<std::vector<running_error<B>>>>& drho,
                              const std::vector<std::vector<running_error<B>>>& dG,
                              const std::vector<std::vector<running_error<B>>>& dGi,
                              const std::vector<std::vector<running_error<B>>>& local,
                              std::vector<std::vector<running_error<B>>>& d_gate) {
  using R = running_error<B>;
  using std::abs;
  const std::size_t n = c.n, K = d_gate.empty() ? 0 : d_gate[0].size();
  std::vector<std::vector<B>> before(n, std::vector<B>(n + 1, B(0)));  // before[t][s] = Σ_{j<s} err(dρ_tj) ρ_tj
  for (std::size_t i = 0; i < K; ++i) {
    for (std::size_t t = 0; t < n; ++t)
      for (std::size_t s = 0; s < t; ++s)
        before[t][s + 1] = before[t][s] + drho[t][s][i].error() * abs(R(c.ratio(t, s, i)).value());
    B direct(0);  // Σ_{t≥s} of dΓ_t's and dΓ⁻_t's errors, as step 8 weighs them
    for (std::size_t s = n; s-- > 0;) {
      const B inverse_weight = c.factored ? abs(c.gamma_inv[s][i].value()) : B(1);
      direct += dG[s][i].error() * abs(c.gamma[s][i].value()) + dGi[s][i].error() * inverse_weight;
      B pairs(0);
      for (std::size_t t = s; t < n; ++t) pairs += before[t][std::min(s, t)];
      const B bound = local[s][i].error() + direct + pairs;
      if (bound < d_gate[s][i].error()) d_gate[s][i] = R(d_gate[s][i].value(), bound);
    }
  }
}

}  // namespace kalman_oracle
