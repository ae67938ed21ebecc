// The leaves of docs/math.md §8 from model parameters, by hand.
#include <doctest/doctest.h>

#include <vector>

#include "kalman_oracle/algebra/leaves.hpp"
#include "kalman_oracle/scalar/types.hpp"

using namespace kalman_oracle;
using R = rational;

TEST_CASE("leaves: KLA precision and mean leaves") {
  // Lambda = 2, k = 3, v = 5: phi = 2 * 9 = 18, rho = 5 * 2 * 3 = 30.
  const auto obs = kla_observe(R(2), R(3), R(5));
  CHECK(obs.phi == 18);
  CHECK(obs.rho == 30);
  // ā = 1/2, p̄ = 1/4: [[1 + 18/4, 18/4], [1/4, 1/4]] = [[11/2, 9/2], [1/4, 1/4]].
  const auto leaf = kla_precision_leaf(R(1, 2), R(1, 4), obs.phi);
  CHECK(leaf == mobius<R>{R(11, 2), R(9, 2), R(1, 4), R(1, 4)});
  // lambda_0 = 1: 1 / (1/4 + 1/4) + 18 = 20.
  CHECK(mobius_apply(leaf, R(1)) == 20);
  // alpha = ā / (ā² + p̄ lambda_0) = (1/2) / (1/2) = 1.
  CHECK(kla_mean_leaf(R(1, 2), R(1, 4), R(1), obs.rho) == affine<R>{1, 30});
}

TEST_CASE("leaves: diagonal and isotropic KDN leaves") {
  // alpha = 1/2, omega = 1, k = 2, r = 4, mu = 3: u = 3 * 4 / 4 = 3.
  CHECK(diag_kdn_information(R(2), R(4), R(3)) == 3);
  const auto cov = diag_kdn_covariance_leaf(R(1, 2), R(1), R(2), R(4), R(3));
  CHECK(cov == mobius<R>{R(1, 4), R(1), R(3, 4), R(4)});
  // p = 4: p̂ = 1 + 1 = 2, p_t = 2 / (1 + 3 * 2) = 2/7.
  CHECK(mobius_apply(cov, R(4)) == R(2, 7));
  const auto prec = diag_kdn_precision_leaf(R(1, 2), R(1), R(2), R(4), R(3));
  CHECK(prec == mobius<R>{R(4), R(3, 4), R(1), R(1, 4)});
  CHECK(mobius_apply(prec, R(1, 4)) == R(7, 2));
  // Isotropic, K = 2: alpha = (1, 1/2) -> a = (1 + 1/4) / 2 = 5/8; k = (1, 1), r = 2, mu = 2:
  // u = 2 * 2 / (2 * 2) = 1.
  const std::vector<R> alpha{R(1), R(1, 2)}, key{R(1), R(1)};
  CHECK(iso_kdn_decay<R>(alpha) == R(5, 8));
  CHECK(iso_kdn_information<R>(key, R(2), R(2)) == 1);
  CHECK(iso_kdn_covariance_leaf<R>(alpha, R(1, 2), key, R(2), R(2)) == mobius<R>{R(5, 8), R(1, 2), R(5, 8), R(3, 2)});
  CHECK_THROWS_WITH_AS(iso_kdn_decay<R>(std::vector<R>{}), "iso_kdn_decay: decay (alpha) has no channels (K = 0)",
                       std::invalid_argument);
}
