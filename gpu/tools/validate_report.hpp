// What `kalman-oracle-gpu validate` reports for one output of one shape, whatever the model: the
// elements compared, those beyond their budget, and the worst share of a budget (validate_kla.cpp,
// validate_kdn_gain.cpp; docs/kernels.md, "validate").
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace kalman_oracle::gpu::tools {

struct comparison {
  std::string output;
  double worst_share = 0;  ///< largest |kernel − ref| / budget
  double worst_error = 0, worst_budget = 0;
  std::string worst_where;
  std::size_t elements = 0, failures = 0;
  /// Elements whose budget reaches the output's scale (the largest |reference| compared): within such
  /// a budget any value of the output's size passes, so the output is reported UNVERIFIED, not PASS.
  std::size_t vacuous = 0;
  /// The largest budget / scale among the elements count_scale saw (0 when it saw none): how far the worst
  /// budget is from saying something, where `vacuous` only says how many say nothing.
  double largest_budget_over_scale = 0;
  /// Where a typical envelope is given (validate's delta-rule checks: validate_typical_envelope.hpp): the elements
  /// within their budget but beyond it (SUSPECT), and the largest error / envelope (negative: none given).
  std::size_t beyond_typical = 0;
  double worst_typical_share = -1;
  double worst_typical_error = 0, worst_typical_envelope = 0;
  std::string worst_typical_where;

  /// One element's budget against the output's scale (the largest |reference| compared).
  void count_scale(double budget, double scale) {
    if (budget >= scale) ++vacuous;
    largest_budget_over_scale = std::max(largest_budget_over_scale, scale > 0 ? budget / scale : INFINITY);
  }

  /// One element: the kernel's value, the reference's, its budget, and where it is (for the report).
  template <class Where>
  void add(double kernel, double reference, double budget, Where&& where) {
    const double error = std::fabs(kernel - reference);
    const double share = budget > 0 ? error / budget : (error > 0 ? INFINITY : 0);
    ++elements;
    if (!(error <= budget)) ++failures;
    if (!(share <= worst_share)) {
      worst_share = share;
      worst_error = error;
      worst_budget = budget;
      worst_where = where();
    }
  }
  /// One element's error against its typical envelope (after add, which counts it against the budget).
  template <class Where>
  void add_typical(double kernel, double reference, double budget, double envelope, Where&& where) {
    const double error = std::fabs(kernel - reference);
    const double share = envelope > 0 ? error / envelope : (error > 0 ? INFINITY : 0);
    if (error <= budget && !(error <= envelope)) ++beyond_typical;
    if (!(share <= worst_typical_share)) {
      worst_typical_share = share;
      worst_typical_error = error;
      worst_typical_envelope = envelope;
      worst_typical_where = where();
    }
  }
  bool pass() const { return failures == 0; }
  bool suspect() const { return failures == 0 && beyond_typical != 0; }
  /// FAIL beyond a budget; SUSPECT within every budget but beyond a typical envelope; UNVERIFIED where a
  /// budget says nothing (and no element is beyond its envelope); PASS.
  const char* verdict() const {
    return failures != 0 ? "FAIL" : beyond_typical != 0 ? "SUSPECT" : vacuous != 0 ? "UNVERIFIED" : "PASS";
  }
};

/// `count` indices spread evenly over [0, total), the first and the last included (fewer when total is
/// smaller): the heads or channels a validation compares.
inline std::vector<long long> spread_sample(long long count, long long total) {
  std::vector<long long> picked;
  count = std::min(count, total);
  for (long long j = 0; j < count; ++j) picked.push_back(count == 1 ? 0 : j * (total - 1) / (count - 1));
  picked.erase(std::unique(picked.begin(), picked.end()), picked.end());
  return picked;
}

/// Prints one comparison: a JSON object (`shape` holds the model's sizes and what was sampled) or a
/// line headed by `label`. `budget_note` is empty when every bound's hypotheses held; `budget_kind`,
/// when given, says what the budget is instead of the proven binary32 bound (an estimate tier).
inline void print_comparison(const comparison& c, bool json, const std::string& label, nlohmann::json shape,
                             const std::string& budget_note, const std::string& budget_kind = {}) {
  if (json) {
    shape["output"] = c.output;
    shape["elements"] = c.elements;
    shape["failures"] = c.failures;
    shape["worst_share_of_budget"] = c.worst_share;
    shape["worst_error"] = c.worst_error;
    shape["worst_budget"] = c.worst_budget;
    shape["worst_element"] = c.worst_where;
    shape["budget"] = !budget_kind.empty() ? budget_kind
                      : budget_note.empty()
                          ? "binary32 proven bound + binary64 reference bound, on the binary64 trajectory"
                          : "estimate: " + budget_note;
    shape["vacuous_budgets"] = c.vacuous;
    if (c.largest_budget_over_scale > 0) shape["largest_budget_over_scale"] = c.largest_budget_over_scale;
    if (c.worst_typical_share >= 0) {
      shape["beyond_typical"] = c.beyond_typical;
      shape["worst_share_of_typical"] = c.worst_typical_share;
      shape["worst_typical_error"] = c.worst_typical_error;
      shape["worst_typical_envelope"] = c.worst_typical_envelope;
      shape["worst_typical_element"] = c.worst_typical_where;
    }
    shape["verdict"] = c.verdict();
    std::printf("%s\n", shape.dump().c_str());
  } else {
    char largest[64];
    std::snprintf(largest, sizeof largest, " (the largest %.3g times it)", c.largest_budget_over_scale);
    const std::string vacuous =
        c.vacuous != 0 ? ", " + std::to_string(c.vacuous) + " with a budget above the output's scale" + largest : "";
    char typical[240] = "";
    if (c.worst_typical_share >= 0)
      std::snprintf(typical, sizeof typical,
                    "; %zu beyond the typical envelope, worst %.3g of it (error %.3g, envelope %.3g, %s)",
                    c.beyond_typical, c.worst_typical_share, c.worst_typical_error, c.worst_typical_envelope,
                    c.worst_typical_where.c_str());
    std::printf("%s  %-20s %s  %zu elements%s, worst %.3g%% of budget (error %.3g, budget %.3g, %s)%s%s%s\n",
                label.c_str(), c.output.c_str(), c.verdict(), c.elements, vacuous.c_str(), 100 * c.worst_share,
                c.worst_error, c.worst_budget, c.worst_where.c_str(), typical,
                budget_note.empty() ? "" : "  [budget an estimate: a bound's hypothesis failed]",
                budget_kind.empty() ? "" : ("  [budget: " + budget_kind + "]").c_str());
  }
  std::fflush(stdout);
}

}  // namespace kalman_oracle::gpu::tools
