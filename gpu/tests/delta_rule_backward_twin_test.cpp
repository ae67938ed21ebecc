// The chunked delta-rule backward's twin against the reference adjoint (label `twin`; docs/kernels.md, "The
// chunked delta-rule memory (backward, binary32 or tf32)"): grad/fixed_gain_chunked.hpp in binary64 with chunks of
// 64 (the twin's), and per element the fixtures' gradient budget (docs/error-model.md, "Gradients:
// first-order running error"): 2 u × the first-order running error bound of the reference's own adjoint (the
// same template run over running_error<double>), u = 2^-24, plus the binary64 reference's own (u = 2^-53).
// An estimate, as the fixtures' gradient budgets are. Every rule (GLA, DeltaNet, GDN, KDA, the two-key rule)
// with T at the 64-token chunk edges ± 1 and over several chunks, K and V of one and two tensor-core tiles,
// grouped value heads, a given and an absent initial state, absent cotangents, a strongly decaying chunk and
// bfloat16 inputs. A planted bug (the carry's cotangent of the write keys and decays dropped) must fail it
// (meta-test in gpu/CMakeLists.txt).
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "delta_rule_backward_budget.hpp"
#include "delta_rule_backward_cases.hpp"
#include "kalman_oracle/gpu/twin/delta_rule_backward_twin.hpp"
#include "kalman_oracle/scalar/operand_rounding.hpp"

using namespace kalman_oracle;
using namespace kalman_oracle::gpu;
using namespace kalman_oracle::gpu::testing;

