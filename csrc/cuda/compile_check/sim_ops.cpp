// The native CUDA kernels as a shared library for Python, executed by the CPU simulator
// (cpu_sim.h): tests/_cuda_sim.py builds it with the host C++ compiler (no GPU, no torch
// headers) and calls it through ctypes with raw tensor pointers, so the tests can run the
// hostile battery (tests/_hostile_cases.py) through the very kernel code a GPU runs
// (tests/test_cuda_sim_hostile.py). Not part of the xkernels extension.
//
// The launch geometry mirrors the host wrappers (csrc/cuda/launch.cuh run_gemm / run_column_sum,
// csrc/cuda/layer_norm.cu row_launch) for a device with xk_sim_configure()'s SM count and
// tensor-core support (default: an H200, 132 SMs, sm_90: the WMMA kernel for half / bfloat16).
// Operands arrive laid out as the host wrappers lay them out (the Python side does that).
//
// Element types: 0 float64, 1 float32, 2 float16, 3 bfloat16. layer_norm statistics are in the
// accumulation type (float64 for float64, else float32). Every entry returns 0, or -1 for an
// unknown dtype.
#include "compile_check/cpu_sim.h"  // before the kernel headers

#include <algorithm>
#include <climits>
#include <cstdint>
#include <mutex>
#include <vector>

#include "kernels/conv2d.cuh"
#include "kernels/fused_linear_relu.cuh"
#include "kernels/gemm.cuh"
#include "kernels/layer_norm.cuh"
#include "kernels/reduce.cuh"
#include "layer_norm_launch.h"

namespace {
namespace k = xkernels::cuda::kernels;
using xkernels::cuda::LayerNormBackwardInputRows;
using xkernels::cuda::LayerNormForwardRows;
using xkernels::cuda::row_launch;
using xkernels::cuda::RowLaunch;
using xkernels::cuda::rows_launch;
using xkernels::cuda::RowsLaunch;
using xkernels::cuda::with_rows_kernel;

std::mutex g_mutex;  // the simulator's block state is global: one launch at a time
int64_t g_sm_count = 132;
bool g_tensor_cores = true;

template <typename T>
struct Tag {
  using type = T;
};
template <class F>
int dispatch(int dtype, F&& f) {
  switch (dtype) {
    case 0: f(Tag<double>{}); return 0;
    case 1: f(Tag<float>{}); return 0;
    case 2: f(Tag<__half>{}); return 0;
    case 3: f(Tag<__nv_bfloat16>{}); return 0;
    default: return -1;
  }
}

// launch.cuh's GemmLaunchPolicy and run_gemm.
template <typename T, class LoadA, class LoadB, class Epi>
void run_gemm(int64_t G, int64_t M, int64_t N, int64_t K, const LoadA& load_a, const LoadB& load_b, const Epi& epi) {
  using Acc = k::acc_t<T>;
  constexpr bool kHalfType = std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;
  const bool use_wmma = kHalfType && g_tensor_cores;
  const int64_t BM = use_wmma ? k::WmmaGemmTile::BM : k::SimtGemmTile::BM;
  const int64_t BN = use_wmma ? k::WmmaGemmTile::BN : k::SimtGemmTile::BN;
  const int64_t BK = use_wmma ? k::WmmaGemmTile::BK : k::SimtGemmTile::BK;
  k::GemmShape s{G, M, N, K, k::ceil_div(N, BN), 1, k::ceil_div(K, BK) * BK};
  const int64_t tiles = k::ceil_div(M, BM) * s.tiles_n;
  constexpr int64_t kMinKPerSplit = 256, kMaxSplits = 32, kBlocksPerSM = 2, kMaxGridY = 65535;
  const int64_t target = kBlocksPerSM * g_sm_count;
  if (tiles * G < target && K >= 2 * kMinKPerSplit) {
    const int64_t splits = std::min({k::ceil_div(target, tiles * G), K / kMinKPerSplit, kMaxSplits});
    s.k_per_split = k::ceil_div(k::ceil_div(K, splits), BK) * BK;
    s.splits = k::ceil_div(K, s.k_per_split);
  }
  std::vector<Acc> ws(s.splits > 1 ? s.splits * G * M * N : 0);
  Acc* ws_ptr = s.splits > 1 ? ws.data() : nullptr;
  const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(std::min(G * s.splits, kMaxGridY)));
  if constexpr (kHalfType) {
    if (use_wmma)
      xk_sim::launch(grid, dim3(k::WmmaGemmTile::kThreads), k::gemm_wmma_kernel<T, LoadA, LoadB, Epi>, load_a, load_b,
                     epi, s, ws_ptr);
  }
  if (!use_wmma)
    xk_sim::launch(grid, dim3(k::SimtGemmTile::kThreads), k::gemm_simt_kernel<Acc, LoadA, LoadB, Epi>, load_a, load_b,
                   epi, s, ws_ptr);
  if (s.splits > 1) {
    const int64_t total = G * M * N;
    const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(k::ceil_div(total, 256), 4 * target));
    xk_sim::launch(dim3(blocks), dim3(256), k::gemm_splitk_reduce_kernel<Acc, Epi>, static_cast<const Acc*>(ws_ptr),
                   s.splits, G, M, N, epi);
  }
}

