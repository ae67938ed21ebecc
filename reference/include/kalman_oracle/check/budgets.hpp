// Error budgets: how far from the exact output a correct implementation may be, per model and
// output, in units of u · scale (MATH.md §10). THIS FILE IS THE ONE PLACE BUDGETS LIVE; each entry
// is derived in docs/error-model.md (section named in `derivation`), and a budget is only ever
// lowered, never raised to make a candidate pass.
//
// An entry gives the number n of rounding errors (of the candidate's arithmetic, unit roundoff u)
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
// `proven` says whether docs/error-model.md proves the entry (on paper, under the hypotheses it
// states) or only estimates it to first order; estimates are marked as such in every report.
#pragma once

#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

namespace kalman_oracle::check {

struct budget_formula {
  double c0 = 0, cT = 0, cK = 0, cKT = 0, cT2 = 0, cKT2 = 0;

  double rounding_count(double T, double K) const {
    return c0 + cT * T + cK * K + cKT * K * T + cT2 * T * T + cKT2 * K * T * T;
  }
  std::string text() const;
};

struct budget_entry {
  std::string_view model;
  std::string_view output;
  budget_formula formula;
  bool proven;
  std::string_view derivation;  ///< section of docs/error-model.md
};

// clang-format off
inline constexpr budget_entry budget_table[] = {
  // GLA (abs scale): 4 roundings per later token on each term (exp within 1 ulp counts 2, the
  // product by α, the sum), 2 for the write; the readout K + 2 (τ, τq, the products, K − 1 sums).
  {"gla", "o",           {4, 4, 1, 0, 0, 0},  true, "GLA"},
  {"gla", "final_state", {2, 4, 0, 0, 0, 0},  true, "GLA"},
  // Delta rules (norm scale): docs/math.md's sequential bound 2(2K + 16)T u M and the readout
  // (K + 2) u M, under ‖k‖₂ <= 1, β ∈ [0, 2], g <= 0.
  {"delta_net",       "o",           {2, 32, 1, 4, 0, 0}, true, "Delta rules"},
  {"delta_net",       "final_state", {0, 32, 0, 4, 0, 0}, true, "Delta rules"},
  {"gated_delta_net", "o",           {2, 32, 1, 4, 0, 0}, true, "Delta rules"},
  {"gated_delta_net", "final_state", {0, 32, 0, 4, 0, 0}, true, "Delta rules"},
  {"kda",             "o",           {2, 32, 1, 4, 0, 0}, true, "Delta rules"},
  {"kda",             "final_state", {0, 32, 0, 4, 0, 0}, true, "Delta rules"},
  // KLA: λ by the Möbius scan with trace or max-entry rescaling, 2(4t + 3(t − 1)) + 5 <= 14t + 5 (the
  // sequential recursion needs only 4t); α_t adds 3 to λ_{t−1}'s; η sums them over its terms.
  {"kla", "final_lambda", {5, 14, 0, 0, 0, 0},  true, "KLA"},
  {"kla", "lambda",       {5, 14, 0, 0, 0, 0},  true, "KLA"},
  {"kla", "y_var",        {6, 14, 1, 0, 0, 0},  true, "KLA"},
  {"kla", "final_eta",    {3, 9, 0, 0, 7, 0},   true, "KLA"},
  {"kla", "eta",          {3, 9, 0, 0, 7, 0},   true, "KLA"},
  {"kla", "y",            {9, 23, 1, 0, 7, 0},  true, "KLA"},
  // Diagonal KDN: p by the Möbius scan, 16t + 1 (sequential 9t); the gain doubles it; the memory is
  // the delta-rule bound plus the gain's error summed over tokens (an estimate: I − κkᵀ is not
  // non-expansive in the Frobenius norm).
  {"kdn_diagonal", "final_covariance",     {1, 16, 0, 0, 0, 0},   true,  "KDN covariances"},
  {"kdn_diagonal", "predicted_covariance", {1, 16, 0, 0, 0, 0},   true,  "KDN covariances"},
  {"kdn_diagonal", "readout_variance",     {4, 16, 1, 0, 0, 0},   true,  "KDN covariances"},
  {"kdn_diagonal", "gain",                 {6, 32, 1, 0, 0, 0},   true,  "KDN covariances"},
  {"kdn_diagonal", "o",                    {2, 32, 1, 4, 32, 0},  false, "KDN memory"},
  {"kdn_diagonal", "final_state",          {0, 32, 0, 4, 32, 0},  false, "KDN memory"},
  // Isotropic KDN: b by the scan, (4K + 16)t + 1 (sequential (2K + 9)t); β doubles it.
  {"kdn_isotropic", "final_covariance",     {1, 16, 0, 4, 0, 0},   true,  "KDN covariances"},
  {"kdn_isotropic", "predicted_covariance", {1, 16, 0, 4, 0, 0},   true,  "KDN covariances"},
  {"kdn_isotropic", "readout_variance",     {5, 16, 1, 4, 0, 0},   true,  "KDN covariances"},
  {"kdn_isotropic", "beta",                 {4, 32, 1, 8, 0, 0},   true,  "KDN covariances"},
  {"kdn_isotropic", "o",                    {2, 32, 1, 4, 16, 4},  false, "KDN memory"},
  {"kdn_isotropic", "final_state",          {0, 32, 0, 4, 16, 4},  false, "KDN memory"},
  // Dense and information forms: first-order estimates (docs/math.md), not proofs.
  {"dense", "o",                   {2, 32, 1, 4, 16, 4}, false, "Dense and information"},
  {"dense", "final_state",         {0, 32, 0, 4, 16, 4}, false, "Dense and information"},
  {"dense", "final_covariance",    {0, 16, 0, 4, 0, 0},  false, "Dense and information"},
  {"dense", "innovation_variance", {4, 16, 2, 4, 0, 0},  false, "Dense and information"},
  {"dense", "mahalanobis",         {4, 16, 2, 4, 16, 4}, false, "Dense and information"},
  {"dense", "readout_variance",    {4, 16, 2, 4, 0, 0},  false, "Dense and information"},
  {"dense", "log_likelihood",      {8, 16, 2, 4, 16, 4}, false, "Dense and information"},
  {"information", "o",                 {2, 64, 1, 8, 16, 4}, false, "Dense and information"},
  {"information", "final_state",       {0, 64, 0, 8, 16, 4}, false, "Dense and information"},
  {"information", "final_precision",   {0, 64, 0, 8, 0, 0},  false, "Dense and information"},
  {"information", "final_information", {0, 64, 0, 8, 16, 4}, false, "Dense and information"},
  // Gradients (tensor_max scale), every input of a model: estimates (docs/error-model.md, "Gradients").
  {"gla",             "gradients", {8, 16, 2, 0, 0, 0},   false, "Gradients"},
  {"delta_net",       "gradients", {8, 64, 2, 8, 0, 0},   false, "Gradients"},
  {"gated_delta_net", "gradients", {8, 64, 2, 8, 0, 0},   false, "Gradients"},
  {"kda",             "gradients", {8, 64, 2, 8, 0, 0},   false, "Gradients"},
  {"kdn_diagonal",    "gradients", {8, 64, 2, 8, 64, 0},  false, "Gradients"},
  {"kdn_isotropic",   "gradients", {8, 64, 2, 8, 32, 8},  false, "Gradients"},
  {"kla",             "gradients", {16, 64, 2, 0, 28, 0}, false, "Gradients"},
  {"dense",           "gradients", {8, 64, 2, 8, 32, 8},  false, "Gradients"},
  {"information",     "gradients", {8, 64, 2, 8, 32, 8},  false, "Gradients"},
};
// clang-format on

/// The entry of (model, output), or nullopt when there is none (a report then says so and fails).
inline std::optional<budget_entry> find_budget(std::string_view model, std::string_view output) {
  for (const auto& e : budget_table)
    if (e.model == model && e.output == output) return e;
  return std::nullopt;
}

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
