// Benchmark of the KDN gain kernels (docs/kernels.md, "Measured"): at the shape B = 2,
// T = 16384, H = 16, K = 128 (and T = 4096), both forms, binary32 and bfloat16 inputs, one JSON line
// each: the time of the three launches (map, carry, emit), the effective bandwidth (every input read
// once, every output written once, over the time; the diagonal map pass reads g, ω, k and r a second
// time and the isotropic passes write and read 16 bytes a token and head of scratch, neither counted),
// its ratio to a device-to-device copy of the same bytes in the same run, and token-heads per
// nanosecond. Then the backward (kdn_gain_backward.hpp) on the same problem with p̂
// given (as a training step has it from the forward) and cotangents of the gain, the readout variance
// and the final covariance: its time, its ratio to the forward's, its effective bandwidth (p̂, the
// cotangents, k, q, g and r read once, the gradients written once) and that against a copy.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "benches.hpp"
#include "device_data.hpp"
#include "kalman_oracle/gpu/kdn_gain.hpp"
#include "kalman_oracle/gpu/kdn_gain_backward.hpp"

namespace kalman_oracle::gpu::bench {

void kdn_gain_bench(int repeats, const cudaDeviceProp& prop) {
  for (const int T : {16384, 4096})
    for (const kdn_form form : {kdn_form::diagonal, kdn_form::isotropic})
      for (const input_dtype dtype : {input_dtype::f32, input_dtype::bf16}) {
        const std::size_t B = 2, H = 16, K = 128, t = static_cast<std::size_t>(T);
        const bool diagonal = form == kdn_form::diagonal;
        const std::size_t L = diagonal ? K : 1, in_bytes = dtype == input_dtype::f32 ? 4 : 2;
        void* k = device_inputs(B * t * H * K, 1, -0.1f, 0.1f, dtype);
        void* q = device_inputs(B * t * H * K, 2, -1.0f, 1.0f, dtype);
        void* g = device_inputs(B * t * H * K, 3, -1.0f, 0.0f, dtype);
        void* omega = device_inputs(B * t * H * L, 4, 1e-4f, 0.1f, dtype);
        void* r = device_inputs(B * t * H, 5, 0.01f, 10.0f, dtype);
        float *predicted = nullptr, *gain = nullptr, *readout = nullptr, *final_covariance = nullptr;
        check(cudaMalloc(&predicted, B * t * H * L * 4), "cudaMalloc");
        check(cudaMalloc(&gain, B * t * H * L * 4), "cudaMalloc");
        check(cudaMalloc(&readout, B * t * H * 4), "cudaMalloc");
        check(cudaMalloc(&final_covariance, B * H * L * 4), "cudaMalloc");
        kdn_gain_problem p;
        p.form = form;
        p.batch = static_cast<int>(B);
        p.tokens = T;
        p.heads = static_cast<int>(H);
        p.key_dim = static_cast<int>(K);
        p.dtype = dtype;
        p.tau = static_cast<float>(std::pow(static_cast<double>(K), -0.5));
        const long long tk = static_cast<long long>(t), h = static_cast<long long>(H), kk = static_cast<long long>(K);
        p.k = strided_view(k, tk * h * kk, h * kk, kk, 1);
        p.q = strided_view(q, tk * h * kk, h * kk, kk, 1);
        p.g = strided_view(g, tk * h * kk, h * kk, kk, 1);
        p.omega = diagonal ? strided_view(omega, tk * h * kk, h * kk, kk, 1) : strided_view(omega, tk * h, h, 1);
        p.r = strided_view(r, tk * h, h, 1);
        p.predicted_covariance = predicted;
        p.gain = gain;
        p.readout_variance = readout;
        p.final_covariance = final_covariance;
        void* scratch = nullptr;
        check(cudaMalloc(&scratch, static_cast<std::size_t>(kdn_gain_scratch_bytes(p))), "cudaMalloc");
        const std::size_t bytes = in_bytes * (3 * B * t * H * K + B * t * H * L + B * t * H)  // k, q, g; ω; r
                                  + 4 * (2 * B * t * H * L + B * t * H + B * H * L);          // outputs
        const double ms = median_ms(repeats, [&] { kdn_gain_device(p, scratch); });
        check(cudaGetLastError(), "kdn_gain kernels");
        const double baseline = copy_ms(bytes, repeats);
        std::printf(
            "{\"device\": \"%s\", \"kernel\": \"kdn_gain_%s\", \"problem\": \"kdn_gain_%s_B2_T%d_H16_K128\", "
            "\"B\": 2, \"T\": %d, \"H\": 16, \"K\": 128, \"dtype\": \"%s\", \"ms\": %.4f, \"copy_ms\": %.4f, "
            "\"ratio_to_copy\": %.3f, \"GB_per_s\": %.1f, \"copy_GB_per_s\": %.1f, \"token_heads_per_ns\": %.3f}\n",
            prop.name, diagonal ? "diagonal" : "isotropic", diagonal ? "diagonal" : "isotropic", T, T,
            dtype == input_dtype::f32 ? "f32" : "bf16", ms, baseline, ms / baseline,
            static_cast<double>(bytes) / 1e6 / ms, static_cast<double>(bytes) / 1e6 / baseline,
            static_cast<double>(B * t * H) / (ms * 1e6));
        std::fflush(stdout);

        // The backward.
        kdn_gain_backward_problem bp;
        bp.forward = p;
        bp.predicted_covariance = predicted;
        bp.d_gain = static_cast<const float*>(device_inputs(B * t * H * L, 6, -1.0f, 1.0f, input_dtype::f32));
        bp.d_readout_variance = static_cast<const float*>(device_inputs(B * t * H, 7, -1.0f, 1.0f, input_dtype::f32));
        bp.d_final_covariance = static_cast<const float*>(device_inputs(B * H * L, 8, -1.0f, 1.0f, input_dtype::f32));
        std::vector<void*> gradients;
        for (const std::size_t n :
             {B * t * H * K, B * t * H * K, B * t * H * K, B * t * H * L, B * t * H, H, B * H * L, std::size_t{1}}) {
          void* x = nullptr;
          check(cudaMalloc(&x, n * 4), "cudaMalloc");
          gradients.push_back(x);
        }
        float** outs[] = {&bp.dq, &bp.dk, &bp.dg, &bp.domega, &bp.dr, &bp.dmu, &bp.dinitial_covariance, &bp.dtau};
        for (std::size_t i = 0; i < gradients.size(); ++i) *outs[i] = static_cast<float*>(gradients[i]);
        void* backward_scratch = nullptr;
        check(cudaMalloc(&backward_scratch, static_cast<std::size_t>(kdn_gain_backward_scratch_bytes(bp))),
              "cudaMalloc");
        const std::size_t backward_bytes =
            in_bytes * (3 * B * t * H * K + B * t * H)                                  // k, q, g; r
            + 4 * (2 * B * t * H * L + B * t * H + B * H * L)                           // p̂, dκ; dv; dp_T
            + 4 * (3 * B * t * H * K + B * t * H * L + B * t * H + H + B * H * L + 1);  // gradients
        const double backward_ms = median_ms(repeats, [&] { kdn_gain_backward_device(bp, backward_scratch); });
        check(cudaGetLastError(), "kdn_gain_backward kernels");
        const double backward_baseline = copy_ms(backward_bytes, repeats);
        std::printf(
            "{\"device\": \"%s\", \"kernel\": \"kdn_gain_backward_%s\", "
            "\"problem\": \"kdn_gain_%s_B2_T%d_H16_K128\", \"B\": 2, \"T\": %d, \"H\": 16, \"K\": 128, "
            "\"dtype\": \"%s\", \"ms\": %.4f, \"forward_ms\": %.4f, \"ratio_to_forward\": %.3f, "
            "\"copy_ms\": %.4f, \"ratio_to_copy\": %.3f, \"GB_per_s\": %.1f}\n",
            prop.name, diagonal ? "diagonal" : "isotropic", diagonal ? "diagonal" : "isotropic", T, T,
            dtype == input_dtype::f32 ? "f32" : "bf16", backward_ms, ms, backward_ms / ms, backward_baseline,
            backward_ms / backward_baseline, static_cast<double>(backward_bytes) / 1e6 / backward_ms);
        std::fflush(stdout);
        for (void* x : gradients) cudaFree(x);
        for (const float* x : {bp.d_gain, bp.d_readout_variance, bp.d_final_covariance})
          cudaFree(const_cast<float*>(x));
        cudaFree(backward_scratch);
        for (void* ptr : {k, q, g, omega, r, static_cast<void*>(predicted), static_cast<void*>(gain),
                          static_cast<void*>(readout), static_cast<void*>(final_covariance), scratch})
          cudaFree(ptr);
      }
}

}  // namespace kalman_oracle::gpu::bench
