// The spectral norm of a rank-one update of the identity, ‖I − w eᵀ‖₂: the delta step's operator on
// each value column (docs/math.md §7; docs/error-model.md, "Gradients: first-order running error" and
// "Tensor-core tiers"), which the error bounds of the memories use to carry errors norm-wise.
#pragma once

#include <cmath>

namespace kalman_oracle {

/// ‖I − w eᵀ‖₂ from s = eᵀw, ww = ‖w‖², ee = ‖e‖²: the identity on the complement of span{w, e},
/// and on that plane the two singular values with σ₁² + σ₂² = Σ = 2 − 2s + ww·ee and σ₁σ₂ = |1 − s|
/// (the determinant), so ‖·‖₂² = (Σ + √(Σ² − 4(1 − s)²)) / 2. For the β-form rules (w = βk, e = k)
/// it is max(1, |1 − β‖k‖²|): 1 when β‖k‖² ∈ [0, 2]. Returned as at least 1 (the complement's singular
/// value; in one dimension, where there is no complement, an upper bound).
template <class B>
B rank_one_update_norm(const B& s, const B& ww, const B& ee) {
  using std::sqrt;
  const B sigma = B(2) - 2 * s + ww * ee, one_minus_s = B(1) - s;
  B disc = sigma * sigma - 4 * one_minus_s * one_minus_s;
  if (disc < 0) disc = B(0);
  const B norm_squared = (sigma + sqrt(disc)) / 2;
  return norm_squared > 1 ? B(sqrt(norm_squared)) : B(1);
}

}  // namespace kalman_oracle
