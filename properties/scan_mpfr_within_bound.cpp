// Every prefix-scan schedule stays within a proven rounding bound of the sequential fold, in
// MPFR at 256 bits (docs/math.md §8 facts 2 and 4). The bound, derived here and in docs/math.md
// ("Rounding in the scans"):
//
// Model. Leaves M_0 … M_{n-1} with entries >= 0 that are exact at precision p (converted from
// doubles or small integers). Every MPFR operation is correctly rounded: fl(x op y) =
// (x op y)(1 + δ), |δ| <= u = 2^-p (p = the granted precision). The exponent range of MPFR is
// never left here (|exponent| < 2^21 << 2^30), so no underflow or overflow.
//
// One compose. z_ij = fl(fl(x_i1 y_1j) + fl(x_i2 y_2j)): each of the two non-negative terms
// carries a product rounding and the sum rounding, so z_ij = Σ_k x_ik y_kj θ_ijk with
// θ ∈ [(1-u)^2, (1+u)^2]. Rescaling then adds
//   none, power_of_two: nothing (2^-e scaling is exact)                         r = 2
//   trace, max_entry:   z_ij · fl(1/s) rounded, s = fl(a + d) or the exact largest entry;
//                       fl(1/s) = (1/s)(1 + δ') is common to all entries (a positive factor,
//                       projectively invisible), the product adds one rounding per entry  r = 3
//
// Induction. Every computed prefix of m >= 1 leaves equals c · Σ_monomials μ θ_μ entrywise, where
// the monomials μ are those of the exact product P (all >= 0), c > 0 and every
// θ_μ ∈ [(1-u)^K, (1+u)^K] with K = r (m-1): leaves have K = 0, and a compose of an m1-leaf and an
// m2-leaf value multiplies monomials, so K = r(m1-1) + r(m2-1) + r = r(m1+m2-1). That needs every
// schedule to build an m-leaf prefix from exactly m-1 composes of non-identity values, which all
// of them do (scan/derive.hpp). Since all terms are >= 0 (no cancellation):
//     computed = c · P ∘ (1 + E),   (1-u)^K <= 1 + E_ij <= (1+u)^K,   and computed_ij = 0 iff P_ij = 0.
//
// Cross ratio. For schedule S and fold F (constants c_S, c_F; P cancels) and two non-zero entries
// e, f: R = (S_e F_f) / (F_e S_f) = (1+E^S_e)(1+E^F_f) / ((1+E^F_e)(1+E^S_f)), so
//     |log R| <= 2K log((1+u)/(1-u)) =: B_K     (≈ 4Ku).
// Direct, no projective factor (rescale none: c = 1; power_of_two: c_S / c_F = 2^j with j = 0
// unless the largest entries straddle a binade boundary, then S is compared with 2^j F):
//     |S_e - F_e| / F_e = |(1+E^S_e)/(1+E^F_e) - 1| <= 2γ_K / (1 - γ_K),   γ_K = Ku / (1 - Ku),
// using (1+u)^K <= 1 + γ_K and (1-u)^K >= 1 - γ_K (Higham, Lemma 3.1).
//
// Both checks are evaluated in interval arithmetic (MPFI) at 2p + 64 bits from the exact computed
// values, and pass only if certified; the planted bug brent_kung_lossy_compose (algebra/mobius.hpp:
// every compose of the Möbius monoid off by a relative 2^-200 in one entry, against B_K <= 2^-241
// for n <= 1000) must fail them: the fold and the tree schedules associate the products
// differently, so the nudges land on different partial products.
#include <mpfi.h>
#include <mpfr.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <span>
#include <string>
#include <vector>

#include "generators.hpp"
#include "kalman_oracle/algebra/mobius.hpp"
#include "kalman_oracle/scalar/precision_scope.hpp"
#include "kalman_oracle/scalar/traits.hpp"
#include "kalman_oracle/scan/schedules.hpp"
#include "rapidcheck_doctest.hpp"

using namespace kalman_oracle;
using kalman_oracle::testing::check_property;
namespace kt = kalman_oracle::testing;

