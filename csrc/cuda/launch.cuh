// Host-side launch helpers shared by the CUDA host wrappers (csrc/cuda/<op>.cu):
// c10 -> CUDA element types, device facts, and the launchers of the generic GEMM and
// column-sum kernels (geometry, split-K choice, workspace, launch on the given stream).
// Included only by .cu files; every launch is followed by C10_CUDA_KERNEL_LAUNCH_CHECK.
#pragma once
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <climits>
#include <type_traits>

#include "kernels/elementwise.cuh"
#include "kernels/gemm.cuh"
#include "kernels/reduce.cuh"
#include "xkernels/checks.h"

namespace xkernels::cuda {

namespace k = ::xkernels::cuda::kernels;

// c10 element types -> the CUDA types the kernels use (identical bit layouts).
template <typename T>
struct CudaType {
  using type = T;
};
template <>
struct CudaType<c10::Half> {
  using type = __half;
};
template <>
struct CudaType<c10::BFloat16> {
  using type = __nv_bfloat16;
};
template <typename T>
using cuda_t = typename CudaType<T>::type;

template <typename T>
const cuda_t<T>* data_in(const at::Tensor& t) {
  return t.defined() ? reinterpret_cast<const cuda_t<T>*>(t.const_data_ptr<T>()) : nullptr;
}
template <typename T>
cuda_t<T>* data_out(at::Tensor& t) {
  return reinterpret_cast<cuda_t<T>*>(t.mutable_data_ptr<T>());
}

// torch dtype of a kernel accumulation type (workspaces, layer_norm statistics).
template <typename Acc>
constexpr at::ScalarType acc_scalar_type() {
  return std::is_same_v<Acc, double> ? at::kDouble : at::kFloat;
}

// Streaming multiprocessors of the current device (cached per device).
inline int64_t sm_count() {
  static std::array<std::atomic<int>, 64> cache{};
  const int dev = c10::cuda::current_device();
  if (dev < 0 || dev >= 64) {
    int v = 0;
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev));
    return v;
  }
  int v = cache[dev].load(std::memory_order_relaxed);
  if (v == 0) {
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev));
    cache[dev].store(v, std::memory_order_relaxed);
  }
  return v;
}

// True when the code the driver loaded for `kernel` on the current device was compiled for
// sm_80 or newer (the WMMA kernels need bf16 tensor cores). A build whose architecture list
// lacks sm_80+ runs the SIMT kernels instead of trapping. Cached per kernel and device.
template <typename Kernel>
bool kernel_binary_sm80_plus(Kernel kernel) {
  static std::array<std::atomic<int>, 64> cache{};  // 0 unknown, 1 no, 2 yes
  const int dev = c10::cuda::current_device();
  std::atomic<int>* slot = (dev >= 0 && dev < 64) ? &cache[dev] : nullptr;
  if (slot != nullptr) {
    const int v = slot->load(std::memory_order_relaxed);
    if (v != 0) return v == 2;
  }
  cudaFuncAttributes attr{};
  C10_CUDA_CHECK(cudaFuncGetAttributes(&attr, kernel));
  const bool yes = attr.binaryVersion >= 80;
  if (slot != nullptr) slot->store(yes ? 2 : 1, std::memory_order_relaxed);
  return yes;
}

struct GemmLaunchPolicy {
  static constexpr int64_t kMinKPerSplit = 256;  // below this a K slice does too little work to pay its partial tile
  static constexpr int64_t kMaxSplits = 32;      // bounds the workspace and the reduce pass
  static constexpr int64_t kBlocksPerSM = 2;     // aim for this many blocks per SM before splitting K
  static constexpr int64_t kMaxGridY = 65535;
};

