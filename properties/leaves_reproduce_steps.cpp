// Each leaf of docs/math.md §8 reproduces one step of its model's scalar recursion (§4–§6), exactly
// over rationals; iterated leaves reproduce iterated steps (x_t = Pi_t . x_0).
#include <vector>

#include "generators.hpp"
#include "kalman_oracle/algebra/leaves.hpp"
#include "kalman_oracle/algebra/recursion_steps.hpp"
#include "rapidcheck_doctest.hpp"

using namespace kalman_oracle;
using kalman_oracle::testing::check_property;
namespace kt = kalman_oracle::testing;

namespace {
/// A decay in (0, 1]: x / (1 + x) for x > 0, or exactly 1 (no decay).
rc::Gen<rational> gen_decay() {
  return rc::gen::oneOf(rc::gen::just(rational(1)),
                        rc::gen::map(kt::gen_rational_positive(), [](const rational& x) { return x / (1 + x); }));
}

struct diag_channel {
  rational decay, process_noise, key, observation_noise, information_scale;
};
rc::Gen<diag_channel> gen_diag_channel() {
  return rc::gen::map(
      rc::gen::tuple(gen_decay(), kt::gen_rational_nonneg(), kt::gen_rational(), kt::gen_rational_positive(),
                     kt::gen_rational_positive()),
      [](auto t) {
        return diag_channel{std::get<0>(t), std::get<1>(t), std::get<2>(t), std::get<3>(t), std::get<4>(t)};
      });
}
}  // namespace

TEST_SUITE("leaves") {
  TEST_CASE("leaves: KLA precision leaf acts as one precision step") {
    check_property("kla_precision_leaf_reproduces_step", [] {
      const auto decay = *gen_decay();
      const auto process_noise = *kt::gen_rational_nonneg();
      const auto value_precision = *kt::gen_rational_positive();
      const auto key = *kt::gen_rational();
      const auto value = *kt::gen_rational();
      const auto precision = *kt::gen_rational_positive();
      const auto obs = kla_observe(value_precision, key, value);
      const auto leaf = kla_precision_leaf(decay, process_noise, obs.phi);
      RC_ASSERT(mobius_apply(leaf, precision) == kla_precision_step(precision, decay, process_noise, obs.phi));
      RC_ASSERT(mobius_determinant(leaf) == decay * decay);
    });
  }

  TEST_CASE("leaves: KLA mean leaf acts as one information-mean step") {
    check_property("kla_mean_leaf_reproduces_step", [] {
      const auto decay = *gen_decay();
      const auto process_noise = *kt::gen_rational_nonneg();
      const auto previous_precision = *kt::gen_rational_positive();
      const auto rho = *kt::gen_rational();
      const auto mean = *kt::gen_rational();
      const auto leaf = kla_mean_leaf(decay, process_noise, previous_precision, rho);
      RC_ASSERT(affine_apply(leaf, mean) == kla_mean_step(mean, previous_precision, decay, process_noise, rho));
    });
  }

  TEST_CASE("leaves: diagonal KDN covariance and precision leaves act as one step") {
    check_property("diag_kdn_leaves_reproduce_step", [] {
      const auto ch = *gen_diag_channel();
      const auto covariance = *kt::gen_rational_positive();
      const auto cov_leaf =
          diag_kdn_covariance_leaf(ch.decay, ch.process_noise, ch.key, ch.observation_noise, ch.information_scale);
      const auto prec_leaf =
          diag_kdn_precision_leaf(ch.decay, ch.process_noise, ch.key, ch.observation_noise, ch.information_scale);
      const auto step = diag_kdn_covariance_step(covariance, ch.decay, ch.process_noise, ch.key, ch.observation_noise,
                                                 ch.information_scale);
      RC_ASSERT(mobius_apply(cov_leaf, covariance) == step);
      RC_ASSERT(mobius_apply(prec_leaf, rational(1) / covariance) == rational(1) / step);
      RC_ASSERT(mobius_determinant(cov_leaf) == ch.decay * ch.decay);
      RC_ASSERT(mobius_determinant(prec_leaf) == ch.decay * ch.decay);
    });
  }

  TEST_CASE("leaves: isotropic KDN covariance leaf acts as one step") {
    check_property("iso_kdn_leaf_reproduces_step", [] {
      const auto channels = *rc::gen::inRange<std::size_t>(1, 9);
      const auto decay = *rc::gen::container<std::vector<rational>>(channels, gen_decay());
      const auto key = *rc::gen::container<std::vector<rational>>(channels, kt::gen_rational());
      const auto process_noise = *kt::gen_rational_nonneg();
      const auto observation_noise = *kt::gen_rational_positive();
      const auto information_scale = *kt::gen_rational_positive();
      const auto covariance = *kt::gen_rational_positive();
      const std::span<const rational> d(decay), k(key);
      const auto leaf = iso_kdn_covariance_leaf(d, process_noise, k, observation_noise, information_scale);
      RC_ASSERT(mobius_apply(leaf, covariance) ==
                iso_kdn_covariance_step(covariance, d, process_noise, k, observation_noise, information_scale));
    });
  }

  TEST_CASE("leaves: the product of T leaves acts as T steps") {
    check_property("leaf_products_reproduce_iterated_steps", [] {
      const auto steps =
          *rc::gen::container<std::vector<diag_channel>>(*rc::gen::inRange<std::size_t>(0, 24), gen_diag_channel());
      const auto initial = *kt::gen_rational_positive();
      rational iterated = initial;
      mobius<rational> product = mobius_identity<rational>();
      for (const auto& ch : steps) {
        iterated = diag_kdn_covariance_step(iterated, ch.decay, ch.process_noise, ch.key, ch.observation_noise,
                                            ch.information_scale);
        product = mobius_compose(
            diag_kdn_covariance_leaf(ch.decay, ch.process_noise, ch.key, ch.observation_noise, ch.information_scale),
            product);
      }
      RC_ASSERT(mobius_apply(product, initial) == iterated);
    });
  }
}
