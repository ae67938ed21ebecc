// The chunked WY form's first-order error bound carried norm-wise from chunk to chunk
// (docs/error-model.md, "Tensor-core tiers"): the hook through which the chunked form
// (models/fixed_gain_chunked.hpp) reports each chunk to a scalar type that carries an error bound.
//
// Why. Over running_error the chunked form's bound propagates the chunk-start state's errors entry
// by entry through the chunk's products (Ũ = U − W S, the carry Γ S + Σ ρ w ũᵀ), which for the delta
// rules amounts to |I − r w eᵀ| entrywise, step after step: without decay it grows with T (DeltaNet
// at T = 1000: a budget above the scale, UNVERIFIED), although each exact step is non-expansive in
// the 2-norm. What the chunk does to the error of its start state S is linear and exact:
//     S' = P S + (terms free of S),   o_t = (P_t S)ᵀ τ q_t + (terms free of S),
// P_t = A_t ⋯ A_0 the exact transition to just after local token t, A_s = (I − r_s w_s e_sᵀ) D_s.
// So to first order the errors after the chunk are its local errors ℓ (the chunk recomputed from the
// exact values of S: operand roundings of S included) plus P ε or (P_t ε)ᵀ τ q_t, ε the error of S,
// column by column. With N_j a bound on ‖ε_j‖₂ (column j of S) and ‖P_t‖₂ <= Π_{s<=t} ‖A_s‖₂ <=
// Π_{s<=t} ‖I − r_s w_s e_sᵀ‖₂ =: m_t (decays in [0, 1]):
//     err(o_tj) <= err(ℓ_o)_tj + m_t ‖τ q_t‖₂ N_j,    err(S'_ij) <= err(ℓ_S)_ij + m_{n−1} N_j,
//     N_j ← m_{n−1} N_j + ‖err(ℓ_S)_j‖₂.
// For the β-form rules with β‖k‖² ∈ [0, 2] every m is 1: the errors add chunk by chunk instead of
// compounding. It is used only where asked (normwise_chunk_bound_scope): every term is a sum of
// non-negative multiples and 2-norms of the local errors, which are affine in the operand format's
// u_op, so the bound is convex in u_op and the tiers' interpolation between the bound without and
// with bfloat16 operands over-covers the formats in between (tensor_core_tier.cpp keeps, element by
// element, the smaller of this and the entrywise bound, each so interpolated).
#pragma once

#include <cmath>
#include <cstddef>
#include <utility>
#include <vector>

#include "kalman_oracle/algebra/rank_one_update_norm.hpp"
#include "kalman_oracle/detail/mutant.hpp"

namespace kalman_oracle {

template <class B>
class running_error;  // scalar/running_error.hpp

namespace detail::fixed_gain {
/// This thread's choice (normwise_chunk_bound_scope): carry the chunked form's running error bound
/// norm-wise from chunk to chunk (true) or entry by entry, by the running error's own rules.
inline thread_local bool normwise_chunk_bound = false;
}  // namespace detail::fixed_gain

/// Carries the chunked WY form's running error bound norm-wise from chunk to chunk for its lifetime.
class normwise_chunk_bound_scope {
 public:
  normwise_chunk_bound_scope() : previous_(detail::fixed_gain::normwise_chunk_bound) {
    detail::fixed_gain::normwise_chunk_bound = true;
  }
  ~normwise_chunk_bound_scope() { detail::fixed_gain::normwise_chunk_bound = previous_; }
  normwise_chunk_bound_scope(const normwise_chunk_bound_scope&) = delete;
  normwise_chunk_bound_scope& operator=(const normwise_chunk_bound_scope&) = delete;

 private:
  bool previous_;
};

/// The hook (one object per (batch, head)): chunk() is told that the chunk `c` of a rule that erases
/// (`erases`: all but GLA) from state `before` produced the output rows `outputs` (n x V) and the
/// state `after` (K x V, row-major);
/// `recompute(from)` runs the same chunk from another start state and returns both. Plain scalars
/// carry no bound: nothing to do.
template <class T>
struct wy_chunk_error_bound {
  static constexpr bool carries_bound = false;
  template <class Chunk, class Recompute>
  void chunk(const Chunk&, bool, const std::vector<T>&, std::vector<std::vector<T>>&, std::vector<T>&, Recompute&&) {}
};

template <class B>
struct wy_chunk_error_bound<running_error<B>> {
  static constexpr bool carries_bound = true;
  using R = running_error<B>;
  std::vector<B> column_norm;  ///< N_j; empty before the first chunk (then ‖err(before)_j‖₂)

  template <class Chunk, class Recompute>
  void chunk(const Chunk& c, bool erases, const std::vector<R>& before, std::vector<std::vector<R>>& outputs,
             std::vector<R>& after, Recompute&& recompute) {
    using std::sqrt;
    if (!detail::fixed_gain::normwise_chunk_bound || c.n == 0) return;
    const std::size_t K = c.w[0].size(), V = before.size() / K;
    if (column_norm.empty()) {
      column_norm.assign(V, B(0));
      for (std::size_t j = 0; j < V; ++j) {
        B sum(0);
        for (std::size_t i = 0; i < K; ++i) sum += before[i * V + j].error() * before[i * V + j].error();
        column_norm[j] = sqrt(sum);
      }
    }
    std::vector<R> exact_before(before.size());
    for (std::size_t x = 0; x < before.size(); ++x) exact_before[x] = R(before[x].value());
    const auto [local_outputs, local_after] = recompute(exact_before);

    B transition(1);  // m_t
    for (std::size_t t = 0; t < c.n; ++t) {
      if (erases) transition = transition * step_norm(c, t);
      B query(0);
      for (const R& x : c.sq[t]) query += x.value() * x.value();
      const B reach = transition * sqrt(query);
      for (std::size_t j = 0; j < V; ++j)
        outputs[t][j] = R(outputs[t][j].value(), local_outputs[t][j].error() + reach * column_norm[j]);
    }
    for (std::size_t j = 0; j < V; ++j) {
      // (Planted bug wy_chunk_bound_drops_carried: the error carried into the chunk forgotten.)
      const B carried = KALMAN_ORACLE_MUTANT(wy_chunk_bound_drops_carried, B(transition * column_norm[j]), B(0));
      B local_norm(0);
      for (std::size_t i = 0; i < K; ++i) {
        const B& l = local_after[i * V + j].error();
        after[i * V + j] = R(after[i * V + j].value(), l + carried);
        local_norm += l * l;
      }
      column_norm[j] = carried + sqrt(local_norm);
    }
  }

  /// ‖I − r_t w_t e_tᵀ‖₂ at the exact values (the decay's factor, at most 1, is left out; GLA, which
  /// does not erase, has 1).
  template <class Chunk>
  static B step_norm(const Chunk& c, std::size_t t) {
    B s(0), ww(0), ee(0);
    const B& r = c.r[t].value();
    for (std::size_t i = 0; i < c.w[t].size(); ++i) {
      const B w = r * c.w[t][i].value(), e = c.e[t][i].value();
      s += w * e, ww += w * w, ee += e * e;
    }
    return rank_one_update_norm(s, ww, ee);
  }
};

}  // namespace kalman_oracle
