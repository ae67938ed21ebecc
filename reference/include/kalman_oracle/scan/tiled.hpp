// The kernel-shaped scan (docs/math.md §8 fact 2; docs/kernels.md): the order of operations of a
// GPU block scan, written out so that a CPU can run it composition for composition.
//
// The sequence is cut into tiles of I·W·B items (I items per thread, W lanes per warp, B warps per
// block). Inside a tile, thread t owns the consecutive items [t·I, t·I + I) (a "blocked"
// arrangement) and
//
//   1. thread: folds its own items in order, p_j = x_j ∘ p_{j-1}; its total is its last p_j;
//   2. warp:   a Kogge–Stone inclusive scan of the W thread totals, the way shuffles do it: at
//              stride d = 1, 2, 4, … < W every lane l ≥ d at once becomes v_l ∘ v_{l-d}, reading
//              the values of the previous stride (a shuffle reads registers before anyone writes);
//              lane l's exclusive prefix is lane l-1's inclusive one;
//   3. block:  the B warp totals (each warp's last lane) are scanned by the same Kogge–Stone
//              (warp 0 does it from shared memory, so B ≤ W); warp w's exclusive prefix is warp
//              w-1's inclusive one, and the tile's total is the last warp's;
//   4. carry:  either `running` (one block walks the tiles in order, keeping the prefix of all
//              earlier tiles: thread t's incoming prefix is (lane exclusive ∘ warp exclusive) ∘
//              carry and the next carry is tile total ∘ carry), or `three_pass` (the split-T form:
//              every tile is scanned on its own, an exclusive sequential scan runs over the tile
//              totals, and each tile's outputs are then composed with their carry on the right,
//              exactly the chunked schedule of chunked.hpp with the tile scan as its map).
//   Each item's output is p_j ∘ incoming (running) or (p_j ∘ block exclusive) ∘ carry (three-pass).
//
// Nothing is ever composed with the identity (derive.hpp explains why that matters under
// rescaling): a prefix that is empty is absent (std::optional), and a kernel predicates on the
// same condition. In a partial last tile the threads, lanes and warps without items are a suffix,
// so a lane with a value always reads a lane with a value, and "the last lane" is the last one
// that has items. Exactness over any associative operation (docs/math.md §8 fact 1) is what
// properties/scan_tiled_equals_fold.cpp checks, over rationals and over the free monoid, for
// every policy shape; the GPU scan kernels follow this order, and their CPU twins are this
// function over the kernels' own float arithmetic.
#pragma once

#include <algorithm>
#include <cstddef>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "kalman_oracle/detail/mutant.hpp"
#include "kalman_oracle/scan/derive.hpp"
#include "kalman_oracle/scan/monoid.hpp"
#include "kalman_oracle/scan/sequential.hpp"

namespace kalman_oracle {

/// How the tiles of a tiled scan are joined (see the file comment, step 4).
enum class tile_carry { running, three_pass };

inline std::string to_string(tile_carry carry) { return carry == tile_carry::running ? "running" : "three_pass"; }

/// The shape of a kernel's block scan: what the kernel's traits fix at compile time.
struct tiled_policy {
  std::size_t items_per_thread = 4;
  std::size_t warp_size = 32;
  std::size_t warps_per_block = 4;
  tile_carry carry = tile_carry::running;

