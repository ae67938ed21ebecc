// gpu/tools/validate_kdn_gain.hpp. For each shape (B, T, H, K; one key head per value head):
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

/// The inputs of one shape, float32, contiguous ([B, T, H, K]; ω [B, T, H, L]; prior [B, H, L]).
struct kdn_validate_inputs {
  std::vector<float> q, k, g, omega, r, prior;
};

kdn_validate_inputs draw(const kdn_gain_validate_shape& n, long long L, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(-1.0, 1.0), gate(-1.0, 0.0), log_omega(-4.0, -1.0), log_r(-2.0, 1.0);
  const std::size_t B = n.B, T = n.T, H = n.H, K = n.K;
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
  for (std::size_t i = 0; i < B * H * static_cast<std::size_t>(L); ++i)
    x.prior.push_back(static_cast<float>(std::pow(10.0, unit(rng))));
  return x;
}

/// One head's reference outputs and bounds, as plain tensors (both forms).
struct head_result {
  tensor<double> predicted, gain, readout, final_covariance;  // reference
  tensor<double> predicted32, gain32, readout32, final32;     // binary32 bound
  tensor<double> predicted64, gain64, readout64, final64;     // binary64 bound
  std::string hypothesis_failure;
};

template <class Inputs>
Inputs head_inputs(const kdn_validate_inputs& x, const kdn_gain_validate_shape& n, long long L, long long h) {
  const std::size_t B = n.B, T = n.T, K = n.K, Ls = static_cast<std::size_t>(L);
  const long long H = n.H;
  constexpr bool diagonal = std::is_same_v<Inputs, diagonal_kdn_inputs<double>>;
  Inputs in;
  in.q = tensor<double>("q", {B, T, 1, K});
  in.k = tensor<double>("k", {B, T, 1, K});
  in.v = tensor<double>("v", {B, T, 1, 1}, 0.5);  // one value channel: the gains do not read v
  in.g = tensor<double>("g", {B, T, 1, K});
  in.omega = diagonal ? tensor<double>("omega", {B, T, 1, Ls}) : tensor<double>("omega", {B, T, 1});
  in.r = tensor<double>("r", {B, T, 1});
  in.initial_covariance =
      diagonal ? tensor<double>("initial_covariance", {B, 1, Ls}) : tensor<double>("initial_covariance", {B, 1});
  for (std::size_t row = 0; row < B * T; ++row) {
    const std::size_t from = row * static_cast<std::size_t>(H) + static_cast<std::size_t>(h);  // [B, T, H]
    for (std::size_t i = 0; i < K; ++i) {
      in.q.data()[row * K + i] = x.q[from * K + i];
      in.k.data()[row * K + i] = x.k[from * K + i];
      in.g.data()[row * K + i] = x.g[from * K + i];
    }
    for (std::size_t i = 0; i < Ls; ++i) in.omega.data()[row * Ls + i] = x.omega[from * Ls + i];
    in.r.data()[row] = x.r[from];
  }
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t i = 0; i < Ls; ++i)
      (*in.initial_covariance).data()[b * Ls + i] = x.prior[(b * static_cast<std::size_t>(H) + h) * Ls + i];
  return in;
}

/// The cotangents of the gain path's outputs, [B, T, H, L], [B, T, H], [B, H, L].
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
  for (std::size_t i = 0; i < static_cast<std::size_t>(n.B) * n.H * L; ++i)
    c.final_covariance.push_back(static_cast<float>(unit(rng)));
  return c;
}

/// Head h's slice of x [rows, H, inner] as a tensor<S> [shape] (rows · inner elements).
template <class S>
tensor<S> head_slice(const char* name, const std::vector<float>& x, shape_t shape, long long H, long long h,
                     long long inner) {
  tensor<S> out(name, shape);
  const long long rows = static_cast<long long>(out.size()) / inner;
  for (long long row = 0; row < rows; ++row)
    for (long long i = 0; i < inner; ++i)
      out.data()[static_cast<std::size_t>(row * inner + i)] = S(static_cast<double>(x[(row * H + h) * inner + i]));
  return out;
}

