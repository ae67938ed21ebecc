// The KDN covariance leaf along the exact trajectory (docs/error-model.md, "KDN covariances: the
// trajectory-local bound"): how far the exact leaf moves a point, and how far the computed leaf's
// action, or the sequential step, errs, for points within a log-ball of radius ρ around the
// trajectory point x the leaf reads. Both KDNs' covariance leaves are M = [[a, ω], [u a, 1 + u ω]]
// (isotropic: a = mean α², u = μ‖k‖²/(K r); diagonal: a = α_i², u = μ k_i²/r), whose action is
//
//     f(x) = g(u, Y),   Y = a x + ω,   g(v, y) = y / (1 + v y) = 1 / (v + 1/y).
//
// Lipschitz factor: d ln f / d ln x = w_a(x) / (1 + u Y(x)) with w_a = a x / Y, increasing in x,
// and 1/(1 + uY) decreasing, so over the ball [x e^−ρ, x e^ρ] it is at most
// w_a(x e^ρ) / (1 + u Y(x e^−ρ)) (an exact map moves a point within ρ of x by at most this times
// the distance: the mean value theorem in log coordinates; machine-checked: proofs/KdnLeafLocal.v,
// kdn_leaf_local_lipschitz).
//
// Action error: a computed leaf has â = a e^α, û = u e^μ (|α| <= A, |μ| <= U roundings, the counts of
// the leaf's formation), ĉ = fl(û â) and d̂ = fl(1 + fl(û ω)): ĉ y + d̂ is the sum of û â y, û ω and 1,
// each within two roundings, so it is within e^{±2η} of 1 + û ŷ with ŷ = â y + ω, and the computed
// action ŷ/(ĉ y + d̂) is within 2η of g(û, ŷ). ŷ is within A' = W(w_a(y), A) of Y (W the affine
// weight, contraction_bound.hpp's affine_log_error). g increases in y and decreases in v, and
// ln g = −ln(v + 1/y): with s = uY/(1 + uY) the weight of v,
//
//     ln g(u e^∓U, Y e^±A') − ln g(u, Y) = −ln(s e^∓U + (1 − s) e^∓A'),
//
// both at most ln(s e^U + (1 − s) e^A') (the downward one is this; for the upward one,
// (s e^−U + (1 − s) e^−A')(s e^U + (1 − s) e^A') >= 1 by Cauchy–Schwarz). So the action is within
// ln(s e^U + (1 − s) e^A') + 2η of f(y) (machine-checked at every point: proofs/KdnLeafLocal.v,
// kdn_leaf_local_action): at most max(U, A) + 2η, against twice the largest entry count for the
// entry-wise count (act_perturbed). The sequential step b̂ = fl(fl(â x) + ω), b = fl(b̂/fl(1 + fl(û b̂)))
// is the same with ŷ within W(w_a, A + η) + η of Y, the denominator within 2η and the quotient η:
// ln(s e^U + (1 − s) e^{W(w_a, A + η) + η}) + 3η (machine-checked at every point: proofs/KdnLeafLocal.v,
// kdn_step_local).
// Over the ball: A' increases with w_a (take w_a at the top), and ln(s e^U + (1 − s) e^A') is monotone
// in s, which increases with y: the larger of the ball's two ends (machine-checked:
// proofs/KdnLeafLocal.v, kdn_leaf_local_action_ball, kdn_step_local_ball).
//
// The bounds are evaluated in binary64 from the exact values rounded to nearest and inflated by
// 1 + 2^-40 (a few dozen operations of relative error 2^-53 on positive terms).
#pragma once

#include <algorithm>
#include <cmath>
#include <span>
#include <vector>

#include "kalman_oracle/check/contraction_bound.hpp"
#include "kalman_oracle/detail/mutant.hpp"

