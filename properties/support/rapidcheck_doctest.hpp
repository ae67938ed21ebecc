// A small adapter that runs a RapidCheck property inside a doctest test case (the Debian 12
// RapidCheck has adapters for Catch and Google Test only).
//
// Each property runs with a fixed seed derived from its name, so a run is reproducible and CI is
// deterministic; KALMAN_ORACLE_SEED=<n> replaces every seed, and RC_PARAMS (RapidCheck's own
// configuration, e.g. RC_PARAMS="max_success=1000") still sets the other parameters. At least
// `min_cases` cases are generated (default 100, the acceptance floor of issue 2).
#pragma once

#include <doctest/doctest.h>
#include <rapidcheck.h>

#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>

namespace kalman_oracle::testing {

/// FNV-1a: a stable seed from a property's name.
inline std::uint64_t seed_from_name(std::string_view name) {
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : name) h = (h ^ ch) * 1099511628211ull;
  return h;
}

template <class Testable>
void check_property(const std::string& name, Testable&& testable, int min_cases = 100) {
  using namespace rc::detail;
  TestParams params = configuration().testParams;
  const char* seed = std::getenv("KALMAN_ORACLE_SEED");
  params.seed = seed != nullptr ? std::strtoull(seed, nullptr, 10) : seed_from_name(name);
  if (params.maxSuccess < min_cases) params.maxSuccess = min_cases;
  TestMetadata metadata;
  metadata.id = name;
  metadata.description = name;
  const TestResult result = checkTestable(std::forward<Testable>(testable), metadata, params);
  std::ostringstream report;
  printResultMessage(result, report);
  if (result.template is<SuccessResult>()) {
    MESSAGE("property " << name << ": " << report.str());
  } else {
    // "Falsifiable" in this line is what the meta-tests look for (docs/testing.md).
    FAIL_CHECK("property " << name << " (seed " << params.seed << "): " << report.str());
  }
}

}  // namespace kalman_oracle::testing
