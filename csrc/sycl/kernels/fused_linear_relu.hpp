// fused_linear_relu kernels in the portable form (common.hpp): GEMMs with a fused bias + ReLU
// epilogue, the two small kernels of the backward pass (ReLU mask + column sums), and the packing of
// the CPU GEMM's B operand. The table (descriptors with their parameter structs) comes first, the
// bodies after it; each body is templated on the element type T in {float, double, xk::half, xk::bf16}
// (half types accumulate in float).
//
// Every GEMM computes   C[m, n] = epilogue( sum_k A(m, k) * B(k, n) )   for m < M, n < N, k < K,
// with epilogue = (+ bias[n] if BIAS) then (ReLU if RELU), and C row-major with leading dimension
// ldc (linear_gemm_panel also adds a residual R[m, n] between the two where one is given, and can take the bias per
// row, bias[m]: conv2d's 1x1 GEMMs). The
// operands are addressed through strides, so the same kernels serve the forward pass (A = X, B = W^T) and the backward
// pass (dX = G @ W, dW = G^T @ X) without copies of the kernels.
//
// Three GEMM variants; the host picks one per device (fused_linear_relu.cpp):
//  * linear_gemm_panel  — CPU devices. One work-group = one sub-group of 16 lanes = one SIMD
//    vector. Each lane keeps a PanelTile::kRows x kColVecs block of accumulators in registers;
//    the sub-group covers kRows rows x kCols (= 16 * kColVecs) contiguous columns. A is read as
//    uniform scalars (any strides). B is read per column panel p (columns p*kCols ..) at
//    B + p * b_panel_stride + k * ldb + c, unit stride along the panel's columns c: either B
//    in place (b_panel_stride = kCols, ldb = row stride) or packed by the host panel-major,
//    [panels][K][kCols] (b_panel_stride = K * kCols, ldb = kCols), so a panel is one contiguous
//    stream instead of K rows a large power-of-two stride apart (which thrash cache sets).
//    The K loop is blocked (k_block) so a B block stays in cache while the work-group walks its
//    rows; partial sums between K blocks go to `partial` (acc type, leading dimension ldc).
//  * linear_gemm_dot    — CPU devices, few rows. Both operands unit-stride along k (X [M,K] and
//    W [N,K] as given): lanes stride k, each lane keeps DotTile::kRows x kCols partial dot
//    products, one sub-group reduction per output at the end. No weight transpose needed.
//  * linear_gemm_tiled  — GPU devices. 16x16 work-items share 64x64 output tiles; A and B
//    K-slices are staged in work-group local memory (work_group_static) between barriers.
//
// No data-dependent addressing: row/column clamps are uniform ternaries, lane masks guard
// loads/stores (never sycl::min/max or arrays of pointers, which make the OpenCL CPU vectorizer
// emit gathers). Products are accumulated with explicit sycl::fma (the build disables automatic
// contraction; the fused multiply-add here is deliberate and the same on every device).
#pragma once
#include "common.hpp"

