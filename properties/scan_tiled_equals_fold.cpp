// The kernel-shaped tiled scan (scan/tiled.hpp) equals the sequential fold exactly, for every
// policy shape (items per thread, warp size, warps per block, running or three-pass carry) and
// every length (docs/math.md §8 fact 2): over the free monoid of words (which makes it true for
// every monoid), over rational Möbius maps under each rescale mode and over rational affine maps.
// Lengths straddle the tile edges of the drawn policy (k·tile ± 1), where partial tiles, absent
// lanes and absent warps appear.
#include <span>
#include <string>
#include <vector>

#include "generators.hpp"
#include "kalman_oracle/algebra/affine.hpp"
#include "kalman_oracle/algebra/mobius.hpp"
#include "kalman_oracle/scan/sequential.hpp"
#include "kalman_oracle/scan/tiled.hpp"
#include "kalman_oracle/scan/word_monoid.hpp"
#include "rapidcheck_doctest.hpp"

using namespace kalman_oracle;
using kalman_oracle::testing::check_property;
namespace kt = kalman_oracle::testing;

namespace {

/// A policy of the shapes kernels use (warp size 32, up to 8 items and 4 warps) and of small odd
/// shapes, where more tiles, partial warps and one-lane warps appear at short lengths.
rc::Gen<tiled_policy> gen_policy() {
  return rc::gen::exec([] {
    tiled_policy p;
    p.items_per_thread = *rc::gen::oneOf(rc::gen::inRange<std::size_t>(1, 6), rc::gen::element<std::size_t>(8, 16));
    p.warp_size = *rc::gen::oneOf(rc::gen::inRange<std::size_t>(1, 9), rc::gen::just<std::size_t>(32));
    p.warps_per_block = *rc::gen::inRange<std::size_t>(1, std::min<std::size_t>(p.warp_size, 4) + 1);
    p.carry = *rc::gen::element(tile_carry::running, tile_carry::three_pass);
    return p;
  });
}

/// Lengths for policy p: anything up to 300, and the edges of the first tiles (k·tile - 1, k·tile,
/// k·tile + 1 for k = 1, 2, 3), capped so that 32-lane policies stay cheap.
rc::Gen<std::size_t> gen_length(const tiled_policy& p) {
  const std::size_t tile = p.tile_items();
  std::vector<std::size_t> edges{0, 1, 2};
  for (std::size_t k = 1; k <= 3; ++k)
    for (std::size_t e : {k * tile - 1, k * tile, k * tile + 1})
      if (e <= 1600) edges.push_back(e);
  return rc::gen::oneOf(rc::gen::elementOf(edges), rc::gen::inRange<std::size_t>(0, 301));
}

template <class V>
void assert_same_scan(const char* what, const std::vector<V>& got, const std::vector<V>& want) {
  RC_ASSERT(got.size() == want.size());
  for (std::size_t t = 0; t < got.size(); ++t)
    if (!(got[t] == want[t]))
      RC_FAIL(std::string(what) + " differs from the fold first at position " + std::to_string(t) + ": got " +
              rc::toString(got[t]) + ", want " + rc::toString(want[t]));
}

/// inclusive == the fold; exclusive == the fold shifted by one with the identity in front.
template <scan_monoid M>
void assert_tiled_equals_fold(const M& monoid, const std::vector<typename M::value_type>& xs, const tiled_policy& p) {
  using V = typename M::value_type;
  RC_LOG() << to_string(p) << ", n = " << xs.size() << "\n";
  const std::span<const V> leaves(xs);
  const std::vector<V> fold = sequential_inclusive_scan(monoid, leaves);
  std::vector<V> shifted;
  if (!xs.empty()) {
    shifted.push_back(monoid.identity());
    shifted.insert(shifted.end(), fold.begin(), fold.end() - 1);
  }
  assert_same_scan("tiled inclusive scan", tiled_inclusive_scan(monoid, leaves, p), fold);
  assert_same_scan("tiled exclusive scan", tiled_exclusive_scan(monoid, leaves, p), shifted);
}

}  // namespace

TEST_SUITE("scan") {
  TEST_CASE("scan: tiled equals the fold over the free monoid of words, every policy") {
    check_property("scan_tiled_equals_fold_words", [] {
      const tiled_policy p = *gen_policy();
      const std::size_t n = *gen_length(p);
      std::vector<std::vector<int>> xs;
      for (std::size_t t = 0; t < n; ++t) xs.push_back({static_cast<int>(t)});
      assert_tiled_equals_fold(word_monoid{}, xs, p);
    });
  }

  TEST_CASE("scan: tiled equals the fold over rational Möbius maps, every policy and rescale mode") {
    check_property("scan_tiled_equals_fold_mobius_rational", [] {
      const tiled_policy p = *gen_policy();
      const std::size_t n = *gen_length(p);
      const auto mode = *rc::gen::element(rescale_mode::none, rescale_mode::trace, rescale_mode::max_entry,
                                          rescale_mode::power_of_two);
      RC_LOG() << "rescale_mode " << to_string(mode) << "\n";
      // Small integer entries beyond 33 leaves keep the exact products cheap (as in scan_equals_fold).
      const auto entry = n <= 33 ? kt::gen_rational_nonneg() : kt::gen_small_integer();
      const auto xs = *rc::gen::container<std::vector<mobius<rational>>>(n, kt::gen_mobius_leaf(entry));
      assert_tiled_equals_fold(mobius_monoid<rational>{mode}, xs, p);
    });
  }

  TEST_CASE("scan: tiled equals the fold over rational affine maps, every policy") {
    check_property("scan_tiled_equals_fold_affine_rational", [] {
      const tiled_policy p = *gen_policy();
      const std::size_t n = *gen_length(p);
      const auto entry = n <= 33 ? kt::gen_rational()
                                 : rc::gen::map(rc::gen::inRange<long>(-3, 4), [](long k) { return rational(k); });
      const auto xs = *rc::gen::container<std::vector<affine<rational>>>(n, kt::gen_affine(entry));
      assert_tiled_equals_fold(affine_monoid<rational>{}, xs, p);
    });
  }
}
