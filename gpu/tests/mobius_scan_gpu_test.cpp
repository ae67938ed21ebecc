// On the GPU (label `gpu`): every Möbius scan kernel equals its CPU twin bit for bit, on random
// leaves, for every compiled shape and lengths at tile edges ± 1, with the output poisoned with NaN
// first, and gives the same bits when run again. Without a usable CUDA device the test prints
// "SKIP: <why>" and CTest reports it skipped (gpu/CMakeLists.txt).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
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

  TEST_CASE("gpu: a shape that is not compiled in is refused by name") {
    if (skip_without_device()) return;
    const auto leaves = draw_leaves(4, 1);
    CHECK_THROWS_AS(mobius_scan_host(leaves, 1, 4, mobius_scan_path::tiled_running, {3, 3}), std::invalid_argument);
  }
}
