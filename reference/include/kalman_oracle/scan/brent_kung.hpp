// Brent–Kung scan (docs/math.md §8 fact 2): work-efficient, natively inclusive, in place.
//
//   up-sweep, s = 1, 2, 4, … with 2s <= n: positions i = 2s-1, 4s-1, 6s-1, … < n at once get
//       a[i] = compose(a[i], a[i-s])
//     so position i then holds the block of the 2s inputs ending at i (and position 2^k - 1 the
//     full prefix x_{2^k - 1} ∘ … ∘ x_0).
//   down-sweep (the inverse tree), s from the top level down to 1: positions i = 3s-1, 5s-1, …
//     < n at once get
//       a[i] = compose(a[i], a[i-s])
//     a[i] holds the block of s inputs ending at i (written at up-sweep level s/2) and a[i-s],
//     an even multiple of s minus one, already holds its full prefix (from a higher down-sweep
//     level, or from the up-sweep if i-s+1 is a power of two). The block is later, hence on the
//     left.
// Within a level the written positions and the read positions are disjoint, so one in-place
// array serves all levels.
//
// Work for n >= 1: the up-sweep does Σ_{k>=1} ⌊n/2^k⌋ = n - popcount(n) composes (position i is
// written v2(i+1) times); the down-sweep writes every position i whose i+1 is not a power of two
// exactly once: n - (⌊log2 n⌋ + 1). Total 2n - popcount(n) - ⌊log2 n⌋ - 1 (= 2n - 2 - log2 n for
// n a power of two). Depth: about 2 log2 n.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "kalman_oracle/detail/mutant.hpp"
#include "kalman_oracle/scan/derive.hpp"
#include "kalman_oracle/scan/monoid.hpp"

namespace kalman_oracle {

template <scan_monoid M>
std::vector<typename M::value_type> brent_kung_inclusive_scan(const M& monoid,
                                                              std::span<const typename M::value_type> xs) {
  using V = typename M::value_type;
  const std::size_t n = xs.size();
  std::vector<V> a(xs.begin(), xs.end());

  std::size_t top = 0;  // the last up-sweep level
  for (std::size_t s = 1; 2 * s <= n; s *= 2) {
    for (std::size_t i = 2 * s - 1; i < n; i += 2 * s) a[i] = monoid.compose(a[i], a[i - s]);
    top = s;
  }

  const std::size_t lowest = KALMAN_ORACLE_MUTANT(brent_kung_downsweep_skips_level, std::size_t{1}, std::size_t{2});
  for (std::size_t s = top; s >= lowest; s /= 2) {
    for (std::size_t i = 3 * s - 1; i < n; i += 2 * s) a[i] = monoid.compose(a[i], a[i - s]);
  }
  return a;
}

template <scan_monoid M>
std::vector<typename M::value_type> brent_kung_exclusive_scan(const M& monoid,
                                                              std::span<const typename M::value_type> xs) {
  return detail::exclusive_from_inclusive(monoid, xs, [&monoid](std::span<const typename M::value_type> head) {
    return brent_kung_inclusive_scan(monoid, head);
  });
}

}  // namespace kalman_oracle
