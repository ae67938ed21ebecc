// check/typical_ensemble.hpp: the per-element largest error that both envelopes of the typical tier keep
// (the fixtures' and validate's). Every expected value is derived in the comment next to it.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kalman_oracle/check/typical_ensemble.hpp"

using kalman_oracle::check::absorb_largest_errors;

TEST_CASE("typical ensemble: the largest error per element, and a failed member's infinity kept") {
  const std::vector<double> reference{1.0, -2.0, 0.5, 4.0};
  std::vector<double> largest;
  // First member: errors |1.25 − 1| = 0.25, |−2 + 2| = 0, |0.5 − 0.5| = 0, |3 − 4| = 1.
  const std::vector<double> first{1.25, -2.0, 0.5, 3.0};
  absorb_largest_errors(largest, reference.data(), 4, [&](std::size_t i) { return first[i]; });
  CHECK(largest == std::vector<double>{0.25, 0.0, 0.0, 1.0});
  // Second member: errors 0.125 (0.25 kept: smaller), 0.5 (the new largest), NaN (a NaN member: +∞),
  // 0.5 (1 kept).
  const std::vector<double> second{0.875, -1.5, std::nan(""), 4.5};
  absorb_largest_errors(largest, reference.data(), 4, [&](std::size_t i) { return second[i]; });
  CHECK(largest[0] == 0.25);
  CHECK(largest[1] == 0.5);
  CHECK(largest[2] == std::numeric_limits<double>::infinity());
  CHECK(largest[3] == 1.0);
  // A third, exact member changes nothing: in particular the infinity is not forgotten.
  absorb_largest_errors(largest, reference.data(), 4, [&](std::size_t i) { return reference[i]; });
  CHECK(largest[1] == 0.5);
  CHECK(largest[2] == std::numeric_limits<double>::infinity());
  // A member's infinity where the reference is finite counts the same way (|∞ − 4| = ∞); binary32 values
  // are widened exactly: 0.1f is 0.100000001490116…, so its error against 1 is 0.899999998509883…, more
  // than the 0.25 held.
  absorb_largest_errors(largest, reference.data(), 4,
                        [&](std::size_t i) { return i == 3 ? std::numeric_limits<float>::infinity() : 0.1f; });
  CHECK(largest[3] == std::numeric_limits<double>::infinity());
  CHECK(largest[0] == 1.0 - static_cast<double>(0.1f));
}
