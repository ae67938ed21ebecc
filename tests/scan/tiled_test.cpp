// Unit tests for the kernel-shaped tiled scan (scan/tiled.hpp); its exactness for every policy is
// the property scan_tiled_equals_fold_* (properties/scan_tiled_equals_fold.cpp).
#include "kalman_oracle/scan/tiled.hpp"

#include <stdexcept>
#include <string>

#include "scan_test_support.hpp"

using namespace kalman_oracle;
using namespace kalman_oracle::scan_test;

TEST_CASE("scan: tiled small cases over words and integer addition, for several policies") {
  for (const tiled_policy p :
       {tiled_policy{1, 1, 1, tile_carry::running}, tiled_policy{2, 2, 2, tile_carry::running},
        tiled_policy{3, 2, 1, tile_carry::three_pass}, tiled_policy{1, 4, 3, tile_carry::running},
        tiled_policy{4, 32, 4, tile_carry::three_pass}}) {
    CAPTURE(to_string(p));
    const auto inclusive = [p](const auto& monoid, auto xs) { return tiled_inclusive_scan(monoid, xs, p); };
    const auto exclusive = [p](const auto& monoid, auto xs) { return tiled_exclusive_scan(monoid, xs, p); };
    check_small_cases(inclusive, exclusive, inclusive, exclusive);
  }
}

TEST_CASE("scan: tiled composes in the counted order of one full tile") {
  // Policy 2 items × 2 lanes × 2 warps, n = 8 (one tile). Threads fold: 4 × 1. Warp Kogge–Stone
  // (stride 1 in each warp): 2. Block Kogge–Stone over 2 warp totals: 1. Incoming prefixes:
  // thread 3 composes lane exclusive ∘ warp exclusive (1); threads 1 and 2 take one factor as it
  // is. Outputs of threads 1, 2, 3 composed with their incoming: 6. Total 14, against 7 for the fold.
  std::size_t calls = 0;
  const counting_monoid<word_monoid> counted{{}, &calls};
  const auto xs = letters(8);
  const auto out = tiled_inclusive_scan(counted, std::span<const std::vector<int>>(xs), {2, 2, 2, tile_carry::running});
  CHECK(calls == 14);
  CHECK(out.back() == std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7});
}

TEST_CASE("scan: tiled rejects a policy that no kernel has, naming the field") {
  const word_monoid w;
  const auto xs = letters(3);
  const std::span<const std::vector<int>> leaves(xs);
  auto message = [&](tiled_policy p) {
    try {
      tiled_inclusive_scan(w, leaves, p);
    } catch (const std::invalid_argument& error) {
      return std::string(error.what());
    }
    return std::string("no error");
  };
  CHECK(message({0, 32, 4, tile_carry::running}).find("items_per_thread must be at least 1") != std::string::npos);
  CHECK(message({4, 0, 1, tile_carry::running}).find("warp_size must be at least 1") != std::string::npos);
  CHECK(message({4, 32, 0, tile_carry::running}).find("warps_per_block must be at least 1") != std::string::npos);
  CHECK(message({4, 2, 3, tile_carry::running}).find("warps_per_block must not exceed warp_size") != std::string::npos);
  CHECK_THROWS_AS(tiled_exclusive_scan(w, leaves, {0, 32, 4, tile_carry::running}), std::invalid_argument);
}
