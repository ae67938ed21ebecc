// The first-order running error bound (scalar/running_error.hpp; docs/error-model.md, "Gradients:
// first-order running error") bounds binary32: a chain of operations (+, −, ×, ÷, √, exp, log and
// KLA's precision step and the KDN covariance update) on binary32 values, run in binary32, stays within u times the running
// error bound of the same chain run over running_error<MPFR>, against the exact (256-bit) result.
// One operation on exact inputs is where the bound is tight (a rounding of up to u|result|), so a
// rule that forgets its own rounding (the planted bug running_error_sum_drops_rounding) is caught.
// The slack 1 + 2⁻²⁰ covers the second-order terms the bound drops (relative size u · error).
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "bound_checks.hpp"
#include "kalman_oracle/grad/kdn_common.hpp"
#include "kalman_oracle/grad/kla.hpp"
#include "kalman_oracle/scalar/precision_scope.hpp"
#include "kalman_oracle/scalar/running_error.hpp"
#include "rapidcheck_doctest.hpp"

using namespace kalman_oracle;
using kalman_oracle::testing::check_property;
using namespace kalman_oracle::testing;

namespace {

enum class op { add, sub, mul, div, sqrt_op, exp_op, log_op, precision_step, posterior_step };

/// One operation of the chain on x (and a fresh operand y, or the step's ā, p̄, φ, or the KDN
/// update's c = |y|), in any scalar type.
template <class T>
T apply(op o, const T& x, const T& y, const T& a, const T& p) {
  using std::abs;
  using std::exp;
  using std::log;
  using std::sqrt;
  switch (o) {
    case op::add: return x + y;
    case op::sub: return x - y;
    case op::mul: return x * y;
    case op::div: return x / y;
    case op::sqrt_op: return sqrt(abs(x));
    case op::exp_op: return exp(x / T(16));  // kept in range
    case op::log_op: return log(abs(x) + T(1));
    case op::precision_step: return kla_precision_step(T(abs(x)), a, p, T(abs(y)));
    case op::posterior_step: return kdn_posterior_step(T(abs(x)), T(abs(y)));
  }
  return x;
}

}  // namespace

TEST_SUITE("error_bound") {
  TEST_CASE("error_bound: binary32 operation chains within their first-order running error bound") {
    check_property("running_error_bounds_binary32_chains", [] {
      // Single operations often (where the bound is tight), and chains.
      const std::size_t length = *rc::gen::element<std::size_t>(1, 1, 2, 4, 12);
      const auto seed = *rc::gen::arbitrary<std::uint64_t>();
      std::mt19937_64 rng(seed);
      std::vector<op> ops;
      std::vector<float> ys, as, ps;
      for (std::size_t n = 0; n < length; ++n) {
        ops.push_back(static_cast<op>(rng() % 9));
        ys.push_back(uniform_float(rng, 0.5, 2) * (rng() % 2 ? 1.f : -1.f));
        as.push_back(uniform_float(rng, 0.5, 1));
        ps.push_back(uniform_float(rng, 0, 0.5));
      }
      const float x0 = uniform_float(rng, -2, 2);

      float got = x0;
      for (std::size_t n = 0; n < length; ++n) got = apply<float>(ops[n], got, ys[n], as[n], ps[n]);
      precision_scope precision(256);
      using E = running_error<mpfr_real>;
      mpfr_real exact(x0);
      E bound{mpfr_real(x0)};
      for (std::size_t n = 0; n < length; ++n) {
        exact = apply<mpfr_real>(ops[n], exact, mpfr_real(ys[n]), mpfr_real(as[n]), mpfr_real(ps[n]));
        bound = apply<E>(ops[n], bound, E(mpfr_real(ys[n])), E(mpfr_real(as[n])), E(mpfr_real(ps[n])));
      }
      RC_ASSERT(bound.value() == exact);
      RC_ASSERT(abs(mpfr_real(got) - exact) <=
                bound.error() * mpfr_real(0x1p-24) * (mpfr_real(1) + mpfr_real(0x1p-20)));
    });
  }

  TEST_CASE("error_bound: the binary32 KDN covariance recursion within its first-order running error bound") {
    // b ← kdn_posterior_step(a b + ω, c) over T tokens (docs/math.md §4, §5), the path the KDN
    // adjoints recompute: with a near 1 and small c, ω the recursion barely contracts, so b's errors
    // add up over the tokens and a rule that forgets the carried error (the planted bug
    // kdn_posterior_rule_drops_propagated) is caught.
    check_property("running_error_bounds_kdn_covariance", [] {
      const std::size_t T = *rc::gen::inRange<std::size_t>(1, 400);
      const double c_hi = *rc::gen::element(1e-4, 1e-2, 1.0);
      std::mt19937_64 rng(*rc::gen::arbitrary<std::uint64_t>());
      std::vector<float> as, omegas, cs;
      for (std::size_t t = 0; t < T; ++t) {
        as.push_back(uniform_float(rng, 0.99, 1));
        omegas.push_back(uniform_float(rng, 0, 1e-2));
        cs.push_back(uniform_float(rng, 0, c_hi));
      }
      const auto run = [&]<class R>(R b) {
        for (std::size_t t = 0; t < T; ++t) b = kdn_posterior_step(R(as[t]) * b + R(omegas[t]), R(cs[t]));
        return b;
      };
      const float got = run(1.f);
      precision_scope precision(256);
      using E = running_error<mpfr_real>;
      const mpfr_real exact = run(mpfr_real(1));
      const E bound = run(E(mpfr_real(1)));
      RC_ASSERT(bound.value() == exact);
      RC_ASSERT(abs(mpfr_real(got) - exact) <=
                bound.error() * mpfr_real(0x1p-24) * (mpfr_real(1) + mpfr_real(0x1p-20)));
    });
  }
}
