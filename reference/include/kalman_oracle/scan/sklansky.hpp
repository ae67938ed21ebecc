// Sklansky's divide-and-conquer scan (docs/math.md §8 fact 2): minimal depth ⌈log2 n⌉, in place.
//
// Level s = 1, 2, 4, … < n: every position i whose bit s is set, at once, gets
//     a[i] = compose(a[i], a[(i & ~(2s-1)) + s - 1])
// i.e. the upper half of each block of 2s positions takes the lower half's last prefix on its
// right (the lower half is earlier). After level s every block of 2s positions holds its own
// inclusive scan, so after the last level the whole array holds the inclusive scan. The source
// has bit s clear, so no position read in a level is written in it: one in-place array is safe.
//
// Work: Σ over levels s = 2^k < n of #{i < n : bit k of i set}
//     = Σ_k ( ⌊n/2^{k+1}⌋ 2^k + max(0, (n mod 2^{k+1}) - 2^k) )   ((n/2) log2 n for n a power of 2).
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "kalman_oracle/detail/mutant.hpp"
#include "kalman_oracle/scan/derive.hpp"
#include "kalman_oracle/scan/monoid.hpp"

namespace kalman_oracle {

template <scan_monoid M>
std::vector<typename M::value_type> sklansky_inclusive_scan(const M& monoid,
                                                            std::span<const typename M::value_type> xs) {
  using V = typename M::value_type;
  const std::size_t n = xs.size();
  std::vector<V> a(xs.begin(), xs.end());
  for (std::size_t s = 1; s < n; s *= 2) {
    // The positions with bit s set: the upper halves [block + s, block + 2s) of each block.
    for (std::size_t block = 0; block + s < n; block += 2 * s) {
      for (std::size_t i = block + s; i < block + 2 * s && i < n; ++i) {
        const std::size_t source = (i & ~(2 * s - 1)) + s - 1;  // = block + s - 1
        const std::size_t read = KALMAN_ORACLE_MUTANT(sklansky_wrong_source, source, source > 0 ? source - 1 : source);
        a[i] = monoid.compose(a[i], a[read]);
      }
    }
  }
  return a;
}

template <scan_monoid M>
std::vector<typename M::value_type> sklansky_exclusive_scan(const M& monoid,
                                                            std::span<const typename M::value_type> xs) {
  return detail::exclusive_from_inclusive(monoid, xs, [&monoid](std::span<const typename M::value_type> head) {
    return sklansky_inclusive_scan(monoid, head);
  });
}

}  // namespace kalman_oracle
