// Element-wise kernels of the native CUDA backend.
#pragma once
#include "kernels/common.cuh"

namespace xkernels::cuda::kernels {

// out(m, n) = load.at(m, n), rounded to T, for a dense row-major [M, N] matrix: writes out a loader's values
// (e.g. the ReLU-masked gradient of kernels/fused_linear_relu.cuh) for a library GEMM to read.
template <typename T, class Load>
__global__ void materialize_kernel(Load load, T* out, int64_t M, int64_t N) {
  const int64_t total = M * N;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += step)
    out[i] = Num<T>::from_acc(load.at(i / N, i % N));
}

}  // namespace xkernels::cuda::kernels
