// gpu/tools/validate_kla.hpp. For each shape:
//   1. inputs drawn in float32 from the default suite's KLA ranges (q, k, v uniform in [-1, 1]; Λ, λ₀
//      log10-uniform in [-1, 1]; ā uniform in [0.5, 1]; p̄ log10-uniform in [-4, -1]; η₀ uniform in
//      [-1, 1]), ā and p̄ static [M, S] as in the model;
//   2. the kernel on the GPU, outputs poisoned with NaN first (kla_forward_host);
//   3. a sample of channels (KLA's channels are independent: channel m's outputs read only channel
//      m's inputs): the binary64 reference (models/kla.hpp) on them, and per element the proven
//      binary32 bound (check/kla_bound.hpp, u = 2^-24) plus the binary64 reference's own bound (u =
//      2^-53). Both bounds are evaluated along the binary64 trajectory, not the exact one, and
//      labelled so: the relative difference is about 2^-53 · the bound's condition, far below the
//      budgets' own slack, but not a proof;
//   4. every compared element within budget32 + budget64, else FAIL naming the worst;
//   5. the gradients (validate_kla_backward.hpp): the backward kernels on the same problem with
//      cotangents drawn in [-1, 1], against the binary64 adjoint of the sampled channels, within the
//      fixtures' gradient budget (an estimate, labelled so).
#include "validate_kla.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "kalman_oracle/check/kla_bound.hpp"
#include "kalman_oracle/detail/parallel_for.hpp"
#include "kalman_oracle/gpu/kla_forward.hpp"
#include "kalman_oracle/gpu/twin/kla_forward_twin.hpp"
#include "kalman_oracle/models/kla.hpp"
#include "validate_kla_backward.hpp"
#include "validate_report.hpp"

