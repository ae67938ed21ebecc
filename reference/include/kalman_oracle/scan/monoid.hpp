// What a scan needs of its operation: an identity and an associative compose(later, earlier)
// (docs/math.md §8: the later map on the left). Möbius and affine maps provide one each
// (algebra/mobius.hpp, algebra/affine.hpp); tests add others (e.g. the free monoid of words).
#pragma once

#include <concepts>

namespace kalman_oracle {

template <class M>
concept scan_monoid = requires(const M& m, const typename M::value_type& x) {
  typename M::value_type;
  { m.identity() } -> std::convertible_to<typename M::value_type>;
  { m.compose(x, x) } -> std::convertible_to<typename M::value_type>;
};

}  // namespace kalman_oracle
