// Variable-length batches of the chunked delta-rule memory (label `twin`; docs/kernels.md, "Variable-length
// batches"): the chunk map that the kernels' chunk-parallel launches read (delta_rule_sequences.hpp) against
// its definition on every chunk of random length lists with empty sequences; the forward and the backward
// twin run once with cu_seqlens equal, bit for bit, to the same twin run sequence by sequence; bad
// cu_seqlens refused with the index and the rule. A planted bug (a chunk that starts a sequence given to the one before) must fail the first
// case (meta-test in gpu/CMakeLists.txt).
#include <doctest/doctest.h>

#include <algorithm>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "delta_rule_varlen_cases.hpp"
#include "kalman_oracle/gpu/delta_rule_backward.hpp"
#include "kalman_oracle/gpu/delta_rule_sequences.hpp"
#include "kalman_oracle/gpu/twin/delta_rule_backward_twin.hpp"
#include "kalman_oracle/gpu/twin/delta_rule_chunked_twin.hpp"

using namespace kalman_oracle::gpu;
using namespace kalman_oracle::gpu::testing;

TEST_SUITE("twin") {
  TEST_CASE("delta-rule varlen: the chunk map gives each chunk its sequence") {
    std::mt19937 rng(11);
    // Lengths drawn so that empty sequences, one token and the chunk edges ± 1 all come up, runs of empty
    // sequences included.
    const long long choices[] = {0, 0, 1, 2, 63, 64, 65, 127, 128, 129, 200};
    std::uniform_int_distribution<int> pick(0, static_cast<int>(std::size(choices)) - 1), count(1, 12);
    long long checked = 0;
    for (int trial = 0; trial < 300; ++trial) {
      std::vector<long long> cu_seqlens{0};
      const int N = count(rng);
      for (int n = 0; n < N; ++n) cu_seqlens.push_back(cu_seqlens.back() + choices[pick(rng)]);
      delta_rule_problem p;
      p.batch = 1, p.tokens = static_cast<int>(cu_seqlens.back()), p.cu_seqlens = cu_seqlens.data(), p.sequences = N;
      const std::vector<delta_rule_sequence_start> starts = delta_rule_sequence_starts(p);
      const delta_rule_chunk_map map = delta_rule_chunks(p, starts, starts.data());
      // The definition: sequence n owns ⌈T_n / C⌉ chunks, sequence by sequence; chunk c of it starts at token
      // c·C of the sequence.
      long long g = 0;
      for (int n = 0; n < N; ++n) {
        const long long length = cu_seqlens[n + 1] - cu_seqlens[n];
        const delta_rule_sequence s = map.sequence(n);
        CHECK(s.batch_row == 0);
        CHECK(s.state == n);
        CHECK(s.first_token == cu_seqlens[n]);
        CHECK(s.tokens == length);
        CHECK(s.first_chunk == g);
        CHECK(s.chunks == (length + delta_rule_chunk_tokens - 1) / delta_rule_chunk_tokens);
        for (int c = 0; c < s.chunks; ++c, ++g, ++checked) {
          CAPTURE(trial);
          CAPTURE(g);
          REQUIRE(map.sequence_of_chunk(g) == n);
        }
      }
      CHECK(map.total_chunks == g);
      CHECK(map.sequences == N);
    }
    CHECK(checked > 1000);
    // Without cu_seqlens: B rows of T tokens, no table.
    delta_rule_problem rows;
    rows.batch = 3, rows.tokens = 130;
    const delta_rule_chunk_map map = delta_rule_chunks(rows, {}, nullptr);
    CHECK(map.total_chunks == 9);
    for (long long g = 0; g < 9; ++g) {
      const delta_rule_sequence s = map.sequence(map.sequence_of_chunk(g));
      CHECK(s.batch_row == g / 3);
      CHECK(s.first_chunk == g / 3 * 3);
      CHECK(s.first_token == 0);
      CHECK(s.tokens == 130);
    }
  }

  TEST_CASE("delta-rule varlen: the twin with cu_seqlens equals the twin sequence by sequence, bit for bit") {
    for_each_delta_rule_varlen_case([](const delta_rule_varlen_case& c, unsigned seed) {
      const auto [whole, apart] =
          run_delta_rule_varlen_case(c, seed, [](const delta_rule_problem& p) { delta_rule_twin(p); });
      CHECK(whole.o == apart.o);
      CHECK(whole.final_state == apart.final_state);
      // Written (the buffers start at zero): every case has an initial state or tokens in each sequence.
      const auto nonzero = [](const std::vector<float>& x) {
        return std::any_of(x.begin(), x.end(), [](float v) { return v != 0.0f; });
      };
      CHECK(nonzero(whole.final_state));
      if (!whole.o.empty()) CHECK(nonzero(whole.o));
    });
  }

  TEST_CASE("delta-rule varlen: the backward twin with cu_seqlens equals the twin sequence by sequence, bit for bit") {
    for_each_delta_rule_varlen_case([](const delta_rule_varlen_case& c, unsigned seed) {
      const auto [whole, apart] = run_delta_rule_backward_varlen_case(
          c, seed, [](const delta_rule_backward_problem& p) { delta_rule_backward_twin(p); });
      CHECK(whole == apart);
      long long T = 0;
      for (const long long length : c.lengths) T += length;
      CHECK(whole.dv.size() == static_cast<std::size_t>(T * c.H * c.group * c.V));
      if (T > 0) CHECK(std::any_of(whole.dv.begin(), whole.dv.end(), [](float x) { return x != 0.0f; }));  // written
    });
  }

  namespace {
  /// The message delta_rule_check throws for p (empty if none).
  std::string check_message(const delta_rule_problem& p) {
    try {
      delta_rule_check(p);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return {};
  }
  }  // namespace

  TEST_CASE("delta-rule varlen: bad cu_seqlens are refused with the index and the rule") {
    std::vector<float> data(64 * 16 * 16, 0.0f);
    delta_rule_problem p;
    p.batch = 1, p.tokens = 10, p.heads = 1, p.key_dim = 16, p.value_dim = 16, p.tau = 0.25f;
    p.q = p.k = p.v = p.beta = strided_view(data.data(), 0, 16, 16, 1);
    p.o = p.final_state = data.data();
    const long long good[] = {0, 4, 10}, late_start[] = {1, 4, 10}, falling[] = {0, 6, 4, 10}, short_end[] = {0, 4, 9};
    p.cu_seqlens = good, p.sequences = 2;
    CHECK(check_message(p).empty());
    p.cu_seqlens = late_start;
    CHECK(check_message(p).find("cu_seqlens[0] = 1") != std::string::npos);
    p.cu_seqlens = falling, p.sequences = 3;
    CHECK(check_message(p).find("cu_seqlens[2] = 4 < cu_seqlens[1] = 6 (rule: non-decreasing)") != std::string::npos);
    p.cu_seqlens = short_end, p.sequences = 2;
    CHECK(check_message(p).find("cu_seqlens[2] = 9 but T = 10") != std::string::npos);
    p.cu_seqlens = good, p.batch = 2;
    CHECK(check_message(p).find("cu_seqlens needs B = 1") != std::string::npos);
    p.cu_seqlens = nullptr, p.batch = 1;
    CHECK(check_message(p).find("without cu_seqlens") != std::string::npos);
    // The backward takes them, and refuses what the forward refuses.
    delta_rule_backward_problem b;
    b.forward = p;
    b.forward.cu_seqlens = good, b.forward.sequences = 2;
    b.dq = b.dk = b.dv = b.dbeta = data.data();
    CHECK_NOTHROW(delta_rule_backward_check(b));
    b.forward.cu_seqlens = falling, b.forward.sequences = 3;
    CHECK_THROWS_WITH_AS(delta_rule_backward_check(b), doctest::Contains("(rule: non-decreasing)"),
                         std::invalid_argument);
  }
}  // TEST_SUITE("twin")
