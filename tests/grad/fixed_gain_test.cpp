// grad/fixed_gain.hpp: a hand-worked DeltaNet gradient, log against linear gates, the GDN gate
// (one per head), special cases, and the binary64 adjoint against the MPFR one.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "kalman_oracle/grad/compare.hpp"
#include "kalman_oracle/grad/fixed_gain.hpp"
#include "kalman_oracle/grad/fixed_gain_chunked.hpp"
#include "kalman_oracle/scalar/precision_scope.hpp"

using namespace kalman_oracle;
using R = rational;

TEST_CASE("grad: DeltaNet hand-worked gradient (K = V = 1, one token)") {
  // S_1 = s + βk(v − ks) = 2 + (1/2)(3 − 2) = 5/2, o = τ q S_1 with τ = q = 1, do = 1:
  //   dq = τS_1 = 5/2, dβ = k(v − ks)τq = 1, dv = βkτq = 1/2, dk = τqβ(v − 2ks) = −1/2,
  //   dS_0 = τq(1 − βk²) = 1/2, dτ = qS_1 = 5/2.
  fixed_gain_inputs<R> in;
  in.rule = fixed_gain_rule::delta_net;
  in.q = tensor<R>("q", {1, 1, 1, 1}, std::vector<R>{1});
  in.k = tensor<R>("k", {1, 1, 1, 1}, std::vector<R>{1});
  in.v = tensor<R>("v", {1, 1, 1, 1}, std::vector<R>{3});
  in.beta = tensor<R>("beta", {1}, std::vector<R>{R(1, 2)});
  in.initial_state = tensor<R>("initial_state", {1, 1, 1, 1}, std::vector<R>{2});
  in.scale = R(1);
  const gradients<R> g = fixed_gain_backward(in, cotangents<R>{tensor<R>("o", {1, 1, 1, 1}, std::vector<R>{1})});
  CHECK(g.at("q").data()[0] == R(5, 2));
  CHECK(g.at("beta").data()[0] == 1);
  CHECK(g.at("v").data()[0] == R(1, 2));
  CHECK(g.at("k").data()[0] == R(-1, 2));
  CHECK(g.at("initial_state").data()[0] == R(1, 2));
  CHECK(g.at("scale").data()[0] == R(5, 2));
  CHECK(!g.contains("g"));
}

namespace {
fixed_gain_inputs<double> kda_example(gate_space gates) {
  fixed_gain_inputs<double> in;
  in.rule = fixed_gain_rule::kda;
  in.gates = gates;
  const std::size_t B = 1, T = 3, H = 2, K = 2, V = 3;
  auto fill = [](const char* name, shape_t shape, double a) {
    tensor<double> x(name, shape);
    for (std::size_t i = 0; i < x.size(); ++i) x.data()[i] = std::sin(a * double(i + 1));
    return x;
  };
  in.q = fill("q", {B, T, H, K}, 1.0);
  in.k = fill("k", {B, T, H, K}, 2.0);
  in.v = fill("v", {B, T, H, V}, 3.0);
  tensor<double> g("g", {B, T, H, K});
  for (std::size_t i = 0; i < g.size(); ++i) g.data()[i] = -0.1 * double(i % 5) - 0.05;
  if (gates == gate_space::linear)
    for (double& x : g.data()) x = std::exp(x);
  in.g = g;
  in.beta = fill("beta", {H}, 0.5);
  return in;
}
}  // namespace

TEST_CASE("grad: log gates are the linear gates' gradient times alpha (binary64)") {
  const auto log_in = kda_example(gate_space::log), lin_in = kda_example(gate_space::linear);
  const tensor<double> d_o("o", {1, 3, 2, 3}, 1.0);
  const auto g_log = fixed_gain_backward(log_in, cotangents<double>{d_o});
  const auto g_lin = fixed_gain_backward(lin_in, cotangents<double>{d_o});
  for (std::size_t i = 0; i < g_log.at("g").size(); ++i)
    CHECK(g_log.at("g").data()[i] == doctest::Approx(g_lin.at("g").data()[i] * lin_in.g->data()[i]).epsilon(1e-14));
  CHECK(g_log.at("q").data() == g_lin.at("q").data());
}