namespace xk {

// ------------------------------------------------------------------ geometry (shared with the host)
// CPU register blocking, per lane width S (the sub-group: one native vector of fp32).
// S = 16 (AVX-512, 32 zmm): 6x4 fp32 accumulator vectors + 4 B vectors + 1 broadcast = 29 registers; fp64
// needs two registers per 16 lanes, so it keeps 6x2 accumulator vectors (24 registers).
// S = 8 (AVX2, 16 ymm): 6x2 fp32 accumulators + 2 B vectors + 1 broadcast = 15 registers; fp64 (two ymm per
// 8 lanes) 6x1 + 1 + 1 = 15. (The S = 16 tile on AVX2 needed 58 ymm and spilled every accumulator.)
// The packed B layout (pack_linear_weight, linear_pack_columns in shapes.h) is that of S = 16: 64 columns
// per panel (32 for fp64); the S = 8 kernels read it as 4 sub-panels (b_panel_cols).
template <typename T, int S = 16>
struct PanelTile {
  static_assert(S == 16 || S == 8, "lane widths of the CPU panel kernel: 16 (AVX-512) or 8 (AVX2)");
  static constexpr int kSubGroup = S;
  static constexpr int kRows = 6;
  static constexpr int kColVecs = (std::is_same_v<T, double> ? 2 : 4) / (16 / S);
  static constexpr int kCols = kSubGroup * kColVecs;
  static constexpr int kRowTilesPerGroup = 8;  // rows per work-group = 48: B block reuse across rows
};
// K block of the panel kernel: 512 rows of a 64-column fp32 B panel = 128 KiB (fits L2 with room).
inline constexpr int64_t kPanelKBlock = 512;

// Dot kernel, per lane width S: S = 16 (AVX-512): 4x4 accumulators (16 vectors) + 4 + 4 loaded vectors; fp64
// 2x4 (two registers each). S = 8 (AVX2): 4x2 + 4 + 2 = 14 ymm; fp64 (two ymm each) 2x2: 8 + 4 + 4 = 16.
// One row (M = 1, a matrix-vector product: the weight streamed once from memory, nothing to reuse across rows):
// 1 x 8 accumulators + 8 + 1 loaded vectors (S = 16; fp64 1 x 4, two registers each), S = 8: 1 x 6 + 6 + 1 = 13
// ymm (fp64 1 x 3: 14). The rows of the multi-row tile were the one row repeated, 4x the FMAs for nothing.
template <typename T, int S = 16>
struct DotTile {
  static_assert(S == 16 || S == 8, "lane widths of the CPU dot kernel: 16 (AVX-512) or 8 (AVX2)");
  static constexpr int kSubGroup = S;
  static constexpr int kRows = std::is_same_v<T, double> ? 2 : 4;
  static constexpr int kCols = S == 16 ? 4 : 2;
  static constexpr int kSingleRowCols = (S == 16 ? 8 : 6) / (std::is_same_v<T, double> ? 2 : 1);
  // Rows and columns of a work-group's tile for an M-row problem.
  static constexpr int rows(int64_t M) { return M == 1 ? 1 : kRows; }
  static constexpr int cols(int64_t M) { return M == 1 ? kSingleRowCols : kCols; }
};

// GPU tiling: 16x16 = 256 work-items (within every GPU's work-group limit) share a 64x64 output
// tile, 4x4 accumulators per work-item (register reuse of each staged value 4x); K slices of 16
// make the two staged tiles 2 x 16 x 64 acc values = 8 KiB (fp32) of local memory per work-group.
struct TiledTile {
  static constexpr int kLocal = 16;
  static constexpr int kTile = 64;
  static constexpr int kPerItem = kTile / kLocal;
  static constexpr int kKSlice = 16;
};

// ------------------------------------------------------------------ the table (kernel descriptors)
template <typename T>
struct linear_gemm_panel_params {
  const T* A;
  int64_t a_rs, a_ks;
  const T* B;
  int64_t ldb, b_panel_stride;
  const T* bias;
  T* C;
  int64_t ldc;
  acc_t<T>* partial;
  int64_t M, N, K, k_block, row_groups;
  int64_t b_panel_cols;  // columns per B panel in memory (b_panel_stride apart); a multiple of the tile's
  int64_t accumulate;    // 1: C += A @ B (C holds earlier partial sums; T is the accumulation type), 0: C = ...
  const T* res;          // added after the bias, before ReLU, at C's offsets (conv2d's 1x1 GEMM); null: none
  int64_t bias_rows;     // 1: the bias is per row, bias[m] (conv2d's NCHW 1x1 GEMM: rows are output channels);
                         // 0: per column, bias[n]
  // A's rows as pixels (PanelRows): a_ow > 0: row m is pixel (n, oh, ow) of an [N, OH, OW] grid (ow fastest,
  // a_ohw = OH * OW) at A + n * a_sn + oh * a_sh + ow * a_rs (a strided 1x1 convolution's input in NHWC memory);
  // a_ow == 0: row m at A + m * a_rs.
  int64_t a_ow, a_ohw, a_sn, a_sh;
  // Work-group order: column panels in blocks of panel_block; within a block, consecutive work-groups walk the
  // block's panels for one row group, then the next row group (A's rows stay in cache across the block's panels,
  // the block's B panels across the row groups). 1: the row groups of one panel, then the next panel.
  int64_t panel_block;
  // Split K (the long reductions of conv2d's grad_weight): k_split > 0 cuts K into ceil(K / k_split) ranges of
  // k_split (a multiple of k_block; the last may be shorter), one set of work-groups per range, ranges outermost.
  // Range 0 writes C as without a split (accumulate included); range s > 0 writes its own sums, from zero, to
  // splits + (s - 1) * M * ldc (T is then the accumulation type and partial is C), which linear_column_sum then
  // adds to C in range order. 0: one range.
  int64_t k_split;
  T* splits;
  // C's rows as pixels, like A's (PanelRows, ldc the pixel stride): c_ow > 0: column n of row m, pixel (b, oh, ow),
  // at C + b * c_sn + oh * c_sh + ow * ldc + n * c_cs (an NCHW output: ldc 1, c_cs = OH * OW; the stores scatter
  // across the lanes); res at the same offsets. c_ow == 0: at C + m * ldc + n. The host neither splits nor blocks
  // K with c_ow > 0 (no partial sums).
  int64_t c_ow, c_ohw, c_sn, c_sh, c_cs;
};
// S: lane width (PanelTile); the tile fits AVX-512's register file at 16 lanes, AVX2's at 8.
template <bool BIAS, bool RELU, int S = 16>
struct linear_gemm_panel {
  static constexpr int dims = 1;
  static constexpr int sub_group = S;
  static constexpr int vector_registers = S == 8 ? 16 : 32;
  using types = float_types;
  template <typename T>
  using params = linear_gemm_panel_params<T>;
  template <typename T>
  static void run(item_arg<1> ia, const params<T>& p);
};

// The AVX2 (S = 8) panel GEMM for very few rows (the decode step: GemmConfig::kWideMaxRows), forward epilogues (ReLU,
// with or without the bias per column): one work-group per kWideTiles of the panel kernel's 16-column tiles (one
// 64-column packed panel row in fp32, 32 in fp64), each of its rows a single-row tile over that whole width, rows one
// at a time. linear_gemm_panel's AVX2 tile covers a quarter of a packed row, so each of its work-groups reads 64 of
// every 256 bytes of B; this one reads B as one stream. Same params; the host passes a dense C, no K split (k_split
// 0), no pixel rows for C, and B's columns contiguous across a work-group's width (packed panels of a multiple of it,
// or B in place). The sums and their order are those of linear_gemm_panel's tiles (rows bit-identical to the same
// rows in a larger M). A separate kernel: the same loop as a branch of linear_gemm_panel made the whole AVX2 bf16
// kernel 12x slower (the run-time compiler spilled its accumulators).
inline constexpr int kWideTiles = 4;
template <bool BIAS, bool RELU>
struct linear_gemm_row {
  static constexpr int dims = 1;
  static constexpr int sub_group = 8;
  static constexpr int vector_registers = 16;
  using types = float_types;
  template <typename T>
  using params = linear_gemm_panel_params<T>;
  template <typename T>
  static void run(item_arg<1> ia, const params<T>& p);
};

template <typename T>
struct linear_pack_panels_params {
  const T* B;
  int64_t b_ks, b_ns;
  T* packed;
  int64_t K, N, k_chunk, k_chunks;
};
struct linear_pack_panels {
  static constexpr int dims = 1;
  static constexpr int sub_group = 16;
  using types = float_types;
  template <typename T>
  using params = linear_pack_panels_params<T>;
  template <typename T>
  static void run(item_arg<1> ia, const params<T>& p);
};

template <typename T>
struct linear_gemm_dot_params {
  const T* A;
  int64_t lda;
  const T* Bt;
  int64_t ldb;
  const T* bias;
  T* C;
  int64_t ldc, M, N, K, row_tiles;
};
template <bool BIAS, bool RELU, int S = 16>
struct linear_gemm_dot {
  static constexpr int dims = 1;
  static constexpr int sub_group = S;
  static constexpr int vector_registers = S == 8 ? 16 : 32;
  using types = float_types;
  template <typename T>
  using params = linear_gemm_dot_params<T>;
  template <typename T>
  static void run(item_arg<1> ia, const params<T>& p);
};

template <typename T>
struct linear_gemm_tiled_params {
  const T* A;
  int64_t a_rs, a_ks;
  const T* B;
  int64_t b_ks, b_ns;
  const T* bias;
  T* C;
  int64_t ldc, M, N, K;
};
template <bool BIAS, bool RELU>
struct linear_gemm_tiled {
  static constexpr int dims = 2;
  using types = float_types;
  template <typename T>
  using params = linear_gemm_tiled_params<T>;
  // The A and B K-slices staged in work-group local memory.
  template <typename T>
  struct local_t {
    acc_t<T> a[TiledTile::kKSlice][TiledTile::kTile];
    acc_t<T> b[TiledTile::kKSlice][TiledTile::kTile];
  };
  template <typename T>
  static void run(item_arg<2> ia, const params<T>& p, local_t<T>& scratch);
};

template <typename T>
struct linear_relu_grad_params {
  const T* grad_output;
  const T* output;
  T* grad_pre;
  acc_t<T>* partial;
  int64_t M, N, rows_per_chunk;
};
template <bool COLSUM>
struct linear_relu_grad {
  static constexpr int dims = 2;
  using types = float_types;
  template <typename T>
  using params = linear_relu_grad_params<T>;
  template <typename T>
  static void run(item_arg<2> ia, const params<T>& p);
};

template <typename T>
struct linear_column_sum_params {
  const acc_t<T>* partial;
  T* out;
  int64_t R, N;
  int64_t accumulate;  // 1: out[n] = out[n] + the rows' sum, added row by row in order (a split GEMM's ranges)
};
struct linear_column_sum {
  static constexpr int dims = 1;
  using types = float_types;
  template <typename T>
  using params = linear_column_sum_params<T>;
  template <typename T>
  static void run(item_arg<1> ia, const params<T>& p);
};

// ------------------------------------------------------------------ CPU: register-blocked panel
namespace linear_detail {

template <typename T>
inline acc_t<T> ld(const T* p) {
  return to_acc<T>(*p);
}

// Where row m of the panel GEMM's A starts (linear_gemm_panel_params: a_rs, a_ow, a_ohw, a_sn, a_sh).
struct PanelRows {
  int64_t rs, ow, ohw, sn, sh;
  int64_t offset(int64_t m) const {
    if (ow == 0) return m * rs;
    const int64_t n = m / ohw, r = m - n * ohw, oh = r / ow;
    return n * sn + oh * sh + (r - oh * ow) * rs;
  }
};

// One ROWS x kCols tile (ROWS 0: kRows) at rows m0.., columns n0.., K range [k0, k1). MASK_N: the tile overhangs N.
// ROWS 1 is the single-row tile of a dense row of C whose tile would hold one row (M = 1, the decode step of a language
// model, or a last row past a multiple of kRows): kRows - 1 rows of FMAs fewer, the same sums in the same order as
// the row gets in a kRows tile, so its results are bit-identical to those of the same row in a larger M. PIXEL_OUT: C's
// rows are pixels (c_rows) and its columns c_cs apart (an NCHW output; the stores scatter); otherwise row m of C
// starts at m * c_rows.rs and its columns are contiguous (vector loads and stores: a separate instantiation, so
// that the dense path's addresses stay visibly consecutive to the vectorizer; a run-time select between the two
// made every channels_last 1x1 GEMM 7-29 % slower).
template <typename T, int S_, bool BIAS, bool RELU, bool MASK_N, bool PIXEL_OUT, int ROWS = 0, int VECS = 0>
inline void panel_tile(const T* A, PanelRows a_rows, int64_t a_ks, const T* Bp, int64_t ldb, const T* bias,
                       bool bias_rows, const T* res, T* C, PanelRows c_rows, int64_t c_cs, acc_t<T>* partial, int64_t M,
                       int64_t N, int64_t m0, int64_t n0, int64_t k0, int64_t k1, bool first, bool last, int lane) {
  using acc = acc_t<T>;
  using G = PanelTile<T, S_>;
  constexpr int R = ROWS > 0 ? ROWS : G::kRows, V = VECS > 0 ? VECS : G::kColVecs, S = G::kSubGroup;
  bool col_ok[V];
  XK_UNROLL
  for (int j = 0; j < V; ++j) col_ok[j] = !MASK_N || (n0 + j * S + lane < N);
  int64_t row[R];  // uniform; rows past M repeat the last row (computed, never stored)
  XK_UNROLL
  for (int i = 0; i < R; ++i) row[i] = m0 + i < M ? m0 + i : M - 1;
  const T* a_row[R];  // uniform
  XK_UNROLL
  for (int i = 0; i < R; ++i) a_row[i] = A + a_rows.offset(row[i]);
  int64_t c_row[R];  // uniform: where row i's outputs start (C, partial, res) when they are pixels
  XK_UNROLL
  for (int i = 0; i < R; ++i) c_row[i] = PIXEL_OUT ? c_rows.offset(row[i]) : 0;
  const int64_t ldc = c_rows.rs;
  auto at = [&](int i, int64_t n) -> int64_t {  // the offset of C's element (row i of the tile, column n)
    if constexpr (PIXEL_OUT)
      return c_row[i] + n * c_cs;
    else
      return row[i] * ldc + n;
  };

  acc c[R][V];
  XK_UNROLL
  for (int i = 0; i < R; ++i) XK_UNROLL
  for (int j = 0; j < V; ++j) {
    c[i][j] = acc(0);
    if (!first && col_ok[j]) c[i][j] = partial[at(i, n0 + j * S + lane)];
  }

  for (int64_t k = k0; k < k1; ++k) {
    const T* b_row = Bp + k * ldb + lane;
    acc b[V];
    XK_UNROLL
    for (int j = 0; j < V; ++j) b[j] = col_ok[j] ? ld(b_row + j * S) : acc(0);
    XK_UNROLL
    for (int i = 0; i < R; ++i) {
      const acc a = ld(a_row[i] + k * a_ks);
      XK_UNROLL
      for (int j = 0; j < V; ++j) c[i][j] = sycl::fma(a, b[j], c[i][j]);
    }
  }

  XK_UNROLL
  for (int i = 0; i < R; ++i) {
    if (m0 + i >= M) break;  // uniform
    // A row bias is one uniform value per row (a broadcast load); a column bias is a vector load per lane.
    const acc row_bias = BIAS && last && bias_rows ? ld(bias + row[i]) : acc(0);
    XK_UNROLL
    for (int j = 0; j < V; ++j) {
      if (!col_ok[j]) continue;
      const int64_t n = n0 + j * S + lane;
      if (!last) {
        partial[at(i, n)] = c[i][j];
        continue;
      }
      acc v = c[i][j];
      if constexpr (BIAS) v = v + (bias_rows ? row_bias : ld(bias + n));
      if (res != nullptr) v = v + ld(res + at(i, n));
      if constexpr (RELU) v = v < acc(0) ? acc(0) : v;  // NaN propagates, as torch.relu
      C[at(i, n)] = from_acc<T>(v);
    }
  }
}

}  // namespace linear_detail

// Launch: 1-D, local size 16, one work-group per (row group, column panel), ordered by blocks of
// panel_block panels (the params): within a block the panels vary fastest, then the row groups, so
// consecutive work-groups share A's rows and a block's B panels stay in cache across the row groups
// (panel_block 1: the row groups of one panel, then the next); with k_split, that whole order once per K
// range, ranges outermost (a range's rows of A and B stay in cache across its work-groups). `partial` may
// alias C when T is the accumulation type; it is only touched when a K range is longer than k_block.
template <bool BIAS, bool RELU, int S>
template <typename T>
void linear_gemm_panel<BIAS, RELU, S>::run(item_arg<1> ia, const params<T>& p) {
  const auto A = p.A;
  const auto a_rs = p.a_rs;
  const auto a_ks = p.a_ks;
  const auto B = p.B;
  const auto ldb = p.ldb;
  const auto b_panel_stride = p.b_panel_stride;
  const auto bias = p.bias;
  const auto ldc = p.ldc;
  const auto M = p.M;
  const auto N = p.N;
  const auto K = p.K;
  const auto k_block = p.k_block;
  const auto row_groups = p.row_groups;
  const auto b_panel_cols = p.b_panel_cols;
  const bool bias_rows = p.bias_rows != 0;
  using G = PanelTile<T, S>;
  const auto it = item(ia);
  const int lane = static_cast<int>(it.get_local_id(0));
  int64_t g = static_cast<int64_t>(it.get_group(0));
  const int64_t panels = (N + G::kCols - 1) / G::kCols;
  // The K range (split) of this work-group, and where its sums go.
  const int64_t split = p.k_split > 0 ? g / (row_groups * panels) : 0;
  const int64_t k_begin = split * p.k_split, k_end = p.k_split > 0 && K - k_begin > p.k_split ? k_begin + p.k_split : K;
  T* const C = split == 0 ? p.C : p.splits + (split - 1) * M * ldc;
  acc_t<T>* const partial = split == 0 ? p.partial : reinterpret_cast<acc_t<T>*>(C);
  const bool accumulate = split == 0 && p.accumulate != 0;
  g -= split * (row_groups * panels);
  const int64_t block = g / (row_groups * p.panel_block), g_in = g - block * (row_groups * p.panel_block);
  const int64_t block_width =
      panels - block * p.panel_block < p.panel_block ? panels - block * p.panel_block : p.panel_block;
  const int64_t rg = g_in / block_width, panel = block * p.panel_block + g_in % block_width;
  const linear_detail::PanelRows a_rows{a_rs, p.a_ow, p.a_ohw, p.a_sn, p.a_sh};
  const linear_detail::PanelRows c_rows{ldc, p.c_ow, p.c_ohw, p.c_sn, p.c_sh};
  const int64_t c_cs = p.c_ow > 0 ? p.c_cs : 1;
  const int64_t n0 = panel * G::kCols;
  const T* Bp = B + (n0 / b_panel_cols) * b_panel_stride + n0 % b_panel_cols;
  const int64_t row_begin = rg * (G::kRows * G::kRowTilesPerGroup);
  const int64_t row_span = G::kRows * G::kRowTilesPerGroup;
  const int64_t row_end = M - row_begin < row_span ? M : row_begin + row_span;
  const bool full_n = n0 + G::kCols <= N;
  for (int64_t k0 = k_begin; k0 < k_end; k0 += k_block) {
    const int64_t k1 = k_end - k0 <= k_block ? k_end : k0 + k_block;
    const bool first = k0 == k_begin && !accumulate, last = k1 == k_end;
    for (int64_t m0 = row_begin; m0 < row_end; m0 += G::kRows) {
      if (p.c_ow > 0 && full_n)  // an NCHW output (uniform)
        linear_detail::panel_tile<T, S, BIAS, RELU, false, true>(A, a_rows, a_ks, Bp, ldb, bias, bias_rows, p.res, C,
                                                                 c_rows, c_cs, partial, M, N, m0, n0, k0, k1, first,
                                                                 last, lane);
      else if (p.c_ow > 0)
        linear_detail::panel_tile<T, S, BIAS, RELU, true, true>(A, a_rows, a_ks, Bp, ldb, bias, bias_rows, p.res, C,
                                                                c_rows, c_cs, partial, M, N, m0, n0, k0, k1, first,
                                                                last, lane);
      else if (full_n && row_end - m0 == 1)  // one row left (uniform)
        linear_detail::panel_tile<T, S, BIAS, RELU, false, false, 1>(A, a_rows, a_ks, Bp, ldb, bias, bias_rows, p.res,
                                                                     C, c_rows, c_cs, partial, M, N, m0, n0, k0, k1,
                                                                     first, last, lane);
      else if (full_n)
        linear_detail::panel_tile<T, S, BIAS, RELU, false, false>(A, a_rows, a_ks, Bp, ldb, bias, bias_rows, p.res, C,
                                                                  c_rows, c_cs, partial, M, N, m0, n0, k0, k1, first,
                                                                  last, lane);
      else
        linear_detail::panel_tile<T, S, BIAS, RELU, true, false>(A, a_rows, a_ks, Bp, ldb, bias, bias_rows, p.res, C,
                                                                 c_rows, c_cs, partial, M, N, m0, n0, k0, k1, first,
                                                                 last, lane);
    }
  }
}

// Launch: 1-D, local size 8, one work-group per kWideTiles * PanelTile<T, 8>::kCols columns; each computes all M rows.
template <bool BIAS, bool RELU>
template <typename T>
void linear_gemm_row<BIAS, RELU>::run(item_arg<1> ia, const params<T>& p) {
  using G = PanelTile<T, 8>;
  constexpr int kVecs = G::kColVecs * kWideTiles;
  constexpr int64_t kWidth = int64_t{G::kCols} * kWideTiles;
  const auto M = p.M;
  const auto N = p.N;
  const auto K = p.K;
  const auto k_block = p.k_block;
  const bool bias_rows = p.bias_rows != 0;
  const auto it = item(ia);
  const int lane = static_cast<int>(it.get_local_id(0));
  const int64_t n0 = static_cast<int64_t>(it.get_group(0)) * kWidth;
  const T* Bp = p.B + (n0 / p.b_panel_cols) * p.b_panel_stride + n0 % p.b_panel_cols;
  const linear_detail::PanelRows a_rows{p.a_rs, p.a_ow, p.a_ohw, p.a_sn, p.a_sh};
  const linear_detail::PanelRows c_rows{p.ldc, 0, 0, 0, 0};
  const bool full_n = n0 + kWidth <= N;
  for (int64_t k0 = 0; k0 < K; k0 += k_block) {
    const int64_t k1 = K - k0 <= k_block ? K : k0 + k_block;
    const bool first = k0 == 0 && p.accumulate == 0, last = k1 == K;
    for (int64_t m = 0; m < M; ++m) {
      if (full_n)
        linear_detail::panel_tile<T, 8, BIAS, RELU, false, false, 1, kVecs>(p.A, a_rows, p.a_ks, Bp, p.ldb, p.bias,
                                                                            bias_rows, p.res, p.C, c_rows, 1, p.partial,
                                                                            M, N, m, n0, k0, k1, first, last, lane);
      else
        linear_detail::panel_tile<T, 8, BIAS, RELU, true, false, 1, kVecs>(p.A, a_rows, p.a_ks, Bp, p.ldb, p.bias,
                                                                           bias_rows, p.res, p.C, c_rows, 1, p.partial,
                                                                           M, N, m, n0, k0, k1, first, last, lane);
    }
  }
}

// Packs a GEMM B operand for linear_gemm_panel: packed[p][k][c] = B[k * b_ks + n * b_ns] with
// n = p * kCols + c, zero for n >= N. With b_ns == 1 (B rows contiguous, the backward GEMMs) lanes walk c
// and loads and stores are whole vectors. With b_ks == 1 (W^T in the forward pass) the copy is a transpose
// that cannot avoid one strided side: lanes walk k, loads are whole vectors and the stores scatter (below).
// Any other strides: lanes walk c and the loads gather.
// Launch: 1-D, local size 16, one work-group per (k chunk, panel), k chunks fastest.
template <typename T>
void linear_pack_panels::run(item_arg<1> ia, const params<T>& p) {
  const auto B = p.B;
  const auto b_ks = p.b_ks;
  const auto b_ns = p.b_ns;
  const auto packed = p.packed;
  const auto K = p.K;
  const auto N = p.N;
  const auto k_chunk = p.k_chunk;
  const auto k_chunks = p.k_chunks;
  using G = PanelTile<T>;
  constexpr int V = G::kColVecs, S = G::kSubGroup;
  const auto it = item(ia);
  const int lane = static_cast<int>(it.get_local_id(0));
  const int64_t g = static_cast<int64_t>(it.get_group(0));
  const int64_t panel = g / k_chunks, k0 = (g % k_chunks) * k_chunk;
  const int64_t k1 = K - k0 < k_chunk ? K : k0 + k_chunk;
  const int64_t n0 = panel * G::kCols;
  const T zero = from_acc<T>(acc_t<T>(0));
  bool ok[V];
  XK_UNROLL
  for (int j = 0; j < V; ++j) ok[j] = n0 + j * S + lane < N;
  T* dst = packed + panel * K * G::kCols + lane;
  if (b_ns == 1) {
    const T* src = B + n0 + lane;
    for (int64_t k = k0; k < k1; ++k) XK_UNROLL
    for (int j = 0; j < V; ++j) dst[k * G::kCols + j * S] = ok[j] ? src[k * b_ks + j * S] : zero;
  } else if (b_ks == 1) {
    // W^T (k contiguous): lanes over k instead. A load is then one cache line of column n (16 consecutive k)
    // and a store scatters over 16 packed rows kCols apart, all inside one 4 KiB block of the panel. Lanes
    // over n read 16 columns b_ns apart per load: with a power-of-two b_ns (1024 input features) those lines
    // all fall into the same L1 sets and evict each other before the next k reuses them.
    T* out = packed + panel * K * G::kCols;
    const T* col = B + n0 * b_ns;
    for (int64_t kb = k0; kb < k1; kb += S) {
      const int64_t k = kb + lane;
      if (kb + S <= k1) {  // uniform: no masked stores (vmaskmovps is microcoded on AMD CPUs)
        for (int c = 0; c < G::kCols; ++c) {
          const bool in = n0 + c < N;  // uniform; columns past N read column n0 and store 0
          out[k * G::kCols + c] = in ? col[(in ? c : 0) * b_ns + k] : zero;
        }
      } else if (k < k1) {
        for (int c = 0; c < G::kCols; ++c) {
          const bool in = n0 + c < N;  // uniform; columns past N read column n0 and store 0
          out[k * G::kCols + c] = in ? col[(in ? c : 0) * b_ns + k] : zero;
        }
      }
    }
  } else {
    const T* src = B + (n0 + lane) * b_ns;
    for (int64_t k = k0; k < k1; ++k) XK_UNROLL
    for (int j = 0; j < V; ++j) dst[k * G::kCols + j * S] = ok[j] ? src[k * b_ks + j * S * b_ns] : zero;
  }
}

// ------------------------------------------------------------------ CPU: dot products along k
// C[m, n] = epilogue( sum_k A[m * lda + k] * Bt[n * ldb + k] ).
// Launch: 1-D, local size 16, one work-group per (row tile, column tile); row tiles fastest.
namespace linear_detail {
// One R x Q tile of linear_gemm_dot at rows m0.., columns n0.. (see the kernel).
template <typename T, int S, int R, int Q, bool BIAS, bool RELU>
inline void dot_tile(const sycl::nd_item<1>& it, const linear_gemm_dot_params<T>& p, int64_t m0, int64_t n0) {
  const auto A = p.A;
  const auto lda = p.lda;
  const auto Bt = p.Bt;
  const auto ldb = p.ldb;
  const auto M = p.M;
  const auto N = p.N;
  const auto K = p.K;
  using acc = acc_t<T>;
  const int lane = static_cast<int>(it.get_local_id(0));
  int64_t row[R], col[Q];  // uniform clamps; overhanging rows/columns are computed, never stored
  XK_UNROLL
  for (int i = 0; i < R; ++i) row[i] = m0 + i < M ? m0 + i : M - 1;
  XK_UNROLL
  for (int j = 0; j < Q; ++j) col[j] = n0 + j < N ? n0 + j : N - 1;

  acc c[R][Q];
  XK_UNROLL
  for (int i = 0; i < R; ++i) XK_UNROLL
  for (int j = 0; j < Q; ++j) c[i][j] = acc(0);

  const int64_t k_full = K - K % S;
  for (int64_t k0 = 0; k0 < k_full; k0 += S) {
    acc a[R], b[Q];
    XK_UNROLL
    for (int i = 0; i < R; ++i) a[i] = ld(A + row[i] * lda + k0 + lane);
    XK_UNROLL
    for (int j = 0; j < Q; ++j) b[j] = ld(Bt + col[j] * ldb + k0 + lane);
    XK_UNROLL
    for (int i = 0; i < R; ++i) XK_UNROLL
    for (int j = 0; j < Q; ++j) c[i][j] = sycl::fma(a[i], b[j], c[i][j]);
  }
  if (k_full < K) {
    const bool ok = k_full + lane < K;
    acc a[R], b[Q];
    XK_UNROLL
    for (int i = 0; i < R; ++i) a[i] = ok ? ld(A + row[i] * lda + k_full + lane) : acc(0);
    XK_UNROLL
    for (int j = 0; j < Q; ++j) b[j] = ok ? ld(Bt + col[j] * ldb + k_full + lane) : acc(0);
    XK_UNROLL
    for (int i = 0; i < R; ++i) XK_UNROLL
    for (int j = 0; j < Q; ++j) c[i][j] = sycl::fma(a[i], b[j], c[i][j]);
  }

  XK_UNROLL
  for (int i = 0; i < R; ++i) XK_UNROLL
  for (int j = 0; j < Q; ++j) {
    acc v = lanes_sum(it, c[i][j]);  // the work-group's S lanes (one sub-group under DPC++)
    if constexpr (BIAS) v = v + ld(p.bias + col[j]);
    if constexpr (RELU) v = v < acc(0) ? acc(0) : v;
    if (lane == 0 && m0 + i < M && n0 + j < N) p.C[row[i] * p.ldc + col[j]] = from_acc<T>(v);
  }
}
}  // namespace linear_detail

// C[m, n] = epilogue( sum_k A[m * lda + k] * Bt[n * ldb + k] ).
// Launch: 1-D, local size 16, one work-group per (row tile, column tile) of DotTile::rows(M) x cols(M); row tiles
// fastest. One row (M = 1) takes the single-row tile (more columns, no repeated row), a uniform branch.
template <bool BIAS, bool RELU, int S_>
template <typename T>
void linear_gemm_dot<BIAS, RELU, S_>::run(item_arg<1> ia, const params<T>& p) {
  using G = DotTile<T, S_>;
  const auto it = item(ia);
  const int64_t g = static_cast<int64_t>(it.get_group(0));
  if (G::rows(p.M) == 1) {
    linear_detail::dot_tile<T, S_, 1, G::kSingleRowCols, BIAS, RELU>(it, p, 0, g * G::kSingleRowCols);
    return;
  }
  const auto row_tiles = p.row_tiles;
  const int64_t m0 = (g % row_tiles) * G::kRows, n0 = (g / row_tiles) * G::kCols;
  linear_detail::dot_tile<T, S_, G::kRows, G::kCols, BIAS, RELU>(it, p, m0, n0);
}

// ------------------------------------------------------------------ GPU: local-memory tiles
// C[m, n] = epilogue( sum_k A[m * a_rs + k * a_ks] * B[k * b_ks + n * b_ns] ).
// Launch: 2-D, local {16, 16}, global {ceil(M/64)*16, ceil(N/64)*16}.
template <bool BIAS, bool RELU>
template <typename T>
void linear_gemm_tiled<BIAS, RELU>::run(item_arg<2> ia, const params<T>& p, local_t<T>& scratch) {
  const auto A = p.A;
  const auto a_rs = p.a_rs;
  const auto a_ks = p.a_ks;
  const auto B = p.B;
  const auto b_ks = p.b_ks;
  const auto b_ns = p.b_ns;
  const auto bias = p.bias;
  const auto C = p.C;
  const auto ldc = p.ldc;
  const auto M = p.M;
  const auto N = p.N;
  const auto K = p.K;
  using acc = acc_t<T>;
  using G = TiledTile;
  constexpr int L = G::kLocal, TILE = G::kTile, P = G::kPerItem, KS = G::kKSlice;
  acc(&as)[KS][TILE] = scratch.a;
  acc(&bs)[KS][TILE] = scratch.b;

  const auto it = item(ia);
  const int ty = static_cast<int>(it.get_local_id(0)), tx = static_cast<int>(it.get_local_id(1));
  const int tid = ty * L + tx;
  const int64_t m0 = static_cast<int64_t>(it.get_group(0)) * TILE;
  const int64_t n0 = static_cast<int64_t>(it.get_group(1)) * TILE;

  acc c[P][P];
  XK_UNROLL
  for (int i = 0; i < P; ++i) XK_UNROLL
  for (int j = 0; j < P; ++j) c[i][j] = acc(0);

  for (int64_t k0 = 0; k0 < K; k0 += KS) {
    // Each of the 256 work-items stages 4 elements of each tile (64 x 16 values).
    XK_UNROLL
    for (int r = 0; r < (TILE * KS) / (L * L); ++r) {
      const int e = tid + r * L * L;
      const int a_row = e / KS, a_k = e % KS;  // A slice: consecutive work-items walk k
      const int64_t m = m0 + a_row, ka = k0 + a_k;
      as[a_k][a_row] = (m < M && ka < K) ? linear_detail::ld(A + m * a_rs + ka * a_ks) : acc(0);
      const int b_k = e / TILE, b_col = e % TILE;  // B slice: consecutive work-items walk n
      const int64_t n = n0 + b_col, kb = k0 + b_k;
      bs[b_k][b_col] = (n < N && kb < K) ? linear_detail::ld(B + kb * b_ks + n * b_ns) : acc(0);
    }
    sycl::group_barrier(it.get_group());
    XK_UNROLL
    for (int kk = 0; kk < KS; ++kk) {
      acc a[P], b[P];
      XK_UNROLL
      for (int i = 0; i < P; ++i) a[i] = as[kk][ty + i * L];
      XK_UNROLL
      for (int j = 0; j < P; ++j) b[j] = bs[kk][tx + j * L];
      XK_UNROLL
      for (int i = 0; i < P; ++i) XK_UNROLL
      for (int j = 0; j < P; ++j) c[i][j] = sycl::fma(a[i], b[j], c[i][j]);
    }
    sycl::group_barrier(it.get_group());
  }

  XK_UNROLL
  for (int i = 0; i < P; ++i) {
    const int64_t m = m0 + ty + i * L;
    XK_UNROLL
    for (int j = 0; j < P; ++j) {
      const int64_t n = n0 + tx + j * L;
      if (m >= M || n >= N) continue;
      acc v = c[i][j];
      if constexpr (BIAS) v = v + linear_detail::ld(bias + n);
      if constexpr (RELU) v = v < acc(0) ? acc(0) : v;
      C[m * ldc + n] = from_acc<T>(v);
    }
  }
}

// ------------------------------------------------------------------ backward helpers
// grad_pre[m, n] = !(output[m, n] <= 0) ? grad_output[m, n] : 0 (all [M, N] contiguous): the mask
// of torch.relu's backward, so a NaN output passes its gradient on. With COLSUM,
// also the column sums of grad_pre over the rows [chunk * rows_per_chunk, ...) into
// partial[chunk, n] (acc type); linear_column_sum finishes grad_bias from them.
// Launch: 2-D, global {chunks, ceil(N/16)*16}, local {1, 16}.
template <bool COLSUM>
template <typename T>
void linear_relu_grad<COLSUM>::run(item_arg<2> ia, const params<T>& p) {
  const auto grad_output = p.grad_output;
  const auto output = p.output;
  const auto grad_pre = p.grad_pre;
  const auto partial = p.partial;
  const auto M = p.M;
  const auto N = p.N;
  const auto rows_per_chunk = p.rows_per_chunk;
  using acc = acc_t<T>;
  const auto it = item(ia);
  const int64_t chunk = static_cast<int64_t>(it.get_global_id(0));
  const int64_t n = static_cast<int64_t>(it.get_global_id(1));
  if (n >= N) return;
  const int64_t r0 = chunk * rows_per_chunk;
  const int64_t r1 = M - r0 < rows_per_chunk ? M : r0 + rows_per_chunk;
  acc s = acc(0);
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t i = r * N + n;
    const T g = !(linear_detail::ld(output + i) <= acc(0)) ? grad_output[i] : from_acc<T>(acc(0));
    grad_pre[i] = g;
    if constexpr (COLSUM) s = s + to_acc<T>(g);
  }
  if constexpr (COLSUM) partial[chunk * N + n] = s;
}

