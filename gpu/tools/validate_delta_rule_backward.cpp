// gpu/tools/validate_delta_rule_backward.hpp. Why the sequential adjoint and not the chunked one: the
// budget is the fixtures' (fixtures/lib/certify.cpp runs the model card's sequential adjoint over the
// running error), so a kernel that passes here at production shapes is held to what `conform` holds it
// to on the fixtures; the chunked adjoint's running error is a median 39 times looser
// (docs/error-model.md, "Chunked adjoints are not covered").
#include "validate_delta_rule_backward.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kalman_oracle/check/fixed_gain_tensor_core_budget.hpp"
#include "kalman_oracle/detail/parallel_for.hpp"
#include "kalman_oracle/gpu/delta_rule_backward.hpp"
#include "kalman_oracle/gpu/twin/delta_rule_backward_twin.hpp"
#include "kalman_oracle/grad/fixed_gain.hpp"
#include "kalman_oracle/grad/fixed_gain_chunked.hpp"
#include "kalman_oracle/models/wy_chunk_error_bound.hpp"
#include "kalman_oracle/scalar/operand_rounding.hpp"
#include "kalman_oracle/scalar/running_error.hpp"
#include "validate_report.hpp"
#include "validate_typical_envelope.hpp"

namespace kalman_oracle::gpu::tools {

namespace {

using bounded = running_error<double>;

/// How many (head, batch row) adjoints run at once: the sequential adjoint stores every state and its
/// prediction, 2 (T + 1) K V running_error<double> values (8.6 GB at T = 16384, K = V = 128), so at most
/// half the machine's memory is given to them.
std::size_t concurrent_adjoints(const delta_rule_problem& p, unsigned threads) {
  const double per_task = 2.0 * (p.tokens + 1.0) * p.key_dim * p.value_dim * sizeof(bounded);
  const double memory = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGE_SIZE));
  const double fit = memory > 0 ? std::floor(memory / 2 / per_task) : 1;
  return static_cast<std::size_t>(std::clamp(fit, 1.0, static_cast<double>(std::max(1u, threads))));
}

}  // namespace