TEST_CASE("grad: the binary64 adjoint is within 1e-13 of the MPFR adjoint (KDA, given gain)") {
  auto in = kda_example(gate_space::log);
  const cotangents<double> cot{tensor<double>("o", {1, 3, 2, 3}, 0.5),
                               tensor<double>("final_state", {1, 2, 2, 3}, -1.0)};
  const auto g64 = fixed_gain_backward(in, cot);
  precision_scope scope(256);
  auto lift = [](const tensor<double>& x) {
    tensor<mpfr_real> y(x.name(), x.shape());
    for (std::size_t i = 0; i < x.size(); ++i) y.data()[i] = from_double<mpfr_real>(x.data()[i]);
    return y;
  };
  const auto in_mp =
      fixed_gain_model::transform<mpfr_real>(in, [&](const std::string&, const tensor<double>& x) { return lift(x); });
  cotangents<mpfr_real> cot_mp;
  for (const auto& c : cot.items()) cot_mp.set(lift(c));
  const auto gmp = fixed_gain_backward(in_mp, cot_mp);
  gradients<mpfr_real> g64_mp;
  for (const auto& x : g64.items()) g64_mp.set(lift(x));
  const auto d = compare_gradients(g64_mp, gmp);
  CHECK(d.shapes_match);
  CHECK(to_double(d.max_abs_difference) <= 1e-13 * to_double(d.scale));
}

TEST_CASE("grad: GDN's gate is one per head: its gradient is KDA's summed over channels") {
  fixed_gain_inputs<R> gdn;
  gdn.rule = fixed_gain_rule::gated_delta_net;
  gdn.gates = gate_space::linear;
  gdn.q = tensor<R>("q", {1, 2, 1, 2}, std::vector<R>{1, 2, -1, 1});
  gdn.k = tensor<R>("k", {1, 2, 1, 2}, std::vector<R>{1, 0, R(1, 2), 1});
  gdn.v = tensor<R>("v", {1, 2, 1, 1}, std::vector<R>{3, -2});
  gdn.g = tensor<R>("g", {1, 2, 1}, std::vector<R>{R(1, 2), R(3, 4)});
  gdn.beta = tensor<R>("beta", {1, 2, 1}, std::vector<R>{R(1, 3), 1});
  gdn.scale = R(1);
  fixed_gain_inputs<R> kda = gdn;
  kda.rule = fixed_gain_rule::kda;
  kda.g = tensor<R>("g", {1, 2, 1, 2}, std::vector<R>{R(1, 2), R(1, 2), R(3, 4), R(3, 4)});
  const cotangents<R> cot{tensor<R>("o", {1, 2, 1, 1}, std::vector<R>{1, 1})};
  const auto a = fixed_gain_backward(gdn, cot), b = fixed_gain_backward(kda, cot);
  CHECK(a.at("g").data()[0] == b.at("g").data()[0] + b.at("g").data()[1]);
  CHECK(a.at("g").data()[1] == b.at("g").data()[2] + b.at("g").data()[3]);
  for (const char* name : {"q", "k", "v", "beta", "initial_state", "scale"})
    CHECK(a.at(name).data() == b.at(name).data());
}

TEST_CASE("grad: the chunked (WY) adjoint equals the sequential adjoint for every chunk size") {
  for (const gate_space gates : {gate_space::log, gate_space::linear}) {
    const auto in = kda_example(gates);
    const cotangents<double> cot{tensor<double>("o", {1, 3, 2, 3}, 0.5),
                                 tensor<double>("final_state", {1, 2, 2, 3}, -1.0)};
    const auto sequential = fixed_gain_backward(in, cot);
    for (const std::size_t chunk : {1, 2, 3, 8}) {
      const auto chunked = fixed_gain_chunked_backward(in, cot, chunk);
      const auto d = compare_gradients(chunked, sequential);
      CHECK(d.shapes_match);
      CHECK(d.max_abs_difference <= 1e-14 * d.scale);
    }
  }
  CHECK_THROWS_AS(fixed_gain_chunked_backward(kda_example(gate_space::log), cotangents<double>{}, 0), input_error);
}

TEST_CASE("grad: the chunked adjoint through strongly decaying chunks equals the sequential adjoint") {
  // Log gates scaled from [−0.45, −0.05] a token: ×100 (−5 to −45) mixes chunks factored and taken
  // difference first (models/fixed_gain_chunked.hpp, factored_log_decay_floor); ×2000 (−100 to −900) puts
  // every chunk past binary64's e^{−G}, where the factored adjoint was not finite.
  for (const double s : {100.0, 2000.0}) {
    CAPTURE(s);
    auto in = kda_example(gate_space::log);
    for (double& g : in.g->data()) g *= s;
    const cotangents<double> cot{tensor<double>("o", {1, 3, 2, 3}, 0.5),
                                 tensor<double>("final_state", {1, 2, 2, 3}, -1.0)};
    const auto sequential = fixed_gain_backward(in, cot);
    for (const std::size_t chunk : {1, 2, 3, 8}) {
      CAPTURE(chunk);
      const auto chunked = fixed_gain_chunked_backward(in, cot, chunk);
      const auto d = compare_gradients(chunked, sequential);
      CHECK(d.shapes_match);
      CHECK(d.max_abs_difference <= 1e-14 * d.scale);
    }
  }
}
