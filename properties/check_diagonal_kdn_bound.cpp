// The diagonal KDN's per-element bounds (check/diagonal_kdn_bound.hpp; docs/error-model.md,
// "Diagonal KDN: contraction and a-posteriori bounds") hold: the sequential reference in binary32 is
// within them for every output and internal (memory, covariance, prediction, gain, readout variance),
// and the parallel form in binary32 (its covariance scans by a covered schedule, power-of-two
// rescaling) for the covariance path; element by element against 256-bit results.
//
// And the propagation they rest on (check/two_key_propagation.hpp) holds for any local errors of
// the stated sizes: local errors of exactly the stated norms, aligned so that they add up (the worst
// case when the steps are near the identity), pushed through the exact steps A_t = (I − κkᵀ)D in
// MPFR, stay within the propagated bound at every token; so do errors pushed through the adjoint's
// steps A_tᵀ = D(I − kκᵀ) (the memory adjoint's bound, grad/memory.hpp) and errors injected between
// the steps. There the planted bugs two_key_bound_forgets_history (a segment's carried error dropped),
// two_key_adjoint_steps_forward (the adjoint's errors pushed through A_t) and
// two_key_injection_not_propagated (an injected error forgotten by the next step) and
// two_key_carry_only_locals_not_grown (one propagator a segment, its locals not grown by Π ρ) are caught.
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "bound_checks.hpp"
#include "kalman_oracle/check/diagonal_kdn_bound.hpp"
#include "kalman_oracle/check/two_key_propagation.hpp"
#include "kalman_oracle/models/diagonal.hpp"
#include "kalman_oracle/models/kdn_parallel.hpp"
#include "kalman_oracle/scalar/precision_scope.hpp"
#include "rapidcheck_doctest.hpp"

using namespace kalman_oracle;
using kalman_oracle::testing::check_property;
using namespace kalman_oracle::testing;

namespace {

struct diagonal_problem {
  std::size_t T, K, V;
  std::vector<float> q, k, v, g, omega, r, s0, p0;
};

diagonal_problem make_problem(std::size_t T, std::size_t K, std::size_t V, double gate_lo, double omega_log_lo,
                              double r_log_lo, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  diagonal_problem p{T, K, V, {}, {}, {}, {}, {}, {}, {}, {}};
  for (std::size_t n = 0; n < T * K; ++n) p.q.push_back(uniform_float(rng, -1, 1));
  for (std::size_t t = 0; t < T; ++t)
    for (float x : float_key(rng, K, 1.0)) p.k.push_back(x);
  for (std::size_t n = 0; n < T * V; ++n) p.v.push_back(uniform_float(rng, -1, 1));
  for (std::size_t n = 0; n < T * K; ++n) p.g.push_back(uniform_float(rng, gate_lo, 0));
  for (std::size_t n = 0; n < T * K; ++n)
    p.omega.push_back(static_cast<float>(std::pow(10.0, uniform_float(rng, omega_log_lo, -1))));
  for (std::size_t t = 0; t < T; ++t)
    p.r.push_back(static_cast<float>(std::pow(10.0, uniform_float(rng, r_log_lo, r_log_lo + 3))));
  for (std::size_t n = 0; n < K * V; ++n) p.s0.push_back(uniform_float(rng, -1, 1));
  for (std::size_t i = 0; i < K; ++i) p.p0.push_back(static_cast<float>(std::pow(10.0, uniform_float(rng, -1, 1))));
  return p;
}

template <class T>
diagonal_kdn_inputs<T> inputs_of(const diagonal_problem& p) {
  const auto conv = [](const std::vector<float>& xs) { return floats_as<T>(xs); };
  return {tensor<T>("q", {1, p.T, 1, p.K}, conv(p.q)),
          tensor<T>("k", {1, p.T, 1, p.K}, conv(p.k)),
          tensor<T>("v", {1, p.T, 1, p.V}, conv(p.v)),
          tensor<T>("g", {1, p.T, 1, p.K}, conv(p.g)),
          gate_space::log,
          tensor<T>("omega", {1, p.T, 1, p.K}, conv(p.omega)),
          tensor<T>("r", {1, p.T, 1}, conv(p.r)),
          std::nullopt,
          tensor<T>("initial_covariance", {1, 1, p.K}, conv(p.p0)),
          tensor<T>("initial_state", {1, 1, p.K, p.V}, conv(p.s0)),
          std::nullopt};
}

}  // namespace

