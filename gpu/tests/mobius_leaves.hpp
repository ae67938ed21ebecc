// Random Möbius leaves for the scan tests (twin and GPU), as binary32 values.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "kalman_oracle/gpu/algebra/mobius.cuh"

namespace kalman_oracle::gpu::testing {

/// Leaves with entries in [1/8, 8]. With `triangular`, c = 0 (KLA's precision leaf when p̄ = 0), so
/// that exact zeros are covered; then the diagonal entries are drawn from [2^-1/2, 2^1/2]: the
/// binade gap between the product's a and d is a random walk, and with the wide range it passes the
/// 126 binades of binary32 within ~1000 maps, after which d underflows (the no-subnormal hypothesis
/// of the twin test fails, as it reports: a kernel must not scan such lanes with power-of-two
/// rescaling alone; docs/kernels.md).
inline std::vector<mobius_f32> draw_leaves(std::size_t count, std::uint32_t seed, bool triangular = false) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> log2_entry(-3.0f, 3.0f), log2_diagonal(-0.5f, 0.5f);
  auto entry = [&] { return std::exp2(log2_entry(rng)); };
  auto diagonal = [&] { return std::exp2(log2_diagonal(rng)); };
  std::vector<mobius_f32> leaves(count);
  for (auto& m : leaves)
    m = triangular ? mobius_f32{diagonal(), entry(), 0.0f, diagonal()} : mobius_f32{entry(), entry(), entry(), entry()};
  return leaves;
}

}  // namespace kalman_oracle::gpu::testing
