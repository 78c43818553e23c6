// layer_norm kernels. A row (length N) is handled by one warp (N <= kMaxWarpRow, several
// rows per block) or by a whole block (longer rows). Statistics in the accumulation type, as the
// reference (csrc/cpu/layer_norm.cpp): mean mu0 = sum(x)/N, corrected by the mean of the deviations
// (mu = mu0 + sum(x - mu0)/N: a row of equal values gets exactly that value as its mean, so it
// normalizes to exactly 0, i.e. the bias), then the corrected two-pass variance
// var = (sum(d^2) - sum(d)^2/N)/N with d = x - mu (biased; clamped at 0, NaN stays NaN; an
// overflowing variance is NaN, as in PyTorch), rstd = 1/sqrt(var + eps), IEEE sqrt and division.
// Weight/bias gradients are column sums (kernels/reduce.cuh) with the loaders below.
#pragma once
#include "kernels/common.cuh"

namespace xkernels::cuda::kernels {

struct LayerNormConfig {
  static constexpr int64_t kMaxWarpRow = 1024;  // up to 32 elements per lane: one warp keeps a row in L1
  static constexpr int kWarpRowsPerBlock = 4;   // 128-thread blocks in warp-per-row mode
  static constexpr int kBlockThreads = 256;     // block-per-row mode: 8 warps share a long row
};

// Sum over the threads that share a row (a warp, or the whole block), same value in every thread.
template <bool kBlockRow, typename Acc>
__device__ __forceinline__ Acc row_sum(Acc v, Acc* smem) {
  v = warp_sum(v);
  if constexpr (kBlockRow) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    __syncthreads();  // earlier readers of smem are done
    if (lane == 0) smem[warp] = v;
    __syncthreads();
    v = Acc(0);
    for (int i = 0; i < nwarps; ++i) v += smem[i];
  }
  return v;
}

template <bool kBlockRow>
__device__ __forceinline__ int64_t first_row() {
  return kBlockRow ? static_cast<int64_t>(blockIdx.x) : static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
}
template <bool kBlockRow>
__device__ __forceinline__ int64_t row_step() {
  return kBlockRow ? static_cast<int64_t>(gridDim.x) : static_cast<int64_t>(gridDim.x) * blockDim.y;
}

// y = (x - mean) * rstd [* w] [+ b]; mean/rstd per row in Acc. w/b may be null, and mean/rstd
// too (not saved).
template <typename T, bool kBlockRow>
__global__ void layer_norm_forward_kernel(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b,
                                          T* __restrict__ y, acc_t<T>* __restrict__ mean, acc_t<T>* __restrict__ rstd,
                                          int64_t M, int64_t N, acc_t<T> eps) {
  using Acc = acc_t<T>;
  __shared__ Acc smem[32];
  const int t = threadIdx.x, nt = blockDim.x;
  const Acc n_acc = static_cast<Acc>(N);
  for (int64_t row = first_row<kBlockRow>(); row < M; row += row_step<kBlockRow>()) {
    const T* xr = x + row * N;
    Acc sum = Acc(0);
    for (int64_t j = t; j < N; j += nt) sum += Num<T>::to_acc(xr[j]);
    const Acc mu0 = row_sum<kBlockRow>(sum, smem) / n_acc;
    Acc sd0 = Acc(0);
    for (int64_t j = t; j < N; j += nt) sd0 += Num<T>::to_acc(xr[j]) - mu0;
    const Acc mu = mu0 + row_sum<kBlockRow>(sd0, smem) / n_acc;
    Acc sd = Acc(0), sq = Acc(0);
    for (int64_t j = t; j < N; j += nt) {
      const Acc d = Num<T>::to_acc(xr[j]) - mu;
      sd += d;
      sq += d * d;
    }
    sd = row_sum<kBlockRow>(sd, smem);
    sq = row_sum<kBlockRow>(sq, smem);
    Acc var = (sq - sd * (sd / n_acc)) / n_acc;
    if (var < Acc(0)) var = Acc(0);            // rounding; NaN stays NaN
    if (var - var != Acc(0)) var = var - var;  // Inf (overflowed) -> NaN: rstd 0 would silently give the bias
    const Acc rs = Acc(1) / sqrt(var + eps);
    if (t == 0) {  // mean / rstd are null when the statistics are not saved (layer_norm.out)
      if (mean != nullptr) mean[row] = mu;
      if (rstd != nullptr) rstd[row] = rs;
    }
    T* yr = y + row * N;
    for (int64_t j = t; j < N; j += nt) {
      Acc v = (Num<T>::to_acc(xr[j]) - mu) * rs;
      if (w != nullptr) v = v * Num<T>::to_acc(w[j]);
      if (b != nullptr) v = v + Num<T>::to_acc(b[j]);
      yr[j] = Num<T>::from_acc(v);
    }
  }
}