// out[n] = sum_r partial[r, n], rounded once to T. Launch: 1-D, global ceil(N/16)*16, local 16.
template <typename T>
void linear_column_sum::run(item_arg<1> ia, const params<T>& p) {
  const auto partial = p.partial;
  const auto out = p.out;
  const auto R = p.R;
  const auto N = p.N;
  using acc = acc_t<T>;
  const auto it = item(ia);
  const int64_t n = static_cast<int64_t>(it.get_global_id(0));
  if (n >= N) return;
  acc s = p.accumulate != 0 ? to_acc<T>(out[n]) : acc(0);
  for (int64_t r = 0; r < R; ++r) s = s + partial[r * N + n];
  out[n] = from_acc<T>(s);
}

// ------------------------------------------------------------------ the op's kernels (variants the host launches)
// The CPU GEMMs at lane widths 16 (AVX-512) and 8 (AVX2): a device builds the width its register file takes.
using fused_linear_relu_kernels =
    kernel_list<linear_gemm_panel<true, true>, linear_gemm_panel<false, true>, linear_gemm_panel<false, false>,
                linear_gemm_panel<true, false>, linear_gemm_panel<true, true, 8>, linear_gemm_panel<false, true, 8>,
                linear_gemm_panel<false, false, 8>, linear_gemm_panel<true, false, 8>, linear_gemm_row<true, true>,
                linear_gemm_row<false, true>, linear_gemm_dot<true, true>, linear_gemm_dot<false, true>,
                linear_gemm_dot<true, true, 8>, linear_gemm_dot<false, true, 8>, linear_gemm_tiled<true, true>,
                linear_gemm_tiled<false, true>, linear_gemm_tiled<false, false>, linear_relu_grad<true>,
                linear_relu_grad<false>, linear_column_sum, linear_pack_panels>;

}  // namespace xk