namespace kalman_oracle::check {

/// One covariance leaf on the exact trajectory: its parameters and the exact point it reads.
struct kdn_trajectory_leaf {
  double a = 1, omega = 0, u = 0;
  double x = 0;  ///< the exact covariance before the leaf (the prior at the first token)
};

/// The leaf's formation counts: â within A, û within U (log units), one rounding η.
struct kdn_leaf_counts {
  double A = 0, U = 0, eta = 0;
};

inline constexpr double local_bound_inflation = 1 + 0x1p-40;

namespace detail::kdn_local {

/// w_a = a x/(a x + ω) at x (1 where the point and the noise vanish: the worst weight).
inline double affine_weight(const kdn_trajectory_leaf& l, double x) {
  const double ax = l.a * x, y = ax + l.omega;
  return y > 0 ? std::min(1.0, ax / y) : 1.0;
}

/// s = uY/(1 + uY), the weight of u in ln(u + 1/Y), at x.
inline double gain_weight(const kdn_trajectory_leaf& l, double x) {
  const double uy = l.u * (l.a * x + l.omega);
  return uy / (1 + uy);
}

/// ln(s e^U + (1 − s) e^E), the larger at the ball's two ends s_lo, s_hi. U and E are a few hundred
/// roundings at most, so the logarithm's argument is 1 + O(10⁻⁵): as log1p of s expm1(U) + (1 − s)
/// expm1(E), which keeps the relative accuracy the inflation assumes (log of the sum would lose 10⁻¹⁰).
inline double mixed_log_error(double s_lo, double s_hi, double U, double E) {
  const auto at = [&](double s) { return std::log1p(s * std::expm1(U) + (1 - s) * std::expm1(E)); };
  return std::max(at(s_lo), at(s_hi));
}

}  // namespace detail::kdn_local

/// The exact leaf's log-Lipschitz factor over the ball of radius ρ around l.x (at most 1).
inline double kdn_leaf_local_lipschitz(const kdn_trajectory_leaf& l, double rho) {
  using namespace detail::kdn_local;
  const double hi = l.x * std::exp(rho), lo = l.x * std::exp(-rho);
  // The planted bug of the meta-test kdn_local_lipschitz_at_centre: the ball ignored.
  const double w = KALMAN_ORACLE_MUTANT(kdn_local_lipschitz_at_centre, affine_weight(l, hi), affine_weight(l, l.x));
  const double shrink = 1 + l.u * (l.a * KALMAN_ORACLE_MUTANT(kdn_local_lipschitz_at_centre, lo, l.x) + l.omega);
  return std::min(1.0, w / shrink * local_bound_inflation);
}

/// The computed leaf's action error (log units) at any point of the ball of radius ρ around l.x.
inline double kdn_leaf_local_action_error(const kdn_trajectory_leaf& l, double rho, const kdn_leaf_counts& c) {
  using namespace detail::kdn_local;
  const double hi = l.x * std::exp(rho), lo = l.x * std::exp(-rho);
  const double a_error = affine_log_error(affine_weight(l, hi), c.A);
  // The planted bug of the meta-test kdn_local_action_drops_gain: u's error ignored.
  const double U = KALMAN_ORACLE_MUTANT(kdn_local_action_drops_gain, c.U, 0.0);
  return (mixed_log_error(gain_weight(l, lo), gain_weight(l, hi), U, a_error) + 2 * c.eta) * local_bound_inflation;
}

/// The sequential step's error (log units) from any computed point in the ball of radius ρ around l.x.
inline double kdn_step_local_error(const kdn_trajectory_leaf& l, double rho, const kdn_leaf_counts& c) {
  using namespace detail::kdn_local;
  const double hi = l.x * std::exp(rho), lo = l.x * std::exp(-rho);
  const double y_error = affine_log_error(affine_weight(l, hi), c.A + c.eta) + c.eta;
  return (mixed_log_error(gain_weight(l, lo), gain_weight(l, hi), c.U, y_error) + 3 * c.eta) * local_bound_inflation;
}

/// A lane's trajectory-local factors (contraction_bound.hpp's trajectory_lane_log_bound): for a radius
/// ρ, each leaf's Lipschitz factor, action error and step error over the ball around the point it reads.
inline trajectory_factors kdn_trajectory_factors(std::vector<kdn_trajectory_leaf> path, kdn_leaf_counts counts) {
  return [path = std::move(path), counts](double rho) {
    lane_leaf_factors f{std::vector<double>(path.size()), std::vector<double>(path.size()),
                        std::vector<double>(path.size())};
    for (std::size_t t = 0; t < path.size(); ++t) {
      f.tau[t] = kdn_leaf_local_lipschitz(path[t], rho);
      f.leaf_error[t] = kdn_leaf_local_action_error(path[t], rho, counts);
      f.step_error[t] = kdn_step_local_error(path[t], rho, counts);
    }
    return f;
  };
}

}  // namespace kalman_oracle::check
