// gpu/tools/validate_delta_rule.hpp. For each shape (B, T, H, K, V; one key head per value head):
//   1. inputs drawn in float32 from the default suite's fixed-gain ranges (q, v uniform in [-1, 1]; k
//      unit keys, normalised in binary64 and rounded; β uniform in [0, 1]; log gates uniform in
//      [-1, 0], per head for GDN, per channel for KDA and GLA; an initial state uniform in [-1, 1]);
//   2. the kernel (or the twin) on the whole problem, outputs poisoned with NaN first;
//   3. a sample of heads, each batch row of each a task of its own ((b, h) reads only its own inputs):
//      the chunked WY form in binary64 with chunks of 64, the kernel's, and per element the bf16-tc
//      tier's first-order budget plus the binary64 run's own first-order error
//      (check/fixed_gain_tensor_core_budget.hpp), the budget the fixtures' `--arithmetic bf16-tc`
//      holds the kernel to (an estimate, labelled so);
//   4. every compared element of o and final_state within budget, else FAIL naming the worst;
//      UNVERIFIED (exit 0, but said) where some element's budget reaches the output's scale, the
//      largest |reference| compared (the tier says nothing there: long runs without decay);
//   5. the backward (binary32, the fixtures' gradient budget): cotangents drawn, every input's gradient
//      at the sampled heads against the binary64 sequential adjoint (validate_delta_rule_backward.hpp).
#include "validate_delta_rule.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "kalman_oracle/check/fixed_gain_tensor_core_budget.hpp"
#include "kalman_oracle/detail/parallel_for.hpp"
#include "kalman_oracle/gpu/twin/delta_rule_chunked_twin.hpp"
#include "validate_delta_rule_backward.hpp"
#include "validate_report.hpp"
#include "validate_typical_envelope.hpp"

