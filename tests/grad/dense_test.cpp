// grad/dense.hpp: K = 1 against the diagonal KDN (μ = 1, the same filter), symmetric gradients of
// P_0 and Ω, the absent transition (D = I) and the information form's extra outputs.
#include <doctest/doctest.h>

#include <vector>

#include "kalman_oracle/grad/dense.hpp"
#include "kalman_oracle/grad/diagonal.hpp"
#include "kalman_oracle/grad/truth.hpp"

using namespace kalman_oracle;
using R = rational;

namespace {
tensor<R> ramp(const char* name, shape_t shape, long offset = 0) {
  tensor<R> x(name, shape);
  for (std::size_t i = 0; i < x.size(); ++i) x.data()[i] = R(static_cast<long>(i % 5) - 2 + offset, 3);
  return x;
}
}  // namespace

TEST_CASE("grad: dense with K = 1 has the diagonal KDN's gradient (mu = 1)") {
  const std::size_t B = 1, T = 3, H = 2, V = 2;
  diagonal_kdn_inputs<R> d;
  d.q = ramp("q", {B, T, H, 1});
  d.k = ramp("k", {B, T, H, 1}, 1);
  d.v = ramp("v", {B, T, H, V}, -1);
  d.g = tensor<R>("g", {B, T, H, 1}, std::vector<R>{R(1, 2), 1, R(2, 3), R(3, 4), R(1, 5), R(9, 10)});
  d.gates = gate_space::linear;
  d.omega = tensor<R>("omega", {B, T, H, 1}, std::vector<R>{1, 0, R(1, 2), 2, R(1, 3), 1});
  d.r = tensor<R>("r", {B, T, H}, std::vector<R>{1, 2, R(1, 2), 3, 1, R(5, 4)});
  d.mu = tensor<R>("mu", {1}, R(1));
  d.initial_covariance = tensor<R>("initial_covariance", {B, H, 1}, std::vector<R>{2, R(1, 3)});
  d.initial_state = ramp("initial_state", {B, H, 1, V});
  d.scale = R(2);

  dense_inputs<R> m;
  m.q = d.q, m.k = d.k, m.v = d.v, m.r = d.r, m.initial_state = d.initial_state, m.scale = d.scale;
  m.transition = dense_transition<R>::diagonal(d.g, gate_space::linear);
  m.process_noise = dense_process_noise<R>::diagonal(d.omega);
  m.initial_covariance = tensor<R>("initial_covariance", {B, H, 1, 1}, d.initial_covariance->data());

  const cotangents<R> cd{ramp("o", {B, T, H, V}), ramp("final_state", {B, H, 1, V}, 1),
                         ramp("final_covariance", {B, H, 1}, 2), ramp("readout_variance", {B, T, H}, -2)};
  const cotangents<R> cm{ramp("o", {B, T, H, V}), ramp("final_state", {B, H, 1, V}, 1),
                         ramp("final_covariance", {B, H, 1, 1}, 2), ramp("readout_variance", {B, T, H}, -2)};
  const auto gd = diagonal_kdn_backward(d, cd);
  const auto gm = dense_backward(m, cm);
  for (const char* name : {"q", "k", "v", "r", "initial_state", "initial_covariance", "scale"})
    CHECK_MESSAGE(gm.at(name).data() == gd.at(name).data(), name);
  CHECK(gm.at("transition").data() == gd.at("g").data());
  CHECK(gm.at("process_noise").data() == gd.at("omega").data());
}

TEST_CASE("grad: dense gradients of P_0 and a full Omega are symmetric, and D = I is differentiated in full") {
  const std::size_t B = 1, T = 2, H = 1, K = 2, V = 1;
  dense_inputs<R> m;
  m.q = ramp("q", {B, T, H, K});
  m.k = ramp("k", {B, T, H, K}, 1);
  m.v = ramp("v", {B, T, H, V}, 2);
  m.r = tensor<R>("r", {1}, R(1, 2));
  m.process_noise = dense_process_noise<R>::full(tensor<R>("Omega", {K, K}, std::vector<R>{2, 1, 1, 3}));
  m.initial_covariance = tensor<R>("P0", {K, K}, std::vector<R>{1, R(1, 2), R(1, 2), 2});
  m.scale = R(1, 3);
  const cotangents<R> cot{ramp("o", {B, T, H, V}), ramp("final_covariance", {B, H, K, K}, 1),
                          ramp("innovation_variance", {B, T, H}), ramp("mahalanobis", {B, T, H}, 1)};
  const auto g = dense_backward(m, cot);
  const auto& p0 = g.at("initial_covariance");
  const auto& w = g.at("process_noise");
  CHECK(p0.shape() == shape_t{K, K});
  CHECK(p0(0, 1) == p0(1, 0));
  CHECK(w(0, 1) == w(1, 0));
  CHECK(g.at("transition").shape() == shape_t{B, T, H, K, K});  // absent D = I
  dense_inputs<R> with_identity = m;
  with_identity.transition = dense_transition<R>::full(tensor<R>("D", {K, K}, std::vector<R>{1, 0, 0, 1}));
  const auto gi = dense_backward(with_identity, cot);
  R sum[4] = {0, 0, 0, 0};
  for (std::size_t t = 0; t < T; ++t)
    for (std::size_t x = 0; x < K * K; ++x) sum[x] += g.at("transition").data()[t * K * K + x];
  for (std::size_t x = 0; x < K * K; ++x) CHECK(gi.at("transition").data()[x] == sum[x]);
  // The tape (symmetrised) agrees, for both forms.
  for (const bool information : {false, true}) {
    const auto taped = tape_gradients(dense_model{information}, with_identity, cot);
    for (const auto& x : taped.items()) CHECK_MESSAGE(gi.at(x.name()).data() == x.data(), x.name());
  }
}

TEST_CASE("grad: the information form's Y_T and H_T cotangents") {
  dense_inputs<R> m;
  m.q = ramp("q", {1, 2, 1, 2});
  m.k = ramp("k", {1, 2, 1, 2}, 1);
  m.v = ramp("v", {1, 2, 1, 1}, 2);
  m.r = tensor<R>("r", {1}, R(1));
  m.scale = R(1);
  const cotangents<R> cot{ramp("final_precision", {1, 1, 2, 2}), ramp("final_information", {1, 1, 2, 1}, 1)};
  const auto g = information_backward(m, cot);
  const auto taped = tape_gradients(dense_model{true}, m, cot);
  for (const auto& x : taped.items()) CHECK_MESSAGE(g.at(x.name()).data() == x.data(), x.name());
}
