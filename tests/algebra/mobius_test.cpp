// Möbius maps on small matrices worked by hand (docs/math.md §8).
#include <doctest/doctest.h>

#include "kalman_oracle/algebra/mobius.hpp"

using namespace kalman_oracle;
using M = mobius<rational>;

TEST_CASE("mobius: compose is the matrix product with the later map on the left") {
  const M later{1, 2, 3, 4}, earlier{5, 6, 7, 8};
  // [[1,2],[3,4]] [[5,6],[7,8]] = [[1*5+2*7, 1*6+2*8], [3*5+4*7, 3*6+4*8]] = [[19,22],[43,50]]
  CHECK(mobius_compose(later, earlier) == M{19, 22, 43, 50});
  // The other order: [[5,6],[7,8]] [[1,2],[3,4]] = [[23,34],[31,46]]
  CHECK(mobius_compose(earlier, later) == M{23, 34, 31, 46});
  CHECK(mobius_compose(mobius_identity<rational>(), later) == later);
}

TEST_CASE("mobius: apply and determinant") {
  const M m{2, 1, 1, 3};
  CHECK(mobius_apply(m, rational(1)) == rational(3, 4));  // (2 + 1) / (1 + 3)
  CHECK(mobius_apply(m, rational(0)) == rational(1, 3));
  CHECK(mobius_determinant(m) == 5);  // 2*3 - 1*1
}

TEST_CASE("mobius: the three rescalings") {
  const M m{2, 1, 1, 6};
  CHECK(mobius_rescale(m, rescale_mode::none) == m);
  CHECK(mobius_rescale(m, rescale_mode::trace) == M{rational(2, 8), rational(1, 8), rational(1, 8), rational(6, 8)});
  CHECK(mobius_rescale(m, rescale_mode::max_entry) == M{rational(2, 6), rational(1, 6), rational(1, 6), 1});
  // Largest entry 6 = 1.5 * 2^2: divide by 4, so the largest entry lands in [1, 2).
  CHECK(mobius_rescale(m, rescale_mode::power_of_two) ==
        M{rational(1, 2), rational(1, 4), rational(1, 4), rational(3, 2)});
  const M zero{0, 0, 0, 0};
  for (auto mode : {rescale_mode::trace, rescale_mode::max_entry, rescale_mode::power_of_two})
    CHECK(mobius_rescale(zero, mode) == zero);  // nothing to normalise by: left alone
  CHECK(to_string(rescale_mode::power_of_two) == "power_of_two");
}

TEST_CASE("mobius: power-of-two rescaling is exact in binary64") {
  const mobius<double> m{3e300, 1e-300, 5.0, 7.0};
  const auto r = mobius_rescale(m, rescale_mode::power_of_two);
  CHECK(r.a >= 1.0);
  CHECK(r.a < 2.0);
  CHECK(std::ldexp(r.a, 998) == 3e300);  // log2(3e300) = 998.16: 3e300 lies in [2^998, 2^999)
  CHECK(std::ldexp(r.d, 998) == 7.0);    // 7 * 2^-998 is normal: scaling is exact
}
