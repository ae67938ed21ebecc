// Contraction-aware error bounds for scalar recursions driven by non-negative Möbius leaves (KLA's
// precision, the KDN covariances: docs/math.md §8 fact 4; docs/error-model.md, "Möbius recursions:
// contraction bounds"), per element and per token, for the sequential recursion and for the Möbius
// prefix scans kernels use, schedule by schedule.
//
// Errors are measured in log units: E(x̂) = |ln x̂ − ln x|; one rounding (1 + δ), |δ| <= u, costs at
// most η = −ln(1 − u) (proofs/Birkhoff.v, ln_one_plus_delta). The facts (proofs/Birkhoff.v):
//   * a leaf [[a, b], [c, d]] with a, d > 0 and b, c >= 0 acts τ-Lipschitz in log,
//     τ = |ad − bc| / (√(ad) + √(bc))² (birkhoff_log_lipschitz); the KLA and KDN covariance leaves
//     have τ = (√(1 + z) − √z)², z = p̄φ or uω (kla_leaf_tau, kdn_leaf_tau); exact compositions
//     are Π τ-Lipschitz (lipschitz_compose);
//   * a matrix whose entries are within e^{±k} of a non-negative M acts within 2k of M's action
//     (act_perturbed), and a common positive factor changes no action (act_rescale);
//   * a computed product node N = fl(L̂ R̂) satisfies E(N) <= E(L) + τ(L) E(R) + δ_N (node_error),
//     so a scan's computed prefix is within tree_bound of the exact one (tree_error); the
//     sequential recursion x̂_t = f̂_t(x̂_{t−1}) satisfies E_t <= τ_t E_{t−1} + δ_t (sequential_error).
// So errors made early are forgotten at the rate of the leaves' τ: a constant bound in T where
// the leaves contract (z > 0), the linear count where they do not (z = 0: τ = 1).
//
// The bounds are evaluated in binary64 on non-negative terms and inflated by 1 + 2^-30, which
// covers their own rounding for up to 2^20 tokens (each bound is a sum of products along at most
// 3T + 60 operations of relative error 2^-53).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <functional>
#include <limits>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "kalman_oracle/detail/mutant.hpp"
#include "kalman_oracle/scan/schedules.hpp"
#include "kalman_oracle/scan/tiled.hpp"

