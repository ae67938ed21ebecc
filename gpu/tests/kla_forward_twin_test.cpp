// The KLA forward twin's own rules (label `twin`): what the conformance tests over the fixtures do
// not reach. Every BF16 and F16 bit pattern widens to the value the safetensors reader decodes
// (exhaustively: the kernels' inputs are exact); T = 0 returns the prior; sizes outside the kernel's
// range are refused by name; the readout sums go in the order docs/kernels.md gives each split. The
// twin's values are checked against the fixtures through `conform` (gpu/CMakeLists.txt:
// twin.kla_forward.*), with a planted bug caught there.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "kalman_oracle/gpu/twin/kla_forward_twin.hpp"
#include "kalman_oracle/io/safetensors.hpp"

using namespace kalman_oracle;
using namespace kalman_oracle::gpu;

TEST_SUITE("twin") {
  TEST_CASE("twin: every BF16 and F16 pattern widens to the reader's value, bit for bit") {
    std::size_t mismatches = 0;
    std::string first;
    for (std::uint32_t bits = 0; bits < 0x10000u; ++bits) {
      const auto b16 = static_cast<std::uint16_t>(bits);
      const double want_bf16 = safetensors::bfloat16_to_double(b16), want_f16 = safetensors::half_to_double(b16);
      const float got_bf16 = widen(bf16_bits{b16}), got_f16 = widen(f16_bits{b16});
      const auto same = [](float got, double want) {
        if (std::isnan(want)) return std::isnan(got);
        return static_cast<double>(got) == want && std::signbit(got) == std::signbit(want);
      };
      for (const auto& [name, got, want] :
           {std::tuple{"BF16", got_bf16, want_bf16}, std::tuple{"F16", got_f16, want_f16}})
        if (!same(got, want)) {
          if (mismatches++ == 0)
            first = std::string(name) + " bits " + std::to_string(bits) + ": widened " + std::to_string(got) +
                    ", reader " + std::to_string(want);
        }
    }
    CHECK_MESSAGE(mismatches == 0, first);
  }

  TEST_CASE("twin: with T = 0 the KLA forward returns the prior; S out of range is refused by name") {
    const std::vector<float> lambda_0{2.0f, 3.0f}, eta_0{-1.0f, 0.5f};
    std::vector<float> final_lambda(2, NAN), final_eta(2, NAN);
    kla_forward_problem p;
    p.batch = 1;
    p.tokens = 0;
    p.channels = 1;
    p.state = 2;
    p.lambda_0.data = lambda_0.data();
    p.lambda_0.stride[2] = 1;
    p.eta_0.data = eta_0.data();
    p.eta_0.stride[2] = 1;
    p.final_lambda = final_lambda.data();
    p.final_eta = final_eta.data();
    kla_forward_twin(p);
    CHECK(final_lambda == lambda_0);
    CHECK(final_eta == eta_0);

    p.state = 0;
    CHECK_THROWS_WITH_AS(kla_forward_twin(p), doctest::Contains("S = 0"), std::invalid_argument);
    p.state = kla_forward_max_state + 1;
    CHECK_THROWS_WITH_AS(kla_forward_twin(p), doctest::Contains("S = 257"), std::invalid_argument);
    p.state = 2;
    p.tokens = 1;  // now q, k, v, ... are needed
    CHECK_THROWS_WITH_AS(kla_forward_twin(p), doctest::Contains("q is missing"), std::invalid_argument);
  }

  TEST_CASE("twin: the readout sums in the kernels' orders (grouped lanes, or in order from +0)") {
    // Terms whose sums depend on the order: 1, then alternately 2^-24 and 2^-25 (a tie-breaking
    // mix), so each order's result is checked against that order spelt out.
    const auto terms_of = [](int S) {
      std::vector<float> terms(static_cast<std::size_t>(S));
      for (int s = 0; s < S; ++s) terms[s] = s == 0 ? 1.0f : (s % 2 ? 0x1p-24f : 0x1p-25f);
      return terms;
    };
    const auto lane_sum = [](const std::vector<float>& t, int first, int elements) {
      float sum = t[first];
      for (int g = 1; g < elements; ++g) sum = add_rn(sum, t[first + g]);
      return sum;
    };
    {  // S = 16: four elements a thread, four lanes: (L0 + L1) + (L2 + L3)
      const auto t = terms_of(16);
      const float want =
          add_rn(add_rn(lane_sum(t, 0, 4), lane_sum(t, 4, 4)), add_rn(lane_sum(t, 8, 4), lane_sum(t, 12, 4)));
      CHECK(kla_forward_split_for(16).grouped);
      CHECK(kla_forward_readout_sum(t.data(), 16) == want);
    }
    {  // S = 20: five lanes of four in a group of eight, the last three without elements (+0)
      const auto t = terms_of(20);
      const float first_four =
          add_rn(add_rn(lane_sum(t, 0, 4), lane_sum(t, 4, 4)), add_rn(lane_sum(t, 8, 4), lane_sum(t, 12, 4)));
      const float want = add_rn(first_four, add_rn(add_rn(lane_sum(t, 16, 4), 0.0f), add_rn(0.0f, 0.0f)));
      CHECK(kla_forward_split_for(20).lanes == 8);
      CHECK(kla_forward_readout_sum(t.data(), 20) == want);
    }
    {  // S = 256: eight elements a thread, 32 lanes
      const auto t = terms_of(256);
      std::vector<float> lanes(32);
      for (int j = 0; j < 32; ++j) lanes[j] = lane_sum(t, 8 * j, 8);
      for (int width = 32; width > 1; width /= 2)
        for (int i = 0; i < width / 2; ++i) lanes[i] = add_rn(lanes[2 * i], lanes[2 * i + 1]);
      CHECK(kla_forward_split_for(256).elements == 8);
      CHECK(kla_forward_readout_sum(t.data(), 256) == lanes[0]);
    }
    {  // S = 6: not a multiple of 4, one element a thread, in order from +0
      const auto t = terms_of(6);
      float want = 0.0f;
      for (const float x : t) want = add_rn(want, x);
      CHECK_FALSE(kla_forward_split_for(6).grouped);
      CHECK(kla_forward_readout_sum(t.data(), 6) == want);
    }
    // The orders differ on these terms (so the checks above can tell them apart).
    const auto t = terms_of(16);
    float in_order = 0.0f;
    for (const float x : t) in_order = add_rn(in_order, x);
    CHECK(kla_forward_readout_sum(t.data(), 16) != in_order);
  }
}
