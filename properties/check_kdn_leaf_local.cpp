// The KDN covariance leaf's trajectory-local factors (check/kdn_leaf_local.hpp; docs/error-model.md,
// "KDN covariances: the trajectory-local bound") bound what they claim, against 256-bit values:
// - the Lipschitz factor: two points of the ball move apart under the exact leaf by at most the factor
//   times their distance (in log), with the points drawn at the ball's ends, where the factor's sup sits;
// - the action error: a leaf whose â, û sit at the ends of their rounding counts and whose ĉ, d̂ carry
//   one and two roundings of either sign acts within the bound of the exact leaf, anywhere in the ball;
// - the step error: the sequential step with every rounding at either end of e^{±η} (a superset of
//   the model's 1 + δ, |δ| <= u) within the bound.
// The planted bugs kdn_local_lipschitz_at_centre and kdn_local_action_drops_gain make the factors too
// small, and the properties find it.
#include <cmath>
#include <cstdint>
#include <random>

#include "bound_checks.hpp"
#include "kalman_oracle/check/kdn_leaf_local.hpp"
#include "kalman_oracle/scalar/precision_scope.hpp"
#include "rapidcheck_doctest.hpp"

using namespace kalman_oracle;
using kalman_oracle::testing::check_property;
using namespace kalman_oracle::testing;

namespace {

/// A leaf with weak to strong decay, no to large noise and gain, a point over eight decades, a radius
/// from 0 to 1, and the counts of either KDN (isotropic with K up to 128, or diagonal).
struct drawn_leaf {
  check::kdn_trajectory_leaf leaf;
  double rho = 0;
  check::kdn_leaf_counts counts;
};

drawn_leaf draw_leaf() {
  std::mt19937_64 rng(*rc::gen::arbitrary<std::uint64_t>());
  drawn_leaf d;
  d.leaf.a = std::pow(10.0, uniform_float(rng, -3, 0));
  d.leaf.omega = *rc::gen::arbitrary<bool>() ? 0.0 : std::pow(10.0, uniform_float(rng, -6, 2));
  d.leaf.u = *rc::gen::inRange(0, 4) == 0 ? 0.0 : std::pow(10.0, uniform_float(rng, -6, 3));
  d.leaf.x = std::pow(10.0, uniform_float(rng, -4, 4));
  d.rho = *rc::gen::inRange(0, 4) == 0 ? 0.0 : std::pow(10.0, uniform_float(rng, -8, 0));
  const double eta = check::log_rounding(0x1p-24);
  const double K = *rc::gen::element(1.0, 16.0, 128.0);
  d.counts = *rc::gen::arbitrary<bool>() ? check::kdn_leaf_counts{(K + 5) * eta, (K + 3) * eta, eta}
                                         : check::kdn_leaf_counts{5 * eta, 3 * eta, eta};
  return d;
}

mpfr_real exact_action(const check::kdn_trajectory_leaf& l, const mpfr_real& x) {
  const mpfr_real y = mpfr_real(l.a) * x + mpfr_real(l.omega);
  return y / (mpfr_real(1) + mpfr_real(l.u) * y);
}

/// e^{sign k} at 256 bits.
mpfr_real factor(int sign, double k) { return exp(mpfr_real(sign * k)); }

/// A point of the ball: one of its ends, or inside it.
mpfr_real ball_point(const drawn_leaf& d, int where) {
  const double offset = where == 0   ? -d.rho
                        : where == 1 ? d.rho
                                     : d.rho * (2 * (*rc::gen::inRange(0, 1001)) / 1000.0 - 1);
  return mpfr_real(d.leaf.x) * exp(mpfr_real(offset));
}

int draw_sign() { return *rc::gen::element(-1, 1); }

/// â = a e^{±A} and û = u e^{±U}, each at an end of its rounding count.
struct computed_parameters {
  mpfr_real a_hat, u_hat;
};

computed_parameters draw_computed_parameters(const drawn_leaf& d) {
  return {mpfr_real(d.leaf.a) * factor(draw_sign(), d.counts.A), mpfr_real(d.leaf.u) * factor(draw_sign(), d.counts.U)};
}

}  // namespace