/// The reference adjoint of head h over S (double: the values; running_error<double>: their bounds).
template <class S, class Inputs>
gradients<S> head_gradients(const Inputs& in64, const kdn_gain_cotangents& c, const kdn_gain_validate_shape& n,
                            long long L, long long h, float tau) {
  const std::size_t B = n.B, T = n.T;
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
  const shape_t per_token = diagonal ? shape_t{B, T, 1, static_cast<std::size_t>(L)} : shape_t{B, T, 1};
  const shape_t finals = diagonal ? shape_t{B, 1, static_cast<std::size_t>(L)} : shape_t{B, 1};
  cotangents<S> cot{head_slice<S>(diagonal ? "gain" : "beta", c.gain, per_token, n.H, h, L),
                    head_slice<S>("predicted_covariance", c.predicted, per_token, n.H, h, L),
                    head_slice<S>("readout_variance", c.readout, {B, T, 1}, n.H, h, 1),
                    head_slice<S>("final_covariance", c.final_covariance, finals, n.H, h, L)};
  if constexpr (diagonal)
    return diagonal_kdn_backward(in, cot);
  else
    return isotropic_kdn_backward(in, cot);
}

/// One sampled head's reference gradients and their first-order error bounds (units of u).
struct head_gradient_result {
  gradients<double> value;
  gradients<running_error<double>> bound;
};

/// Compares the backward's gradients with the sampled heads' references; prints one line each.
int validate_gradients(const kdn_gain_validate_options& o, const kdn_gain_validate_shape& n,
                       const kdn_validate_inputs& x, const kdn_gain_problem& p, const std::vector<long long>& heads,
                       const char* model, unsigned threads) {
  const bool diagonal = o.form == kdn_form::diagonal;
  const long long B = n.B, T = n.T, H = n.H, K = n.K, L = diagonal ? K : 1;
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
      dprior(B * H * L), dtau(1);
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
  std::vector<std::optional<head_gradient_result>> per_head(heads.size());
  kalman_oracle::detail::parallel_for(heads.size(), threads, [&](std::size_t j) {
    if (diagonal) {
      const auto in = head_inputs<diagonal_kdn_inputs<double>>(x, n, L, heads[j]);
      per_head[j].emplace(head_gradient_result{head_gradients<double>(in, c, n, L, heads[j], p.tau),
                                               head_gradients<running_error<double>>(in, c, n, L, heads[j], p.tau)});
    } else {
      const auto in = head_inputs<isotropic_kdn_inputs<double>>(x, n, L, heads[j]);
      per_head[j].emplace(head_gradient_result{head_gradients<double>(in, c, n, L, heads[j], p.tau),
                                               head_gradients<running_error<double>>(in, c, n, L, heads[j], p.tau)});
    }
  });
  const auto budget = [](const running_error<double>& e) { return (2 * 0x1p-24 + 2 * 0x1p-53) * e.error(); };
  // The kernels' [rows, H, inner] gradient at the sampled heads against each head's [rows, 1, inner].
  const auto compare = [&](const char* name, const std::vector<float>& kernel, const char* ref_name, long long inner) {
    comparison cmp;
    cmp.output = name;
    for (std::size_t j = 0; j < heads.size(); ++j) {
      const tensor<double>& ref = per_head[j]->value.at(ref_name);
      const tensor<running_error<double>>& err = per_head[j]->bound.at(ref_name);
      const long long rows = static_cast<long long>(ref.size()) / inner;
      for (long long row = 0; row < rows; ++row)
        for (long long i = 0; i < inner; ++i) {
          const std::size_t at = static_cast<std::size_t>(row * inner + i);
          const long long from = (row * H + heads[j]) * inner + i;  // dmu [H] too: one row, inner 1
          cmp.add(kernel[from], ref.data()[at], budget(err.data()[at]), [&] {
            return "head " + std::to_string(heads[j]) + (rows > 1 ? ", row " + std::to_string(row) : "") +
                   (inner > 1 ? ", channel " + std::to_string(i) : "");
          });
        }
    }
    return cmp;
  };
  std::vector<comparison> results{compare("dq", dq, "q", K),
                                  compare("dk", dk, "k", K),
                                  compare("dg", dg, "g", K),
                                  compare("domega", domega, "omega", L),
                                  compare("dr", dr, "r", 1),
                                  compare("dmu", dmu, "mu", 1),
                                  compare("dinitial_covariance", dprior, "initial_covariance", L)};
  if (static_cast<long long>(heads.size()) == H) {  // dτ sums over every head
    comparison cmp;
    cmp.output = "dtau";
    double value = 0, bound = 0;
    for (const auto& r : per_head) {
      value += r->value.at("scale").data()[0];
      bound += budget(r->bound.at("scale").data()[0]) + 0x1p-52 * std::abs(r->value.at("scale").data()[0]);
    }
    cmp.add(dtau[0], value, bound, [] { return std::string("the sum over heads"); });
    results.push_back(cmp);
  }
  char label[160];
  std::snprintf(label, sizeof label, "%s backward %s B=%d T=%d H=%d K=%d (%zu heads)", model,
                o.twin ? "twin" : "kernel", n.B, n.T, n.H, n.K, heads.size());
  int status = 0;
  for (const comparison& cmp : results) {
    if (!cmp.pass()) status = 1;
    print_comparison(cmp, o.json, label,
                     {{"model", model},
                      {"device", o.twin ? "twin" : "cuda"},
                      {"pass", "backward"},
                      {"B", n.B},
                      {"T", n.T},
                      {"H", n.H},
                      {"K", n.K},
                      {"sampled_heads", heads.size()}},
                     "", "estimate: 2u x the first-order running error of the binary64 adjoint");
  }
  return status;
}

