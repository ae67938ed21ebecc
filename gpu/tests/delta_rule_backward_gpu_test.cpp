// On the GPU (label `gpu`): the chunked delta-rule backward's kernels equal their CPU twin bit for bit
// (delta_rule_backward_cases.hpp's problems: every rule and gate, T at the chunk edges and over several
// chunks, K = V = 16 … 128, grouped value heads, bfloat16 inputs, a strongly decaying chunk, absent
// cotangents and initial states), the gradients and the workspace poisoned with NaN first, and the same
// bits when run again. The twin is checked against the reference adjoint in CI
// (delta_rule_backward_twin_test.cpp). The tf32 kernels (delta_rule_backward_operands::tf32: the products
// on the tensor cores, accumulated in their own order) are not the twin's bits: each run's gradients must
// lie within the `tf32-tc` tier's budget of the reference adjoint computed on the spot, as the twin's do
// in CI, so kernel and twin are within twice that budget of each other; and run after run the same bits.
// A cotangent d_o off the 16-byte alignment (launch 4's 4-byte copies) gives the aligned run's bits.
// Without a CUDA device: "SKIP: <why>".
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "delta_rule_backward_budget.hpp"
#include "delta_rule_backward_cases.hpp"
#include "delta_rule_backward_shifted.hpp"
#include "delta_rule_varlen_cases.hpp"
#include "kalman_oracle/gpu/twin/delta_rule_backward_twin.hpp"
#include "kla_cases.hpp"
#include "skip_without_device.hpp"

using namespace kalman_oracle;
using namespace kalman_oracle::gpu;
using namespace kalman_oracle::gpu::testing;

namespace {

/// The twin test's problems, and production-sized heads (K = V = 128 over several chunks).
std::vector<backward_case> gpu_backward_cases() {
  std::vector<backward_case> cases = backward_cases;
  cases.insert(cases.end(), {{"kda", 1, 193, 2, 1, 128, 128, true, 3, false, true},
                             {"gated_delta_net", 2, 127, 2, 2, 128, 64, true, 3, false, false},
                             {"two_key", 1, 257, 1, 1, 128, 128, true, 1, false, false},
                             {"delta_net", 1, 65, 1, 1, 64, 48, false, 3, false, false}});
  return cases;
}

/// Every gradient of `got` equals `want`'s bit for bit (the absent ones poisoned alike).
void check_same_gradients(const backward_run& got, const backward_run& want) {
  CHECK(first_difference("dq", got.dq, want.dq) == "");
  CHECK(first_difference("dk", got.dk, want.dk) == "");
  CHECK(first_difference("dv", got.dv, want.dv) == "");
  CHECK(first_difference("dbeta", got.dbeta, want.dbeta) == "");
  CHECK(first_difference("dkappa", got.dkappa, want.dkappa) == "");
  CHECK(first_difference("dg", got.dg, want.dg) == "");
  CHECK(first_difference("d_initial_state", got.d_initial, want.d_initial) == "");
}

}  // namespace

TEST_CASE("gpu: the chunked delta-rule backward kernels equal their twin bit for bit, run after run") {
  if (skip_without_device()) return;
  unsigned seed = 5000;
  const std::vector<backward_case> cases = gpu_backward_cases();
  int compared = 0;
  for (const backward_case& c : cases) {
    INFO(describe(c));
    const drawn x = draw(c, seed++);
    const float tau = static_cast<float>(std::pow(static_cast<double>(c.K), -0.5));
    backward_run twin(c, x, tau);
    delta_rule_backward_twin(twin.problem);
    for (int run = 0; run < 2; ++run) {
      CAPTURE(run);
      backward_run kernel(c, x, tau);
      delta_rule_backward_host(kernel.problem);
      check_same_gradients(kernel, twin);
      ++compared;
    }
  }
  MESSAGE("chunked delta-rule backward: kernel = twin bit for bit on " << compared << " runs of " << cases.size()
                                                                       << " problems");
}

