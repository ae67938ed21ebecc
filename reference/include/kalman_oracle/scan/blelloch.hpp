// Blelloch's work-efficient scan (docs/math.md §8 fact 2): an up-sweep that reduces a balanced tree in
// place, then a down-sweep that pushes prefixes back down. Natively exclusive.
//
// The tail is handled without padding: the block [i, i+2d) of level d is stored at its last real
// position min(i+2d-1, n-1). A block whose right half [i+d, i+2d) lies wholly past the end is just
// its left half, already stored at n-1, so it needs no step. Padding with the identity would
// instead compose real values with the identity, which for a rescaling monoid changes the
// representative (derive.hpp) and costs work.
//
//   up-sweep, d = 1, 2, 4, … < n, every block i = 0, 2d, 4d, … with i+d < n at once:
//       a[R] = compose(a[R], a[i+d-1])        R = min(i+2d-1, n-1); the right half is later
//   total = a[n-1]; a[n-1] = identity (the prefix of the whole sequence is empty)
//   down-sweep, d from the top level down to 1, the same blocks at once:
//       parent prefix P = a[R], left subtree total Lt = a[i+d-1]
//       a[i+d-1] = P                            the left child starts where its parent starts
//       a[R]     = compose(Lt, P)               the right child comes after the left subtree:
//                                               the left subtree is *later* than P, so it goes
//                                               on the left (non-commutative order matters)
//   Blocks with i = 0 have the empty prefix P = identity, so their right child gets Lt by a
//   copy instead of compose(Lt, identity): the same map, and no identity compose (derive.hpp).
//
// Each level touches disjoint pairs of positions and reads only values of the previous level, so
// the in-place array is safe to update one level at a time in parallel.
// The inclusive scan is the exclusive one shifted left by one, with the total (the up-sweep's
// root) in the last place: no extra compose.
//
// Work for n >= 2: n-1 composes up, (n-1) - ⌈log2 n⌉ down (one block per level starts at 0), so
// 2(n-1) - ⌈log2 n⌉ for either scan (the exclusive one runs the sweeps on all n inputs). Depth:
// 2⌈log2 n⌉.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <span>
#include <vector>

#include "kalman_oracle/detail/mutant.hpp"
#include "kalman_oracle/scan/monoid.hpp"

namespace kalman_oracle {

namespace detail {

template <class V>
struct blelloch_sweeps_result {
  std::vector<V> exclusive;  // exclusive[t] = x_{t-1} ∘ … ∘ x_0, exclusive[0] = identity
  V total;                   // x_{n-1} ∘ … ∘ x_0
};

/// The up-sweep and down-sweep over a non-empty sequence.
template <scan_monoid M>
blelloch_sweeps_result<typename M::value_type> blelloch_sweeps(const M& monoid,
                                                               std::span<const typename M::value_type> xs) {
  using V = typename M::value_type;
  const std::size_t n = xs.size();  // >= 1
  std::vector<V> a(xs.begin(), xs.end());

  // Up-sweep: after level d, a[min(i+2d-1, n-1)] holds the total of the block [i, min(i+2d, n)).
  for (std::size_t d = 1; d < n; d *= 2) {
    for (std::size_t i = 0; i + d < n; i += 2 * d) {  // the blocks with a non-empty right half
      const std::size_t right = std::min(i + 2 * d - 1, n - 1);
      a[right] = monoid.compose(a[right], a[i + d - 1]);
    }
  }

  V total = a[n - 1];
  a[n - 1] = monoid.identity();

  // Down-sweep: levels in reverse, top level = the largest power of two below n.
  const std::size_t top = n >= 2 ? std::bit_floor(n - 1) : 0;
  for (std::size_t d = top; d > 0; d /= 2) {
    for (std::size_t i = 0; i + d < n; i += 2 * d) {
      const std::size_t left = KALMAN_ORACLE_MUTANT(blelloch_downsweep_off_by_one, i + d - 1, i + d);
      const std::size_t right = std::min(i + 2 * d - 1, n - 1);
      const V left_total = a[left];
      a[left] = a[right];  // the parent's prefix
      a[right] = i == 0 ? left_total : monoid.compose(left_total, a[right]);
    }
  }
  return {std::move(a), std::move(total)};
}

}  // namespace detail

template <scan_monoid M>
std::vector<typename M::value_type> blelloch_exclusive_scan(const M& monoid,
                                                            std::span<const typename M::value_type> xs) {
  if (xs.empty()) return {};
  return detail::blelloch_sweeps(monoid, xs).exclusive;
}

template <scan_monoid M>
std::vector<typename M::value_type> blelloch_inclusive_scan(const M& monoid,
                                                            std::span<const typename M::value_type> xs) {
  using V = typename M::value_type;
  if (xs.empty()) return {};
  auto [exclusive, total] = detail::blelloch_sweeps(monoid, xs);
  // inclusive[t] = exclusive[t+1] for t < n-1 and inclusive[n-1] = total: a parallel shift.
  std::vector<V> out;
  out.reserve(xs.size());
  for (std::size_t t = 1; t < exclusive.size(); ++t) out.push_back(std::move(exclusive[t]));
  out.push_back(std::move(total));
  return out;
}

}  // namespace kalman_oracle