namespace kalman_oracle::gpu::tools {

namespace {

/// The inputs of one shape, float32, contiguous: q, k [B, T, H, K]; v [B, T, H, V]; β [B, T, H];
/// g [B, T, H] (GDN) or [B, T, H, K]; initial state [B, H, K, V].
struct delta_rule_validate_inputs {
  std::vector<float> q, k, v, beta, g, initial;
};

bool gate_per_head(const std::string& model) { return model == "gated_delta_net"; }
bool has_gate(const std::string& model) { return model != "delta_net"; }
bool has_beta(const std::string& model) { return model != "gla"; }

delta_rule_validate_inputs draw(const delta_rule_validate_shape& n, const std::string& model, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(-1.0, 1.0), strength(0.0, 1.0), gate(-1.0, 0.0);
  const std::size_t B = n.B, T = n.T, H = n.H, K = n.K, V = n.V;
  delta_rule_validate_inputs x;
  for (std::size_t i = 0; i < B * T * H * K; ++i) x.q.push_back(static_cast<float>(unit(rng)));
  for (std::size_t row = 0; row < B * T * H; ++row) {  // unit keys (the suite's default key mode)
    std::vector<double> key(K);
    double norm = 0;
    for (double& e : key) {
      e = unit(rng);
      norm += e * e;
    }
    for (double e : key) x.k.push_back(static_cast<float>(e / std::sqrt(norm)));
  }
  for (std::size_t i = 0; i < B * T * H * V; ++i) x.v.push_back(static_cast<float>(unit(rng)));
  if (has_beta(model))
    for (std::size_t i = 0; i < B * T * H; ++i) x.beta.push_back(static_cast<float>(strength(rng)));
  if (has_gate(model))
    for (std::size_t i = 0; i < B * T * H * (gate_per_head(model) ? 1 : K); ++i)
      x.g.push_back(static_cast<float>(gate(rng)));
  const std::size_t states = n.sequences > 0 ? static_cast<std::size_t>(n.sequences) : B;  // [N, H, K, V]
  for (std::size_t i = 0; i < states * H * K * V; ++i) x.initial.push_back(static_cast<float>(unit(rng)));
  return x;
}

/// Sequence s, head h of the drawn inputs as a one-row, one-head problem for the reference.
fixed_gain_inputs<double> head_inputs(const delta_rule_validate_inputs& x, const delta_rule_validate_shape& n,
                                      const std::string& model, const delta_rule_sequence& s, long long h, float tau) {
  const std::size_t T = static_cast<std::size_t>(s.tokens), H = n.H, K = n.K, V = n.V;
  const std::size_t G = gate_per_head(model) ? 1 : K;
  fixed_gain_inputs<double> in;
  in.rule = model == "gla"               ? fixed_gain_rule::gla
            : model == "delta_net"       ? fixed_gain_rule::delta_net
            : model == "gated_delta_net" ? fixed_gain_rule::gated_delta_net
                                         : fixed_gain_rule::kda;
  in.q = tensor<double>("q", {1, T, 1, K});
  in.k = tensor<double>("k", {1, T, 1, K});
  in.v = tensor<double>("v", {1, T, 1, V});
  if (has_beta(model)) in.beta = tensor<double>("beta", {1, T, 1});
  if (has_gate(model)) in.g = G == 1 ? tensor<double>("g", {1, T, 1}) : tensor<double>("g", {1, T, 1, K});
  in.initial_state = tensor<double>("initial_state", {1, 1, K, V});
  in.scale = static_cast<double>(tau);  // the kernel's query scale, as the fixtures' reference takes it
  for (std::size_t t = 0; t < T; ++t) {
    // [B, T, H]: the sequence's row, from its first token.
    const std::size_t row = (static_cast<std::size_t>(s.batch_row) * static_cast<std::size_t>(n.T) +
                             static_cast<std::size_t>(s.first_token) + t) *
                                H +
                            static_cast<std::size_t>(h);
    for (std::size_t i = 0; i < K; ++i) {
      in.q.data()[t * K + i] = x.q[row * K + i];
      in.k.data()[t * K + i] = x.k[row * K + i];
    }
    for (std::size_t j = 0; j < V; ++j) in.v.data()[t * V + j] = x.v[row * V + j];
    if (in.beta) in.beta->data()[t] = x.beta[row];
    if (in.g)
      for (std::size_t i = 0; i < G; ++i) in.g->data()[t * G + i] = x.g[row * G + i];
  }
  const std::size_t state = (static_cast<std::size_t>(s.state) * H + static_cast<std::size_t>(h)) * K * V;
  for (std::size_t e = 0; e < K * V; ++e) in.initial_state->data()[e] = x.initial[state + e];
  return in;
}

}  // namespace

std::vector<delta_rule_sequence> validate_sequences(const delta_rule_problem& p) {
  std::vector<delta_rule_sequence> list;
  const int rows = p.cu_seqlens != nullptr ? p.sequences : p.batch;
  for (int n = 0; n < rows; ++n) {
    delta_rule_sequence s;
    s.state = n;
    s.batch_row = p.cu_seqlens != nullptr ? 0 : n;
    s.first_token = p.cu_seqlens != nullptr ? p.cu_seqlens[n] : 0;
    s.tokens = static_cast<int>(p.cu_seqlens != nullptr ? p.cu_seqlens[n + 1] - p.cu_seqlens[n] : p.tokens);
    list.push_back(s);
  }
  return list;
}

std::vector<long long> varlen_offsets(int tokens, int sequences, unsigned seed) {
  std::mt19937_64 rng(seed + 0x7a51e9u);
  constexpr int C = delta_rule_chunk_tokens;
  std::vector<long long> lengths;
  long long left = tokens;
  for (const long long edge : {0, 1, C - 1, C, C + 1, 2 * C - 1, 2 * C, 2 * C + 1})
    if (static_cast<int>(lengths.size()) + 1 < sequences && edge <= left) {
      lengths.push_back(edge);
      left -= edge;
    }
  // The rest: cut [0, left] at sequences − 1 − (taken) points drawn uniformly, sorted.
  std::vector<long long> cuts{0, left};
  std::uniform_int_distribution<long long> cut(0, left);
  while (static_cast<int>(lengths.size() + cuts.size()) - 1 < sequences) cuts.push_back(cut(rng));
  std::sort(cuts.begin(), cuts.end());
  for (std::size_t i = 1; i < cuts.size(); ++i) lengths.push_back(cuts[i] - cuts[i - 1]);
  std::shuffle(lengths.begin(), lengths.end(), rng);
  std::vector<long long> offsets{0};
  for (const long long length : lengths) offsets.push_back(offsets.back() + length);
  return offsets;
}

int validate_delta_rule(const delta_rule_validate_options& o) {
  int status = 0;
  for (const delta_rule_validate_shape& n : o.shapes) {
    const long long B = n.B, T = n.T, H = n.H, K = n.K, V = n.V;
    const delta_rule_validate_inputs x = draw(n, o.model, o.seed);
    const std::vector<long long> cu_seqlens =
        n.sequences > 0 ? varlen_offsets(n.T, n.sequences, o.seed) : std::vector<long long>{};
    delta_rule_problem p;
    if (n.sequences > 0) p.cu_seqlens = cu_seqlens.data(), p.sequences = n.sequences;
    p.rule = o.model == "gla" ? delta_rule_kind::gla : delta_rule_kind::beta_form;
    p.gate = !has_gate(o.model)       ? delta_rule_gate::none
             : gate_per_head(o.model) ? delta_rule_gate::per_head
                                      : delta_rule_gate::per_channel;
    p.batch = n.B, p.tokens = n.T, p.heads = n.H, p.key_dim = n.K, p.value_dim = n.V, p.key_head_group = 1;
    // The reference's query scale in binary32 (models/query_scale.hpp): K ** -0.5 in binary64, rounded.
    p.tau = static_cast<float>(std::pow(static_cast<double>(K), -0.5));
    p.q = strided_view(x.q.data(), T * H * K, H * K, K, 1);
    p.k = strided_view(x.k.data(), T * H * K, H * K, K, 1);
    p.v = strided_view(x.v.data(), T * H * V, H * V, V, 1);
    if (has_beta(o.model)) p.beta = strided_view(x.beta.data(), T * H, H, 1);
    if (has_gate(o.model))
      p.g = gate_per_head(o.model) ? strided_view(x.g.data(), T * H, H, 1)
                                   : strided_view(x.g.data(), T * H * K, H * K, K, 1);
    p.initial_state = strided_view(x.initial.data(), H * K * V, K * V, V, 1);
    const long long N = n.sequences > 0 ? n.sequences : B;
    std::vector<float> out(B * T * H * V, NAN), final_state(N * H * K * V, NAN);
    p.o = out.data(), p.final_state = final_state.data();
    if (o.twin) {
      delta_rule_twin(p);
    } else {
#if defined(KALMAN_ORACLE_GPU_HAVE_CUDA)
      delta_rule_host(p);
#else
      throw std::invalid_argument("validate: this build has no CUDA kernels; use --device twin");
#endif
    }

    // The binary64 chunked form and its budgets, one (sampled head, batch row) a task.
    const std::vector<long long> heads = spread_sample(o.sample_heads, H);
    const unsigned threads = o.threads != 0 ? o.threads : std::max(1u, std::thread::hardware_concurrency());
    nlohmann::json shape{
        {"model", o.model}, {"device", o.twin ? "twin" : "cuda"}, {"B", n.B}, {"T", n.T}, {"H", n.H}, {"K", n.K},
        {"V", n.V},         {"sampled_heads", heads.size()}};
    // A varlen shape names its sequences (and the lengths, for the record).
    char sequences[48] = "";
    if (n.sequences > 0) {
      std::vector<long long> lengths;
      for (std::size_t i = 1; i < cu_seqlens.size(); ++i) lengths.push_back(cu_seqlens[i] - cu_seqlens[i - 1]);
      shape["sequences"] = n.sequences;
      shape["lengths"] = lengths;
      std::snprintf(sequences, sizeof sequences, " as %d sequence%s", n.sequences, n.sequences == 1 ? "" : "s");
    }
    const memory_head_problem head_problem = [&](const delta_rule_sequence& s, long long h) {
      return head_inputs(x, n, o.model, s, h, p.tau);
    };
    const std::vector<delta_rule_sequence> list = validate_sequences(p);
    char label[200];
    std::snprintf(label, sizeof label, "%s %s B=%d T=%d%s H=%d K=%d V=%d (%zu heads)", o.model.c_str(),
                  o.twin ? "twin" : "kernel", n.B, n.T, sequences, n.H, n.K, n.V, heads.size());
    if (check_memory_against_reference(n, list, out, final_state, heads, head_problem, threads, o.json, label, shape,
                                       o.strict) != 0)
      status = 1;
    // 5. The backward: every input's gradient against the binary64 adjoint (validate_delta_rule_backward.hpp).
    std::snprintf(label, sizeof label, "%s backward %s B=%d T=%d%s H=%d K=%d V=%d (%zu heads)", o.model.c_str(),
                  o.twin ? "twin" : "kernel", n.B, n.T, sequences, n.H, n.K, n.V, heads.size());
    if (check_memory_backward_against_reference(p, o.twin, o.seed, heads, head_problem, threads, o.json, label, shape,
                                                o.backward_operands, o.strict) != 0)
      status = 1;
  }
  return status;
}

int check_memory_against_reference(const delta_rule_validate_shape& n,
                                   const std::vector<delta_rule_sequence>& sequences, const std::vector<float>& out,
                                   const std::vector<float>& final_state, const std::vector<long long>& heads,
                                   const memory_head_problem& head_problem, unsigned threads, bool json,
                                   const std::string& label, const nlohmann::json& shape, bool strict) {
  const long long T = n.T, H = n.H, K = n.K, V = n.V;
  const std::size_t N = sequences.size(), tasks = heads.size() * N;
  std::vector<std::optional<check::fixed_gain_tensor_core_result>> per_task(tasks);
  std::vector<ensemble_errors> ensemble(tasks);
  kalman_oracle::detail::parallel_for(tasks, threads, [&](std::size_t j) {
    const fixed_gain_inputs<double> in = head_problem(sequences[j % N], heads[j / N]);
    if (sequences[j % N].tokens > 0) {
      const check::fixed_gain_tensor_core_result& r =
          per_task[j].emplace(check::fixed_gain_tensor_core_budget(in, operand_format::bf16, delta_rule_chunk_tokens));
      // The typical envelope's members on the same head and sequence (validate_typical_envelope.hpp).
      ensemble[j] = run_forward_ensemble(in, r.o, r.final_state);
      return;
    }
    // An empty sequence (the reference takes none): its final state is its initial state, exactly.
    check::fixed_gain_tensor_core_result& r = per_task[j].emplace();
    const std::size_t Ks = static_cast<std::size_t>(K), Vs = static_cast<std::size_t>(V);
    r.final_state = in.initial_state ? *in.initial_state : tensor<double>("final_state", {1, 1, Ks, Vs});
    r.final_state_budget = tensor<double>("final_state", {1, 1, Ks, Vs});
  });
  comparison o_cmp, state_cmp;
  o_cmp.output = "o";
  state_cmp.output = "final_state";
  // The envelope's floors (validate_typical_envelope.hpp): per output and part (binary32, bfloat16
  // operands) over the compared elements, against the budget.
  using result = check::fixed_gain_tensor_core_result;
  const auto floor_of = [&](const std::string& name, std::map<std::string, std::vector<double>> ensemble_errors::*part,
                            const tensor<double> result::*budget) {
    std::vector<double> largest, budgets;
    for (std::size_t j = 0; j < tasks; ++j) {
      const auto l = (ensemble[j].*part).find(name);
      if (l == (ensemble[j].*part).end()) continue;
      largest.insert(largest.end(), l->second.begin(), l->second.end());
      const std::vector<double>& b = ((*per_task[j]).*budget).data();
      budgets.insert(budgets.end(), b.begin(), b.end());
    }
    return typical_floor_of(largest, budgets);
  };
  const typical_floor floor_o[] = {floor_of("o", &ensemble_errors::binary32, &result::o_budget),
                                   floor_of("o", &ensemble_errors::operands, &result::o_budget)};
  const typical_floor floor_state[] = {
      floor_of("final_state", &ensemble_errors::binary32, &result::final_state_budget),
      floor_of("final_state", &ensemble_errors::operands, &result::final_state_budget)};
  // One element against its envelope: the binary32 members' plus the bfloat16 ones' (the fixtures' bf16-tc
  // check adds the two), capped at the budget; an empty sequence's final state (exact, budget 0) has none.
  const auto typical = [&](comparison& c, std::size_t j, const char* name, const typical_floor* floor, std::size_t at,
                           double kernel, double reference, double budget, auto&& where) {
    const auto a = ensemble[j].binary32.find(name), b = ensemble[j].operands.find(name);
    if (a == ensemble[j].binary32.end() || b == ensemble[j].operands.end()) return;
    const double envelope = typical_envelope(a->second[at], reference, floor[0].at(budget)) +
                            typical_envelope(b->second[at], reference, floor[1].at(budget));
    c.add_typical(kernel, reference, budget, std::min(envelope, budget), where);
  };
  for (std::size_t j = 0; j < tasks; ++j) {
    const long long h = heads[j / N];
    const delta_rule_sequence& s = sequences[j % N];
    // A row's name: its batch row, or its sequence in a varlen batch.
    const std::string where =
        n.sequences == 0 ? "batch " + std::to_string(s.batch_row) : "sequence " + std::to_string(s.state);
    const check::fixed_gain_tensor_core_result& r = *per_task[j];
    for (long long t = 0; t < s.tokens; ++t)
      for (long long c = 0; c < V; ++c) {
        const std::size_t at = static_cast<std::size_t>(t * V + c);
        const auto element = [&] {
          return where + ", token " + std::to_string(s.first_token + t) + ", head " + std::to_string(h) + ", value " +
                 std::to_string(c);
        };
        const double kernel = out[((s.batch_row * T + s.first_token + t) * H + h) * V + c];
        o_cmp.add(kernel, r.o.data()[at], r.o_budget.data()[at], element);
        typical(o_cmp, j, "o", floor_o, at, kernel, r.o.data()[at], r.o_budget.data()[at], element);
      }
    for (long long e = 0; e < K * V; ++e) {
      const auto element = [&] {
        return where + ", head " + std::to_string(h) + ", key " + std::to_string(e / V) + ", value " +
               std::to_string(e % V);
      };
      const double kernel = final_state[(s.state * H + h) * K * V + e];
      const std::size_t at = static_cast<std::size_t>(e);
      state_cmp.add(kernel, r.final_state.data()[at], r.final_state_budget.data()[at], element);
      typical(state_cmp, j, "final_state", floor_state, at, kernel, r.final_state.data()[at],
              r.final_state_budget.data()[at], element);
    }
  }
  // A budget at or above the output's scale says nothing (long runs without decay: docs/kernels.md).
  const auto count_vacuous = [&](comparison& c, auto value, auto budget) {
    double scale = 0;
    for (std::size_t j = 0; j < tasks; ++j)
      for (const double v : value(*per_task[j]).data()) scale = std::max(scale, std::fabs(v));
    for (std::size_t j = 0; j < tasks; ++j)
      for (const double b : budget(*per_task[j]).data()) c.count_scale(b, scale);
  };
  count_vacuous(
      o_cmp, [](const result& r) -> const auto& { return r.o; },
      [](const result& r) -> const auto& { return r.o_budget; });
  count_vacuous(
      state_cmp, [](const result& r) -> const auto& { return r.final_state; },
      [](const result& r) -> const auto& { return r.final_state_budget; });
  int status = 0;
  for (const comparison* c : {&o_cmp, &state_cmp}) {
    if (!c->pass() || (strict && c->suspect())) status = 1;
    print_comparison(*c, json, label, shape, "",
                     "bf16-tc tier (first-order estimate, chunks of 64) + the binary64 run's own first-order "
                     "error, on the binary64 trajectory");
  }
  return status;
}

}  // namespace kalman_oracle::gpu::tools
