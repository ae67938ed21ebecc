// Unit tests for the Sklansky scan (scan/sklansky.hpp).
#include "kalman_oracle/scan/sklansky.hpp"

#include "scan_test_support.hpp"

using namespace kalman_oracle;
using namespace kalman_oracle::scan_test;

namespace {
// Level s = 2^k composes at every i < n with bit k set: full periods of 2^{k+1} contribute 2^k
// each, the partial last period max(0, (n mod 2^{k+1}) - 2^k).
std::size_t sklansky_work(std::size_t n) {
  std::size_t work = 0;
  for (std::size_t s = 1; s < n; s *= 2) {
    const std::size_t period = 2 * s;
    work += (n / period) * s + (n % period > s ? n % period - s : 0);
  }
  return work;
}
}  // namespace

TEST_CASE("scan: sklansky small cases over words and integer addition") {
  const auto inclusive = [](const auto& monoid, auto xs) { return sklansky_inclusive_scan(monoid, xs); };
  const auto exclusive = [](const auto& monoid, auto xs) { return sklansky_exclusive_scan(monoid, xs); };
  check_small_cases(inclusive, exclusive, inclusive, exclusive);
}

TEST_CASE("scan: sklansky does (n/2) log2 n composes for n a power of two") {
  const auto inclusive = [](const auto& monoid, auto xs) { return sklansky_inclusive_scan(monoid, xs); };
  const auto exclusive = [](const auto& monoid, auto xs) { return sklansky_exclusive_scan(monoid, xs); };
  CHECK(count_composes(inclusive, 8) == 4 * 3);
  CHECK(count_composes(inclusive, 5) == 2 + 2 + 1);  // bit 0: 1, 3; bit 1: 2, 3; bit 2: 4
  for (std::size_t k = 0; k <= 8; ++k) CHECK(sklansky_work(std::size_t{1} << k) == (std::size_t{1} << k) / 2 * k);
  for (std::size_t n = 0; n <= max_counted_length; ++n) {
    CAPTURE(n);
    CHECK(count_composes(inclusive, n) == sklansky_work(n));
    CHECK(count_composes(exclusive, n) == (n >= 1 ? sklansky_work(n - 1) : 0));
  }
}
