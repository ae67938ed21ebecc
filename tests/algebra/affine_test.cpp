// Affine maps x -> alpha x + rho (docs/math.md §8 fact 5), by hand.
#include <doctest/doctest.h>

#include "kalman_oracle/algebra/affine.hpp"
#include "kalman_oracle/scalar/types.hpp"

using namespace kalman_oracle;
using A = affine<rational>;

TEST_CASE("affine: compose, identity and apply") {
  const A later{2, 3}, earlier{5, 7};
  // later(earlier(x)) = 2 (5 x + 7) + 3 = 10 x + 17
  CHECK(affine_compose(later, earlier) == A{10, 17});
  CHECK(affine_apply(later, rational(1)) == 5);
  CHECK(affine_compose(affine_identity<rational>(), later) == later);
  CHECK(affine_monoid<rational>{}.compose(later, earlier) == A{10, 17});
}