/// Step 6: the memory with the kernels' gains (`gain`: κ [B, T, H, K], or β [B, T, H]).
int validate_memory(const kdn_gain_validate_options& o, const kdn_gain_validate_shape& n, const kdn_validate_inputs& x,
                    const std::vector<float>& gain, float tau, const std::vector<long long>& heads, const char* model,
                    unsigned threads) {
  const bool diagonal = o.form == kdn_form::diagonal;
  const long long B = n.B, T = n.T, H = n.H, K = n.K, V = n.K;
  char label[160];
  std::snprintf(label, sizeof label, "%s memory %s B=%d T=%d H=%d K=%d V=%d (%zu heads)", model,
                o.twin ? "twin" : "kernel", n.B, n.T, n.H, n.K, n.K, heads.size());
  delta_rule_problem m;
  m.rule = delta_rule_kind::two_key;
  m.gate = delta_rule_gate::per_channel;
  m.batch = n.B, m.tokens = n.T, m.heads = n.H, m.key_dim = n.K, m.value_dim = n.K, m.key_head_group = 1;
  m.dtype = input_dtype::f32;
  m.tau = tau;
  std::vector<float> v(B * T * H * V), initial(B * H * K * V), kappa(B * T * H * K);
  std::vector<float> out(B * T * H * V, NAN), final_state(B * H * K * V, NAN);
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
    if (o.json)
      std::printf("%s\n", nlohmann::json{{"model", model},
                                         {"pass", "memory"},
                                         {"B", n.B},
                                         {"T", n.T},
                                         {"H", n.H},
                                         {"K", n.K},
                                         {"verdict", "NOT RUN"},
                                         {"why", e.what()}}
                              .dump()
                              .c_str());
    else
      std::printf("%s  memory not run: %s\n", label, e.what());
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
  // Batch row b (one sequence a row), head h as the reference's fixed-gain problem with the given gains.
  const memory_head_problem head_problem = [&](const delta_rule_sequence& s, long long h) {
    const long long b = s.batch_row;
    const std::size_t Ts = n.T, Ks = n.K, Vs = n.K;
    fixed_gain_inputs<double> in;
    in.rule = fixed_gain_rule::kda;
    in.q = tensor<double>("q", {1, Ts, 1, Ks});
    in.k = tensor<double>("k", {1, Ts, 1, Ks});
    in.v = tensor<double>("v", {1, Ts, 1, Vs});
    in.g = tensor<double>("g", {1, Ts, 1, Ks});
    in.gain = tensor<double>("gain", {1, Ts, 1, Ks});
    in.initial_state = tensor<double>("initial_state", {1, 1, Ks, Vs});
    in.scale = static_cast<double>(tau);
    for (long long t = 0; t < T; ++t) {
      const long long row = (b * T + t) * H + h;
      for (long long i = 0; i < K; ++i) {
        const std::size_t at = static_cast<std::size_t>(t * K + i), from = static_cast<std::size_t>(row * K + i);
        in.q.data()[at] = x.q[from];
        in.k.data()[at] = x.k[from];
        in.g->data()[at] = x.g[from];
        in.gain->data()[at] = kappa[from];
      }
      for (long long j = 0; j < V; ++j) in.v.data()[static_cast<std::size_t>(t * V + j)] = v[row * V + j];
    }
    for (long long e = 0; e < K * V; ++e) in.initial_state->data()[e] = initial[(b * H + h) * K * V + e];
    return in;
  };
  const nlohmann::json shape{{"model", model},
                             {"device", o.twin ? "twin" : "cuda"},
                             {"pass", "memory"},
                             {"B", n.B},
                             {"T", n.T},
                             {"H", n.H},
                             {"K", n.K},
                             {"V", n.K},
                             {"sampled_heads", heads.size()}};
  int status = check_memory_against_reference({n.B, n.T, n.H, n.K, n.K}, validate_sequences(m), out, final_state, heads,
                                              head_problem, threads, o.json, label, shape);
  // The memory's backward with the same κ (the gain kernels' backward is checked above, from the gain
  // path's own cotangents): every gradient of the two-key rule against the binary64 adjoint.
  std::snprintf(label, sizeof label, "%s memory backward %s B=%d T=%d H=%d K=%d V=%d (%zu heads)", model,
                o.twin ? "twin" : "kernel", n.B, n.T, n.H, n.K, n.K, heads.size());
  if (check_memory_backward_against_reference(m, o.twin, o.seed, heads, head_problem, threads, o.json, label, shape) !=
      0)
    status = 1;
  return status;
}

}  // namespace

