// Device-side vocabulary shared by the native CUDA kernels: element/accumulation
// types, exact conversions, explicit multiply-add, warp reductions.
// Device code only: no torch headers (the host wrappers map c10::Half / c10::BFloat16
// to __half / __nv_bfloat16, which have the same bit layout).
//
// Floating point: the build passes --fmad=false -prec-div=true -prec-sqrt=true -ftz=false,
// so a*b+c is two roundings: the product is rounded before it is added (mul_add below).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace xkernels::cuda::kernels {

// Element type T -> accumulation type and exact conversions.
template <typename T>
struct Num {
  using acc = float;
  __host__ __device__ static acc to_acc(T v) { return static_cast<acc>(v); }
  __host__ __device__ static T from_acc(acc v) { return static_cast<T>(v); }
};
template <>
struct Num<double> {
  using acc = double;
  __host__ __device__ static acc to_acc(double v) { return v; }
  __host__ __device__ static double from_acc(acc v) { return v; }
};
template <>
struct Num<__half> {
  using acc = float;
  __host__ __device__ static acc to_acc(__half v) { return __half2float(v); }
  __host__ __device__ static __half from_acc(acc v) { return __float2half_rn(v); }
};
template <>
struct Num<__nv_bfloat16> {
  using acc = float;
  __host__ __device__ static acc to_acc(__nv_bfloat16 v) { return __bfloat162float(v); }
  __host__ __device__ static __nv_bfloat16 from_acc(acc v) { return __float2bfloat16_rn(v); }
};
template <typename T>
using acc_t = typename Num<T>::acc;

// One term of the GEMM inner products: a*b + c with the product rounded first, as the reference
// kernels (csrc/cpu) and PyTorch's CPU kernels compute it. Not fused on purpose: a product that
// overflows must become +-Inf before it is added, so that terms overflowing to +Inf and -Inf give
// NaN as in PyTorch; fma(a, b, +Inf) with a finite exact product -1e400 stays +Inf.
__host__ __device__ __forceinline__ float mul_add(float a, float b, float c) {
  const float p = a * b;
  return p + c;
}
__host__ __device__ __forceinline__ double mul_add(double a, double b, double c) {
  const double p = a * b;
  return p + c;
}

// relu that keeps NaN (like torch.relu).
template <typename Acc>
__host__ __device__ __forceinline__ Acc relu_keep_nan(Acc v) {
  return (v > Acc(0) || v != v) ? v : Acc(0);
}

__host__ __device__ __forceinline__ int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Butterfly sum over the 32 lanes of a warp: every lane gets the same, order-fixed result.
template <typename Acc>
__device__ __forceinline__ Acc warp_sum(Acc v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

}  // namespace xkernels::cuda::kernels
