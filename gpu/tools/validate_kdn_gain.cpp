// gpu/tools/validate_kdn_gain.hpp. For each shape (B, T, H, K; one key head per value head; or B = 1 and
// the T tokens as N sequences, cu_seqlens drawn by varlen_offsets, the kernels run once on the packed row
// and the reference on each (sampled head, sequence) alone, by the offsets' definition; a sequence
// without tokens must keep its prior and pass its final covariance's cotangent to the prior, exactly;
// dμ and dτ, shared by the sequences, against the sum of the sequences' references, their budgets'
// sum plus the kernels' extra roundings in summing the sequences):
//   1. inputs drawn in float32 from the default suite's KDN ranges (q uniform in [-1, 1]; k unit
//      keys, normalised in binary64 and rounded; g uniform in [-1, 0]; ω log10-uniform in [-4, -1];
//      r in [-2, 1]; the prior covariance in [-1, 1]; μ = K);
//   2. the kernels (or the twin) on the whole problem, outputs poisoned with NaN first;
//   3. a sample of heads (a head's gains read only its own inputs): the binary64 reference
//      (models/diagonal.hpp or models/isotropic.hpp, with internals, one value channel: the memory
//      is not compared) on each, and per element the proven binary32 bound of the fixtures
//      (check/diagonal_kdn_bound.hpp, check/isotropic_kdn_bound.hpp, u = 2^-24) plus the binary64
//      reference's own (u = 2^-53), both evaluated along the binary64 trajectory (labelled so, as
//      validate_kla.cpp's);
//   4. every compared element of predicted_covariance, gain (β), readout_variance and
//      final_covariance within budget32 + budget64, else FAIL naming the worst;
//   5. the gradients: cotangents drawn in [-1, 1] for every output of the gain path, the backward
//      kernels (or their twin) on the whole problem, and per sampled head the reference adjoint
//      (grad/diagonal.hpp, grad/isotropic.hpp with the gain path's cotangents only) in binary64, with
//      the fixtures' gradient budget: 2 u × the first-order running error bound of that adjoint
//      (the same template over running_error<double>), u = 2^-24 plus 2^-53 (labelled an estimate,
//      as in the fixtures; docs/error-model.md). dq, dk, dg, domega, dr, dinitial_covariance and
//      dmu at the sampled heads; dtau when every head is sampled;
//   6. the memory (where the delta-rule kernel takes K, with V = K): v and an initial state drawn in
//      [-1, 1], the chunked delta-rule kernel (or its twin) with the two-key rule, the gate g per
//      channel and the gain kernels' own κ (isotropic: κ = fl(β k)), as `run --with-memory` runs a
//      whole KDN; then validate_delta_rule's check (check_memory_against_reference): per sampled
//      head and batch row, the binary64 chunked WY form with those κ and the bf16-tc budget. So the
//      memory is checked given the kernels' gains (whose own errors step 4 checks); and the memory's
//      backward with those κ, cotangents of o and the final state drawn, every gradient of the two-key
//      rule against the binary64 sequential adjoint (validate_delta_rule_backward.hpp).
#include "validate_kdn_gain.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <vector>

#include "kalman_oracle/check/diagonal_kdn_bound.hpp"
#include "kalman_oracle/check/isotropic_kdn_bound.hpp"
#include "kalman_oracle/detail/parallel_for.hpp"
#include "kalman_oracle/gpu/twin/delta_rule_chunked_twin.hpp"
#include "kalman_oracle/gpu/twin/kdn_gain_backward_twin.hpp"
#include "kalman_oracle/gpu/twin/kdn_gain_twin.hpp"
#include "kalman_oracle/grad/diagonal.hpp"
#include "kalman_oracle/grad/isotropic.hpp"
#include "kalman_oracle/models/diagonal.hpp"
#include "kalman_oracle/models/isotropic.hpp"
#include "kalman_oracle/scalar/running_error.hpp"
#include "validate_delta_rule.hpp"
#include "validate_delta_rule_backward.hpp"
#include "validate_report.hpp"

