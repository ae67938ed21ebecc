// The KDN gain backward's twin against the reference adjoint (label `twin`; docs/kernels.md, "KDN
// gain backward"). The fixtures' KDN gradients include the memory's adjoint, which no kernel here
// computes yet, so the twin is checked against the reference run on the spot: grad/diagonal.hpp and
// grad/isotropic.hpp in binary64 with cotangents on the gain path's outputs only (κ or β, p̂ or b̂,
// the readout variance, the final covariance; the memory's adjoint is then zero), and per element
// the fixtures' gradient budget (docs/error-model.md, "Gradients: first-order running error"):
// 2 u × the first-order running error bound of the reference's own adjoint (the same template run
// over running_error<double>), u = 2^-24, plus the binary64 reference's own (u = 2^-53). An
// estimate, as the fixtures' gradient budgets are. Shapes: both forms, T at the 64-token chunk
// edges ± 1 and over several chunks, K below and above a warp, grouped value heads, given and
// default μ and priors, some cotangents absent. A planted bug (the gate's gradient taking p_t for
// p_{t−1}) must fail it (meta-test in gpu/CMakeLists.txt).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "gradient_budget.hpp"
#include "kalman_oracle/gpu/twin/kdn_gain_backward_twin.hpp"
#include "kalman_oracle/grad/diagonal.hpp"
#include "kalman_oracle/grad/isotropic.hpp"
#include "kalman_oracle/scalar/running_error.hpp"

using namespace kalman_oracle;
using namespace kalman_oracle::gpu;
using namespace kalman_oracle::gpu::testing;

namespace {

struct backward_case {
  kdn_form form;
  int B, T, H, group, K;
  bool given;      ///< μ and the prior covariance given
  int cotangents;  ///< bit i: cotangent i of (gain, prediction, readout, final) given
};

/// The float32 problem: inputs [B, T, H, K] (k, q), [B, T, HV, ...] (the rest), and cotangents.
struct drawn {
  std::vector<float> k, q, g, omega, r, mu, prior;
  std::vector<float> d_gain, d_predicted, d_readout, d_final;
};

drawn draw(const backward_case& c, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f), gate(-1.0f, 0.0f), log_omega(-4.0f, -1.0f),
      log_r(-2.0f, 1.0f), log_prior(-1.0f, 1.0f);
  const std::size_t B = c.B, T = c.T, H = c.H, HV = c.H * c.group, K = c.K, L = c.form == kdn_form::diagonal ? K : 1;
  drawn x;
  const auto fill = [&](std::vector<float>& v, std::size_t n, auto draw_one) {
    for (std::size_t i = 0; i < n; ++i) v.push_back(draw_one());
  };
  fill(x.k, B * T * H * K, [&] { return unit(rng); });
  fill(x.q, B * T * H * K, [&] { return unit(rng); });
  fill(x.g, B * T * HV * K, [&] { return gate(rng); });
  fill(x.omega, B * T * HV * L, [&] { return std::pow(10.0f, log_omega(rng)); });
  fill(x.r, B * T * HV, [&] { return std::pow(10.0f, log_r(rng)); });
  if (c.given) {
    fill(x.mu, HV, [&] { return static_cast<float>(K) * (0.5f + 0.5f * (unit(rng) + 1)); });
    fill(x.prior, B * HV * L, [&] { return std::pow(10.0f, log_prior(rng)); });
  }
  if (c.cotangents & 1) fill(x.d_gain, B * T * HV * L, [&] { return unit(rng); });
  if (c.cotangents & 2) fill(x.d_predicted, B * T * HV * L, [&] { return unit(rng); });
  if (c.cotangents & 4) fill(x.d_readout, B * T * HV, [&] { return unit(rng); });
  if (c.cotangents & 8) fill(x.d_final, B * HV * L, [&] { return unit(rng); });
  return x;
}

