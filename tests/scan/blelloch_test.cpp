// Unit tests for the Blelloch scan (scan/blelloch.hpp).
#include "kalman_oracle/scan/blelloch.hpp"

#include "scan_test_support.hpp"

using namespace kalman_oracle;
using namespace kalman_oracle::scan_test;

namespace {
// Up-sweep: every compose merges two non-empty blocks, so n-1 of them build the tree over n
// leaves. Down-sweep: one step per up-sweep step, except that the block starting at 0 (one per
// level, ⌈log2 n⌉ levels) copies instead of composing with the empty prefix.
std::size_t blelloch_work(std::size_t n) { return n == 0 ? 0 : 2 * (n - 1) - ceil_log2(n); }
}  // namespace

TEST_CASE("scan: blelloch small cases over words and integer addition") {
  const auto inclusive = [](const auto& monoid, auto xs) { return blelloch_inclusive_scan(monoid, xs); };
  const auto exclusive = [](const auto& monoid, auto xs) { return blelloch_exclusive_scan(monoid, xs); };
  check_small_cases(inclusive, exclusive, inclusive, exclusive);
}

TEST_CASE("scan: blelloch does 2(n-1) - ceil(log2 n) composes for either scan") {
  const auto inclusive = [](const auto& monoid, auto xs) { return blelloch_inclusive_scan(monoid, xs); };
  const auto exclusive = [](const auto& monoid, auto xs) { return blelloch_exclusive_scan(monoid, xs); };
  CHECK(count_composes(inclusive, 8) == 7 + 4);  // up 4 + 2 + 1, down 0 + 1 + 3
  CHECK(count_composes(exclusive, 5) == 4 + 1);  // up 2 + 1 + 1, down 0 + 0 + 1
  for (std::size_t n = 0; n <= max_counted_length; ++n) {
    CAPTURE(n);
    CHECK(count_composes(inclusive, n) == blelloch_work(n));
    CHECK(count_composes(exclusive, n) == blelloch_work(n));
    CHECK(blelloch_work(n) <= 2 * n);  // work-efficient
  }
}
