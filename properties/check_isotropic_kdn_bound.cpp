// The isotropic KDN's per-element bounds (check/isotropic_kdn_bound.hpp; docs/error-model.md,
// "Isotropic KDN: contraction and a-posteriori bounds") hold: the sequential reference in binary32
// is within them for every output and internal (memory, covariance, prediction, gain, readout
// variance), and the parallel form in binary32 (its covariance scan by a covered schedule, power-of-
// two rescaling) for the covariance path; element by element against 256-bit results.
//
// Weak decays, tiny process noise and long sequences are drawn often, so that errors persist:
// there the planted bugs of the family (delta_bound_forgets_history,
// contraction_bound_drops_child) make the bound too small.
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "bound_checks.hpp"
#include "kalman_oracle/check/isotropic_kdn_bound.hpp"
#include "kalman_oracle/models/isotropic.hpp"
#include "kalman_oracle/models/kdn_parallel.hpp"
#include "kalman_oracle/scalar/precision_scope.hpp"
#include "rapidcheck_doctest.hpp"

using namespace kalman_oracle;
using kalman_oracle::testing::check_property;
using namespace kalman_oracle::testing;

namespace {

struct iso_problem {
  std::size_t T, K, V;
  std::vector<float> q, k, v, g, omega, r, s0;
  float b0;
};

iso_problem make_problem(std::size_t T, std::size_t K, std::size_t V, double gate_lo, double omega_log_lo,
                         std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  iso_problem p{T, K, V, {}, {}, {}, {}, {}, {}, {}, 0};
  for (std::size_t n = 0; n < T * K; ++n) p.q.push_back(uniform_float(rng, -1, 1));
  for (std::size_t t = 0; t < T; ++t)  // unit keys (delta rules: shrunk so that ‖k‖₂ <= 1 holds exactly)
    for (float x : float_key(rng, K, 1.0)) p.k.push_back(x);
  for (std::size_t n = 0; n < T * V; ++n) p.v.push_back(uniform_float(rng, -1, 1));
  for (std::size_t n = 0; n < T * K; ++n) p.g.push_back(uniform_float(rng, gate_lo, 0));
  for (std::size_t t = 0; t < T; ++t) {
    p.omega.push_back(static_cast<float>(std::pow(10.0, uniform_float(rng, omega_log_lo, -1))));
    p.r.push_back(static_cast<float>(std::pow(10.0, uniform_float(rng, -2, 1))));
  }
  for (std::size_t n = 0; n < K * V; ++n) p.s0.push_back(uniform_float(rng, -1, 1));
  p.b0 = static_cast<float>(std::pow(10.0, uniform_float(rng, -1, 1)));
  return p;
}

template <class T>
isotropic_kdn_inputs<T> inputs_of(const iso_problem& p) {
  const auto conv = [](const std::vector<float>& xs) { return floats_as<T>(xs); };
  isotropic_kdn_inputs<T> in{tensor<T>("q", {1, p.T, 1, p.K}, conv(p.q)),
                             tensor<T>("k", {1, p.T, 1, p.K}, conv(p.k)),
                             tensor<T>("v", {1, p.T, 1, p.V}, conv(p.v)),
                             tensor<T>("g", {1, p.T, 1, p.K}, conv(p.g)),
                             gate_space::log,
                             tensor<T>("omega", {1, p.T, 1}, conv(p.omega)),
                             tensor<T>("r", {1, p.T, 1}, conv(p.r)),
                             std::nullopt,
                             tensor<T>("initial_covariance", {1, 1}, conv({p.b0})),
                             tensor<T>("initial_state", {1, 1, p.K, p.V}, conv(p.s0)),
                             std::nullopt};
  return in;
}

}  // namespace

TEST_SUITE("error_bound") {
  TEST_CASE("error_bound: binary32 isotropic KDN within its per-element bounds") {
    check_property("isotropic_kdn_bound_holds", [] {
      const std::size_t T = *rc::gen::inRange<std::size_t>(1, 250);
      const std::size_t K = *rc::gen::inRange<std::size_t>(1, 7);
      const std::size_t V = *rc::gen::inRange<std::size_t>(1, 4);
      const double gate_lo = *rc::gen::element(-1e-3, -1.0);
      const double omega_log_lo = *rc::gen::element(-12.0, -4.0);
      const auto seed = *rc::gen::arbitrary<std::uint64_t>();
      const auto& order = draw_untiled_scan();
      const iso_problem p = make_problem(T, K, V, gate_lo, omega_log_lo, seed);

      const run_options internals{.internals = true};
      const auto sequential = isotropic_kdn_forward(inputs_of<float>(p), internals);
      const kdn_scan_options scan{order.schedule, order.chunk == 0 ? default_scan_chunk_size : order.chunk,
                                  rescale_mode::power_of_two, default_wy_chunk_size};
      const auto parallel = isotropic_kdn_parallel(inputs_of<float>(p), scan, internals);

      precision_scope precision(256);
      const auto in = inputs_of<mpfr_real>(p);
      const auto exact = isotropic_kdn_forward(in, internals);
      const auto bound = check::isotropic_kdn_bound(in);
      RC_ASSERT(bound.hypothesis_failure.empty());
      for (const auto* got : {&sequential, &parallel}) {
        assert_within_bound(got->final_covariance, exact.final_covariance, bound.final_covariance);
        assert_within_bound(got->readout_variance, exact.readout_variance, bound.readout_variance);
        assert_within_bound(*got->predicted_covariance, *exact.predicted_covariance, bound.predicted_covariance);
        assert_within_bound(*got->beta, *exact.beta, bound.beta);
      }
      assert_within_bound(sequential.o, exact.o, bound.o);
      assert_within_bound(sequential.final_state, exact.final_state, bound.final_state);
    });
  }
}
