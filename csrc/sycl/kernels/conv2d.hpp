// conv2d kernels (forward, grad_input, grad_weight, grad_bias) in the portable form (common.hpp):
// the single source for every SYCL implementation and device. The table (descriptors and their
// parameter structs) comes first, the bodies after it. No torch headers here; the host wrapper
// (csrc/sycl/conv2d.cpp) packs the weight, chooses the tile shape and launches.
//
// Implicit GEMM. A "destination pixel" GEMM computes, for every destination pixel m
// and destination channel j of group g,
//     dst[m, g, j] = sum over taps (kh, kw) and source channels i of group g of
//                    src[source pixel of (m, kh, kw), g, i] * wpk[g, kh, kw, i, j]
// gathering the source pixel on the fly (no im2col buffer):
//   * forward:    src = input,       dst = output,     source pixel of (y, x) at tap (kh, kw) =
//                 (y*sh - ph + kh*dh, x*sw - pw + kw*dw), zero outside the input;
//   * grad_input: src = grad_output, dst = grad_input (a transposed convolution): the source pixel
//                 is ((y + ph - kh*dh) / sh, ...) where the division is exact and in range, else 0.
// grad_weight is the same tile shape with the roles changed: the reduction runs over pixels,
// split across work-groups into float/double partial sums that a second kernel adds in a
// fixed order (deterministic), writing the weight gradient in the requested memory format.
//
// Work decomposition (a work-group is S lanes: its work-items. On the CPU device under DPC++ they are
// one sub-group, one lane per SIMD lane; under AdaptiveCpp they are plain work-items. Nothing here
// relies on the sub-group size for correctness;
// local memory and barriers do not pay there, register blocking does): a work-group owns R
// destination pixels x (S*Q) destination channels; lane l holds channels l, l+S, ... l+(Q-1)S
// of all R pixels, i.e. R*Q accumulators. Per reduction step it loads Q weight vectors
// (contiguous across lanes: the host packs the weight with the destination channel innermost,
// padded to a multiple of S*Q) and R source values that are uniform across the sub-group
// (scalar loads, no gathers: so the source may have any strides, and the host passes NCHW
// and channels_last tensors, even views, as they are), and issues R*Q fused multiply-adds.
// Addresses are computed with uniform scalars and plain ternaries: per-lane address arrays
// and sycl::min/max make the OpenCL CPU vectorizer emit slow gathers.
//
// Floating point: products are accumulated with explicit fma() in acc_t (float for half,
// bfloat16 and float; double for double), in the order (kh, kw, i); the build does not contract.
// All index arithmetic is int64.
#pragma once
#include "common.hpp"

