// Unit tests for the Brent–Kung scan (scan/brent_kung.hpp).
#include "kalman_oracle/scan/brent_kung.hpp"

#include "scan_test_support.hpp"

using namespace kalman_oracle;
using namespace kalman_oracle::scan_test;

namespace {
// Up-sweep: position i is written once per level s with 2s | i+1, v2(i+1) times;
// Σ_{m=1..n} v2(m) = n - popcount(n) (Legendre). Down-sweep: every position whose i+1 is not a
// power of two is written once, n - (⌊log2 n⌋ + 1) of them.
std::size_t brent_kung_work(std::size_t n) {
  if (n == 0) return 0;
  return (n - static_cast<std::size_t>(std::popcount(n))) + (n - floor_log2(n) - 1);
}
}  // namespace

TEST_CASE("scan: brent_kung small cases over words and integer addition") {
  const auto inclusive = [](const auto& monoid, auto xs) { return brent_kung_inclusive_scan(monoid, xs); };
  const auto exclusive = [](const auto& monoid, auto xs) { return brent_kung_exclusive_scan(monoid, xs); };
  check_small_cases(inclusive, exclusive, inclusive, exclusive);
}

TEST_CASE("scan: brent_kung does 2n - popcount(n) - floor(log2 n) - 1 composes") {
  const auto inclusive = [](const auto& monoid, auto xs) { return brent_kung_inclusive_scan(monoid, xs); };
  const auto exclusive = [](const auto& monoid, auto xs) { return brent_kung_exclusive_scan(monoid, xs); };
  CHECK(count_composes(inclusive, 8) == 7 + 4);  // up 4 + 2 + 1, down 1 + 3 (2n - 2 - log2 n)
  CHECK(count_composes(inclusive, 5) == 3 + 2);  // up 2 + 1, down at s = 1: positions 2, 4
  for (std::size_t n = 0; n <= max_counted_length; ++n) {
    CAPTURE(n);
    CHECK(count_composes(inclusive, n) == brent_kung_work(n));
    CHECK(count_composes(exclusive, n) == (n >= 1 ? brent_kung_work(n - 1) : 0));
    CHECK(brent_kung_work(n) <= 2 * n);  // work-efficient
  }
}
