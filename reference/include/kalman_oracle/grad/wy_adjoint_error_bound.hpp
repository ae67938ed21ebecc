// The chunked adjoint's first-order error bound with the state cotangent dS carried norm-wise from chunk
// to chunk (docs/error-model.md, "The chunked binary32 tier", Gradients): the adjoint's counterpart of
// models/wy_chunk_error_bound.hpp, through which grad/fixed_gain_chunked.hpp reports each chunk's reverse.
//
// Why. Over running_error the chunked backward propagates the errors of dS' (the cotangent of a chunk's
// end state) entry by entry through the chunk's reverse, |Pᵀ| entrywise, chunk after chunk: without
// decay the bound on dS grows with T (DeltaNet at T = 1000: gradient budgets above the scale,
// UNVERIFIED). What the reverse of a chunk does to dS' is linear and exact: the chunked backward equals
// the sequential adjoint over exact arithmetic, whose step is dS_{t−1} = A_tᵀ dS_t + (terms of do_t),
// A_t = (I − r_t w_t e_tᵀ) D_t, so
//     dS_prev = Pᵀ dS' + (terms free of dS'),   P = A_{n−1} ⋯ A_0 (the forward's chunk transition).
// With ε the error of dS' and N_j a bound on ‖ε_j‖₂ (column j; Pᵀ acts on each value column alike),
// ‖Pᵀ ε_j‖₂ <= m N_j, m = Π_s ‖I − r_s w_s e_sᵀ‖₂ (decays in [0, 1]; 1 for the β-form rules with
// β‖k‖² ∈ [0, 2]), so to first order
//     err(dS_prev_ij) <= err(ℓ)_ij + m N_j,   N_j ← m N_j + ‖err(ℓ)_j‖₂,
// ℓ the chunk's reverse from the exact values of dS' (its local errors). The chunk's other gradients
// take ε through the chunk's products entry by entry, with |ε_ij| <= N_j: the reverse is run with each
// entry of dS' carrying the smaller of N_j and its own bound. Every entry keeps the smaller of the
// norm-wise bound above and the entrywise one (both bound the same error), so this is never looser than
// carrying dS entry by entry. Used only where asked (normwise_chunk_bound_scope, the same scope
// as the forward's norm-wise carry); tensor_core_tier.cpp keeps, element by element, the smaller of
// this bound and the entrywise one.
#pragma once

#include <cstddef>
#include <vector>

#include "kalman_oracle/detail/mutant.hpp"
#include "kalman_oracle/models/wy_chunk_error_bound.hpp"

namespace kalman_oracle {

/// The hook (one object per (batch, head)): chunk(c, erases, dS, reverse) returns the cotangent of the
/// chunk's start state, `reverse(dS, write)` running the chunk's reverse from an end-state cotangent
/// (writing the chunk's gradients where `write`) and returning it. Plain scalars run it once.
template <class T>
struct wy_adjoint_error_bound {
  template <class Chunk, class Reverse>
  std::vector<T> chunk(const Chunk&, bool, const std::vector<T>& dS, Reverse&& reverse) {
    return reverse(dS, true);
  }
};

template <class B>
struct wy_adjoint_error_bound<running_error<B>> {
  using R = running_error<B>;
  std::vector<B> column_norm;  ///< N_j; empty before the first chunk (then ‖err(dS_T)_j‖₂)

  template <class Chunk, class Reverse>
  std::vector<R> chunk(const Chunk& c, bool erases, const std::vector<R>& dS, Reverse&& reverse) {
    using std::min;
    using std::sqrt;
    if (!detail::fixed_gain::normwise_chunk_bound || c.n == 0) return reverse(dS, true);
    const std::size_t K = c.w[0].size(), V = dS.size() / K;
    if (column_norm.empty()) {
      column_norm.assign(V, B(0));
      for (std::size_t j = 0; j < V; ++j) {
        B sum(0);
        for (std::size_t i = 0; i < K; ++i) sum += dS[i * V + j].error() * dS[i * V + j].error();
        column_norm[j] = sqrt(sum);
      }
    }
    // The chunk's gradients: dS' with every entry's error at most N_j (and at most its own bound).
    std::vector<R> bounded(dS.size()), exact(dS.size());
    for (std::size_t i = 0; i < K; ++i)
      for (std::size_t j = 0; j < V; ++j) {
        bounded[i * V + j] = R(dS[i * V + j].value(), min(dS[i * V + j].error(), column_norm[j]));
        exact[i * V + j] = R(dS[i * V + j].value());
      }
    std::vector<R> previous = reverse(bounded, true);  // its dS_prev: carried entry by entry
    // dS_prev norm-wise: its local errors, from the exact values of dS', plus Pᵀ's share of the carried
    // ones; per entry the smaller of the two bounds, and N_j the smaller of the two column bounds.
    const std::vector<R> local = reverse(exact, false);
    B transition(1);  // m
    if (erases)
      for (std::size_t t = 0; t < c.n; ++t) transition = transition * wy_chunk_error_bound<R>::step_norm(c, t);
    for (std::size_t j = 0; j < V; ++j) {
      // (Planted bug wy_adjoint_bound_drops_carried: the error carried into the chunk's reverse forgotten.)
      const B carried = KALMAN_ORACLE_MUTANT(wy_adjoint_bound_drops_carried, B(transition * column_norm[j]), B(0));
      B local_norm(0), kept_norm(0);
      for (std::size_t i = 0; i < K; ++i) {
        const B& l = local[i * V + j].error();
        const B kept = min(previous[i * V + j].error(), B(l + carried));
        previous[i * V + j] = R(previous[i * V + j].value(), kept);
        local_norm += l * l;
        kept_norm += kept * kept;
      }
      column_norm[j] = min(B(carried + sqrt(local_norm)), B(sqrt(kept_norm)));
    }
    return previous;
  }
};

}  // namespace kalman_oracle