TEST_SUITE("kdn_leaf_local") {
  TEST_CASE("kdn_leaf_local: the exact leaf moves points of the ball apart by at most the local factor") {
    check_property("kdn_local_lipschitz_bounds_the_leaf", [] {
      const drawn_leaf d = draw_leaf();
      precision_scope scope(256);
      const double lambda = check::kdn_leaf_local_lipschitz(d.leaf, d.rho);
      RC_ASSERT(lambda <= 1.0);
      // Two nearby points at one end of the ball (where the derivative's sup sits) and two far apart.
      const int end = *rc::gen::inRange(0, 2);
      const mpfr_real x1 = ball_point(d, end);
      const mpfr_real x2 =
          *rc::gen::arbitrary<bool>() ? x1 * exp(mpfr_real(end == 0 ? 1e-9 : -1e-9) * d.rho) : ball_point(d, 1 - end);
      const mpfr_real moved = abs(log(exact_action(d.leaf, x1)) - log(exact_action(d.leaf, x2)));
      // Where the leaf is a pure scaling (ω = 0, u = 0) both sides are equal: the 2^-200 allows for the
      // 256-bit logarithms' own rounding.
      RC_ASSERT(moved <= mpfr_real(lambda) * abs(log(x1) - log(x2)) * (1 + mpfr_real(0x1p-200)));
    });
  }

  TEST_CASE("kdn_leaf_local: a computed leaf at the ends of its rounding counts acts within the local error") {
    check_property("kdn_local_action_error_bounds_the_leaf", [] {
      const drawn_leaf d = draw_leaf();
      precision_scope scope(256);
      const double bound = check::kdn_leaf_local_action_error(d.leaf, d.rho, d.counts);
      const double eta = d.counts.eta;
      const auto [a_hat, u_hat] = draw_computed_parameters(d);
      const mpfr_real c_hat = u_hat * a_hat * factor(draw_sign(), eta);
      const mpfr_real d_hat =
          (mpfr_real(1) + u_hat * mpfr_real(d.leaf.omega) * factor(draw_sign(), eta)) * factor(draw_sign(), eta);
      const mpfr_real y = ball_point(d, *rc::gen::inRange(0, 3));
      const mpfr_real computed = (a_hat * y + mpfr_real(d.leaf.omega)) / (c_hat * y + d_hat);
      RC_ASSERT(abs(log(computed) - log(exact_action(d.leaf, y))) <= mpfr_real(bound));
    });
  }

  TEST_CASE("kdn_leaf_local: the sequential step with every rounding at an end stays within the local error") {
    check_property("kdn_local_step_error_bounds_the_step", [] {
      const drawn_leaf d = draw_leaf();
      precision_scope scope(256);
      const double bound = check::kdn_step_local_error(d.leaf, d.rho, d.counts);
      const double eta = d.counts.eta;
      const auto [a_hat, u_hat] = draw_computed_parameters(d);
      const mpfr_real x = ball_point(d, *rc::gen::inRange(0, 3));
      // b̂ = fl(fl(â x) + ω), b = fl(b̂ / fl(1 + fl(û b̂))).
      const mpfr_real predicted =
          (a_hat * x * factor(draw_sign(), eta) + mpfr_real(d.leaf.omega)) * factor(draw_sign(), eta);
      const mpfr_real den = (mpfr_real(1) + u_hat * predicted * factor(draw_sign(), eta)) * factor(draw_sign(), eta);
      const mpfr_real computed = predicted / den * factor(draw_sign(), eta);
      RC_ASSERT(abs(log(computed) - log(exact_action(d.leaf, x))) <= mpfr_real(bound));
    });
  }
}