namespace {

using matrix = mobius<mpfr_real>;
using leaf_doubles = std::array<double, 4>;  // a, b, c, d

/// Non-negative entries that are exact in MPFR: small integers and non-negative hard doubles
/// (zeros, subnormals, the extreme binades, values near 1).
rc::Gen<double> gen_exact_entry() {
  return rc::gen::oneOf(rc::gen::map(rc::gen::inRange<int>(0, 4), [](int k) { return static_cast<double>(k); }),
                        rc::gen::map(kt::gen_hard_double(), [](double x) { return std::fabs(x); }));
}

/// Leaves with d > 0, like the model's leaves (docs/math.md §8).
rc::Gen<leaf_doubles> gen_leaf() {
  return rc::gen::suchThat(rc::gen::container<leaf_doubles>(gen_exact_entry()),
                           [](const leaf_doubles& e) { return e[3] > 0; });
}

/// gen_scan_length, plus shrinking towards 0 (gen::element does not shrink), so that a failure
/// found at length 1000 shrinks to a short counterexample quickly.
rc::Gen<std::size_t> gen_length() {
  return rc::gen::shrink(kt::gen_scan_length(), [](std::size_t n) { return rc::shrink::towards<std::size_t>(n, 0); });
}

std::array<const mpfr_real*, 4> entries(const matrix& m) { return {&m.a, &m.b, &m.c, &m.d}; }

/// The exact value of x as a point interval (the caller's precision_scope is >= x's precision).
mpfi_interval exactly(const mpfr_real& x) {
  mpfi_interval r;
  mpfi_set_fr(r.backend().data(), x.backend().data());
  return r;
}

/// x <= y for every point of both enclosures.
bool certainly_le(const mpfi_interval& x, const mpfi_interval& y) { return upper(x) <= lower(y); }

/// What the bounds need, as enclosures at the check precision 2p + 64 (built once per case).
struct bound_constants {
  unsigned p;                // the scan's granted precision
  mpfi_interval u;           // 2^-p
  mpfi_interval log_lambda;  // log((1+u)/(1-u))
};

bound_constants constants_for(unsigned p) {
  const precision_scope check_scope(2 * p + 64);
  const mpfi_interval one(1);
  const mpfi_interval u = scalar_traits<mpfi_interval>::ldexp(one, -static_cast<long>(p));
  return {p, u, log((one + u) / (one - u))};
}

/// Asserts the schedule's prefix S of m leaves is within the bounds of the fold's F.
void assert_within_bound(const std::string& what, const matrix& s, const matrix& f, std::size_t m, unsigned r,
                         rescale_mode mode, const bound_constants& constants) {
  const unsigned p = constants.p;
  for (const mpfr_real* x : entries(s)) RC_ASSERT(mpfr_get_prec(x->backend().data()) == static_cast<mpfr_prec_t>(p));
  if (m <= 1) {  // a raw leaf (or the identity): no rounding at all
    RC_ASSERT(s == f);
    return;
  }
  const auto se = entries(s);
  const auto fe = entries(f);
  for (std::size_t e = 0; e < 4; ++e) RC_ASSERT((*se[e] == 0) == (*fe[e] == 0));  // no cancellation

  // Power-of-two rescaling picks the binade of the computed largest entry: S and F may differ by
  // an exact factor 2^j when both sit at a binade boundary. Without rescaling, j must be 0.
  int j = 0;
  const mpfr_real s_max = mobius_max_abs_entry(s);
  const mpfr_real f_max = mobius_max_abs_entry(f);
  if (s_max > f_max * 1.5) j = 1;
  if (f_max > s_max * 1.5) j = -1;
  if (mode == rescale_mode::none) RC_ASSERT(j == 0);

  const precision_scope check_scope(2 * p + 64);                   // products of two p-bit values are exact here
  const mpfi_interval k(static_cast<unsigned long>(r) * (m - 1));  // K = r (m - 1), exact
  const mpfi_interval log_ratio_bound = mpfi_interval(2) * k * constants.log_lambda;  // B_K
  const mpfi_interval gamma = k * constants.u / (mpfi_interval(1) - k * constants.u);
  const mpfi_interval direct_bound = mpfi_interval(2) * gamma / (mpfi_interval(1) - gamma);

  // Cross ratios of every pair of non-zero entries: |log R| <= B_K, certified. The log is taken of
  // U = the largest upper end of max(R, 1/R) over the pairs; the upper end of the enclosure of
  // log U bounds every |log R| from above.
  mpfi_interval worst(1);
  for (std::size_t e = 0; e < 4; ++e) {
    for (std::size_t g = e + 1; g < 4; ++g) {
      if (*se[e] == 0 || *se[g] == 0) continue;
      const mpfi_interval ratio = exactly(*se[e]) * exactly(*fe[g]) / (exactly(*fe[e]) * exactly(*se[g]));
      // sup of max(R, 1/R) over the enclosure of R (which may straddle 1).
      const mpfr_real above = std::max(upper(ratio), upper(mpfi_interval(1) / ratio));
      if (above > upper(worst)) worst = exactly(above);
    }
  }
  const mpfi_interval log_worst = log(worst);
  if (!certainly_le(log_worst, log_ratio_bound))
    RC_FAIL(what + ": cross ratio with the fold has |log R| <= " + upper(log_worst).str(6, std::ios::scientific) +
            ", not certified within B_K = " + lower(log_ratio_bound).str(6, std::ios::scientific) +
            " (K = " + std::to_string(r * (m - 1)) + ")");

  // Entrywise relative difference, no projective factor, where the scaling is exact.
  if (mode == rescale_mode::none || mode == rescale_mode::power_of_two) {
    for (std::size_t e = 0; e < 4; ++e) {
      if (*fe[e] == 0) continue;
      const mpfi_interval fx = scalar_traits<mpfi_interval>::ldexp(exactly(*fe[e]), j);
      const mpfi_interval difference = abs(exactly(*se[e]) - fx);
      if (!certainly_le(difference, direct_bound * fx))
        RC_FAIL(what + ": entry " + std::to_string(e) + " has relative difference <= " +
                upper(difference / fx).str(6, std::ios::scientific) + " from the fold, not certified within " +
                lower(direct_bound).str(6, std::ios::scientific) + " (K = " + std::to_string(r * (m - 1)) + ")");
    }
  }
}

void check_schedule(scan_schedule schedule) {
  check_property("scan_" + to_string(schedule) + "_within_bound_mpfr256", [schedule] {
    const std::size_t n = *gen_length();
    const std::size_t chunk_size = *kt::gen_chunk_size(n);
    const auto mode =
        *rc::gen::element(rescale_mode::none, rescale_mode::trace, rescale_mode::max_entry, rescale_mode::power_of_two);
    const auto raw = *rc::gen::container<std::vector<leaf_doubles>>(n, gen_leaf());

    const precision_scope scope(256);
    const unsigned p = scalar_traits<mpfr_real>::precision_bits();  // granted (257), not requested
    const unsigned r = mode == rescale_mode::trace || mode == rescale_mode::max_entry ? 3 : 2;
    std::vector<matrix> xs;
    xs.reserve(n);
    for (const leaf_doubles& e : raw)
      xs.push_back({from_double<mpfr_real>(e[0]), from_double<mpfr_real>(e[1]), from_double<mpfr_real>(e[2]),
                    from_double<mpfr_real>(e[3])});
    const std::span<const matrix> leaves(xs);
    const bound_constants constants = constants_for(p);
    const mobius_monoid<mpfr_real> monoid{mode};
    RC_LOG() << "rescale_mode " << to_string(mode) << ", granted precision " << p << " bits\n";

    const std::vector<matrix> fold = sequential_inclusive_scan(monoid, leaves);
    const std::vector<matrix> inclusive = kalman_oracle::inclusive_scan(schedule, monoid, leaves, chunk_size);
    const std::vector<matrix> exclusive = kalman_oracle::exclusive_scan(schedule, monoid, leaves, chunk_size);
    RC_ASSERT(inclusive.size() == n);
    RC_ASSERT(exclusive.size() == n);
    for (std::size_t t = 0; t < n; ++t)
      assert_within_bound("inclusive[" + std::to_string(t) + "]", inclusive[t], fold[t], t + 1, r, mode, constants);
    if (n > 0) RC_ASSERT(exclusive[0] == monoid.identity());
    for (std::size_t t = 1; t < n; ++t)
      assert_within_bound("exclusive[" + std::to_string(t) + "]", exclusive[t], fold[t - 1], t, r, mode, constants);
  });
}

}  // namespace

TEST_SUITE("scan_mpfr") {
  TEST_CASE("scan: sequential within the rounding bound of the fold in MPFR-256") {
    check_schedule(scan_schedule::sequential);
  }
  TEST_CASE("scan: hillis_steele within the rounding bound of the fold in MPFR-256") {
    check_schedule(scan_schedule::hillis_steele);
  }
  TEST_CASE("scan: blelloch within the rounding bound of the fold in MPFR-256") {
    check_schedule(scan_schedule::blelloch);
  }
  TEST_CASE("scan: brent_kung within the rounding bound of the fold in MPFR-256") {
    check_schedule(scan_schedule::brent_kung);
  }
  TEST_CASE("scan: sklansky within the rounding bound of the fold in MPFR-256") {
    check_schedule(scan_schedule::sklansky);
  }
  TEST_CASE("scan: chunked within the rounding bound of the fold in MPFR-256") {
    check_schedule(scan_schedule::chunked);
  }
}
