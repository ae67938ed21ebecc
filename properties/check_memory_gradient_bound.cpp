// The memory models' gradient budgets (docs/error-model.md, "Gradients: first-order running error"):
// the reference's adjoint over running_error<MPFR> bounds, to first order, the same adjoint run in
// binary32; the fixtures store twice that, and this is their claim, checked element by element on
// long sequences against 256-bit results, for the fixed-gain family (GLA, DeltaNet, GDN, KDA), both
// KDNs and the dense filter (moment form; its information form has the same adjoint, grad/dense.hpp).
//
// The delta step's errors are carried norm-wise (grad/memory.hpp, memory_error_bound): the planted
// bug memory_error_bound_drops_carried forgets the error carried into a step, which long sequences
// with weak writes (errors live for many tokens) expose. The KDN covariance update has a rule of its
// own (scalar/running_error.hpp, kdn_posterior_step): the planted bug
// kdn_posterior_rule_drops_propagated forgets the predicted covariance's error there.
//
// And the forward bound of the tensor-core tiers (docs/error-model.md, "Tensor-core tiers"): the
// chunked WY form over running_error<double> with bfloat16 operands bounds, to first order, the same
// form run in binary32 with every matrix-product operand rounded to bfloat16, entry by entry and with
// the chunk-start state's errors carried norm-wise (models/wy_chunk_error_bound.hpp); the planted
// bug wy_chunk_bound_drops_carried forgets the error carried into a chunk. The chunked backward's
// bound (the f32-chunked tier's gradients) likewise, against the binary32 chunked backward.
#include <cstdint>
#include <optional>
#include <random>
#include <vector>

#include "bound_checks.hpp"
#include "kalman_oracle/grad/dense.hpp"
#include "kalman_oracle/grad/diagonal.hpp"
#include "kalman_oracle/grad/fixed_gain.hpp"
#include "kalman_oracle/grad/fixed_gain_chunked.hpp"
#include "kalman_oracle/grad/isotropic.hpp"
#include "kalman_oracle/grad/kdn_parallel.hpp"
#include "kalman_oracle/models/fixed_gain_chunked.hpp"
#include "kalman_oracle/scalar/operand_rounding.hpp"
#include "kalman_oracle/scalar/precision_scope.hpp"
#include "kalman_oracle/scalar/running_error.hpp"
#include "rapidcheck_doctest.hpp"

using namespace kalman_oracle;
using kalman_oracle::testing::check_property;
using namespace kalman_oracle::testing;

