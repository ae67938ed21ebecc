// On the GPU (label `gpu`): the KLA backward kernels equal their CPU twin bit for bit on the random
// problems of kla_cases.hpp (every gradient, cotangents in [-1, 1]), with the gradients poisoned with
// NaN first, and give the same bits when run again. The fixtures are checked through `conform`.
// Without a CUDA device: "SKIP: <why>".
#include <doctest/doctest.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "kalman_oracle/gpu/kla_backward.hpp"
#include "kalman_oracle/gpu/twin/kla_backward_twin.hpp"
#include "kla_cases.hpp"
#include "skip_without_device.hpp"

using namespace kalman_oracle::gpu;
using namespace kalman_oracle::gpu::testing;

TEST_CASE("gpu: the KLA backward kernels equal their twin bit for bit, with and without the forward's checkpoints") {
  if (skip_without_device()) return;
  for_each_kla_case(100, [](const kla_case& c, kla_case_data& d, std::uint32_t cotangent_seed) {
    const kla_cotangents cot = make_cotangents(c, cotangent_seed);
    kla_backward_problem problem;
    problem.forward = d.problem;
    problem.dy = cot.dy.data();
    problem.dy_var = cot.dy_var.data();
    problem.dfinal_lambda = cot.dfinal_lambda.data();
    problem.dfinal_eta = cot.dfinal_eta.data();
    kla_gradient_buffers twin(problem.forward);
    kla_backward_problem on_host = problem;
    twin.point(on_host);
    kla_backward_twin(on_host);
    // The kernel's checkpoints (the forward kernel in training mode, checked against the twin's by
    // the forward test): run 0 recomputes them (pass 1), run 1 is given them.
    const std::size_t checkpoints = static_cast<std::size_t>(kla_checkpoint_count(d.problem));
    std::vector<float> checkpoint_lambda(checkpoints), checkpoint_eta(checkpoints);
    {
      kla_forward_problem forward = d.problem;
      point_outputs(forward, d.y, d.y_var, d.final_lambda, d.final_eta);
      forward.checkpoint_lambda = checkpoint_lambda.data();
      forward.checkpoint_eta = checkpoint_eta.data();
      kla_forward_host(forward);
    }
    for (int run = 0; run < 2; ++run) {
      CAPTURE(run);
      kla_gradient_buffers kernel(problem.forward);
      kla_backward_problem on_device = problem;
      kernel.point(on_device);
      if (run == 1) {
        on_device.checkpoint_lambda = checkpoint_lambda.data();
        on_device.checkpoint_eta = checkpoint_eta.data();
      }
      kla_backward_host(on_device);
      CHECK(first_difference("dq", kernel.dq, twin.dq) == "");
      CHECK(first_difference("dk", kernel.dk, twin.dk) == "");
      CHECK(first_difference("dv", kernel.dv, twin.dv) == "");
      CHECK(first_difference("dLambda", kernel.dLambda, twin.dLambda) == "");
      CHECK(first_difference("da_bar", kernel.da_bar, twin.da_bar) == "");
      CHECK(first_difference("dp_bar", kernel.dp_bar, twin.dp_bar) == "");
      CHECK(first_difference("dlambda_0", kernel.dlambda_0, twin.dlambda_0) == "");
      CHECK(first_difference("deta_0", kernel.deta_0, twin.deta_0) == "");
    }
  });
}
