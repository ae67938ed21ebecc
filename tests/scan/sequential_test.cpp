// Unit tests for the sequential fold (scan/sequential.hpp).
#include "kalman_oracle/scan/sequential.hpp"

#include "scan_test_support.hpp"

using namespace kalman_oracle;
using namespace kalman_oracle::scan_test;

TEST_CASE("scan: sequential small cases over words and integer addition") {
  const auto inclusive = [](const auto& monoid, auto xs) { return sequential_inclusive_scan(monoid, xs); };
  const auto exclusive = [](const auto& monoid, auto xs) { return sequential_exclusive_scan(monoid, xs); };
  check_small_cases(inclusive, exclusive, inclusive, exclusive);
}

TEST_CASE("scan: sequential does n-1 composes (inclusive) and n-2 (exclusive)") {
  // The fold composes once per input after the first; the exclusive scan folds the first n-1.
  const auto inclusive = [](const auto& monoid, auto xs) { return sequential_inclusive_scan(monoid, xs); };
  const auto exclusive = [](const auto& monoid, auto xs) { return sequential_exclusive_scan(monoid, xs); };
  CHECK(count_composes(inclusive, 8) == 7);
  CHECK(count_composes(exclusive, 8) == 6);
  for (std::size_t n = 0; n <= max_counted_length; ++n) {
    CAPTURE(n);
    CHECK(count_composes(inclusive, n) == (n >= 1 ? n - 1 : 0));
    CHECK(count_composes(exclusive, n) == (n >= 2 ? n - 2 : 0));
  }
}
