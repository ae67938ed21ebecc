// Benchmark of the KLA kernels (docs/kernels.md, "Measured"): per problem one JSON line for the
// fused forward and one for forward + backward (every gradient, all cotangents given), each with
// its time, its effective bandwidth (every input and cotangent read once, every output and gradient
// written once, over the time), its ratio to a device-to-device copy moving the same bytes in the
// same run, and element-steps per nanosecond (B·T·M·S / time). fp32 inputs, ā and p̄ static [M, S]
// as in the model, priors given.
#include <cuda_runtime.h>

#include <cstdio>
#include <vector>

#include "benches.hpp"
#include "device_data.hpp"
#include "kalman_oracle/gpu/kla_backward.hpp"
#include "kalman_oracle/gpu/kla_forward.hpp"

namespace kalman_oracle::gpu::bench {

namespace {

struct kla_problem {
  const char* name;
  int B, T, M, S;
};

}  // namespace

void kla_bench(int repeats, const cudaDeviceProp& prop) {
  // The production shape (B = 8, T = 4096, M = 2048, S = 16) and a sweep over T; S = 64 and
  // 256 with the same number of elements.
  const kla_problem problems[] = {{"kla_B8_T4096_M2048_S16", 8, 4096, 2048, 16},
                                  {"kla_B8_T1024_M2048_S16", 8, 1024, 2048, 16},
                                  {"kla_B8_T256_M2048_S16", 8, 256, 2048, 16},
                                  {"kla_B8_T4096_M512_S64", 8, 4096, 512, 64},
                                  {"kla_B8_T4096_M128_S256", 8, 4096, 128, 256}};
  for (const kla_problem& k : problems) {
    const std::size_t B = k.B, T = k.T, M = k.M, S = k.S;
    float* q = device_filled(B * T * S, 1, -1.0f, 1.0f);
    float* key = device_filled(B * T * S, 2, -1.0f, 1.0f);
    float* v = device_filled(B * T * M, 3, -1.0f, 1.0f);
    float* Lambda = device_filled(B * T * M, 4, 0.1f, 10.0f);
    float* a_bar = device_filled(M * S, 5, 0.5f, 1.0f);
    float* p_bar = device_filled(M * S, 6, 1e-4f, 0.1f);
    float* lambda_0 = device_filled(B * M * S, 7, 0.1f, 10.0f);
    float* eta_0 = device_filled(B * M * S, 8, -1.0f, 1.0f);
    float *y = nullptr, *y_var = nullptr, *final_lambda = nullptr, *final_eta = nullptr;
    check(cudaMalloc(&y, B * T * M * sizeof(float)), "cudaMalloc");
    check(cudaMalloc(&y_var, B * T * M * sizeof(float)), "cudaMalloc");
    check(cudaMalloc(&final_lambda, B * M * S * sizeof(float)), "cudaMalloc");
    check(cudaMalloc(&final_eta, B * M * S * sizeof(float)), "cudaMalloc");
    kla_forward_problem p;
    p.batch = k.B;
    p.tokens = k.T;
    p.channels = k.M;
    p.state = k.S;
    p.q = strided_view(q, T * S, S, 1);
    p.k = strided_view(key, T * S, S, 1);
    p.v = strided_view(v, T * M, M, 1);
    p.Lambda = strided_view(Lambda, T * M, M, 1);
    p.a_bar = strided_view(a_bar, 0, 0, S, 1);
    p.p_bar = strided_view(p_bar, 0, 0, S, 1);
    p.lambda_0 = strided_view(lambda_0, M * S, S, 1);
    p.eta_0 = strided_view(eta_0, M * S, S, 1);
    p.y = y;
    p.y_var = y_var;
    p.final_lambda = final_lambda;
    p.final_eta = final_eta;

    const std::size_t forward_bytes =
        sizeof(float) * (2 * B * T * S + 2 * B * T * M + 2 * M * S + 2 * B * M * S  // read
                         + 2 * B * T * M + 2 * B * M * S);                          // written
    // Forward + backward (a training step: the forward writes checkpoints every 16 tokens, the
    // backward reads them): the forward's bytes, the cotangents (2 [B, T, M], 2 [B, M, S]) and the
    // gradients (2 [B, T, S], 2 [B, T, M], 2 [M, S], 2 [B, M, S]); the backward reads the inputs too.
    // (The checkpoints' traffic, 2 [B, T/16, M, S] written and read, is not counted.)
    const std::size_t both_bytes =
        forward_bytes + sizeof(float) * (2 * B * T * S + 2 * B * T * M + 2 * M * S + 2 * B * M * S      // inputs again
                                         + 2 * B * T * M + 2 * B * M * S                                // cotangents
                                         + 2 * B * T * S + 2 * B * T * M + 2 * M * S + 2 * B * M * S);  // gradients
    float* dy = device_filled(B * T * M, 9, -1.0f, 1.0f);
    float* dy_var = device_filled(B * T * M, 10, -1.0f, 1.0f);
    float* dfinal_lambda = device_filled(B * M * S, 11, -1.0f, 1.0f);
    float* dfinal_eta = device_filled(B * M * S, 12, -1.0f, 1.0f);
    kla_backward_problem g;
    g.forward = p;
    g.dy = dy;
    g.dy_var = dy_var;
    g.dfinal_lambda = dfinal_lambda;
    g.dfinal_eta = dfinal_eta;
    std::vector<void*> gradients;
    for (auto [to, count] : {std::pair{&g.dq, B * T * S}, std::pair{&g.dk, B * T * S}, std::pair{&g.dv, B * T * M},
                             std::pair{&g.dLambda, B * T * M}, std::pair{&g.da_bar, M * S}, std::pair{&g.dp_bar, M * S},
                             std::pair{&g.dlambda_0, B * M * S}, std::pair{&g.deta_0, B * M * S}}) {
      check(cudaMalloc(to, count * sizeof(float)), "cudaMalloc");
      gradients.push_back(*to);
    }
    void* scratch = nullptr;
    check(cudaMalloc(&scratch, kla_backward_scratch_bytes(g)), "cudaMalloc");
    // Training: the forward writes its checkpoints, the backward reads them.
    kla_forward_problem training = p;
    const std::size_t checkpoints = static_cast<std::size_t>(kla_checkpoint_count(p));
    check(cudaMalloc(&training.checkpoint_lambda, checkpoints * sizeof(float)), "cudaMalloc");
    check(cudaMalloc(&training.checkpoint_eta, checkpoints * sizeof(float)), "cudaMalloc");
    g.checkpoint_lambda = training.checkpoint_lambda;
    g.checkpoint_eta = training.checkpoint_eta;

    const double element_steps = static_cast<double>(B * T * M * S);
    const auto report = [&](const char* pass, std::size_t bytes, double ms, double copy_ms) {
      std::printf(
          "{\"device\": \"%s\", \"kernel\": \"kla_%s\", \"problem\": \"%s\", \"B\": %d, \"T\": %d, \"M\": %d, "
          "\"S\": %d, \"dtype\": \"f32\", \"ms\": %.4f, \"copy_ms\": %.4f, \"ratio_to_copy\": %.3f, "
          "\"GB_per_s\": %.1f, \"copy_GB_per_s\": %.1f, \"element_steps_per_ns\": %.2f}\n",
          prop.name, pass, k.name, k.B, k.T, k.M, k.S, ms, copy_ms, ms / copy_ms, static_cast<double>(bytes) / 1e6 / ms,
          static_cast<double>(bytes) / 1e6 / copy_ms, element_steps / (ms * 1e6));
      std::fflush(stdout);
    };
    const auto copy_ms_for = [&](std::size_t bytes) { return copy_ms(bytes, repeats); };
    const double forward_ms = median_ms(repeats, [&] { kla_forward_device(p); });
    check(cudaGetLastError(), "kla_forward_kernel");
    report("forward", forward_bytes, forward_ms, copy_ms_for(forward_bytes));
    const double both_ms = median_ms(repeats, [&] {
      kla_forward_device(training);
      kla_backward_device(g, scratch);
    });
    check(cudaGetLastError(), "kla_backward kernels");
    report("forward_backward", both_bytes, both_ms, copy_ms_for(both_bytes));
    for (void* ptr : gradients) cudaFree(ptr);
    for (void* ptr : {static_cast<void*>(dy), static_cast<void*>(dy_var), static_cast<void*>(dfinal_lambda),
                      static_cast<void*>(dfinal_eta), scratch, static_cast<void*>(training.checkpoint_lambda),
                      static_cast<void*>(training.checkpoint_eta)})
      cudaFree(ptr);
    for (void* ptr : {static_cast<void*>(q), static_cast<void*>(key), static_cast<void*>(v), static_cast<void*>(Lambda),
                      static_cast<void*>(a_bar), static_cast<void*>(p_bar), static_cast<void*>(lambda_0),
                      static_cast<void*>(eta_0), static_cast<void*>(y), static_cast<void*>(y_var),
                      static_cast<void*>(final_lambda), static_cast<void*>(final_eta)})
      cudaFree(ptr);
  }
}

}  // namespace kalman_oracle::gpu::bench
