// A bfloat16 matrix product by cuBLAS, measured in the same run as the kernels it is a baseline for
// (docs/kernels.md, "Measured"): the tensor cores' rate on the shape they like best, beside the
// chunked kernels' FLOP rate. cuBLAS is opened at run time (dlopen), so gpu_bench needs no cuBLAS to
// build or to run: without it the baseline is reported missing, with the reason.
#pragma once

#include <cublas_api.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <string>

#include "timing.hpp"

namespace kalman_oracle::gpu::bench {

struct matmul_baseline {
  double tflops = 0;    ///< 0 when not measured
  std::string missing;  ///< why not, when not measured
};

/// C = A B with A, B bfloat16 (n x n, column-major), C binary32, binary32 accumulation
/// (CUBLAS_COMPUTE_32F), by cublasGemmEx; the median of `repeats` runs after warm-up.
inline matmul_baseline bf16_matmul_baseline(int n, int repeats) {
  matmul_baseline result;
  void* library = nullptr;
  for (const char* name : {"libcublas.so.13", "libcublas.so.12", "libcublas.so"})
    if (library == nullptr) library = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    result.missing = "cuBLAS not found (dlopen libcublas.so.13, .so.12, .so: add its folder to LD_LIBRARY_PATH)";
    return result;
  }
  using create_fn = cublasStatus_t (*)(cublasHandle_t*);
  using destroy_fn = cublasStatus_t (*)(cublasHandle_t);
  using gemm_fn = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                                     const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                                     cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
  const auto create = reinterpret_cast<create_fn>(dlsym(library, "cublasCreate_v2"));
  const auto destroy = reinterpret_cast<destroy_fn>(dlsym(library, "cublasDestroy_v2"));
  const auto gemm = reinterpret_cast<gemm_fn>(dlsym(library, "cublasGemmEx"));
  cublasHandle_t handle = nullptr;
  if (create == nullptr || destroy == nullptr || gemm == nullptr || create(&handle) != CUBLAS_STATUS_SUCCESS) {
    result.missing = "cuBLAS found but cublasCreate_v2 or cublasGemmEx unavailable";
    dlclose(library);
    return result;
  }
  const std::size_t elements = static_cast<std::size_t>(n) * n;
  void *a = nullptr, *b = nullptr, *c = nullptr;
  check(cudaMalloc(&a, elements * 2), "cudaMalloc");
  check(cudaMalloc(&b, elements * 2), "cudaMalloc");
  check(cudaMalloc(&c, elements * 4), "cudaMalloc");
  check(cudaMemset(a, 0x3f, elements * 2), "cudaMemset");  // bfloat16 0x3f3f, about 0.75
  check(cudaMemset(b, 0x3f, elements * 2), "cudaMemset");
  const float one = 1.0f, zero = 0.0f;
  cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
  const double ms = median_ms(repeats, [&] {
    status = gemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a, CUDA_R_16BF, n, b, CUDA_R_16BF, n, &zero, c,
                  CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  });
  if (status == CUBLAS_STATUS_SUCCESS)
    result.tflops = 2.0 * n * static_cast<double>(n) * n / ms / 1e9;
  else
    result.missing = "cublasGemmEx failed (status " + std::to_string(static_cast<int>(status)) + ")";
  for (void* ptr : {a, b, c}) cudaFree(ptr);
  destroy(handle);
  dlclose(library);
  return result;
}

}  // namespace kalman_oracle::gpu::bench
