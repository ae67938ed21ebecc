// splitmix64's finaliser (Steele, Lea and Flood 2014): a well-mixed 64-bit function of its argument.
// The random bits of the stochastic roundings (stochastic_rounding.hpp for binary32 arithmetic,
// operand_rounding.hpp for tensor-core operands) are this function of a seed and the rounded value's
// bits, not a stream: a run gives the same bits whatever the thread count and the scheduling (the
// fixtures' bytes must not depend on --jobs).
#pragma once

#include <cstdint>

namespace kalman_oracle {

constexpr std::uint64_t splitmix64_mix(std::uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace kalman_oracle
