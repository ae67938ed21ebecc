// The one shared derivation between inclusive and exclusive scans (docs/math.md §8 fact 2).
//
// exclusive[0] = identity and exclusive[t] = inclusive[t-1] = x_{t-1} ∘ … ∘ x_0. Rather than
// compute all n inclusive prefixes and drop the last, the exclusive scan runs the inclusive
// schedule on the first n-1 inputs and puts the identity in front: no compose is wasted, and no
// value is ever composed with the identity. That matters beyond the work count: with a rescaling
// monoid (mobius_monoid with rescale != none) compose(x, identity) is rescale(x), a different
// representative of the same map than the raw leaf x, so a schedule that composed with the
// identity would differ from the sequential fold in its one-leaf prefixes even over exact
// rationals. Every schedule here keeps the invariant: an output is the identity (the empty
// prefix), a raw leaf (a one-leaf prefix), or the result of exactly n-1 composes of non-identity
// values for an n-leaf prefix. docs/math.md's rounding bound for the scans counts on it too.
#pragma once

#include <cstddef>
#include <span>
#include <utility>
#include <vector>

#include "kalman_oracle/scan/monoid.hpp"

namespace kalman_oracle::detail {

/// exclusive[0] = identity, exclusive[t] = inclusive_scan(xs[0..n-2])[t-1]. `inclusive_scan` is
/// any callable taking std::span<const V> and returning the inclusive prefixes as std::vector<V>.
template <scan_monoid M, class InclusiveScan>
std::vector<typename M::value_type> exclusive_from_inclusive(const M& monoid,
                                                             std::span<const typename M::value_type> xs,
                                                             InclusiveScan&& inclusive_scan) {
  using V = typename M::value_type;
  std::vector<V> out;
  if (xs.empty()) return out;
  out.reserve(xs.size());
  out.push_back(monoid.identity());
  std::vector<V> prefixes = std::forward<InclusiveScan>(inclusive_scan)(xs.first(xs.size() - 1));
  // A parallel machine writes these n-1 positions at once (a shift by one, no compose).
  for (V& prefix : prefixes) out.push_back(std::move(prefix));
  return out;
}

}  // namespace kalman_oracle::detail
