// Laws of Möbius composition, exactly over rationals (docs/math.md §8 facts 1 and 3).
#include "generators.hpp"
#include "rapidcheck_doctest.hpp"

using namespace kalman_oracle;
using kalman_oracle::testing::check_property;
namespace kt = kalman_oracle::testing;

TEST_SUITE("algebra") {
  TEST_CASE("mobius: composition is associative") {
    check_property("mobius_compose_associative", [] {
      const auto a = *kt::gen_mobius_nonneg();
      const auto b = *kt::gen_mobius_nonneg();
      const auto c = *kt::gen_mobius_nonneg();
      RC_ASSERT(mobius_compose(a, mobius_compose(b, c)) == mobius_compose(mobius_compose(a, b), c));
    });
  }

  TEST_CASE("mobius: the identity is neutral on both sides") {
    check_property("mobius_identity_neutral", [] {
      const auto a = *kt::gen_mobius_nonneg();
      RC_ASSERT(mobius_compose(a, mobius_identity<rational>()) == a);
      RC_ASSERT(mobius_compose(mobius_identity<rational>(), a) == a);
    });
  }

  TEST_CASE("mobius: applying a composition applies the earlier map first") {
    check_property("mobius_apply_compose", [] {
      const auto later = *kt::gen_mobius_leaf();
      const auto earlier = *kt::gen_mobius_leaf();
      const auto x = *kt::gen_rational_positive();
      RC_ASSERT(mobius_apply(mobius_compose(later, earlier), x) == mobius_apply(later, mobius_apply(earlier, x)));
    });
  }

  TEST_CASE("mobius: determinants multiply") {
    check_property("mobius_determinant_multiplies", [] {
      const auto a = *kt::gen_mobius_nonneg();
      const auto b = *kt::gen_mobius_nonneg();
      RC_ASSERT(mobius_determinant(mobius_compose(a, b)) == mobius_determinant(a) * mobius_determinant(b));
    });
  }

  TEST_CASE("mobius: rescaling leaves the action unchanged") {
    check_property("mobius_rescale_preserves_action", [] {
      const auto m = *kt::gen_mobius_leaf();
      const auto x = *kt::gen_rational_positive();
      const auto mode = *rc::gen::element(rescale_mode::trace, rescale_mode::max_entry, rescale_mode::power_of_two);
      RC_ASSERT(mobius_apply(mobius_rescale(m, mode), x) == mobius_apply(m, x));
    });
  }

  TEST_CASE("mobius: rescaling is canonical (c M and M rescale to the same matrix)") {
    check_property("mobius_rescale_canonical", [] {
      const auto m = *kt::gen_mobius_leaf();
      const auto mode = *rc::gen::element(rescale_mode::trace, rescale_mode::max_entry, rescale_mode::power_of_two);
      // Any c > 0 for trace and max_entry; a power of two for power_of_two (the only exact case).
      const rational c = mode == rescale_mode::power_of_two ? kt::rational_pow2(*rc::gen::inRange<long>(-80, 80))
                                                            : *kt::gen_rational_positive();
      RC_ASSERT(mobius_rescale(mobius_scale(m, c), mode) == mobius_rescale(m, mode));
    });
  }
}