namespace xk {

// ------------------------------------------------------------------ the table (kernel descriptors)
template <typename T>
struct conv2d_igemm_params {
  const T* src;
  const T* wpk;
  const T* bias;
  const T* res;  // forward epilogue (conv2d_relu): residual in dst's layout, or null
  T* dst;
  int64_t N, Cs, Hs, Ws, sN, sC, sH, sW, Cd, Hd, Wd, panel, G, KH, KW, sh, sw, ph, pw, dh, dw;
  int32_t transposed;
  int64_t tiles_per_group;
  int32_t pixel_major;
  int32_t relu;    // forward epilogue: 1 = ReLU after bias and residual
  int64_t kblock;  // reduction steps per K block (0: the whole reduction in one block)
};
// The register file a wide tile is sized for: R*Q accumulators + Q weight vectors + 1 broadcast per lane
// vector (6x4: 29 of AVX-512's 32 zmm; 6x2: 15 of AVX2's 16 ymm). The narrow 8x1 tile fits either.
template <int Q>
inline constexpr int tile_vector_registers = Q == 4   ? 32
                                             : Q == 2 ? 16
                                                      : 0;

template <bool DST_CL, int S, int R, int Q>
struct conv2d_igemm {
  static constexpr int dims = 1;
  static constexpr int sub_group = S;
  static constexpr int vector_registers = tile_vector_registers<Q>;
  static constexpr bool lane_variant = true;  // built for the one width the host launches
  using types = lane_types<S>;
  template <typename T>
  using params = conv2d_igemm_params<T>;
  template <typename T>
  static void run(item_arg<1> ia, const params<T>& p);
};

template <typename T>
struct conv2d_igemm_groups_params {
  const T* src;
  const T* wpk;
  const T* bias;
  const T* res;  // forward epilogue (conv2d_relu): residual in dst's layout, or null
  T* dst;
  int64_t N, Cs, Hs, Ws, sN, sC, sH, sW, Cd, Hd, Wd, G_pad, G, KH, KW, sh, sw, ph, pw, dh, dw;
  int32_t transposed;
  int64_t tiles_per_group;
  int32_t pixel_major;  // pixel_major: unused here (grouped weights are small)
  int32_t relu;         // forward epilogue: 1 = ReLU after bias and residual
};
template <bool DST_CL, int S, int R>
struct conv2d_igemm_groups {
  static constexpr int dims = 1;
  static constexpr int sub_group = S;
  static constexpr bool lane_variant = true;  // built for the one width the host launches
  using types = lane_types<S>;
  template <typename T>
  using params = conv2d_igemm_groups_params<T>;
  template <typename T>
  static void run(item_arg<1> ia, const params<T>& p);
};

template <typename T>
struct conv2d_grad_weight_params {
  const T* go;
  const T* x;
  acc_t<T>* part;
  int64_t N, C, H, W, sN, sC, sH, sW, O, OH, OW, Opg_pad, G, KH, KW, sh, sw, ph, pw, dh, dw, splits;
};
template <int S, int R, int Q>
struct conv2d_grad_weight {
  static constexpr int dims = 1;
  static constexpr int sub_group = S;
  static constexpr int vector_registers = tile_vector_registers<Q>;
  static constexpr bool lane_variant = true;  // built for the one width the host launches
  using types = lane_types<S>;
  template <typename T>
  using params = conv2d_grad_weight_params<T>;
  template <typename T>
  static void run(item_arg<1> ia, const params<T>& p);
};

template <typename T>
struct conv2d_grad_weight_groups_params {
  const T* go;
  const T* x;
  acc_t<T>* part;
  int64_t N, C, H, W, sN, sC, sH, sW, O, OH, OW, gN, gC, gH, gW, G_pad, G, KH, KW, sh, sw, ph, pw, dh, dw, splits;
};
template <int S, int R>
struct conv2d_grad_weight_groups {
  static constexpr int dims = 1;
  static constexpr int sub_group = S;
  static constexpr bool lane_variant = true;  // built for the one width the host launches
  using types = lane_types<S>;
  template <typename T>
  using params = conv2d_grad_weight_groups_params<T>;
  template <typename T>
  static void run(item_arg<1> ia, const params<T>& p);
};

template <typename T>
struct conv2d_grad_bias_params {
  const T* go;
  acc_t<T>* part;
  int64_t N, O, OH, OW, sN, sC, sH, sW, O_pad, splits;
};
template <bool GO_CL, int S>
struct conv2d_grad_bias {
  static constexpr int dims = 1;
  static constexpr int sub_group = S;
  static constexpr bool lane_variant = true;  // built for the one width the host launches
  using types = lane_types<S>;
  template <typename T>
  using params = conv2d_grad_bias_params<T>;
  template <typename T>
  static void run(item_arg<1> ia, const params<T>& p);
};

// grad_weight as a GEMM (groups == 1, conv2d.cpp): the input's patches, one row per output pixel of a chunk, one
// column per weight column, written as the panel GEMM's packed B operand.
template <typename T>
struct conv2d_im2col_params {
  const T* x;
  T* col;
  int64_t m0, Mc, C, H, W, sN, sC, sH, sW, OH, OW, KH, KW, sh, sw, ph, pw, dh, dw, panel, pixels_per_group;
  int32_t cl_order;
};
struct conv2d_im2col {
  static constexpr int dims = 1;
  using types = float_types;
  template <typename T>
  using params = conv2d_im2col_params<T>;
  template <typename T>
  static void run(item_arg<1> ia, const params<T>& p);
};

// The patches of an undilated convolution of a channels_last input (channels contiguous, neighbouring pixels of a row
// C elements apart) as rows: col [Mc, KH * KW * C] for output pixels m0 .. m0 + Mc - 1, columns (kh, kw, c). Each
// kernel row's KW * C elements are one contiguous run of an input row, copied with vector loads and stores (a run
// that leaves the image, in the padding, element by element); conv2d_im2col gathers every element instead. The
// params are conv2d_im2col's (sC == 1, sW == C, dh == dw == 1; panel and cl_order unused).
struct conv2d_im2col_rows {
  static constexpr int dims = 1;
  static constexpr int kLocal = 16;  // lanes over a run's elements
  using types = float_types;
  template <typename T>
  using params = conv2d_im2col_params<T>;
  template <typename T>
  static void run(item_arg<1> ia, const params<T>& p);
};

// grad_input as a GEMM (groups == 1, undilated, strided: conv2d.cpp col2im_grad_input): the GEMM writes, for one
// image, col [OH * OW, KH * KW * C] = grad_output [OH * OW, O] @ w [O, (kh, kw, c)]; this kernel gathers every input
// pixel's gradient from the columns of the output pixels whose windows cover it (each element of col lands on one
// input pixel or in the padding: no scatter, no atomics).
template <typename T>
struct conv2d_col2im_params {
  const T* col;
  T* gi;  // the image's grad_input [C, H, W], element strides (sC, sH, sW)
  int64_t C, H, W, sC, sH, sW, OH, OW, KH, KW, sh, sw, ph, pw;
};
struct conv2d_col2im {
  static constexpr int dims = 1;
  static constexpr int kLocal = 32;  // pixels of one input row per step of a work-group
  using types = type_list<float, double>;
  template <typename T>
  using params = conv2d_col2im_params<T>;
  template <typename T>
  static void run(item_arg<1> ia, const params<T>& p);
};

template <typename T>
struct conv2d_reduce_splits_params {
  const acc_t<T>* part;
  T* dst;
  int64_t splits, part_stride, G, Opg, Opg_pad, Cpg, KH, KW;
  int32_t dst_cl;
};
struct conv2d_reduce_splits {
  static constexpr int dims = 1;
  static constexpr int kRows = 16;  // consecutive weight columns per work-item
  using types = float_types;
  template <typename T>
  using params = conv2d_reduce_splits_params<T>;
  template <typename T>
  static void run(item_arg<1> ia, const params<T>& p);
};

// Weight packing, on the device (the per-call packing of conv2d / conv2d_relu / grad_input, and
// pack_conv2d_weight): the layouts the GEMMs above read.
template <typename T>
struct conv2d_pack_params {
  const T* w;  // [O, C/G, KH, KW], element strides (wO, wC, wH, wW): any layout
  T* wpk;
  int64_t G, Opg, Cpg, KH, KW, wO, wC, wH, wW;
  int64_t pad;         // panels: the panel width; lanes over groups: G padded
  int64_t src_block;   // panels: source channels per work-group
  int32_t transposed;  // 1: the grad_input GEMM's operand (destination channels = C/G, source = O/G)
};
template <int S>
struct conv2d_pack_panels {
  static constexpr int dims = 1;
  static constexpr int sub_group = S;
  static constexpr bool lane_variant = true;  // built for the one width the host launches
  using types = lane_types<S>;
  template <typename T>
  using params = conv2d_pack_params<T>;
  template <typename T>
  static void run(item_arg<1> ia, const params<T>& p);
};
struct conv2d_pack_groups {
  static constexpr int dims = 1;
  using types = float_types;
  template <typename T>
  using params = conv2d_pack_params<T>;
  template <typename T>
  static void run(item_arg<1> ia, const params<T>& p);
};

// ------------------------------------------------------------------ shared by the destination-pixel GEMMs
// The R destination pixels m0 .. m0+R-1 of a tile as (image, row, column), uniform across the sub-group:
// one division, then stepping along the rows. Pixels past M repeat the last one (computed, not stored).
template <int R>
inline void tile_pixels(int64_t m0, int64_t M, int64_t Hd, int64_t Wd, int64_t (&pn)[R], int64_t (&py)[R],
                        int64_t (&px)[R]) {
  const int64_t HWd = Hd * Wd;
  int64_t n = m0 / HWd;
  const int64_t rem = m0 - n * HWd;
  int64_t y = rem / Wd, x = rem - y * Wd;
  XK_UNROLL
  for (int r = 0; r < R; ++r) {
    pn[r] = n;
    py[r] = y;
    px[r] = x;
    if (m0 + r + 1 < M && ++x == Wd) {
      x = 0;
      if (++y == Hd) {
        y = 0;
        ++n;
      }
    }
  }
}

// The source pixel (sy, sx) destination pixel (y, x) reads at tap (kh, kw); false when it is outside the
// source. Forward: src = input. Transposed (grad_input, src = grad_output): the tap exists only where the
// division by the stride is exact; unit strides skip the (slow, per pixel and tap) integer divisions.
inline bool source_tap(int32_t transposed, int64_t y, int64_t x, int64_t kh, int64_t kw, int64_t Hs, int64_t Ws,
                       int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh, int64_t dw, int64_t& sy,
                       int64_t& sx) {
  if (!transposed) {
    sy = y * sh - ph + kh * dh;
    sx = x * sw - pw + kw * dw;
    return sy >= 0 && sy < Hs && sx >= 0 && sx < Ws;
  }
  const int64_t ty = y + ph - kh * dh, tx = x + pw - kw * dw;
  sy = sh == 1 ? ty : ty / sh;
  sx = sw == 1 ? tx : tx / sw;
  return ty >= 0 && tx >= 0 && sy < Hs && sx < Ws && (sh == 1 || sy * sh == ty) && (sw == 1 || sx * sw == tx);
}

// Element offset of destination pixel m = (n, y, x), channel ch, in dst [N, Cd, Hd, Wd] (DST_CL: channels_last).
template <bool DST_CL>
inline int64_t dst_offset(int64_t m, int64_t n, int64_t ch, int64_t y, int64_t x, int64_t Cd, int64_t HWd, int64_t Wd) {
  return DST_CL ? m * Cd + ch : (n * Cd + ch) * HWd + y * Wd + x;
}

// ------------------------------------------------------------------ destination-pixel GEMM
// Template parameters: T element type; DST_CL: dst is channels_last (NHWC memory), else NCHW;
// S sub-group size; R pixels and Q channel vectors per work-group (see above).
// src: [N, Cs, Hs, Ws] with element strides (sN, sC, sH, sW), any layout.
// transposed = 0: forward (src = input); 1: grad_input (src = grad_output).
// wpk: packed weight in panels [G, ceil(Cd/G / panel), KH, KW, Cs/G, panel]: the destination channels of a
//      group cut into panels of `panel` channels (a multiple of S*Q; the last zero padded), each panel
//      holding its whole reduction (kh, kw, i) as rows of `panel` channels, so that a tile's weights are one
//      contiguous stream (panel = S*Q) or every panel/(S*Q)-th part of one (a wider prepacked panel).
//      FOLLOWED BY at least one zero element: taps that fall outside the source read that
//      zero with channel stride 0, so the inner loop has no branch and no 0*Inf.
// bias: [Cd] or null (forward only). dst: [N, Cd, Hd, Wd] in the DST_CL/NCHW memory format.
// Epilogue (forward only): v = acc + bias [+ res at dst's offset] [then ReLU, NaN kept], formed in A,
// rounded once when stored. res is null or laid out exactly as dst.
// tiles_per_group: consecutive R-pixel tiles each work-group computes.
// kblock: K blocking (float and double only: their partial sums are exact in dst). The reduction
// (kh, kw, i), in that order, is cut into blocks of kblock steps; the work-group runs each block over all
// its pixel tiles (so the block's weights, kblock * S*Q values, are read from cache by every tile), keeping
// the partial sums in dst between blocks. The order of the products is unchanged: results are bit-identical
// to kblock = 0 (one block).
// pixel_major: 0 = consecutive work-groups take consecutive channel tiles of the same pixels (the
// source rows they all read stay in cache: layers with more activations than weights); 1 = consecutive
// work-groups take consecutive pixel blocks of the same channel tile (its weight slice stays in cache:
// deep layers, whose weights outweigh their activations; measured 9.4 MB of 3x3 512->512 weights
// re-streamed from memory by every pixel tile otherwise).
// Launch: nd_range<1>, local size S,
// global size S * ceil(ceil(N*Hd*Wd / R) / tiles_per_group) * G * ceil(Cd/G / (S*Q)).
template <bool DST_CL, int S, int R, int Q>
template <typename T>
void conv2d_igemm<DST_CL, S, R, Q>::run(item_arg<1> ia, const params<T>& p) {
  const auto src = p.src;
  const auto wpk = p.wpk;
  const auto bias = p.bias;
  const auto res = p.res;
  const auto relu = p.relu;
  const auto dst = p.dst;
  const auto N = p.N;
  const auto Cs = p.Cs;
  const auto Hs = p.Hs;
  const auto Ws = p.Ws;
  const auto sN = p.sN;
  const auto sC = p.sC;
  const auto sH = p.sH;
  const auto sW = p.sW;
  const auto Cd = p.Cd;
  const auto Hd = p.Hd;
  const auto Wd = p.Wd;
  const auto panel = p.panel;
  const auto kblock = p.kblock;
  const auto G = p.G;
  const auto KH = p.KH;
  const auto KW = p.KW;
  const auto sh = p.sh;
  const auto sw = p.sw;
  const auto ph = p.ph;
  const auto pw = p.pw;
  const auto dh = p.dh;
  const auto dw = p.dw;
  const auto transposed = p.transposed;
  const auto tiles_per_group = p.tiles_per_group;
  const auto pixel_major = p.pixel_major;
  using A = acc_t<T>;
  const auto it = item(ia);
  const int64_t lane = static_cast<int64_t>(it.get_local_id(0));
  int64_t tile = static_cast<int64_t>(it.get_group(0));
  const int64_t Csg = Cs / G, Cdg = Cd / G;
  const int64_t ctiles = (Cdg + S * Q - 1) / (S * Q);
  const int64_t HWd = Hd * Wd, M = N * HWd;
  int64_t ct, g, pblock;
  if (pixel_major) {
    const int64_t pblocks = ((M + R - 1) / R + tiles_per_group - 1) / tiles_per_group;
    pblock = tile % pblocks;
    tile /= pblocks;
    g = tile % G;
    ct = tile / G;
  } else {
    ct = tile % ctiles;
    tile /= ctiles;
    g = tile % G;
    pblock = tile / G;
  }
  // This tile's columns of its weight panel: channels c0 .. c0 + S*Q - 1 of group g.
  const int64_t K = KH * KW * Csg;  // reduction steps, in the order (kh, kw, i)
  const int64_t npanels = (Cdg + panel - 1) / panel;
  const int64_t c0 = ct * (S * Q);
  const T* wg = wpk + (g * npanels + c0 / panel) * K * panel + c0 % panel + lane;
  const T* zero = wpk + G * npanels * K * panel;
  // K blocks (element types accumulated in themselves only: the partial sums wait in dst, exactly).
  const int64_t kb = std::is_same_v<T, A> && kblock > 0 && kblock < K ? kblock : K;
  // Row runs (below): a forward pass of one group, undilated along the row, in one K block, with more than one tap
  // per kernel row; `dense_runs`: a dense channels_last source (channel stride 1, pixel stride Csg), whose row runs
  // are contiguous.
  const bool row_runs = !transposed && kb == K && G == 1 && dw == 1 && KW > 1;
  const bool dense_runs = sC == 1 && sW == Csg;
  for (int64_t k0 = 0; k0 < K; k0 += kb) {
    const int64_t k1 = k0 + kb < K ? k0 + kb : K;
    // Consecutive pixel tiles per work-group (amortises the per-work-group cost of short
    // reductions such as 1x1 and depthwise layers; with K blocks, reuses the block's weights from cache).
    for (int64_t pt = 0; pt < tiles_per_group; ++pt) {
      const int64_t m0 = (pblock * tiles_per_group + pt) * R;
      if (m0 >= M) break;

      int64_t pn[R], py[R], px[R];
      tile_pixels<R>(m0, M, Hd, Wd, pn, py, px);

      A acc[R][Q];
      XK_UNROLL
      for (int q = 0; q < Q; ++q) {
        const int64_t ch = g * Cdg + c0 + q * S + lane;
        const bool cin = c0 + q * S + lane < Cdg;
        XK_UNROLL
        for (int r = 0; r < R; ++r) {
          // Later K blocks resume from the partial sum the previous block stored.
          acc[r][q] = k0 > 0 && cin && m0 + r < M
                          ? load<T>(dst, dst_offset<DST_CL>(m0 + r, pn[r], ch, py[r], px[r], Cd, HWd, Wd))
                          : A(0);
        }
      }

      for (int64_t t = k0 / Csg; t * Csg < k1;) {
        const int64_t kh = t / KW, kw = t - kh * KW;
        if (row_runs && kw == 0) {
          // Kernel row kh: where every pixel's KW taps lie inside the source row, the row's KW * Csg steps (kw, i)
          // read source element kw * sW + i * sC from the row's start, and consecutive rows of the packed weight:
          // one address per pixel and kernel row instead of one per pixel and tap (the 7x7 stem: 7 taps of 3
          // channels, each with R address computations and bounds checks). A dense channels_last source is one
          // contiguous run of KW * Csg elements: a single loop. The same products in the same order as tap by
          // tap: bit-identical results.
          const T* rp[R];
          bool inside = true;
          XK_UNROLL
          for (int r = 0; r < R; ++r) {
            const int64_t sy = py[r] * sh - ph + kh * dh, sx = px[r] * sw - pw;
            const bool in = sy >= 0 && sy < Hs && sx >= 0 && sx + (KW - 1) < Ws;
            inside = inside && in;
            rp[r] = src + pn[r] * sN + (in ? sy * sH + sx * sW : 0);
          }
          if (inside && dense_runs) {  // uniform; otherwise the row's taps one by one, below
            const T* wk = wg + t * Csg * panel;
            const int64_t steps = KW * Csg;
            for (int64_t j = 0; j < steps; ++j) {
              A w[Q];
              XK_UNROLL
              for (int q = 0; q < Q; ++q) w[q] = load<T>(wk, j * panel + q * S);
              XK_UNROLL
              for (int r = 0; r < R; ++r) {
                const A a = load<T>(rp[r], j);
                XK_UNROLL
                for (int q = 0; q < Q; ++q) acc[r][q] = sycl::fma(a, w[q], acc[r][q]);
              }
            }
            t += KW;
            continue;
          }
          if (inside) {  // any other layout (NCHW): kw, then the channels at stride sC
            for (int64_t kx = 0; kx < KW; ++kx) {
              const T* wk = wg + (t + kx) * Csg * panel;
              for (int64_t i = 0; i < Csg; ++i) {
                A w[Q];
                XK_UNROLL
                for (int q = 0; q < Q; ++q) w[q] = load<T>(wk, i * panel + q * S);
                XK_UNROLL
                for (int r = 0; r < R; ++r) {
                  const A a = load<T>(rp[r], kx * sW + i * sC);
                  XK_UNROLL
                  for (int q = 0; q < Q; ++q) acc[r][q] = sycl::fma(a, w[q], acc[r][q]);
                }
              }
            }
            t += KW;
            continue;
          }
        }
        const int64_t i0 = k0 > t * Csg ? k0 - t * Csg : 0;
        const int64_t i1 = k1 - t * Csg < Csg ? k1 - t * Csg : Csg;
        // Source channels of each destination pixel at this tap: (pointer, channel stride sC),
        // or (zero, stride 0) when the tap falls outside the source.
        const T* sp[R];
        int64_t cs[R];
        // grad_input skips taps outside grad_output (they contribute nothing, as in PyTorch's
        // backward: a NaN/Inf weight must not turn 0 * w into NaN there). The forward keeps
        // multiplying padding by the weight: PyTorch's forward makes those outputs NaN too.
        bool skip[R];
        XK_UNROLL
        for (int r = 0; r < R; ++r) {
          int64_t sy, sx;
          const bool valid = source_tap(transposed, py[r], px[r], kh, kw, Hs, Ws, sh, sw, ph, pw, dh, dw, sy, sx);
          sp[r] = valid ? src + pn[r] * sN + sy * sH + sx * sW + g * Csg * sC : zero;
          cs[r] = valid ? sC : 0;
          skip[r] = transposed && !valid;
        }
        const T* wk = wg + t * Csg * panel;
        for (int64_t i = i0; i < i1; ++i) {
          A w[Q];
          XK_UNROLL
          for (int q = 0; q < Q; ++q) w[q] = load<T>(wk, i * panel + q * S);
          XK_UNROLL
          for (int r = 0; r < R; ++r) {
            if (skip[r]) continue;  // uniform across the sub-group: no divergence
            const A a = load<T>(sp[r], i * cs[r]);
            XK_UNROLL
            for (int q = 0; q < Q; ++q) acc[r][q] = sycl::fma(a, w[q], acc[r][q]);
          }
        }
        ++t;
      }

      // Epilogue: bias, convert, store the valid pixels and channels (before the last K block: the
      // partial sums as they are).
      const bool last = k1 == K;
      XK_UNROLL
      for (int q = 0; q < Q; ++q) {
        const int64_t j = c0 + q * S + lane;
        if (j < Cdg) {
          const int64_t ch = g * Cdg + j;
          const A b = last && bias != nullptr ? load<T>(bias, ch) : A(0);
          XK_UNROLL
          for (int r = 0; r < R; ++r) {
            if (m0 + r < M) {
              const int64_t o = dst_offset<DST_CL>(m0 + r, pn[r], ch, py[r], px[r], Cd, HWd, Wd);
              A v = acc[r][q];
              if (last) {
                v = v + b;
                if (res != nullptr) v += load<T>(res, o);
                if (relu) v = v < A(0) ? A(0) : v;  // NaN propagates, as torch.relu
              }
              store<T>(dst, o, v);
            }
          }
        }
      }
    }
  }
}

// ------------------------------------------------------------------ destination-pixel GEMM, lanes over groups
// The same computation as conv2d_igemm for convolutions with few channels per group and many
// groups (depthwise and similar), where lanes over the channels of one group would mostly idle:
// here lane l handles group gb*S + l, the work-group owns R destination pixels x S groups x one
// destination channel j of each group, and each lane keeps R accumulators. Per step: one weight
// vector (contiguous over groups), R source vectors (lane l reads channel (gb*S+l)*Cs/G + i:
// contiguous when that stride is 1, i.e. depthwise and channels_last, else a gather), R FMAs.
// wpk: packed weight [KH, KW, Cs/G, Cd/G, G_pad] (G_pad = G rounded up to S, zero padded).
// Other arguments as conv2d_igemm. Launch: nd_range<1>, local size S,
// global size S * ceil(ceil(N*Hd*Wd / R) / tiles_per_group) * (Cd/G) * (G_pad / S).
template <bool DST_CL, int S, int R>
template <typename T>
void conv2d_igemm_groups<DST_CL, S, R>::run(item_arg<1> ia, const params<T>& p) {
  const auto src = p.src;
  const auto wpk = p.wpk;
  const auto bias = p.bias;
  const auto res = p.res;
  const auto relu = p.relu;
  const auto dst = p.dst;
  const auto N = p.N;
  const auto Cs = p.Cs;
  const auto Hs = p.Hs;
  const auto Ws = p.Ws;
  const auto sN = p.sN;
  const auto sC = p.sC;
  const auto sH = p.sH;
  const auto sW = p.sW;
  const auto Cd = p.Cd;
  const auto Hd = p.Hd;
  const auto Wd = p.Wd;
  const auto G_pad = p.G_pad;
  const auto G = p.G;
  const auto KH = p.KH;
  const auto KW = p.KW;
  const auto sh = p.sh;
  const auto sw = p.sw;
  const auto ph = p.ph;
  const auto pw = p.pw;
  const auto dh = p.dh;
  const auto dw = p.dw;
  const auto transposed = p.transposed;
  const auto tiles_per_group = p.tiles_per_group;
  using A = acc_t<T>;
  const auto it = item(ia);
  const int64_t lane = static_cast<int64_t>(it.get_local_id(0));
  int64_t tile = static_cast<int64_t>(it.get_group(0));
  const int64_t Csg = Cs / G, Cdg = Cd / G;
  const int64_t gblocks = G_pad / S;
  const int64_t g = (tile % gblocks) * S + lane;
  tile /= gblocks;
  const int64_t j = tile % Cdg;
  const int64_t HWd = Hd * Wd, M = N * HWd;
  const bool gin = g < G;
  // Consecutive pixel tiles per work-group (amortises the per-work-group cost of short
  // reductions such as 1x1 and depthwise layers).
  for (int64_t pt = 0; pt < tiles_per_group; ++pt) {
    const int64_t m0 = ((tile / Cdg) * tiles_per_group + pt) * R;
    if (m0 >= M) break;

    int64_t pn[R], py[R], px[R];
    tile_pixels<R>(m0, M, Hd, Wd, pn, py, px);

    A acc[R];
    XK_UNROLL
    for (int r = 0; r < R; ++r) acc[r] = A(0);

    const T* lane_src = src + g * Csg * sC;  // this lane's group, source channel 0
    for (int64_t kh = 0; kh < KH; ++kh) {
      for (int64_t kw = 0; kw < KW; ++kw) {
        // Pixel offset of each destination pixel at this tap (0 when outside: read, then dropped).
        int64_t off[R];
        bool ok[R];
        XK_UNROLL
        for (int r = 0; r < R; ++r) {
          int64_t sy, sx;
          const bool valid = source_tap(transposed, py[r], px[r], kh, kw, Hs, Ws, sh, sw, ph, pw, dh, dw, sy, sx);
          ok[r] = valid;
          off[r] = valid ? pn[r] * sN + sy * sH + sx * sW : 0;
        }
        const T* wk = wpk + ((kh * KW + kw) * Csg * Cdg + j) * G_pad + g;
        for (int64_t i = 0; i < Csg; ++i) {
          const A w = load<T>(wk, i * Cdg * G_pad);
          XK_UNROLL
          for (int r = 0; r < R; ++r) {
            if (transposed && !ok[r]) continue;  // grad_input: taps outside grad_output add nothing
            A v = A(0);
            if (gin) v = load<T>(lane_src, off[r] + i * sC);
            const A a = ok[r] ? v : A(0);
            acc[r] = sycl::fma(a, w, acc[r]);
          }
        }
      }
    }

    if (gin) {
      const int64_t ch = g * Cdg + j;
      const A b = bias != nullptr ? load<T>(bias, ch) : A(0);
      XK_UNROLL
      for (int r = 0; r < R; ++r) {
        if (m0 + r < M) {
          const int64_t o = dst_offset<DST_CL>(m0 + r, pn[r], ch, py[r], px[r], Cd, HWd, Wd);
          A v = acc[r] + b;
          if (res != nullptr) v += load<T>(res, o);
          if (relu) v = v < A(0) ? A(0) : v;  // NaN propagates, as torch.relu
          store<T>(dst, o, v);
        }
      }
    }
  }
}

// ------------------------------------------------------------------ grad_weight partial sums
// part[s, g, kh, kw, c, o] (o padded to Opg_pad, a multiple of S*Q) =
//     sum over the pixels m of split s of grad_output[m, g*Opg + o] * input[pixel of (m, kh, kw), g*Cpg + c]
// grad_output is channels_last ([N, OH, OW, O] memory: its channels are loaded as vectors);
// input [N, C, H, W] has element strides (sN, sC, sH, sW), any layout (scalar loads).
// A work-group owns (split s, group g, tap, R input channels, S*Q output channels); lanes over
// output channels (masked loads past Opg), the R input-channel values are uniform scalars.
// Launch: nd_range<1>, local size S,
// global size S * splits * G * KH * KW * ceil(Cpg / R) * (Opg_pad / (S*Q)).
template <int S, int R, int Q>
template <typename T>
void conv2d_grad_weight<S, R, Q>::run(item_arg<1> ia, const params<T>& p) {
  const auto go = p.go;
  const auto x = p.x;
  const auto part = p.part;
  const auto N = p.N;
  const auto C = p.C;
  const auto H = p.H;
  const auto W = p.W;
  const auto sN = p.sN;
  const auto sC = p.sC;
  const auto sH = p.sH;
  const auto sW = p.sW;
  const auto O = p.O;
  const auto OH = p.OH;
  const auto OW = p.OW;
  const auto Opg_pad = p.Opg_pad;
  const auto G = p.G;
  const auto KH = p.KH;
  const auto KW = p.KW;
  const auto sh = p.sh;
  const auto sw = p.sw;
  const auto ph = p.ph;
  const auto pw = p.pw;
  const auto dh = p.dh;
  const auto dw = p.dw;
  const auto splits = p.splits;
  using A = acc_t<T>;
  const auto it = item(ia);
  const int64_t lane = static_cast<int64_t>(it.get_local_id(0));
  int64_t tile = static_cast<int64_t>(it.get_group(0));
  const int64_t Cpg = C / G, Opg = O / G;
  const int64_t otiles = Opg_pad / (S * Q), cblocks = (Cpg + R - 1) / R;
  const int64_t ot = tile % otiles;
  tile /= otiles;
  const int64_t cb = tile % cblocks;
  tile /= cblocks;
  const int64_t kw = tile % KW;
  tile /= KW;
  const int64_t kh = tile % KH;
  tile /= KH;
  const int64_t g = tile % G;
  const int64_t s = tile / G;

  const int64_t M = N * OH * OW;
  const int64_t chunk = (M + splits - 1) / splits;
  const int64_t mb = s * chunk;
  const int64_t me = (mb + chunk < M) ? mb + chunk : M;
  const int64_t c0 = cb * R;
  const int64_t o0 = ot * (S * Q) + lane;

  // Input channels past Cpg (last block) re-read channel c0 and their sums are not stored,
  // so the loads need no condition; output-channel lanes past Opg load masked (zero).
  int64_t xoff[R];
  XK_UNROLL
  for (int r = 0; r < R; ++r) xoff[r] = ((c0 + r < Cpg) ? r : 0) * sC;
  bool oin[Q];
  XK_UNROLL
  for (int q = 0; q < Q; ++q) oin[q] = o0 + q * S < Opg;

  // Output columns whose input column ix = ox*sw - pw + kw*dw is inside [0, W): [ox_lo, ox_hi).
  const int64_t bx = kw * dw - pw;  // ix = ox*sw + bx
  const int64_t ox_lo = bx >= 0 ? 0 : (-bx + sw - 1) / sw;
  const int64_t ox_hi_raw = (W - 1 - bx) >= 0 ? (W - 1 - bx) / sw + 1 : 0;
  const int64_t ox_hi = ox_hi_raw < OW ? ox_hi_raw : OW;

  A acc[R][Q];
  XK_UNROLL
  for (int r = 0; r < R; ++r) XK_UNROLL
  for (int q = 0; q < Q; ++q) acc[r][q] = A(0);

  // Walk the split's pixels row by row: (n, oy) rows, the valid column range of each. Tiles whose output
  // channels all exist (every tile but a group's last, when Opg is not a multiple of S*Q: a uniform
  // condition) load grad_output unmasked; a per-lane mask in the loop made the CPU compiler rebuild the
  // mask and spill accumulators at every pixel.
  auto walk = [&](auto masked_tag) {
    constexpr bool MASKED = decltype(masked_tag)::value;
    for (int64_t row = mb / OW; row * OW < me; ++row) {
      const int64_t n = row / OH, oy = row - n * OH;
      const int64_t iy = oy * sh - ph + kh * dh;
      if (iy < 0 || iy >= H) continue;
      const int64_t rb = row * OW;
      const int64_t lo0 = mb - rb > ox_lo ? mb - rb : ox_lo;
      const int64_t hi0 = me - rb < ox_hi ? me - rb : ox_hi;
      if (lo0 >= hi0) continue;
      const T* gp = go + (rb + lo0) * O + g * Opg + o0;
      const T* xp = x + n * sN + iy * sH + (lo0 * sw + bx) * sW + (g * Cpg + c0) * sC;
      const int64_t xstep = sw * sW;
      for (int64_t ox = lo0; ox < hi0; ++ox, gp += O, xp += xstep) {
        A gv[Q];
        XK_UNROLL
        for (int q = 0; q < Q; ++q) {
          if constexpr (MASKED)
            gv[q] = oin[q] ? load<T>(gp, q * S) : A(0);
          else
            gv[q] = load<T>(gp, q * S);
        }
        XK_UNROLL
        for (int r = 0; r < R; ++r) {
          const A a = load<T>(xp, xoff[r]);
          XK_UNROLL
          for (int q = 0; q < Q; ++q) acc[r][q] = sycl::fma(gv[q], a, acc[r][q]);
        }
      }
    }
  };
  if (ot * (S * Q) + S * Q <= Opg)
    walk(std::false_type{});
  else
    walk(std::true_type{});

  A* pp = part + ((((s * G + g) * KH + kh) * KW + kw) * Cpg + c0) * Opg_pad + o0;
  XK_UNROLL
  for (int r = 0; r < R; ++r) {
    if (c0 + r < Cpg) {
      XK_UNROLL
      for (int q = 0; q < Q; ++q) pp[r * Opg_pad + q * S] = acc[r][q];
    }
  }
}

// ------------------------------------------------------------------ grad_weight partial sums, lanes over groups
// For depthwise / many-group convolutions (see conv2d_igemm_groups): lane l handles group
// gb*S + l; a work-group owns (split s, S groups, one output channel o and input channel c of
// each group, R consecutive taps t = kh*KW + kw) and keeps R accumulators per lane. Per pixel:
// one grad_output vector, then per tap one input vector (contiguous across lanes when the
// group stride Cpg*sC is 1: depthwise, channels_last) and one FMA.
// part[s, g, kh, kw, c, o] as conv2d_grad_weight with Opg_pad = Opg (no padding).
// grad_output [N, O, OH, OW] and input [N, C, H, W] with element strides (gN..gW), (sN..sW).
// Launch: nd_range<1>, local size S, global size S * splits * ceil(KH*KW / R) * Cpg * Opg * (G_pad / S).
template <int S, int R>
template <typename T>
void conv2d_grad_weight_groups<S, R>::run(item_arg<1> ia, const params<T>& p) {
  const auto go = p.go;
  const auto x = p.x;
  const auto part = p.part;
  const auto N = p.N;
  const auto C = p.C;
  const auto H = p.H;
  const auto W = p.W;
  const auto sN = p.sN;
  const auto sC = p.sC;
  const auto sH = p.sH;
  const auto sW = p.sW;
  const auto O = p.O;
  const auto OH = p.OH;
  const auto OW = p.OW;
  const auto gN = p.gN;
  const auto gC = p.gC;
  const auto gH = p.gH;
  const auto gW = p.gW;
  const auto G_pad = p.G_pad;
  const auto G = p.G;
  const auto KH = p.KH;
  const auto KW = p.KW;
  const auto sh = p.sh;
  const auto sw = p.sw;
  const auto ph = p.ph;
  const auto pw = p.pw;
  const auto dh = p.dh;
  const auto dw = p.dw;
  const auto splits = p.splits;
  using A = acc_t<T>;
  const auto it = item(ia);
  const int64_t lane = static_cast<int64_t>(it.get_local_id(0));
  int64_t tile = static_cast<int64_t>(it.get_group(0));
  const int64_t Cpg = C / G, Opg = O / G, T_taps = KH * KW;
  const int64_t gblocks = G_pad / S, tblocks = (T_taps + R - 1) / R;
  const int64_t g = (tile % gblocks) * S + lane;
  tile /= gblocks;
  const int64_t o = tile % Opg;
  tile /= Opg;
  const int64_t c = tile % Cpg;
  tile /= Cpg;
  const int64_t t0 = (tile % tblocks) * R;
  const int64_t s = tile / tblocks;
  const bool gin = g < G;

  const int64_t M = N * OH * OW;
  const int64_t chunk = (M + splits - 1) / splits;
  const int64_t mb = s * chunk;
  const int64_t me = (mb + chunk < M) ? mb + chunk : M;

  // Taps of this block (past the last tap: repeat tap t0, never stored).
  int64_t tkh[R], tkw[R];
  XK_UNROLL
  for (int r = 0; r < R; ++r) {
    const int64_t t = (t0 + r < T_taps) ? t0 + r : t0;
    tkh[r] = t / KW;
    tkw[r] = t - tkh[r] * KW;
  }

  A acc[R];
  XK_UNROLL
  for (int r = 0; r < R; ++r) acc[r] = A(0);

  const T* lane_go = go + (g * Opg + o) * gC;
  const T* lane_x = x + (g * Cpg + c) * sC;
  if (mb < me) {
    int64_t n = mb / (OH * OW);
    const int64_t rem = mb - n * (OH * OW);
    int64_t oy = rem / OW, ox = rem - oy * OW;
    for (int64_t m = mb; m < me; ++m) {
      A gv = A(0);
      if (gin) gv = load<T>(lane_go, n * gN + oy * gH + ox * gW);
      XK_UNROLL
      for (int r = 0; r < R; ++r) {
        const int64_t iy = oy * sh - ph + tkh[r] * dh, ix = ox * sw - pw + tkw[r] * dw;
        const bool ok = iy >= 0 && iy < H && ix >= 0 && ix < W;
        A v = A(0);
        if (gin) v = load<T>(lane_x, ok ? n * sN + iy * sH + ix * sW : 0);
        acc[r] = sycl::fma(gv, ok ? v : A(0), acc[r]);
      }
      if (++ox == OW) {
        ox = 0;
        if (++oy == OH) {
          oy = 0;
          ++n;
        }
      }
    }
  }

  if (gin) {
    XK_UNROLL
    for (int r = 0; r < R; ++r) {
      if (t0 + r < T_taps) {
        const int64_t kh = tkh[r], kw = tkw[r];
        part[((((s * G + g) * KH + kh) * KW + kw) * Cpg + c) * Opg + o] = acc[r];
      }
    }
  }
}

// ------------------------------------------------------------------ grad_bias partial sums
// part[s, o] (o padded to O_pad, a multiple of S) = sum over the pixels m of split s of grad_output[m, o],
// M = N*OH*OW pixels; grad_output [N, O, OH, OW] has element strides (sN, sC, sH, sW): lanes run over channels.
// GO_CL: sC is 1 (channels_last memory), so a lane's address is the uniform pixel offset + o and the CPU
// vectorizer loads a vector per pixel; with the run-time sC (NCHW, or GO_CL false) it gathers. A tile whose
// channels are all below O takes an unmasked path (uniform branch); the last one masks.
// Launch: nd_range<1>, local size S, global size S * splits * (O_pad / S).
template <bool GO_CL, int S>
template <typename T>
void conv2d_grad_bias<GO_CL, S>::run(item_arg<1> ia, const params<T>& p) {
  const auto go = p.go;
  const auto part = p.part;
  const auto N = p.N;
  const auto O = p.O;
  const auto OH = p.OH;
  const auto OW = p.OW;
  const auto sN = p.sN;
  const auto sC = p.sC;
  const auto sH = p.sH;
  const auto sW = p.sW;
  const auto O_pad = p.O_pad;
  const auto splits = p.splits;
  using A = acc_t<T>;
  const auto it = item(ia);
  const int64_t lane = static_cast<int64_t>(it.get_local_id(0));
  const int64_t tile = static_cast<int64_t>(it.get_group(0));
  const int64_t otiles = O_pad / S;
  const int64_t o0 = (tile % otiles) * S, o = o0 + lane;
  const int64_t s = tile / otiles;
  const int64_t M = N * OH * OW;
  const int64_t chunk = (M + splits - 1) / splits;
  const int64_t mb = s * chunk;
  const int64_t me = (mb + chunk < M) ? mb + chunk : M;
  A acc = A(0);
  auto sum = [&](const T* lane_go) {
    int64_t n = mb / (OH * OW);
    const int64_t rem = mb - n * (OH * OW);
    int64_t oy = rem / OW, ox = rem - oy * OW;
    for (int64_t m = mb; m < me; ++m) {
      acc += load<T>(lane_go, n * sN + oy * sH + ox * sW);
      if (++ox == OW) {
        ox = 0;
        if (++oy == OH) {
          oy = 0;
          ++n;
        }
      }
    }
  };
  if (mb < me) {
    if (o0 + S <= O)
      sum(go + (GO_CL ? o : o * sC));
    else if (o < O)
      sum(go + (GO_CL ? o : o * sC));
  }
  part[s * O_pad + o] = acc;
}

// ------------------------------------------------------------------ grad_weight as a GEMM: the patches
// col[n / P][mm][n % P] = input[img, c, oy*sh - ph + kh*dh, ox*sw - pw + kw*dw] (zero outside the image and for
// the padding columns n >= KH*KW*C) for the chunk's pixel m = m0 + mm = (img * OH + oy) * OW + ox, mm in [0, Mc),
// and weight column n = (kh * KW + kw) * C + c (cl_order: the channels_last weight's order) or
// n = (c * KH + kh) * KW + kw (the contiguous weight's): the packed B operand of the panel GEMM (P = panel
// columns per panel, Mc rows each), so that grad_weight [O, KH*KW*C] in the weight's memory order =
// grad_output^T [O, pixels] @ col, chunk after chunk (conv2d.cpp grad_weight_gemm). input [N, C, H, W] with
// element strides (sN, sC, sH, sW), any layout. Work-item = one column of a panel (local size P), looping over
// pixels_per_group consecutive pixels. Where the panel's columns are consecutive channels of one tap of a
// channels_last input (cl_order, C % P == 0, sC == 1: ResNet's layers) the loads are uniform-offset vectors;
// elsewhere gathers.
// Launch: nd_range<1>, local size P, global size P * ceil(KH*KW*C / P) * ceil(Mc / pixels_per_group).
template <typename T>
void conv2d_im2col::run(item_arg<1> ia, const params<T>& p) {
  const auto x = p.x;
  const auto col = p.col;
  const auto C = p.C;
  const auto H = p.H;
  const auto W = p.W;
  const auto OW = p.OW;
  const auto OH = p.OH;
  const auto KW = p.KW;
  const auto P = p.panel;
  const auto Mc = p.Mc;
  const auto it = item(ia);
  const int64_t lid = static_cast<int64_t>(it.get_local_id(0));
  const int64_t g = static_cast<int64_t>(it.get_group(0));
  const int64_t KK = p.KH * KW, KKC = KK * C;
  const int64_t panels = (KKC + P - 1) / P;
  const int64_t panel = g % panels, pb = g / panels;
  const int64_t n = panel * P + lid;
  const bool n_ok = n < KKC;
  const int64_t nn = n_ok ? n : 0;
  const int64_t c = p.cl_order ? nn % C : nn / KK, tap = p.cl_order ? nn / C : nn % KK;
  const int64_t ky = (tap / KW) * p.dh - p.ph, kx = (tap % KW) * p.dw - p.pw;
  const int64_t mm0 = pb * p.pixels_per_group;
  const int64_t mm1 = Mc - mm0 < p.pixels_per_group ? Mc : mm0 + p.pixels_per_group;
  T* out = col + panel * Mc * P + lid;
  const T zero = from_acc<T>(acc_t<T>(0));
  // One tap for the whole panel (uniform): the panel's first column's.
  const int64_t n0 = panel * P;
  const bool vec = p.cl_order != 0 && p.sC == 1 && C % P == 0 && n0 + P <= KKC;
  int64_t m = p.m0 + mm0;
  int64_t ox = m % OW, t = m / OW;
  int64_t oy = t % OH, img = t / OH;
  if (vec) {
    const int64_t tap0 = n0 / C, c0 = n0 % C;
    const int64_t vy = (tap0 / KW) * p.dh - p.ph, vx = (tap0 % KW) * p.dw - p.pw;
    for (int64_t mm = mm0; mm < mm1; ++mm) {
      const int64_t iy = oy * p.sh + vy, ix = ox * p.sw + vx;
      const bool inside = iy >= 0 && iy < H && ix >= 0 && ix < W;  // uniform
      out[mm * P] = inside ? x[img * p.sN + iy * p.sH + ix * p.sW + c0 + lid] : zero;
      if (++ox == OW) {
        ox = 0;
        if (++oy == OH) {
          oy = 0;
          ++img;
        }
      }
    }
    return;
  }
  for (int64_t mm = mm0; mm < mm1; ++mm) {
    const int64_t iy = oy * p.sh + ky, ix = ox * p.sw + kx;
    const bool inside = n_ok && iy >= 0 && iy < H && ix >= 0 && ix < W;
    out[mm * P] = inside ? x[img * p.sN + c * p.sC + iy * p.sH + ix * p.sW] : zero;
    if (++ox == OW) {
      ox = 0;
      if (++oy == OH) {
        oy = 0;
        ++img;
      }
    }
  }
}

// ------------------------------------------------------------------ col2im (grad_input of strided windows)
// Work-group = one input row h (uniform: the row's range of output rows), lane = pixel w, looping over the row in
// blocks of kLocal pixels and over the channels (a work-group per row and channel block cost the CPU device ~0.6 us
// of dispatch each, more than its work). Input pixel (h, w) is tap (kh, kw) = (h + ph - oy * sh, w + pw - ox * sw) of
// output pixel (oy, ox) for every oy with 0 <= h + ph - oy * sh < KH (and the same along the row), so the taps are a
// range of output pixels per dimension, no test per tap. The range of ox differs by lane; floor((w + pw) / sw) is
// computed in float (lanes have no integer division): (a + 0.5) * (1 / sw) lies at least 0.5 / sw from an integer,
// and float's error is far below that for a < 2^20 (the host takes the route only below that). Terms summed in the
// order oy, then ox ascending, in the accumulation type (T is float or double here).
// Launch: nd_range<1>, local size kLocal, global size kLocal * H.
template <typename T>
void conv2d_col2im::run(item_arg<1> ia, const params<T>& p) {
  const auto it = item(ia);
  const int64_t lid = static_cast<int64_t>(it.get_local_id(0));
  const int64_t h = static_cast<int64_t>(it.get_group(0));
  const int64_t C = p.C, KKC = p.KH * p.KW * C;
  const int64_t ty = h + p.ph;
  const int64_t oy_hi = sycl::min(p.OH - 1, ty / p.sh);
  const int64_t oy_lo = ty >= p.KH ? (ty - p.KH) / p.sh + 1 : 0;  // the first oy with ty - oy * sh < KH
  const float inv_sw = 1.0f / static_cast<float>(p.sw);
  for (int64_t w0 = 0; w0 < p.W; w0 += kLocal) {
    const int64_t w = w0 + lid;
    const bool inside = w < p.W;
    const int64_t tx = w + p.pw;
    const int64_t ox_hi =
        inside ? sycl::min(p.OW - 1, static_cast<int64_t>((static_cast<float>(tx) + 0.5f) * inv_sw)) : -1;
    const int64_t ox_lo = tx >= p.KW ? static_cast<int64_t>((static_cast<float>(tx - p.KW) + 0.5f) * inv_sw) + 1 : 0;
    T* dst = p.gi + h * p.sH + w * p.sW;
    for (int64_t c = 0; c < C; ++c) {
      acc_t<T> sum = 0;
      for (int64_t oy = oy_lo; oy <= oy_hi; ++oy) {
        const T* row = p.col + oy * p.OW * KKC + (ty - oy * p.sh) * p.KW * C + c;
        for (int64_t ox = ox_lo; ox <= ox_hi; ++ox) sum += row[ox * KKC + (tx - ox * p.sw) * C];
      }
      if (inside) dst[c * p.sC] = from_acc<T>(sum);
    }
  }
}

// Launch: nd_range<1>, local size kLocal, one work-group per pixels_per_group output pixels.
template <typename T>
void conv2d_im2col_rows::run(item_arg<1> ia, const params<T>& p) {
  const auto it = item(ia);
  const int64_t lid = static_cast<int64_t>(it.get_local_id(0));
  const int64_t g = static_cast<int64_t>(it.get_group(0));
  const int64_t C = p.C, len = p.KW * C, KKC = p.KH * len;
  const int64_t mm0 = g * p.pixels_per_group;
  const int64_t mm1 = p.Mc - mm0 < p.pixels_per_group ? p.Mc : mm0 + p.pixels_per_group;
  const T zero = from_acc<T>(acc_t<T>(0));
  int64_t m = p.m0 + mm0;
  int64_t ox = m % p.OW, t = m / p.OW;
  int64_t oy = t % p.OH, img = t / p.OH;
  for (int64_t mm = mm0; mm < mm1; ++mm) {
    const int64_t ix0 = ox * p.sw - p.pw;
    const bool row_inside = ix0 >= 0 && ix0 + p.KW <= p.W;  // uniform: the whole run lies in the input row
    const T* xb = p.x + img * p.sN + ix0 * C;               // the run's first element, in row 0 of the image
    T* dst = p.col + mm * KKC;
    for (int64_t kh = 0; kh < p.KH; ++kh) {
      const int64_t iy = oy * p.sh - p.ph + kh;
      T* d = dst + kh * len;
      if (iy < 0 || iy >= p.H) {  // uniform: a padding row
        for (int64_t j = lid; j < len; j += kLocal) d[j] = zero;
        continue;
      }
      const T* src = xb + iy * p.sH;
      if (row_inside) {
        for (int64_t j = lid; j < len; j += kLocal) d[j] = src[j];
      } else {
        for (int64_t j = lid; j < len; j += kLocal) {
          const int64_t ix = ix0 + j / C;
          T v = zero;
          if (ix >= 0 && ix < p.W) v = src[j];
          d[j] = v;
        }
      }
    }
    if (++ox == p.OW) {
      ox = 0;
      if (++oy == p.OH) {
        oy = 0;
        ++img;
      }
    }
  }
}

// ------------------------------------------------------------------ split reduction
// dst[dst(o, c, kh, kw)] = sum over s = 0..splits-1 (in order) of part[s * part_stride + src], converted to T,
// for the packed position src = [g, kh, kw, c, o % Opg] with o padded to Opg_pad (o = g * Opg + o % Opg), and
// the destination weight gradient [O, Cpg, KH, KW] in memory order (dst_cl: channels_last memory, i.e.
// [O, KH, KW, Cpg]). The bias gradient uses G = Cpg = KH = KW = 1.
// Work-item u = (g, column block, o % Opg), o % Opg fastest: lanes read consecutive partial sums (vectors) and
// each loops over kRows consecutive columns j = (kh * KW + kw) * Cpg + c of its output channel, so its strided
// stores fill the same few cache lines (one element per work-item and a gather across channels a weight-row
// apart ran at ~7 ns per element on the CPU device: those rows alias in the same cache sets).
// Launch: nd_range<1>, any local and global size; work-item i takes u = i, i + global size, ... below
// G * ceil(KH*KW*Cpg / kRows) * Opg.
template <typename T>
void conv2d_reduce_splits::run(item_arg<1> ia, const params<T>& p) {
  const auto part = p.part;
  const auto dst = p.dst;
  const auto splits = p.splits;
  const auto part_stride = p.part_stride;
  const auto G = p.G;
  const auto Opg = p.Opg;
  const auto Opg_pad = p.Opg_pad;
  const auto Cpg = p.Cpg;
  const auto dst_cl = p.dst_cl;
  using A = acc_t<T>;
  const auto it = item(ia);
  const int64_t KK = p.KH * p.KW, J = KK * Cpg;
  const int64_t jblocks = (J + kRows - 1) / kRows;
  const int64_t units = G * jblocks * Opg;
  const int64_t step = static_cast<int64_t>(it.get_global_range(0));
  for (int64_t u = static_cast<int64_t>(it.get_global_id(0)); u < units; u += step) {
    const int64_t ol = u % Opg, t = u / Opg;
    const int64_t jb = t % jblocks, g = t / jblocks;
    const int64_t o = g * Opg + ol;
    const int64_t j0 = jb * kRows, j1 = J - j0 < kRows ? J : j0 + kRows;
    int64_t c = j0 % Cpg, tap = j0 / Cpg;
    for (int64_t j = j0; j < j1; ++j) {
      const int64_t src = (g * J + j) * Opg_pad + ol;
      A sum = A(0);
      for (int64_t s = 0; s < splits; ++s) sum += part[s * part_stride + src];
      store<T>(dst, o * J + (dst_cl ? j : c * KK + tap), sum);
      if (++c == Cpg) {
        c = 0;
        ++tap;
      }
    }
  }
}

// ------------------------------------------------------------------ weight packing
// Panels (conv2d_igemm's operand): wpk[g, panel, kh, kw, s, jj] = weight element of destination channel
// j = panel * pad + jj and source channel s of group g at tap (kh, kw) (zero for j past the group's
// destination channels), then one zero element. Forward: destination = output channel, source = input
// channel; transposed: the reverse. Lanes run over the destination channels (the stores are vectors), each
// lane reads its weight rows in memory order (source channel, kh, kw: contiguous for a contiguous weight).
// A work-group covers one whole panel (pad / S vectors, so that no two work-groups write parts of one cache
// line) x src_block source channels. Elements are copied as they are (bits kept, NaN payloads too).
// Launch: nd_range<1>, local size S, global size S * ceil(dst/pad) * G * ceil(src / src_block).
template <int S>
template <typename T>
void conv2d_pack_panels<S>::run(item_arg<1> ia, const params<T>& p) {
  const auto w = p.w;
  const auto wpk = p.wpk;
  const auto G = p.G;
  const auto Opg = p.Opg;
  const auto Cpg = p.Cpg;
  const auto KH = p.KH;
  const auto KW = p.KW;
  const auto wO = p.wO;
  const auto wC = p.wC;
  const auto wH = p.wH;
  const auto wW = p.wW;
  const auto panel = p.pad;
  const auto src_block = p.src_block;
  const auto transposed = p.transposed;
  const auto it = item(ia);
  const int64_t lane = static_cast<int64_t>(it.get_local_id(0));
  int64_t tile = static_cast<int64_t>(it.get_group(0));
  const int64_t dst_ch = transposed ? Cpg : Opg, src_ch = transposed ? Opg : Cpg, taps = KH * KW;
  const int64_t npanels = (dst_ch + panel - 1) / panel;
  const int64_t pidx = tile % npanels;
  tile /= npanels;
  const int64_t g = tile % G;
  const int64_t sb = tile / G;
  // Element strides of the destination and source channel in the weight.
  const int64_t dst_stride = transposed ? wC : wO, src_stride = transposed ? wO : wC;
  const T* group_w = w + g * Opg * wO;
  T* out = wpk + (g * npanels + pidx) * taps * src_ch * panel + lane;
  const int64_t s0 = sb * src_block;
  const int64_t s1 = s0 + src_block < src_ch ? s0 + src_block : src_ch;
  for (int64_t v = 0; v < panel / S; ++v) {
    const int64_t j0 = pidx * panel + v * S, j = j0 + lane;
    T* vout = out + v * S;
    if (j0 + S <= dst_ch) {
      // Every lane in range (uniform): plain loads and stores. A per-lane condition here made the CPU
      // compiler mask the stores (vmaskmovps, microcoded on AMD CPUs: the packing ran 10x slower).
      const T* lane_w = group_w + j * dst_stride;
      for (int64_t s = s0; s < s1; ++s) {
        for (int64_t kh = 0; kh < KH; ++kh) {
          for (int64_t kw = 0; kw < KW; ++kw)
            vout[((kh * KW + kw) * src_ch + s) * panel] = lane_w[s * src_stride + kh * wH + kw * wW];
        }
      }
    } else {
      const bool in = j < dst_ch;
      const T* lane_w = group_w + (in ? j : 0) * dst_stride;  // lanes past the channels read channel 0, store 0
      for (int64_t s = s0; s < s1; ++s) {
        for (int64_t kh = 0; kh < KH; ++kh) {
          for (int64_t kw = 0; kw < KW; ++kw) {
            const T e = lane_w[s * src_stride + kh * wH + kw * wW];
            vout[((kh * KW + kw) * src_ch + s) * panel] = in ? e : T{};
          }
        }
      }
    }
  }
  if (static_cast<int64_t>(it.get_group(0)) == 0 && lane == 0) wpk[G * npanels * taps * src_ch * panel] = T{};
}

// Lanes over groups (conv2d_igemm_groups' operand): wpk[kh, kw, s, d, g] (g padded to pad) = the weight
// element of destination channel d and source channel s of group g at tap (kh, kw), zero for g >= G. One
// work-item per packed element (these weights are small: depthwise-like layers).
// Launch: nd_range<1>, any local size, global size >= KH * KW * src * dst * pad.
template <typename T>
void conv2d_pack_groups::run(item_arg<1> ia, const params<T>& p) {
  const auto w = p.w;
  const auto wpk = p.wpk;
  const auto G = p.G;
  const auto Opg = p.Opg;
  const auto Cpg = p.Cpg;
  const auto KH = p.KH;
  const auto KW = p.KW;
  const auto G_pad = p.pad;
  const auto transposed = p.transposed;
  const auto it = item(ia);
  const int64_t dst_ch = transposed ? Cpg : Opg, src_ch = transposed ? Opg : Cpg;
  const int64_t e = static_cast<int64_t>(it.get_global_id(0));
  if (e >= KH * KW * src_ch * dst_ch * G_pad) return;
  int64_t rest = e;
  const int64_t g = rest % G_pad;
  rest /= G_pad;
  const int64_t d = rest % dst_ch;
  rest /= dst_ch;
  const int64_t s = rest % src_ch;
  const int64_t t = rest / src_ch;
  const int64_t kh = t / KW, kw = t - kh * KW;
  const int64_t o = transposed ? s : d, c = transposed ? d : s;
  wpk[e] = g < G ? w[(g * Opg + o) * p.wO + c * p.wC + kh * p.wH + kw * p.wW] : T{};
}

// ------------------------------------------------------------------ Winograd F(2x2, 3x3) (conv2d_packed: float32,
//                                                                    and half / bfloat16 through float32 scratch)
// For 3x3 kernels with stride 1, dilation 1 and one group, each 2x2 block of output pixels (a "tile") is
//     Y = A^T [ sum over input channels c of (G g_c G^T) (.) (B^T d_c B) ] A
// with d_c the 4x4 input patch of channel c (zero outside the input), g_c the 3x3 weights of (o, c), (.) the
// elementwise product, and
//     B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1],  G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1],
//     A^T = [1 1 1 0; 0 1 -1 -1]
// (Lavin & Gray 2015): 16 multiplications per tile and channel pair instead of 36. Three kernels, over a chunk of
// tiles [t0, t0 + T) (the host cuts the tiles into chunks so that the scratch stays in cache). V, U and M are
// float32 for every element type: a half or bfloat16 input is widened when it is transformed and the output
// rounded once when stored, so the GEMM does no conversion and its products are those of the float32 path:
//   conv2d_wino_input:  V[xi, t, c]    = (B^T d_c B)[xi] of tile t0 + t    (scratch, [16][T][C])
//   conv2d_wino_gemm:   M[xi, t, o]    = sum over c of V[xi, t, c] * U[xi, c, o]: 16 GEMMs [T x C] x [C x O]
//                                        (scratch [16][T][O_pad]), tiled as conv2d_igemm (lanes over o, R tiles
//                                        x Q channel vectors per work-group, uniform scalar loads of V)
//   conv2d_wino_output: dst            = A^T M A + bias [+ residual] [ReLU], the same epilogue as conv2d_igemm.
// U (G g G^T, made once when the weight is packed: conv2d_wino_pack) is laid out [16][O_pad / P][C][P], P the
// panel width (shapes.h conv2d_pack_layout): a work-group's weights are one contiguous stream per xi.
// Every transform is a fixed sequence of additions (and exact halvings in U), written out below in the order
// the host reference (shapes.cpp conv2d_pack, xkernels.reference) repeats; the GEMM accumulates with explicit fma
// in the order c = 0, 1, ... . Terms with a zero coefficient are left out (not multiplied by 0): a NaN input
// reaches only the tiles whose patch holds it. All index arithmetic is int64.

// The transforms of one 4x4 (or 4x3 / 3x3) block, rows then columns.
template <typename A>
inline void wino_input_transform(const A (&d)[4][4], A (&v)[4][4]) {
  A t[4][4];
  XK_UNROLL
  for (int j = 0; j < 4; ++j) {
    t[0][j] = d[0][j] - d[2][j];
    t[1][j] = d[1][j] + d[2][j];
    t[2][j] = d[2][j] - d[1][j];
    t[3][j] = d[1][j] - d[3][j];
  }
  XK_UNROLL
  for (int i = 0; i < 4; ++i) {
    v[i][0] = t[i][0] - t[i][2];
    v[i][1] = t[i][1] + t[i][2];
    v[i][2] = t[i][2] - t[i][1];
    v[i][3] = t[i][1] - t[i][3];
  }
}
template <typename A>
inline void wino_output_transform(const A (&m)[4][4], A (&y)[2][2]) {
  A s[2][4];
  XK_UNROLL
  for (int j = 0; j < 4; ++j) {
    s[0][j] = (m[0][j] + m[1][j]) + m[2][j];
    s[1][j] = (m[1][j] - m[2][j]) - m[3][j];
  }
  XK_UNROLL
  for (int i = 0; i < 2; ++i) {
    y[i][0] = (s[i][0] + s[i][1]) + s[i][2];
    y[i][1] = (s[i][1] - s[i][2]) - s[i][3];
  }
}
template <typename A>
inline void wino_weight_transform(const A (&g)[3][3], A (&u)[4][4]) {
  A t[4][3];
  XK_UNROLL
  for (int j = 0; j < 3; ++j) {
    t[0][j] = g[0][j];
    t[1][j] = ((g[0][j] + g[1][j]) + g[2][j]) * A(0.5);
    t[2][j] = ((g[0][j] - g[1][j]) + g[2][j]) * A(0.5);
    t[3][j] = g[2][j];
  }
  XK_UNROLL
  for (int i = 0; i < 4; ++i) {
    u[i][0] = t[i][0];
    u[i][1] = ((t[i][0] + t[i][1]) + t[i][2]) * A(0.5);
    u[i][2] = ((t[i][0] - t[i][1]) + t[i][2]) * A(0.5);
    u[i][3] = t[i][2];
  }
}

template <typename T>
struct conv2d_wino_input_params {
  const T* src;  // [N, C, H, W], element strides (sN, sC, sH, sW): any layout (channels_last: vector loads)
  acc_t<T>* v;   // [16][T][C] (float32 for half and bfloat16 too)
  int64_t N, C, H, W, sN, sC, sH, sW, TH, TW, ph, pw, t0, tiles, tiles_per_group;
};
template <bool SRC_CL, int S>
struct conv2d_wino_input {
  static constexpr int dims = 1;
  static constexpr int sub_group = S;
  static constexpr bool lane_variant = true;  // built for the one width the host launches
  using types = type_list<float, half, bf16>;
  template <typename T>
  using params = conv2d_wino_input_params<T>;
  template <typename T>
  static void run(item_arg<1> ia, const params<T>& p);
};

template <typename T>
struct conv2d_wino_gemm_params {
  const T* v;  // [16][T][C]
  const T* u;  // [16][O_pad / panel][C][panel]
  T* m;        // [16][T][O_pad]
  int64_t tiles, C, O_pad, panel, tiles_per_group;
};
template <int S, int R, int Q>
struct conv2d_wino_gemm {
  static constexpr int dims = 1;
  static constexpr int sub_group = S;
  static constexpr int vector_registers = tile_vector_registers<Q>;
  static constexpr bool lane_variant = true;  // built for the one width the host launches
  using types = type_list<float>;
  template <typename T>
  using params = conv2d_wino_gemm_params<T>;
  template <typename T>
  static void run(item_arg<1> ia, const params<T>& p);
};

template <typename T>
struct conv2d_wino_output_params {
  const acc_t<T>* m;  // [16][T][O_pad] (float32 for half and bfloat16 too)
  const T* bias;
  const T* res;  // residual in dst's layout, or null
  T* dst;        // [N, O, OH, OW] (DST_CL: channels_last memory)
  int64_t N, O, OH, OW, TH, TW, O_pad, t0, tiles, tiles_per_group;
  int32_t relu;
};
template <bool DST_CL, int S>
struct conv2d_wino_output {
  static constexpr int dims = 1;
  static constexpr int sub_group = S;
  static constexpr bool lane_variant = true;  // built for the one width the host launches
  using types = type_list<float, half, bf16>;
  template <typename T>
  using params = conv2d_wino_output_params<T>;
  template <typename T>
  static void run(item_arg<1> ia, const params<T>& p);
};

template <typename T>
struct conv2d_wino_pack_params {
  const T* w;  // [O, C, 3, 3], element strides (wO, wC, wH, wW): any layout
  T* u;        // [16][O_pad / panel][C][panel]
  int64_t O, C, O_pad, panel, wO, wC, wH, wW;
};
struct conv2d_wino_pack {
  static constexpr int dims = 1;
  static constexpr int sub_group = 16;
  using types = type_list<float>;
  template <typename T>
  using params = conv2d_wino_pack_params<T>;
  template <typename T>
  static void run(item_arg<1> ia, const params<T>& p);
};

// Input transform. A work-group: S lanes over input channels c0 .. c0+S-1 (lanes past C return at once) x
// tiles_per_group consecutive tiles. The 4x4 patch's rows and columns inside the input are uniform across
// lanes: outside, the lane reads its channel at pixel 0 and uses 0 (no branch around the loads). SRC_CL: the
// input's channel stride is 1 (channels_last memory), so the lane's address is the uniform pixel offset + c, which
// the CPU vectorizer turns into one vector load per patch element; with a run-time channel stride it emits two
// 64-bit-index gathers per element instead (measured 1.8-2.2x slower transform on ResNet-50's layers).
// Launch: nd_range<1>, local size S, global size S * ceil(C / S) * ceil(T / tiles_per_group).
template <bool SRC_CL, int S>
template <typename T>
void conv2d_wino_input<SRC_CL, S>::run(item_arg<1> ia, const params<T>& p) {
  const auto src = p.src;
  const auto v = p.v;
  const auto C = p.C;
  const auto H = p.H;
  const auto W = p.W;
  const auto sN = p.sN;
  const auto sC = p.sC;
  const auto sH = p.sH;
  const auto sW = p.sW;
  const auto TH = p.TH;
  const auto TW = p.TW;
  const auto T_ = p.tiles;
  using A = acc_t<T>;
  const auto it = item(ia);
  const int64_t lane = static_cast<int64_t>(it.get_local_id(0));
  const int64_t grp = static_cast<int64_t>(it.get_group(0));
  const int64_t cblocks = (C + S - 1) / S;
  const int64_t cb = grp % cblocks, tb = grp / cblocks;
  const int64_t c = cb * S + lane;
  if (c >= C) return;
  const T* lane_src = src + (SRC_CL ? c : c * sC);
  for (int64_t k = 0; k < p.tiles_per_group; ++k) {
    const int64_t t = tb * p.tiles_per_group + k;
    if (t >= T_) break;
    const int64_t tg = p.t0 + t;  // tile in the whole problem: (n, ty, tx)
    const int64_t n = tg / (TH * TW), rem = tg - n * (TH * TW);
    const int64_t ty = rem / TW, tx = rem - ty * TW;
    const int64_t y0 = 2 * ty - p.ph, x0 = 2 * tx - p.pw;
    A d[4][4];
    XK_UNROLL
    for (int i = 0; i < 4; ++i) {
      const int64_t y = y0 + i;
      XK_UNROLL
      for (int j = 0; j < 4; ++j) {
        const int64_t x = x0 + j;
        const bool in = y >= 0 && y < H && x >= 0 && x < W;
        const A e = load<T>(lane_src, in ? n * sN + y * sH + x * sW : 0);
        d[i][j] = in ? e : A(0);
      }
    }
    A vt[4][4];
    wino_input_transform(d, vt);
    XK_UNROLL
    for (int i = 0; i < 4; ++i) {
      XK_UNROLL
      for (int j = 0; j < 4; ++j) v[((i * 4 + j) * T_ + t) * C + c] = vt[i][j];
    }
  }
}

// The 16 GEMMs. A work-group: one xi, S*Q output channels c0 .. (a panel's part: c0 / panel, c0 % panel),
// tiles_per_group blocks of R tiles; lane l accumulates channels l, l+S, .. of R tiles (R*Q accumulators, as
// conv2d_igemm). Tiles past T repeat the last one (computed, not stored). Consecutive work-groups take
// consecutive tile blocks of the same (xi, channels): that U slice stays in cache.
// Launch: nd_range<1>, local size S, global size S * 16 * (O_pad / (S*Q)) * ceil(ceil(T / R) / tiles_per_group).
template <int S, int R, int Q>
template <typename T>
void conv2d_wino_gemm<S, R, Q>::run(item_arg<1> ia, const params<T>& p) {
  const auto v = p.v;
  const auto u = p.u;
  const auto m = p.m;
  const auto T_ = p.tiles;
  const auto C = p.C;
  const auto O_pad = p.O_pad;
  const auto panel = p.panel;
  using A = acc_t<T>;
  const auto it = item(ia);
  const int64_t lane = static_cast<int64_t>(it.get_local_id(0));
  int64_t grp = static_cast<int64_t>(it.get_group(0));
  const int64_t pblocks = ((T_ + R - 1) / R + p.tiles_per_group - 1) / p.tiles_per_group;
  const int64_t pb = grp % pblocks;
  grp /= pblocks;
  const int64_t ctiles = O_pad / (S * Q);
  const int64_t ct = grp % ctiles, xi = grp / ctiles;
  const int64_t c0 = ct * (S * Q);
  const T* uk = u + (xi * (O_pad / panel) + c0 / panel) * C * panel + c0 % panel + lane;
  const T* vx = v + xi * T_ * C;
  T* mx = m + xi * T_ * O_pad + c0 + lane;
  for (int64_t pt = 0; pt < p.tiles_per_group; ++pt) {
    const int64_t r0 = (pb * p.tiles_per_group + pt) * R;
    if (r0 >= T_) break;
    const T* vr[R];
    XK_UNROLL
    for (int r = 0; r < R; ++r) vr[r] = vx + (r0 + r < T_ ? r0 + r : T_ - 1) * C;
    A acc[R][Q];
    XK_UNROLL
    for (int r = 0; r < R; ++r) {
      XK_UNROLL
      for (int q = 0; q < Q; ++q) acc[r][q] = A(0);
    }
    for (int64_t c = 0; c < C; ++c) {
      A w[Q];
      XK_UNROLL
      for (int q = 0; q < Q; ++q) w[q] = load<T>(uk, c * panel + q * S);
      XK_UNROLL
      for (int r = 0; r < R; ++r) {
        const A a = load<T>(vr[r], c);
        XK_UNROLL
        for (int q = 0; q < Q; ++q) acc[r][q] = sycl::fma(a, w[q], acc[r][q]);
      }
    }
    XK_UNROLL
    for (int r = 0; r < R; ++r) {
      if (r0 + r < T_) {
        XK_UNROLL
        for (int q = 0; q < Q; ++q) store<T>(mx, (r0 + r) * O_pad + q * S, acc[r][q]);
      }
    }
  }
}

// Output transform and epilogue. A work-group: S lanes over output channels (the last block masked) x
// tiles_per_group consecutive tiles; each lane forms its channel's 2x2 block (the pixels inside the output),
// then v = y + bias [+ residual at dst's offset] [ReLU, NaN kept], rounded once when stored (as conv2d_igemm).
// Launch: nd_range<1>, local size S, global size S * ceil(O / S) * ceil(T / tiles_per_group).
template <bool DST_CL, int S>
template <typename T>
void conv2d_wino_output<DST_CL, S>::run(item_arg<1> ia, const params<T>& p) {
  const auto mm = p.m;
  const auto bias = p.bias;
  const auto res = p.res;
  const auto dst = p.dst;
  const auto O = p.O;
  const auto OH = p.OH;
  const auto OW = p.OW;
  const auto TH = p.TH;
  const auto TW = p.TW;
  const auto O_pad = p.O_pad;
  const auto T_ = p.tiles;
  using A = acc_t<T>;
  const auto it = item(ia);
  const int64_t lane = static_cast<int64_t>(it.get_local_id(0));
  const int64_t grp = static_cast<int64_t>(it.get_group(0));
  const int64_t oblocks = (O + S - 1) / S;
  const int64_t ob = grp % oblocks, tb = grp / oblocks;
  const int64_t o = ob * S + lane;
  if (o >= O) return;
  const A b = bias != nullptr ? load<T>(bias, o) : A(0);
  const int64_t HW = OH * OW;
  for (int64_t k = 0; k < p.tiles_per_group; ++k) {
    const int64_t t = tb * p.tiles_per_group + k;
    if (t >= T_) break;
    const int64_t tg = p.t0 + t;
    const int64_t n = tg / (TH * TW), rem = tg - n * (TH * TW);
    const int64_t ty = rem / TW, tx = rem - ty * TW;
    A mt[4][4];
    XK_UNROLL
    for (int i = 0; i < 4; ++i) {
      XK_UNROLL
      for (int j = 0; j < 4; ++j) mt[i][j] = mm[((i * 4 + j) * T_ + t) * O_pad + o];
    }
    A y[2][2];
    wino_output_transform(mt, y);
    XK_UNROLL
    for (int i = 0; i < 2; ++i) {
      XK_UNROLL
      for (int j = 0; j < 2; ++j) {
        const int64_t oy = 2 * ty + i, ox = 2 * tx + j;
        if (oy < OH && ox < OW) {
          const int64_t off = DST_CL ? ((n * OH + oy) * OW + ox) * O + o : (n * O + o) * HW + oy * OW + ox;
          A val = y[i][j] + b;
          if (res != nullptr) val += load<T>(res, off);
          if (p.relu) val = val < A(0) ? A(0) : val;  // NaN propagates, as torch.relu
          store<T>(dst, off, val);
        }
      }
    }
  }
}

// Weight transform U = G g G^T (the order of wino_weight_transform). A work-group takes a contiguous block of the
// rows (panel pi, input channel c) of U, so that consecutive c reuse the cache lines of the weight that the
// previous row's strided reads brought in (round-robin rows: 3x slower with a channels_last weight); its lanes walk the
// panel's columns jj (output channel o = pi * panel + jj; channels past O get zeros), so the stores are contiguous and
// the row's (pi, c) comes from one uniform division per row (per-element int64 divisions, which the vectorizer
// scalarizes, made this kernel 20 % of a ResNet-50 training step's kernel time). The weight is read through its strides
// (negative ones too: grad_input's flipped, transposed view); across lanes that is a strided read, the transposition
// the layout needs. Launch: nd_range<1>, local size 16 (any), any number of work-groups.
template <typename T>
void conv2d_wino_pack::run(item_arg<1> ia, const params<T>& p) {
  using A = acc_t<T>;
  const auto it = item(ia);
  const int64_t lane = static_cast<int64_t>(it.get_local_id(0));
  const int64_t lanes = static_cast<int64_t>(it.get_local_range(0));
  const int64_t groups = static_cast<int64_t>(it.get_group_range(0));
  const int64_t rows = p.O_pad / p.panel * p.C, plane = p.O_pad * p.C;
  const int64_t per_group = (rows + groups - 1) / groups, grp = static_cast<int64_t>(it.get_group(0));
  const int64_t row_end = rows - grp * per_group < per_group ? rows : (grp + 1) * per_group;
  for (int64_t row = grp * per_group; row < row_end; ++row) {
    const int64_t pi = row / p.C, c = row - pi * p.C;
    const T* wc = p.w + c * p.wC;
    auto column = [&](int64_t jj) {
      const int64_t o = pi * p.panel + jj, e = row * p.panel + jj;
      const bool in = o < p.O;
      A g[3][3];
      XK_UNROLL
      for (int i = 0; i < 3; ++i) {
        XK_UNROLL
        for (int j = 0; j < 3; ++j) {
          const A x = load<T>(wc, (in ? o : 0) * p.wO + i * p.wH + j * p.wW);
          g[i][j] = in ? x : A(0);
        }
      }
      A uu[4][4];
      wino_weight_transform(g, uu);
      XK_UNROLL
      for (int i = 0; i < 4; ++i) {
        XK_UNROLL
        for (int j = 0; j < 4; ++j) store<T>(p.u, (i * 4 + j) * plane + e, uu[i][j]);
      }
    };
    for (int64_t j0 = 0; j0 < p.panel; j0 += lanes) {
      if (j0 + lanes <= p.panel)  // uniform: unmasked stores (AVX2 masks them with vmaskmovps, microcoded on AMD)
        column(j0 + lane);
      else if (j0 + lane < p.panel)
        column(j0 + lane);
    }
  }
}

// ------------------------------------------------------------------ the op's kernels (variants the host launches)
// Lane widths S: 16 (float, half, bfloat16) and 8 (double) fill one 512-bit vector on the CPU device, 8 floats
// one 256-bit vector on AVX2 CPUs; 32 is the width of devices without those sub-group sizes (NVIDIA warps).
// Tiles (R, Q): wide 6x4 (32 vector registers) or, at width 8, 6x2 (16: AVX2), and narrow 8x1 (Conv2dConfig in
// conv2d.cpp); lanes over groups: 8 pixels, grad_weight over groups: 9 taps.
template <int S>
using conv2d_lane_base =
    kernel_list<conv2d_igemm<true, S, 6, 4>, conv2d_igemm<false, S, 6, 4>, conv2d_igemm<true, S, 8, 1>,
                conv2d_igemm<false, S, 8, 1>, conv2d_igemm_groups<true, S, 8>, conv2d_igemm_groups<false, S, 8>,
                conv2d_grad_weight<S, 6, 4>, conv2d_grad_weight<S, 8, 1>, conv2d_grad_weight_groups<S, 9>,
                conv2d_grad_bias<true, S>, conv2d_grad_bias<false, S>, conv2d_pack_panels<S>>;
using conv2d_avx2_tiles = kernel_list<conv2d_igemm<true, 8, 6, 2>, conv2d_igemm<false, 8, 6, 2>,
                                      conv2d_grad_weight<8, 6, 2>, conv2d_wino_gemm<8, 6, 2>>;
// Winograd (CPU lane widths only: the packed weights are for CPU tensors; the GEMM and U are float32 for every type).
template <int S>
using conv2d_wino_kernels = kernel_list<conv2d_wino_input<true, S>, conv2d_wino_input<false, S>,
                                        conv2d_wino_output<true, S>, conv2d_wino_output<false, S>>;
template <int S>
using conv2d_lane_kernels =
    std::conditional_t<S == 8, concat_t<conv2d_lane_base<S>, conv2d_avx2_tiles>, conv2d_lane_base<S>>;
using conv2d_kernels = concat_t<conv2d_lane_kernels<16>, conv2d_lane_kernels<8>, conv2d_lane_kernels<32>,
                                conv2d_wino_kernels<16>, conv2d_wino_kernels<8>,
                                kernel_list<conv2d_wino_gemm<16, 6, 4>, conv2d_reduce_splits, conv2d_im2col,
                                            conv2d_im2col_rows, conv2d_col2im, conv2d_pack_groups, conv2d_wino_pack>>;

}  // namespace xk