// Runs C_g = A_g * B_g (g < G) through the loaders/epilogue on `stream`. `like` supplies the
// device for the split-K workspace (allocated by torch's caching allocator, stream-ordered).
template <typename T, class LoadA, class LoadB, class Epi>
void run_gemm(const char* op, int64_t G, int64_t M, int64_t N, int64_t K, const LoadA& load_a, const LoadB& load_b,
              const Epi& epi, const at::Tensor& like, cudaStream_t stream) {
  using Acc = k::acc_t<T>;
  constexpr bool kHalfType = std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;
  bool use_wmma = false;
  if constexpr (kHalfType) use_wmma = kernel_binary_sm80_plus(k::gemm_wmma_kernel<T, LoadA, LoadB, Epi>);
  const int64_t BM = use_wmma ? k::WmmaGemmTile::BM : k::SimtGemmTile::BM;
  const int64_t BN = use_wmma ? k::WmmaGemmTile::BN : k::SimtGemmTile::BN;
  const int64_t BK = use_wmma ? k::WmmaGemmTile::BK : k::SimtGemmTile::BK;

  k::GemmShape s{G, M, N, K, k::ceil_div(N, BN), 1, k::ceil_div(K, BK) * BK};
  const int64_t tiles = k::ceil_div(M, BM) * s.tiles_n;
  XK_CHECK(tiles <= INT_MAX, op, "problem too large for one launch: ", tiles, " output tiles of ", BM, "x", BN,
           " (M=", M, ", N=", N, ")");
  using P = GemmLaunchPolicy;
  const int64_t target = P::kBlocksPerSM * sm_count();
  if (tiles * G < target && K >= 2 * P::kMinKPerSplit) {
    int64_t splits = std::min({k::ceil_div(target, tiles * G), K / P::kMinKPerSplit, P::kMaxSplits});
    s.k_per_split = k::ceil_div(k::ceil_div(K, splits), BK) * BK;
    s.splits = k::ceil_div(K, s.k_per_split);
  }
  at::Tensor ws;
  Acc* ws_ptr = nullptr;
  if (s.splits > 1) {
    ws = at::empty({s.splits * G * M * N}, like.options().dtype(acc_scalar_type<Acc>()));
    ws_ptr = ws.mutable_data_ptr<Acc>();
  }
  const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(std::min(G * s.splits, P::kMaxGridY)));
  if constexpr (kHalfType) {
    if (use_wmma) {
      k::gemm_wmma_kernel<T><<<grid, k::WmmaGemmTile::kThreads, 0, stream>>>(load_a, load_b, epi, s, ws_ptr);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
  }
  if (!use_wmma) {
    k::gemm_simt_kernel<Acc><<<grid, k::SimtGemmTile::kThreads, 0, stream>>>(load_a, load_b, epi, s, ws_ptr);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  if (s.splits > 1) {
    const int64_t total = G * M * N;
    const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(k::ceil_div(total, 256), 4 * target));
    k::gemm_splitk_reduce_kernel<Acc><<<blocks, 256, 0, stream>>>(ws_ptr, s.splits, G, M, N, epi);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
}

struct ColumnSumLaunchPolicy {
  static constexpr int64_t kMinRowsPerThread = 8;  // rows each thread sums before chunking pays off
  static constexpr int64_t kMaxChunks = 65535;     // grid y
};

// out(c) = sum_r load(r, c) for an R x C operand, through `epi` (see kernels/reduce.cuh).
template <typename Acc, bool kRowsContiguous, class Load, class Epi>
void run_column_sum(const char* op, int64_t R, int64_t C, const Load& load, const Epi& epi, const at::Tensor& like,
                    cudaStream_t stream) {
  using P = ColumnSumLaunchPolicy;
  using Tile = k::ColumnSumTile;
  const int64_t target = 2 * sm_count();
  const int64_t col_blocks = kRowsContiguous ? C : k::ceil_div(C, Tile::kColLanes);
  XK_CHECK(col_blocks <= INT_MAX, op, "too many columns for one launch: ", C);
  const int64_t row_lanes = kRowsContiguous ? Tile::kRowThreads : Tile::kRowLanes;
  int64_t chunks =
      std::min(k::ceil_div(R, row_lanes * P::kMinRowsPerThread), std::max<int64_t>(1, target / col_blocks));
  chunks = std::max<int64_t>(1, std::min(chunks, P::kMaxChunks));
  const int64_t rows_per_chunk = k::ceil_div(R, chunks);
  chunks = k::ceil_div(R, rows_per_chunk);
  at::Tensor ws;
  Acc* partial = nullptr;
  if (chunks > 1) {
    ws = at::empty({chunks * C}, like.options().dtype(acc_scalar_type<Acc>()));
    partial = ws.mutable_data_ptr<Acc>();
  }
  const dim3 grid(static_cast<unsigned>(col_blocks), static_cast<unsigned>(chunks));
  const dim3 block = kRowsContiguous ? dim3(Tile::kRowThreads) : dim3(Tile::kColLanes, Tile::kRowLanes);
  k::column_sum_partial_kernel<Acc, kRowsContiguous>
      <<<grid, block, 0, stream>>>(load, epi, R, C, rows_per_chunk, partial);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  if (chunks > 1) {
    const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(k::ceil_div(C, 256), 4 * target));
    k::column_sum_final_kernel<Acc><<<blocks, 256, 0, stream>>>(partial, chunks, C, epi);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
}

// out(m, n) = load.at(m, n) for a dense row-major [M, N] matrix (kernels/elementwise.cuh).
template <typename T, class Load>
void run_materialize(const Load& load, T* out, int64_t M, int64_t N, cudaStream_t stream) {
  const int64_t total = M * N;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(k::ceil_div(total, 256), 8 * sm_count()));
  k::materialize_kernel<T><<<blocks, 256, 0, stream>>>(load, out, M, N);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace xkernels::cuda
