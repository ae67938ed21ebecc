// Error bounds for scalar affine recursions x_t = α_t x_{t−1} + ρ_t (KLA's information mean,
// docs/math.md §8 fact 5) computed by the sequential recursion or by a prefix scan of the affine maps
// (α, ρ), compose(later, earlier) = (α_L α_E, α_L ρ_E + ρ_L), whose coefficients α_t are themselves
// computed with a relative error (docs/error-model.md, "KLA: the information mean and y").
//
// Absolute errors, tracked node by node along each covered schedule's own tree: for a node with exact
// map (A, R) over its segment and R^abs = Σ |ρ_s| Π_{later r in the segment} α_r (so |R| <= R^abs),
// dA >= |Â − A| and dR >= |R̂ − R|. With the rounding model fl(x) = x(1 + δ) + η, |δ| <= u, |η| <= η₀
// (η = 0 for additions), and |fl(x) − e| <= |x − e|(1 + u) + u|e| + η₀ for an exact e:
//   Â_N = fl(Â_L Â_E):              dA_N = (dA_L (A_E + dA_E) + A_L dA_E)(1 + u) + u A_L A_E + η₀
//   R̂_N = fl(fl(Â_L R̂_E) + R̂_L):  q = (dA_L (R^abs_E + dR_E) + A_L dR_E)(1 + u) + u A_L R^abs_E + η₀,
//                                    dR_N = (q + dR_L)(1 + u) + u R^abs_N.
// Leaves: dA = α expm1(a) + η₀ (a the log-error bound of the computed α), dR = γ₂|ρ| + η₀(1 + (1 + u)|k|)
// for ρ = fl(fl(v Λ) k). Applying the prefix to x₀: fl(fl(Â x₀) + R̂) errs at most
// ((dA|x₀|(1 + u) + u A|x₀| + η₀) + dR)(1 + u) + u(A|x₀| + R^abs) (0 for the product when x₀ = 0).
// Every quantity is a sum of products of non-negative numbers, evaluated in binary64 with the exact
// A and R^abs floored at 2^-900 (an upper bound where binary64 would underflow) and the result
// inflated by bound_inflation (contraction_bound.hpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <span>
#include <vector>

#include "kalman_oracle/check/contraction_bound.hpp"
#include "kalman_oracle/detail/mutant.hpp"

namespace kalman_oracle::check {

/// One node of an affine scan: the exact map's A and R^abs, and the computed map's error bounds.
struct affine_error {
  double A = 1, R_abs = 0, dA = 0, dR = 0;
};

inline constexpr double affine_floor = 0x1p-900;

/// compose(later, earlier) of the bounds above; u and η₀ of the arithmetic.
struct affine_error_monoid {
  using value_type = affine_error;
  double u = 0x1p-24, underflow = 0x1p-150;
  value_type identity() const { return {}; }
  value_type compose(const value_type& l, const value_type& e) const {
    value_type n;
    n.A = std::max(l.A * e.A, affine_floor);
    n.R_abs = std::max(l.A * e.R_abs + l.R_abs, e.R_abs == 0 && l.R_abs == 0 ? 0.0 : affine_floor);
    n.dA = (l.dA * (e.A + e.dA) + l.A * e.dA) * (1 + u) + u * l.A * e.A + underflow;
    const double carried = KALMAN_ORACLE_MUTANT(affine_bound_drops_coefficient_error, l.dA * (e.R_abs + e.dR), 0.0);
    const double q = (carried + l.A * e.dR) * (1 + u) + u * l.A * e.R_abs + underflow;
    n.dR = (q + l.dR) * (1 + u) + u * n.R_abs;
    return n;
  }
};

/// The application's error bound: fl(fl(Â x₀) + R̂) against A x₀ + R.
inline double affine_apply_error(const affine_error& p, double x0_abs, double u, double underflow) {
  const double product = x0_abs == 0 ? 0.0 : p.dA * x0_abs * (1 + u) + u * p.A * x0_abs + underflow;
  return (product + p.dR) * (1 + u) + u * (p.A * x0_abs + p.R_abs);
}

/// Per token, the error bound of x̂_t computed by one covered scan of the affine leaves, applied to x₀.
inline std::vector<double> affine_scan_bound(std::span<const affine_error> leaves, double x0_abs,
                                             const covered_scan& scan, double u, double underflow) {
  const affine_error_monoid monoid{u, underflow};
  const auto prefixes = scan.tiled ? tiled_inclusive_scan(monoid, leaves, *scan.tiled)
                                   : inclusive_scan(scan.schedule, monoid, leaves,
                                                    scan.chunk == 0 ? default_scan_chunk_size : scan.chunk);
  std::vector<double> bound(leaves.size());
  for (std::size_t t = 0; t < leaves.size(); ++t)
    bound[t] = affine_apply_error(prefixes[t], x0_abs, u, underflow) * bound_inflation;
  return bound;
}

}  // namespace kalman_oracle::check