TEST_SUITE("error_bound") {
  TEST_CASE("error_bound: binary32 diagonal KDN within its per-element bounds") {
    check_property("diagonal_kdn_bound_holds", [] {
      const std::size_t T = *rc::gen::inRange<std::size_t>(1, 120);
      const std::size_t K = *rc::gen::inRange<std::size_t>(1, 7);
      const std::size_t V = *rc::gen::inRange<std::size_t>(1, 4);
      const double gate_lo = *rc::gen::element(-1e-3, -1.0);
      const double omega_log_lo = *rc::gen::element(-12.0, -4.0);
      const double r_log_lo = *rc::gen::element(-6.0, -2.0, 3.0);
      const auto seed = *rc::gen::arbitrary<std::uint64_t>();
      const auto& order = draw_untiled_scan();
      const diagonal_problem p = make_problem(T, K, V, gate_lo, omega_log_lo, r_log_lo, seed);

      const run_options internals{.internals = true};
      const auto sequential = diagonal_kdn_forward(inputs_of<float>(p), internals);
      const kdn_scan_options scan{order.schedule, order.chunk == 0 ? default_scan_chunk_size : order.chunk,
                                  rescale_mode::power_of_two, default_wy_chunk_size};
      const auto parallel = diagonal_kdn_parallel(inputs_of<float>(p), scan, internals);

      precision_scope precision(256);
      const auto in = inputs_of<mpfr_real>(p);
      const auto exact = diagonal_kdn_forward(in, internals);
      const auto bound = check::diagonal_kdn_bound(in);
      RC_ASSERT(bound.hypothesis_failure.empty());
      for (const auto* got : {&sequential, &parallel}) {
        assert_within_bound(got->final_covariance, exact.final_covariance, bound.final_covariance);
        assert_within_bound(got->readout_variance, exact.readout_variance, bound.readout_variance);
        assert_within_bound(*got->predicted_covariance, *exact.predicted_covariance, bound.predicted_covariance);
        assert_within_bound(*got->gain, *exact.gain, bound.gain);
      }
      assert_within_bound(sequential.o, exact.o, bound.o);
      assert_within_bound(sequential.final_state, exact.final_state, bound.final_state);
    });
  }

  TEST_CASE("error_bound: the two-key propagation bounds any local errors of the stated sizes") {
    check_property("two_key_propagation_bound_holds", [] {
      const std::size_t T = *rc::gen::inRange<std::size_t>(1, 80);
      const std::size_t K = *rc::gen::inRange<std::size_t>(1, 6);
      const std::size_t V = *rc::gen::inRange<std::size_t>(1, 3);
      // Steps near the identity (no decay, tiny gains: errors add up) or generic oblique ones, decaying
      // or not (then their norms exceed 1 and the errors grow); through A_t (the state) or A_tᵀ (the
      // memory adjoint, grad/memory.hpp); errors that enter between the steps (inject: the adjoint's
      // readout terms) or none; each local error with its own propagator, or only the segment's carry
      // (the memory's long segments at K > 32); segments of 4 to 40 tokens.
      const bool near_identity = *rc::gen::arbitrary<bool>();
      const bool aligned = *rc::gen::arbitrary<bool>();
      const bool adjoint = *rc::gen::arbitrary<bool>();
      const bool injections = *rc::gen::arbitrary<bool>();
      const bool adversarial = *rc::gen::arbitrary<bool>();
      const bool carry_only = *rc::gen::arbitrary<bool>();
      const bool decays = *rc::gen::arbitrary<bool>();  // else α = 1: oblique steps then grow errors
      const std::size_t segment = *rc::gen::inRange<std::size_t>(4, 41);
      const auto seed = *rc::gen::arbitrary<std::uint64_t>();
      std::mt19937_64 rng(seed);
      precision_scope precision(256);
      using R = mpfr_real;
      check::two_key_propagation<R> propagation(
          K, V, segment, adjoint ? check::propagation_direction::adjoint : check::propagation_direction::forward,
          carry_only ? check::local_propagators::carry_only : check::local_propagators::each);
      std::vector<std::vector<R>> error(V, std::vector<R>(K, R(0)));
      // Unit directions (normalised in MPFR: a binary32 key's norm may exceed 1 by an ulp).
      const auto unit = [&] {
        std::vector<R> dir;
        R n2(0);
        for (float x : float_key(rng, K, 1.0)) {
          dir.push_back(R(x));
          n2 += R(x) * R(x);
        }
        if (n2 > 0)
          for (auto& x : dir) x /= sqrt(n2);
        return dir;
      };
      std::vector<std::vector<R>> direction(V);
      for (auto& w : direction) w = unit();
      // ε += amount · (a unit direction), ‖·‖ = amount.
      const auto add_error = [&](std::size_t j, const R& amount) {
        const std::vector<R> dir = aligned ? direction[j] : unit();
        for (std::size_t i = 0; i < K; ++i) error[j][i] += amount * dir[i];
      };
      const auto norm = [&](std::size_t j) {
        R norm2(0);
        for (std::size_t i = 0; i < K; ++i) norm2 += error[j][i] * error[j][i];
        return sqrt(norm2);
      };
      // The steps, drawn first: the adversarial start below needs the first segment's product.
      struct step_data {
        std::vector<R> alpha, key, gain, local;
      };
      std::vector<step_data> steps(T);
      for (auto& st : steps) {
        st.alpha.resize(K), st.key.resize(K), st.gain.resize(K), st.local.resize(V);
        const auto k = float_key(rng, K, 1.0);
        for (std::size_t i = 0; i < K; ++i) {
          st.alpha[i] = near_identity || !decays ? R(1) : R(uniform_float(rng, 0.5, 1));
          st.key[i] = R(k[i]);
          // A diagonal gain P̂k/(r + kᵀP̂k) with spread-out P̂: oblique unless P̂ is isotropic.
          st.gain[i] = R(k[i]) * R(near_identity ? 1e-6 : std::pow(10.0, uniform_float(rng, -2, 0)));
        }
        R s(0);
        for (std::size_t i = 0; i < K; ++i) s += st.gain[i] * st.key[i];
        if (s > R(0.99))
          for (auto& x : st.gain) x *= R(0.99) / s;
        for (std::size_t j = 0; j < V; ++j) st.local[j] = R(uniform_float(rng, 0, 1));
      }
      // Forward ε ← (I − κkᵀ) D ε; adjoint ε ← D (I − kκᵀ) ε.
      const auto apply = [&](const step_data& st, std::vector<R>& e) {
        R w(0);
        if (adjoint) {
          for (std::size_t i = 0; i < K; ++i) w += st.gain[i] * e[i];
          for (std::size_t i = 0; i < K; ++i) e[i] = st.alpha[i] * (e[i] - st.key[i] * w);
        } else {
          for (std::size_t i = 0; i < K; ++i) {
            e[i] *= st.alpha[i];
            w += st.key[i] * e[i];
          }
          for (std::size_t i = 0; i < K; ++i) e[i] -= st.gain[i] * w;
        }
      };
      if (adversarial) {
        // A unit error at the start along the direction the first segment's product stretches most
        // (power iteration on ΦᵀΦ, Φ = A_n ⋯ A_1 or its adjoint's, n the segment's length), no other
        // error in that segment: the bound there is the product's norm, nearly attained; a wrong product
        // is caught.
        const std::size_t n = std::min<std::size_t>(T, segment);
        std::vector<std::vector<R>> phi(K, std::vector<R>(K, R(0)));  // column c = Φ e_c
        for (std::size_t c = 0; c < K; ++c) {
          phi[c][c] = R(1);
          for (std::size_t t = 0; t < n; ++t) apply(steps[t], phi[c]);
        }
        std::vector<R> x = unit();
        for (int iteration = 0; iteration < 60; ++iteration) {
          std::vector<R> y(K, R(0)), z(K, R(0));  // y = Φ x, z = Φᵀ y
          for (std::size_t c = 0; c < K; ++c)
            for (std::size_t i = 0; i < K; ++i) y[i] += phi[c][i] * x[c];
          R n2(0);
          for (std::size_t c = 0; c < K; ++c) {
            for (std::size_t i = 0; i < K; ++i) z[c] += phi[c][i] * y[i];
            n2 += z[c] * z[c];
          }
          if (!(n2 > 0)) break;
          for (std::size_t c = 0; c < K; ++c) x[c] = z[c] / sqrt(n2);
        }
        for (std::size_t j = 0; j < V; ++j) {
          propagation.inject(j, R(1));
          error[j] = x;
        }
        for (std::size_t t = 0; t < n; ++t) std::fill(steps[t].local.begin(), steps[t].local.end(), R(0));
      }
      for (std::size_t t = 0; t < T; ++t) {
        if (injections && !(adversarial && t < segment))
          for (std::size_t j = 0; j < V; ++j) {
            const R amount(uniform_float(rng, 0, 1));
            propagation.inject(j, amount);
            add_error(j, amount);
          }
        const step_data& st = steps[t];
        const std::vector<R>& local = st.local;
        propagation.step(st.alpha, st.key, st.gain, local);
        for (std::size_t j = 0; j < V; ++j) {
          apply(steps[t], error[j]);  // then + ℓ, ‖ℓ‖ = local[j]
          const R before_local = norm(j);
          add_error(j, local[j]);
          // The bound is evaluated at 256 bits too: allow its own rounding (relative 2^-200).
          RC_ASSERT(before_local <= propagation.carried(j) * (R(1) + R(0x1p-200)));
          RC_ASSERT(norm(j) <= propagation.bound(j) * (R(1) + R(0x1p-200)));
        }
      }
    });
  }
}
