// Unit tests for the Hillis–Steele scan (scan/hillis_steele.hpp).
#include "kalman_oracle/scan/hillis_steele.hpp"

#include "scan_test_support.hpp"

using namespace kalman_oracle;
using namespace kalman_oracle::scan_test;

namespace {
// Level d = 2^k (k < L = ⌈log2 n⌉) composes at the n - d positions i >= d:
// Σ_{k<L} (n - 2^k) = n L - (2^L - 1).
std::size_t hillis_steele_work(std::size_t n) {
  if (n == 0) return 0;
  const std::size_t levels = ceil_log2(n);
  return n * levels - ((std::size_t{1} << levels) - 1);
}
}  // namespace

TEST_CASE("scan: hillis_steele small cases over words and integer addition") {
  const auto inclusive = [](const auto& monoid, auto xs) { return hillis_steele_inclusive_scan(monoid, xs); };
  const auto exclusive = [](const auto& monoid, auto xs) { return hillis_steele_exclusive_scan(monoid, xs); };
  check_small_cases(inclusive, exclusive, inclusive, exclusive);
}

TEST_CASE("scan: hillis_steele does n ceil(log2 n) - (2^ceil(log2 n) - 1) composes") {
  const auto inclusive = [](const auto& monoid, auto xs) { return hillis_steele_inclusive_scan(monoid, xs); };
  const auto exclusive = [](const auto& monoid, auto xs) { return hillis_steele_exclusive_scan(monoid, xs); };
  CHECK(count_composes(inclusive, 8) == 7 + 6 + 4);  // levels d = 1, 2, 4
  CHECK(count_composes(inclusive, 5) == 4 + 3 + 1);
  for (std::size_t n = 0; n <= max_counted_length; ++n) {
    CAPTURE(n);
    CHECK(count_composes(inclusive, n) == hillis_steele_work(n));
    CHECK(count_composes(exclusive, n) == (n >= 1 ? hillis_steele_work(n - 1) : 0));  // scans n-1 inputs
  }
}