namespace {

/// One head's inputs and cotangents as binary32 values, for both families (unused fields empty).
struct float_problem {
  fixed_gain_rule rule = fixed_gain_rule::gla;
  std::size_t T = 0, K = 0, V = 0;
  std::vector<float> q, k, v, g, beta, s0, omega, r, d_o, d_state;
};

/// Unit keys, values and queries on [−1, 1], log gates on [gate_lo, 0], β on [0, beta_hi].
float_problem draw_common(std::size_t T, std::size_t K, std::size_t V, double gate_lo, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  float_problem p;
  p.T = T, p.K = K, p.V = V;
  for (std::size_t n = 0; n < T * K; ++n) p.q.push_back(uniform_float(rng, -1, 1));
  for (std::size_t t = 0; t < T; ++t)
    for (float x : float_key(rng, K, 1 - 0x1p-20)) p.k.push_back(x);
  for (std::size_t n = 0; n < T * V; ++n) p.v.push_back(uniform_float(rng, -1, 1));
  for (std::size_t n = 0; n < T * K; ++n) p.g.push_back(uniform_float(rng, gate_lo, 0));
  for (std::size_t n = 0; n < T * V; ++n) p.d_o.push_back(uniform_float(rng, -1, 1));
  for (std::size_t n = 0; n < K * V; ++n) p.d_state.push_back(uniform_float(rng, -1, 1));
  for (std::size_t n = 0; n < K * V; ++n) p.s0.push_back(uniform_float(rng, -1, 1));
  return p;
}

template <class T>
tensor<T> as_tensor(const char* name, shape_t shape, const std::vector<float>& xs) {
  return tensor<T>(name, std::move(shape), floats_as<T>(xs));
}

template <class T>
fixed_gain_inputs<T> fixed_gain_inputs_of(const float_problem& p) {
  fixed_gain_inputs<T> in;
  in.rule = p.rule;
  in.gates = gate_space::log;
  in.q = as_tensor<T>("q", {1, p.T, 1, p.K}, p.q);
  in.k = as_tensor<T>("k", {1, p.T, 1, p.K}, p.k);
  in.v = as_tensor<T>("v", {1, p.T, 1, p.V}, p.v);
  if (p.rule == fixed_gain_rule::gated_delta_net)
    in.g = as_tensor<T>("g", {1, p.T, 1}, std::vector<float>(p.g.begin(), p.g.begin() + static_cast<long>(p.T)));
  else if (p.rule != fixed_gain_rule::delta_net)
    in.g = as_tensor<T>("g", {1, p.T, 1, p.K}, p.g);
  if (p.rule != fixed_gain_rule::gla) in.beta = as_tensor<T>("beta", {1, p.T, 1}, p.beta);
  in.initial_state = as_tensor<T>("initial_state", {1, 1, p.K, p.V}, p.s0);
  return in;
}

template <class T>
dense_inputs<T> dense_inputs_of(const float_problem& p) {
  dense_inputs<T> in;
  in.q = as_tensor<T>("q", {1, p.T, 1, p.K}, p.q);
  in.k = as_tensor<T>("k", {1, p.T, 1, p.K}, p.k);
  in.v = as_tensor<T>("v", {1, p.T, 1, p.V}, p.v);
  in.transition = dense_transition<T>::diagonal(as_tensor<T>("g", {1, p.T, 1, p.K}, p.g), gate_space::log);
  if (!p.omega.empty())
    in.process_noise = dense_process_noise<T>::diagonal(as_tensor<T>("omega", {1, p.T, 1, p.K}, p.omega));
  in.r = as_tensor<T>("r", {1, p.T, 1}, p.r);
  in.initial_state = as_tensor<T>("initial_state", {1, 1, p.K, p.V}, p.s0);
  return in;
}

template <class T>
cotangents<T> cotangents_of(const float_problem& p) {
  return {as_tensor<T>("o", {1, p.T, 1, p.V}, p.d_o), as_tensor<T>("final_state", {1, 1, p.K, p.V}, p.d_state)};
}

/// A KDN's inputs (the isotropic one reads ω per head: the first T of p.omega).
template <class Inputs, class T>
Inputs kdn_inputs_of(const float_problem& p, bool isotropic) {
  Inputs in;
  in.q = as_tensor<T>("q", {1, p.T, 1, p.K}, p.q);
  in.k = as_tensor<T>("k", {1, p.T, 1, p.K}, p.k);
  in.v = as_tensor<T>("v", {1, p.T, 1, p.V}, p.v);
  in.g = as_tensor<T>("g", {1, p.T, 1, p.K}, p.g);
  in.omega = isotropic ? as_tensor<T>("omega", {1, p.T, 1},
                                      std::vector<float>(p.omega.begin(), p.omega.begin() + static_cast<long>(p.T)))
                       : as_tensor<T>("omega", {1, p.T, 1, p.K}, p.omega);
  in.r = as_tensor<T>("r", {1, p.T, 1}, p.r);
  in.initial_state = as_tensor<T>("initial_state", {1, 1, p.K, p.V}, p.s0);
  return in;
}

/// The KDN cotangents: the memory's and the covariance path's (readout variance, final covariance).
template <class T>
cotangents<T> kdn_cotangents_of(const float_problem& p, bool isotropic) {
  cotangents<T> c = cotangents_of<T>(p);
  c.set(as_tensor<T>("readout_variance", {1, p.T, 1},
                     std::vector<float>(p.d_o.begin(), p.d_o.begin() + static_cast<long>(p.T))));
  c.set(
      as_tensor<T>("final_covariance", isotropic ? shape_t{1, 1} : shape_t{1, 1, p.K},
                   std::vector<float>(p.d_state.begin(), p.d_state.begin() + static_cast<long>(isotropic ? 1 : p.K))));
  return c;
}

/// Every gradient of the binary32 adjoint within twice its first-order bound (u = 2^-24).
template <class Backward>
void assert_gradients_within_first_order_bound(Backward&& backward) {
  const auto got = backward(float{});
  precision_scope precision(256);
  const auto exact = backward(mpfr_real{});
  assert_within_first_order_bound(got, exact, backward(running_error<mpfr_real>{}));
}

/// A fixed-gain problem for the chunked forms' bounds and its chunk size: T up to 300, chunks of 4, 16
/// and 64, no decay (where entrywise bounds grow with T), weak and strong decays, weak to full writes.
struct chunked_case {
  float_problem p;
  std::size_t chunk;
};
chunked_case draw_chunked_case() {
  const auto rule = *rc::gen::element(fixed_gain_rule::gla, fixed_gain_rule::delta_net,
                                      fixed_gain_rule::gated_delta_net, fixed_gain_rule::kda);
  const std::size_t T = *rc::gen::inRange<std::size_t>(1, 300);
  const std::size_t K = *rc::gen::inRange<std::size_t>(1, 9);
  const std::size_t V = *rc::gen::inRange<std::size_t>(1, 4);
  const std::size_t chunk = *rc::gen::element<std::size_t>(4, 16, 64);
  const double beta_hi = *rc::gen::element(0.02, 1.0, 2.0);
  const double gate_lo = *rc::gen::element(0.0, -1e-3, -1.0);
  float_problem p = draw_common(T, K, V, gate_lo, *rc::gen::arbitrary<std::uint64_t>());
  p.rule = rule;
  std::mt19937_64 rng(T * 6151 + K);
  for (std::size_t t = 0; t < T; ++t) p.beta.push_back(uniform_float(rng, 0, beta_hi));
  return {std::move(p), chunk};
}

/// A KDN problem: decays none, weak or strong; observation noise from tiny (gains near projections) to
/// huge (the covariance barely contracts, so its errors add up over the tokens); process noise or none.
float_problem draw_kdn_problem(std::size_t T, std::size_t K, std::size_t V) {
  const double gate_lo = *rc::gen::element(0.0, -1e-3, -1.0);
  const double r_lo = *rc::gen::element(1e-4, 0.1, 10.0, 1e3);
  const bool process_noise = *rc::gen::arbitrary<bool>();
  float_problem p = draw_common(T, K, V, gate_lo, *rc::gen::arbitrary<std::uint64_t>());
  std::mt19937_64 rng(T * 15485863 + K);
  for (std::size_t t = 0; t < T; ++t) p.r.push_back(uniform_float(rng, r_lo, 10 * r_lo));
  for (std::size_t n = 0; n < T * K; ++n) p.omega.push_back(process_noise ? uniform_float(rng, 1e-3, 0.1) : 0.f);
  return p;
}

/// Every gradient of a binary32 chunked backward within twice the first-order bound the chunked tiers
/// store (fixtures/lib/tensor_core_tier.cpp): the same backward over running_error<double>, the
/// forward's chunk-start states' errors carried entry by entry and norm-wise, per element the smaller
/// (2^-120 absolute besides, as above). With `operands` (a tensor-core tier) both the binary32 run and
/// the bound's round every matrix-product operand to that format, associated as `factored` says
/// (grad/fixed_gain_chunked.hpp). Over exact arithmetic the chunked backward is the sequential one
/// (properties/grad_exact.cpp): its own 256-bit run is the exact gradient.
template <class Backward>
void assert_gradients_within_chunked_bound(Backward&& backward, operand_format operands = operand_format::none,
                                           bool factored = false) {
  using R = running_error<double>;
  std::optional<tensor_core_scope> rounding;
  rounding.emplace(operands);
  std::optional<factored_decays_scope> association;
  if (factored) association.emplace();
  const auto got = backward(float{});
  const auto entrywise = backward(R{});
  const auto normwise = [&] {
    normwise_chunk_bound_scope carry;
    return backward(R{});
  }();
  association.reset();
  rounding.reset();
  precision_scope precision(256);
  const auto exact = backward(mpfr_real{});
  for (const auto& g : got.items()) {
    const auto& a = entrywise.at(g.name());
    const auto& b = normwise.at(g.name());
    tensor<mpfr_real> bound(g.name(), a.shape());
    for (std::size_t i = 0; i < a.size(); ++i)
      bound.data()[i] = mpfr_real(std::min(a.data()[i].error(), b.data()[i].error()) * 0x1p-23) + mpfr_real(0x1p-120);
    assert_within_bound(g, exact.at(g.name()), bound);
  }
}

/// A KDN problem's parallel backward (isotropic or diagonal, memory chunks of 4, 16 or 64) within twice
/// its chunked first-order bound, its products' operands rounded to `operands` (none: binary32).
void check_kdn_parallel_gradients(operand_format operands, bool factored) {
  const bool isotropic = *rc::gen::arbitrary<bool>();
  const std::size_t T = *rc::gen::inRange<std::size_t>(1, 200);
  const std::size_t K = *rc::gen::inRange<std::size_t>(1, 9);
  const std::size_t V = *rc::gen::inRange<std::size_t>(1, 4);
  const std::size_t chunk = *rc::gen::element<std::size_t>(4, 16, 64);
  const float_problem p = draw_kdn_problem(T, K, V);
  const kdn_scan_options options{.memory_chunk_size = chunk};
  if (isotropic)
    assert_gradients_within_chunked_bound(
        [&]<class R>(R) {
          return isotropic_kdn_parallel_backward(kdn_inputs_of<isotropic_kdn_inputs<R>, R>(p, true),
                                                 kdn_cotangents_of<R>(p, true), options);
        },
        operands, factored);
  else
    assert_gradients_within_chunked_bound(
        [&]<class R>(R) {
          return diagonal_kdn_parallel_backward(kdn_inputs_of<diagonal_kdn_inputs<R>, R>(p, false),
                                                kdn_cotangents_of<R>(p, false), options);
        },
        operands, factored);
}

}  // namespace

