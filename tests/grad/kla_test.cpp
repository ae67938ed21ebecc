// grad/kla.hpp: a hand-worked gradient, the defaults of the prior, broadcasting, bad cotangents.
#include <doctest/doctest.h>

#include <optional>
#include <vector>

#include "kalman_oracle/grad/kla.hpp"
#include "kalman_oracle/grad/truth.hpp"

using namespace kalman_oracle;
using R = rational;

namespace {
/// B = T = M = S = 1: q = 1, k = 1, v = 3, Λ = 2, ā = 1/2, p̄ = 1, defaults λ_0 = 1, η_0 = 0.
kla_inputs<R> one_element() {
  return {tensor<R>("q", {1, 1, 1}, std::vector<R>{1}),
          tensor<R>("k", {1, 1, 1}, std::vector<R>{1}),
          tensor<R>("v", {1, 1, 1}, std::vector<R>{3}),
          tensor<R>("Lambda", {1}, std::vector<R>{2}),
          tensor<R>("a_bar", {1}, std::vector<R>{R(1, 2)}),
          tensor<R>("p_bar", {1}, std::vector<R>{1}),
          std::nullopt,
          std::nullopt};
}
}  // namespace

TEST_CASE("grad: KLA hand-worked gradient of y (one element, one token)") {
  // den = ā² + p̄ λ_0 = 5/4, λ_1 = 4/5 + Λk² = 14/5, η_1 = 0 + vΛk = 6, y = qη_1/λ_1 = 15/7.
  // With dy = 1: η̄ = 1/λ_1 = 5/14, λ̄ = −η_1/λ_1² = −75/98, ᾱ = η̄ η_0 = 0,
  //   dq = η_1/λ_1 = 15/7, dv = η̄ Λk = 5/7, dΛ = λ̄ k² + η̄ v k = 15/49, dk = 2Λkλ̄ + η̄vΛ = −45/49,
  //   den̄ = −λ̄ λ_0/den² = 48/98 = 24/49: dā = 2ā den̄ = 24/49, dp̄ = den̄ λ_0 = 24/49,
  //   dλ_0 = λ̄ ā²/den² = −6/49, dη_0 = (ā/den) η̄ = 1/7.
  const kla_inputs<R> in = one_element();
  cotangents<R> cot{tensor<R>("y", {1, 1, 1}, std::vector<R>{1})};
  const gradients<R> g = kla_backward(in, cot);
  CHECK(g.at("q").data()[0] == R(15, 7));
  CHECK(g.at("v").data()[0] == R(5, 7));
  CHECK(g.at("Lambda").data()[0] == R(15, 49));
  CHECK(g.at("k").data()[0] == R(-45, 49));
  CHECK(g.at("a_bar").data()[0] == R(24, 49));
  CHECK(g.at("p_bar").data()[0] == R(24, 49));
  CHECK(g.at("lambda_0").shape() == shape_t{1, 1, 1});  // absent: reported in full shape
  CHECK(g.at("lambda_0").data()[0] == R(-6, 49));
  CHECK(g.at("eta_0").data()[0] == R(1, 7));
}

TEST_CASE("grad: KLA gradients of absent priors equal those of the explicit defaults") {
  kla_inputs<R> in = one_element();
  in.q = tensor<R>("q", {2, 3, 2}, std::vector<R>{1, -1, 2, 1, R(1, 2), 3, -2, 1, 1, 1, 0, 2});
  in.k = tensor<R>("k", {2, 3, 2}, std::vector<R>{2, 1, -1, 1, 1, R(1, 3), 1, 2, -1, 3, 1, 1});
  in.v = tensor<R>("v", {2, 3, 1}, std::vector<R>{1, 2, -3, R(1, 2), 0, 4});
  cotangents<R> cot{tensor<R>("y", {2, 3, 1}, std::vector<R>{1, -1, 2, 1, 1, -2}),
                    tensor<R>("final_lambda", {2, 1, 2}, std::vector<R>{1, 2, 3, 4})};
  const gradients<R> implicit = kla_backward(in, cot);
  kla_inputs<R> explicit_in = in;
  explicit_in.lambda_0 = tensor<R>("lambda_0", {2, 1, 2}, R(1));
  explicit_in.eta_0 = tensor<R>("eta_0", {2, 1, 2}, R(0));
  const gradients<R> explicit_g = kla_backward(explicit_in, cot);
  for (const auto& x : explicit_g.items()) CHECK(implicit.at(x.name()).data() == x.data());
  // Static [M, S] parameters: their gradient is the sum of the per-token, per-row gradients.
  kla_inputs<R> full = explicit_in;
  full.a_bar = tensor<R>("a_bar", {2, 3, 1, 2}, R(1, 2));
  full.p_bar = tensor<R>("p_bar", {2, 3, 1, 2}, R(1));
  full.Lambda = tensor<R>("Lambda", {2, 3, 1}, R(2));
  const gradients<R> per_token = kla_backward(full, cot);
  R sum_a(0), sum_L(0);
  for (const R& x : per_token.at("a_bar").data()) sum_a += x;
  for (const R& x : per_token.at("Lambda").data()) sum_L += x;
  CHECK(implicit.at("a_bar").shape() == shape_t{1});
  CHECK(implicit.at("a_bar").data()[0] == sum_a);
  CHECK(implicit.at("Lambda").data()[0] == sum_L);
  // And the tape agrees.
  const gradients<R> taped = tape_gradients(kla_model{}, explicit_in, cot);
  for (const auto& x : taped.items()) CHECK(explicit_g.at(x.name()).data() == x.data());
}

TEST_CASE("grad: KLA rejects unknown or misshapen cotangents") {
  const kla_inputs<R> in = one_element();
  CHECK_THROWS_WITH_AS(kla_backward(in, cotangents<R>{tensor<R>("o", {1, 1, 1})}),
                       "cotangent o: kla has no output of that name; outputs: y y_var final_lambda final_eta",
                       input_error);
  CHECK_THROWS_WITH_AS(kla_backward(in, cotangents<R>{tensor<R>("y", {1, 2, 1})}),
                       "cotangent y: shape [1, 2, 1], expected the output's shape [1, 1, 1]", input_error);
}