/// x as a tensor<S> of `shape`; with group > 1 (k and q, given per key head), each of the shape's
/// value heads reads its key head.
template <class S>
tensor<S> as_tensor(const char* name, const std::vector<float>& x, shape_t shape, int group = 1) {
  tensor<S> out(name, shape);
  if (group == 1) {
    for (std::size_t i = 0; i < x.size(); ++i) out.data()[i] = S(static_cast<double>(x[i]));
    return out;
  }
  const std::size_t HV = shape[2], K = shape[3], rows = shape[0] * shape[1];
  for (std::size_t row = 0; row < rows; ++row)
    for (std::size_t h = 0; h < HV; ++h)
      for (std::size_t i = 0; i < K; ++i)
        out.data()[(row * HV + h) * K + i] = S(static_cast<double>(x[(row * (HV / group) + h / group) * K + i]));
  return out;
}

/// The reference's gradients over S for the drawn problem (one key head per value head: k and q
/// repeated; their gradients are summed over the group by the caller).
template <class S>
gradients<S> reference_gradients(const backward_case& c, const drawn& x, float tau) {
  const std::size_t B = c.B, T = c.T, HV = c.H * c.group, K = c.K;
  const bool diagonal = c.form == kdn_form::diagonal;
  const shape_t per_token = diagonal ? shape_t{B, T, HV, K} : shape_t{B, T, HV};
  const shape_t finals = diagonal ? shape_t{B, HV, K} : shape_t{B, HV};
  cotangents<S> cot;
  if (!x.d_gain.empty()) cot.set(as_tensor<S>(diagonal ? "gain" : "beta", x.d_gain, per_token));
  if (!x.d_predicted.empty()) cot.set(as_tensor<S>("predicted_covariance", x.d_predicted, per_token));
  if (!x.d_readout.empty()) cot.set(as_tensor<S>("readout_variance", x.d_readout, {B, T, HV}));
  if (!x.d_final.empty()) cot.set(as_tensor<S>("final_covariance", x.d_final, finals));
  const auto fill_common = [&](auto& in) {
    in.q = as_tensor<S>("q", x.q, {B, T, HV, K}, c.group);
    in.k = as_tensor<S>("k", x.k, {B, T, HV, K}, c.group);
    in.v = tensor<S>("v", {B, T, HV, 1});
    in.g = as_tensor<S>("g", x.g, {B, T, HV, K});
    in.omega = as_tensor<S>("omega", x.omega, per_token);
    in.r = as_tensor<S>("r", x.r, {B, T, HV});
    if (c.given) {
      in.mu = as_tensor<S>("mu", x.mu, {HV});
      in.initial_covariance = as_tensor<S>("initial_covariance", x.prior, finals);
    }
    in.scale = S(static_cast<double>(tau));
  };
  if (diagonal) {
    diagonal_kdn_inputs<S> in;
    fill_common(in);
    return diagonal_kdn_backward(in, cot);
  }
  isotropic_kdn_inputs<S> in;
  fill_common(in);
  return isotropic_kdn_backward(in, cot);
}

}  // namespace

