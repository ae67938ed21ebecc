// The dense Kalman memory in information form (models/information.hpp, docs/math.md §3): the hand-worked
// example of dense_test.cpp in the information form's own terms, equality with the moment form,
// and the singularity messages.
#include "kalman_oracle/models/information.hpp"

#include <doctest/doctest.h>

#include <vector>

#include "kalman_oracle/models/dense.hpp"

using namespace kalman_oracle;
using R = rational;

namespace {

tensor<R> make(const char* name, shape_t shape, std::vector<R> values) {
  return tensor<R>(name, std::move(shape), std::move(values));
}

/// dense_test.cpp's example: T = 2, K = 2, V = 1, D = I, Ω = diag(1, 1/2), P_0 = I, S_0 = 0, τ = 1/2;
/// tokens (k, v, r, q) = ((1, 1), 2, 1, (1, 0)) and ((1, -1), 1, 1/2, (0, 1)).
information_inputs<R> hand_example() {
  information_inputs<R> in;
  in.q = make("q", {1, 2, 1, 2}, {1, 0, 0, 1});
  in.k = make("k", {1, 2, 1, 2}, {1, 1, 1, -1});
  in.v = make("v", {1, 2, 1, 1}, {2, 1});
  in.r = make("r", {1, 2, 1}, {1, R(1, 2)});
  in.process_noise = dense_process_noise<R>::diagonal(make("omega", {2}, {1, R(1, 2)}));
  in.scale = R(1, 2);
  return in;
}

}  // namespace

TEST_CASE("information: hand-worked two-token example, every intermediate") {
  const auto out = information_forward(hand_example(), run_options{1, true});
  // Y_0 = P_0⁻¹ = I, H_0 = Y_0 S_0 = 0.
  // Token 1. M_1 = D Y_0⁻¹ Dᵀ + Ω = diag(2, 3/2); Ŷ_1 = diag(1/2, 2/3); Ĥ_1 = Ŷ_1 D Y_0⁻¹ H_0 = 0.
  //   Y_1 = Ŷ_1 + k kᵀ / r = [[3/2, 1], [1, 5/3]] (det 3/2); H_1 = k v / r = (2, 2).
  //   Y_1⁻¹ = (2/3) [[5/3, -1], [-1, 3/2]] = [[10/9, -2/3], [-2/3, 1]] (= the moment form's P_1);
  //   S_1 = Y_1⁻¹ H_1 = (20/9 - 4/3, -4/3 + 2) = (8/9, 2/3); o_1 = 4/9.
  CHECK(out.predicted_precision->data() ==
        std::vector<R>{R(1, 2), 0, 0, R(2, 3), R(27, 49), R(12, 49), R(12, 49), R(38, 49)});
  CHECK(out.predicted_covariance->data() == std::vector<R>{2, 0, 0, R(3, 2), R(19, 9), R(-2, 3), R(-2, 3), R(3, 2)});
  CHECK(std::vector<R>(out.state->data().begin(), out.state->data().begin() + 2) == std::vector<R>{R(8, 9), R(2, 3)});
  // Token 2. M_2 = Y_1⁻¹ + Ω = [[19/9, -2/3], [-2/3, 3/2]] (det 49/18);
  //   Ŷ_2 = (18/49) [[3/2, 2/3], [2/3, 19/9]] = [[27/49, 12/49], [12/49, 38/49]];
  //   Ŝ_2 = D Y_1⁻¹ H_1 = (8/9, 2/3); Ĥ_2 = Ŷ_2 Ŝ_2 = (24/49 + 8/49, 32/147 + 76/147) = (32/49, 36/49).
  //   k = (1, -1), r = 1/2: k kᵀ / r = [[2, -2], [-2, 2]], k v / r = (2, -2);
  //   Y_2 = [[125/49, -86/49], [-86/49, 136/49]] (det 4), H_2 = (130/49, -62/49);
  //   Y_2⁻¹ = (1/4) [[136/49, 86/49], [86/49, 125/49]] = [[34/49, 43/98], [43/98, 125/196]];
  //   S_2 = Y_2⁻¹ H_2 = ((4420 - 1333) / 2401, (5590 - 3875) / 4802) = (9/7, 5/14); o_2 = 5/28.
  CHECK(out.final_precision.data() == std::vector<R>{R(125, 49), R(-86, 49), R(-86, 49), R(136, 49)});
  CHECK(out.final_information.data() == std::vector<R>{R(130, 49), R(-62, 49)});
  CHECK(out.final_covariance.data() == std::vector<R>{R(34, 49), R(43, 98), R(43, 98), R(125, 196)});
  CHECK(out.final_state.data() == std::vector<R>{R(9, 7), R(5, 14)});
  CHECK(out.o.data() == std::vector<R>{R(4, 9), R(5, 28)});
  // The per-token reports match the moment form's (dense_test.cpp): s, m, κ = Y_t⁻¹ k / r, τ² qᵀ P q.
  CHECK(out.innovation_variance.data() == std::vector<R>{R(9, 2), R(49, 9)});
  CHECK(out.mahalanobis.data() == std::vector<R>{R(8, 9), R(1, 9)});
  CHECK(out.gain->data() == std::vector<R>{R(4, 9), R(1, 3), R(25, 49), R(-39, 98)});
  CHECK(out.readout_variance.data() == std::vector<R>{R(5, 18), R(125, 784)});
}

