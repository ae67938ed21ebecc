// The CPU twins of the batched Möbius scans against the exact scan (label `twin`; CI runs these
// without a GPU). The GPU test (mobius_scan_gpu_test.cpp) shows kernel == twin bit for bit, so
// what holds here for the twin holds for the kernel.
//
// The bound (docs/kernels.md, "The bound the twins are checked against"; the argument of
// docs/math.md §8 fact 4 with r = 2): leaves with entries >= 0, exact in binary32; every entry of a
// compose is fl(x_i1 y_1j + fl(x_i2 y_2j)), so each monomial of an m-leaf prefix carries at most
// K = 2(m-1) roundings, each a factor in [1-u, 1+u] (u = 2^-24), and the power-of-two rescaling is
// exact while no entry is subnormal. Hence computed = c · P ∘ (1+E) with c > 0 and
// (1-u)^K <= 1+E_ij <= (1+u)^K, so for non-zero entries e, f the cross ratio
// R = (S_e P_f) / (P_e S_f) lies in [B_K^-1, B_K], B_K = ((1+u)/(1-u))^K, and S_e = 0 exactly when
// P_e = 0. The no-subnormal hypothesis is checked on the twin's own values (a test whose
// hypothesis fails says so, it does not pass).
//
// Evaluation. P is the fold in MPFR at 256 bits (the same theorem with u' = 2^-256 puts every entry
// within a relative 2(m-1)·2^-256 < 2^-240 of the exact product for m <= 2^14, without
// cancellation), and R and B_K are evaluated at 256 bits too (a few more roundings of 2^-256). The
// check asks R <= B_K (1 - 2^-200) and R >= B_K^-1 (1 + 2^-200): stricter than the bound by far more
// than the evaluation error, so a pass is a proof for these inputs. (Exact rationals would do the
// same but cost minutes: the exact products of 4097 maps have 10^5-bit entries.)
#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kalman_oracle/gpu/twin/mobius_scan_twin.hpp"
#include "kalman_oracle/scalar/precision_scope.hpp"
#include "kalman_oracle/scalar/types.hpp"
#include "mobius_leaves.hpp"

using namespace kalman_oracle;
using namespace kalman_oracle::gpu;
using kalman_oracle::gpu::testing::draw_leaves;

namespace {

using wide_map = std::array<mpfr_real, 4>;

wide_map widen(const mobius_f32& m) { return {mpfr_real(m.a), mpfr_real(m.b), mpfr_real(m.c), mpfr_real(m.d)}; }

wide_map wide_product(const wide_map& l, const wide_map& e) {
  return {l[0] * e[0] + l[1] * e[2], l[0] * e[1] + l[1] * e[3], l[2] * e[0] + l[3] * e[2], l[2] * e[1] + l[3] * e[3]};
}

/// Checks one lane's computed prefixes against the fold; returns "" or the first failure.
std::string check_lane(const std::vector<mobius_f32>& leaves, const std::vector<mobius_f32>& computed) {
  const precision_scope scope(256);
  const mpfr_real u = ldexp(mpfr_real(1), -24);
  const mpfr_real step = ((1 + u) / (1 - u)) * ((1 + u) / (1 - u));  // two roundings a leaf
  const mpfr_real slack = ldexp(mpfr_real(1), -200);
  mpfr_real bound = 1;  // B_K
  wide_map P{};
  if (!leaves.empty() && !same_bits(computed[0], leaves[0]))
    return "position 0: a one-map prefix must be the raw leaf, bit for bit";  // K = 0: no rounding at all
  for (std::size_t t = 0; t < leaves.size(); ++t) {
    P = t == 0 ? widen(leaves[0]) : wide_product(widen(leaves[t]), P);
    if (t == 0) continue;
    bound *= step;
    const wide_map S = widen(computed[t]);
    const float raw[4] = {computed[t].a, computed[t].b, computed[t].c, computed[t].d};
    std::size_t f = 0;
    for (std::size_t i = 0; i < 4; ++i) {
      if (raw[i] != 0.0f && !std::isnormal(raw[i]))
        return "position " + std::to_string(t) + ": hypothesis fails (entry " + std::to_string(i) +
               " not a normal binary32 number: " + std::to_string(raw[i]) + ")";
      if ((S[i] == 0) != (P[i] == 0))
        return "position " + std::to_string(t) + ": entry " + std::to_string(i) + " is zero in one of twin and fold";
      if (P[i] > P[f]) f = i;
    }
    const mpfr_real upper = bound * (1 - slack), lower = (1 + slack) / bound;
    for (std::size_t e = 0; e < 4; ++e) {
      if (P[e] == 0) continue;
      const mpfr_real ratio = (S[e] * P[f]) / (P[e] * S[f]);
      if (ratio > upper || ratio < lower)
        return "position " + std::to_string(t) + ": entry " + std::to_string(e) +
               " differs from the exact fold beyond the bound (cross ratio " + ratio.str(12) + ", allowed [" +
               lower.str(12) + ", " + upper.str(12) + "])";
    }
  }
  return "";
}

std::vector<mobius_f32> lane_of(const std::vector<mobius_f32>& all, int lanes, int T, int lane, mobius_scan_path path) {
  std::vector<mobius_f32> out(static_cast<std::size_t>(T));
  for (int t = 0; t < T; ++t)
    out[static_cast<std::size_t>(t)] = path == mobius_scan_path::sequential_lanes
                                           ? all[static_cast<std::size_t>(t) * lanes + lane]
                                           : all[static_cast<std::size_t>(lane) * T + t];
  return out;
}

}  // namespace

TEST_SUITE("twin") {
  TEST_CASE("twin: every Möbius scan path and compiled shape is within the proven bound of the exact scan") {
    // Lengths at the tile edges of every compiled shape (32, 256, 512, 2048 maps a tile) ± 1.
    const int lengths[] = {1, 2, 31, 33, 255, 257, 513, 2047, 2049, 4097};
    const int lanes = 2;
    std::uint32_t seed = 1;
    for (const mobius_scan_path path : all_mobius_scan_paths) {
      for (const mobius_scan_shape shape : compiled_mobius_scan_shapes) {
        if (path == mobius_scan_path::sequential_lanes && shape.items_per_thread != 1) continue;  // no shape
        for (const int T : lengths) {
          for (const bool triangular : {false, true}) {
            const auto leaves = draw_leaves(static_cast<std::size_t>(lanes) * T, seed++, triangular);
            const auto computed = mobius_scan_twin(leaves, lanes, T, path, shape);
            for (int lane = 0; lane < lanes; ++lane) {
              CAPTURE(to_string(path));
              CAPTURE(to_string(shape));
              CAPTURE(T);
              CAPTURE(lane);
              CAPTURE(triangular);
              const std::string failure =
                  check_lane(lane_of(leaves, lanes, T, lane, path), lane_of(computed, lanes, T, lane, path));
              CHECK_MESSAGE(failure.empty(), failure);
            }
          }
        }
      }
    }
  }

  TEST_CASE("twin: a one-map prefix is the raw leaf (never composed with the identity); sizes are checked") {
    const auto leaves = draw_leaves(1, 7, false);
    const auto one = mobius_scan_twin(leaves, 1, 1, mobius_scan_path::tiled_running, {4, 4});
    CHECK(same_bits(one[0], leaves[0]));
    CHECK_THROWS_WITH_AS(mobius_scan_twin(leaves, 2, 1, mobius_scan_path::tiled_running, {4, 4}),
                         "mobius_scan_twin: leaves has 1 maps, want lanes * T = 2 * 1", std::invalid_argument);
  }
}
