// The chunked three-pass scan (docs/math.md §8 fact 2), the schedule of chunked GPU kernels (fla's
// chunk-parallel form): split the sequence into chunks of c consecutive inputs, then
//
//   1. map:   every chunk at once runs a sequential scan of its own inputs (local[i]) and
//             reports its total (the local prefix at its last position);
//   2. carry: an exclusive scan over the chunk totals, carry[k] = total_{k-1} ∘ … ∘ total_0
//             (sequential here: there are only ⌈n/c⌉ totals; any schedule would do);
//   3. emit:  every position of chunk k >= 1 at once becomes compose(local[i], carry[k]); the
//             chunk's own inputs are later than everything before it, so they go on the left.
//             Chunk 0's carry is the empty prefix, so its local prefixes are already final
//             (no compose with the identity, derive.hpp).
//
// Any chunk size c >= 1 works: c = 1 makes the map trivial and the carry the whole scan; c >= n
// makes the scan one sequential chunk. Work with K = ⌈n/c⌉ chunks: (n - K) + max(K - 2, 0) +
// (n - min(c, n)) composes, i.e. n - 1 for K = 1 and 2n - 2 - c for K >= 2.
#pragma once

#include <algorithm>
#include <cstddef>
#include <span>
#include <stdexcept>
#include <vector>

#include "kalman_oracle/detail/mutant.hpp"
#include "kalman_oracle/scan/derive.hpp"
#include "kalman_oracle/scan/monoid.hpp"
#include "kalman_oracle/scan/sequential.hpp"

namespace kalman_oracle {

template <scan_monoid M>
std::vector<typename M::value_type> chunked_inclusive_scan(const M& monoid, std::span<const typename M::value_type> xs,
                                                           std::size_t chunk_size) {
  using V = typename M::value_type;
  if (chunk_size == 0) throw std::invalid_argument("chunked scan: chunk_size must be at least 1, got 0");
  const std::size_t n = xs.size();
  const std::size_t chunks = (n + chunk_size - 1) / chunk_size;
  std::vector<V> local(xs.begin(), xs.end());

  // Pass 1 (map): one worker per chunk, a sequential scan inside it.
  std::vector<V> totals;
  totals.reserve(chunks);
  for (std::size_t k = 0; k < chunks; ++k) {
    const std::size_t begin = k * chunk_size;
    const std::size_t end = std::min(begin + chunk_size, n);
    for (std::size_t i = begin + 1; i < end; ++i) local[i] = monoid.compose(local[i], local[i - 1]);
    totals.push_back(KALMAN_ORACLE_MUTANT(chunked_carry_skips_last, local[end - 1],
                                          end - begin >= 2 ? local[end - 2] : monoid.identity()));
  }

  // Pass 2 (carry): the prefix of everything before each chunk.
  const std::vector<V> carry = sequential_exclusive_scan(monoid, std::span<const V>(totals));

  // Pass 3 (emit): one worker per position of chunks 1, 2, …
  for (std::size_t k = 1; k < chunks; ++k) {
    const std::size_t begin = k * chunk_size;
    const std::size_t end = std::min(begin + chunk_size, n);
    for (std::size_t i = begin; i < end; ++i) local[i] = monoid.compose(local[i], carry[k]);
  }
  return local;
}

template <scan_monoid M>
std::vector<typename M::value_type> chunked_exclusive_scan(const M& monoid, std::span<const typename M::value_type> xs,
                                                           std::size_t chunk_size) {
  if (chunk_size == 0) throw std::invalid_argument("chunked scan: chunk_size must be at least 1, got 0");
  return detail::exclusive_from_inclusive(monoid, xs,
                                          [&monoid, chunk_size](std::span<const typename M::value_type> head) {
                                            return chunked_inclusive_scan(monoid, head, chunk_size);
                                          });
}

}  // namespace kalman_oracle