namespace kalman_oracle::gpu::tools {

namespace {

kla_validate_inputs draw(const kla_validate_shape& n, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f), decay(0.5f, 1.0f), log_noise(-4.0f, -1.0f);
  const auto fill = [&](std::vector<float>& to, std::size_t count, auto&& draw_one) {
    to.resize(count);
    for (float& x : to) x = draw_one();
  };
  const std::size_t B = n.B, T = n.T, M = n.M, S = n.S;
  kla_validate_inputs x;
  fill(x.q, B * T * S, [&] { return unit(rng); });
  fill(x.k, B * T * S, [&] { return unit(rng); });
  fill(x.v, B * T * M, [&] { return unit(rng); });
  fill(x.Lambda, B * T * M, [&] { return std::pow(10.0f, unit(rng)); });
  fill(x.a_bar, M * S, [&] { return decay(rng); });
  fill(x.p_bar, M * S, [&] { return std::pow(10.0f, log_noise(rng)); });
  fill(x.lambda_0, B * M * S, [&] { return std::pow(10.0f, unit(rng)); });
  fill(x.eta_0, B * M * S, [&] { return unit(rng); });
  return x;
}

/// The sampled channels: spread over [0, M), first and last included.
std::vector<int> sample(int M, int count) {
  std::vector<int> out;
  const int n = std::min(count, M);
  for (int j = 0; j < n; ++j)
    out.push_back(n == 1 ? 0 : static_cast<int>((static_cast<long long>(j) * (M - 1)) / (n - 1)));
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace

kla_forward_problem kla_problem_of(const kla_validate_inputs& x, int B, int T, int M, int S) {
  const long long t = T, m = M, s = S;
  kla_forward_problem p;
  p.batch = B;
  p.tokens = T;
  p.channels = M;
  p.state = S;
  p.q = strided_view(x.q.data(), t * s, s, 1);
  p.k = strided_view(x.k.data(), t * s, s, 1);
  p.v = strided_view(x.v.data(), t * m, m, 1);
  p.Lambda = strided_view(x.Lambda.data(), t * m, m, 1);
  p.a_bar = strided_view(x.a_bar.data(), 0, 0, s, 1);
  p.p_bar = strided_view(x.p_bar.data(), 0, 0, s, 1);
  p.lambda_0 = strided_view(x.lambda_0.data(), m * s, s, 1);
  p.eta_0 = strided_view(x.eta_0.data(), m * s, s, 1);
  return p;
}

int validate_kla(const kla_validate_options& o) {
  int status = 0;
  for (const kla_validate_shape& n : o.shapes) {
    const long long B = n.B, T = n.T, M = n.M, S = n.S;
    const kla_validate_inputs x = draw(n, o.seed);
    // The kernel, on the whole problem.
    std::vector<float> y(B * T * M), y_var(B * T * M), final_lambda(B * M * S), final_eta(B * M * S);
    kla_forward_problem p = kla_problem_of(x, n.B, n.T, n.M, n.S);
    p.y = y.data();
    p.y_var = y_var.data();
    p.final_lambda = final_lambda.data();
    p.final_eta = final_eta.data();
    if (o.twin) {
      kla_forward_twin(p);
    } else {
#if defined(KALMAN_ORACLE_GPU_HAVE_CUDA)
      kla_forward_host(p);
#else
      throw std::invalid_argument("validate: this build has no CUDA kernels; use --device twin");
#endif
    }

    // The binary64 reference and the bounds, one sampled channel a task (the bounds are sequential
    // per element; the channels are independent sub-problems), on `threads` threads.
    const std::vector<int> channels = sample(n.M, o.sample_channels);
    const std::size_t N = channels.size();
    struct channel_result {
      kla_outputs<double> reference;
      check::kla_error_bound<double> bound32, bound64;
    };
    std::vector<std::optional<channel_result>> per_channel(N);
    check::float_arithmetic binary64;
    binary64.unit_roundoff = 0x1p-53;
    binary64.underflow_error = 0x1p-1074;  // the smallest subnormal (half of it is not a double)
    binary64.largest_finite = 1.7976931348623157e308;
    const unsigned threads = o.threads != 0 ? o.threads : std::max(1u, std::thread::hardware_concurrency());
    kalman_oracle::detail::parallel_for(N, threads, [&](std::size_t j) {
      const std::size_t Bs = B, Ts = T, Ss = S;
      const long long m = channels[j];
      kla_inputs<double> sub{tensor<double>("q", {Bs, Ts, Ss}),       tensor<double>("k", {Bs, Ts, Ss}),
                             tensor<double>("v", {Bs, Ts, 1}),        tensor<double>("Lambda", {Bs, Ts, 1}),
                             tensor<double>("a_bar", {1, Ss}),        tensor<double>("p_bar", {1, Ss}),
                             tensor<double>("lambda_0", {Bs, 1, Ss}), tensor<double>("eta_0", {Bs, 1, Ss})};
      for (std::size_t i = 0; i < x.q.size(); ++i) {
        sub.q.data()[i] = x.q[i];
        sub.k.data()[i] = x.k[i];
      }
      for (long long b = 0; b < B; ++b) {
        for (long long t = 0; t < T; ++t) {
          sub.v.data()[b * T + t] = x.v[(b * T + t) * M + m];
          sub.Lambda.data()[b * T + t] = x.Lambda[(b * T + t) * M + m];
        }
        for (long long s = 0; s < S; ++s) {
          (*sub.lambda_0).data()[b * S + s] = x.lambda_0[(b * M + m) * S + s];
          (*sub.eta_0).data()[b * S + s] = x.eta_0[(b * M + m) * S + s];
        }
      }
      for (long long s = 0; s < S; ++s) {
        sub.a_bar.data()[s] = x.a_bar[m * S + s];
        sub.p_bar.data()[s] = x.p_bar[m * S + s];
      }
      run_options one_thread;
      one_thread.threads = 1;
      per_channel[j].emplace(channel_result{kla_forward(sub, one_thread),
                                            check::kla_bound(sub, check::float_arithmetic{}),
                                            check::kla_bound(sub, binary64)});
    });
    std::string hypothesis_failure;
    for (std::size_t j = 0; j < N && hypothesis_failure.empty(); ++j)
      hypothesis_failure = per_channel[j]->bound32.hypothesis_failure + per_channel[j]->bound64.hypothesis_failure;
    const bool proven_hypotheses = hypothesis_failure.empty();

    // Compare: the kernel (whole problem) at the sampled channels against each channel's reference.
    using tensor_of = const tensor<double>& (*)(const channel_result&);
    const auto compare = [&](const char* name, const std::vector<float>& kernel, tensor_of ref, tensor_of budget32,
                             tensor_of budget64, bool per_state) {
      comparison c;
      c.output = name;
      const long long inner = per_state ? S : 1, rows = per_state ? B : B * T;
      for (std::size_t j = 0; j < N; ++j) {
        const channel_result& r_j = *per_channel[j];
        for (long long r = 0; r < rows; ++r)
          for (long long i = 0; i < inner; ++i) {
            const long long at_kernel = (r * M + channels[j]) * inner + i;
            const std::size_t at_ref = static_cast<std::size_t>(r * inner + i);
            c.add(kernel[at_kernel], ref(r_j).data()[at_ref],
                  budget32(r_j).data()[at_ref] + budget64(r_j).data()[at_ref], [&] {
                    return "batch " + std::to_string(per_state ? r : r / T) +
                           (per_state ? "" : ", token " + std::to_string(r % T)) + ", channel " +
                           std::to_string(channels[j]) + (per_state ? ", s " + std::to_string(i) : "");
                  });
          }
      }
      return c;
    };
    const comparison results[] = {
        compare(
            "y", y, [](const channel_result& r) -> const tensor<double>& { return r.reference.y; },
            [](const channel_result& r) -> const tensor<double>& { return r.bound32.y; },
            [](const channel_result& r) -> const tensor<double>& { return r.bound64.y; }, false),
        compare(
            "y_var", y_var, [](const channel_result& r) -> const tensor<double>& { return r.reference.y_var; },
            [](const channel_result& r) -> const tensor<double>& { return r.bound32.y_var; },
            [](const channel_result& r) -> const tensor<double>& { return r.bound64.y_var; }, false),
        compare(
            "final_lambda", final_lambda,
            [](const channel_result& r) -> const tensor<double>& { return r.reference.final_lambda; },
            [](const channel_result& r) -> const tensor<double>& { return r.bound32.final_lambda; },
            [](const channel_result& r) -> const tensor<double>& { return r.bound64.final_lambda; }, true),
        compare(
            "final_eta", final_eta,
            [](const channel_result& r) -> const tensor<double>& { return r.reference.final_eta; },
            [](const channel_result& r) -> const tensor<double>& { return r.bound32.final_eta; },
            [](const channel_result& r) -> const tensor<double>& { return r.bound64.final_eta; }, true)};
    char label[160];
    std::snprintf(label, sizeof label, "kla %s B=%d T=%d M=%d S=%d (%zu channels)", o.twin ? "twin" : "kernel", n.B,
                  n.T, n.M, n.S, N);
    for (const comparison& c : results) {
      if (!c.pass()) status = 1;
      print_comparison(c, o.json, label,
                       {{"model", "kla"},
                        {"device", o.twin ? "twin" : "cuda"},
                        {"B", n.B},
                        {"T", n.T},
                        {"M", n.M},
                        {"S", n.S},
                        {"sampled_channels", N}},
                       proven_hypotheses ? "" : hypothesis_failure);
    }
    std::snprintf(label, sizeof label, "kla backward %s B=%d T=%d M=%d S=%d (%zu channels)", o.twin ? "twin" : "kernel",
                  n.B, n.T, n.M, n.S, N);
    if (validate_kla_gradients(o, n, p, channels, label) != 0) status = 1;
  }
  return status;
}

}  // namespace kalman_oracle::gpu::tools
