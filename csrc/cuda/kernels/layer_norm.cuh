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

// rstd from the row's sums of deviations d = x - mean: sq = sum(d^2), sd = sum(d) (the corrected two-pass
// variance, biased; clamped at 0, NaN stays NaN, an overflowed variance is NaN as in PyTorch).
template <typename Acc>
__device__ __forceinline__ Acc layer_norm_rstd(Acc sq, Acc sd, Acc n, Acc eps) {
  Acc var = (sq - sd * (sd / n)) / n;
  if (var < Acc(0)) var = Acc(0);            // rounding; NaN stays NaN
  if (var - var != Acc(0)) var = var - var;  // Inf (overflowed) -> NaN: rstd 0 would silently give the bias
  return Acc(1) / sqrt(var + eps);
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
    const Acc rs = layer_norm_rstd(sq, sd, n_acc, eps);
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

// ---------------------------------------------------------------- rows cached in registers
// The same statistics and formulas as the kernels above, for rows whose length is a multiple of the
// 16-byte vector (V elements) and whose pointers are 16-byte aligned: each thread keeps its kVecs
// vectors of the row (columns (i * nt + t) * V .. + V) in registers, so the row is read from memory
// once (the kernels above read it once per pass) with 16-byte loads. layer_norm.cu picks kVecs
// (1, 2, 4 or 8) and a warp or a block per row from N; longer or unaligned rows use the kernels above.
template <typename T>
struct alignas(16) Vec16 {
  static constexpr int kN = 16 / sizeof(T);
  T v[kN];
};

template <typename T, int kVecs>
struct RowCache {
  Vec16<T> part[kVecs];
  bool valid[kVecs];
  __device__ __forceinline__ void load(const T* __restrict__ row, int64_t N, int t, int nt) {
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      const int64_t c = (static_cast<int64_t>(i) * nt + t) * Vec16<T>::kN;
      valid[i] = c < N;
      if (valid[i]) part[i] = *reinterpret_cast<const Vec16<T>*>(row + c);
    }
  }
};

template <typename T, int kVecs, bool kBlockRow>
__global__ void layer_norm_forward_rows_kernel(const T* __restrict__ x, const T* __restrict__ w,
                                               const T* __restrict__ b, T* __restrict__ y, acc_t<T>* __restrict__ mean,
                                               acc_t<T>* __restrict__ rstd, int64_t M, int64_t N, acc_t<T> eps) {
  using Acc = acc_t<T>;
  constexpr int V = Vec16<T>::kN;
  __shared__ Acc smem[32];
  const int t = threadIdx.x, nt = blockDim.x;
  const Acc n_acc = static_cast<Acc>(N);
  for (int64_t row = first_row<kBlockRow>(); row < M; row += row_step<kBlockRow>()) {
    RowCache<T, kVecs> xr;
    xr.load(x + row * N, N, t, nt);
    Acc sum = Acc(0);
#pragma unroll
    for (int i = 0; i < kVecs; ++i)
      if (xr.valid[i])
#pragma unroll
        for (int j = 0; j < V; ++j) sum += Num<T>::to_acc(xr.part[i].v[j]);
    const Acc mu0 = row_sum<kBlockRow>(sum, smem) / n_acc;
    Acc sd0 = Acc(0);
#pragma unroll
    for (int i = 0; i < kVecs; ++i)
      if (xr.valid[i])
#pragma unroll
        for (int j = 0; j < V; ++j) sd0 += Num<T>::to_acc(xr.part[i].v[j]) - mu0;
    const Acc mu = mu0 + row_sum<kBlockRow>(sd0, smem) / n_acc;
    Acc sd = Acc(0), sq = Acc(0);
#pragma unroll
    for (int i = 0; i < kVecs; ++i)
      if (xr.valid[i])
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const Acc d = Num<T>::to_acc(xr.part[i].v[j]) - mu;
          sd += d;
          sq += d * d;
        }
    sd = row_sum<kBlockRow>(sd, smem);
    sq = row_sum<kBlockRow>(sq, smem);
    const Acc rs = layer_norm_rstd(sq, sd, n_acc, eps);
    if (t == 0) {
      if (mean != nullptr) mean[row] = mu;
      if (rstd != nullptr) rstd[row] = rs;
    }
    T* yr = y + row * N;
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      if (!xr.valid[i]) continue;
      const int64_t c = (static_cast<int64_t>(i) * nt + t) * V;
      Vec16<T> wv, bv, out;
      if (w != nullptr) wv = *reinterpret_cast<const Vec16<T>*>(w + c);
      if (b != nullptr) bv = *reinterpret_cast<const Vec16<T>*>(b + c);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        Acc v = (Num<T>::to_acc(xr.part[i].v[j]) - mu) * rs;
        if (w != nullptr) v = v * Num<T>::to_acc(wv.v[j]);
        if (b != nullptr) v = v + Num<T>::to_acc(bv.v[j]);
        out.v[j] = Num<T>::from_acc(v);
      }
      *reinterpret_cast<Vec16<T>*>(yr + c) = out;
    }
  }
}

template <typename T, int kVecs, bool kBlockRow>
__global__ void layer_norm_backward_input_rows_kernel(const T* __restrict__ dy, const T* __restrict__ x,
                                                      const acc_t<T>* __restrict__ mean,
                                                      const acc_t<T>* __restrict__ rstd, const T* __restrict__ w,
                                                      T* __restrict__ dx, int64_t M, int64_t N) {
  using Acc = acc_t<T>;
  constexpr int V = Vec16<T>::kN;
  __shared__ Acc smem[32];
  const int t = threadIdx.x, nt = blockDim.x;
  const Acc n_acc = static_cast<Acc>(N);
  for (int64_t row = first_row<kBlockRow>(); row < M; row += row_step<kBlockRow>()) {
    RowCache<T, kVecs> xr, gr;
    xr.load(x + row * N, N, t, nt);
    gr.load(dy + row * N, N, t, nt);
    const Acc mu = mean[row], rs = rstd[row];
    Acc sum_g = Acc(0), sum_gx = Acc(0);
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      if (!xr.valid[i]) continue;
      const int64_t c = (static_cast<int64_t>(i) * nt + t) * V;
      Vec16<T> wv;
      if (w != nullptr) wv = *reinterpret_cast<const Vec16<T>*>(w + c);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const Acc xhat = (Num<T>::to_acc(xr.part[i].v[j]) - mu) * rs;
        const Acc g = Num<T>::to_acc(gr.part[i].v[j]) * (w != nullptr ? Num<T>::to_acc(wv.v[j]) : Acc(1));
        sum_g += g;
        sum_gx += g * xhat;
      }
    }
    const Acc mg = row_sum<kBlockRow>(sum_g, smem) / n_acc;
    const Acc mgx = row_sum<kBlockRow>(sum_gx, smem) / n_acc;
    T* dxr = dx + row * N;
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      if (!xr.valid[i]) continue;
      const int64_t c = (static_cast<int64_t>(i) * nt + t) * V;
      Vec16<T> wv, out;
      if (w != nullptr) wv = *reinterpret_cast<const Vec16<T>*>(w + c);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const Acc xhat = (Num<T>::to_acc(xr.part[i].v[j]) - mu) * rs;
        const Acc g = Num<T>::to_acc(gr.part[i].v[j]) * (w != nullptr ? Num<T>::to_acc(wv.v[j]) : Acc(1));
        out.v[j] = Num<T>::from_acc(rs * (g - mg - xhat * mgx));
      }
      *reinterpret_cast<Vec16<T>*>(dxr + c) = out;
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
