// Equalities between the models (docs/math.md §1, §4, §5, §7), exactly over rationals:
//   - isotropic KDN = KDA fed the isotropic model's beta_t;
//   - diagonal KDN = the given-gain (two-key) rule fed its kappa_t; and the KDN memory path with
//     kappa = beta k = KDA;
//   - one-hot keys (k_t = c e_j) with diagonal D, Omega, P_0: dense = diagonal KDN with mu = 1
//     (outputs, state, and P_T = diag(p_T));
//   - K = 1: dense = diagonal (mu = 1) = isotropic (mu = 1), and diagonal = isotropic for any mu.
// Each side is computed by a different model file, so a bug in either breaks the equality
// (meta-tests in properties/meta_tests.cmake, family "models_cross").
#include <vector>

#include "generators.hpp"
#include "kalman_oracle/models/dense.hpp"
#include "kalman_oracle/models/diagonal.hpp"
#include "kalman_oracle/models/fixed_gain.hpp"
#include "kalman_oracle/models/isotropic.hpp"
#include "kalman_oracle/models/kdn_parallel.hpp"
#include "rapidcheck_doctest.hpp"

using namespace kalman_oracle;
using R = rational;
using kalman_oracle::testing::check_property;
namespace kt = kalman_oracle::testing;

namespace {
tensor<R> random_tensor(const std::string& name, const shape_t& shape, const rc::Gen<R>& element) {
  return tensor<R>(name, shape, *rc::gen::container<std::vector<R>>(element_count(shape), element));
}
rc::Gen<R> gen_decay() {
  return rc::gen::oneOf(rc::gen::just(R(1)),
                        rc::gen::map(kt::gen_rational_positive(), [](const R& x) { return x / (1 + x); }));
}
struct sizes {
  std::size_t batch, tokens, heads, keys, values;
};
sizes gen_sizes(std::size_t keys) {
  return {*rc::gen::inRange<std::size_t>(1, 3), *rc::gen::inRange<std::size_t>(1, 7),
          *rc::gen::inRange<std::size_t>(1, 3), keys, *rc::gen::inRange<std::size_t>(1, 4)};
}

/// Keys c e_j: one non-zero channel per token, scale c != 0.
tensor<R> one_hot_keys(const sizes& n) {
  tensor<R> k("k", {n.batch, n.tokens, n.heads, n.keys});
  for (std::size_t b = 0; b < n.batch; ++b)
    for (std::size_t t = 0; t < n.tokens; ++t)
      for (std::size_t h = 0; h < n.heads; ++h)
        k(b, t, h, *rc::gen::inRange<std::size_t>(0, n.keys)) =
            *kt::gen_rational_positive() * (*rc::gen::arbitrary<bool>() ? 1 : -1);
  return k;
}

/// The diagonal KDN inputs of a random problem (mu = 1, linear decays).
diagonal_kdn_inputs<R> random_diagonal(const sizes& n, tensor<R> k) {
  const shape_t keys{n.batch, n.tokens, n.heads, n.keys};
  return {random_tensor("q", keys, kt::gen_rational()),
          std::move(k),
          random_tensor("v", {n.batch, n.tokens, n.heads, n.values}, kt::gen_rational()),
          random_tensor("g", keys, gen_decay()),
          gate_space::linear,
          random_tensor("omega", keys, kt::gen_rational_nonneg()),
          random_tensor("r", {n.batch, n.tokens, n.heads}, kt::gen_rational_positive()),
          tensor<R>("mu", {n.heads}, R(1)),
          random_tensor("initial_covariance", {n.batch, n.heads, n.keys}, kt::gen_rational_positive()),
          random_tensor("initial_state", {n.batch, n.heads, n.keys, n.values}, kt::gen_rational()),
          *kt::gen_rational_positive()};
}

/// The dense inputs with D = diag(alpha), Omega = diag(omega), P_0 = diag(p_0) of a diagonal problem.
dense_inputs<R> as_dense(const diagonal_kdn_inputs<R>& d) {
  const std::size_t B = d.q.dim(0), H = d.q.dim(2), K = d.q.dim(3);
  tensor<R> p0("initial_covariance", {B, H, K, K});
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t h = 0; h < H; ++h)
      for (std::size_t i = 0; i < K; ++i) p0(b, h, i, i) = (*d.initial_covariance)(b, h, i);
  return {d.q,
          d.k,
          d.v,
          dense_transition<R>::diagonal(d.g, gate_space::linear),
          dense_process_noise<R>::diagonal(d.omega),
          d.r,
          d.initial_state,
          p0,
          d.scale};
}

/// The isotropic inputs that coincide with a diagonal problem of K = 1 (omega and p_0 have one channel).
isotropic_kdn_inputs<R> as_isotropic(const diagonal_kdn_inputs<R>& d) {
  const std::size_t B = d.q.dim(0), N = d.q.dim(1), H = d.q.dim(2);
  return {d.q,
          d.k,
          d.v,
          d.g,
          gate_space::linear,
          tensor<R>("omega", {B, N, H}, d.omega.data()),
          d.r,
          d.mu,
          tensor<R>("initial_covariance", {B, H}, d.initial_covariance->data()),
          d.initial_state,
          d.scale};
}
}  // namespace

