// libFuzzer harness for the suite-file parser (fixtures/lib/case_spec.hpp, parse_suite).
//
// Suite files come from users (their own suites, sharded batch jobs), so every byte string must end
// in a parsed suite or an input_error: no crash, no sanitizer report, no other exception (a
// nlohmann type_error escaping would reach the user as an internal error, not a message naming the
// field). What the parser accepts must be something generate can plan for without surprises:
// unique file-safe names, sizes within the documented limits, every input's range inside its
// domain as drawn in the case's dtype, shapes and the memory estimate computable and finite.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <set>
#include <string>
#include <string_view>

#include "case_estimate.hpp"
#include "case_spec.hpp"
#include "inputs.hpp"

using namespace kalman_oracle;
using namespace kalman_oracle::fixtures;

namespace {

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "suite_fuzzer: %s\n", what.c_str());
  std::abort();
}

void check_accepted(const suite& s) {
  std::set<std::string> names;
  for (const case_spec& c : s.cases) {
    if (c.model == nullptr) fail("a case without a model");
    if (!names.insert(c.name).second) fail("duplicate case name " + c.name);
    if (c.name.empty() || c.name.size() > 100 || c.name.find('/') != std::string::npos || c.name[0] == '.')
      fail("a case name that is not a safe file name: " + c.name);
    constexpr std::size_t limit = std::size_t{1} << 24;
    for (std::size_t size : {c.B, c.T, c.H, c.HV, c.K, c.V})
      if (size > limit) fail("a size beyond 2^24 in case " + c.name);
    if (c.B == 0 || c.T == 0 || c.H == 0 || c.K == 0 || c.V == 0 || c.HV % c.H != 0)
      fail("sizes the parser should have refused in case " + c.name);
    if (c.cu_seqlens) {
      if (c.cu_seqlens->size() < 2 || c.cu_seqlens->front() != 0 ||
          static_cast<std::size_t>(c.cu_seqlens->back()) != c.T)
        fail("inconsistent cu_seqlens in case " + c.name);
      for (std::size_t i = 1; i < c.cu_seqlens->size(); ++i)
        if ((*c.cu_seqlens)[i] < (*c.cu_seqlens)[i - 1]) fail("decreasing cu_seqlens in case " + c.name);
    }
    for (const input_spec& in : c.model->inputs) {
      const auto range = c.ranges.find(std::string(in.name));
      if (range == c.ranges.end()) fail("no range for input " + std::string(in.name) + " in case " + c.name);
      const auto [least, greatest] = draw_extremes(range->second, c.dtype);
      if (!std::isfinite(least) || !std::isfinite(greatest) || least > greatest)
        fail("a range that draws non-finite values was accepted in case " + c.name);
      (void)shape_of(in.shape, c);
    }
    const case_estimate e = estimate_case(c);
    if (!std::isfinite(e.bytes) || !(e.bytes > 0) || !std::isfinite(e.seconds) || !(e.seconds >= 0))
      fail("a non-finite estimate for case " + c.name);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    check_accepted(parse_suite(text, "fuzz.json", "fuzz"));
  } catch (const input_error&) {
    // refused with a message: fine
  } catch (const std::exception& e) {
    fail(std::string("an exception other than input_error: ") + e.what());
  }
  return 0;
}