// launch.cuh's ColumnSumLaunchPolicy and run_column_sum.
template <typename Acc, bool kRowsContiguous, class Load, class Epi>
void run_column_sum(int64_t R, int64_t C, const Load& load, const Epi& epi) {
  using Tile = k::ColumnSumTile;
  constexpr int64_t kMinRowsPerThread = 8, kMaxChunks = 65535;
  const int64_t target = 2 * g_sm_count;
  const int64_t col_blocks = kRowsContiguous ? C : k::ceil_div(C, Tile::kColLanes);
  const int64_t row_lanes = kRowsContiguous ? Tile::kRowThreads : Tile::kRowLanes;
  int64_t chunks = std::min(k::ceil_div(R, row_lanes * kMinRowsPerThread), std::max<int64_t>(1, target / col_blocks));
  chunks = std::max<int64_t>(1, std::min(chunks, kMaxChunks));
  const int64_t rows_per_chunk = k::ceil_div(R, chunks);
  chunks = k::ceil_div(R, rows_per_chunk);
  std::vector<Acc> ws(chunks > 1 ? chunks * C : 0);
  Acc* partial = chunks > 1 ? ws.data() : nullptr;
  const dim3 grid(static_cast<unsigned>(col_blocks), static_cast<unsigned>(chunks));
  const dim3 block = kRowsContiguous ? dim3(Tile::kRowThreads) : dim3(Tile::kColLanes, Tile::kRowLanes);
  xk_sim::launch(grid, block, k::column_sum_partial_kernel<Acc, kRowsContiguous, Load, Epi>, load, epi, R, C,
                 rows_per_chunk, partial);
  if (chunks > 1) {
    const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(k::ceil_div(C, 256), 4 * target));
    xk_sim::launch(dim3(blocks), dim3(256), k::column_sum_final_kernel<Acc, Epi>, static_cast<const Acc*>(partial),
                   chunks, C, epi);
  }
}

k::ConvGeometry geometry(const int64_t* g) {
  return {g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7], g[8], g[9], g[10], g[11], g[12], g[13], g[14], g[15], g[16]};
}
k::Strides4 strides4(const int64_t* s) { return {s[0], s[1], s[2], s[3]}; }

template <typename T>
const T* in(const void* p) {
  return static_cast<const T*>(p);
}
template <typename T>
T* out(void* p) {
  return static_cast<T*>(p);
}

template <typename T, bool CL, bool RELU>
void conv_forward(const void* x, const int64_t* xs, const void* w, const int64_t* ws, const void* b, const void* r,
                  void* y, const int64_t* ys, const k::ConvGeometry& geo, int64_t groups) {
  const k::ConvWeightA<T, CL> a{in<T>(w), strides4(ws), geo};
  const k::ConvInputPatchB<T, CL> bp{in<T>(x), strides4(xs), geo};
  const int64_t M = geo.Og, N = geo.N * geo.OH * geo.OW, K = geo.Cg * geo.KH * geo.KW;
  if (b != nullptr)
    run_gemm<T>(groups, M, N, K, a, bp,
                k::ConvOutputEpilogue<T, true, RELU>{out<T>(y), strides4(ys), in<T>(b), geo, in<T>(r)});
  else
    run_gemm<T>(groups, M, N, K, a, bp,
                k::ConvOutputEpilogue<T, false, RELU>{out<T>(y), strides4(ys), nullptr, geo, in<T>(r)});
}

