// division.cuh on the device (label `gpu`): the kernels' reciprocal (the SFU's approximation and
// one Newton step) is rcp.rn.f32's RN(1/d) for every d in the range (exhaustively), and divide(x, d)
// gives the bits of the device's IEEE division div.rn.f32 (and of the host's x / d, which the twins
// compute) for every divisor significand against sixteen dividends, and on random pairs over the
// whole binary32 range (zeros, subnormals, infinities, NaNs, overflowing and underflowing quotients).
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <sstream>
#include <vector>

#include "kalman_oracle/gpu/division_probe.hpp"
#include "skip_without_device.hpp"

using namespace kalman_oracle::gpu;
using namespace kalman_oracle::gpu::testing;

namespace {

bool same_bits(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b);
}

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("gpu: the shared reciprocal is RN(1/d) for every d in the range") {
    if (skip_without_device()) return;
    long long first_bad = -1;
    const std::uint64_t wrong = device_reciprocal_mismatches_in_range(first_bad);
    CHECK_MESSAGE(wrong == 0, wrong << " reciprocals differ from rcp.rn.f32, the first at bits " << first_bad);
    std::printf("gpu: reciprocal == rcp.rn.f32 for all 2 x 125 x 2^23 d with |d| in [2^-62, 2^63)\n");
  }

  TEST_CASE("gpu: divide equals div.rn.f32 for every divisor significand") {
    if (skip_without_device()) return;
    std::vector<float> dividends{1.0f, std::nextafter(1.0f, 2.0f), std::nextafter(2.0f, 1.0f), 1.5f};
    std::mt19937 rng(20261204);
    std::uniform_int_distribution<std::uint32_t> significand(0, (1u << 23) - 1);
    while (dividends.size() < 16) dividends.push_back(std::bit_cast<float>(0x3f800000u | significand(rng)));
    long long first_bad = -1;
    const std::uint64_t wrong = device_divide_mismatches_over_significands(dividends, first_bad);
    CHECK_MESSAGE(wrong == 0, wrong << " pairs differ, the first at index " << first_bad);
    std::printf("gpu: divide == div.rn.f32 on %zu x 2^23 pairs (every divisor significand)\n", dividends.size());
  }

  TEST_CASE("gpu: divide equals div.rn.f32 and the host's division on random pairs over the whole range") {
    if (skip_without_device()) return;
    std::mt19937 rng(5);
    std::uniform_int_distribution<std::uint32_t> any_bits(0, 0xffffffffu), significand(0, (1u << 23) - 1);
    std::uniform_int_distribution<int> in_range_binade(-62, 62), coin(0, 1);
    std::vector<float> x, d;
    for (int i = 0; i < 4'000'000; ++i) {
      if (i % 2 == 0) {  // any bit patterns: the fallback and the range's edges
        x.push_back(std::bit_cast<float>(any_bits(rng)));
        d.push_back(std::bit_cast<float>(any_bits(rng)));
      } else {  // inside the range, random signs
        auto draw = [&] {
          const float v = std::ldexp(std::bit_cast<float>(0x3f800000u | significand(rng)), in_range_binade(rng));
          return coin(rng) ? v : -v;
        };
        x.push_back(draw());
        d.push_back(draw());
      }
    }
    const device_quotients got = device_quotients_of(x, d);
    std::size_t vs_div_rn = 0, vs_host = 0;
    std::ostringstream first;
    for (std::size_t i = 0; i < x.size(); ++i) {
      const bool bad_device = !same_bits(got.divide[i], got.div_rn[i]),
                 bad_host = !same_bits(got.divide[i], x[i] / d[i]);
      if ((bad_device || bad_host) && vs_div_rn + vs_host == 0)
        first << std::hexfloat << "x = " << x[i] << ", d = " << d[i] << ": divide " << got.divide[i] << ", div.rn "
              << got.div_rn[i] << ", host " << x[i] / d[i];
      vs_div_rn += bad_device;
      vs_host += bad_host;
    }
    INFO(first.str());
    CHECK(vs_div_rn == 0);
    CHECK(vs_host == 0);
    std::printf("gpu: divide == div.rn.f32 == host x / d on %zu random pairs\n", x.size());
  }
}