TEST_SUITE("twin") {
  TEST_CASE("twin: KDN gain backward within the gradient budget of the reference adjoint") {
    unsigned seed = 11;
    double overall = 0;
    for (kdn_form form : {kdn_form::diagonal, kdn_form::isotropic})
      for (const backward_case& c : std::vector<backward_case>{{form, 1, 0, 1, 1, 5, true, 15},
                                                               {form, 2, 1, 1, 1, 7, false, 15},
                                                               {form, 1, 63, 1, 2, 33, true, 15},
                                                               {form, 2, 64, 2, 1, 16, true, 5},
                                                               {form, 1, 65, 1, 1, 1, false, 10},
                                                               {form, 1, 200, 1, 1, 64, true, 15},
                                                               {form, 1, 129, 2, 2, 8, false, 3}}) {
        const std::size_t B = c.B, T = c.T, H = c.H, HV = c.H * c.group, K = c.K;
        const bool diagonal = form == kdn_form::diagonal;
        const std::size_t L = diagonal ? K : 1;
        CAPTURE(diagonal);
        CAPTURE(c.B);
        CAPTURE(c.T);
        CAPTURE(c.H);
        CAPTURE(c.group);
        CAPTURE(c.K);
        CAPTURE(c.given);
        CAPTURE(c.cotangents);
        const drawn x = draw(c, seed++);
        kdn_gain_backward_problem bp;
        kdn_gain_problem& p = bp.forward;
        p.form = form;
        p.batch = c.B;
        p.tokens = c.T;
        p.heads = static_cast<int>(HV);
        p.key_dim = c.K;
        p.key_head_group = c.group;
        p.tau = static_cast<float>(std::pow(static_cast<double>(K), -0.5));
        const long long t = c.T, hk = c.H, hv = static_cast<long long>(HV), k = c.K;
        p.k = strided_view(x.k.data(), t * hk * k, hk * k, k, 1);
        p.q = strided_view(x.q.data(), t * hk * k, hk * k, k, 1);
        p.g = strided_view(x.g.data(), t * hv * k, hv * k, k, 1);
        p.omega = diagonal ? strided_view(x.omega.data(), t * hv * k, hv * k, k, 1)
                           : strided_view(x.omega.data(), t * hv, hv, 1);
        p.r = strided_view(x.r.data(), t * hv, hv, 1);
        if (c.given) {
          p.mu = strided_view(x.mu.data(), 1, 0, 0);
          p.initial_covariance =
              diagonal ? strided_view(x.prior.data(), hv * k, k, 1) : strided_view(x.prior.data(), hv, 1, 0);
        }
        const auto or_null = [](const std::vector<float>& v) { return v.empty() ? nullptr : v.data(); };
        bp.d_gain = or_null(x.d_gain);
        bp.d_predicted_covariance = or_null(x.d_predicted);
        bp.d_readout_variance = or_null(x.d_readout);
        bp.d_final_covariance = or_null(x.d_final);
        std::vector<float> dq(B * T * H * K), dk(dq.size()), dg(B * T * HV * K), domega(B * T * HV * L), dr(B * T * HV),
            dmu(HV), dprior(B * HV * L), dtau(1);
        bp.dq = dq.data(), bp.dk = dk.data(), bp.dg = dg.data(), bp.domega = domega.data(), bp.dr = dr.data();
        bp.dmu = dmu.data(), bp.dinitial_covariance = dprior.data(), bp.dtau = dtau.data();
        kdn_gain_backward_twin(bp);
        if (T == 0) {  // the reference takes no empty sequence: the prior's gradient is the final's cotangent
          CHECK(dprior == x.d_final);
          CHECK(dmu == std::vector<float>(HV, 0.0f));
          CHECK(dtau[0] == 0.0f);
          continue;
        }

        const gradients<double> ref = reference_gradients<double>(c, x, p.tau);
        const gradients<running_error<double>> err = reference_gradients<running_error<double>>(c, x, p.tau);
        worst_ratio worst;
        const auto compare = [&](const char* name, const std::vector<float>& twin, const char* ref_name) {
          REQUIRE_MESSAGE(ref.at(ref_name).size() == twin.size(), name);
          add_elements(worst, name, twin, ref.at(ref_name), err.at(ref_name));
        };
        // dq, dk: the reference's per value head, summed over a key head's group (in binary64 and in
        // the bounds: the sum's own rounding is far below them).
        const auto key_head_sum = [&](const char* ref_name, const std::vector<float>& twin, const char* name) {
          add_key_head_sums(worst, name, twin, ref.at(ref_name), err.at(ref_name), B * T, H, c.group, K);
        };
        key_head_sum("q", dq, "dq");
        key_head_sum("k", dk, "dk");
        compare("dg", dg, "g");
        compare("domega", domega, "omega");
        compare("dr", dr, "r");
        compare("dmu", dmu, "mu");
        compare("dinitial_covariance", dprior, "initial_covariance");
        compare("dtau", dtau, "scale");
        INFO(worst.where);
        CHECK(worst.ratio <= 1.0);
        overall = std::max(overall, worst.ratio);
      }
    MESSAGE("KDN gain backward twin: worst share of the gradient budget " << overall);
  }
}