TEST_CASE("information: every output equals the moment form's on the example") {
  const auto info = information_forward(hand_example(), run_options{1, true});
  const auto dense = dense_forward(hand_example(), run_options{1, true});
  CHECK(info.o.data() == dense.o.data());
  CHECK(info.final_state.data() == dense.final_state.data());
  CHECK(info.final_covariance.data() == dense.final_covariance.data());
  CHECK(info.predicted_covariance->data() == dense.predicted_covariance->data());
  CHECK(info.covariance->data() == dense.covariance->data());
  CHECK(info.state->data() == dense.state->data());
  CHECK(info.gain->data() == dense.gain->data());
}

TEST_CASE("information: a singular predicted covariance names the token and the head") {
  // H = 2 heads; at token 1 head 1 has alpha = (1, 0) and Ω = 0, so M = D Y⁻¹ Dᵀ has a zero row
  // and column (token 0, with D = I, is fine: M = P_0 = I).
  auto in = hand_example();
  in.q = make("q", {1, 2, 2, 2}, {1, 0, 1, 0, 0, 1, 0, 1});
  in.k = make("k", {1, 2, 2, 2}, {1, 1, 1, 1, 1, -1, 1, -1});
  in.v = make("v", {1, 2, 2, 1}, {2, 2, 1, 1});
  in.r = make("r", {1}, {1});
  in.process_noise.reset();
  in.transition = dense_transition<R>::diagonal(make("alpha", {1, 2, 2, 2}, {1, 1, 1, 1, 1, 1, 1, 0}));
  CHECK_THROWS_WITH_AS(information_forward(in),
                       "information: D_t Y_{t-1}^-1 D_t^T + Omega_t is singular (not positive definite) at token 1 "
                       "of [b, h] = [0, 1]; rule: the information form needs the predicted covariance invertible "
                       "(docs/math.md §3)",
                       input_error);
  // The moment form needs no inverse: it runs, and its P̂ is singular there.
  const auto dense = dense_forward(in, run_options{1, true});
  CHECK((*dense.predicted_covariance)(0, 1, 1, 1, 1) == 0);
}

TEST_CASE("information: input checks are the moment form's") {
  auto in = hand_example();
  in.initial_covariance = make("initial_covariance", {2, 2}, {1, 2, 2, 1});
  CHECK_THROWS_WITH_AS(information_forward(in),
                       "initial_covariance: the matrix at [] is not positive definite (pivot 1 of its LDL^T "
                       "factorisation is -3); rule: the prior covariance P_0 must be symmetric positive definite",
                       input_error);
  in = hand_example();
  in.r = make("r", {1, 2, 1}, {1, 0});
  CHECK_THROWS_WITH_AS(information_forward(in), "r: element [0, 1, 0] is 0; rule: observation noise must be > 0",
                       input_error);
}