  std::size_t threads_per_block() const { return warp_size * warps_per_block; }
  std::size_t tile_items() const { return items_per_thread * threads_per_block(); }
};

inline std::string to_string(const tiled_policy& p) {
  return "tiled(items_per_thread=" + std::to_string(p.items_per_thread) + ", warp_size=" + std::to_string(p.warp_size) +
         ", warps_per_block=" + std::to_string(p.warps_per_block) + ", carry=" + to_string(p.carry) + ")";
}

/// Throws std::invalid_argument naming the field when the policy cannot describe a kernel.
inline void validate(const tiled_policy& p) {
  auto bad = [&](const std::string& rule) { throw std::invalid_argument("tiled scan: " + to_string(p) + ": " + rule); };
  if (p.items_per_thread == 0) bad("items_per_thread must be at least 1");
  if (p.warp_size == 0) bad("warp_size must be at least 1");
  if (p.warps_per_block == 0) bad("warps_per_block must be at least 1");
  if (p.warps_per_block > p.warp_size) bad("warps_per_block must not exceed warp_size (one warp scans the warp totals)");
}

namespace detail {

/// a ∘ b where either may be absent (the empty prefix): never a compose with the identity.
template <scan_monoid M>
std::optional<typename M::value_type> compose_present(const M& monoid, const std::optional<typename M::value_type>& a,
                                                      const std::optional<typename M::value_type>& b) {
  if (!a) return b;
  if (!b) return a;
  return monoid.compose(*a, *b);
}

/// Kogge–Stone inclusive scan of `values` (a warp's lanes; the absent ones a suffix), one stride at
/// a time, every lane reading the previous stride's values as a shuffle does.
template <scan_monoid M>
void kogge_stone_inclusive(const M& monoid, std::vector<std::optional<typename M::value_type>>& values) {
  const std::size_t lanes = values.size();
  std::vector<std::optional<typename M::value_type>> previous;
  for (std::size_t d = 1; d < lanes; d *= 2) {
    previous = values;
    for (std::size_t l = d; l < lanes; ++l) {
      if (!values[l]) continue;  // a lane without items: its value is never read
      // The planted bug reads the source lane after this stride may have updated it (an in-place
      // scan without the shuffle's snapshot): the classic race of a shared-memory Kogge–Stone.
      const auto& source = KALMAN_ORACLE_MUTANT(tiled_kogge_stone_in_place, previous[l - d], values[l - d]);
      if (!source) throw std::logic_error("tiled scan: a lane with items reads a lane without (absent lanes not a suffix)");
      values[l] = monoid.compose(*previous[l], *source);
    }
  }
}

/// The last present value of a suffix-absent sequence (the warp's or block's total).
template <class V>
std::optional<V> last_present(const std::vector<std::optional<V>>& values) {
  for (std::size_t i = values.size(); i-- > 0;)
    if (values[i]) return values[i];
  return std::nullopt;
}

/// One tile's block scan (steps 1–3) of xs, with `carry` (absent: none) composed in as in the
/// running mode. Writes the outputs to out[0, xs.size()) and returns the tile's total (without
/// the carry).
template <scan_monoid M>
typename M::value_type tile_block_scan(const M& monoid, std::span<const typename M::value_type> xs,
                                       const tiled_policy& p, const std::optional<typename M::value_type>& carry,
                                       std::span<typename M::value_type> out) {
  using V = typename M::value_type;
  const std::size_t n = xs.size(), I = p.items_per_thread, W = p.warp_size, B = p.warps_per_block;
  const std::size_t threads = p.threads_per_block();

  // 1. thread: each thread's sequential fold of its own items.
  std::vector<std::optional<V>> thread_total(threads);
  for (std::size_t t = 0; t < threads; ++t) {
    const std::size_t begin = t * I;
    if (begin >= n) break;
    const std::size_t end = std::min(begin + I, n);
    out[begin] = xs[begin];
    for (std::size_t i = begin + 1; i < end; ++i) out[i] = monoid.compose(xs[i], out[i - 1]);
    thread_total[t] = out[end - 1];
  }

  // 2. warp: Kogge–Stone over each warp's lanes.
  std::vector<std::optional<V>> lane_inclusive(threads);
  std::vector<std::optional<V>> warp_total(B);
  for (std::size_t w = 0; w < B; ++w) {
    std::vector<std::optional<V>> lanes(thread_total.begin() + w * W, thread_total.begin() + (w + 1) * W);
    kogge_stone_inclusive(monoid, lanes);
    warp_total[w] = last_present(lanes);
    for (std::size_t l = 0; l < W; ++l) lane_inclusive[w * W + l] = lanes[l];
  }

  // 3. block: Kogge–Stone over the warp totals.
  std::vector<std::optional<V>> warp_inclusive = warp_total;
  kogge_stone_inclusive(monoid, warp_inclusive);
  const std::optional<V> tile_total = last_present(warp_inclusive);

  // Each thread's incoming prefix, then its items' outputs.
  for (std::size_t t = 0; t < threads; ++t) {
    const std::size_t begin = t * I;
    if (begin >= n) break;
    const std::size_t w = t / W, l = t % W;
    const std::optional<V> lane_exclusive = l > 0 ? lane_inclusive[t - 1] : std::nullopt;
    const std::optional<V> warp_exclusive = w > 0 ? warp_inclusive[w - 1] : std::nullopt;
    const std::optional<V> block_exclusive = compose_present(monoid, lane_exclusive, warp_exclusive);
    const std::optional<V> incoming = compose_present(monoid, block_exclusive, carry);
    if (!incoming) continue;
    const std::size_t end = std::min(begin + I, n);
    for (std::size_t i = begin; i < end; ++i) out[i] = monoid.compose(out[i], *incoming);
  }
  return *tile_total;
}

}  // namespace detail

/// inclusive[t] = x_t ∘ … ∘ x_0, computed in the order of a kernel with policy p.
template <scan_monoid M>
std::vector<typename M::value_type> tiled_inclusive_scan(const M& monoid, std::span<const typename M::value_type> xs,
                                                         const tiled_policy& p) {
  using V = typename M::value_type;
  validate(p);
  const std::size_t n = xs.size(), tile = p.tile_items();
  std::vector<V> out(xs.begin(), xs.end());
  const std::span<V> all(out);
  if (p.carry == tile_carry::running) {
    std::optional<V> carry;
    for (std::size_t begin = 0; begin < n; begin += tile) {
      const std::size_t count = std::min(tile, n - begin);
      const V total = detail::tile_block_scan(monoid, xs.subspan(begin, count), p, carry, all.subspan(begin, count));
      carry = detail::compose_present(monoid, std::optional<V>(total), carry);
    }
    return out;
  }
  // three_pass: map (each tile alone), carry (exclusive scan of the totals), emit.
  std::vector<V> totals;
  for (std::size_t begin = 0; begin < n; begin += tile) {
    const std::size_t count = std::min(tile, n - begin);
    totals.push_back(
        detail::tile_block_scan(monoid, xs.subspan(begin, count), p, std::nullopt, all.subspan(begin, count)));
  }
  if (totals.size() <= 1) return out;
  const std::vector<V> carry =
      sequential_inclusive_scan(monoid, std::span<const V>(totals).first(totals.size() - 1));
  for (std::size_t k = 1; k < totals.size(); ++k) {
    const std::size_t begin = k * tile, end = std::min(begin + tile, n);
    for (std::size_t i = begin; i < end; ++i) out[i] = monoid.compose(out[i], carry[k - 1]);
  }
  return out;
}

template <scan_monoid M>
std::vector<typename M::value_type> tiled_exclusive_scan(const M& monoid, std::span<const typename M::value_type> xs,
                                                         const tiled_policy& p) {
  validate(p);
  return detail::exclusive_from_inclusive(monoid, xs, [&monoid, &p](std::span<const typename M::value_type> head) {
    return tiled_inclusive_scan(monoid, head, p);
  });
}

}  // namespace kalman_oracle