template <typename T, bool CL>
void conv_backward(const void* dy, const int64_t* dys, const void* x, const int64_t* xs, const void* w,
                   const int64_t* ws, void* gi, const int64_t* gis, void* gw, const int64_t* gws, void* gb,
                   const k::ConvGeometry& geo, int64_t groups) {
  if (gi != nullptr)
    run_gemm<T>(groups, geo.Cg, geo.N * geo.H * geo.W, geo.Og * geo.KH * geo.KW,
                k::ConvWeightTA<T, CL>{in<T>(w), strides4(ws), geo},
                k::ConvGradOutputScatterB<T, CL>{in<T>(dy), strides4(dys), geo},
                k::ConvGradInputEpilogue<T>{out<T>(gi), strides4(gis), geo});
  if (gw != nullptr)
    run_gemm<T>(groups, geo.Og, geo.Cg * geo.KH * geo.KW, geo.N * geo.OH * geo.OW,
                k::ConvGradOutputA<T, CL>{in<T>(dy), strides4(dys), geo},
                k::ConvInputPatchTB<T, CL>{in<T>(x), strides4(xs), geo},
                k::ConvGradWeightEpilogue<T, CL>{out<T>(gw), strides4(gws), geo});
  if (gb != nullptr)
    run_column_sum<k::acc_t<T>, !CL>(geo.N * geo.OH * geo.OW, geo.O,
                                     k::ConvGradOutputColumns<T>{in<T>(dy), strides4(dys), geo.OH, geo.OW},
                                     k::StoreVector<T>{out<T>(gb)});
}

}  // namespace

extern "C" {

void xk_sim_configure(int64_t sm_count, int tensor_cores) {
  const std::lock_guard<std::mutex> lock(g_mutex);
  g_sm_count = sm_count;
  g_tensor_cores = tensor_cores != 0;
}

// fused_linear_relu.cu: x [M, K], w [N, K], b [N] or null, out [M, N], all row-major.
int xk_sim_fused_linear_relu(int dtype, const void* x, const void* w, const void* b, void* y, int64_t M, int64_t N,
                             int64_t K) {
  const std::lock_guard<std::mutex> lock(g_mutex);
  return dispatch(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const k::RowMajorA<T> a{in<T>(x), K};
    const k::TransposedB<T> bt{in<T>(w), K};
    if (b != nullptr)
      run_gemm<T>(1, M, N, K, a, bt, k::LinearReluEpilogue<T, true>{out<T>(y), in<T>(b), N});
    else
      run_gemm<T>(1, M, N, K, a, bt, k::LinearReluEpilogue<T, false>{out<T>(y), nullptr, N});
  });
}

// gi [M, K], gw [N, K], gb [N]: null when not wanted.
int xk_sim_fused_linear_relu_backward(int dtype, const void* dy, const void* y, const void* x, const void* w, void* gi,
                                      void* gw, void* gb, int64_t M, int64_t N, int64_t K) {
  const std::lock_guard<std::mutex> lock(g_mutex);
  return dispatch(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const k::MaskedGrad<T> g{in<T>(dy), in<T>(y), N};
    if (gi != nullptr)
      run_gemm<T>(1, M, K, N, k::MaskedGradA<T>{g}, k::RowMajorB<T>{in<T>(w), K}, k::StoreMatrix<T>{out<T>(gi), K});
    if (gw != nullptr)
      run_gemm<T>(1, N, K, M, k::MaskedGradTA<T>{g}, k::RowMajorB<T>{in<T>(x), K}, k::StoreMatrix<T>{out<T>(gw), K});
    if (gb != nullptr)
      run_column_sum<k::acc_t<T>, false>(M, N, k::MaskedGradColumns<T>{g}, k::StoreVector<T>{out<T>(gb)});
  });
}

// conv2d.cu: 4-D tensors with explicit (n, c, h, w) strides; geo = ConvGeometry's 17 fields in
// order; channels_last selects the CL instantiation (the problem's memory format); residual
// (conv2d_relu only, or null) has y's strides.
int xk_sim_conv2d(int dtype, int channels_last, int relu, const void* x, const int64_t* xs, const void* w,
                  const int64_t* ws, const void* b, const void* r, void* y, const int64_t* ys, const int64_t* geo,
                  int64_t groups) {
  const std::lock_guard<std::mutex> lock(g_mutex);
  const k::ConvGeometry p = geometry(geo);
  return dispatch(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (channels_last)
      relu ? conv_forward<T, true, true>(x, xs, w, ws, b, r, y, ys, p, groups)
           : conv_forward<T, true, false>(x, xs, w, ws, b, r, y, ys, p, groups);
    else
      relu ? conv_forward<T, false, true>(x, xs, w, ws, b, r, y, ys, p, groups)
           : conv_forward<T, false, false>(x, xs, w, ws, b, r, y, ys, p, groups);
  });
}

