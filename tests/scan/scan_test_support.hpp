// Tiny monoids and hand-checked data shared by the scan unit tests (tests/scan/*_test.cpp).
#pragma once

#include <doctest/doctest.h>

#include <bit>
#include <cstddef>
#include <functional>
#include <span>
#include <vector>

#include "kalman_oracle/scan/monoid.hpp"
#include "kalman_oracle/scan/word_monoid.hpp"

namespace kalman_oracle::scan_test {

/// The free monoid of words (scan/word_monoid.hpp).
using kalman_oracle::word_monoid;

/// Integers under addition (commutative: it cannot tell the compose order apart, the words can).
struct add_monoid {
  using value_type = long;
  value_type identity() const { return 0; }
  value_type compose(const value_type& later, const value_type& earlier) const { return later + earlier; }
};

/// Wraps a monoid and counts its compose calls.
template <scan_monoid M>
struct counting_monoid {
  using value_type = typename M::value_type;
  M inner;
  std::size_t* calls;
  value_type identity() const { return inner.identity(); }
  value_type compose(const value_type& later, const value_type& earlier) const {
    ++*calls;
    return inner.compose(later, earlier);
  }
};

/// The leaves {0}, {1}, …, {n-1}.
inline std::vector<std::vector<int>> letters(std::size_t n) {
  std::vector<std::vector<int>> xs;
  for (std::size_t t = 0; t < n; ++t) xs.push_back({static_cast<int>(t)});
  return xs;
}

using word_scan = std::function<std::vector<std::vector<int>>(const word_monoid&, std::span<const std::vector<int>>)>;
using add_scan = std::function<std::vector<long>(const add_monoid&, std::span<const long>)>;

/// Hand-checked small cases: lengths 0, 1, 5 and 8 over words and over integer addition.
inline void check_small_cases(const word_scan& inclusive_words, const word_scan& exclusive_words,
                              const add_scan& inclusive_add, const add_scan& exclusive_add) {
  using words = std::vector<std::vector<int>>;
  const word_monoid w;
  const add_monoid plus;

  SUBCASE("length 0") {
    CHECK(inclusive_words(w, letters(0)).empty());
    CHECK(exclusive_words(w, letters(0)).empty());
    CHECK(inclusive_add(plus, std::vector<long>{}).empty());
    CHECK(exclusive_add(plus, std::vector<long>{}).empty());
  }
  SUBCASE("length 1") {
    CHECK(inclusive_words(w, letters(1)) == words{{0}});
    CHECK(exclusive_words(w, letters(1)) == words{{}});
    CHECK(inclusive_add(plus, std::vector<long>{7}) == std::vector<long>{7});
    CHECK(exclusive_add(plus, std::vector<long>{7}) == std::vector<long>{0});
  }
  SUBCASE("length 5") {
    CHECK(inclusive_words(w, letters(5)) == words{{0}, {0, 1}, {0, 1, 2}, {0, 1, 2, 3}, {0, 1, 2, 3, 4}});
    CHECK(exclusive_words(w, letters(5)) == words{{}, {0}, {0, 1}, {0, 1, 2}, {0, 1, 2, 3}});
    const std::vector<long> xs{3, 1, 4, 1, 5};
    CHECK(inclusive_add(plus, xs) == std::vector<long>{3, 4, 8, 9, 14});
    CHECK(exclusive_add(plus, xs) == std::vector<long>{0, 3, 4, 8, 9});
  }
  SUBCASE("length 8") {
    CHECK(inclusive_words(w, letters(8)) == words{{0},
                                                  {0, 1},
                                                  {0, 1, 2},
                                                  {0, 1, 2, 3},
                                                  {0, 1, 2, 3, 4},
                                                  {0, 1, 2, 3, 4, 5},
                                                  {0, 1, 2, 3, 4, 5, 6},
                                                  {0, 1, 2, 3, 4, 5, 6, 7}});
    CHECK(exclusive_words(w, letters(8)) ==
          words{{}, {0}, {0, 1}, {0, 1, 2}, {0, 1, 2, 3}, {0, 1, 2, 3, 4}, {0, 1, 2, 3, 4, 5}, {0, 1, 2, 3, 4, 5, 6}});
    const std::vector<long> xs{3, 1, 4, 1, 5, 9, 2, 6};
    CHECK(inclusive_add(plus, xs) == std::vector<long>{3, 4, 8, 9, 14, 23, 25, 31});
    CHECK(exclusive_add(plus, xs) == std::vector<long>{0, 3, 4, 8, 9, 14, 23, 25});
  }
}

using counted_scan = std::function<std::vector<std::vector<int>>(const counting_monoid<word_monoid>&,
                                                                 std::span<const std::vector<int>>)>;

/// The number of compose calls `scan` makes on n leaves (and checks it still scans correctly).
inline std::size_t count_composes(const counted_scan& scan, std::size_t n) {
  std::size_t calls = 0;
  const counting_monoid<word_monoid> monoid{{}, &calls};
  const auto out = scan(monoid, letters(n));
  REQUIRE(out.size() == n);
  return calls;
}

/// ⌈log2 n⌉ for n >= 1 (0 for n = 1), and ⌊log2 n⌋ for n >= 1.
inline std::size_t ceil_log2(std::size_t n) { return n <= 1 ? 0 : static_cast<std::size_t>(std::bit_width(n - 1)); }
inline std::size_t floor_log2(std::size_t n) { return static_cast<std::size_t>(std::bit_width(n)) - 1; }

/// The largest sequence length the work-count tests sweep.
inline constexpr std::size_t max_counted_length = 300;

}  // namespace kalman_oracle::scan_test
