// Column sums in two deterministic stages, shared by the bias / weight gradients:
//   out(c) = sum_{r in [0, R)} L(r, c)        for c in [0, C)
// Stage 1 sums row chunks (grid y) into partial[chunk, C] (or, with one chunk, straight into
// the epilogue); stage 2 adds the chunks in order. No atomics: results are reproducible.
//
//   struct Load { acc operator()(int64_t r, int64_t c) const; };
//   struct Epi  { void operator()(int64_t c, acc v) const; };
//
// kRowsContiguous picks the thread mapping so global reads coalesce: true when consecutive
// rows of one column are adjacent in memory (NCHW bias grad), false when consecutive
// columns of one row are (row-major matrices, channels_last).
#pragma once
#include "kernels/common.cuh"

namespace xkernels::cuda::kernels {

struct ColumnSumTile {
  // kRowsContiguous: one column per block, 256 threads striding down the rows.
  static constexpr int kRowThreads = 256;
  // otherwise: 32 columns (one per lane, coalesced) x 8 row lanes per block.
  static constexpr int kColLanes = 32, kRowLanes = 8;
};

template <typename Acc, bool kRowsContiguous, class Load, class Epi>
__global__ void column_sum_partial_kernel(Load load, Epi epi, int64_t R, int64_t C, int64_t rows_per_chunk,
                                          Acc* __restrict__ partial) {
  const int64_t chunk = blockIdx.y;
  const int64_t r_begin = chunk * rows_per_chunk;
  const int64_t r_end = r_begin + rows_per_chunk < R ? r_begin + rows_per_chunk : R;
  if constexpr (kRowsContiguous) {
    constexpr int T = ColumnSumTile::kRowThreads;
    __shared__ Acc red[T];
    const int64_t c = blockIdx.x;
    Acc sum = Acc(0);
    for (int64_t r = r_begin + threadIdx.x; r < r_end; r += T) sum += load(r, c);
    red[threadIdx.x] = sum;
    __syncthreads();
    for (unsigned width = T / 2; width > 0; width >>= 1) {  // fixed-shape tree: deterministic
      if (threadIdx.x < width) red[threadIdx.x] += red[threadIdx.x + width];
      __syncthreads();
    }
    if (threadIdx.x == 0) {
      if (partial != nullptr)
        partial[chunk * C + c] = red[0];
      else
        epi(c, red[0]);
    }
  } else {
    constexpr int CL = ColumnSumTile::kColLanes, RL = ColumnSumTile::kRowLanes;
    __shared__ Acc red[RL][CL + 1];
    const int64_t c = static_cast<int64_t>(blockIdx.x) * CL + threadIdx.x;
    Acc sum = Acc(0);
    if (c < C)
      for (int64_t r = r_begin + threadIdx.y; r < r_end; r += RL) sum += load(r, c);
    red[threadIdx.y][threadIdx.x] = sum;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
      Acc total = Acc(0);
#pragma unroll
      for (int i = 0; i < RL; ++i) total += red[i][threadIdx.x];
      if (partial != nullptr)
        partial[chunk * C + c] = total;
      else
        epi(c, total);
    }
  }
}

template <typename Acc, class Epi>
__global__ void column_sum_final_kernel(const Acc* __restrict__ partial, int64_t chunks, int64_t C, Epi epi) {
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < C;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    Acc sum = Acc(0);
    for (int64_t k = 0; k < chunks; ++k) sum += partial[k * C + c];
    epi(c, sum);
  }
}

// Epilogue writing a dense vector in the element type.
template <typename T>
struct StoreVector {
  T* out;
  __host__ __device__ void operator()(int64_t c, acc_t<T> v) const { out[c] = Num<T>::from_acc(v); }
};

}  // namespace xkernels::cuda::kernels