TEST_CASE("gpu: the tf32 backward kernels are within the tf32-tc budget of the reference, run after run") {
  if (skip_without_device()) return;
  unsigned seed = 7000;
  const std::vector<backward_case> cases = gpu_backward_cases();
  double overall = 0;
  for (const backward_case& c : cases) {
    INFO(describe(c));
    const drawn x = draw(c, seed++);
    const float tau = static_cast<float>(std::pow(static_cast<double>(c.K), -0.5));
    backward_run first(c, x, tau), again(c, x, tau);
    first.problem.operands = again.problem.operands = delta_rule_backward_operands::tf32;
    delta_rule_backward_host(first.problem);
    delta_rule_backward_host(again.problem);
    check_same_gradients(again, first);
    if (c.T == 0) {
      CHECK(first.d_initial == x.d_final);
      continue;
    }
    const worst_ratio worst = reference_budget(c, x, tau, operand_format::tf32).share_of(c, first);
    INFO(worst.where);
    CHECK(worst.ratio <= 1.0);
    overall = std::max(overall, worst.ratio);
  }
  MESSAGE("tf32 chunked delta-rule backward: " << cases.size()
                                               << " problems, run twice: the same bits; worst share of the tf32-tc "
                                                  "budget "
                                               << overall);
}

TEST_CASE("gpu: a cotangent d_o off the 16-byte alignment (4-byte copies) gives the aligned run's bits") {
  if (skip_without_device()) return;
  // Launch 4 copies d_o's rows by copy_rows_async: 16 bytes a copy where d_o is 16-byte aligned (every
  // other test's uploads are), else 4 bytes (docs/kernels.md, "Launch 4's sums in registers"). Both must
  // put the same numbers in shared memory, so the gradients' bits cannot depend on d_o's address.
  unsigned seed = 9000;
  int compared = 0;
  for (const backward_case& c : gpu_backward_cases()) {
    if ((c.cotangents & 1) == 0 || c.T == 0) continue;
    INFO(describe(c));
    const drawn x = draw(c, seed++);
    const float tau = static_cast<float>(std::pow(static_cast<double>(c.K), -0.5));
    for (const delta_rule_backward_operands operands :
         {delta_rule_backward_operands::f32, delta_rule_backward_operands::tf32}) {
      backward_run aligned(c, x, tau);
      aligned.problem.operands = operands;
      delta_rule_backward_host(aligned.problem);
      for (const int shift : {1, 2, 3}) {
        CAPTURE(shift);
        CAPTURE(operands == delta_rule_backward_operands::tf32);
        backward_run shifted(c, x, tau);
        shifted.problem.operands = operands;
        delta_rule_backward_host_shifted(shifted.problem, shift);
        check_same_gradients(shifted, aligned);
        ++compared;
      }
    }
  }
  CHECK(compared > 0);
  MESSAGE("chunked delta-rule backward: d_o shifted by 1, 2, 3 floats = aligned, bit for bit, on " << compared
                                                                                                   << " runs");
}

TEST_CASE(
    "gpu: the backward of a varlen batch (cu_seqlens) in one call equals its twin and its sequences run one by one") {
  if (skip_without_device()) return;
  for_each_delta_rule_varlen_case([](const delta_rule_varlen_case& c, unsigned seed) {
    const auto [whole, apart] = run_delta_rule_backward_varlen_case(
        c, seed, [](const delta_rule_backward_problem& p) { delta_rule_backward_host(p); });
    const auto [twin, twin_apart] = run_delta_rule_backward_varlen_case(
        c, seed, [](const delta_rule_backward_problem& p) { delta_rule_backward_twin(p); });
    CHECK(whole == apart);
    CHECK(whole == twin);
  });
  std::printf("delta_rule backward varlen: %zu cases, one call = sequence by sequence = twin, bit for bit\n",
              delta_rule_varlen_cases().size());
}
