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
//      final_covariance within budget32 + budget64, else FAIL naming the worst.
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
#include "kalman_oracle/gpu/twin/kdn_gain_twin.hpp"
#include "kalman_oracle/models/diagonal.hpp"
#include "kalman_oracle/models/isotropic.hpp"
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
  }
  return status;
}

}  // namespace kalman_oracle::gpu::tools
