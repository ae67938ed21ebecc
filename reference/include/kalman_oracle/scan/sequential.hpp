// The sequential fold: the reference that every parallel schedule must reproduce exactly over
// exact arithmetic (docs/math.md §8 fact 2).
//
//   inclusive[0] = x_0,  inclusive[t] = compose(x_t, inclusive[t-1]) = x_t ∘ … ∘ x_0
//   exclusive[0] = identity,  exclusive[t] = inclusive[t-1]
//
// Work: n-1 composes for the inclusive scan, max(n-2, 0) for the exclusive one (derive.hpp).
// Depth: n-1. Any rescaling is the monoid's business (mobius_monoid rescales after every compose).
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "kalman_oracle/scan/derive.hpp"
#include "kalman_oracle/scan/monoid.hpp"

namespace kalman_oracle {

template <scan_monoid M>
std::vector<typename M::value_type> sequential_inclusive_scan(const M& monoid,
                                                              std::span<const typename M::value_type> xs) {
  using V = typename M::value_type;
  std::vector<V> out;
  out.reserve(xs.size());
  if (xs.empty()) return out;
  out.push_back(xs[0]);  // the one-leaf prefix is the raw leaf, never compose(x_0, identity)
  for (std::size_t t = 1; t < xs.size(); ++t) {
    V prefix = monoid.compose(xs[t], out[t - 1]);  // later map on the left
    out.push_back(std::move(prefix));
  }
  return out;
}

template <scan_monoid M>
std::vector<typename M::value_type> sequential_exclusive_scan(const M& monoid,
                                                              std::span<const typename M::value_type> xs) {
  return detail::exclusive_from_inclusive(monoid, xs, [&monoid](std::span<const typename M::value_type> head) {
    return sequential_inclusive_scan(monoid, head);
  });
}

}  // namespace kalman_oracle
