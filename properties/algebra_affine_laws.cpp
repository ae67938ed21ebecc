// Laws of affine composition, exactly over rationals (docs/math.md §8 fact 5). Affine maps have no
// rescaling law: c (alpha, rho) is a different map.
#include "generators.hpp"
#include "rapidcheck_doctest.hpp"

using namespace kalman_oracle;
using kalman_oracle::testing::check_property;
namespace kt = kalman_oracle::testing;

TEST_SUITE("algebra") {
  TEST_CASE("affine: composition is associative") {
    check_property("affine_compose_associative", [] {
      const auto a = *kt::gen_affine();
      const auto b = *kt::gen_affine();
      const auto c = *kt::gen_affine();
      RC_ASSERT(affine_compose(a, affine_compose(b, c)) == affine_compose(affine_compose(a, b), c));
    });
  }

  TEST_CASE("affine: the identity is neutral on both sides") {
    check_property("affine_identity_neutral", [] {
      const auto a = *kt::gen_affine();
      RC_ASSERT(affine_compose(a, affine_identity<rational>()) == a);
      RC_ASSERT(affine_compose(affine_identity<rational>(), a) == a);
    });
  }

  TEST_CASE("affine: applying a composition applies the earlier map first") {
    check_property("affine_apply_compose", [] {
      const auto later = *kt::gen_affine();
      const auto earlier = *kt::gen_affine();
      const auto x = *kt::gen_rational();
      RC_ASSERT(affine_apply(affine_compose(later, earlier), x) == affine_apply(later, affine_apply(earlier, x)));
    });
  }
}
