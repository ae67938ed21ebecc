// gpu/tools/validate_kla_backward.hpp. For one shape:
//   1. cotangents dy, dy_var [B, T, M], dfinal_lambda, dfinal_eta [B, M, S] drawn in [-1, 1];
//   2. the backward kernels (or the twin) on the whole problem, gradients poisoned with NaN first
//      (kla_backward_host), without the forward's checkpoints (the kernels' own checkpoint pass);
//   3. the sub-problem of the sampled channels (every batch row, token and s; KLA's channels are
//      independent, so their dv, dΛ, dā, dp̄, dλ₀, dη₀ read only their own inputs and cotangents):
//      the binary64 adjoint (grad/kla.hpp) and the same template over running_error<double> (the
//      fixtures' first-order bound of the adjoint's rounding, docs/error-model.md "Gradients");
//   4. dq and dk sum over every channel: the kernels are run again on the sub-problem alone and
//      compared there (where every channel is sampled, the whole problem's are);
//   5. every compared element within (2 · 2^-24 + 2 · 2^-53) × its running error, else FAIL naming
//      the worst. The budget is the fixtures' estimate for the binary32 adjoint plus the binary64
//      reference's own, labelled an estimate.
#include "validate_kla_backward.hpp"

#include <cstdio>
#include <functional>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>

#include "kalman_oracle/detail/parallel_for.hpp"
#include "kalman_oracle/gpu/kla_backward.hpp"
#include "kalman_oracle/gpu/twin/kla_backward_twin.hpp"
#include "kalman_oracle/grad/kla.hpp"
#include "kalman_oracle/scalar/running_error.hpp"
#include "validate_report.hpp"