int xk_sim_conv2d_backward(int dtype, int channels_last, const void* dy, const int64_t* dys, const void* x,
                           const int64_t* xs, const void* w, const int64_t* ws, void* gi, const int64_t* gis, void* gw,
                           const int64_t* gws, void* gb, const int64_t* geo, int64_t groups) {
  const std::lock_guard<std::mutex> lock(g_mutex);
  const k::ConvGeometry p = geometry(geo);
  return dispatch(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (channels_last)
      conv_backward<T, true>(dy, dys, x, xs, w, ws, gi, gis, gw, gws, gb, p, groups);
    else
      conv_backward<T, false>(dy, dys, x, xs, w, ws, gi, gis, gw, gws, gb, p, groups);
  });
}

// layer_norm.cu: x, y [M, N] contiguous; w, b [N] or null; mean, rstd [M] (accumulation type) or null.
int xk_sim_layer_norm(int dtype, const void* x, const void* w, const void* b, void* y, void* mean, void* rstd,
                      int64_t M, int64_t N, double eps) {
  const std::lock_guard<std::mutex> lock(g_mutex);
  const RowLaunch L = row_launch(M, N);
  return dispatch(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const RowsLaunch R = rows_launch(M, N, sizeof(T), {x, w, b, y});
    using Acc = k::acc_t<T>;
    if (R.vecs > 0)
      return with_rows_kernel<LayerNormForwardRows, T>(R, [&](auto kernel) {
        xk_sim::launch(R.grid, R.block, kernel, in<T>(x), in<T>(w), in<T>(b), out<T>(y), out<Acc>(mean), out<Acc>(rstd),
                       M, N, static_cast<Acc>(eps));
      });
    auto kernel = L.block_row ? k::layer_norm_forward_kernel<T, true> : k::layer_norm_forward_kernel<T, false>;
    xk_sim::launch(L.grid, L.block, kernel, in<T>(x), in<T>(w), in<T>(b), out<T>(y), out<Acc>(mean), out<Acc>(rstd), M,
                   N, static_cast<Acc>(eps));
  });
}

int xk_sim_layer_norm_backward(int dtype, const void* dy, const void* x, const void* mean, const void* rstd,
                               const void* w, void* gi, void* gw, void* gb, int64_t M, int64_t N) {
  const std::lock_guard<std::mutex> lock(g_mutex);
  const RowLaunch L = row_launch(M, N);
  return dispatch(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const RowsLaunch R = rows_launch(M, N, sizeof(T), {x, dy, w, gi});
    using Acc = k::acc_t<T>;
    if (gi != nullptr && R.vecs > 0) {
      with_rows_kernel<LayerNormBackwardInputRows, T>(R, [&](auto kernel) {
        xk_sim::launch(R.grid, R.block, kernel, in<T>(dy), in<T>(x), in<Acc>(mean), in<Acc>(rstd), in<T>(w), out<T>(gi),
                       M, N);
      });
    } else if (gi != nullptr) {
      auto kernel =
          L.block_row ? k::layer_norm_backward_input_kernel<T, true> : k::layer_norm_backward_input_kernel<T, false>;
      xk_sim::launch(L.grid, L.block, kernel, in<T>(dy), in<T>(x), in<Acc>(mean), in<Acc>(rstd), in<T>(w), out<T>(gi),
                     M, N);
    }
    if (gw != nullptr)
      run_column_sum<Acc, false>(M, N,
                                 k::LayerNormGradWeightLoad<T>{in<T>(dy), in<T>(x), in<Acc>(mean), in<Acc>(rstd), N},
                                 k::StoreVector<T>{out<T>(gw)});
    if (gb != nullptr)
      run_column_sum<Acc, false>(M, N, k::LayerNormGradBiasLoad<T>{in<T>(dy), N}, k::StoreVector<T>{out<T>(gb)});
  });
}

}  // extern "C"
