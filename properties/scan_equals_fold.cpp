// Every prefix-scan schedule equals the sequential fold, element for element, over exact
// arithmetic (docs/math.md §8 fact 2): over rational Möbius maps (no rescale and each rescale mode),
// over the free monoid of words, and over rational affine maps (fact 5). One property per
// schedule and family, each covering the inclusive and the exclusive scan.
#include <span>
#include <string>
#include <vector>

#include "generators.hpp"
#include "kalman_oracle/algebra/affine.hpp"
#include "kalman_oracle/algebra/mobius.hpp"
#include "kalman_oracle/scan/schedules.hpp"
#include "kalman_oracle/scan/word_monoid.hpp"
#include "rapidcheck_doctest.hpp"

using namespace kalman_oracle;
using kalman_oracle::testing::check_property;
namespace kt = kalman_oracle::testing;

namespace {

/// Sequences longer than this get cheap entries (small integers), shorter ones the full range of
/// rationals: the products of 1000 rich rationals would make the property far too slow.
constexpr std::size_t short_sequence = 33;

/// gen_scan_length, plus shrinking towards 0: a planted bug found at length 1000 then shrinks to
/// a short counterexample quickly instead of shrinking 1000 leaves one by one (gen::element does not
/// shrink). The distribution of lengths is gen_scan_length's.
rc::Gen<std::size_t> gen_length() {
  return rc::gen::shrink(kt::gen_scan_length(), [](std::size_t n) { return rc::shrink::towards<std::size_t>(n, 0); });
}

/// Fails with the first position where `got` differs from `want` (printing two values, not two
/// whole scans).
template <class V>
void assert_same_scan(const char* what, const std::vector<V>& got, const std::vector<V>& want) {
  if (got.size() != want.size())
    RC_FAIL(std::string(what) + ": " + std::to_string(got.size()) + " outputs, want " + std::to_string(want.size()));
  for (std::size_t t = 0; t < got.size(); ++t) {
    if (!(got[t] == want[t]))
      RC_FAIL(std::string(what) + " differs from the fold first at position " + std::to_string(t) + ": got " +
              rc::toString(got[t]) + ", want " + rc::toString(want[t]));
  }
}

/// Asserts inclusive == the fold and exclusive == (identity, fold[0..n-2]). The expected
/// exclusive scan is the fold shifted by hand, not the sequential exclusive scan (itself under
/// test).
template <scan_monoid M>
void assert_equals_fold(scan_schedule schedule, const M& monoid, const std::vector<typename M::value_type>& xs,
                        std::size_t chunk_size) {
  using V = typename M::value_type;
  const std::span<const V> leaves(xs);
  const std::vector<V> fold = sequential_inclusive_scan(monoid, leaves);
  RC_ASSERT(fold.size() == xs.size());
  std::vector<V> shifted;
  if (!xs.empty()) {
    shifted.push_back(monoid.identity());
    shifted.insert(shifted.end(), fold.begin(), fold.end() - 1);
  }
  const std::vector<V> inclusive = kalman_oracle::inclusive_scan(schedule, monoid, leaves, chunk_size);
  assert_same_scan("inclusive scan", inclusive, fold);
  const std::vector<V> exclusive = kalman_oracle::exclusive_scan(schedule, monoid, leaves, chunk_size);
  assert_same_scan("exclusive scan", exclusive, shifted);
}

void check_mobius(scan_schedule schedule) {
  check_property("scan_" + to_string(schedule) + "_equals_fold_mobius_rational", [schedule] {
    const std::size_t n = *gen_length();
    const std::size_t chunk_size = *kt::gen_chunk_size(n);
    const auto mode =
        *rc::gen::element(rescale_mode::none, rescale_mode::trace, rescale_mode::max_entry, rescale_mode::power_of_two);
    // gen_mobius_leaf keeps d > 0, so every product has d > 0, a positive trace and a non-zero
    // largest entry: every rescaling is then canonical (c M and M rescale alike), which is what
    // makes schedules that rescale different sub-products agree exactly.
    RC_LOG() << "rescale_mode " << to_string(mode) << "\n";
    const auto entry = n <= short_sequence ? kt::gen_rational_nonneg() : kt::gen_small_integer();
    const auto xs = *rc::gen::container<std::vector<mobius<rational>>>(n, kt::gen_mobius_leaf(entry));
    assert_equals_fold(schedule, mobius_monoid<rational>{mode}, xs, chunk_size);
  });
}

void check_words(scan_schedule schedule) {
  check_property("scan_" + to_string(schedule) + "_equals_fold_words", [schedule] {
    const std::size_t n = *gen_length();
    const std::size_t chunk_size = *kt::gen_chunk_size(n);
    std::vector<std::vector<int>> xs;
    for (std::size_t t = 0; t < n; ++t) xs.push_back({static_cast<int>(t)});
    const word_monoid words;
    assert_equals_fold(schedule, words, xs, chunk_size);
    // And the fold itself is the formal product: inclusive[t] = (0, 1, …, t).
    const auto inclusive =
        kalman_oracle::inclusive_scan(schedule, words, std::span<const std::vector<int>>(xs), chunk_size);
    for (std::size_t t = 0; t < n; ++t) {
      RC_ASSERT(inclusive[t].size() == t + 1);
      for (std::size_t j = 0; j <= t; ++j) RC_ASSERT(inclusive[t][j] == static_cast<int>(j));
    }
  });
}

void check_affine(scan_schedule schedule) {
  check_property("scan_" + to_string(schedule) + "_equals_fold_affine_rational", [schedule] {
    const std::size_t n = *gen_length();
    const std::size_t chunk_size = *kt::gen_chunk_size(n);
    const auto entry = n <= short_sequence
                           ? kt::gen_rational()
                           : rc::gen::map(rc::gen::inRange<long>(-3, 4), [](long k) { return rational(k); });
    const auto xs = *rc::gen::container<std::vector<affine<rational>>>(n, kt::gen_affine(entry));
    assert_equals_fold(schedule, affine_monoid<rational>{}, xs, chunk_size);
  });
}

}  // namespace

// One test case per schedule and family, so each shows up (and fails) on its own.
#define KALMAN_ORACLE_SCAN_FOLD_TESTS(schedule)                                    \
  TEST_CASE("scan: " #schedule " equals the fold over rational Möbius maps") {     \
    check_mobius(scan_schedule::schedule);                                         \
  }                                                                                \
  TEST_CASE("scan: " #schedule " equals the fold over the free monoid of words") { \
    check_words(scan_schedule::schedule);                                          \
  }                                                                                \
  TEST_CASE("scan: " #schedule " equals the fold over rational affine maps") { check_affine(scan_schedule::schedule); }

TEST_SUITE("scan") {
  KALMAN_ORACLE_SCAN_FOLD_TESTS(sequential)
  KALMAN_ORACLE_SCAN_FOLD_TESTS(hillis_steele)
  KALMAN_ORACLE_SCAN_FOLD_TESTS(blelloch)
  KALMAN_ORACLE_SCAN_FOLD_TESTS(brent_kung)
  KALMAN_ORACLE_SCAN_FOLD_TESTS(sklansky)
  KALMAN_ORACLE_SCAN_FOLD_TESTS(chunked)
}
