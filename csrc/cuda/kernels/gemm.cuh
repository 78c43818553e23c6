// Generic tiled GEMM cores shared by fused_linear_relu and conv2d (implicit GEMM).
//
// For every batch entry g in [0, G) (conv groups; 1 for linear) the cores compute
//   C_g(m, n) = sum_{k in [0, K)} A_g(m, k) * B_g(k, n)
// where the operands are never materialized: a *loader* functor produces one element
// on demand (this is where im2col / the ReLU mask / transposes happen), and an
// *epilogue* functor consumes each finished element (bias, ReLU, layout, dtype).
//
//   struct LoadA { static constexpr bool kContiguousK; acc operator()(int64_t g, int64_t m, int64_t k) const; };
//   struct LoadB { static constexpr bool kContiguousK; acc operator()(int64_t g, int64_t k, int64_t n) const; };
//   struct Epi   { void operator()(int64_t g, int64_t m, int64_t n, acc v) const; };
//
// Loaders are only called in bounds (0 <= m < M, 0 <= k < K, 0 <= n < N); the cores pad
// the tiles with zeros.
//
// Absent terms: a B loader may declare `static constexpr bool kAbsentTerms = true` and
//   bool load(int64_t g, int64_t k, int64_t n, acc& v) const;  // false: term (k, n) does not exist
// for sums whose terms depend on n (conv2d's grad_input: a tap that falls outside grad_output
// has no term at all, as in PyTorch's col2im). An absent term is skipped, not multiplied by 0,
// so a NaN / Inf in A there does not reach the result (0 * Inf would be NaN). kContiguousK says whether consecutive k
// are adjacent in memory, which picks the thread->element mapping of the tile loads so global reads coalesce.
//
// Split-K: the K range may be cut into `splits` slices (grid y); each slice then writes its
// partial tile to a workspace [splits, G, M, N] and gemm_splitk_reduce_kernel sums the
// slices in a fixed order (deterministic) and calls the epilogue.
#pragma once
#include <mma.h>

#include "kernels/common.cuh"

