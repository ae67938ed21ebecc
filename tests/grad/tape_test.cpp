// grad/tape.hpp and scalar/dual.hpp: the two truths of the gradient checks, on functions whose
// derivatives are known in closed form, over rationals (exact) and MPFR.
#include <doctest/doctest.h>

#include <cmath>
#include <stdexcept>
#include <vector>

#include "kalman_oracle/grad/tape.hpp"
#include "kalman_oracle/scalar/dual.hpp"
#include "kalman_oracle/scalar/precision_scope.hpp"

using namespace kalman_oracle;
using R = rational;

namespace {
/// f(x, y) = (x y + 3) / (x − y) − x: a rational function with every arithmetic operation.
template <class T>
T f(const T& x, const T& y) {
  T z = x * y;
  z += 3;
  T w = z / (x - y);
  w -= x;
  return -(-w);
}
}  // namespace

TEST_CASE("grad: the tape differentiates a rational function exactly") {
  tape<R> t;
  const auto x = t.variable(R(2)), y = t.variable(R(5));
  const auto out = f(x, y);
  CHECK(out.value() == R(-13, 3) - 2);
  const std::vector<R> adj = t.adjoints(out);
  // ∂f/∂x = (y (x − y) − (x y + 3)) / (x − y)² − 1 = (5·(−3) − 13)/9 − 1 = −28/9 − 1
  // ∂f/∂y = (x (x − y) + (x y + 3)) / (x − y)² = (2·(−3) + 13)/9 = 7/9
  CHECK(adj[x.id()] == R(-28, 9) - 1);
  CHECK(adj[y.id()] == R(7, 9));
}

TEST_CASE("grad: constants are not recorded, and a variable used twice accumulates") {
  tape<R> t;
  const tape_scalar<R> c(R(4));
  CHECK(!c.recorded());
  const auto d = c * c + 1;
  CHECK(!d.recorded());
  CHECK(t.size() == 0);
  const auto x = t.variable(R(3));
  const auto y = x * x * x;  // 3x² = 27
  CHECK(t.adjoints(y)[x.id()] == 27);
  CHECK(t.adjoints(d).size() == t.size());  // a constant output: all zeros
}

TEST_CASE("grad: comparisons see values, so branches follow the primal run") {
  tape<R> t;
  const auto x = t.variable(R(-2));
  CHECK(x < 0);
  CHECK(x == R(-2));
  CHECK(abs(x).value() == 2);
  CHECK(t.adjoints(abs(x))[x.id()] == -1);
}

TEST_CASE("grad: exp, log, sqrt and ldexp on the tape and on duals (MPFR-256)") {
  precision_scope scope(256);
  using M = mpfr_real;
  tape<M> t;
  const auto x = t.variable(M(2));
  const auto y = exp(x) * log(x) + sqrt(x) + scalar_traits<tape_scalar<M>>::ldexp(x, 3);
  const M expected = exp(M(2)) * log(M(2)) + exp(M(2)) / 2 + 1 / (2 * sqrt(M(2))) + 8;
  const M got = t.adjoints(y)[x.id()];
  CHECK(abs(M(got - expected)) <= ldexp(abs(expected), -250));

  const dual<M> xd(M(2), M(1));
  const dual<M> yd = exp(xd) * log(xd) + sqrt(xd) + scalar_traits<dual<M>>::ldexp(xd, 3);
  CHECK(abs(M(yd.tangent() - expected)) <= ldexp(abs(expected), -250));
  CHECK(scalar_traits<dual<M>>::exponent(dual<M>(M(5))) == 2);
  CHECK(scalar_traits<tape_scalar<M>>::exponent(tape_scalar<M>(M(5))) == 2);
}

TEST_CASE("grad: duals give directional derivatives exactly over rationals") {
  // f along (x, y) = (2, 5) + ε (1, −2): f_x − 2 f_y = −37/9 − 14/9.
  const dual<R> x(R(2), R(1)), y(R(5), R(-2));
  const dual<R> out = f(x, y);
  CHECK(out.value() == R(-13, 3) - 2);
  CHECK(out.tangent() == R(-28, 9) - 1 - 2 * R(7, 9));
  CHECK(dual<R>(R(3)) > dual<R>(R(2), R(100)));  // comparisons: values only
}

TEST_CASE("grad: recording with no active tape is an error, and tapes nest") {
  tape_scalar<R> x;
  {
    tape<R> outer;
    x = outer.variable(R(1));
    {
      tape<R> inner;
      const auto y = inner.variable(R(2));
      CHECK(inner.adjoints(y * y)[y.id()] == 4);
    }
    CHECK_NOTHROW((void)(x * x));  // the outer tape is active again
  }
  CHECK_THROWS_AS((void)(x * x), std::logic_error);
}