namespace kalman_oracle::gpu::tools {

namespace {
/// The inputs of one shape, float32, contiguous ([B, T, H, K]; ω [B, T, H, L]; prior [N, H, L], N the
/// sequences: B, or those of a packed row).
struct kdn_validate_inputs {
  std::vector<float> q, k, g, omega, r, prior;
};

/// The sequences: B rows of T tokens, or with n.sequences = N > 0 one row holding N.
long long sequence_count(const kdn_gain_validate_shape& n) { return n.sequences > 0 ? n.sequences : n.B; }

kdn_validate_inputs draw(const kdn_gain_validate_shape& n, long long L, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(-1.0, 1.0), gate(-1.0, 0.0), log_omega(-4.0, -1.0), log_r(-2.0, 1.0);
  const std::size_t B = n.B, T = n.T, H = n.H, K = n.K, N = static_cast<std::size_t>(sequence_count(n));
  kdn_validate_inputs x;
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
  for (std::size_t i = 0; i < B * T * H * K; ++i) x.g.push_back(static_cast<float>(gate(rng)));
  for (std::size_t i = 0; i < B * T * H * static_cast<std::size_t>(L); ++i)
    x.omega.push_back(static_cast<float>(std::pow(10.0, log_omega(rng))));
  for (std::size_t i = 0; i < B * T * H; ++i) x.r.push_back(static_cast<float>(std::pow(10.0, log_r(rng))));
  for (std::size_t i = 0; i < N * H * static_cast<std::size_t>(L); ++i)
    x.prior.push_back(static_cast<float>(std::pow(10.0, unit(rng))));
  return x;
}

/// What one reference run of a sampled head covers: `rows` batch rows from `row0`, tokens [t0, t0 + tokens)
/// of each, their priors and final covariances at rows `state0` … of [N, H, L]. Without cu_seqlens one
/// slice, the whole batch (the reference runs B rows at once); with them one slice a sequence, taken
/// from the offsets by their definition (not through the kernels' chunk map).
struct kdn_slice {
  long long row0 = 0, rows = 0, t0 = 0, tokens = 0, state0 = 0;
};

std::vector<kdn_slice> kdn_slices(const kdn_gain_validate_shape& n, const std::vector<long long>& cu_seqlens) {
  if (cu_seqlens.empty()) return {{0, n.B, 0, n.T, 0}};
  std::vector<kdn_slice> out;
  for (std::size_t s = 0; s + 1 < cu_seqlens.size(); ++s)
    out.push_back({0, 1, cu_seqlens[s], cu_seqlens[s + 1] - cu_seqlens[s], static_cast<long long>(s)});
  return out;
}

/// Where element (row r of the slice, token t, channel i) of a per-token [B, T, H, inner] tensor is for
/// head h, and of a per-sequence [N, H, inner] one.
long long token_index(const kdn_gain_validate_shape& n, const kdn_slice& s, long long r, long long t, long long h,
                      long long inner, long long i) {
  return (((s.row0 + r) * n.T + s.t0 + t) * n.H + h) * inner + i;
}
long long state_index(const kdn_gain_validate_shape& n, const kdn_slice& s, long long r, long long h, long long inner,
                      long long i) {
  return ((s.state0 + r) * n.H + h) * inner + i;
}

/// An element's name in a report: its batch row (or sequence), token, head, channel.
std::string element_name(const kdn_gain_validate_shape& n, const kdn_slice& s, long long r, long long t, long long h,
                         long long inner, long long i) {
  return (n.sequences > 0 ? "sequence " + std::to_string(s.state0 + r) : "batch " + std::to_string(s.row0 + r)) +
         (t >= 0 ? ", token " + std::to_string(t) : "") + ", head " + std::to_string(h) +
         (inner > 1 ? ", channel " + std::to_string(i) : "");
}

/// " as N sequences" for a packed row (the report's label), else "".
std::string sequences_label(const kdn_gain_validate_shape& n) {
  return n.sequences > 0 ? " as " + std::to_string(n.sequences) + " sequence" + (n.sequences == 1 ? "" : "s") : "";
}

/// The JSON fields naming a shape's check.
nlohmann::json shape_fields(const kdn_gain_validate_options& o, const kdn_gain_validate_shape& n, const char* model,
                            const char* pass, std::size_t sampled_heads) {
  nlohmann::json shape{
      {"model", model}, {"device", o.twin ? "twin" : "cuda"}, {"pass", pass}, {"B", n.B}, {"T", n.T}, {"H", n.H},
      {"K", n.K},       {"sampled_heads", sampled_heads}};
  if (n.sequences > 0) shape["sequences"] = n.sequences;
  return shape;
}

/// Calls visit(at, from, where) for every element of head h in slice s: `at` its index in the slice's
/// reference [rows(, tokens), 1, inner], `from` in the kernels' per-token [B, T, H, inner] (per_token) or
/// per-sequence [N, H, inner] tensor, `where()` its name.
template <class Visit>
void for_each_element(const kdn_gain_validate_shape& n, const kdn_slice& s, long long h, long long inner,
                      bool per_token, Visit&& visit) {
  for (long long r = 0; r < s.rows; ++r)
    for (long long t = 0; t < (per_token ? s.tokens : 1); ++t)
      for (long long i = 0; i < inner; ++i)
        visit(static_cast<std::size_t>((per_token ? r * s.tokens + t : r) * inner + i),
              per_token ? token_index(n, s, r, t, h, inner, i) : state_index(n, s, r, h, inner, i),
              [&] { return element_name(n, s, r, per_token ? t : -1, h, inner, i); });
}

/// The sequences without tokens (the reference takes none), at every sampled head: a per-sequence output
/// [N, H, inner] of the kernels must equal `expected` there exactly.
void add_empty_sequences(comparison& c, const std::vector<float>& kernel, const std::vector<float>& expected,
                         const kdn_gain_validate_shape& n, const std::vector<long long>& heads,
                         const std::vector<kdn_slice>& slices, long long inner) {
  for (const long long h : heads)
    for (const kdn_slice& s : slices)
      if (s.tokens == 0)
        for_each_element(n, s, h, inner, false, [&](std::size_t, long long at, const auto& where) {
          c.add(kernel[at], expected[at], 0, where);
        });
}

/// One (head, slice)'s reference outputs and bounds, as plain tensors (both forms).
struct head_result {
  tensor<double> predicted, gain, readout, final_covariance;  // reference
  tensor<double> predicted32, gain32, readout32, final32;     // binary32 bound
  tensor<double> predicted64, gain64, readout64, final64;     // binary64 bound
  std::string hypothesis_failure;
};

template <class Inputs>
Inputs head_inputs(const kdn_validate_inputs& x, const kdn_gain_validate_shape& n, long long L, long long h,
                   const kdn_slice& s) {
  const std::size_t R = s.rows, Ts = s.tokens, K = n.K, Ls = static_cast<std::size_t>(L);
  constexpr bool diagonal = std::is_same_v<Inputs, diagonal_kdn_inputs<double>>;
  Inputs in;
  in.q = tensor<double>("q", {R, Ts, 1, K});
  in.k = tensor<double>("k", {R, Ts, 1, K});
  in.v = tensor<double>("v", {R, Ts, 1, 1}, 0.5);  // one value channel: the gains do not read v
  in.g = tensor<double>("g", {R, Ts, 1, K});
  in.omega = diagonal ? tensor<double>("omega", {R, Ts, 1, Ls}) : tensor<double>("omega", {R, Ts, 1});
  in.r = tensor<double>("r", {R, Ts, 1});
  in.initial_covariance =
      diagonal ? tensor<double>("initial_covariance", {R, 1, Ls}) : tensor<double>("initial_covariance", {R, 1});
  for (std::size_t r = 0; r < R; ++r)
    for (std::size_t t = 0; t < Ts; ++t) {
      const std::size_t row = r * Ts + t;
      const auto at = [&](long long inner, long long i) {
        return static_cast<std::size_t>(
            token_index(n, s, static_cast<long long>(r), static_cast<long long>(t), h, inner, i));
      };
      for (std::size_t i = 0; i < K; ++i) {
        in.q.data()[row * K + i] = x.q[at(n.K, i)];
        in.k.data()[row * K + i] = x.k[at(n.K, i)];
        in.g.data()[row * K + i] = x.g[at(n.K, i)];
      }
      for (std::size_t i = 0; i < Ls; ++i) in.omega.data()[row * Ls + i] = x.omega[at(L, i)];
      in.r.data()[row] = x.r[at(1, 0)];
    }
  for (std::size_t r = 0; r < R; ++r)
    for (std::size_t i = 0; i < Ls; ++i)
      (*in.initial_covariance).data()[r * Ls + i] =
          x.prior[static_cast<std::size_t>(state_index(n, s, static_cast<long long>(r), h, L, i))];
  return in;
}

/// The cotangents of the gain path's outputs, [B, T, H, L], [B, T, H], [N, H, L].
struct kdn_gain_cotangents {
  std::vector<float> gain, predicted, readout, final_covariance;
};

kdn_gain_cotangents draw_cotangents(const kdn_gain_validate_shape& n, long long L, unsigned seed) {
  std::mt19937_64 rng(seed + 0x9e3779b9u);
  std::uniform_real_distribution<double> unit(-1.0, 1.0);
  const std::size_t per_token = static_cast<std::size_t>(n.B) * n.T * n.H;
  kdn_gain_cotangents c;
  for (std::size_t i = 0; i < per_token * L; ++i) c.gain.push_back(static_cast<float>(unit(rng)));
  for (std::size_t i = 0; i < per_token * L; ++i) c.predicted.push_back(static_cast<float>(unit(rng)));
  for (std::size_t i = 0; i < per_token; ++i) c.readout.push_back(static_cast<float>(unit(rng)));
  for (std::size_t i = 0; i < static_cast<std::size_t>(sequence_count(n)) * n.H * L; ++i)
    c.final_covariance.push_back(static_cast<float>(unit(rng)));
  return c;
}

/// Head h's part of slice s of x (per token [B, T, H, inner], else [N, H, inner]) as a tensor<S> [shape].
template <class S>
tensor<S> head_slice(const char* name, const std::vector<float>& x, shape_t shape, const kdn_gain_validate_shape& n,
                     const kdn_slice& s, long long h, long long inner, bool per_token) {
  tensor<S> out(name, shape);
  for_each_element(n, s, h, inner, per_token, [&](std::size_t at, long long from, const auto&) {
    out.data()[at] = S(static_cast<double>(x[static_cast<std::size_t>(from)]));
  });
  return out;
}

/// The reference adjoint of head h on slice s over S (double: the values; running_error<double>: their bounds).
template <class S, class Inputs>
gradients<S> head_gradients(const Inputs& in64, const kdn_gain_cotangents& c, const kdn_gain_validate_shape& n,
                            long long L, long long h, const kdn_slice& s, float tau) {
  const std::size_t R = s.rows, Ts = s.tokens;
  constexpr bool diagonal = std::is_same_v<Inputs, diagonal_kdn_inputs<double>>;
  const auto convert = [](const tensor<double>& x) {
    tensor<S> out(x.name(), x.shape());
    for (std::size_t i = 0; i < x.size(); ++i) out.data()[i] = S(x.data()[i]);
    return out;
  };
  std::conditional_t<diagonal, diagonal_kdn_inputs<S>, isotropic_kdn_inputs<S>> in;
  in.q = convert(in64.q);
  in.k = convert(in64.k);
  in.v = convert(in64.v);
  in.g = convert(in64.g);
  in.omega = convert(in64.omega);
  in.r = convert(in64.r);
  in.initial_covariance = convert(*in64.initial_covariance);
  in.scale = S(static_cast<double>(tau));  // the kernels' τ, exactly
  const shape_t per_token = diagonal ? shape_t{R, Ts, 1, static_cast<std::size_t>(L)} : shape_t{R, Ts, 1};
  const shape_t finals = diagonal ? shape_t{R, 1, static_cast<std::size_t>(L)} : shape_t{R, 1};
  cotangents<S> cot{head_slice<S>(diagonal ? "gain" : "beta", c.gain, per_token, n, s, h, L, true),
                    head_slice<S>("predicted_covariance", c.predicted, per_token, n, s, h, L, true),
                    head_slice<S>("readout_variance", c.readout, {R, Ts, 1}, n, s, h, 1, true),
                    head_slice<S>("final_covariance", c.final_covariance, finals, n, s, h, L, false)};
  if constexpr (diagonal)
    return diagonal_kdn_backward(in, cot);
  else
    return isotropic_kdn_backward(in, cot);
}

/// One (sampled head, slice)'s reference gradients and their first-order error bounds (units of u).
struct head_gradient_result {
  gradients<double> value;
  gradients<running_error<double>> bound;
};

/// A reference run: the sampled head (its index among `heads`) and the slice. Slices without tokens
/// have none (the reference takes no empty sequence); they are checked exactly instead.
struct reference_task {
  std::size_t head;
  kdn_slice slice;
};

std::vector<reference_task> reference_tasks(std::size_t heads, const std::vector<kdn_slice>& slices) {
  std::vector<reference_task> tasks;
  for (std::size_t j = 0; j < heads; ++j)
    for (const kdn_slice& s : slices)
      if (s.tokens > 0) tasks.push_back({j, s});
  return tasks;
}

/// Compares the backward's gradients with the sampled heads' references; prints one line each.
int validate_gradients(const kdn_gain_validate_options& o, const kdn_gain_validate_shape& n,
                       const kdn_validate_inputs& x, const kdn_gain_problem& p, const std::vector<kdn_slice>& slices,
                       const std::vector<long long>& heads, const char* model, unsigned threads) {
  const bool diagonal = o.form == kdn_form::diagonal;
  const long long B = n.B, T = n.T, H = n.H, K = n.K, L = diagonal ? K : 1, N = sequence_count(n);
  if (T == 0) return 0;  // the reference takes no empty sequence (the twin test checks T = 0)
  const kdn_gain_cotangents c = draw_cotangents(n, L, o.seed);
  kdn_gain_backward_problem bp;
  bp.forward = p;
  bp.forward.predicted_covariance = bp.forward.gain = bp.forward.readout_variance = bp.forward.final_covariance =
      nullptr;
  bp.d_gain = c.gain.data();
  bp.d_predicted_covariance = c.predicted.data();
  bp.d_readout_variance = c.readout.data();
  bp.d_final_covariance = c.final_covariance.data();
  std::vector<float> dq(B * T * H * K), dk(dq.size()), dg(dq.size()), domega(B * T * H * L), dr(B * T * H), dmu(H),
      dprior(N * H * L), dtau(1);
  bp.dq = dq.data(), bp.dk = dk.data(), bp.dg = dg.data(), bp.domega = domega.data(), bp.dr = dr.data();
  bp.dmu = dmu.data(), bp.dinitial_covariance = dprior.data(), bp.dtau = dtau.data();
  if (o.twin) {
    kdn_gain_backward_twin(bp);
  } else {
#if defined(KALMAN_ORACLE_GPU_HAVE_CUDA)
    kdn_gain_backward_host(bp);
#else
    throw std::invalid_argument("validate: this build has no CUDA kernels; use --device twin");
#endif
  }
  const std::vector<reference_task> tasks = reference_tasks(heads.size(), slices);
  std::vector<std::optional<head_gradient_result>> per_task(tasks.size());
  kalman_oracle::detail::parallel_for(tasks.size(), threads, [&](std::size_t j) {
    const long long h = heads[tasks[j].head];
    const kdn_slice& s = tasks[j].slice;
    if (diagonal) {
      const auto in = head_inputs<diagonal_kdn_inputs<double>>(x, n, L, h, s);
      per_task[j].emplace(head_gradient_result{head_gradients<double>(in, c, n, L, h, s, p.tau),
                                               head_gradients<running_error<double>>(in, c, n, L, h, s, p.tau)});
    } else {
      const auto in = head_inputs<isotropic_kdn_inputs<double>>(x, n, L, h, s);
      per_task[j].emplace(head_gradient_result{head_gradients<double>(in, c, n, L, h, s, p.tau),
                                               head_gradients<running_error<double>>(in, c, n, L, h, s, p.tau)});
    }
  });
  const auto budget = [](const running_error<double>& e) { return (2 * 0x1p-24 + 2 * 0x1p-53) * e.error(); };
  // The kernels' per-token gradient [B, T, H, inner] (per_token) or per-sequence one [N, H, inner] at the
  // sampled heads against each task's [rows(, tokens), 1, inner].
  const auto compare = [&](const char* name, const std::vector<float>& kernel, const char* ref_name, long long inner,
                           bool per_token) {
    comparison cmp;
    cmp.output = name;
    for (std::size_t j = 0; j < tasks.size(); ++j) {
      const long long h = heads[tasks[j].head];
      const kdn_slice& s = tasks[j].slice;
      const tensor<double>& ref = per_task[j]->value.at(ref_name);
      const tensor<running_error<double>>& err = per_task[j]->bound.at(ref_name);
      for_each_element(n, s, h, inner, per_token, [&](std::size_t at, long long from, const auto& where) {
        cmp.add(kernel[from], ref.data()[at], budget(err.data()[at]), where);
      });
    }
    // A sequence without tokens: its prior's gradient is its final covariance's cotangent, exactly.
    if (!per_token) add_empty_sequences(cmp, kernel, c.final_covariance, n, heads, slices, inner);
    return cmp;
  };
  std::vector<comparison> results{
      compare("dq", dq, "q", K, true), compare("dk", dk, "k", K, true),
      compare("dg", dg, "g", K, true), compare("domega", domega, "omega", L, true),
      compare("dr", dr, "r", 1, true), compare("dinitial_covariance", dprior, "initial_covariance", L, false)};
  // dμ per sampled head and dτ (every head sampled) are shared by the slices: the kernels sum each
  // sequence's own value in sequence order (kdn_gain_backward.hpp), m − 1 more roundings over m
  // sequences of the terms' magnitudes, which the budget adds: (m − 1) u Σ|reference| (first order).
  // dτ: each sequence's 2 Σ / τ is a division of its own, so two roundings a sequence more.
  const double u = 0x1p-24;
  const auto shared = [&](const char* name, std::size_t head_of_task, bool every_head, double roundings) {
    double value = 0, bound = 0, magnitude = 0;
    long long terms = 0;
    for (std::size_t j = 0; j < tasks.size(); ++j)
      if (every_head || tasks[j].head == head_of_task) {
        const double v = per_task[j]->value.at(name).data()[0];
        value += v;
        bound += budget(per_task[j]->bound.at(name).data()[0]) + 0x1p-52 * std::abs(v);
        magnitude += std::abs(v);
        ++terms;
      }
    const long long sums = every_head ? static_cast<long long>(slices.size()) : terms;  // values the kernel adds
    return std::pair<double, double>{value,
                                     bound + roundings * static_cast<double>(std::max(0LL, sums - 1)) * u * magnitude};
  };
  {
    comparison cmp;
    cmp.output = "dmu";
    for (std::size_t j = 0; j < heads.size(); ++j) {
      const auto [value, bound] = shared("mu", j, false, 1);
      cmp.add(dmu[heads[j]], value, bound, [&] { return "head " + std::to_string(heads[j]); });
    }
    results.push_back(cmp);
  }
  if (static_cast<long long>(heads.size()) == H) {  // dτ sums over every head
    comparison cmp;
    cmp.output = "dtau";
    const auto [value, bound] = shared("scale", 0, true, 2);
    cmp.add(dtau[0], value, bound, [] { return std::string("the sum over heads"); });
    results.push_back(cmp);
  }
  char label[200];
  std::snprintf(label, sizeof label, "%s backward %s B=%d T=%d%s H=%d K=%d (%zu heads)", model,
                o.twin ? "twin" : "kernel", n.B, n.T, sequences_label(n).c_str(), n.H, n.K, heads.size());
  int status = 0;
  for (const comparison& cmp : results) {
    if (!cmp.pass()) status = 1;
    print_comparison(cmp, o.json, label, shape_fields(o, n, model, "backward", heads.size()), "",
                     "estimate: 2u x the first-order running error of the binary64 adjoint");
  }
  return status;
}

/// Step 6: the memory with the kernels' gains (`gain`: κ [B, T, H, K], or β [B, T, H]); a packed row's
/// sequences through cu_seqlens, as the gains.
int validate_memory(const kdn_gain_validate_options& o, const kdn_gain_validate_shape& n, const kdn_validate_inputs& x,
                    const std::vector<float>& gain, float tau, const std::vector<long long>& cu_seqlens,
                    const std::vector<long long>& heads, const char* model, unsigned threads) {
  const bool diagonal = o.form == kdn_form::diagonal;
  const long long B = n.B, T = n.T, H = n.H, K = n.K, V = n.K, N = sequence_count(n);
  char label[200];
  std::snprintf(label, sizeof label, "%s memory %s B=%d T=%d%s H=%d K=%d V=%d (%zu heads)", model,
                o.twin ? "twin" : "kernel", n.B, n.T, sequences_label(n).c_str(), n.H, n.K, n.K, heads.size());
  delta_rule_problem m;
  m.rule = delta_rule_kind::two_key;
  m.gate = delta_rule_gate::per_channel;
  m.batch = n.B, m.tokens = n.T, m.heads = n.H, m.key_dim = n.K, m.value_dim = n.K, m.key_head_group = 1;
  m.dtype = input_dtype::f32;
  m.tau = tau;
  if (!cu_seqlens.empty()) m.cu_seqlens = cu_seqlens.data(), m.sequences = n.sequences;
  std::vector<float> v(B * T * H * V), initial(N * H * K * V), kappa(B * T * H * K);
  std::vector<float> out(B * T * H * V, NAN), final_state(N * H * K * V, NAN);
  m.q = strided_view(x.q.data(), T * H * K, H * K, K, 1);
  m.k = strided_view(x.k.data(), T * H * K, H * K, K, 1);
  m.v = strided_view(v.data(), T * H * V, H * V, V, 1);
  m.g = strided_view(x.g.data(), T * H * K, H * K, K, 1);
  m.kappa = strided_view(kappa.data(), T * H * K, H * K, K, 1);
  m.initial_state = strided_view(initial.data(), H * K * V, K * V, V, 1);
  m.o = out.data(), m.final_state = final_state.data();
  try {
    if (T == 0) throw std::invalid_argument("T = 0");
    delta_rule_check(m);
  } catch (const std::invalid_argument& e) {  // sizes the memory kernel does not take: said, not failed
    if (o.json) {
      nlohmann::json line = shape_fields(o, n, model, "memory", heads.size());
      line["verdict"] = "NOT RUN";
      line["why"] = e.what();
      std::printf("%s\n", line.dump().c_str());
    } else {
      std::printf("%s  memory not run: %s\n", label, e.what());
    }
    return 0;
  }
  std::mt19937_64 rng(o.seed + 0x51ed27u);
  std::uniform_real_distribution<double> unit(-1.0, 1.0);
  for (float& e : v) e = static_cast<float>(unit(rng));
  for (float& e : initial) e = static_cast<float>(unit(rng));
  for (long long row = 0; row < B * T * H; ++row)
    for (long long i = 0; i < K; ++i)
      kappa[row * K + i] = diagonal ? gain[row * K + i] : mul_rn(gain[row], x.k[row * K + i]);
  if (o.twin) {
    delta_rule_twin(m);
  } else {
#if defined(KALMAN_ORACLE_GPU_HAVE_CUDA)
    delta_rule_host(m);
#else
    throw std::invalid_argument("validate: this build has no CUDA kernels; use --device twin");
#endif
  }
  // Sequence s (a batch row, or one of a packed row's), head h as the reference's fixed-gain problem with
  // the given gains.
  const memory_head_problem head_problem = [&](const delta_rule_sequence& s, long long h) {
    const std::size_t Ts = static_cast<std::size_t>(s.tokens), Ks = n.K, Vs = n.K;
    fixed_gain_inputs<double> in;
    in.rule = fixed_gain_rule::kda;
    in.q = tensor<double>("q", {1, Ts, 1, Ks});
    in.k = tensor<double>("k", {1, Ts, 1, Ks});
    in.v = tensor<double>("v", {1, Ts, 1, Vs});
    in.g = tensor<double>("g", {1, Ts, 1, Ks});
    in.gain = tensor<double>("gain", {1, Ts, 1, Ks});
    in.initial_state = tensor<double>("initial_state", {1, 1, Ks, Vs});
    in.scale = static_cast<double>(tau);
    for (long long t = 0; t < s.tokens; ++t) {
      const long long row = (s.batch_row * T + s.first_token + t) * H + h;
      for (long long i = 0; i < K; ++i) {
        const std::size_t at = static_cast<std::size_t>(t * K + i), from = static_cast<std::size_t>(row * K + i);
        in.q.data()[at] = x.q[from];
        in.k.data()[at] = x.k[from];
        in.g->data()[at] = x.g[from];
        in.gain->data()[at] = kappa[from];
      }
      for (long long j = 0; j < V; ++j) in.v.data()[static_cast<std::size_t>(t * V + j)] = v[row * V + j];
    }
    for (long long e = 0; e < K * V; ++e) in.initial_state->data()[e] = initial[(s.state * H + h) * K * V + e];
    return in;
  };
  nlohmann::json shape = shape_fields(o, n, model, "memory", heads.size());
  shape["V"] = n.K;
  int status =
      check_memory_against_reference({n.B, n.T, n.H, n.K, n.K, n.sequences}, validate_sequences(m), out, final_state,
                                     heads, head_problem, threads, o.json, label, shape, o.strict);
  // The memory's backward with the same κ (the gain kernels' backward is checked above, from the gain
  // path's own cotangents): every gradient of the two-key rule against the binary64 adjoint.
  std::snprintf(label, sizeof label, "%s memory backward %s B=%d T=%d%s H=%d K=%d V=%d (%zu heads)", model,
                o.twin ? "twin" : "kernel", n.B, n.T, sequences_label(n).c_str(), n.H, n.K, n.K, heads.size());
  if (check_memory_backward_against_reference(m, o.twin, o.seed, heads, head_problem, threads, o.json, label, shape,
                                              delta_rule_backward_operands::f32, o.strict) != 0)
    status = 1;
  return status;
}

}  // namespace

int validate_kdn_gain(const kdn_gain_validate_options& o) {
  const bool diagonal = o.form == kdn_form::diagonal;
  const char* model = diagonal ? "kdn_diagonal" : "kdn_isotropic";
  int status = 0;
  for (const kdn_gain_validate_shape& n : o.shapes) {
    const long long B = n.B, T = n.T, H = n.H, K = n.K, L = diagonal ? K : 1, N = sequence_count(n);
    const kdn_validate_inputs x = draw(n, L, o.seed);
    // A packed row's offsets (as validate_delta_rule draws them), and the slices the reference runs.
    const std::vector<long long> cu_seqlens =
        n.sequences > 0 ? varlen_offsets(n.T, n.sequences, o.seed) : std::vector<long long>{};
    const std::vector<kdn_slice> slices = kdn_slices(n, cu_seqlens);
    // The kernels, on the whole problem.
    std::vector<float> predicted(B * T * H * L), gain(B * T * H * L), readout(B * T * H), final_covariance(N * H * L);
    kdn_gain_problem p;
    p.form = o.form;
    p.batch = n.B;
    p.tokens = n.T;
    p.heads = n.H;
    p.key_dim = n.K;
    p.tau = static_cast<float>(std::pow(static_cast<double>(K), -0.5));
    if (n.sequences > 0) p.cu_seqlens = cu_seqlens.data(), p.sequences = n.sequences;
    p.q = strided_view(x.q.data(), T * H * K, H * K, K, 1);
    p.k = strided_view(x.k.data(), T * H * K, H * K, K, 1);
    p.g = strided_view(x.g.data(), T * H * K, H * K, K, 1);
    p.omega =
        diagonal ? strided_view(x.omega.data(), T * H * K, H * K, K, 1) : strided_view(x.omega.data(), T * H, H, 1);
    p.r = strided_view(x.r.data(), T * H, H, 1);
    p.initial_covariance = diagonal ? strided_view(x.prior.data(), H * K, K, 1) : strided_view(x.prior.data(), H, 1, 0);
    p.predicted_covariance = predicted.data();
    p.gain = gain.data();
    p.readout_variance = readout.data();
    p.final_covariance = final_covariance.data();
    if (o.twin) {
      kdn_gain_twin(p);
    } else {
#if defined(KALMAN_ORACLE_GPU_HAVE_CUDA)
      kdn_gain_host(p);
#else
      throw std::invalid_argument("validate: this build has no CUDA kernels; use --device twin");
#endif
    }

    // The binary64 reference and the bounds, one (sampled head, slice with tokens) a task.
    const std::vector<long long> heads = spread_sample(o.sample_heads, H);
    const std::vector<reference_task> tasks = reference_tasks(heads.size(), slices);
    std::vector<std::optional<head_result>> per_task(tasks.size());
    check::float_arithmetic binary64;
    binary64.unit_roundoff = 0x1p-53;
    binary64.underflow_error = 0x1p-1074;
    binary64.largest_finite = 1.7976931348623157e308;
    const unsigned threads = o.threads != 0 ? o.threads : std::max(1u, std::thread::hardware_concurrency());
    run_options one_thread;
    one_thread.threads = 1;
    one_thread.internals = true;
    kalman_oracle::detail::parallel_for(tasks.size(), threads, [&](std::size_t j) {
      const long long h = heads[tasks[j].head];
      if (diagonal) {
        const auto in = head_inputs<diagonal_kdn_inputs<double>>(x, n, L, h, tasks[j].slice);
        auto ref = diagonal_kdn_forward(in, one_thread);
        auto b32 = check::diagonal_kdn_bound(in, check::float_arithmetic{});
        auto b64 = check::diagonal_kdn_bound(in, binary64);
        per_task[j].emplace(
            head_result{std::move(*ref.predicted_covariance), std::move(*ref.gain), std::move(ref.readout_variance),
                        std::move(ref.final_covariance), std::move(b32.predicted_covariance), std::move(b32.gain),
                        std::move(b32.readout_variance), std::move(b32.final_covariance),
                        std::move(b64.predicted_covariance), std::move(b64.gain), std::move(b64.readout_variance),
                        std::move(b64.final_covariance), b32.hypothesis_failure + b64.hypothesis_failure});
      } else {
        const auto in = head_inputs<isotropic_kdn_inputs<double>>(x, n, L, h, tasks[j].slice);
        auto ref = isotropic_kdn_forward(in, one_thread);
        auto b32 = check::isotropic_kdn_bound(in, check::float_arithmetic{});
        auto b64 = check::isotropic_kdn_bound(in, binary64);
        per_task[j].emplace(
            head_result{std::move(*ref.predicted_covariance), std::move(*ref.beta), std::move(ref.readout_variance),
                        std::move(ref.final_covariance), std::move(b32.predicted_covariance), std::move(b32.beta),
                        std::move(b32.readout_variance), std::move(b32.final_covariance),
                        std::move(b64.predicted_covariance), std::move(b64.beta), std::move(b64.readout_variance),
                        std::move(b64.final_covariance), b32.hypothesis_failure + b64.hypothesis_failure});
      }
    });
    std::string hypothesis_failure;
    for (const auto& r : per_task)
      if (hypothesis_failure.empty()) hypothesis_failure = r->hypothesis_failure;

    // Compare: the kernels' per-token [B, T, H, inner] or per-sequence [N, H, inner] tensors at the sampled
    // heads against each task's [rows(, tokens), 1, inner]; a sequence without tokens must keep its prior,
    // exactly.
    const auto compare = [&](const char* name, const std::vector<float>& kernel, bool per_token, long long inner,
                             auto field) {
      comparison c;
      c.output = name;
      for (std::size_t j = 0; j < tasks.size(); ++j) {
        const long long h = heads[tasks[j].head];
        const kdn_slice& s = tasks[j].slice;
        const auto& [ref, b32, b64] = field(*per_task[j]);
        for_each_element(n, s, h, inner, per_token, [&](std::size_t at, long long from, const auto& where) {
          c.add(kernel[from], ref.data()[at], b32.data()[at] + b64.data()[at], where);
        });
      }
      if (!per_token) add_empty_sequences(c, kernel, x.prior, n, heads, slices, inner);
      return c;
    };
    using triple = std::tuple<const tensor<double>&, const tensor<double>&, const tensor<double>&>;
    const comparison results[] = {compare("predicted_covariance", predicted, true, L,
                                          [](const head_result& r) {
                                            return triple{r.predicted, r.predicted32, r.predicted64};
                                          }),
                                  compare(diagonal ? "gain" : "beta", gain, true, L,
                                          [](const head_result& r) {
                                            return triple{r.gain, r.gain32, r.gain64};
                                          }),
                                  compare("readout_variance", readout, true, 1,
                                          [](const head_result& r) {
                                            return triple{r.readout, r.readout32, r.readout64};
                                          }),
                                  compare("final_covariance", final_covariance, false, L, [](const head_result& r) {
                                    return triple{r.final_covariance, r.final32, r.final64};
                                  })};
    char label[200];
    std::snprintf(label, sizeof label, "%s %s B=%d T=%d%s H=%d K=%d (%zu heads)", model, o.twin ? "twin" : "kernel",
                  n.B, n.T, sequences_label(n).c_str(), n.H, n.K, heads.size());
    for (const comparison& c : results) {
      if (!c.pass()) status = 1;
      print_comparison(c, o.json, label, shape_fields(o, n, model, "forward", heads.size()), hypothesis_failure);
    }
    if (validate_gradients(o, n, x, p, slices, heads, model, threads) != 0) status = 1;
    if (validate_memory(o, n, x, gain, p.tau, cu_seqlens, heads, model, threads) != 0) status = 1;
  }
  return status;
}

}  // namespace kalman_oracle::gpu::tools