namespace xkernels::cuda::kernels {

struct GemmShape {
  int64_t G, M, N, K;
  int64_t tiles_n;      // ceil(N / BN)
  int64_t splits;       // K slices (1: no split-K)
  int64_t k_per_split;  // multiple of the tile depth
};

// SIMT core (any type; float/double accumulation). 256 threads, each owning a 4x4
// sub-tile spread with a stride of 16 rows/columns, so shared-memory reads are
// conflict-free broadcasts and the epilogue writes coalesce along n.
struct SimtGemmTile {
  static constexpr int BM = 64, BN = 64, BK = 16;  // 64x64 output tile: 16 KiB (double) of smem, good occupancy
  static constexpr int TM = 4, TN = 4;             // per-thread accumulators: 16 registers (acc)
  static constexpr int kThreads = (BM / TM) * (BN / TN);
  static constexpr int kPad = 1;  // breaks the k-strided smem stores' bank conflicts
};

// Tensor-core core (__half / __nv_bfloat16 in, float accumulate) via WMMA 16x16x16.
// 4 warps in 2x2, each 32x32 (2x2 fragments); operands staged to smem in the element type.
struct WmmaGemmTile {
  static constexpr int BM = 64, BN = 64, BK = 32;
  static constexpr int kWarps = 4, kThreads = 32 * kWarps;
  static constexpr int LDA = BK + 8;  // row pitch (elements) of the A tile: multiple of 8 for wmma, skews banks
  static constexpr int LDB = BN + 8;
  static constexpr int LDC = BN + 4;  // float staging of the accumulators: multiple of 4 for wmma
};

// Whether loader L declares absent terms (see the top of this file).
template <class L>
__host__ __device__ constexpr bool has_absent_terms() {
  if constexpr (requires { L::kAbsentTerms; })
    return L::kAbsentTerms;
  else
    return false;
}

// B(g, k, n) into v, and whether the term exists (always, for loaders without absent terms).
template <class LoadB, typename Acc>
__device__ __forceinline__ bool load_b_term(const LoadB& load_b, int64_t g, int64_t k, int64_t n, Acc& v) {
  if constexpr (has_absent_terms<LoadB>()) {
    return load_b.load(g, k, n, v);
  } else {
    v = load_b(g, k, n);
    return true;
  }
}

template <typename Acc, class LoadA, class LoadB, class Epi>
__global__ void __launch_bounds__(SimtGemmTile::kThreads)
    gemm_simt_kernel(LoadA load_a, LoadB load_b, Epi epi, GemmShape s, Acc* splitk_ws) {
  using Tile = SimtGemmTile;
  constexpr int BM = Tile::BM, BN = Tile::BN, BK = Tile::BK;
  constexpr int RS = BM / Tile::TM;  // row stride between a thread's accumulators (16)
  constexpr int CS = BN / Tile::TN;
  constexpr bool kAbsent = has_absent_terms<LoadB>();
  __shared__ Acc As[BK][BM + Tile::kPad];
  __shared__ Acc Bs[BK][BN + Tile::kPad];
  __shared__ bool Bp[kAbsent ? BK : 1][kAbsent ? BN + Tile::kPad : 1];  // term present (absent-term loaders)

  const int tid = threadIdx.x;
  const int tx = tid % CS, ty = tid / CS;
  const int64_t m0 = (static_cast<int64_t>(blockIdx.x) / s.tiles_n) * BM;
  const int64_t n0 = (static_cast<int64_t>(blockIdx.x) % s.tiles_n) * BN;

  for (int64_t z = blockIdx.y; z < s.G * s.splits; z += gridDim.y) {
    const int64_t g = z / s.splits, split = z % s.splits;
    const int64_t k_begin = split * s.k_per_split;
    const int64_t k_end = k_begin + s.k_per_split < s.K ? k_begin + s.k_per_split : s.K;
    Acc acc[Tile::TM][Tile::TN];
#pragma unroll
    for (int i = 0; i < Tile::TM; ++i)
#pragma unroll
      for (int j = 0; j < Tile::TN; ++j) acc[i][j] = Acc(0);

    for (int64_t k0 = k_begin; k0 < k_end; k0 += BK) {
      for (int e = tid; e < BM * BK; e += Tile::kThreads) {
        const int r = LoadA::kContiguousK ? e / BK : e % BM;
        const int kk = LoadA::kContiguousK ? e % BK : e / BM;
        const int64_t m = m0 + r, k = k0 + kk;
        As[kk][r] = (m < s.M && k < k_end) ? load_a(g, m, k) : Acc(0);
      }
      for (int e = tid; e < BN * BK; e += Tile::kThreads) {
        const int c = LoadB::kContiguousK ? e / BK : e % BN;
        const int kk = LoadB::kContiguousK ? e % BK : e / BN;
        const int64_t n = n0 + c, k = k0 + kk;
        Acc v = Acc(0);
        const bool present = n < s.N && k < k_end && load_b_term(load_b, g, k, n, v);
        Bs[kk][c] = present ? v : Acc(0);
        if constexpr (kAbsent) Bp[kk][c] = present;
      }
      __syncthreads();
#pragma unroll
      for (int kk = 0; kk < BK; ++kk) {
        Acc a[Tile::TM], b[Tile::TN];
#pragma unroll
        for (int i = 0; i < Tile::TM; ++i) a[i] = As[kk][ty + i * RS];
#pragma unroll
        for (int j = 0; j < Tile::TN; ++j) b[j] = Bs[kk][tx + j * CS];
        if constexpr (kAbsent) {
          bool p[Tile::TN];
#pragma unroll
          for (int j = 0; j < Tile::TN; ++j) p[j] = Bp[kk][tx + j * CS];
#pragma unroll
          for (int i = 0; i < Tile::TM; ++i)
#pragma unroll
            for (int j = 0; j < Tile::TN; ++j)
              if (p[j]) acc[i][j] = mul_add(a[i], b[j], acc[i][j]);
        } else {
#pragma unroll
          for (int i = 0; i < Tile::TM; ++i)
#pragma unroll
            for (int j = 0; j < Tile::TN; ++j) acc[i][j] = mul_add(a[i], b[j], acc[i][j]);
        }
      }
      __syncthreads();
    }

#pragma unroll
    for (int i = 0; i < Tile::TM; ++i) {
      const int64_t m = m0 + ty + i * RS;
      if (m >= s.M) continue;
#pragma unroll
      for (int j = 0; j < Tile::TN; ++j) {
        const int64_t n = n0 + tx + j * CS;
        if (n >= s.N) continue;
        if (splitk_ws != nullptr)
          splitk_ws[((split * s.G + g) * s.M + m) * s.N + n] = acc[i][j];
        else
          epi(g, m, n, acc[i][j]);
      }
    }
  }
}

// T is __half or __nv_bfloat16; needs sm_80+ (bf16 WMMA). The host only launches it on
// devices whose binary for this kernel targets sm_80 or newer (cudaFuncGetAttributes).
template <typename T, class LoadA, class LoadB, class Epi>
__global__ void __launch_bounds__(WmmaGemmTile::kThreads)
    gemm_wmma_kernel(LoadA load_a, LoadB load_b, Epi epi, GemmShape s, float* splitk_ws) {
#if (defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800) || defined(XKERNELS_CUDA_CPU_SIM)  // sim: compile_check/cpu_sim.h
  namespace wmma = nvcuda::wmma;
  using Tile = WmmaGemmTile;
  constexpr int BM = Tile::BM, BN = Tile::BN, BK = Tile::BK;
  constexpr int LDA = Tile::LDA, LDB = Tile::LDB, LDC = Tile::LDC;
  __shared__ __align__(128) T As[BM * LDA];
  __shared__ __align__(128) T Bs[BK * LDB];
  __shared__ __align__(128) float Cs[BM * LDC];
  // Absent-term loaders: which B terms exist, and per thread the sums of the K blocks whose A tile
  // holds a NaN / Inf, done elementwise (skipping absent terms) instead of on the tensor cores, where
  // the 0 standing in for an absent term would turn that NaN / Inf into the result.
  constexpr bool kAbsent = has_absent_terms<LoadB>();
  constexpr int kPerThread = BM * BN / Tile::kThreads;
  __shared__ bool Bp[kAbsent ? BK * LDB : 1];
  [[maybe_unused]] float scalar[kAbsent ? kPerThread : 1];

  const int tid = threadIdx.x;
  const int warp = tid / 32;
  const int wm = warp / 2, wn = warp % 2;  // this warp's 32x32 quadrant
  const int64_t m0 = (static_cast<int64_t>(blockIdx.x) / s.tiles_n) * BM;
  const int64_t n0 = (static_cast<int64_t>(blockIdx.x) % s.tiles_n) * BN;

  for (int64_t z = blockIdx.y; z < s.G * s.splits; z += gridDim.y) {
    const int64_t g = z / s.splits, split = z % s.splits;
    const int64_t k_begin = split * s.k_per_split;
    const int64_t k_end = k_begin + s.k_per_split < s.K ? k_begin + s.k_per_split : s.K;

    wmma::fragment<wmma::accumulator, 16, 16, 16, float> c[2][2];
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < 2; ++j) wmma::fill_fragment(c[i][j], 0.0f);
    [[maybe_unused]] bool any_scalar = false;  // uniform across the block
    if constexpr (kAbsent) {
#pragma unroll
      for (int i = 0; i < kPerThread; ++i) scalar[i] = 0.0f;
    }

    for (int64_t k0 = k_begin; k0 < k_end; k0 += BK) {
      [[maybe_unused]] bool a_not_finite = false;
      // Loaders return float holding an element-type value (or 0): converting back is exact.
      for (int e = tid; e < BM * BK; e += Tile::kThreads) {
        const int r = LoadA::kContiguousK ? e / BK : e % BM;
        const int kk = LoadA::kContiguousK ? e % BK : e / BM;
        const int64_t m = m0 + r, k = k0 + kk;
        const float v = (m < s.M && k < k_end) ? load_a(g, m, k) : 0.0f;
        if constexpr (kAbsent) a_not_finite = a_not_finite || v - v != 0.0f;  // Inf or NaN
        As[r * LDA + kk] = Num<T>::from_acc(v);
      }
      for (int e = tid; e < BN * BK; e += Tile::kThreads) {
        const int cc = LoadB::kContiguousK ? e / BK : e % BN;
        const int kk = LoadB::kContiguousK ? e % BK : e / BN;
        const int64_t n = n0 + cc, k = k0 + kk;
        float v = 0.0f;
        const bool present = n < s.N && k < k_end && load_b_term(load_b, g, k, n, v);
        Bs[kk * LDB + cc] = Num<T>::from_acc(present ? v : 0.0f);
        if constexpr (kAbsent) Bp[kk * LDB + cc] = present;
      }
      bool scalar_block = false;
      if constexpr (kAbsent)
        scalar_block = __syncthreads_or(a_not_finite) != 0;
      else
        __syncthreads();
      if (scalar_block) {
        if constexpr (kAbsent) {
          any_scalar = true;
#pragma unroll
          for (int i = 0; i < kPerThread; ++i) {
            const int e = tid + i * Tile::kThreads, r = e / BN, cc = e % BN;
            for (int kk = 0; kk < BK; ++kk)
              if (Bp[kk * LDB + cc])
                scalar[i] = mul_add(Num<T>::to_acc(As[r * LDA + kk]), Num<T>::to_acc(Bs[kk * LDB + cc]), scalar[i]);
          }
        }
        __syncthreads();
        continue;
      }
#pragma unroll
      for (int kk = 0; kk < BK; kk += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a[2];
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> b[2];
#pragma unroll
        for (int i = 0; i < 2; ++i) wmma::load_matrix_sync(a[i], As + (wm * 32 + i * 16) * LDA + kk, LDA);
#pragma unroll
        for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(b[j], Bs + kk * LDB + wn * 32 + j * 16, LDB);
#pragma unroll
        for (int i = 0; i < 2; ++i)
#pragma unroll
          for (int j = 0; j < 2; ++j) wmma::mma_sync(c[i][j], a[i], b[j], c[i][j]);
      }
      __syncthreads();
    }

#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < 2; ++j)
        wmma::store_matrix_sync(Cs + (wm * 32 + i * 16) * LDC + wn * 32 + j * 16, c[i][j], LDC, wmma::mem_row_major);
    __syncthreads();
#pragma unroll
    for (int i = 0; i < BM * BN / Tile::kThreads; ++i) {
      const int e = tid + i * Tile::kThreads, r = e / BN, cc = e % BN;
      const int64_t m = m0 + r, n = n0 + cc;
      if (m >= s.M || n >= s.N) continue;
      float v = Cs[r * LDC + cc];
      if constexpr (kAbsent) {
        if (any_scalar) v = v + scalar[i];
      }
      if (splitk_ws != nullptr)
        splitk_ws[((split * s.G + g) * s.M + m) * s.N + n] = v;
      else
        epi(g, m, n, v);
    }
    __syncthreads();  // Cs is reused by the next z
  }
#else
  __trap();  // never launched: the host checks the binary's architecture first
#endif
}

// Sums the split-K partials [splits, G, M, N] in split order and applies the epilogue.
template <typename Acc, class Epi>
__global__ void gemm_splitk_reduce_kernel(const Acc* __restrict__ ws, int64_t splits, int64_t G, int64_t M, int64_t N,
                                          Epi epi) {
  const int64_t total = G * M * N;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    Acc sum = Acc(0);
    for (int64_t sp = 0; sp < splits; ++sp) sum += ws[sp * total + idx];
    const int64_t g = idx / (M * N), rem = idx % (M * N);
    epi(g, rem / N, rem % N, sum);
  }
}

}  // namespace xkernels::cuda::kernels