namespace kalman_oracle::check {

/// η = −ln(1 − u), rounded up: the log error of one rounding of unit roundoff u.
inline double log_rounding(double u) { return -std::log1p(-u) * (1 + 0x1p-50); }

/// The evaluation's own rounding (see the top): every bound is multiplied by this.
inline constexpr double bound_inflation = 1 + 0x1p-30;
inline constexpr std::size_t longest_bounded_sequence = std::size_t{1} << 20;

/// How far c + d x (c > 0, d >= 0, x > 0) moves in log when x moves by a factor within e^{±E}, given
/// its weight w = d x / (c + d x) ∈ [0, 1] (the log-derivative in x along the exact trajectory):
/// c + d x is increasing in x, so the move is largest at x e^{±E}: ln(1 + w(e^E − 1)) upward,
/// −ln(1 − w(1 − e^{−E})) downward, and the first is the larger ((1 + wa)(1 − wb) = 1 + w(1 − w)ab
/// >= 1 for a = e^E − 1, b = 1 − e^{−E}, since a − b = ab). At most E (w = 1), 0 where d = 0
/// (machine-checked: proofs/AffineLogWeight.v, affine_log_weight). The bounds use it where a value
/// reads an earlier computed one through such a map: KLA's den = ā² + p̄λ (kla_bound.hpp), the KDNs'
/// predictions a p + ω, their gains' denominators r + Σ p̂ k² and the isotropic gain b̂/(r + b̂N) =
/// 1/(N + r/b̂) (docs/error-model.md). Inflated for its own binary64 evaluation (w rounded up by the
/// caller).
inline double affine_log_error(double w, double E) {
  // The planted bug of the meta-test log_weight_ignores_error: the earlier value's error dropped.
  return KALMAN_ORACLE_MUTANT(log_weight_ignores_error,
                              std::min(E, std::log1p(std::min(w, 1.0) * std::expm1(E)) * bound_inflation), 0.0);
}

/// A 2×2 non-negative matrix normalised to max entry 1, in binary64: enough to tell whether the
/// exact product of a scan node, rescaled as a kernel rescales it, keeps binary32 away from
/// underflow and overflow (see normalised_in_range).
struct normalised_product {
  double a = 1, b = 0, c = 0, d = 1;
  /// max entry / trace: a trace rescale leaves the entries this many times larger than a max-entry
  /// one (infinite when the trace is 0).
  double max_over_trace = 1;
};

/// The bound of one node of a scan: τ (the exact map's Lipschitz constant in log, at most the
/// product of its leaves'), err (sup over x > 0 of the log error of its computed action), and
/// the node's exact product normalised, with whether every product so far stayed in range.
struct log_error {
  double tau = 1, err = 0;
  /// The largest error of any point the node's evaluation passes through, read from an exact input
  /// (docs/error-model.md, "the trajectory-local bound": the computed product acts as the leaves
  /// applied one by one, each compose's rounding a perturbation at the end of its segment); at least err.
  double peak = 0;
  normalised_product product;
  bool in_range = true;
};

inline double smallest_nonzero(const normalised_product& p) {
  double m = 1;
  for (double x : {p.a, p.b, p.c, p.d})
    if (x != 0) m = std::min(m, x);
  return m;
}

/// Binary32 stays in its normal range under each of the three rescalings: every non-zero entry
/// rescaled by its max entry (or a power of two: within a factor 2 of it) or by its trace lies in
/// [2^-100, 2^50]. (Exact zeros stay exactly zero.)
inline bool normalised_in_range(const normalised_product& p) {
  const double lo = 0x1p-100, hi = 0x1p50;
  const double smallest = smallest_nonzero(p);
  return smallest >= lo && p.max_over_trace <= hi && smallest * std::min(p.max_over_trace, 1.0) >= lo;
}

/// The products of a compose: every non-zero term l_ij r_jk of two rescaled factors at least 2^-120
/// (products of max-rescaled factors, and of trace-rescaled ones).
inline bool compose_in_range(const normalised_product& l, const normalised_product& r) {
  const double scale = std::min(1.0, l.max_over_trace) * std::min(1.0, r.max_over_trace);
  for (double x : {l.a * r.a, l.b * r.c, l.a * r.b, l.b * r.d, l.c * r.a, l.d * r.c, l.c * r.b, l.d * r.d})
    if (x != 0 && x * scale < 0x1p-120) return false;
  return true;
}

inline normalised_product normalise(double a, double b, double c, double d) {
  const double m = std::max(std::max(a, b), std::max(c, d));
  if (m <= 0) return {a, b, c, d, 1};
  const double trace = a + d;
  return {a / m, b / m, c / m, d / m, trace > 0 ? m / trace : std::numeric_limits<double>::infinity()};
}

/// A scan monoid over node bounds: compose(later, earlier) = E(L) + τ(L) E(R) + δ_N
/// (proofs/Birkhoff.v, node_error), with L the later segment (applied last).
struct log_error_monoid {
  using value_type = log_error;
  double node_rounding = 0;  ///< δ_N: one compose's rounding, log units
  value_type identity() const { return {}; }
  value_type compose(const value_type& later, const value_type& earlier) const {
    const normalised_product& l = later.product;
    const normalised_product& r = earlier.product;
    value_type n;
    n.tau = later.tau * earlier.tau;
    n.err =
        later.err + KALMAN_ORACLE_MUTANT(contraction_bound_drops_child, later.tau * earlier.err, 0.0) + node_rounding;
    // The points inside the later segment start from the earlier one's output, within earlier.err;
    // exact maps move errors by at most their Lipschitz factor, at most 1 (proofs/TreeLocal.v, tree_peak).
    n.peak = std::max({earlier.peak, later.peak + earlier.err, n.err});
    n.product = normalise(l.a * r.a + l.b * r.c, l.a * r.b + l.b * r.d, l.c * r.a + l.d * r.c, l.c * r.b + l.d * r.d);
    n.in_range = later.in_range && earlier.in_range && compose_in_range(l, r) && normalised_in_range(n.product);
    return n;
  }
};

/// Roundings of one model's recursion, in log units (multiples of η).
struct mobius_recursion_rounding {
  double leaf = 0;   ///< a computed leaf's action: 2k for entries within k roundings (act_perturbed)
  double node = 0;   ///< one compose of a scan: 2 roundings per entry, 3 with a trace/max-entry rescale: 2 × 3
                     ///< (proofs/TreeRounding.v: 4η; proofs/TreeRescale.v: 6η)
  double apply = 0;  ///< the prefix applied to x_0: numerator 2, denominator 2, quotient 1
  double step = 0;   ///< one step of the sequential recursion x_t = f_t(x_{t−1})
};

/// One leaf of a lane: its τ (rounded up) and its exact matrix (for the range check).
struct bounded_leaf {
  double tau = 1;
  double a = 1, b = 0, c = 0, d = 1;
};

/// The orders the bound covers: the sequential recursion, and the inclusive Möbius scan by each of
/// these schedules (docs/error-model.md lists them; a kernel with another tree is not covered).
struct covered_scan {
  std::string name;
  scan_schedule schedule = scan_schedule::sequential;
  std::size_t chunk = 0;              // chunked schedule
  std::optional<tiled_policy> tiled;  // the GPU kernels' block scans
};

inline const std::vector<covered_scan>& covered_scans() {
  static const std::vector<covered_scan> scans = [] {
    std::vector<covered_scan> s;
    s.push_back({"fold", scan_schedule::sequential, 0, std::nullopt});
    s.push_back({"hillis_steele", scan_schedule::hillis_steele, 0, std::nullopt});
    s.push_back({"blelloch", scan_schedule::blelloch, 0, std::nullopt});
    s.push_back({"brent_kung", scan_schedule::brent_kung, 0, std::nullopt});
    s.push_back({"sklansky", scan_schedule::sklansky, 0, std::nullopt});
    for (std::size_t c : {16, 32, 64, 128})
      s.push_back({"chunked(" + std::to_string(c) + ")", scan_schedule::chunked, c, std::nullopt});
    for (auto [items, warps] : {std::pair<std::size_t, std::size_t>{1, 1}, {2, 4}, {4, 4}, {8, 8}})
      for (tile_carry carry : {tile_carry::running, tile_carry::three_pass}) {
        const tiled_policy p{items, 32, warps, carry};
        s.push_back({to_string(p), scan_schedule::sequential, 0, p});
      }
    return s;
  }();
  return scans;
}

inline std::string covered_orders_text() {
  std::string s =
      "the sequential recursion; the inclusive Moebius scan of the leaves, rescaled by max entry, trace or "
      "a power of two after every compose, by the schedules";
  for (const auto& c : covered_scans()) s += " " + c.name + ",";
  s.pop_back();
  return s + "; then applied to the prior";
}

/// The scan's inputs: each leaf's τ, its computed action's error, its normalised matrix.
inline std::vector<log_error> leaf_log_errors(std::span<const bounded_leaf> leaves, std::span<const double> tau,
                                              std::span<const double> leaf_error) {
  std::vector<log_error> xs(leaves.size());
  for (std::size_t t = 0; t < leaves.size(); ++t) {
    xs[t].tau = tau[t];
    xs[t].err = leaf_error[t];
    xs[t].peak = leaf_error[t];
    xs[t].product = normalise(leaves[t].a, leaves[t].b, leaves[t].c, leaves[t].d);
    xs[t].in_range = normalised_in_range(xs[t].product);
  }
  return xs;
}

/// What one evaluation of a lane's bounds returns: per token, the bound of the computed x_t (now)
/// and of the x_{t−1} that token t reads (previous), and the largest error of any point an
/// evaluation passes through (peak: the radius the trajectory-local factors may assume).
struct lane_log_bounds {
  std::vector<double> now, previous;
  double peak = 0;
};

/// Each leaf's factors for one evaluation: τ (or a smaller trajectory-local Lipschitz factor), the
/// computed leaf's action error, and the sequential step's error.
struct lane_leaf_factors {
  std::vector<double> tau, leaf_error, step_error;
};

inline lane_leaf_factors uniform_leaf_factors(std::span<const bounded_leaf> leaves,
                                              const mobius_recursion_rounding& r) {
  lane_leaf_factors f{std::vector<double>(leaves.size()), std::vector<double>(leaves.size(), r.leaf),
                      std::vector<double>(leaves.size(), r.step)};
  for (std::size_t t = 0; t < leaves.size(); ++t) f.tau[t] = leaves[t].tau;
  return f;
}

/// One lane's bounds over the covered orders (or, with `only`, that one scan without the sequential
/// recursion), token by token the largest:
/// - now: the sequential recursion E_t = τ_t E_{t−1} + δ_t (proofs/Birkhoff.v, sequential_error) and
///   each scan's inclusive prefix t (tree_bound, node roundings r.node) plus the application r.apply;
/// - previous: the sequential E_{t−1}, each scan's inclusive prefix t − 1 and its exclusive prefix t
///   (what a kernel computes when it needs the previous value: its tree differs from the inclusive
///   one) with the application; x_{−1} is the exact prior: 0 for t = 0 except through an exclusive
///   scan's application.
/// All inflated (see the top). `in_range` is cleared when a scan's normalised products leave
/// binary32's safe range.
inline lane_log_bounds lane_log_bound(std::span<const bounded_leaf> leaves, const lane_leaf_factors& f,
                                      const mobius_recursion_rounding& r, bool& in_range, bool want_previous = true,
                                      const covered_scan* only = nullptr) {
  const std::size_t n = leaves.size();
  if (n > longest_bounded_sequence)
    throw std::invalid_argument("the Moebius recursion's bound: " + std::to_string(n) + " tokens; at most 2^20");
  lane_log_bounds out{std::vector<double>(n, 0), std::vector<double>(n, 0), 0};
  if (!only) {
    double e = 0;
    for (std::size_t t = 0; t < n; ++t) {
      // The step reads a point within E_{t−1}: the radius its factors need, plus its own error, as a
      // tree's peak counts it (proofs/TreeLocal.v, tree_peak).
      out.peak = std::max(out.peak, (e + f.step_error[t]) * bound_inflation);
      e = f.tau[t] * e + f.step_error[t];
      out.now[t] = e * bound_inflation;
      if (t + 1 < n) out.previous[t + 1] = out.now[t];
    }
  }
  const log_error_monoid monoid{r.node};
  const std::vector<log_error> xs = leaf_log_errors(leaves, f.tau, f.leaf_error);
  const std::span<const log_error> in(xs);
  for (const auto& scan : covered_scans()) {
    if (only && only->name != scan.name) continue;
    const std::size_t chunk = scan.chunk == 0 ? default_scan_chunk_size : scan.chunk;
    const auto inclusive =
        scan.tiled ? tiled_inclusive_scan(monoid, in, *scan.tiled) : inclusive_scan(scan.schedule, monoid, in, chunk);
    for (std::size_t t = 0; t < n; ++t) {
      const double bound = (inclusive[t].err + r.apply) * bound_inflation;
      out.now[t] = std::max(out.now[t], bound);
      if (t + 1 < n) out.previous[t + 1] = std::max(out.previous[t + 1], bound);
      out.peak = std::max(out.peak, inclusive[t].peak * bound_inflation);
      in_range = in_range && inclusive[t].in_range;
    }
    if (!want_previous) continue;
    const auto exclusive =
        scan.tiled ? tiled_exclusive_scan(monoid, in, *scan.tiled) : exclusive_scan(scan.schedule, monoid, in, chunk);
    for (std::size_t t = 0; t < n; ++t) {
      out.previous[t] = std::max(out.previous[t], (exclusive[t].err + r.apply) * bound_inflation);
      out.peak = std::max(out.peak, exclusive[t].peak * bound_inflation);
      in_range = in_range && exclusive[t].in_range;
    }
  }
  return out;
}

/// One covered scan's per-token log-error bound (without the sequential recursion).
inline std::vector<double> scan_log_bound(std::span<const bounded_leaf> leaves, const mobius_recursion_rounding& r,
                                          const covered_scan& scan, bool& in_range) {
  return lane_log_bound(leaves, uniform_leaf_factors(leaves, r), r, in_range, false, &scan).now;
}

/// The bound of the computed x_{t−1} that token t reads, over every covered order (with `only`, that
/// one scan's, without the sequential recursion).
inline std::vector<double> previous_log_bound(std::span<const bounded_leaf> leaves, const mobius_recursion_rounding& r,
                                              bool& in_range, const covered_scan* only = nullptr) {
  return lane_log_bound(leaves, uniform_leaf_factors(leaves, r), r, in_range, true, only).previous;
}

/// The per-token log-error bound of one lane over every covered order.
inline std::vector<double> mobius_recursion_log_bound(std::span<const bounded_leaf> leaves,
                                                      const mobius_recursion_rounding& r, bool& in_range) {
  return lane_log_bound(leaves, uniform_leaf_factors(leaves, r), r, in_range, false).now;
}

/// A lane's trajectory-local factors for a radius ρ: per leaf, the exact leaf's log-Lipschitz factor
/// and the computed leaf's and the sequential step's errors, for every input within ρ (log units) of
/// the exact point the leaf reads (check/kdn_leaf_local.hpp for the KDN covariance leaves).
using trajectory_factors = std::function<lane_leaf_factors(double rho)>;

/// The trajectory-local bound (docs/error-model.md, "KDN covariances: the trajectory-local bound"):
/// every covered order computes x_t as if the leaves were applied one by one to the exact prior, each
/// compose's rounding a perturbation at the end of its segment, so the bound of any order is the
/// same tree recursion with each leaf's τ replaced by the exact leaf's Lipschitz factor near the
/// trajectory, and its uniform error by its error near the trajectory, once every point an evaluation
/// passes through is known to lie near it. The first evaluation (global τ, uniform errors: sound
/// everywhere) bounds every such point by its peak ρ₀; factors valid within ρ₀ give a second, whose
/// peak ρ₁ <= ρ₀ bounds them again; twice. Each factor is the smaller of the uniform and the local one.
/// Machine-checked: proofs/TreeLocal.v (tree_error_near: the recursion with factors valid near the
/// trajectory; radius_le_peak: the peak bounds every radius a node needs).
inline lane_log_bounds trajectory_lane_log_bound(std::span<const bounded_leaf> leaves,
                                                 const mobius_recursion_rounding& r, bool& in_range,
                                                 const trajectory_factors& local) {
  lane_leaf_factors f = uniform_leaf_factors(leaves, r);
  lane_log_bounds b = lane_log_bound(leaves, f, r, in_range);
  for (int refinement = 0; refinement < 2; ++refinement) {
    const double rho = b.peak;
    const lane_leaf_factors near = local(rho);
    lane_leaf_factors g = f;
    for (std::size_t t = 0; t < leaves.size(); ++t) {
      g.tau[t] = std::min(f.tau[t], near.tau[t]);
      g.leaf_error[t] = std::min(f.leaf_error[t], near.leaf_error[t]);
      g.step_error[t] = std::min(f.step_error[t], near.step_error[t]);
    }
    bool same_products = true;  // the products are those of the first evaluation
    lane_log_bounds next = lane_log_bound(leaves, g, r, same_products);
    // The factors hold within ρ: every evaluation's peak must stay there (proofs/TreeLocal.v,
    // radius_le_peak). Smaller factors give a smaller peak, so this never fails; it is checked, not assumed.
    if (next.peak > rho) break;
    b = std::move(next);
    f = std::move(g);
  }
  return b;
}

}  // namespace kalman_oracle::check
