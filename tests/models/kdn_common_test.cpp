// models/kdn_common.hpp: the problem both KDN models validate their inputs into, parametrised by
// the shape of the covariance (one variance per channel, §4; one scalar per head, §5).
#include <doctest/doctest.h>

#include <functional>
#include <string>
#include <vector>

#include "input_error_message.hpp"
#include "kalman_oracle/models/diagonal.hpp"
#include "kalman_oracle/models/isotropic.hpp"
#include "kalman_oracle/models/kdn_common.hpp"

using namespace kalman_oracle;
using kalman_oracle::testing::message_of;
using R = rational;

namespace {

/// B = 1, T = 2, H = 1, K = 4, V = 1; every parameter given as one broadcast value, no optional one.
template <class Inputs>
Inputs minimal() {
  Inputs in;
  in.q = tensor<R>("q", {1, 2, 1, 4}, R(1));
  in.k = tensor<R>("k", {1, 2, 1, 4}, R(1));
  in.v = tensor<R>("v", {1, 2, 1, 1}, R(1));
  in.g = tensor<R>("g", {1}, R(1, 2));
  in.gates = gate_space::linear;
  in.omega = tensor<R>("omega", {1}, R(0));
  in.r = tensor<R>("r", {1}, R(1));
  return in;
}

}  // namespace

TEST_CASE("kdn_common: the covariance shape fixes the shapes of omega and of the prior") {
  const auto diagonal_in = minimal<diagonal_kdn_inputs<R>>();
  const detail::kdn_problem<R, detail::kdn_covariance::diagonal> diagonal(diagonal_in);
  CHECK(diagonal.noise_shape() == shape_t{1, 2, 1, 4});  // ω per channel, [B, T, H, K]
  CHECK(diagonal.prior_shape() == shape_t{1, 1, 4});     // p_0 per channel, [B, H, K]
  const auto isotropic_in = minimal<isotropic_kdn_inputs<R>>();
  const detail::kdn_problem<R, detail::kdn_covariance::isotropic> isotropic(isotropic_in);
  CHECK(isotropic.noise_shape() == shape_t{1, 2, 1});  // ω per head, [B, T, H]
  CHECK(isotropic.prior_shape() == shape_t{1, 1});     // b_0 per head, [B, H]
  // A per-channel ω does not broadcast to the isotropic model's [B, T, H].
  auto per_channel = minimal<isotropic_kdn_inputs<R>>();
  per_channel.omega = tensor<R>("omega", {1, 2, 1, 4}, R(0));
  CHECK(message_of([&] { isotropic_kdn_forward(per_channel); }) ==
        "omega: shape [1, 2, 1, 4] has more dimensions than the expected [1, 2, 1]");
}

TEST_CASE("kdn_common: defaults mu = K, prior covariance 1, S_0 = 0, tau = 1/sqrt(K); decays from gates") {
  const auto in = minimal<diagonal_kdn_inputs<R>>();
  const detail::kdn_problem<R, detail::kdn_covariance::diagonal> pb(in);
  CHECK(pb.mu(0) == 4);                                      // μ = K = 4
  CHECK(pb.prior(0, 0, 3) == 1);                             // p_0 = 1
  CHECK(pb.initial_state(0, 0) == std::vector<R>(4, R(0)));  // S_0 = 0, K x V = 4 x 1
  CHECK(pb.tau == R(1, 2));                                  // 1/√4, exact: K is a perfect square
  CHECK(pb.decay(0, 1, 0, 2) == R(1, 2));                    // a linear gate is the decay (models/gates.hpp)
}

TEST_CASE("kdn_common: the prior covariance is named p_0 or b_0 by the covariance shape") {
  auto diagonal = minimal<diagonal_kdn_inputs<R>>();
  diagonal.initial_covariance = tensor<R>("initial_covariance", {1}, R(0));
  CHECK(message_of([&] { diagonal_kdn_forward(diagonal); }) ==
        "initial_covariance: element [0] is 0; rule: prior covariance p_0 must be > 0");
  auto isotropic = minimal<isotropic_kdn_inputs<R>>();
  isotropic.initial_covariance = tensor<R>("initial_covariance", {1}, R(-1));
  CHECK(message_of([&] { isotropic_kdn_forward(isotropic); }) ==
        "initial_covariance: element [0] is -1; rule: prior covariance b_0 must be > 0");
}
