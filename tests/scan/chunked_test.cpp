// Unit tests for the chunked three-pass scan (scan/chunked.hpp).
#include "kalman_oracle/scan/chunked.hpp"

#include <stdexcept>
#include <string>

#include "scan_test_support.hpp"

using namespace kalman_oracle;
using namespace kalman_oracle::scan_test;

namespace {
// K = ⌈n/c⌉ chunks. Map: a chunk of m inputs composes m-1 times, n-K in all. Carry: an exclusive
// fold over K totals, max(K-2, 0). Emit: every position outside chunk 0, n - min(c, n).
std::size_t chunked_work(std::size_t n, std::size_t c) {
  if (n == 0) return 0;
  const std::size_t chunks = (n + c - 1) / c;
  return (n - chunks) + (chunks >= 2 ? chunks - 2 : 0) + (n - std::min(c, n));
}
}  // namespace

TEST_CASE("scan: chunked small cases over words and integer addition, for several chunk sizes") {
  for (const std::size_t c : {1, 2, 3, 4, 5, 8, 100}) {
    CAPTURE(c);
    const auto inclusive = [c](const auto& monoid, auto xs) { return chunked_inclusive_scan(monoid, xs, c); };
    const auto exclusive = [c](const auto& monoid, auto xs) { return chunked_exclusive_scan(monoid, xs, c); };
    check_small_cases(inclusive, exclusive, inclusive, exclusive);
  }
}

TEST_CASE("scan: chunked rejects chunk size 0, naming the parameter") {
  const word_monoid w;
  const auto xs = letters(5);
  CHECK_THROWS_AS(chunked_inclusive_scan(w, std::span<const std::vector<int>>(xs), 0), std::invalid_argument);
  CHECK_THROWS_AS(chunked_exclusive_scan(w, std::span<const std::vector<int>>(xs), 0), std::invalid_argument);
  CHECK_THROWS_AS(chunked_inclusive_scan(w, std::span<const std::vector<int>>{}, 0), std::invalid_argument);
  try {
    chunked_inclusive_scan(w, std::span<const std::vector<int>>(xs), 0);
  } catch (const std::invalid_argument& error) {
    CHECK(std::string(error.what()).find("chunk_size") != std::string::npos);
  }
}

TEST_CASE("scan: chunked does n - 1 composes in one chunk and 2n - 2 - c otherwise") {
  CHECK(chunked_work(8, 3) == 5 + 1 + 5);  // map 2+2+1, carry over 3 totals 1, emit 3+2
  for (const std::size_t c : {1, 2, 3, 16, 64, 1000}) {
    const auto inclusive = [c](const auto& monoid, auto xs) { return chunked_inclusive_scan(monoid, xs, c); };
    const auto exclusive = [c](const auto& monoid, auto xs) { return chunked_exclusive_scan(monoid, xs, c); };
    for (std::size_t n = 0; n <= max_counted_length; ++n) {
      CAPTURE(c);
      CAPTURE(n);
      CHECK(count_composes(inclusive, n) == chunked_work(n, c));
      CHECK(count_composes(exclusive, n) == (n >= 1 ? chunked_work(n - 1, c) : 0));
      if (n >= 1) CHECK(chunked_work(n, c) == (n <= c ? n - 1 : 2 * n - 2 - c));
    }
  }
}
