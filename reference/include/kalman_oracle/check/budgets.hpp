// Error budgets: how far from the exact output a correct implementation may be, in units of
// u · scale (docs/math.md §10). This file holds the budget arithmetic; the budget of each model's output
// lives on that model's card (fixtures/lib/cards/), beside the output's shape and scale, and each is
// derived in docs/error-model.md (the section the card names). A budget is only ever lowered, never
// raised to make a candidate pass.
//
// A budget gives the number n of rounding errors (of the candidate's arithmetic, unit roundoff u)
// that the error model allows, as a polynomial in the longest sequence length T and the key size K
// (KLA: the state size S):
//     n = c0 + cT T + cK K + cKT K T + cT2 T² + cKT2 K T²
// and the budget is γ_n = n u / (1 − n u) in units of u · scale (vacuous when n u >= 1). Candidate
// dtypes (docs/error-model.md, "Dtypes"):
//     F64 output: binary64 arithmetic, budget γ_n(2^-53) / 2^-53 in units of u64 · scale
//     F32 output: binary32 arithmetic, budget γ_n(2^-24) / 2^-24 in units of u32 · scale
//     BF16 / F16 output: binary32 arithmetic, then one rounding to the output format:
//         budget 1 + (1 + u_out) γ_n(2^-24) / u_out in units of u_out · scale
//     --exact: the candidate claims correct rounding: 0 ULP from the correctly rounded value.
// A card says whether docs/error-model.md proves the budget (on paper, under the hypotheses it
// states) or only estimates it to first order; estimates are marked as such in every report.
#pragma once

#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

namespace kalman_oracle::check {

struct budget_formula {
  double c0 = 0, cT = 0, cK = 0, cKT = 0, cT2 = 0, cKT2 = 0;

  double rounding_count(double T, double K) const {
    return c0 + cT * T + cK * K + cKT * K * T + cT2 * T * T + cKT2 * K * T * T;
  }
  std::string text() const;
};

/// γ_n / u = n / (1 − n u): the budget in units of u · scale; infinity when n u >= 1 (vacuous).
inline double gamma_over_u(double n, double u) {
  return n * u >= 1 ? std::numeric_limits<double>::infinity() : n / (1 - n * u);
}

inline std::string budget_formula::text() const {
  std::string s;
  auto term = [&](double c, const char* what) {
    if (c == 0) return;
    char buf[64];
    std::snprintf(buf, sizeof buf, "%s%g%s", s.empty() ? "" : " + ", c, what);
    s += buf;
  };
  term(c0, "");
  term(cT, " T");
  term(cK, " K");
  term(cKT, " K T");
  term(cT2, " T^2");
  term(cKT2, " K T^2");
  return s.empty() ? "0" : s;
}

}  // namespace kalman_oracle::check
