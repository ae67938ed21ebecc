// The OU discretisation of docs/math.md §6 in MPFR: two steps of Delta/2 equal one of Delta, and the
// step agrees with its first-order expansion for small a Delta.
#include "generators.hpp"
#include "kalman_oracle/algebra/ou_discretisation.hpp"
#include "rapidcheck_doctest.hpp"

using namespace kalman_oracle;
using kalman_oracle::testing::check_property;

namespace {
/// A positive MPFR value m 2^e, m in [1, 2^20), e in [lo, hi]: many binades, exact.
rc::Gen<mpfr_real> gen_positive_mpfr(int lo, int hi) {
  return rc::gen::map(
      rc::gen::pair(rc::gen::inRange<long>(1, 1 << 20), rc::gen::inRange<int>(lo, hi + 1)),
      [](std::pair<long, int> me) { return scalar_traits<mpfr_real>::ldexp(mpfr_real(me.first), me.second - 20); });
}

mpfr_real relative_difference(const mpfr_real& x, const mpfr_real& reference) {
  return abs(x - reference) / abs(reference);
}
}  // namespace

TEST_SUITE("ou") {
  TEST_CASE("ou: two steps of Delta/2 equal one step of Delta (256 bits, 2^-240 relative)") {
    precision_scope scope(256);
    check_property("ou_half_steps_compose_to_full_step", [] {
      // |a Delta| from 2^-200 (where 1 - exp would cancel ~200 bits) to 2^20 (ā far below 1).
      const mpfr_real rate = -*gen_positive_mpfr(-200, 10);
      const mpfr_real step = *gen_positive_mpfr(-30, 10);
      const mpfr_real diffusion = *gen_positive_mpfr(-20, 20);
      const auto full = ou_discretise(rate, step, diffusion);
      const auto half = ou_discretise(rate, step / 2, diffusion);
      const auto twice = ou_compose(half, half);
      const mpfr_real tolerance = scalar_traits<mpfr_real>::ldexp(mpfr_real(1), -240);
      RC_ASSERT(relative_difference(twice.decay, full.decay) <= tolerance);
      RC_ASSERT(relative_difference(twice.process_noise, full.process_noise) <= tolerance);
    });
  }

  TEST_CASE("ou: for small |a Delta|, p̄ = p Delta (1 + a Delta + O((a Delta)^2))") {
    precision_scope scope(256);
    check_property("ou_first_order_expansion", [] {
      // x = a Delta in [-2^-20, 0): the series p̄/(p Delta) = 1 + x + (2/3) x^2 + ... has a
      // remainder after the linear term below x^2 in magnitude.
      const mpfr_real rate = -*gen_positive_mpfr(-120, -10);
      const mpfr_real step = *gen_positive_mpfr(-30, -10);
      const mpfr_real diffusion = *gen_positive_mpfr(-20, 20);
      const mpfr_real x = rate * step;
      const auto discrete = ou_discretise(rate, step, diffusion);
      const mpfr_real remainder = discrete.process_noise / (diffusion * step) - 1 - x;
      RC_ASSERT(abs(remainder) <= x * x);
      RC_ASSERT(discrete.decay == exp(x));
    });
  }
}
