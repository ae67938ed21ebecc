// The free monoid of words over int: compose(later, earlier) = earlier followed by later. With the
// leaves {0}, …, {n-1}, inclusive[t] = (0, 1, …, t) is the formal product itself, so a schedule
// that reproduces it for some length (and schedule shape) reproduces the fold on every monoid for
// that length: each monoid is a quotient of the free one (docs/math.md §8 fact 2). The scan tests
// and properties use it; so can anyone checking a schedule of their own.
#pragma once

#include <vector>

namespace kalman_oracle {

struct word_monoid {
  using value_type = std::vector<int>;
  value_type identity() const { return {}; }
  value_type compose(const value_type& later, const value_type& earlier) const {
    value_type word = earlier;
    word.insert(word.end(), later.begin(), later.end());
    return word;
  }
};

}  // namespace kalman_oracle
