// On the GPU (label `gpu`): every Möbius scan kernel equals its CPU twin bit for bit, on random
// leaves, for every compiled shape and lengths at tile edges ± 1, with the output poisoned with NaN
// first, and gives the same bits when run again. Without a usable CUDA device the test prints
// "SKIP: <why>" and CTest reports it skipped (gpu/CMakeLists.txt).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "kalman_oracle/gpu/mobius_scan.hpp"
#include "kalman_oracle/gpu/twin/mobius_scan_twin.hpp"
#include "mobius_leaves.hpp"
#include "skip_without_device.hpp"

using namespace kalman_oracle::gpu;
using kalman_oracle::gpu::testing::draw_leaves;
using kalman_oracle::gpu::testing::skip_without_device;

namespace {

/// "" when equal bit for bit, else the first differing position.
std::string first_difference(const std::vector<mobius_f32>& got, const std::vector<mobius_f32>& want) {
  for (std::size_t i = 0; i < want.size(); ++i)
    if (!same_bits(got[i], want[i]))
      return "index " + std::to_string(i) + ": kernel [" + std::to_string(got[i].a) + ", " + std::to_string(got[i].b) +
             ", " + std::to_string(got[i].c) + ", " + std::to_string(got[i].d) + "], twin [" +
             std::to_string(want[i].a) + ", " + std::to_string(want[i].b) + ", " + std::to_string(want[i].c) + ", " +
             std::to_string(want[i].d) + "]";
  return "";
}

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("gpu: every Möbius scan kernel equals its CPU twin bit for bit, run after run") {
    if (skip_without_device()) return;
    struct size {
      int lanes, T;
    };
    const size sizes[] = {{1, 1},    {1, 2},    {3, 31},   {2, 33},    {5, 255},  {4, 257},   {2, 511},  {2, 513},
                          {1, 2047}, {2, 2049}, {3, 4097}, {64, 1000}, {7, 6145}, {300, 129}, {1, 20000}};
    std::uint32_t seed = 11;
    int checked = 0;
    for (const mobius_scan_path path : all_mobius_scan_paths) {
      for (const mobius_scan_shape shape : compiled_mobius_scan_shapes) {
        if (path == mobius_scan_path::sequential_lanes && shape.items_per_thread != 1) continue;
        for (const size s : sizes) {
          // Every other size with triangular leaves (exact zeros in c).
          const auto leaves = draw_leaves(static_cast<std::size_t>(s.lanes) * s.T, seed, seed % 2 == 0);
          ++seed;
          const auto twin = mobius_scan_twin(leaves, s.lanes, s.T, path, shape);
          const auto first = mobius_scan_host(leaves, s.lanes, s.T, path, shape);
          const auto second = mobius_scan_host(leaves, s.lanes, s.T, path, shape);
          CAPTURE(to_string(path));
          CAPTURE(to_string(shape));
          CAPTURE(s.lanes);
          CAPTURE(s.T);
          const std::string vs_twin = first_difference(first, twin);
          CHECK_MESSAGE(vs_twin.empty(), "kernel differs from twin at " << vs_twin);
          const std::string rerun = first_difference(second, first);
          CHECK_MESSAGE(rerun.empty(), "second run differs from the first at " << rerun);
          ++checked;
        }
      }
    }
    std::printf("gpu: %d (path, shape, size) cases bit-identical to the twin and across runs\n", checked);
  }

  TEST_CASE("gpu: the device compose (product, power-of-two rescale) equals the host's bit for bit in every binade") {
    // The device rescale multiplies by 2^e directly where the host calls std::ldexp
    // (float_ops.cuh); random scan leaves never reach the edge exponents, so this walks the largest
    // entry of the product through every binade of binary32, subnormals included (e from -127 to
    // 149), with the other entries up to 40 binades below it (underflowing to subnormals or zero
    // when rescaled), random signs and exact zeros; once with the identity as the earlier map (the
    // product is the later map exactly), once with a random earlier map.
    if (skip_without_device()) return;
    std::mt19937 rng(2026);
    std::uniform_real_distribution<float> mantissa(1.0f, 2.0f), earlier_entry(0.5f, 2.0f);
    std::uniform_int_distribution<int> below(0, 40), coin(0, 9);
    std::vector<mobius_f32> later, earlier;
    for (int binade_of_largest = -149; binade_of_largest <= 127; ++binade_of_largest) {
      for (int k = 0; k < 64; ++k) {
        auto entry = [&](bool largest) {
          if (!largest && coin(rng) == 0) return 0.0f;
          const float magnitude = std::ldexp(mantissa(rng), binade_of_largest - (largest ? 0 : below(rng)));
          return coin(rng) < 5 ? magnitude : -magnitude;
        };
        mobius_f32 m{entry(false), entry(false), entry(false), entry(false)};
        float* entries[] = {&m.a, &m.b, &m.c, &m.d};
        *entries[k % 4] = entry(true);
        later.push_back(m);
        earlier.push_back(
            k % 2 == 0 ? mobius_f32{1.0f, 0.0f, 0.0f, 1.0f}
                       : mobius_f32{earlier_entry(rng), earlier_entry(rng), earlier_entry(rng), earlier_entry(rng)});
      }
    }
    const auto device = mobius_compose_host(later, earlier);
    std::vector<mobius_f32> host(later.size());
    for (std::size_t i = 0; i < later.size(); ++i) host[i] = mobius_compose(later[i], earlier[i]);
    const std::string difference = first_difference(device, host);
    CHECK_MESSAGE(difference.empty(), "device compose differs from the host's at " << difference);
    std::printf("gpu: %zu composes across every binade bit-identical to the host's\n", later.size());
  }

  TEST_CASE("gpu: a shape that is not compiled in is refused by name") {
    if (skip_without_device()) return;
    const auto leaves = draw_leaves(4, 1);
    CHECK_THROWS_AS(mobius_scan_host(leaves, 1, 4, mobius_scan_path::tiled_running, {3, 3}), std::invalid_argument);
  }
}
