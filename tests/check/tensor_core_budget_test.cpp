// check/tensor_core_budget.hpp: the tensor-core tiers' line per element (docs/error-model.md,
// "Tensor-core tiers"). Every expected value is derived in the comment next to it; every operand below
// is a small integer or a power of two, so each is exact in binary64.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "kalman_oracle/check/tensor_core_budget.hpp"

using namespace kalman_oracle::check;

namespace {
constexpr double u = 0x1p-24, u_bf16 = 0x1p-8, u_p11 = 0x1p-11;
constexpr double infinite = std::numeric_limits<double>::infinity();
}  // namespace

TEST_CASE("tensor_core_budget: a carry's slope is its largest chord, so the line covers every run") {
  // A bound concave in u_op, as the norm-wise runs' minima make it: plain 10; with bfloat16 operands
  // 10 + 2^16 (chord slope (2^16) / (2^-8 / u) = 1 per unit u_op / u); with 11-bit operands
  // 10 + 3 · 2^13 (chord slope 3: the bound rises faster near 0).
  const tensor_core_terms t = tensor_core_carry_terms(10, {{u_bf16, 10 + 0x1p16}, {u_p11, 10 + 3 * 0x1p13}});
  CHECK(t.accumulation == 10);
  CHECK(t.operand == 3);
  // The budget 2 (u E_acc + u_op E_op) at 2^-11 is the 11-bit run doubled, 2 u (10 + 3 · 2^13), exactly;
  // at 2^-8 it is 2 u (10 + 3 · 2^16), above the bfloat16 run's 2 u (10 + 2^16).
  CHECK(t.budget(u_p11) == 2 * u * (10 + 3 * 0x1p13));
  CHECK(t.budget(u_bf16) >= 2 * u * (10 + 0x1p16));
  // The bfloat16 run alone (the line before 2026-12-05) has slope 1 and falls short at 2^-11:
  // 2 u (10 + 2^13) < 2 u (10 + 3 · 2^13).
  const tensor_core_terms bf16_only = tensor_core_carry_terms(10, {{u_bf16, 10 + 0x1p16}});
  CHECK(bf16_only.operand == 1);
  CHECK(bf16_only.budget(u_p11) < 2 * u * (10 + 3 * 0x1p13));
  // Affine (entry by entry): both chords have the same slope 2, the line is the bound itself.
  const tensor_core_terms affine = tensor_core_carry_terms(4, {{u_bf16, 4 + 2 * 0x1p16}, {u_p11, 4 + 2 * 0x1p13}});
  CHECK(affine.operand == 2);
  CHECK(affine.budget(u_bf16) == 2 * u * (4 + 2 * 0x1p16));
  CHECK(affine.budget(u_p11) == 2 * u * (4 + 2 * 0x1p13));
}

TEST_CASE("tensor_core_budget: no rounded run, or one below the plain run, adds no operand term") {
  CHECK(tensor_core_carry_terms(7, {}).operand == 0);
  CHECK(tensor_core_carry_terms(7, {{0, 1e9}}).operand == 0);  // u_op = 0: the plain run itself
  CHECK(tensor_core_carry_terms(7, {{u_bf16, 6}}).operand == 0);
  // The single-format form at u_op = 0 (validate with `none`): the smaller plain run, no operand term.
  const tensor_core_terms none = tensor_core_first_order_terms(9, 9, 5, 5, 0);
  CHECK(none.accumulation == 5);
  CHECK(none.operand == 0);
}

TEST_CASE("tensor_core_budget: the carry kept is the one with the smaller budget at the comparison format") {
  // Entry by entry: E_acc 1, E_op 4; norm-wise: E_acc 100, E_op 1. At 2^-8 (u_op / u = 2^16) they
  // cost 1 + 4 · 2^16 and 100 + 2^16: the norm-wise one is kept.
  const tensor_core_terms entrywise{1, 4}, normwise{100, 1};
  const tensor_core_terms at_bf16 = smaller_tensor_core_terms(entrywise, normwise, u_bf16);
  CHECK(at_bf16.accumulation == 100);
  CHECK(at_bf16.operand == 1);
  // At u_op = 2^-24 (ratio 1) they cost 5 and 101: the entrywise one.
  CHECK(smaller_tensor_core_terms(entrywise, normwise, u).accumulation == 1);
  // The four-run form: entrywise runs 1 and 1 + 4 · 2^16, norm-wise 100 and 100 + 2^16, as above.
  const tensor_core_terms four = tensor_core_first_order_terms(1, 1 + 4 * 0x1p16, 100, 100 + 0x1p16, u_bf16);
  CHECK(four.accumulation == 100);
  CHECK(four.operand == 1);
}

TEST_CASE("tensor_core_budget: a run that is not finite makes its carry lose, or the element say nothing") {
  // The entrywise bound overflowed: the norm-wise carry is kept.
  const tensor_core_terms nan_entrywise =
      smaller_tensor_core_terms(tensor_core_carry_terms(infinite, {{u_bf16, infinite}}),
                                tensor_core_carry_terms(3, {{u_bf16, 3 + 0x1p16}}), u_bf16);
  CHECK(nan_entrywise.accumulation == 3);
  CHECK(nan_entrywise.operand == 1);
  // A rounded run that is NaN (inf - inf inside the running error) is not finite either.
  CHECK(!tensor_core_carry_terms(3, {{u_bf16, std::nan("")}}).finite());
  // Both carries overflowed: infinite budget (UNVERIFIED), never a finite or NaN one.
  const tensor_core_terms neither = smaller_tensor_core_terms(tensor_core_carry_terms(infinite, {}),
                                                              tensor_core_carry_terms(2, {{u_p11, infinite}}), u_bf16);
  CHECK(!neither.finite());
  CHECK(neither.budget(u_bf16) == infinite);
}