TEST_SUITE("models_cross") {
  TEST_CASE("models: isotropic KDN equals KDA fed its beta") {
    check_property("isotropic_kdn_is_kda_with_its_beta", [] {
      const sizes n = gen_sizes(*rc::gen::inRange<std::size_t>(1, 4));
      const auto d = random_diagonal(n, random_tensor("k", {n.batch, n.tokens, n.heads, n.keys}, kt::gen_rational()));
      const isotropic_kdn_inputs<R> iso_in{
          d.q,
          d.k,
          d.v,
          d.g,
          gate_space::linear,
          random_tensor("omega", {n.batch, n.tokens, n.heads}, kt::gen_rational_nonneg()),
          d.r,
          random_tensor("mu", {n.heads}, kt::gen_rational_positive()),
          random_tensor("initial_covariance", {n.batch, n.heads}, kt::gen_rational_positive()),
          d.initial_state,
          d.scale};
      const auto iso = isotropic_kdn_forward(iso_in, {1, true});
      fixed_gain_inputs<R> kda;
      kda.rule = fixed_gain_rule::kda;
      kda.q = d.q, kda.k = d.k, kda.v = d.v, kda.g = d.g, kda.gates = gate_space::linear;
      kda.beta = *iso.beta, kda.initial_state = d.initial_state, kda.scale = d.scale;
      const auto out = fixed_gain_forward(kda);
      RC_ASSERT(out.o.data() == iso.o.data());
      RC_ASSERT(out.final_state.data() == iso.final_state.data());
    });
  }

  TEST_CASE("models: diagonal KDN equals the two-key rule fed its kappa; kappa = beta k gives KDA") {
    check_property("diagonal_kdn_is_two_key_rule_with_its_gain", [] {
      const sizes n = gen_sizes(*rc::gen::inRange<std::size_t>(1, 4));
      auto d = random_diagonal(n, random_tensor("k", {n.batch, n.tokens, n.heads, n.keys}, kt::gen_rational()));
      d.mu = random_tensor("mu", {n.heads}, kt::gen_rational_positive());
      const auto diag = diagonal_kdn_forward(d, {1, true});
      fixed_gain_inputs<R> two_key;
      two_key.rule = fixed_gain_rule::kda;
      two_key.q = d.q, two_key.k = d.k, two_key.v = d.v, two_key.g = d.g, two_key.gates = gate_space::linear;
      two_key.gain = *diag.gain, two_key.initial_state = d.initial_state, two_key.scale = d.scale;
      const auto out = fixed_gain_forward(two_key);
      RC_ASSERT(out.o.data() == diag.o.data());
      RC_ASSERT(out.final_state.data() == diag.final_state.data());

      // The KDN memory path with kappa = beta k is KDA with beta.
      const tensor<R> beta = random_tensor("beta", {n.batch, n.tokens, n.heads}, kt::gen_rational());
      tensor<R> beta_k("gain", d.k.shape());
      for (std::size_t i = 0; i < beta_k.size(); ++i) beta_k.data()[i] = beta.data()[i / n.keys] * d.k.data()[i];
      const auto memory = kdn_memory_forward(
          kdn_memory_inputs<R>{d.q, d.k, d.v, d.g, gate_space::linear, beta_k, d.initial_state, d.scale});
      two_key.gain.reset();
      two_key.beta = beta;
      const auto kda = fixed_gain_forward(two_key);
      RC_ASSERT(memory.o.data() == kda.o.data());
      RC_ASSERT(memory.final_state.data() == kda.final_state.data());
    });
  }

  TEST_CASE("models: one-hot keys with diagonal D, Omega, P_0: dense equals diagonal KDN with mu = 1") {
    check_property("dense_one_hot_is_diagonal_kdn", [] {
      const sizes n = gen_sizes(*rc::gen::inRange<std::size_t>(1, 4));
      const auto d = random_diagonal(n, one_hot_keys(n));
      const auto diag = diagonal_kdn_forward(d);
      const auto dense = dense_forward(as_dense(d));
      RC_ASSERT(dense.o.data() == diag.o.data());
      RC_ASSERT(dense.final_state.data() == diag.final_state.data());
      RC_ASSERT(dense.readout_variance.data() == diag.readout_variance.data());
      for (std::size_t b = 0; b < n.batch; ++b)
        for (std::size_t h = 0; h < n.heads; ++h)
          for (std::size_t i = 0; i < n.keys; ++i)
            for (std::size_t j = 0; j < n.keys; ++j)
              RC_ASSERT(dense.final_covariance(b, h, i, j) == (i == j ? diag.final_covariance(b, h, i) : R(0)));
    });
  }

  TEST_CASE("models: K = 1: dense, diagonal and isotropic coincide") {
    check_property("k1_dense_diagonal_isotropic_coincide", [] {
      const sizes n = gen_sizes(1);
      auto d = random_diagonal(n, random_tensor("k", {n.batch, n.tokens, n.heads, 1}, kt::gen_rational()));
      const auto diag = diagonal_kdn_forward(d);
      const auto iso = isotropic_kdn_forward(as_isotropic(d));
      const auto dense = dense_forward(as_dense(d));
      RC_ASSERT(diag.o.data() == iso.o.data());
      RC_ASSERT(diag.o.data() == dense.o.data());
      RC_ASSERT(diag.final_state.data() == iso.final_state.data());
      RC_ASSERT(diag.final_covariance.data() == iso.final_covariance.data());
      RC_ASSERT(diag.final_covariance.data() == dense.final_covariance.data());
      // With mu != 1 the dense filter (exact Bayes) parts ways, but diagonal and isotropic agree.
      d.mu = random_tensor("mu", {n.heads}, kt::gen_rational_positive());
      RC_ASSERT(diagonal_kdn_forward(d).o.data() == isotropic_kdn_forward(as_isotropic(d)).o.data());
    });
  }
}
