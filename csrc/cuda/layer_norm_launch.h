// layer_norm launch geometry, shared by the host wrappers (layer_norm.cu) and the CPU simulator
// (compile_check/sim_ops.cpp), so both run the same kernel for the same problem. Torch-free.
#pragma once
#include <algorithm>
#include <climits>
#include <cstdint>
#include <initializer_list>

#include "kernels/layer_norm.cuh"

namespace xkernels::cuda {

// The general kernels: a warp per row for rows up to LayerNormConfig::kMaxWarpRow, else a block per row.
struct RowLaunch {
  bool block_row;
  dim3 grid, block;
};
inline RowLaunch row_launch(int64_t M, int64_t N) {
  using Cfg = kernels::LayerNormConfig;
  if (N <= Cfg::kMaxWarpRow) {
    const int64_t blocks = std::min<int64_t>(kernels::ceil_div(M, Cfg::kWarpRowsPerBlock), INT_MAX);
    return {false, dim3(static_cast<unsigned>(blocks)), dim3(32, Cfg::kWarpRowsPerBlock)};
  }
  return {true, dim3(static_cast<unsigned>(std::min<int64_t>(M, INT_MAX))), dim3(Cfg::kBlockThreads)};
}

// Rows cached in registers (the *_rows_kernel kernels): 16-byte vectors, `vecs` of them per thread. Used when
// the row is a whole number of vectors, every pointer given is 16-byte aligned and the row fits in 8 vectors
// per thread: a warp per row up to 32 * 8 vectors, else a block per row of 256 or 1024 threads.
// vecs = 0: the general kernels.
struct RowsLaunch {
  int vecs = 0;
  bool block_row = false;
  dim3 grid, block;
};
inline RowsLaunch rows_launch(int64_t M, int64_t N, int64_t elem_size, std::initializer_list<const void*> ptrs) {
  const int64_t V = 16 / elem_size;
  RowsLaunch L;
  if (N % V != 0) return L;
  for (const void* ptr : ptrs)
    if (ptr != nullptr && reinterpret_cast<uintptr_t>(ptr) % 16 != 0) return L;
  const int64_t vectors = N / V;
  auto pow2_at_least = [](int64_t v) { return v <= 1 ? 1 : v <= 2 ? 2 : v <= 4 ? 4 : 8; };
  using Cfg = kernels::LayerNormConfig;
  if (vectors <= 32 * 8) {
    L.vecs = pow2_at_least(kernels::ceil_div(vectors, 32));
    L.grid = dim3(static_cast<unsigned>(std::min<int64_t>(kernels::ceil_div(M, Cfg::kWarpRowsPerBlock), INT_MAX)));
    L.block = dim3(32, Cfg::kWarpRowsPerBlock);
    return L;
  }
  for (int threads : {256, 1024}) {
    if (vectors <= threads * 8) {
      L.vecs = pow2_at_least(kernels::ceil_div(vectors, threads));
      L.block_row = true;
      L.grid = dim3(static_cast<unsigned>(std::min<int64_t>(M, INT_MAX)));
      L.block = dim3(threads);
      return L;
    }
  }
  return L;
}

// Calls go(kernel) with K<T, vecs, block_row>::fn for the launch's vecs and row mode (L.vecs > 0).
template <template <typename, int, bool> class K, typename T, class Go>
void with_rows_kernel(const RowsLaunch& L, Go&& go) {
  if (L.block_row) {
    if (L.vecs == 1) return go(K<T, 1, true>::fn);
    if (L.vecs == 2) return go(K<T, 2, true>::fn);
    if (L.vecs == 4) return go(K<T, 4, true>::fn);
    return go(K<T, 8, true>::fn);
  }
  if (L.vecs == 1) return go(K<T, 1, false>::fn);
  if (L.vecs == 2) return go(K<T, 2, false>::fn);
  if (L.vecs == 4) return go(K<T, 4, false>::fn);
  return go(K<T, 8, false>::fn);
}
template <typename T, int V, bool B>
struct LayerNormForwardRows {
  static constexpr auto fn = kernels::layer_norm_forward_rows_kernel<T, V, B>;
};
template <typename T, int V, bool B>
struct LayerNormBackwardInputRows {
  static constexpr auto fn = kernels::layer_norm_backward_input_rows_kernel<T, V, B>;
};

}  // namespace xkernels::cuda
