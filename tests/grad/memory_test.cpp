// grad/memory.hpp: the memory (delta-rule) adjoint on a one-token example worked by hand, and the
// gather/scatter between a (batch, head) slice and one memory head.
#include <doctest/doctest.h>

#include <vector>

#include "kalman_oracle/grad/memory.hpp"
#include "kalman_oracle/scalar/types.hpp"

using namespace kalman_oracle;
using R = rational;

TEST_CASE("grad: the memory adjoint of one token, by hand") {
  // K = V = 1: S_0 = 2, α = 1/2, e = k = 3, w = 1/4, v = 5, q = 1, τ = 2. Forward: Ŝ = α S_0 = 1,
  // res = v − Ŝ k = 2, S_1 = Ŝ + w res = 3/2, o = τ q S_1 = 3. With do = 1 and dS_1 = 0:
  //   dS = τ q = 2;  dq = τ S_1 = 3;  dτ = q S_1 = 3/2
  //   dw = dS res = 4;  dres = dS w = 1/2 = dv
  //   dŜ = dS − k dres = 1/2;  de = −Ŝ dres = −1/2
  //   dα = dŜ S_0 = 1;  dS_0 = α dŜ = 1/4
  memory_head<R> m;
  m.tokens = 1, m.key_dim = 1, m.value_dim = 1, m.erases = true, m.tau = R(2);
  m.alpha = {R(1, 2)}, m.erase = {R(3)}, m.write = {R(1, 4)}, m.value = {R(5)}, m.query = {R(1)};
  m.initial_state = {R(2)};
  const std::vector<R> d_output{R(1)};
  const memory_head_gradients<R> g = memory_backward<R>(m, d_output, {});
  CHECK(g.query == std::vector<R>{R(3)});
  CHECK(g.tau == R(3, 2));
  CHECK(g.write == std::vector<R>{R(4)});
  CHECK(g.value == std::vector<R>{R(1, 2)});
  CHECK(g.erase == std::vector<R>{R(-1, 2)});
  CHECK(g.alpha == std::vector<R>{R(1)});
  CHECK(g.initial_state == std::vector<R>{R(1, 4)});
}

TEST_CASE("grad: gather a memory head from a (batch, head) slice, scatter its adjoint back") {
  // B = 1, T = 2, H = 2, K = 1, V = 1; head h = 1 is gathered: element (0, t, 1, 0) is 10 t + 1
  // in q, 20 t + 1 in k, 30 t + 1 in v.
  tensor<R> q("q", {1, 2, 2, 1}), k("k", {1, 2, 2, 1}), v("v", {1, 2, 2, 1});
  for (long t = 0; t < 2; ++t) {
    q(0, t, 1, 0) = R(10 * t + 1), k(0, t, 1, 0) = R(20 * t + 1), v(0, t, 1, 0) = R(30 * t + 1);
  }
  const auto m = detail::grad::gather_memory_head(
      q, k, v, 0, 1, [](std::size_t t, std::size_t) { return R(static_cast<long>(t) + 1, 4); }, true, R(1),
      std::vector<R>{R(7)});
  CHECK(m.query == std::vector<R>{R(1), R(11)});
  CHECK(m.erase == std::vector<R>{R(1), R(21)});
  CHECK(m.value == std::vector<R>{R(1), R(31)});
  CHECK(m.alpha == std::vector<R>{R(1, 4), R(2, 4)});
  CHECK(m.write == std::vector<R>{R(0), R(0)});  // the caller's gain
  CHECK(m.initial_state == std::vector<R>{R(7)});
  CHECK(detail::grad::head_tokens(&v, 0, 1) == std::vector<R>{R(1), R(31)});
  CHECK(detail::grad::head_tokens<R>(nullptr, 0, 1).empty());  // no cotangent: memory_backward reads zero

  memory_head_gradients<R> g;
  g.query = {R(3), R(4)}, g.value = {R(5), R(6)}, g.initial_state = {R(8)};
  tensor<R> dq("q", {1, 2, 2, 1}), dv("v", {1, 2, 2, 1});
  broadcast_accumulator<R> ds0("initial_state", {1}, {1, 2, 1, 1});  // S_0 given as one value
  detail::grad::scatter_memory_gradients(g, 0, 1, dq, dv, ds0);
  detail::grad::scatter_memory_gradients(g, 0, 0, dq, dv, ds0);  // the other head reads S_0 too
  CHECK(dq(0, 1, 1, 0) == 4);
  CHECK(dv(0, 0, 1, 0) == 5);
  CHECK(ds0.result()(0) == 16);  // 8 from each head: broadcast axes are summed
}
