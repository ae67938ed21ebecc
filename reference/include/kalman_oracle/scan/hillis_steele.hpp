// Hillis–Steele scan (docs/math.md §8 fact 2): log-depth, not work-efficient.
//
// Level k (stride d = 2^k = 1, 2, 4, … < n): every position i >= d at once becomes
// compose(x[i], x[i-d]), reading only the previous level's values, so the levels are
// double-buffered (`current` is read, `next` written). After the level with stride d, position i
// holds x_i ∘ … ∘ x_{max(0, i-2d+1)}: the later block stays on the left, which is why the compose
// is compose(x[i], x[i-d]) and never the other way round (the maps do not commute). Associativity
// (fact 1) is all that makes the regrouping equal the fold.
//
// Work: with L = ⌈log2 n⌉ levels, Σ_{k<L} (n - 2^k) = n L - (2^L - 1) composes. Depth: L.
// A CUDA kernel copies this structure: one launch (or one barrier-separated step) per level, one
// thread per position, two buffers.
#pragma once

#include <cstddef>
#include <span>
#include <utility>
#include <vector>

#include "kalman_oracle/detail/mutant.hpp"
#include "kalman_oracle/scan/derive.hpp"
#include "kalman_oracle/scan/monoid.hpp"

namespace kalman_oracle {

template <scan_monoid M>
std::vector<typename M::value_type> hillis_steele_inclusive_scan(const M& monoid,
                                                                 std::span<const typename M::value_type> xs) {
  using V = typename M::value_type;
  const std::size_t n = xs.size();
  std::vector<V> current(xs.begin(), xs.end());
  std::vector<V> next(current);
  for (std::size_t d = 1; d < n; d *= 2) {
    // Positions below d are final and pass through unchanged. Below d/2 the two buffers already
    // agree (they were final two levels ago), so only [d/2, d) needs copying.
    for (std::size_t i = d / 2; i < d; ++i) next[i] = current[i];
    // One parallel step: every i >= d reads two values of the previous level.
    for (std::size_t i = d; i < n; ++i)
      next[i] = KALMAN_ORACLE_MUTANT(hillis_steele_commuted_compose, monoid.compose(current[i], current[i - d]),
                                     monoid.compose(current[i - d], current[i]));
    std::swap(current, next);
  }
  return current;
}

template <scan_monoid M>
std::vector<typename M::value_type> hillis_steele_exclusive_scan(const M& monoid,
                                                                 std::span<const typename M::value_type> xs) {
  return detail::exclusive_from_inclusive(monoid, xs, [&monoid](std::span<const typename M::value_type> head) {
    return hillis_steele_inclusive_scan(monoid, head);
  });
}

}  // namespace kalman_oracle