TEST_SUITE("error_bound") {
  TEST_CASE("error_bound: the binary32 fixed-gain adjoints within twice their first-order running error bound") {
    check_property("fixed_gain_gradient_first_order_bound_holds", [] {
      const auto rule = *rc::gen::element(fixed_gain_rule::gla, fixed_gain_rule::delta_net,
                                          fixed_gain_rule::gated_delta_net, fixed_gain_rule::kda);
      const std::size_t T = *rc::gen::inRange<std::size_t>(1, 300);
      const std::size_t K = *rc::gen::inRange<std::size_t>(1, 9);
      const std::size_t V = *rc::gen::inRange<std::size_t>(1, 4);
      // Weak writes and decays keep errors alive for many tokens; strong ones test the contraction.
      const double beta_hi = *rc::gen::element(0.02, 1.0, 2.0);
      const double gate_lo = *rc::gen::element(-1e-3, -1.0);
      float_problem p = draw_common(T, K, V, gate_lo, *rc::gen::arbitrary<std::uint64_t>());
      p.rule = rule;
      std::mt19937_64 rng(T * 7919 + K);
      for (std::size_t t = 0; t < T; ++t) p.beta.push_back(uniform_float(rng, 0, beta_hi));
      assert_gradients_within_first_order_bound(
          [&]<class R>(R) { return fixed_gain_backward(fixed_gain_inputs_of<R>(p), cotangents_of<R>(p)); });
    });
  }

  TEST_CASE("error_bound: the chunked WY form with bfloat16 operands within twice its first-order bound") {
    check_property("wy_chunk_tensor_core_bound_holds", [] {
      auto [p, chunk] = draw_chunked_case();
      const std::size_t T = p.T, K = p.K, V = p.V;
      const bool normwise = *rc::gen::arbitrary<bool>();
      // Every token the same: each chunk then commits the same operand roundings, whose errors the
      // carry adds up coherently (what exposes a bound that forgets the carried error).
      const bool repeated = *rc::gen::arbitrary<bool>();
      if (repeated)
        for (std::size_t t = 1; t < T; ++t) {
          for (std::size_t i = 0; i < K; ++i) p.q[t * K + i] = p.q[i], p.k[t * K + i] = p.k[i], p.g[t * K + i] = p.g[i];
          for (std::size_t j = 0; j < V; ++j) p.v[t * V + j] = p.v[j];
          p.beta[t] = p.beta[0];
        }
      fixed_gain_outputs<float> got;
      fixed_gain_outputs<running_error<double>> first_order;
      {
        tensor_core_scope operands(operand_format::bf16);
        got = fixed_gain_chunked_forward(fixed_gain_inputs_of<float>(p), chunk);
        std::optional<normwise_chunk_bound_scope> carry;
        if (normwise) carry.emplace();
        first_order = fixed_gain_chunked_forward(fixed_gain_inputs_of<running_error<double>>(p), chunk);
      }
      precision_scope precision(256);
      const auto exact = fixed_gain_forward(fixed_gain_inputs_of<mpfr_real>(p));
      const auto twice = [](const tensor<running_error<double>>& e) {
        tensor<mpfr_real> bound(e.name(), e.shape());
        for (std::size_t i = 0; i < e.size(); ++i) bound.data()[i] = mpfr_real(e.data()[i].error() * 0x1p-23);
        return bound;
      };
      assert_within_bound(got.o, exact.o, twice(first_order.o));
      assert_within_bound(got.final_state, exact.final_state, twice(first_order.final_state));
    });
  }

  TEST_CASE("error_bound: the binary32 chunked fixed-gain adjoint within twice its first-order bound") {
    // The f32-chunked tier's gradient budget (docs/error-model.md, "The chunked binary32 tier"): the
    // chunked backward over running_error<double>, the forward's chunk-start states' errors carried entry
    // by entry and norm-wise, per element the smaller (fixtures/lib/tensor_core_tier.cpp).
    check_property("fixed_gain_chunked_gradient_first_order_bound_holds", [] {
      const auto [p, chunk] = draw_chunked_case();
      assert_gradients_within_chunked_bound([&]<class R>(R) {
        return fixed_gain_chunked_backward(fixed_gain_inputs_of<R>(p), cotangents_of<R>(p), chunk);
      });
    });
  }

  TEST_CASE(
      "error_bound: the chunked fixed-gain adjoint with tensor-core operands within twice its first-order bound") {
    // The tensor-core tiers' gradient budget (docs/error-model.md, "Tensor-core tiers"): the chunked
    // backward with every matrix-product operand rounded to bfloat16 or 11 bits, binary32 accumulation.
    check_property("fixed_gain_chunked_gradient_tensor_core_bound_holds", [] {
      const auto [p, chunk] = draw_chunked_case();
      const operand_format operands = *rc::gen::element(operand_format::bf16, operand_format::f16);
      const bool factored = *rc::gen::arbitrary<bool>();
      assert_gradients_within_chunked_bound(
          [&]<class R>(R) {
            return fixed_gain_chunked_backward(fixed_gain_inputs_of<R>(p), cotangents_of<R>(p), chunk);
          },
          operands, factored);
    });
  }

  TEST_CASE("error_bound: the KDN parallel adjoints with tensor-core operands within twice their first-order bound") {
    check_property("kdn_parallel_gradient_tensor_core_bound_holds",
                   [] { check_kdn_parallel_gradients(operand_format::bf16, *rc::gen::arbitrary<bool>()); });
  }

  TEST_CASE("error_bound: the binary32 KDN parallel adjoints within twice their chunked first-order bound") {
    // The KDNs' gradients under f32-chunked: their parallel form's backward (the memory's chunked
    // adjoint, then the gain path's; grad/kdn_parallel.hpp).
    check_property("kdn_parallel_gradient_first_order_bound_holds",
                   [] { check_kdn_parallel_gradients(operand_format::none, false); });
  }

  TEST_CASE("error_bound: the binary32 KDN adjoints within twice their first-order running error bound") {
    check_property("kdn_gradient_first_order_bound_holds", [] {
      const bool isotropic = *rc::gen::arbitrary<bool>();
      const std::size_t T = *rc::gen::inRange<std::size_t>(1, 200);
      const std::size_t K = *rc::gen::inRange<std::size_t>(1, 9);
      const std::size_t V = *rc::gen::inRange<std::size_t>(1, 4);
      const float_problem p = draw_kdn_problem(T, K, V);
      if (isotropic)
        assert_gradients_within_first_order_bound([&]<class R>(R) {
          return isotropic_kdn_backward(kdn_inputs_of<isotropic_kdn_inputs<R>, R>(p, true),
                                        kdn_cotangents_of<R>(p, true));
        });
      else
        assert_gradients_within_first_order_bound([&]<class R>(R) {
          return diagonal_kdn_backward(kdn_inputs_of<diagonal_kdn_inputs<R>, R>(p, false),
                                       kdn_cotangents_of<R>(p, false));
        });
    });
  }

  TEST_CASE("error_bound: the binary32 dense adjoint within twice its first-order running error bound") {
    check_property("dense_gradient_first_order_bound_holds", [] {
      const std::size_t T = *rc::gen::inRange<std::size_t>(1, 120);
      const std::size_t K = *rc::gen::inRange<std::size_t>(1, 5);
      const std::size_t V = *rc::gen::inRange<std::size_t>(1, 3);
      const double gate_lo = *rc::gen::element(-1e-3, -1.0);
      // Observation noise from tiny (the gain nearly a projection) to large; process noise or none.
      const double r_lo = *rc::gen::element(1e-4, 0.1, 10.0);
      const bool process_noise = *rc::gen::arbitrary<bool>();
      float_problem p = draw_common(T, K, V, gate_lo, *rc::gen::arbitrary<std::uint64_t>());
      std::mt19937_64 rng(T * 104729 + K);
      for (std::size_t t = 0; t < T; ++t) p.r.push_back(uniform_float(rng, r_lo, 10 * r_lo));
      if (process_noise)
        for (std::size_t n = 0; n < T * K; ++n) p.omega.push_back(uniform_float(rng, 1e-3, 0.1));
      assert_gradients_within_first_order_bound(
          [&]<class R>(R) { return dense_backward(dense_inputs_of<R>(p), cotangents_of<R>(p)); });
    });
  }
}
