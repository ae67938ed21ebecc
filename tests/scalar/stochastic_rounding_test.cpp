// binary32 with stochastic rounding (scalar/stochastic_rounding.hpp): every result is one of the two
// binary32 neighbours of the exact one, exact results stay exact, the choice is unbiased, and it
// depends only on the seed and the operands (not on the thread or the order of the operations).
#include "kalman_oracle/scalar/stochastic_rounding.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <thread>
#include <vector>

using kalman_oracle::stochastic_binary32;
using kalman_oracle::stochastic_rounding_scope;

namespace {

float neighbour_below(double r) {
  const float f = static_cast<float>(r);
  return static_cast<double>(f) <= r ? f : std::nextafter(f, -INFINITY);
}

}  // namespace

TEST_CASE("stochastic rounding: results are binary32 neighbours of the exact result; exact results stay exact") {
  stochastic_rounding_scope scope(7);
  std::uint32_t state = 12345;
  const auto next = [&state] {
    state = state * 1664525u + 1013904223u;
    return std::ldexp(static_cast<float>(state >> 8), -24) * 4 - 2;  // in [-2, 2), 24 bits
  };
  for (int i = 0; i < 20000; ++i) {
    const float x = next(), y = next();
    // Sums and products of these binary32 values are exact in binary64.
    for (const auto& [exact, got] : {std::pair{double(x) + double(y), (stochastic_binary32(x) + y).value()},
                                     std::pair{double(x) * double(y), (stochastic_binary32(x) * y).value()}}) {
      const float lo = neighbour_below(exact);
      if (static_cast<double>(lo) == exact) {
        CHECK(got == lo);
      } else {
        const float hi = std::nextafter(lo, INFINITY);
        CHECK((got == lo || got == hi));
      }
    }
  }
  CHECK((stochastic_binary32(1.5f) * stochastic_binary32(2.0f)).value() == 3.0f);
  CHECK((stochastic_binary32(0.1f) - stochastic_binary32(0.1f)).value() == 0.0f);
}

TEST_CASE("stochastic rounding: unbiased (rounds up with probability equal to the distance from below)") {
  // 1 + 2^-25 lies a quarter of the way from 1 to the next binary32 number (1 + 2^-23).
  int up = 0;
  const int runs = 20000;
  for (int s = 1; s <= runs; ++s) {
    stochastic_rounding_scope scope(static_cast<std::uint64_t>(s));
    up += (stochastic_binary32(1.0f) + stochastic_binary32(0x1p-25f)).value() > 1.0f;
  }
  // Binomial(20000, 1/4): standard deviation 61; 6 standard deviations.
  CHECK(std::abs(up - runs / 4) < 370);
}

TEST_CASE("stochastic rounding: the same bits for the same seed and operands, whatever the thread") {
  const auto run = [](std::uint64_t seed) {
    stochastic_rounding_scope scope(seed);
    std::vector<float> r;
    stochastic_binary32 acc(0.0f);
    for (int i = 1; i <= 1000; ++i) {
      acc += stochastic_binary32(1.0f) / stochastic_binary32(static_cast<float>(i));
      r.push_back(acc.value());
      r.push_back(exp(stochastic_binary32(0.001f * static_cast<float>(i))).value());
    }
    return r;
  };
  const std::vector<float> here = run(3);
  std::vector<float> there;
  std::thread([&] { there = run(3); }).join();
  CHECK(here == there);
  CHECK(run(4) != here);  // another seed rounds some operation the other way
}