// With xhat = (x - mean) * rstd and g = dy * w (dy without weight):
//   dx = rstd * (g - mean_j(g) - xhat * mean_j(g * xhat))
template <typename T, bool kBlockRow>
__global__ void layer_norm_backward_input_kernel(const T* __restrict__ dy, const T* __restrict__ x,
                                                 const acc_t<T>* __restrict__ mean, const acc_t<T>* __restrict__ rstd,
                                                 const T* __restrict__ w, T* __restrict__ dx, int64_t M, int64_t N) {
  using Acc = acc_t<T>;
  __shared__ Acc smem[32];
  const int t = threadIdx.x, nt = blockDim.x;
  const Acc n_acc = static_cast<Acc>(N);
  for (int64_t row = first_row<kBlockRow>(); row < M; row += row_step<kBlockRow>()) {
    const T* xr = x + row * N;
    const T* dyr = dy + row * N;
    const Acc mu = mean[row], rs = rstd[row];
    Acc sum_g = Acc(0), sum_gx = Acc(0);
    for (int64_t j = t; j < N; j += nt) {
      const Acc xhat = (Num<T>::to_acc(xr[j]) - mu) * rs;
      const Acc g = Num<T>::to_acc(dyr[j]) * (w != nullptr ? Num<T>::to_acc(w[j]) : Acc(1));
      sum_g += g;
      sum_gx += g * xhat;
    }
    const Acc mg = row_sum<kBlockRow>(sum_g, smem) / n_acc;
    const Acc mgx = row_sum<kBlockRow>(sum_gx, smem) / n_acc;
    T* dxr = dx + row * N;
    for (int64_t j = t; j < N; j += nt) {
      const Acc xhat = (Num<T>::to_acc(xr[j]) - mu) * rs;
      const Acc g = Num<T>::to_acc(dyr[j]) * (w != nullptr ? Num<T>::to_acc(w[j]) : Acc(1));
      dxr[j] = Num<T>::from_acc(rs * (g - mg - xhat * mgx));
    }
  }
}

// Column-sum loaders (kernels/reduce.cuh) for dw = sum_rows(dy * xhat) and db = sum_rows(dy).
template <typename T>
struct LayerNormGradWeightLoad {
  const T* dy;
  const T* x;
  const acc_t<T>* mean;
  const acc_t<T>* rstd;
  int64_t N;
  __host__ __device__ acc_t<T> operator()(int64_t r, int64_t c) const {
    const int64_t i = r * N + c;
    return Num<T>::to_acc(dy[i]) * ((Num<T>::to_acc(x[i]) - mean[r]) * rstd[r]);
  }
};
template <typename T>
struct LayerNormGradBiasLoad {
  const T* dy;
  int64_t N;
  __host__ __device__ acc_t<T> operator()(int64_t r, int64_t c) const { return Num<T>::to_acc(dy[r * N + c]); }
};

}  // namespace xkernels::cuda::kernels