int validate_kdn_gain(const kdn_gain_validate_options& o) {
  const bool diagonal = o.form == kdn_form::diagonal;
  const char* model = diagonal ? "kdn_diagonal" : "kdn_isotropic";
  int status = 0;
  for (const kdn_gain_validate_shape& n : o.shapes) {
    const long long B = n.B, T = n.T, H = n.H, K = n.K, L = diagonal ? K : 1;
    const kdn_validate_inputs x = draw(n, L, o.seed);
    // The kernels, on the whole problem.
    std::vector<float> predicted(B * T * H * L), gain(B * T * H * L), readout(B * T * H), final_covariance(B * H * L);
    kdn_gain_problem p;
    p.form = o.form;
    p.batch = n.B;
    p.tokens = n.T;
    p.heads = n.H;
    p.key_dim = n.K;
    p.tau = static_cast<float>(std::pow(static_cast<double>(K), -0.5));
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

    // The binary64 reference and the bounds, one sampled head a task.
    const std::vector<long long> heads = spread_sample(o.sample_heads, H);
    std::vector<std::optional<head_result>> per_head(heads.size());
    check::float_arithmetic binary64;
    binary64.unit_roundoff = 0x1p-53;
    binary64.underflow_error = 0x1p-1074;
    binary64.largest_finite = 1.7976931348623157e308;
    const unsigned threads = o.threads != 0 ? o.threads : std::max(1u, std::thread::hardware_concurrency());
    run_options one_thread;
    one_thread.threads = 1;
    one_thread.internals = true;
    kalman_oracle::detail::parallel_for(heads.size(), threads, [&](std::size_t j) {
      if (diagonal) {
        const auto in = head_inputs<diagonal_kdn_inputs<double>>(x, n, L, heads[j]);
        auto ref = diagonal_kdn_forward(in, one_thread);
        auto b32 = check::diagonal_kdn_bound(in, check::float_arithmetic{});
        auto b64 = check::diagonal_kdn_bound(in, binary64);
        per_head[j].emplace(
            head_result{std::move(*ref.predicted_covariance), std::move(*ref.gain), std::move(ref.readout_variance),
                        std::move(ref.final_covariance), std::move(b32.predicted_covariance), std::move(b32.gain),
                        std::move(b32.readout_variance), std::move(b32.final_covariance),
                        std::move(b64.predicted_covariance), std::move(b64.gain), std::move(b64.readout_variance),
                        std::move(b64.final_covariance), b32.hypothesis_failure + b64.hypothesis_failure});
      } else {
        const auto in = head_inputs<isotropic_kdn_inputs<double>>(x, n, L, heads[j]);
        auto ref = isotropic_kdn_forward(in, one_thread);
        auto b32 = check::isotropic_kdn_bound(in, check::float_arithmetic{});
        auto b64 = check::isotropic_kdn_bound(in, binary64);
        per_head[j].emplace(
            head_result{std::move(*ref.predicted_covariance), std::move(*ref.beta), std::move(ref.readout_variance),
                        std::move(ref.final_covariance), std::move(b32.predicted_covariance), std::move(b32.beta),
                        std::move(b32.readout_variance), std::move(b32.final_covariance),
                        std::move(b64.predicted_covariance), std::move(b64.beta), std::move(b64.readout_variance),
                        std::move(b64.final_covariance), b32.hypothesis_failure + b64.hypothesis_failure});
      }
    });
    std::string hypothesis_failure;
    for (const auto& r : per_head)
      if (hypothesis_failure.empty()) hypothesis_failure = r->hypothesis_failure;

    // Compare: the kernels' [.., H, inner] tensors at the sampled heads against each head's [.., 1, inner].
    const auto compare = [&](const char* name, const std::vector<float>& kernel, long long rows, long long inner,
                             auto field) {
      comparison c;
      c.output = name;
      for (std::size_t j = 0; j < heads.size(); ++j) {
        const head_result& r = *per_head[j];
        const auto& [ref, b32, b64] = field(r);
        for (long long row = 0; row < rows; ++row)
          for (long long i = 0; i < inner; ++i) {
            const std::size_t at = static_cast<std::size_t>(row * inner + i);
            c.add(kernel[(row * H + heads[j]) * inner + i], ref.data()[at], b32.data()[at] + b64.data()[at], [&] {
              const bool per_token = rows == B * T && T > 0;
              return "batch " + std::to_string(per_token ? row / T : row) +
                     (per_token ? ", token " + std::to_string(row % T) : "") + ", head " + std::to_string(heads[j]) +
                     (inner > 1 ? ", channel " + std::to_string(i) : "");
            });
          }
      }
      return c;
    };
    using triple = std::tuple<const tensor<double>&, const tensor<double>&, const tensor<double>&>;
    const comparison results[] = {compare("predicted_covariance", predicted, B * T, L,
                                          [](const head_result& r) {
                                            return triple{r.predicted, r.predicted32, r.predicted64};
                                          }),
                                  compare(diagonal ? "gain" : "beta", gain, B * T, L,
                                          [](const head_result& r) {
                                            return triple{r.gain, r.gain32, r.gain64};
                                          }),
                                  compare("readout_variance", readout, B * T, 1,
                                          [](const head_result& r) {
                                            return triple{r.readout, r.readout32, r.readout64};
                                          }),
                                  compare("final_covariance", final_covariance, B, L, [](const head_result& r) {
                                    return triple{r.final_covariance, r.final32, r.final64};
                                  })};
    char label[160];
    std::snprintf(label, sizeof label, "%s %s B=%d T=%d H=%d K=%d (%zu heads)", model, o.twin ? "twin" : "kernel", n.B,
                  n.T, n.H, n.K, heads.size());
    for (const comparison& c : results) {
      if (!c.pass()) status = 1;
      print_comparison(c, o.json, label,
                       {{"model", model},
                        {"device", o.twin ? "twin" : "cuda"},
                        {"B", n.B},
                        {"T", n.T},
                        {"H", n.H},
                        {"K", n.K},
                        {"sampled_heads", heads.size()}},
                       hypothesis_failure);
    }
    if (validate_gradients(o, n, x, p, heads, model, threads) != 0) status = 1;
    if (validate_memory(o, n, x, gain, p.tau, heads, model, threads) != 0) status = 1;
  }
  return status;
}

}  // namespace kalman_oracle::gpu::tools
