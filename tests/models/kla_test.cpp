// Kalman Linear Attention (docs/math.md §6): a hand-worked example, the parallel form on it, the
// inversion of the precision leaf, broadcasting, the OU helper, and bad inputs.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kalman_oracle/models/kla.hpp"
#include "kalman_oracle/models/kla_parallel.hpp"
#include "kalman_oracle/scalar/types.hpp"

using namespace kalman_oracle;
using R = rational;

namespace {

/// The hand-worked example: B = 1, T = 2, M = 1, S = 2.
///   k_1 = (1, 2), q_1 = (1, 1), v_1 = 3, Lambda_1 = 2
///   k_2 = (2, -1), q_2 = (1, -2), v_2 = -1, Lambda_2 = 1
///   ā = (1/2, 1), p̄ = (1, 1/2) static [M, S] = [1, 2]; prior defaults lambda_0 = 1, eta_0 = 0.
kla_inputs<R> hand_example() {
  return {tensor<R>("q", {1, 2, 2}, std::vector<R>{1, 1, 1, -2}),
          tensor<R>("k", {1, 2, 2}, std::vector<R>{1, 2, 2, -1}),
          tensor<R>("v", {1, 2, 1}, std::vector<R>{3, -1}),
          tensor<R>("Lambda", {1, 2, 1}, std::vector<R>{2, 1}),
          tensor<R>("a_bar", {1, 2}, std::vector<R>{R(1, 2), 1}),
          tensor<R>("p_bar", {1, 2}, std::vector<R>{1, R(1, 2)}),
          std::nullopt,
          std::nullopt};
}

void check_hand_example(const kla_outputs<R>& out) {
  // Element s = 0 (ā = 1/2, p̄ = 1), from lambda_0 = 1, eta_0 = 0:
  //   t = 1: phi = 2 * 1^2 = 2, rho = 3 * 2 * 1 = 6, den = 1/4 + 1 * 1 = 5/4,
  //          lambda_1 = 1 / (5/4) + 2 = 14/5, alpha = (1/2) / (5/4) = 2/5, eta_1 = 2/5 * 0 + 6 = 6
  //   t = 2: phi = 1 * 2^2 = 4, rho = -1 * 1 * 2 = -2, den = 1/4 + 14/5 = 61/20,
  //          lambda_2 = (14/5) / (61/20) + 4 = 56/61 + 4 = 300/61, alpha = (1/2) / (61/20) = 10/61,
  //          eta_2 = 10/61 * 6 - 2 = -62/61
  // Element s = 1 (ā = 1, p̄ = 1/2):
  //   t = 1: phi = 2 * 2^2 = 8, rho = 3 * 2 * 2 = 12, den = 1 + 1/2 = 3/2,
  //          lambda_1 = 2/3 + 8 = 26/3, alpha = 2/3, eta_1 = 12
  //   t = 2: phi = 1 * (-1)^2 = 1, rho = -1 * 1 * -1 = 1, den = 1 + (1/2)(26/3) = 16/3,
  //          lambda_2 = (26/3) / (16/3) + 1 = 21/8, alpha = 3/16, eta_2 = 3/16 * 12 + 1 = 13/4
  CHECK((*out.lambda)(0, 0, 0, 0) == R(14, 5));
  CHECK((*out.eta)(0, 0, 0, 0) == 6);
  CHECK((*out.lambda)(0, 0, 0, 1) == R(26, 3));
  CHECK((*out.eta)(0, 0, 0, 1) == 12);
  CHECK((*out.lambda)(0, 1, 0, 0) == R(300, 61));
  CHECK((*out.eta)(0, 1, 0, 0) == R(-62, 61));
  CHECK((*out.lambda)(0, 1, 0, 1) == R(21, 8));
  CHECK((*out.eta)(0, 1, 0, 1) == R(13, 4));
  // t = 1, q = (1, 1): y = 6 / (14/5) + 12 / (26/3) = 15/7 + 18/13 = 321/91;
  //                    y_var = 5/14 + 3/26 = 43/91.
  CHECK(out.y(0, 0, 0) == R(321, 91));
  CHECK(out.y_var(0, 0, 0) == R(43, 91));
  // t = 2, q = (1, -2): y = (-62/61) / (300/61) - 2 (13/4) / (21/8) = -31/150 - 52/21 = -939/350;
  //                     y_var = 61/300 + 4 * 8/21 = 61/300 + 32/21 = 1209/700.
  CHECK(out.y(0, 1, 0) == R(-939, 350));
  CHECK(out.y_var(0, 1, 0) == R(1209, 700));
  CHECK(out.final_lambda(0, 0, 0) == R(300, 61));
  CHECK(out.final_lambda(0, 0, 1) == R(21, 8));
  CHECK(out.final_eta(0, 0, 0) == R(-62, 61));
  CHECK(out.final_eta(0, 0, 1) == R(13, 4));
}

std::string error_of(const kla_inputs<R>& in) {
  try {
    kla_forward(in);
  } catch (const input_error& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("kla: hand-worked two-token example (M = 1, S = 2)") {
  const kla_inputs<R> in = hand_example();
  check_hand_example(kla_forward(in, {.threads = 1, .internals = true}));
  CHECK_FALSE(kla_forward(in).lambda.has_value());  // internals only on request
}

TEST_CASE("kla: the scan form reproduces the hand-worked example in every configuration") {
  const kla_inputs<R> in = hand_example();
  for (scan_schedule schedule : all_scan_schedules)
    for (rescale_mode mode :
         {rescale_mode::none, rescale_mode::trace, rescale_mode::max_entry, rescale_mode::power_of_two})
      for (kla_recovery recovery : {kla_recovery::exclusive_scan, kla_recovery::inversion})
        for (std::size_t chunk : {1, 3}) {
          CAPTURE(to_string(schedule));
          CAPTURE(to_string(mode));
          CAPTURE(to_string(recovery));
          check_hand_example(
              kla_parallel_forward(in, {schedule, mode, chunk, recovery}, {.threads = 1, .internals = true}));
        }
}

TEST_CASE("kla: inverting the precision leaf recovers the previous precision") {
  // Element s = 0 of the example at t = 2: ā = 1/2, p̄ = 1, phi = 4, lambda_2 = 300/61.
  // lambda_2 - phi = 56/61; 1 - p̄ (56/61) = 5/61; lambda_1 = (1/4)(56/61) / (5/61) = 14/5.
  CHECK(kla_invert_precision_leaf(R(1, 2), R(1), R(4), R(300, 61)) == R(14, 5));
  // With p̄ = 0 it is lambda_{t-1} = ā² (lambda_t - phi): ā = 1/3, phi = 2, lambda_t = 11 -> 1.
  CHECK(kla_invert_precision_leaf(R(1, 3), R(0), R(2), R(11)) == 1);
  // Element s = 1 at t = 1 (the prior): ā = 1, p̄ = 1/2, phi = 8, lambda_1 = 26/3 -> 1.
  CHECK(kla_invert_precision_leaf(R(1), R(1, 2), R(8), R(26, 3)) == 1);
}

TEST_CASE("kla: a static [M, S] decay broadcasts like the full per-token tensor") {
  // B = 2, T = 3, M = 2, S = 2 with ā and p̄ static [M, S] and Lambda per channel [M].
  const std::size_t B = 2, TT = 3, M = 2, S = 2;
  std::vector<R> qs, ks, vs;
  for (std::size_t i = 0; i < B * TT * S; ++i) {
    qs.push_back(R(static_cast<long>(i % 5) - 2, 3));
    ks.push_back(R(static_cast<long>(i % 7) - 3, 2));
  }
  for (std::size_t i = 0; i < B * TT * M; ++i) vs.push_back(R(static_cast<long>(i % 4) - 1));
  const std::vector<R> decay_ms{R(1, 2), R(1), R(3, 4), R(1, 5)}, noise_ms{R(1, 3), 0, 2, R(1, 7)};
  const std::vector<R> lambda_m{R(2), R(1, 2)};

  kla_inputs<R> broadcast{tensor<R>("q", {B, TT, S}, qs),
                          tensor<R>("k", {B, TT, S}, ks),
                          tensor<R>("v", {B, TT, M}, vs),
                          tensor<R>("Lambda", {M}, lambda_m),
                          tensor<R>("a_bar", {M, S}, decay_ms),
                          tensor<R>("p_bar", {M, S}, noise_ms),
                          tensor<R>("lambda_0", {1}, std::vector<R>{R(3)}),
                          tensor<R>("eta_0", {S}, std::vector<R>{1, -1})};
  kla_inputs<R> full = broadcast;
  full.Lambda = tensor<R>("Lambda", {B, TT, M});
  full.a_bar = tensor<R>("a_bar", {B, TT, M, S});
  full.p_bar = tensor<R>("p_bar", {B, TT, M, S});
  full.lambda_0 = tensor<R>("lambda_0", {B, M, S}, R(3));
  full.eta_0 = tensor<R>("eta_0", {B, M, S});
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t m = 0; m < M; ++m)
      for (std::size_t s = 0; s < S; ++s) (*full.eta_0)(b, m, s) = s == 0 ? 1 : -1;
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t t = 0; t < TT; ++t)
      for (std::size_t m = 0; m < M; ++m) {
        full.Lambda(b, t, m) = lambda_m[m];
        for (std::size_t s = 0; s < S; ++s) {
          full.a_bar(b, t, m, s) = decay_ms[m * S + s];
          full.p_bar(b, t, m, s) = noise_ms[m * S + s];
        }
      }
  const run_options opts{.threads = 2, .internals = true};
  const kla_outputs<R> a = kla_forward(broadcast, opts), f = kla_forward(full, opts);
  CHECK(a.y.data() == f.y.data());
  CHECK(a.y_var.data() == f.y_var.data());
  CHECK(a.lambda->data() == f.lambda->data());
  CHECK(a.eta->data() == f.eta->data());
  CHECK(a.final_lambda.data() == f.final_lambda.data());
  CHECK(a.final_eta.data() == f.final_eta.data());
  // Spot check one element by hand: b = 0, t = 1 (first token), m = 1, s = 1: ā = 1/5, p̄ = 1/7,
  // Lambda = 1/2, k_{0,0,1} = (1 - 3)/2 = -1, v_{0,0,1} = 0, lambda_0 = 3, eta_0 = -1:
  //   den = 1/25 + 3/7 = 82/175, lambda_1 = 3 * 175/82 + (1/2) * 1 = 525/82 + 41/82 = 283/41,
  //   alpha = (1/5) / (82/175) = 35/82, eta_1 = -35/82 + 0.
  CHECK((*a.lambda)(0, 0, 1, 1) == R(283, 41));
  CHECK((*a.eta)(0, 0, 1, 1) == R(-35, 82));
  // And the scan form agrees on the broadcast inputs.
  const kla_outputs<R> p =
      kla_parallel_forward(broadcast, {scan_schedule::blelloch, rescale_mode::trace, 2, kla_recovery::inversion}, opts);
  CHECK(p.y.data() == f.y.data());
  CHECK(p.y_var.data() == f.y_var.data());
}

TEST_CASE("kla: bad inputs are rejected with the tensor, the index and the rule") {
  SUBCASE("Lambda <= 0") {
    kla_inputs<R> in = hand_example();
    in.Lambda(0, 1, 0) = 0;
    CHECK(error_of(in) == "Lambda: element [0, 1, 0] is 0; rule: value precision Lambda must be > 0");
    in.Lambda(0, 1, 0) = R(-1, 2);
    CHECK(error_of(in) == "Lambda: element [0, 1, 0] is -1/2; rule: value precision Lambda must be > 0");
  }
  SUBCASE("ā outside (0, 1]") {
    kla_inputs<R> in = hand_example();
    in.a_bar(0, 1) = R(3, 2);
    CHECK(error_of(in) == "a_bar: element [0, 1] is 3/2; rule: decay a_bar must be in (0, 1]");
    in.a_bar(0, 1) = 0;
    CHECK(error_of(in) == "a_bar: element [0, 1] is 0; rule: decay a_bar must be in (0, 1]");
  }
  SUBCASE("p̄ < 0 and lambda_0 <= 0") {
    kla_inputs<R> in = hand_example();
    in.p_bar(0, 0) = -1;
    CHECK(error_of(in) == "p_bar: element [0, 0] is -1; rule: process noise p_bar must be >= 0");
    in = hand_example();
    in.lambda_0 = tensor<R>("lambda_0", {1, 1, 2}, std::vector<R>{1, 0});
    CHECK(error_of(in) == "lambda_0: element [0, 0, 1] is 0; rule: prior precision lambda_0 must be > 0");
  }
  SUBCASE("NaN in k (binary64)") {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    kla_inputs<double> in{tensor<double>("q", {1, 2, 2}, 1.0),
                          tensor<double>("k", {1, 2, 2}, 1.0),
                          tensor<double>("v", {1, 2, 1}, 1.0),
                          tensor<double>("Lambda", {1}, 1.0),
                          tensor<double>("a_bar", {1, 2}, 0.5),
                          tensor<double>("p_bar", {1, 2}, 0.25),
                          std::nullopt,
                          std::nullopt};
    in.k(0, 0, 1) = nan;
    CHECK_THROWS_WITH_AS(kla_forward(in), "k: element [0, 0, 1] is nan; rule: must be finite (no NaN or infinity)",
                         input_error);
    in.k(0, 0, 1) = 1.0;
    in.p_bar(0, 1) = std::numeric_limits<double>::infinity();
    CHECK_THROWS_WITH_AS(kla_forward(in), "p_bar: element [0, 1] is inf; rule: must be finite (no NaN or infinity)",
                         input_error);
  }
  SUBCASE("T = 0") {
    kla_inputs<R> in = hand_example();
    in.q = tensor<R>("q", {1, 0, 2});
    in.k = tensor<R>("k", {1, 0, 2});
    in.v = tensor<R>("v", {1, 0, 1});
    CHECK(error_of(in) == "k: T = 0 tokens; rule: a sequence needs at least one token");
    CHECK_THROWS_WITH_AS(kla_parallel_forward(in), "k: T = 0 tokens; rule: a sequence needs at least one token",
                         input_error);
  }
  SUBCASE("shape mismatch between v and Lambda") {
    kla_inputs<R> in = hand_example();
    in.Lambda = tensor<R>("Lambda", {1, 2, 3}, R(1));  // v has M = 1
    CHECK(error_of(in) == "Lambda: shape [1, 2, 3] cannot broadcast to [1, 2, 1] (dimension 2 is 3, expected 1 or 1)");
    in.v = tensor<R>("v", {1, 2, 2}, R(1));  // now M = 2, Lambda's M = 3
    CHECK(error_of(in) == "Lambda: shape [1, 2, 3] cannot broadcast to [1, 2, 2] (dimension 2 is 3, expected 2 or 1)");
  }
  SUBCASE("other shape errors") {
    kla_inputs<R> in = hand_example();
    in.q = tensor<R>("q", {1, 2, 3});
    CHECK(error_of(in) == "q: shape [1, 2, 3], expected [1, 2, 2]");
    in = hand_example();
    in.v = tensor<R>("v", {1, 3, 1});
    CHECK(error_of(in) == "v: shape [1, 3, 1], expected [1, 2, M] (B and T of k)");
    in = hand_example();
    in.a_bar = tensor<R>("a_bar", {3, 2}, R(1));
    CHECK(error_of(in) == "a_bar: shape [3, 2] cannot broadcast to [1, 2, 1, 2] (dimension 2 is 3, expected 1 or 1)");
    in = hand_example();
    in.k = tensor<R>("k", {2, 2});
    CHECK(error_of(in) == "k: shape [2, 2], expected [B, T, S] (rank 3)");
  }
  SUBCASE("the scan form validates the same way, and rejects chunk size 0") {
    kla_inputs<R> in = hand_example();
    in.Lambda(0, 0, 0) = -3;
    CHECK_THROWS_WITH_AS(kla_parallel_forward(in),
                         "Lambda: element [0, 0, 0] is -3; rule: value precision Lambda must be > 0", input_error);
    CHECK_THROWS_WITH_AS(kla_parallel_forward(hand_example(), {scan_schedule::chunked, rescale_mode::none, 0}),
                         "kla_parallel_forward: chunk_size must be >= 1, got 0", std::invalid_argument);
  }
}

TEST_CASE("kla: ā and p̄ from the OU prior, broadcast") {
  precision_scope scope(128);
  using M = mpfr_real;
  // a [M, S] = [1, 2], Delta per token [1, 2, 1, 1], p scalar.
  const tensor<M> rate("a", {1, 2}, std::vector<M>{M(-1), M(0)});
  const tensor<M> step("Delta", {1, 2, 1, 1}, std::vector<M>{M(0.5), M(0.25)});
  const tensor<M> diffusion("p", {1}, M(2));
  const auto ou = kla_ou_discretise(rate, step, diffusion);
  CHECK(ou.a_bar.shape() == shape_t{1, 2, 1, 2});
  CHECK(ou.p_bar.name() == "p_bar");
  for (std::size_t t = 0; t < 2; ++t)
    for (std::size_t s = 0; s < 2; ++s) {
      const auto expected = ou_discretise(rate(0, s), step(0, t, 0, 0), M(2));
      CHECK(ou.a_bar(0, t, 0, s) == expected.decay);
      CHECK(ou.p_bar(0, t, 0, s) == expected.process_noise);
    }
  // a = 0: ā = 1, p̄ = p Delta exactly.
  CHECK(ou.a_bar(0, 1, 0, 1) == 1);
  CHECK(ou.p_bar(0, 1, 0, 1) == M(0.5));
  const auto zoh = kla_ou_discretise(rate, step, diffusion, kla_ou_variant::zero_order_hold);
  CHECK(zoh.p_bar(0, 0, 0, 0) == M(1));  // p Delta = 2 * 0.5
  // Bad arguments name the tensor and the element.
  const tensor<M> positive_rate("a", {2}, std::vector<M>{M(-1), M(3)});
  CHECK_THROWS_WITH_AS(kla_ou_discretise(positive_rate, step, diffusion),
                       "a: element [1] is 3; rule: OU rate a must be <= 0", input_error);
  const tensor<M> clash("Delta", {3}, M(1));
  CHECK_THROWS_WITH_AS(kla_ou_discretise(rate, clash, diffusion),
                       "Delta: shape [3] cannot broadcast with the other OU parameters (its dimension 0 is 3, the "
                       "others have 2)",
                       input_error);
}
