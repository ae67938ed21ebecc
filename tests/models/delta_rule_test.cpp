// The shared memory updates on a 2 x 2 state, by hand.
#include <doctest/doctest.h>

#include <vector>

#include "kalman_oracle/models/delta_rule.hpp"
#include "kalman_oracle/scalar/types.hpp"

using namespace kalman_oracle;
using R = rational;

TEST_CASE("delta_rule: decay, delta correction against the decayed state, read after write") {
  // S = [[1, 2], [3, 4]] (K = 2 rows, V = 2 columns).
  std::vector<R> s{1, 2, 3, 4};
  const std::vector<R> alpha{R(1, 2), 1}, k{1, 1}, gain{R(1, 2), 0}, v{10, 20}, q{2, 0};
  decay_rows<R>(s, 2, alpha);  // [[1/2, 1], [3, 4]]
  CHECK(s == std::vector<R>{R(1, 2), 1, 3, 4});
  // S^T k = (1/2 + 3, 1 + 4) = (7/2, 5); residual v - S^T k = (13/2, 15).
  CHECK(predict_value<R>(s, 2, k) == std::vector<R>{R(7, 2), 5});
  delta_write<R>(s, k, gain, v);  // row 0 += 1/2 (13/2, 15) = (13/4, 15/2)
  CHECK(s == std::vector<R>{R(15, 4), R(17, 2), 3, 4});
  std::vector<R> o(2);
  read_state<R>(s, q, R(1, 2), o);  // S^T (q/2) = row 0 * 1
  CHECK(o == std::vector<R>{R(15, 4), R(17, 2)});
  outer_write<R>(s, k, v);
  CHECK(s == std::vector<R>{R(55, 4), R(57, 2), 13, 24});
  decay_all<R>(s, R(2));
  CHECK(s == std::vector<R>{R(55, 2), 57, 26, 48});
}
