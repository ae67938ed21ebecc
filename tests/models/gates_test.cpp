// models/gates.hpp: the one rule from gates to decays, the two ranges, and one message per rule,
// whichever model reports it.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "input_error_message.hpp"
#include "kalman_oracle/models/dense.hpp"
#include "kalman_oracle/models/diagonal.hpp"
#include "kalman_oracle/models/fixed_gain.hpp"
#include "kalman_oracle/models/gates.hpp"
#include "kalman_oracle/scalar/precision_scope.hpp"

using namespace kalman_oracle;
using kalman_oracle::testing::message_of;
using R = rational;

namespace {

const std::string exact_log_text =
    "g: gate_space::log needs exp(g), which is irrational for rational g != 0; rule: exact scalars take the decays "
    "alpha with gate_space::linear";

}  // namespace

TEST_CASE("gates: a linear gate is the decay, a log gate g gives e^g") {
  CHECK(decay_of_gate(R(1, 2), gate_space::linear) == R(1, 2));
  // e^0 = 1 exactly in every floating type; e^g for g = -1 is the library's exp, correctly rounded in
  // MPFR: 1/e = 0.36787944117144233... lies between 0.3678 and 0.3679.
  CHECK(decay_of_gate(0.0, gate_space::log) == 1.0);
  CHECK(decay_of_log_gate(-1.0) == std::exp(-1.0));
  const precision_scope scope(128);
  const mpfr_real e_inverse = decay_of_log_gate(mpfr_real(-1));
  CHECK(e_inverse > mpfr_real("0.3678"));
  CHECK(e_inverse < mpfr_real("0.3679"));
  // A sum of log gates gives the decay over those tokens: e^(g1 + g2) = e^g1 e^g2 (here 1/2 · 1/2,
  // with g = log(1/2) exact in MPFR up to its rounding; compared within 2^-120).
  const mpfr_real g = log(mpfr_real(1) / 2);
  CHECK(abs(decay_of_log_gate(mpfr_real(g + g)) - mpfr_real(1) / 4) <
        scalar_traits<mpfr_real>::ldexp(mpfr_real(1), -120));
  // Exact scalars never convert a log gate (require_gates rejects them first).
  CHECK_THROWS_AS(decay_of_log_gate(R(0)), std::logic_error);
}

TEST_CASE("gates: the decay range, 0 < alpha <= 1 or g <= 0, each with one message") {
  tensor<double> alpha("g", {4}, std::vector<double>{1.0, 0.5, 1e-300, 1.0});
  CHECK_NOTHROW(require_gates(alpha, gate_space::linear, gate_range::decay));
  alpha.data()[3] = 0.0;  // α = 0 would be g = −∞
  CHECK_THROWS_WITH_AS(require_gates(alpha, gate_space::linear, gate_range::decay),
                       "g: element [3] is 0; rule: decay alpha must be in (0, 1]", input_error);
  alpha.data()[3] = 1.5;  // an expanding step
  CHECK_THROWS_WITH_AS(require_gates(alpha, gate_space::linear, gate_range::decay),
                       "g: element [3] is 1.5; rule: decay alpha must be in (0, 1]", input_error);

  tensor<double> g("g", {3}, std::vector<double>{0.0, -2.0, -1e-300});
  CHECK_NOTHROW(require_gates(g, gate_space::log, gate_range::decay));
  g.data()[1] = 0.25;  // e^0.25 > 1
  CHECK_THROWS_WITH_AS(require_gates(g, gate_space::log, gate_range::decay),
                       "g: element [1] is 0.25; rule: log gate g must be <= 0 (decay alpha = e^g in (0, 1])",
                       input_error);
  g.data()[1] = -std::numeric_limits<double>::infinity();  // α = 0: not a finite gate
  CHECK_THROWS_WITH_AS(require_gates(g, gate_space::log, gate_range::decay),
                       "g: element [1] is -inf; rule: must be finite (no NaN or infinity)", input_error);
}

