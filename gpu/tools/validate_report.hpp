// What `kalman-oracle-gpu validate` reports for one output of one shape, whatever the model: the
// elements compared, those beyond their budget, and the worst share of a budget (validate_kla.cpp,
// validate_kdn_gain.cpp; docs/kernels.md, "validate").
#pragma once

#include <cmath>
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

namespace kalman_oracle::gpu::tools {

struct comparison {
  std::string output;
  double worst_share = 0;  ///< largest |kernel − ref| / budget
  double worst_error = 0, worst_budget = 0;
  std::string worst_where;
  std::size_t elements = 0, failures = 0;

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
  bool pass() const { return failures == 0; }
};

/// Prints one comparison: a JSON object (`shape` holds the model's sizes and what was sampled) or a
/// line headed by `label`. `budget_note` is empty when every bound's hypotheses held.
inline void print_comparison(const comparison& c, bool json, const std::string& label, nlohmann::json shape,
                             const std::string& budget_note) {
  if (json) {
    shape["output"] = c.output;
    shape["elements"] = c.elements;
    shape["failures"] = c.failures;
    shape["worst_share_of_budget"] = c.worst_share;
    shape["worst_error"] = c.worst_error;
    shape["worst_budget"] = c.worst_budget;
    shape["worst_element"] = c.worst_where;
    shape["budget"] = budget_note.empty()
                          ? "binary32 proven bound + binary64 reference bound, on the binary64 trajectory"
                          : "estimate: " + budget_note;
    shape["verdict"] = c.pass() ? "PASS" : "FAIL";
    std::printf("%s\n", shape.dump().c_str());
  } else {
    std::printf("%s  %-20s %s  %zu elements, worst %.3g%% of budget (error %.3g, budget %.3g, %s)%s\n", label.c_str(),
                c.output.c_str(), c.pass() ? "PASS" : "FAIL", c.elements, 100 * c.worst_share, c.worst_error,
                c.worst_budget, c.worst_where.c_str(),
                budget_note.empty() ? "" : "  [budget an estimate: a bound's hypothesis failed]");
  }
  std::fflush(stdout);
}

}  // namespace kalman_oracle::gpu::tools
