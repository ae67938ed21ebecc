// Unit tests for the schedule dispatchers (scan/schedules.hpp).
#include "kalman_oracle/scan/schedules.hpp"

#include <set>
#include <stdexcept>
#include <string>

#include "scan_test_support.hpp"

using namespace kalman_oracle;
using namespace kalman_oracle::scan_test;

TEST_CASE("scan: every schedule has a distinct name") {
  std::set<std::string> names;
  for (const scan_schedule schedule : all_scan_schedules) names.insert(to_string(schedule));
  CHECK(names == std::set<std::string>{"sequential", "hillis_steele", "blelloch", "brent_kung", "sklansky", "chunked"});
}

TEST_CASE("scan: the dispatchers run every schedule on the hand-checked cases") {
  for (const scan_schedule schedule : all_scan_schedules) {
    CAPTURE(to_string(schedule));
    const auto inclusive = [schedule](const auto& monoid, auto xs) {
      return kalman_oracle::inclusive_scan(schedule, monoid, xs, 3);
    };
    const auto exclusive = [schedule](const auto& monoid, auto xs) {
      return kalman_oracle::exclusive_scan(schedule, monoid, xs, 3);
    };
    check_small_cases(inclusive, exclusive, inclusive, exclusive);
  }
}

TEST_CASE("scan: the dispatchers agree with the free monoid on every length up to 200") {
  const word_monoid w;
  for (std::size_t n = 0; n <= 200; ++n) {
    const auto xs = letters(n);
    std::vector<std::vector<int>> expected;
    for (std::size_t t = 0; t < n; ++t) {
      std::vector<int> word;
      for (std::size_t j = 0; j <= t; ++j) word.push_back(static_cast<int>(j));
      expected.push_back(word);
    }
    for (const scan_schedule schedule : all_scan_schedules) {
      for (const std::size_t c : {1, 2, 7, 64}) {
        CAPTURE(n);
        CAPTURE(to_string(schedule));
        CAPTURE(c);
        const auto inclusive = kalman_oracle::inclusive_scan(schedule, w, std::span<const std::vector<int>>(xs), c);
        CHECK(inclusive == expected);
        const auto exclusive = kalman_oracle::exclusive_scan(schedule, w, std::span<const std::vector<int>>(xs), c);
        REQUIRE(exclusive.size() == n);
        for (std::size_t t = 0; t < n; ++t) CHECK(exclusive[t] == (t == 0 ? std::vector<int>{} : expected[t - 1]));
      }
    }
  }
}

TEST_CASE("scan: the chunked dispatch rejects chunk size 0") {
  const word_monoid w;
  const auto xs = letters(4);
  CHECK_THROWS_AS(kalman_oracle::inclusive_scan(scan_schedule::chunked, w, std::span<const std::vector<int>>(xs), 0),
                  std::invalid_argument);
  CHECK_THROWS_AS(kalman_oracle::exclusive_scan(scan_schedule::chunked, w, std::span<const std::vector<int>>(xs), 0),
                  std::invalid_argument);
}
