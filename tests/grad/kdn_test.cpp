// grad/diagonal.hpp and grad/isotropic.hpp: K = 1 (the two models coincide, so must their
// gradients), absent priors and μ (= the explicit defaults), the tape on a small case, and the
// cotangents of the internals (p̂_t, κ_t or β_t) against the tape.
#include <doctest/doctest.h>

#include <optional>
#include <vector>

#include "kalman_oracle/grad/diagonal.hpp"
#include "kalman_oracle/grad/isotropic.hpp"
#include "kalman_oracle/grad/truth.hpp"

using namespace kalman_oracle;
using R = rational;

namespace {
template <class Inputs>
Inputs example(std::size_t K, bool diagonal) {
  const std::size_t B = 1, T = 3, H = 2, V = 2;
  auto fill = [](const char* name, shape_t shape, int a, bool positive) {
    tensor<R> x(name, shape);
    for (std::size_t i = 0; i < x.size(); ++i) {
      const long n = static_cast<long>((i * 5 + static_cast<std::size_t>(a)) % 7) - (positive ? -1 : 3);
      x.data()[i] = R(n, 1 + static_cast<long>(i % 3));
    }
    return x;
  };
  Inputs in;
  in.q = fill("q", {B, T, H, K}, 1, false);
  in.k = fill("k", {B, T, H, K}, 2, false);
  in.v = fill("v", {B, T, H, V}, 3, false);
  in.g = fill("g", {B, T, H, K}, 4, true);
  for (R& a : in.g.data()) a = a / (1 + a);
  in.gates = gate_space::linear;
  in.omega = fill("omega", diagonal ? shape_t{B, T, H, K} : shape_t{B, T, H}, 5, true);
  in.r = fill("r", {B, T, H}, 6, true);
  in.mu = fill("mu", {H}, 1, true);
  in.initial_covariance = fill("initial_covariance", diagonal ? shape_t{B, H, K} : shape_t{B, H}, 2, true);
  in.initial_state = fill("initial_state", {B, H, K, V}, 3, false);
  in.scale = R(1, 2);
  return in;
}

template <class T>
cotangents<T> all_cotangents(std::size_t K, bool diagonal) {
  auto ramp = [](const char* name, shape_t shape) {
    tensor<R> x(name, shape);
    for (std::size_t i = 0; i < x.size(); ++i) x.data()[i] = R(static_cast<long>(i % 5) - 2, 3);
    return x;
  };
  return {ramp("o", {1, 3, 2, 2}), ramp("final_state", {1, 2, K, 2}),
          ramp("final_covariance", diagonal ? shape_t{1, 2, K} : shape_t{1, 2}), ramp("readout_variance", {1, 3, 2})};
}
}  // namespace

TEST_CASE("grad: with K = 1 the diagonal and isotropic KDN gradients coincide (any mu)") {
  const auto d = example<diagonal_kdn_inputs<R>>(1, true);
  auto s = example<isotropic_kdn_inputs<R>>(1, false);
  s.omega = tensor<R>("omega", {1, 3, 2}, d.omega.data());
  s.initial_covariance = tensor<R>("initial_covariance", {1, 2}, d.initial_covariance->data());
  const auto gd = diagonal_kdn_backward(d, all_cotangents<R>(1, true));
  const auto gs = isotropic_kdn_backward(s, all_cotangents<R>(1, false));
  for (const auto& x : gd.items()) CHECK_MESSAGE(gs.at(x.name()).data() == x.data(), x.name());
}