namespace kalman_oracle::gpu::tools {

namespace {

/// The cotangents of one shape, binary32, contiguous.
struct kla_cotangent_draw {
  std::vector<float> dy, dy_var, dfinal_lambda, dfinal_eta;
};

kla_cotangent_draw draw_cotangents(const kla_validate_shape& n, unsigned seed) {
  std::mt19937_64 rng(seed + 0x6b6c61u);  // not the inputs' stream
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  const std::size_t B = n.B, T = n.T, M = n.M, S = n.S;
  kla_cotangent_draw c;
  for (auto [to, count] : {std::pair{&c.dy, B * T * M}, std::pair{&c.dy_var, B * T * M},
                           std::pair{&c.dfinal_lambda, B * M * S}, std::pair{&c.dfinal_eta, B * M * S}}) {
    to->resize(count);
    for (float& x : *to) x = unit(rng);
  }
  return c;
}

/// The problem's binary32 inputs (contiguous, ā and p̄ [M, S], as validate_kla draws them) and the
/// cotangents at `channels` only: the sub-problem, [B, T, N] and [B, N, S] with N channels.
struct kla_sub_problem {
  kla_validate_inputs inputs;
  kla_cotangent_draw cotangents;
};

kla_sub_problem sub_problem(const kla_forward_problem& p, const kla_cotangent_draw& c,
                            const std::vector<int>& channels) {
  const long long B = p.batch, T = p.tokens, M = p.channels, S = p.state, N = static_cast<long long>(channels.size());
  const auto f = [](const strided_input& x) { return static_cast<const float*>(x.data); };
  kla_sub_problem sub;
  kla_validate_inputs& s = sub.inputs;
  kla_cotangent_draw& sc = sub.cotangents;
  s.q.assign(f(p.q), f(p.q) + B * T * S);
  s.k.assign(f(p.k), f(p.k) + B * T * S);
  for (long long r = 0; r < B * T; ++r)
    for (long long j = 0; j < N; ++j) {
      s.v.push_back(f(p.v)[r * M + channels[j]]);
      s.Lambda.push_back(f(p.Lambda)[r * M + channels[j]]);
      sc.dy.push_back(c.dy[r * M + channels[j]]);
      sc.dy_var.push_back(c.dy_var[r * M + channels[j]]);
    }
  for (long long j = 0; j < N; ++j)
    for (long long i = 0; i < S; ++i) {
      s.a_bar.push_back(f(p.a_bar)[channels[j] * S + i]);
      s.p_bar.push_back(f(p.p_bar)[channels[j] * S + i]);
    }
  for (long long b = 0; b < B; ++b)
    for (long long j = 0; j < N; ++j)
      for (long long i = 0; i < S; ++i) {
        const long long at = (b * M + channels[j]) * S + i;
        s.lambda_0.push_back(f(p.lambda_0)[at]);
        s.eta_0.push_back(f(p.eta_0)[at]);
        sc.dfinal_lambda.push_back(c.dfinal_lambda[at]);
        sc.dfinal_eta.push_back(c.dfinal_eta[at]);
      }
  return sub;
}

/// The binary32 gradients of one problem (kla_backward.hpp's layouts; ā, p̄ static: [M, S]).
struct kla_gradient_values {
  std::vector<float> dq, dk, dv, dLambda, da_bar, dp_bar, dlambda_0, deta_0;
};

/// The backward kernels (or the twin) on problem `p` with cotangents `c`, gradients poisoned first.
kla_gradient_values run_backward(const kla_forward_problem& p, const kla_cotangent_draw& c, bool twin) {
  const std::size_t B = p.batch, T = p.tokens, M = p.channels, S = p.state;
  kla_gradient_values g;
  kla_backward_problem bp;
  bp.forward = p;
  bp.dy = c.dy.data();
  bp.dy_var = c.dy_var.data();
  bp.dfinal_lambda = c.dfinal_lambda.data();
  bp.dfinal_eta = c.dfinal_eta.data();
  for (auto [vec, to, count] :
       {std::tuple{&g.dq, &bp.dq, B * T * S}, std::tuple{&g.dk, &bp.dk, B * T * S},
        std::tuple{&g.dv, &bp.dv, B * T * M}, std::tuple{&g.dLambda, &bp.dLambda, B * T * M},
        std::tuple{&g.da_bar, &bp.da_bar, M * S}, std::tuple{&g.dp_bar, &bp.dp_bar, M * S},
        std::tuple{&g.dlambda_0, &bp.dlambda_0, B * M * S}, std::tuple{&g.deta_0, &bp.deta_0, B * M * S}}) {
    vec->assign(count, std::numeric_limits<float>::quiet_NaN());
    *to = vec->data();
  }
  if (twin) {
    kla_backward_twin(bp);
  } else {
#if defined(KALMAN_ORACLE_GPU_HAVE_CUDA)
    kla_backward_host(bp);
#else
    throw std::invalid_argument("validate: this build has no CUDA kernels; use --device twin");
#endif
  }
  return g;
}

/// grad/kla.hpp's adjoint of the sub-problem over scalar type X (double: the values;
/// running_error<double>: their first-order bounds).
template <class X>
gradients<X> reference_gradients(const kla_sub_problem& sub, std::size_t B, std::size_t T, std::size_t N,
                                 std::size_t S) {
  const auto to = [](const char* name, const std::vector<float>& from, shape_t shape) {
    tensor<X> t(name, shape);
    for (std::size_t i = 0; i < from.size(); ++i) t.data()[i] = X(static_cast<double>(from[i]));
    return t;
  };
  const kla_validate_inputs& s = sub.inputs;
  const kla_cotangent_draw& c = sub.cotangents;
  kla_inputs<X> in{to("q", s.q, {B, T, S}),
                   to("k", s.k, {B, T, S}),
                   to("v", s.v, {B, T, N}),
                   to("Lambda", s.Lambda, {B, T, N}),
                   to("a_bar", s.a_bar, {N, S}),
                   to("p_bar", s.p_bar, {N, S}),
                   to("lambda_0", s.lambda_0, {B, N, S}),
                   to("eta_0", s.eta_0, {B, N, S})};
  cotangents<X> cot{to("y", c.dy, {B, T, N}), to("y_var", c.dy_var, {B, T, N}),
                    to("final_lambda", c.dfinal_lambda, {B, N, S}), to("final_eta", c.dfinal_eta, {B, N, S})};
  return kla_backward(in, cot);
}

}  // namespace

int validate_kla_gradients(const kla_validate_options& o, const kla_validate_shape& n, const kla_forward_problem& p,
                           const std::vector<int>& channels, const char* label) {
  const long long B = n.B, T = n.T, M = n.M, S = n.S, N = static_cast<long long>(channels.size());
  if (T == 0) return 0;  // nothing but the priors' gradients, which the twin test covers at T = 0
  const kla_cotangent_draw c = draw_cotangents(n, o.seed);
  const kla_gradient_values whole = run_backward(p, c, o.twin);
  const kla_sub_problem sub = sub_problem(p, c, channels);
  const bool every_channel = N == M;
  const kla_gradient_values of_sub =
      every_channel
          ? kla_gradient_values{}
          : run_backward(kla_problem_of(sub.inputs, n.B, n.T, static_cast<int>(N), n.S), sub.cotangents, o.twin);
  const std::vector<float>& dq = every_channel ? whole.dq : of_sub.dq;
  const std::vector<float>& dk = every_channel ? whole.dk : of_sub.dk;

  // The reference's values and bounds (two independent runs: two tasks).
  gradients<double> value;
  gradients<running_error<double>> bound;
  const unsigned threads = o.threads != 0 ? o.threads : 2u;
  kalman_oracle::detail::parallel_for(2, threads, [&](std::size_t task) {
    if (task == 0)
      value = reference_gradients<double>(sub, B, T, N, S);
    else
      bound = reference_gradients<running_error<double>>(sub, B, T, N, S);
  });
  const auto budget = [](const running_error<double>& e) { return (2 * 0x1p-24 + 2 * 0x1p-53) * e.error(); };

  // kernel[at(i)] against the reference's element i, for every element of the reference tensor.
  const auto compare = [&](const char* name, const std::vector<float>& kernel, const char* ref_name,
                           const std::function<long long(long long)>& kernel_at,
                           const std::function<std::string(long long)>& where) {
    comparison cmp;
    cmp.output = name;
    const tensor<double>& ref = value.at(ref_name);
    const tensor<running_error<double>>& err = bound.at(ref_name);
    for (long long i = 0; i < static_cast<long long>(ref.size()); ++i)
      cmp.add(kernel[kernel_at(i)], ref.data()[i], budget(err.data()[i]), [&] { return where(i); });
    return cmp;
  };
  // Sub-problem index → the whole problem's: [rows, N, inner] → [rows, M, inner].
  const auto at_channel = [&](long long inner) {
    return [&, inner](long long i) {
      const long long row = i / (N * inner), j = (i / inner) % N, k = i % inner;
      return (row * M + channels[j]) * inner + k;
    };
  };
  // Where element i of a sub-problem gradient [rows, N, inner] is: rows of `rows_per` tokens a batch
  // row (0: no batch axis).
  const auto named = [&](long long inner, long long rows_per) {
    return [&, inner, rows_per](long long i) {
      const long long row = i / (N * inner), j = (i / inner) % N, k = i % inner;
      std::string w = rows_per > 0 ? "batch " + std::to_string(row / rows_per) +
                                         (rows_per > 1 ? ", token " + std::to_string(row % rows_per) : "") + ", "
                                   : std::string();
      w += "channel " + std::to_string(channels[j]);
      if (inner > 1) w += ", s " + std::to_string(k);
      return w;
    };
  };
  const auto per_token_s = [&](long long i) {
    return "batch " + std::to_string(i / (T * S)) + ", token " + std::to_string((i / S) % T) + ", s " +
           std::to_string(i % S);
  };
  const auto same = [](long long i) { return i; };
  const comparison results[] = {compare("dq", dq, "q", same, per_token_s),
                                compare("dk", dk, "k", same, per_token_s),
                                compare("dv", whole.dv, "v", at_channel(1), named(1, T)),
                                compare("dLambda", whole.dLambda, "Lambda", at_channel(1), named(1, T)),
                                compare("da_bar", whole.da_bar, "a_bar", at_channel(S), named(S, 0)),
                                compare("dp_bar", whole.dp_bar, "p_bar", at_channel(S), named(S, 0)),
                                compare("dlambda_0", whole.dlambda_0, "lambda_0", at_channel(S), named(S, 1)),
                                compare("deta_0", whole.deta_0, "eta_0", at_channel(S), named(S, 1))};
  int status = 0;
  for (const comparison& cmp : results) {
    if (!cmp.pass()) status = 1;
    print_comparison(cmp, o.json, label,
                     {{"model", "kla"},
                      {"device", o.twin ? "twin" : "cuda"},
                      {"pass", "backward"},
                      {"B", n.B},
                      {"T", n.T},
                      {"M", n.M},
                      {"S", n.S},
                      {"sampled_channels", N},
                      {"dq_dk_on", every_channel ? "the whole problem" : "the sampled channels' sub-problem"}},
                     "", "estimate: 2u x the first-order running error of the binary64 adjoint");
  }
  return status;
}

}  // namespace kalman_oracle::gpu::tools
