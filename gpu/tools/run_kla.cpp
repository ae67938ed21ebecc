// gpu/tools/run_kla.hpp.
#include "run_kla.hpp"

#include <vector>

#include "fixture_inputs.hpp"
#include "kalman_oracle/gpu/kla_backward.hpp"
#include "kalman_oracle/gpu/kla_forward.hpp"
#include "kalman_oracle/gpu/twin/kla_backward_twin.hpp"
#include "kalman_oracle/gpu/twin/kla_forward_twin.hpp"

namespace kalman_oracle::gpu::tools {

safetensors::file run_kla(const safetensors::file& f, const std::string& source, executor on) {
  // B, T, S from k; M from v (models/kla.hpp's rules; the fixture was generated under them).
  const safetensors::tensor_entry& k = f.at("k", source);
  const safetensors::tensor_entry& v = f.at("v", source);
  if (k.shape.size() != 3 || v.shape.size() != 3)
    throw input_error(source + ": k and v must have rank 3 ([B, T, S] and [B, T, M])");
  const long long B = static_cast<long long>(k.shape[0]), T = static_cast<long long>(k.shape[1]),
                  S = static_cast<long long>(k.shape[2]), M = static_cast<long long>(v.shape[2]);
  kla_forward_problem p;
  p.batch = static_cast<int>(B);
  p.tokens = static_cast<int>(T);
  p.channels = static_cast<int>(M);
  p.state = static_cast<int>(S);
  p.dtype = common_input_dtype(f, {"q", "k", "v", "Lambda", "a_bar", "p_bar", "lambda_0", "eta_0"}, source);
  p.q = broadcast_to(f.at("q", source), {B, T, S}, source);
  p.k = broadcast_to(k, {B, T, S}, source);
  p.v = broadcast_to(v, {B, T, M}, source);
  p.Lambda = broadcast_to(f.at("Lambda", source), {B, T, M}, source);
  p.a_bar = broadcast_to(f.at("a_bar", source), {B, T, M, S}, source);
  p.p_bar = broadcast_to(f.at("p_bar", source), {B, T, M, S}, source);
  if (const auto* x = f.find("lambda_0")) p.lambda_0 = broadcast_to(*x, {B, M, S}, source);
  if (const auto* x = f.find("eta_0")) p.eta_0 = broadcast_to(*x, {B, M, S}, source);
  std::vector<float> y(B * T * M), y_var(B * T * M), final_lambda(B * M * S), final_eta(B * M * S);
  p.y = y.data();
  p.y_var = y_var.data();
  p.final_lambda = final_lambda.data();
  p.final_eta = final_eta.data();
  // Where the fixture has cotangents the forward runs in training mode: its checkpoints go to the
  // backward, as they would in a training step.
  const bool training = f.find("dy") != nullptr;
  std::vector<float> checkpoint_lambda(training ? kla_checkpoint_count(p) : 0),
      checkpoint_eta(checkpoint_lambda.size());
  if (training) {
    p.checkpoint_lambda = checkpoint_lambda.data();
    p.checkpoint_eta = checkpoint_eta.data();
  }
  if (on == executor::twin) {
    kla_forward_twin(p);
  } else {
#if defined(KALMAN_ORACLE_GPU_HAVE_CUDA)
    kla_forward_host(p);
#else
    throw input_error("--device cuda: this build has no CUDA kernels (no CUDA compiler was found); use --device twin");
#endif
  }

  const auto u = [](long long x) { return static_cast<std::size_t>(x); };
  safetensors::file out;
  out.tensors.push_back(safetensors::make_f32("y", {u(B), u(T), u(M)}, y));
  out.tensors.push_back(safetensors::make_f32("y_var", {u(B), u(T), u(M)}, y_var));
  out.tensors.push_back(safetensors::make_f32("final_lambda", {u(B), u(M), u(S)}, final_lambda));
  out.tensors.push_back(safetensors::make_f32("final_eta", {u(B), u(M), u(S)}, final_eta));
  if (!training) return out;  // a forward-only fixture

  // The gradients, for the fixture's cotangents (binary32 in a fixture; absent ones are zero).
  const auto cotangent = [&](const char* name, std::vector<float>& to) { return fixture_cotangent(f, name, to); };
  std::vector<float> dy, dy_var, dfinal_lambda, dfinal_eta;
  kla_backward_problem g;
  g.forward = p;
  g.forward.checkpoint_lambda = g.forward.checkpoint_eta = nullptr;
  g.checkpoint_lambda = checkpoint_lambda.data();
  g.checkpoint_eta = checkpoint_eta.data();
  g.dy = cotangent("dy", dy);
  g.dy_var = cotangent("dy_var", dy_var);
  g.dfinal_lambda = cotangent("dfinal_lambda", dfinal_lambda);
  g.dfinal_eta = cotangent("dfinal_eta", dfinal_eta);
  kla_gradient_buffers buffers(p);
  buffers.point(g);
  if (on == executor::twin) {
    kla_backward_twin(g);
  } else {
#if defined(KALMAN_ORACLE_GPU_HAVE_CUDA)
    kla_backward_host(g);
#endif
  }
  // Each gradient under the fixture's name and shape (the input's own shape: dā [M, S] when ā is).
  add_fixture_gradients(out, f, source,
                        {{"dq", &buffers.dq},
                         {"dk", &buffers.dk},
                         {"dv", &buffers.dv},
                         {"dLambda", &buffers.dLambda},
                         {"da_bar", &buffers.da_bar},
                         {"dp_bar", &buffers.dp_bar},
                         {"dlambda_0", &buffers.dlambda_0},
                         {"deta_0", &buffers.deta_0}});
  return out;
}

}  // namespace kalman_oracle::gpu::tools