int check_memory_backward_against_reference(const delta_rule_problem& forward, bool twin, unsigned seed,
                                            const std::vector<long long>& heads,
                                            const memory_head_problem& head_problem, unsigned threads, bool json,
                                            const std::string& label, const nlohmann::json& shape,
                                            delta_rule_backward_operands operands, bool strict) {
  const bool tf32 = operands == delta_rule_backward_operands::tf32;
  const long long B = forward.batch, T = forward.tokens, H = forward.heads, K = forward.key_dim, V = forward.value_dim;
  const std::vector<delta_rule_sequence> sequences = validate_sequences(forward);
  const long long N = static_cast<long long>(sequences.size());
  const bool varlen = forward.cu_seqlens != nullptr;
  if (forward.key_head_group != 1)
    throw std::invalid_argument("validate: the backward's check takes one key head per value head");
  if (T == 0) return 0;  // no token: nothing but d_initial_state = d_final_state (the twin test checks it)
  const bool beta_form = forward.rule == delta_rule_kind::beta_form;
  const bool two_key = forward.rule == delta_rule_kind::two_key;
  const bool gated = forward.gate != delta_rule_gate::none;
  const long long G = forward.gate == delta_rule_gate::per_head ? 1 : K;

  // The cotangents, then the backward on the whole problem.
  std::mt19937_64 rng(seed + 0xbac4u);
  std::uniform_real_distribution<double> unit(-1.0, 1.0);
  std::vector<float> d_o(B * T * H * V), d_final(N * H * K * V);
  for (float& e : d_o) e = static_cast<float>(unit(rng));
  for (float& e : d_final) e = static_cast<float>(unit(rng));
  std::vector<float> dq(B * T * H * K, NAN), dk(dq.size(), NAN), dv(B * T * H * V, NAN), dbeta(B * T * H, NAN),
      dkappa(B * T * H * K, NAN), dg(B * T * H * G, NAN), d_initial(N * H * K * V, NAN);
  delta_rule_backward_problem bp;
  bp.forward = forward;
  bp.d_o = d_o.data(), bp.d_final_state = d_final.data(), bp.operands = operands;
  bp.dq = dq.data(), bp.dk = dk.data(), bp.dv = dv.data(), bp.d_initial_state = d_initial.data();
  if (beta_form) bp.dbeta = dbeta.data();
  if (two_key) bp.dkappa = dkappa.data();
  if (gated) bp.dg = dg.data();
  if (twin) {
    delta_rule_backward_twin(bp);
  } else {
#if defined(KALMAN_ORACLE_GPU_HAVE_CUDA)
    delta_rule_backward_host(bp);
#else
    throw std::invalid_argument("validate: this build has no CUDA kernels; use --device twin");
#endif
  }

  // The reference adjoint of each (sampled head, sequence), binary64 values and their bounds at once.
  const std::size_t tasks = heads.size() * sequences.size();
  const auto task = [&](std::size_t j) -> const delta_rule_sequence& { return sequences[j % sequences.size()]; };
  const auto task_head = [&](std::size_t j) { return heads[j / sequences.size()]; };
  // Token t of sequence s, head h, in a [B, T, H, inner] tensor.
  const auto token_row = [&](const delta_rule_sequence& s, long long t, long long h) {
    return (s.batch_row * T + s.first_token + t) * H + h;
  };
  std::vector<std::optional<gradients<bounded>>> per_task(tasks);
  std::vector<ensemble_errors> ensemble(tasks);
  kalman_oracle::detail::parallel_for(
      tasks, static_cast<unsigned>(concurrent_adjoints(forward, threads)), [&](std::size_t j) {
        const delta_rule_sequence& s = task(j);
        const long long h = task_head(j);
        const std::size_t Ts = static_cast<std::size_t>(s.tokens), Ks = K, Vs = V;
        tensor<double> co("o", {1, Ts, 1, Vs}), cf("final_state", {1, 1, Ks, Vs});
        for (long long t = 0; t < s.tokens; ++t)
          for (long long c = 0; c < V; ++c) co.data()[t * V + c] = d_o[token_row(s, t, h) * V + c];
        for (long long e = 0; e < K * V; ++e) cf.data()[e] = d_final[(s.state * H + h) * K * V + e];
        if (s.tokens == 0) {  // an empty sequence (the reference takes none): d_initial_state = d_final_state
          per_task[j].emplace(
              gradients<bounded>{tensor<bounded>("initial_state", cf.shape(), check::tensor_as<bounded>(cf).data())});
          return;
        }
        cotangents<bounded> cot;
        cot.set(check::tensor_as<bounded>(co));
        cot.set(check::tensor_as<bounded>(cf));
        const fixed_gain_inputs<double> problem = head_problem(s, h);
        if (tf32) {
          // The tier's budget: the chunked adjoint with every product's operands rounded to TF32, the
          // forward's chunk-start states' errors carried entry by entry and, in a second run, norm-wise
          // (with the structured bounds inside each chunk: models/wy_chunk_error_bound.hpp), per element
          // the smaller bound, as the fixtures' tensor-core tiers take it (docs/error-model.md,
          // "Tensor-core tiers"). The two runs' values are the same binary64 computation.
          const tensor_core_scope scope(operand_format::tf32);
          const fixed_gain_inputs<bounded> in = check::lift_to_running_error(problem);
          gradients<bounded> entrywise = fixed_gain_chunked_backward(in, cot, delta_rule_backward_chunk_tokens);
          const normwise_chunk_bound_scope normwise;
          const gradients<bounded> carried = fixed_gain_chunked_backward(in, cot, delta_rule_backward_chunk_tokens);
          for (tensor<bounded>& g : entrywise.items()) {
            const tensor<bounded>& other = carried.at(g.name());
            for (std::size_t e = 0; e < g.size(); ++e)
              g.data()[e] = bounded(g.data()[e].value(), std::min(g.data()[e].error(), other.data()[e].error()));
          }
          per_task[j].emplace(std::move(entrywise));
        } else {
          per_task[j].emplace(fixed_gain_backward(check::lift_to_running_error(problem), cot));
        }
        // The typical envelope's members on the same head, sequence and cotangents.
        cotangents<double> cot64;
        cot64.set(std::move(co));
        cot64.set(std::move(cf));
        ensemble[j] = run_backward_ensemble(problem, cot64, *per_task[j], operands);
      });

  // The kernel's [B, T, H, inner] (or [B, H, inner]) gradient at each task against its [1, T, 1, inner].
  const auto compare = [&](const char* name, const std::vector<float>& kernel, const char* ref_name, long long inner,
                           bool per_token) {
    comparison cmp;
    cmp.output = name;
    double scale = 0;
    // An empty sequence's task holds d_initial_state only (nothing per token to compare).
    const auto has = [&](std::size_t j) { return !per_token || task(j).tokens > 0; };
    for (std::size_t j = 0; j < tasks; ++j)
      if (has(j))
        for (const bounded& e : per_task[j]->at(ref_name).data()) scale = std::max(scale, std::fabs(e.value()));
    // The envelope's floors (validate_typical_envelope.hpp) over the elements compared, against the
    // running-error bound (the budget's, to a constant factor), for the binary32 members and (tf32) the
    // 11-bit ones.
    const auto members_floor = [&](std::map<std::string, std::vector<double>> ensemble_errors::*which) {
      std::vector<double> largest, bounds;
      for (std::size_t j = 0; j < tasks; ++j) {
        const auto& errors = ensemble[j].*which;
        const auto l = errors.find(ref_name);
        if (!has(j) || l == errors.end()) continue;
        largest.insert(largest.end(), l->second.begin(), l->second.end());
        for (const bounded& e : per_task[j]->at(ref_name).data()) bounds.push_back(e.error());
      }
      return typical_floor_of(largest, bounds);
    };
    const typical_floor floor32 = members_floor(&ensemble_errors::binary32);
    const typical_floor floor11 = tf32 ? members_floor(&ensemble_errors::operands) : typical_floor{};
    for (std::size_t j = 0; j < tasks; ++j) {
      if (!has(j)) continue;
      const delta_rule_sequence& s = task(j);
      const long long h = task_head(j);
      const tensor<bounded>& ref = per_task[j]->at(ref_name);
      const long long rows = per_token ? s.tokens : 1;
      for (long long t = 0; t < rows; ++t)
        for (long long i = 0; i < inner; ++i) {
          const bounded& r = ref.data()[static_cast<std::size_t>(t * inner + i)];
          const long long from = per_token ? token_row(s, t, h) * inner + i : (s.state * H + h) * inner + i;
          const double budget = (2 * 0x1p-24 + 2 * 0x1p-53) * r.error();
          const auto where = [&] {
            return (varlen ? "sequence " + std::to_string(s.state) : "batch " + std::to_string(s.batch_row)) +
                   (per_token ? ", token " + std::to_string(s.first_token + t) : "") + ", head " + std::to_string(h) +
                   (inner > 1 ? ", element " + std::to_string(i) : "");
          };
          cmp.add(kernel[from], r.value(), budget, where);
          cmp.count_scale(budget, scale);
          // The typical envelope: the binary32 members' and, for tf32, the 11-bit members' (the fixtures'
          // tf32-tc check adds the two, fixtures/lib/check.cpp), capped at the budget. A task without
          // members (an empty sequence: its d_initial_state is exact, compared against the budget 0) has none.
          const std::size_t at = static_cast<std::size_t>(t * inner + i);
          const auto largest = [&](const std::map<std::string, std::vector<double>>& errors) {
            const auto l = errors.find(ref_name);
            return l != errors.end() ? l->second[at] : 0.0;
          };
          if (ensemble[j].binary32.count(ref_name) != 0) {
            double envelope = typical_envelope(largest(ensemble[j].binary32), r.value(), floor32.at(r.error()));
            if (tf32) envelope += typical_envelope(largest(ensemble[j].operands), r.value(), floor11.at(r.error()));
            cmp.add_typical(kernel[from], r.value(), budget, std::min(envelope, budget), where);
          }
        }
    }
    return cmp;
  };
  std::vector<comparison> results{compare("dq", dq, "q", K, true), compare("dk", dk, "k", K, true),
                                  compare("dv", dv, "v", V, true)};
  if (beta_form) results.push_back(compare("dbeta", dbeta, "beta", 1, true));
  if (two_key) results.push_back(compare("dkappa", dkappa, "gain", K, true));
  if (gated) results.push_back(compare("dg", dg, "g", G, true));
  results.push_back(compare("d_initial_state", d_initial, "initial_state", K * V, false));
  int status = 0;
  nlohmann::json fields = shape;
  // "backward", or "memory backward" where the caller's pass is the KDN's memory (its gain path has
  // a "backward" pass of its own).
  fields["pass"] = fields.contains("pass") ? fields["pass"].get<std::string>() + " backward" : "backward";
  for (const comparison& c : results) {
    if (!c.pass() || (strict && c.suspect())) status = 1;
    print_comparison(c, json, label, fields, "",
                     tf32 ? "estimate: tf32-tc tier, 2 (u E_acc + 2^-11 E_op) of the binary64 chunked adjoint (chunks "
                            "of 64, every matrix-product operand rounded to TF32) + the binary64 run's own"
                          : "estimate: 2u x the first-order running error of the binary64 sequential adjoint "
                            "(the fixtures' gradient budget) + the binary64 run's own");
  }
  return status;
}

}  // namespace kalman_oracle::gpu::tools