TEST_SUITE("twin") {
  // The decay prefixes' sums by segments (models/delta_rule_backward.cuh): decay_prefix must give every
  // row's P_t(s) = Σ_{j < s} d_tj and decay_gate_share every F(s) = Σ_{t >= s} P_t(s), each term counted
  // once, at every row length and chunk length, whatever segment a term falls in (at the segments' edges
  // too) and with a stride between the entries. The terms are integers below 2^10, so that every partial
  // sum is exact in binary32 whatever the order: a term dropped, counted twice or taken from the wrong pair
  // changes the result.
  TEST_CASE("twin: decay_prefix and decay_gate_share are the row prefixes and column sums of the pair terms") {
    struct table_pairs {
      const std::vector<float>& d;  // d_tj at [t·C + j]
      float pair_decay(int t, int j) const { return d[t * delta_rule_backward_chunk_tokens + j]; }
    };
    constexpr int C = delta_rule_backward_chunk_tokens;
    std::mt19937 gen(20261206);
    std::vector<float> d(C * C);
    for (float& x : d) x = static_cast<float>(static_cast<int>(gen() % 2047) - 1023);
    const table_pairs q{d};
    for (int ps : {1, 3})
      for (int n : {1, 2, 15, 16, 17, 31, 32, 33, 48, 49, 63, 64}) {
        std::vector<float> prefix(C * C * ps, std::nanf(""));
        for (int t = 0; t < n; ++t) decay_prefix(q, t, &prefix[t * C * ps], ps);
        for (int t = 0; t < n; ++t) {
          long long P = 0;
          for (int s = 0; s <= t; ++s) {
            if (s > 0) P += static_cast<long long>(d[t * C + s - 1]);
            INFO("n " << n << ", stride " << ps << ", row " << t << ", column " << s);
            CHECK(prefix[(t * C + s) * ps] == static_cast<float>(P));
          }
        }
        for (int s = 0; s < n; ++s) {
          long long F = 0;
          for (int t = s; t < n; ++t)
            for (int j = 0; j < s; ++j) F += static_cast<long long>(d[t * C + j]);
          INFO("n " << n << ", stride " << ps << ", column " << s);
          CHECK(decay_gate_share(prefix.data(), C * ps, ps, s, n) == static_cast<float>(F));
        }
      }
  }

  // Launch 1's blocked solve for 𝒯 (unit_lower_inverse_column_blocked, models/delta_rule_backward.cuh) must
  // give the bits of the twin's row-by-row substitution, 𝒯_tj = −Σ_{m=j}^{t−1} A_tm 𝒯_mj, one fma a term from
  // +0, m rising: at every chunk length (blocks of 8 and 16 rows, short and partial last blocks), every
  // column (the "warp's first column" 0 and 32), rows of A and 𝒯 strided as launch 1 lays them out. The
  // terms are random binary32 numbers of many magnitudes, so a term dropped, added out of order or added as
  // a zero (A holds infinities left of the diagonal's columns j, which only a skip leaves out) changes
  // bits. A planted bug (an earlier block's fourth row left out) must fail it (meta-test in
  // gpu/CMakeLists.txt).
  TEST_CASE("twin: launch 1's blocked solve for T equals the row-by-row substitution bit for bit") {
    constexpr int C = delta_rule_backward_chunk_tokens, lda = C, ldt = C + 4;
    std::mt19937 gen(20261207);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_int_distribution<int> binade(-6, 2);
    std::vector<float> A(C * lda);
    int compared = 0;
    for (int n : {0, 1, 3, 4, 7, 8, 9, 15, 16, 17, 31, 32, 33, 40, 63, 64})
      for (int trial = 0; trial < 3; ++trial) {
        for (int t = 0; t < C; ++t)
          for (int m = 0; m < C; ++m)
            A[t * lda + m] = m < t ? std::ldexp(normal(gen), binade(gen)) / static_cast<float>(C) : 0.0f;
        // The row-by-row substitution (the twin's order), column by column.
        std::vector<float> want(C * ldt, std::nanf("")), got_8 = want, got_16 = want;
        for (int j = 0; j < n; ++j)
          for (int t = 0; t < n; ++t) {
            float acc = 0.0f;
            for (int m = j; m < t; ++m) acc = fma_rn(A[t * lda + m], want[m * ldt + j], acc);
            want[t * ldt + j] = t < j ? 0.0f : t == j ? 1.0f : -acc;
          }
        for (int j = 0; j < n; ++j) {
          // Infinities where the column's terms are skipped (m < j): a term added as a zero would be NaN.
          std::vector<float> poisoned = A;
          for (int t = j + 1; t < C; ++t)
            for (int m = (j & ~31); m < j; ++m) poisoned[t * lda + m] = INFINITY;
          unit_lower_inverse_column_blocked<8>(poisoned.data(), lda, j, n, got_8.data(), ldt);
          unit_lower_inverse_column_blocked<16>(poisoned.data(), lda, j, n, got_16.data(), ldt);
        }
        for (int t = 0; t < C; ++t)
          for (int j = 0; j < C; ++j) {
            INFO("n " << n << ", trial " << trial << ", row " << t << ", column " << j);
            const float w = want[t * ldt + j];
            CHECK(std::bit_cast<std::uint32_t>(got_8[t * ldt + j]) == std::bit_cast<std::uint32_t>(w));
            CHECK(std::bit_cast<std::uint32_t>(got_16[t * ldt + j]) == std::bit_cast<std::uint32_t>(w));
            compared += t < n && j < n;
          }
      }
    MESSAGE("blocked solve = row-by-row substitution, bit for bit, on " << compared << " entries");
  }

  TEST_CASE("twin: chunked delta-rule backward within the gradient budget of the reference adjoint") {
    unsigned seed = 31;
    double overall = 0;
    for (const backward_case& c : backward_cases) {
      INFO(describe(c));
      const drawn x = draw(c, seed++);
      const float tau = static_cast<float>(std::pow(static_cast<double>(c.K), -0.5));
      backward_run r(c, x, tau);
      delta_rule_backward_twin(r.problem);
      if (c.T == 0) {  // no chunk: the initial state's cotangent is the final state's
        CHECK(r.d_initial == x.d_final);
        continue;
      }
      const worst_ratio worst = reference_budget(c, x, tau, operand_format::none).share_of(c, r);
      INFO(worst.where);
      CHECK(worst.ratio <= 1.0);
      overall = std::max(overall, worst.ratio);
    }
    MESSAGE("chunked delta-rule backward twin: worst share of the gradient budget " << overall);
  }

  // The tensor-core backward's operand rounding (float_ops.cuh's tf32_rn_by_bits, which the twin runs and
  // the GPU's cvt.rn.tf32.f32 must match: gpu.tf32.equals_bits) is the reference's TF32 rounding
  // (scalar/operand_rounding.hpp) on every significand of the binades at the range's edges and in the
  // middle (subnormals, the largest binade's rounding to infinity), both signs, and on random bits.
  TEST_CASE("twin: tf32_rn_by_bits is the reference's TF32 rounding") {
    long long compared = 0, wrong = 0;
    const auto check = [&](std::uint32_t bits) {
      const float x = std::bit_cast<float>(bits);
      if (std::isnan(x)) return;
      ++compared;
      if (std::bit_cast<std::uint32_t>(tf32_rn_by_bits(x)) !=
          std::bit_cast<std::uint32_t>(round_to_precision(x, operand_precision(operand_format::tf32))))
        if (++wrong <= 5) FAIL_CHECK("bits " << bits);
    };
    for (std::uint32_t field : {0u, 1u, 2u, 126u, 127u, 200u, 253u, 254u, 255u})
      for (std::uint32_t sign = 0; sign < 2; ++sign)
        for (std::uint32_t significand = 0; significand < (1u << 23); ++significand)
          check((sign << 31) | (field << 23) | significand);
    std::mt19937 gen(20261206);
    for (int i = 0; i < 4'000'000; ++i) check(static_cast<std::uint32_t>(gen()));
    CHECK(wrong == 0);
    MESSAGE("tf32_rn_by_bits = the reference's TF32 rounding on " << compared << " values");
  }

  // The tf32 backward (delta_rule_backward_operands::tf32): the twin, with every operand of the products
  // the kernel puts on the tensor cores rounded to TF32, within the `tf32-tc` tier's gradient budget of the
  // reference (each operand's rounding in the reference's running error) on every problem; and that
  // rounding is real: the same twin leaves the binary32 budget on some problem (a tf32 mode that rounded
  // nothing would stay inside it).
  TEST_CASE("twin: tf32 chunked delta-rule backward within the tf32-tc gradient budget of the reference adjoint") {
    unsigned seed = 31;
    double overall = 0, beyond_binary32 = 0;
    for (const backward_case& c : backward_cases) {
      INFO(describe(c));
      const drawn x = draw(c, seed++);
      const float tau = static_cast<float>(std::pow(static_cast<double>(c.K), -0.5));
      backward_run r(c, x, tau);
      r.problem.operands = delta_rule_backward_operands::tf32;
      delta_rule_backward_twin(r.problem);
      if (c.T == 0) {
        CHECK(r.d_initial == x.d_final);
        continue;
      }
      const worst_ratio worst = reference_budget(c, x, tau, operand_format::tf32).share_of(c, r);
      INFO(worst.where);
      CHECK(worst.ratio <= 1.0);
      overall = std::max(overall, worst.ratio);
      beyond_binary32 =
          std::max(beyond_binary32, reference_budget(c, x, tau, operand_format::none).share_of(c, r).ratio);
    }
    CHECK(beyond_binary32 > 1.0);
    MESSAGE("tf32 chunked delta-rule backward twin: worst share of the tf32-tc budget "
            << overall << "; of the binary32 budget " << beyond_binary32);
  }
}