TEST_CASE("grad: KDN gradients of absent mu, priors and scale equal those of the explicit defaults") {
  auto d = example<diagonal_kdn_inputs<R>>(4, true);
  d.mu.reset(), d.initial_covariance.reset(), d.initial_state.reset(), d.scale.reset();  // K = 4: τ = 1/2
  const auto implicit = diagonal_kdn_backward(d, all_cotangents<R>(4, true));
  CHECK(implicit.at("mu").shape() == shape_t{2});
  CHECK(implicit.at("initial_covariance").shape() == shape_t{1, 2, 4});
  CHECK(implicit.at("initial_state").shape() == shape_t{1, 2, 4, 2});
  auto e = d;
  e.mu = tensor<R>("mu", {2}, R(4));
  e.initial_covariance = tensor<R>("initial_covariance", {1, 2, 4}, R(1));
  e.initial_state = tensor<R>("initial_state", {1, 2, 4, 2}, R(0));
  e.scale = R(1, 2);
  const auto explicit_g = diagonal_kdn_backward(e, all_cotangents<R>(4, true));
  for (const auto& x : explicit_g.items()) CHECK_MESSAGE(implicit.at(x.name()).data() == x.data(), x.name());
  const auto taped = tape_gradients(diagonal_kdn_model{}, e, all_cotangents<R>(4, true));
  for (const auto& x : taped.items()) CHECK_MESSAGE(explicit_g.at(x.name()).data() == x.data(), x.name());
}

TEST_CASE("grad: isotropic KDN adjoint equals the tape of both forms on a worked example") {
  const auto s = example<isotropic_kdn_inputs<R>>(3, false);
  const auto cot = all_cotangents<R>(3, false);
  const auto g = isotropic_kdn_backward(s, cot);
  for (const auto& model : {isotropic_kdn_model{}, isotropic_kdn_model{kdn_scan_options{}}}) {
    const auto taped = tape_gradients(model, s, cot);
    CHECK(taped.items().size() == g.items().size());
    for (const auto& x : taped.items()) CHECK_MESSAGE(g.at(x.name()).data() == x.data(), x.name());
  }
}

TEST_CASE("grad: KDN adjoints of the internals (prediction and gain) equal the tape, both forms") {
  // Only the gain path's cotangents (the GPU gain backward's inputs): the memory's adjoint is zero.
  const auto ramp = [](const char* name, shape_t shape, long shift) {
    tensor<R> x(name, shape);
    for (std::size_t i = 0; i < x.size(); ++i) x.data()[i] = R(static_cast<long>((i + shift) % 7) - 3, 5);
    return x;
  };
  for (const bool diagonal : {true, false}) {
    const std::size_t K = 3;
    const shape_t per_token = diagonal ? shape_t{1, 3, 2, K} : shape_t{1, 3, 2};
    const cotangents<R> cot{ramp("predicted_covariance", per_token, 1), ramp(diagonal ? "gain" : "beta", per_token, 2),
                            ramp("readout_variance", {1, 3, 2}, 3),
                            ramp("final_covariance", diagonal ? shape_t{1, 2, K} : shape_t{1, 2}, 4)};
    for (const bool parallel : {false, true}) {
      const std::optional<kdn_scan_options> scan = parallel ? std::optional(kdn_scan_options{}) : std::nullopt;
      INFO((diagonal ? "diagonal" : "isotropic") << (parallel ? ", parallel" : ", sequential"));
      if (diagonal) {
        const auto in = example<diagonal_kdn_inputs<R>>(K, true);
        const auto g = diagonal_kdn_backward(in, cot);
        const auto taped = tape_gradients(diagonal_kdn_model{scan, true}, in, cot);
        for (const auto& x : taped.items()) CHECK_MESSAGE(g.at(x.name()).data() == x.data(), x.name());
        CHECK(g.at("v").data() == std::vector<R>(g.at("v").size(), R(0)));  // the memory has no cotangent
      } else {
        const auto in = example<isotropic_kdn_inputs<R>>(K, false);
        const auto g = isotropic_kdn_backward(in, cot);
        const auto taped = tape_gradients(isotropic_kdn_model{scan, true}, in, cot);
        for (const auto& x : taped.items()) CHECK_MESSAGE(g.at(x.name()).data() == x.data(), x.name());
      }
    }
  }
}