TEST_CASE("gates: the dense filter's range is any finite alpha or g") {
  tensor<double> alpha("g", {3}, std::vector<double>{1.5, -2.0, 0.0});  // expanding, negative, zero
  CHECK_NOTHROW(require_gates(alpha, gate_space::linear, gate_range::any_finite));
  tensor<double> g("g", {2}, std::vector<double>{3.0, -3.0});  // either sign
  CHECK_NOTHROW(require_gates(g, gate_space::log, gate_range::any_finite));
  alpha.data()[2] = std::numeric_limits<double>::quiet_NaN();
  CHECK_THROWS_WITH_AS(require_gates(alpha, gate_space::linear, gate_range::any_finite),
                       "g: element [2] is nan; rule: must be finite (no NaN or infinity)", input_error);
}

TEST_CASE("gates: exact scalars reject log gates with one message in every range") {
  const tensor<R> g("g", {2}, std::vector<R>{R(0), R(-1)});
  CHECK(message_of([&] { require_gates(g, gate_space::log, gate_range::decay); }) == exact_log_text);
  CHECK(message_of([&] { require_gates(g, gate_space::log, gate_range::any_finite); }) == exact_log_text);
  const tensor<R> alpha("g", {2}, std::vector<R>{R(1, 3), R(1)});
  CHECK_NOTHROW(require_gates(alpha, gate_space::linear, gate_range::decay));
}

TEST_CASE("gates: the diagonal KDN, the fixed-gain family and the dense filter report a gate alike") {
  // One token, K = 2, V = 1; the second gate is the bad one.
  const auto make = [](std::vector<double> values) { return tensor<double>("g", {1, 1, 1, 2}, std::move(values)); };
  diagonal_kdn_inputs<double> kdn;
  kdn.q = tensor<double>("q", {1, 1, 1, 2}, 1.0);
  kdn.k = tensor<double>("k", {1, 1, 1, 2}, 1.0);
  kdn.v = tensor<double>("v", {1, 1, 1, 1}, 1.0);
  kdn.omega = tensor<double>("omega", {1}, 0.0);
  kdn.r = tensor<double>("r", {1}, 1.0);
  fixed_gain_inputs<double> kda;
  kda.rule = fixed_gain_rule::kda;
  kda.q = kdn.q, kda.k = kdn.k, kda.v = kdn.v;
  kda.beta = tensor<double>("beta", {1}, 0.5);
  const std::string positive_log =
      "g: element [0, 0, 0, 1] is 0.5; rule: log gate g must be <= 0 (decay alpha = e^g in (0, 1])";
  const std::string large_alpha = "g: element [0, 0, 0, 1] is 2; rule: decay alpha must be in (0, 1]";

  kdn.g = make({-1.0, 0.5});
  kdn.gates = gate_space::log;
  kda.g = make({-1.0, 0.5});
  kda.gates = gate_space::log;
  CHECK(message_of([&] { diagonal_kdn_forward(kdn); }) == positive_log);
  CHECK(message_of([&] { fixed_gain_forward(kda); }) == positive_log);

  kdn.g = make({0.5, 2.0});
  kdn.gates = gate_space::linear;
  kda.g = make({0.5, 2.0});
  kda.gates = gate_space::linear;
  CHECK(message_of([&] { diagonal_kdn_forward(kdn); }) == large_alpha);
  CHECK(message_of([&] { fixed_gain_forward(kda); }) == large_alpha);

  // The dense filter takes both (any finite transition), and rejects a non-finite one alike.
  dense_inputs<double> dense;
  dense.q = kdn.q, dense.k = kdn.k, dense.v = kdn.v, dense.r = kdn.r;
  dense.transition = dense_transition<double>::diagonal(make({0.5, 2.0}), gate_space::linear);
  CHECK_NOTHROW(dense_forward(dense));
  dense.transition = dense_transition<double>::diagonal(make({-1.0, 0.5}), gate_space::log);
  CHECK_NOTHROW(dense_forward(dense));
  dense.transition = dense_transition<double>::diagonal(make({-1.0, INFINITY}), gate_space::log);
  kdn.g = make({-1.0, INFINITY});
  kdn.gates = gate_space::log;
  CHECK(message_of([&] { dense_forward(dense); }) == message_of([&] { diagonal_kdn_forward(kdn); }));
  CHECK(message_of([&] { dense_forward(dense); }) ==
        "g: element [0, 0, 0, 1] is inf; rule: must be finite (no NaN or infinity)");
}
