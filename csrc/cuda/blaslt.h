// Tensor-core GEMMs through cuBLASLt (the library torch's CUDA build already loads), with the bias and
// ReLU epilogues fused into the GEMM: the default GEMM of the native CUDA backend where the build found
// cuBLASLt (CMake: "cuBLASLt" in the configuration summary). The own kernels of kernels/gemm.cuh stay
// the fallback (no cuBLASLt in the build, no algorithm for a problem, XKERNELS_CUDA_GEMM=native).
//
// Floating point, as every backend (README "Floating-point semantics"): float16/bfloat16 and float32
// accumulate in float32 (CUBLAS_COMPUTE_32F: no TF32, whatever torch.backends.cuda.matmul says), float64
// in float64. Host code only.
#pragma once
#include <ATen/core/Tensor.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace xkernels::cuda::blaslt {

// D = epilogue(op(A) @ op(B)) in cuBLAS's column-major terms: op(A) is m x k, op(B) is k x n, D is m x n
// with leading dimension ldd; A is stored (trans_a ? k x m : m x k) with leading dimension lda, B likewise.
// bias (optional, length m) is added to every column; relu keeps NaN only if cuBLASLt's does (checked by
// tests/test_hostile.py on a GPU).
struct Gemm {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  const void* a = nullptr;
  int64_t lda = 0;
  const void* b = nullptr;
  int64_t ldb = 0;
  void* d = nullptr;
  int64_t ldd = 0;
  const void* bias = nullptr;
  bool relu = false;
};

// Whether this build has cuBLASLt and the GEMM provider setting allows it (XKERNELS_CUDA_GEMM=auto, the
// default, or cublaslt; native turns it off). Read once per process.
bool enabled();

// Runs `g` for element type `dtype` on `stream`; false when cuBLASLt has no algorithm for it (the caller
// then runs its own kernel). Errors of the library raise, naming `op`.
bool gemm(const char* op, at::ScalarType dtype, const Gemm& g, cudaStream_t stream);

}  // namespace xkernels::cuda::blaslt
