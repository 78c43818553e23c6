// conv2d on the SYCL backend: host wrapper (checks are done by the entry; this brings the
// operands into the layouts the kernels of kernels/conv2d.hpp read, packs the weight,
// allocates outputs, picks the tile shape and launch geometry, and launches).
//
// Layouts: the kernels read their gathered operand (input, or grad_output for grad_input)
// through its strides, so NCHW, channels_last and strided views are used as they are (no
// copy); grad_weight also needs grad_output channels_last (its channels are vector loads) and
// converts it when it is not. Outputs are written directly in the problem's memory format
// (p.channels_last: NHWC, else NCHW), 3-D when the input was unbatched. The weight is packed
// per call, by a kernel (conv2d_pack_panels / conv2d_pack_groups), into panels of the tile's width
// [G, O/G / panel, KH, KW, C/G, panel] (the destination channel innermost, zero padded to whole panels)
// plus one trailing zero that out-of-image taps read, or comes packed once by pack_conv2d_weight
// (conv2d_packed: panels of shapes.h's width, conv2d_pack_layout).
#include <ATen/ATen.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <iterator>
#include <string>

#include "sycl/amx_gemm.h"
#include "sycl/gemm.h"
#include "sycl/host_alloc.h"
#include "sycl/launch.h"
#include "sycl/runtime_internal.h"
#include "xkernels/backend.h"
#include "xkernels/checks.h"
#include "xkernels/dispatch.h"
#include "xkernels/ops.h"
#include "xkernels/shapes.h"

namespace xkernels::sycl_backend {

namespace {

// Tile shapes and split factors. Measured on the OpenCL CPU device (AVX-512): see
// kernels/conv2d.hpp for the work decomposition these parametrise.
struct Conv2dConfig {
  // Destination-pixel GEMM, "wide" tile: R=6 pixels x Q=4 channel vectors = 24 accumulators,
  // + 4 weight vectors + 1 broadcast = 29 of 32 vector registers: the inner loop compiles
  // to 4 loads, 6 broadcasts and 24 FMAs without spills (checked in the generated assembly).
  static constexpr int kWideR = 6, kWideQ = 4;
  // On 16-register devices (AVX2: 16 ymm; DeviceTraits::vector_registers) the wide tile is R=6 x Q=2 of
  // 8-lane vectors: 12 accumulators + 2 weight vectors + 1 broadcast = 15 registers. The 6x4 tile of 16
  // lanes there needed 58 ymm, and its generated inner loop loaded and stored every accumulator from the
  // stack (checked in the assembly).
  static constexpr int kWideQ16 = 2;
  // "Narrow" tile for few channels per group (grouped / depthwise convolutions): one channel
  // vector, more pixels, so fewer lanes idle.
  static constexpr int kNarrowR = 8, kNarrowQ = 1;
  // The wide tile is used from this many destination channels per group (at 48 a quarter
  // of its lanes idle; below that the narrow tile does less wasted work).
  static constexpr int64_t kWideMinChannels = kConv2dWideMinChannels;  // shapes.h: the packed layout's rule
  // Lanes over groups (conv2d_igemm_groups) when that keeps more lanes busy than lanes over
  // the channels of one group (depthwise: 16 of 16 instead of 1 of 16); R pixels per
  // work-group, R accumulators per lane.
  static constexpr int kGroupsR = 8;
  // Destination-pixel GEMMs: consecutive pixel tiles per work-group (the tiling table, choose_tiling:
  // a work-group costs a fixed dispatch overhead on the CPU device; 1x1 layers with 64 channels ran at a
  // third of the speed of 3x3 layers with one tile per work-group), up to kMaxTilesPerGroup, keeping at
  // least kTargetGroups work-groups.
  static constexpr int64_t kMaxTilesPerGroup = 32;
  // grad_weight with lanes over groups: R taps per work-group (a 3x3 kernel in one block).
  static constexpr int kGradWeightGroupsR = 9;
  // grad_weight / grad_bias reduce over N*OH*OW pixels, split into chunks that each
  // work-group sums into its own partial result (a second kernel adds the partials in a
  // fixed order). Work-groups of one chunk run back to back, so a chunk of
  // kPixelsPerSplit pixels (64 channels: 64 KiB of grad_output plus the input rows) stays
  // in L2 while every tile reads it; with one chunk per image each work-group streamed the
  // whole image from memory (measured 5x slower at 56x56x64). More splits are made when
  // there are too few tiles for kTargetGroups work-groups. Bounds: at least
  // kMinPixelsPerSplit pixels per split, at most kMaxSplits splits and kMaxPartialElements
  // partial-sum elements. Fixed numbers (not device-dependent) keep the summation order,
  // hence the result, the same on every device.
  static constexpr int64_t kPixelsPerSplit = 256;
  static constexpr int64_t kTargetGroups = 64;
  static constexpr int64_t kMinPixelsPerSplit = 64;
  static constexpr int64_t kMaxSplits = 64;
  static constexpr int64_t kMaxPartialElements = int64_t(1) << 23;
  static constexpr int64_t kReduceLocal = 64;       // work-items per work-group in the split reduction
  static constexpr int64_t kReduceMaxGroups = 256;  // work-groups of the split reduction (each loops)
  // Weight packing: about this many elements per work-group (conv2d_pack_panels).
  static constexpr int64_t kPackElements = 8192;
  // grad_weight as a GEMM (one group, float and double): the patches of at most this many elements per chunk of
  // pixels (16 MiB of float); each chunk's product is added to the last. A fixed number (not device-dependent),
  // so the summation order, hence the result, is the same everywhere.
  static constexpr int64_t kIm2colElements = int64_t(1) << 22;
  static constexpr int64_t kIm2colPixels = 64;  // pixels per work-group of conv2d_im2col (chunks: multiples)
  // NCHW 1x1 layers run as one GEMM per image (image_gemms) from this many pixels per image (ResNet-50: the 56x56
  // layers; measured in image_gemm_fits).
  static constexpr int64_t kImageGemmMinPixels = 1024;
  // grad_weight of stride-1 windows of channels_last problems without im2col from this many output pixels per image
  // (ResNet-50: the 3x3 56x56 layers; measured in grad_weight_window_fits).
  static constexpr int64_t kWindowMinPixels = 2048;
};

// Calls f(std::integral_constant<int, S>) for the lane width S (one the table has for element type T).
template <typename T, int S, typename F>
bool call_with_lanes(int64_t s, F& f) {
  if constexpr (xk::has_type<xk::lane_types<S>, T>::value) {
    if (s == S) {
      f(std::integral_constant<int, S>{});
      return true;
    }
  }
  return false;
}
template <typename T, typename F>
void with_lanes(int64_t S, F&& f) {
  const bool done = call_with_lanes<T, 8>(S, f) || call_with_lanes<T, 16>(S, f) || call_with_lanes<T, 32>(S, f);
  TORCH_CHECK(done, "xkernels.conv2d: the kernel table has no lane width ", S, " for this element type");
}

struct Tile {
  int R, Q;
};
Tile igemm_tile(int64_t channels_per_group, int vector_registers) {
  using C = Conv2dConfig;
  static_assert(C::kWideQ == 4 && C::kNarrowQ == 1, "shapes.h conv2d_channel_vectors");
  if (channels_per_group < C::kWideMinChannels) return Tile{C::kNarrowR, C::kNarrowQ};
  return Tile{C::kWideR, vector_registers == 16 ? C::kWideQ16 : C::kWideQ};
}

// Calls f(R, Q) with the tile as std::integral_constant<int, ...> values (the table's tiles). The AVX2 tile
// exists at lane width 8 only (kernels/conv2d.hpp), where lane width 8 is what lane_width gives AVX2 devices.
template <int S, typename F>
void with_tile(Tile t, F&& f) {
  using C = Conv2dConfig;
  if (t.R == C::kWideR && t.Q == C::kWideQ)
    return f(std::integral_constant<int, C::kWideR>{}, std::integral_constant<int, C::kWideQ>{});
  if constexpr (S == 8) {
    if (t.R == C::kWideR && t.Q == C::kWideQ16)
      return f(std::integral_constant<int, C::kWideR>{}, std::integral_constant<int, C::kWideQ16>{});
  }
  TORCH_CHECK(t.R == C::kNarrowR && t.Q == C::kNarrowQ, "xkernels.conv2d: no ", t.R, "x", t.Q, " tile at lane width ",
              S);
  f(std::integral_constant<int, C::kNarrowR>{}, std::integral_constant<int, C::kNarrowQ>{});
}

// `t` (4-D, or 3-D unbatched) as a 4-D view.
at::Tensor as_4d(const at::Tensor& t) { return t.dim() == 3 ? t.unsqueeze(0) : t; }

// Packs `weight` on the device for the destination-pixel GEMMs (kernels/conv2d.hpp, weight packing):
// panels of `pad` destination channels (lanes over channels) or, with `groups_layout`, groups padded to `pad`.
// The result is a flat tensor of the backend's allocator; nothing waits for the kernel (the GEMM that reads
// it runs after it on the same in-order queue; the caller's finish waits for both).
template <typename T>
at::Tensor pack_on_device(Launcher& L, const at::Tensor& weight, int64_t G, bool transposed, bool groups_layout,
                          int64_t pad, int64_t total_numel = 0) {
  const int64_t Opg = weight.size(0) / G, Cpg = weight.size(1), KH = weight.size(2), KW = weight.size(3);
  const int64_t dst_ch = transposed ? Cpg : Opg, src_ch = transposed ? Opg : Cpg;
  typename xk::conv2d_pack_params<T> q{};
  q.w = cptr<T>(weight);
  q.G = G, q.Opg = Opg, q.Cpg = Cpg, q.KH = KH, q.KW = KW;
  q.wO = weight.stride(0), q.wC = weight.stride(1), q.wH = weight.stride(2), q.wW = weight.stride(3);
  q.pad = pad;
  q.transposed = transposed ? 1 : 0;
  at::Tensor wpk;
  if (groups_layout) {
    const int64_t total = KH * KW * src_ch * dst_ch * pad;
    wpk = empty({total}, weight.options());
    q.wpk = mptr<T>(wpk);
    const int64_t local =
        std::min<int64_t>(Conv2dConfig::kReduceLocal, static_cast<int64_t>(L.traits().max_work_group_size));
    L.launch<xk::conv2d_pack_groups, T>(
        sycl::nd_range<1>(sycl::range<1>(std::max<int64_t>(1, ceil_div(total, local)) * local), sycl::range<1>(local)),
        q);
    return wpk;
  }
  const int64_t npanels = ceil_div(dst_ch, pad);
  wpk = empty({std::max(G * npanels * pad * KH * KW * src_ch + 1, total_numel)}, weight.options());
  q.wpk = mptr<T>(wpk);
  // Source channels per work-group: about kPackElements elements each, and enough work-groups to share.
  const int64_t S = lane_width<T>(L.traits(), L.lanes_are_work_items());
  const int64_t rows = std::max<int64_t>(1, Conv2dConfig::kPackElements / (pad * KH * KW));
  const int64_t by_groups = ceil_div(src_ch * G * npanels, Conv2dConfig::kTargetGroups);
  q.src_block = std::max<int64_t>(1, std::min({rows, by_groups, src_ch}));
  const int64_t groups = G * npanels * ceil_div(std::max<int64_t>(src_ch, 1), q.src_block);
  with_lanes<T>(S, [&](auto S_) {
    constexpr int SL = decltype(S_)::value;
    L.launch<xk::conv2d_pack_panels<SL>, T>(sycl::nd_range<1>(sycl::range<1>(groups * S), sycl::range<1>(S)), q);
  });
  return wpk;
}

// Work-group shape of the destination-pixel GEMM (lanes over channels): pixel tiles per work-group, their
// order, and K blocking. Chosen per layer by the table in choose_tiling; XKERNELS_CONV2D_TILING
// ("tiles=<n>,kblock=<n>", either part optional; read at every call) overrides it, for measuring.
struct Conv2dTiling {
  int64_t tiles_per_group = 1;
  int64_t kblock = 0;  // reduction steps per K block, 0: none
};
constexpr const char* kTilingEnv = "XKERNELS_CONV2D_TILING";

// The per-device tiling table. A row per device class (DeviceTraits::vector_registers: 16 = AVX2, 32 = AVX-512,
// 0 = any other device); per layer, a work-group takes enough consecutive pixel tiles to run min_steps reduction
// steps and at least min_tiles tiles (at most kMaxTilesPerGroup), while kTargetGroups work-groups remain; layers
// with at least kblock_from reduction steps are K-blocked by kblock steps.
// Measured with scripts/tune_conv2d.py (every ResNet-50 layer, batch 1 and 8, NCHW and channels_last;
// docs/performance.md "conv2d: weight panels, packing on the device, tiling"):
//   AVX2 (AMD EPYC, 2 vCPUs): 8 tiles per work-group was the best or within 2 % of it on 25 of 36 layer cases,
//     the 512-step rule alone 0.91-1.00 of the best; K blocks of 256 steps cost 10-17 %, of 576 steps 0-10 %
//     (the panel layout already streams each tile's weights from L2), so no K blocking.
//   AVX-512 (Xeon, earlier measurements: the 512-step rule). Re-measured on a 2-vCPU AMD EPYC with AVX-512 +
//     AVX512-BF16 (2026-12-05, with Winograd and the 1x1 channels_last GEMM in place, so those layers ignore the
//     tiling): the row within 2 % of the best setting on 33 of 36 layer cases (mean 0.99 of the best, worst 0.92 on
//     a Winograd layer, i.e. noise); 1, 2, 4 or 8 tiles per work-group all within 1 % on average; K blocks of 256
//     steps cost up to 23 % (mean 6 %), of 576 steps up to 10 %. Kept: no K blocking.
//   Other devices (GPUs): not measured; the AVX-512 row.
struct TilingRow {
  int vector_registers;
  int64_t min_steps, min_tiles, kblock_from, kblock;
};
constexpr TilingRow kTilingTable[] = {
    {16, 512, 8, 0, 0},
    {32, 512, 1, 0, 0},
    {0, 512, 1, 0, 0},
};

// The table's choice for a layer: `steps` reduction steps per tile, pixel_tiles x other tiles in all.
Conv2dTiling choose_tiling(const DeviceTraits& t, int64_t steps, int64_t pixel_tiles, int64_t other) {
  const int vr = t.is_cpu ? t.vector_registers() : 0;
  const TilingRow* row = &kTilingTable[std::size(kTilingTable) - 1];
  for (const TilingRow& r : kTilingTable)
    if (r.vector_registers == vr) {
      row = &r;
      break;
    }
  using C = Conv2dConfig;
  const int64_t want = std::max(row->min_tiles, ceil_div(row->min_steps, steps));
  const int64_t by_groups = std::max<int64_t>(1, pixel_tiles * other / C::kTargetGroups);
  Conv2dTiling tiling;
  tiling.tiles_per_group = std::max<int64_t>(1, std::min({C::kMaxTilesPerGroup, want, by_groups}));
  tiling.kblock = row->kblock_from > 0 && steps >= row->kblock_from ? row->kblock : 0;
  return tiling;
}

void apply_tiling_override(Conv2dTiling& t) {
  for_each_env_item(kTilingEnv, [&](const std::string& key, const std::string& val) {
    int64_t n = 0;
    XK_CHECK_VALUE((key == "tiles" || key == "kblock") && parse_env_int(val, &n) && n >= (key == "tiles" ? 1 : 0),
                   "conv2d", "environment variable ", kTilingEnv,
                   " must be 'tiles=<n >= 1>,kblock=<n >= 0>' (either part optional), got '", std::getenv(kTilingEnv),
                   "'");
    (key == "tiles" ? t.tiles_per_group : t.kblock) = n;
  });
}

// The destination-pixel GEMM: forward (src = input, dst = output, bias fused) or grad_input
// (transposed: src = grad_output, dst = grad_input, no bias). Picks lanes over channels
// (conv2d_igemm, wide or narrow tile) or over groups (conv2d_igemm_groups), packs the weight
// for it, launches and (CPU tensors) waits.
// Forward only: `res` (undefined, or laid out exactly as dst) and `relu` are the conv2d_relu epilogue, and
// `prepacked` (defined: from pack_conv2d_weight, `weight` is then unused) replaces the per-call packing.
template <typename T>
void run_destination_gemm(Launcher& L, const Conv2dProblem& p, const at::Tensor& src, const at::Tensor& weight,
                          const at::Tensor& bias, at::Tensor& dst, bool transposed, const at::Tensor& res = {},
                          bool relu = false, const at::Tensor& prepacked = {}) {
  const int64_t S = lane_width<T>(L.traits(), L.lanes_are_work_items());
  const int64_t G = p.groups;
  const int64_t dst_pg = transposed ? p.C_per_group() : p.O_per_group();
  const int64_t N = src.size(0), Cs = src.size(1), Hs = src.size(2), Ws = src.size(3);
  const int64_t Cd = dst.size(1), Hd = dst.size(2), Wd = dst.size(3);
  const int64_t M = N * Hd * Wd;
  bool groups = conv2d_group_lanes_pay(S, G, dst_pg);
  const Tile tile = igemm_tile(dst_pg, L.traits().vector_registers());
  // A prepacked weight (shapes.h's layout, padded for 16 lanes, 8 for float64) decides lanes over groups or
  // channels and the padding; its padding is a multiple of every lane width and tile this launch can take.
  const Conv2dPackLayout layout = prepacked.defined()
                                      ? conv2d_pack_layout({p.O, p.C_per_group(), p.KH, p.KW}, G, src.scalar_type())
                                      : Conv2dPackLayout{};
  if (prepacked.defined()) groups = layout.group_lanes;
  at::Tensor wpk;
  int64_t pad = 0;
  int64_t pixel_tiles = 0, other = 0;  // work-groups = ceil(pixel_tiles / per_group) * other
  XK_CHECK(prepacked.defined() || weight.defined(), "conv2d", "internal error: no weight operand");
  if (groups) {
    pad = prepacked.defined() ? layout.pad : ceil_div(G, S) * S;
    TORCH_CHECK(pad % S == 0, "xkernels.conv2d_packed: the packed weight's padding (", pad,
                ") is not a multiple of this device's lane width (", S, ")");
    pixel_tiles = ceil_div(M, Conv2dConfig::kGroupsR);
    other = dst_pg * (pad / S);
  } else {
    // pad: the weight panels' width, a multiple of the tile's S*Q channels (per call: exactly S*Q, so that a
    // tile's weights are one contiguous stream).
    const int64_t ctiles = ceil_div(dst_pg, S * tile.Q);
    pad = prepacked.defined() ? layout.pad : S * tile.Q;
    TORCH_CHECK(pad % (S * tile.Q) == 0, "xkernels.conv2d_packed: the packed weight's panels (", pad,
                " channels) do not hold this device's tiles (", S, " lanes x ", tile.Q, ")");
    pixel_tiles = ceil_div(M, tile.R);
    other = G * ctiles;
  }
  const int64_t steps = (Cs / G) * p.KH * p.KW;  // reduction steps per tile
  Conv2dTiling tiling = choose_tiling(L.traits(), steps, pixel_tiles, other);
  if (groups)
    tiling.kblock = 0;  // conv2d_igemm_groups has no K blocks
  else
    apply_tiling_override(tiling);  // may throw: before anything is launched
  const int64_t per_group = tiling.tiles_per_group;
  const int64_t tiles = ceil_div(pixel_tiles, per_group) * other;
  // Work-group order (see conv2d_igemm): keep the weight slice in cache when the weights outweigh the
  // source activations (deep layers), else the source rows.
  const int64_t weight_elems = p.O * p.C_per_group() * p.KH * p.KW, src_elems = N * Cs * Hs * Ws;
  const int32_t pixel_major = weight_elems > src_elems ? 1 : 0;
  const sycl::nd_range<1> range(sycl::range<1>(tiles * S), sycl::range<1>(S));
  // Both kernels take the same parameters (pad: destination channels per group, or groups, padded).
  auto fill = [&](auto& q) {
    q.src = cptr<T>(src);
    q.wpk = cptr<T>(wpk);
    q.bias = cptr_or_null<T>(bias);
    q.res = cptr_or_null<T>(res);
    q.dst = mptr<T>(dst);
    q.N = N, q.Cs = Cs, q.Hs = Hs, q.Ws = Ws;
    q.sN = src.stride(0), q.sC = src.stride(1), q.sH = src.stride(2), q.sW = src.stride(3);
    q.Cd = Cd, q.Hd = Hd, q.Wd = Wd, q.G = G, q.KH = p.KH, q.KW = p.KW;
    q.sh = p.stride[0], q.sw = p.stride[1], q.ph = p.padding[0], q.pw = p.padding[1];
    q.dh = p.dilation[0], q.dw = p.dilation[1];
    q.transposed = transposed ? 1 : 0;
    q.tiles_per_group = per_group;
    q.pixel_major = pixel_major;
    q.relu = relu ? 1 : 0;
  };
  auto launch_gemm = [&] {
    with_lanes<T>(S, [&](auto S_) {
      constexpr int SL = decltype(S_)::value;
      auto launch_cl = [&](auto DST_CL) {
        constexpr bool CL = decltype(DST_CL)::value;
        if (groups) {
          using K = xk::conv2d_igemm_groups<CL, SL, Conv2dConfig::kGroupsR>;
          typename K::template params<T> q{};
          fill(q);
          q.G_pad = pad;
          L.launch<K, T>(range, q);
        } else {
          with_tile<SL>(tile, [&](auto R, auto Q) {
            using K = xk::conv2d_igemm<CL, SL, decltype(R)::value, decltype(Q)::value>;
            typename K::template params<T> q{};
            fill(q);
            q.panel = pad;
            q.kblock = tiling.kblock;
            L.launch<K, T>(range, q);
          });
        }
      };
      if (p.channels_last)
        launch_cl(std::true_type{});
      else
        launch_cl(std::false_type{});
    });
  };
  // The per-call packing runs on the queue ahead of the GEMM; wpk is freed when this returns, after the kernels
  // (finish waits for CPU tensors; on a throw the queue is drained first).
  wpk = prepacked.defined() ? prepacked : pack_on_device<T>(L, weight, G, transposed, groups, pad);
  L.launch_then_finish(src, launch_gemm);
}

// ------------------------------------------------------------------ Winograd F(2x2, 3x3) (kernels/conv2d.hpp)
// conv2d_packed with a packed weight that carries U (shapes.h conv2d_winograd_packs: float32, 3x3, one group),
// stride 1 and dilation 1 runs the three Winograd kernels instead of conv2d_igemm where choose_winograd says so.
// XKERNELS_CONV_WINOGRAD (read at every call): "0" never, "1" wherever the packed weight allows it, unset or
// "auto" the measured rule below.
constexpr const char* kWinogradEnv = "XKERNELS_CONV_WINOGRAD";
std::atomic<int64_t> winograd_calls{0};  // conv2d_packed calls that ran Winograd (xkernels._C.sycl, tests)

struct WinogradConfig {
  // The rule (docs/performance.md "conv2d: Winograd F(2x2, 3x3)"): at least kMinChannels input and output
  // channels, and at least kMinTileChannels 2x2 output tiles x min(C, O) in the batch. Measured with
  // scripts/bench_conv2d_winograd.py (order rotated per round, xkernels imported before torch) on a 2-vCPU AMD EPYC
  // with AVX-512, idle, 2026-12-05: direct/Winograd 1.46-1.82x at 16-98 tiles with 256 or 512 channels (ResNet-50's
  // 14x14 and 7x7 layers at batch 1 and 2), 1.04-1.08x at 9 tiles, 0.98-1.00x at 4 tiles x 512 and 16 tiles x 128,
  // 0.75x at 16 tiles x 64 channels (a 0.04 ms layer). The earlier rule (>= 96 tiles, from the Xeon) came from the
  // script's old fixed order, which timed Winograd right after torch's OpenMP ops and so charged it their workers'
  // spin-wait; it read 0.97-0.98x at 16 and 49 tiles there.
  static constexpr int64_t kMinChannels =
      kConv2dWinogradMinChannels;  // shapes.h: the packed layout carries U from here
  static constexpr int64_t kMinTileChannels = 2048;
  // Tiles per chunk: the scratch (V and M, 16 x chunk x (C + O) floats) stays at about this many bytes, so that
  // the GEMM reads what the input transform just wrote from cache; at least kMinChunkTiles tiles.
  static constexpr int64_t kChunkBytes = int64_t(6) << 20;
  static constexpr int64_t kMinChunkTiles = 96;
  // Input / output transforms: tiles per work-group, up to this many, keeping kTargetGroups work-groups.
  static constexpr int64_t kMaxTransformTiles = 16;
};

enum class WinogradMode { kOff, kOn, kAuto };
WinogradMode winograd_mode() {
  const char* env = std::getenv(kWinogradEnv);
  if (env == nullptr || *env == 0) return WinogradMode::kAuto;
  const std::string v(env);
  if (v == "0") return WinogradMode::kOff;
  if (v == "1") return WinogradMode::kOn;
  XK_CHECK_VALUE(v == "auto", "conv2d_packed", "environment variable ", kWinogradEnv,
                 " must be '0' (off), '1' (wherever the packed weight allows) or 'auto' (the measured rule), got '",
                 env, "'");
  return WinogradMode::kAuto;
}

// The GEMM tile for lane width S on this device: (R, Q), or Q = 0 when the table has none.
Tile winograd_tile(int64_t S, int vector_registers) {
  if (S == 16) return Tile{Conv2dConfig::kWideR, Conv2dConfig::kWideQ};
  if (S == 8 && vector_registers == 16) return Tile{Conv2dConfig::kWideR, Conv2dConfig::kWideQ16};
  return Tile{0, 0};
}

bool choose_winograd(const Launcher& L, const Conv2dProblem& p, const Conv2dPackLayout& layout) {
  if (layout.winograd == 0 || p.stride[0] != 1 || p.stride[1] != 1 || p.dilation[0] != 1 || p.dilation[1] != 1)
    return false;
  const WinogradMode mode = winograd_mode();
  if (mode == WinogradMode::kOff) return false;
  const int64_t S = lane_width<float>(L.traits(), L.lanes_are_work_items());
  if (winograd_tile(S, L.traits().vector_registers()).Q == 0 || layout.pad % S != 0) return false;
  if (mode == WinogradMode::kOn) return true;
  using W = WinogradConfig;
  const int64_t tiles = p.N * ceil_div(p.OH, 2) * ceil_div(p.OW, 2);
  return p.C >= W::kMinChannels && p.O >= W::kMinChannels && tiles * std::min(p.C, p.O) >= W::kMinTileChannels;
}

// Kernels with a channels_last variant K<true, S> (lanes over channels at stride 1: vector loads) and a strided
// one K<false, S> (gathers): the variant for tensor t's channel stride.
template <template <bool, int> class K, int S, typename T, typename P>
void launch_by_channel_stride(Launcher& L, const at::Tensor& t, const sycl::nd_range<1>& range, const P& params) {
  if (t.stride(1) == 1)
    L.launch<K<true, S>, T>(range, params);
  else
    L.launch<K<false, S>, T>(range, params);
}

// U = G g G^T of the 3x3 weight w [O, C, 3, 3] (element strides wO..wW, any sign) into u [16][O_pad / panel][C][panel].
void winograd_transform(Launcher& L, const float* w, int64_t O, int64_t C, std::array<int64_t, 4> ws, int64_t panel,
                        float* u) {
  const int64_t O_pad = ceil_div(O, panel) * panel, rows = O_pad / panel * C;
  constexpr int64_t kLanes = xk::conv2d_wino_pack::sub_group;  // lanes over a panel row's columns
  L.launch<xk::conv2d_wino_pack, float>(
      sycl::nd_range<1>(sycl::range<1>(std::min(rows, Conv2dConfig::kReduceMaxGroups) * kLanes),
                        sycl::range<1>(kLanes)),
      {.w = w,
       .u = u,
       .O = O,
       .C = C,
       .O_pad = O_pad,
       .panel = panel,
       .wO = ws[0],
       .wC = ws[1],
       .wH = ws[2],
       .wW = ws[3]});
}

// The float32 U inside a packed weight of any element type (shapes.h: `winograd` counts the packed type's elements).
const float* winograd_u(const at::Tensor& packed, const Conv2dPackLayout& l) {
  return reinterpret_cast<const float*>(static_cast<const char*>(packed.const_data_ptr()) +
                                        l.winograd * packed.element_size());
}

// U into packed[layout.winograd ..] (the gap after the panels' trailing zero is zeroed here); a half or bfloat16
// weight is widened to float32 first (U is float32 for every type).
void pack_winograd(Launcher& L, const at::Tensor& weight, at::Tensor& packed, const Conv2dPackLayout& l) {
  const int64_t O = weight.size(0), C = weight.size(1);
  const int64_t body = ceil_div(O, l.pad) * l.pad * 9 * C + 1;
  packed.narrow(0, body, l.winograd - body).zero_();  // no kernel writes there
  const at::Tensor w = weight.scalar_type() == at::kFloat ? weight : weight.to(at::kFloat);
  winograd_transform(L, cptr<float>(w), O, C, {w.stride(0), w.stride(1), w.stride(2), w.stride(3)}, l.pad,
                     const_cast<float*>(winograd_u(packed, l)));
  if (!w.is_same(weight)) L.finish(w);  // a widened temporary: dies when this returns
}

// The three Winograd kernels over chunks of tiles, with the conv2d_relu epilogue (res, relu). x: the 4-D input,
// dst: the output in the problem's memory format; float32, half or bfloat16 (x, bias, res, dst of one type; the
// scratch V and M and the weights U float32).
void run_winograd(Launcher& L, const Conv2dProblem& p, const at::Tensor& x, const float* u, int64_t panel,
                  const at::Tensor& bias, const at::Tensor& res, bool relu, at::Tensor& dst) {
  using W = WinogradConfig;
  const int64_t S = lane_width<float>(L.traits(), L.lanes_are_work_items());
  const Tile tile = winograd_tile(S, L.traits().vector_registers());
  const int64_t C = p.C, O = p.O, O_pad = ceil_div(O, panel) * panel;
  const int64_t TH = ceil_div(p.OH, 2), TW = ceil_div(p.OW, 2), total = p.N * TH * TW;
  // Chunks of about kChunkBytes of scratch, the tiles split evenly among them (784 tiles: 2 x 392, not 768 + 16);
  // each tile's result does not depend on the chunk it falls in.
  const int64_t chunk = [&] {
    const int64_t most =
        std::min(total, std::max(W::kMinChunkTiles, W::kChunkBytes / (16 * (C + O_pad) * int64_t(sizeof(float)))));
    return ceil_div(total, ceil_div(total, most));
  }();
  const at::Tensor v = empty({16 * chunk * C}, x.options().dtype(at::kFloat));
  const at::Tensor m = empty({16 * chunk * O_pad}, x.options().dtype(at::kFloat));
  const int64_t tiles_per_group_io = [&] {
    const int64_t blocks = ceil_div(std::max(C, O), S);
    return std::max<int64_t>(1, std::min(W::kMaxTransformTiles, chunk * blocks / Conv2dConfig::kTargetGroups));
  }();
  auto launch_with = [&](auto S_, auto R, auto Q) {
    XK_DISPATCH_DEVICE_TYPES(x.scalar_type(), "conv2d", [&] {
      using E = T;  // the element type (the loop's T below is the chunk's tile count)
      constexpr int SL = decltype(S_)::value;
      // float64 never packs U (shapes.h conv2d_winograd_packs), so choose_winograd never sends it here.
      TORCH_CHECK((!std::is_same_v<E, double>), "xkernels.conv2d: no Winograd kernels for float64");
      if constexpr (!std::is_same_v<E, double>)
        for (int64_t t0 = 0; t0 < total; t0 += chunk) {
          const int64_t T = std::min(chunk, total - t0);
          const int64_t in_groups = ceil_div(C, S) * ceil_div(T, tiles_per_group_io);
          const xk::conv2d_wino_input_params<E> in_params{.src = cptr<E>(x),
                                                          .v = mptr<float>(v),
                                                          .N = p.N,
                                                          .C = C,
                                                          .H = x.size(2),
                                                          .W = x.size(3),
                                                          .sN = x.stride(0),
                                                          .sC = x.stride(1),
                                                          .sH = x.stride(2),
                                                          .sW = x.stride(3),
                                                          .TH = TH,
                                                          .TW = TW,
                                                          .ph = p.padding[0],
                                                          .pw = p.padding[1],
                                                          .t0 = t0,
                                                          .tiles = T,
                                                          .tiles_per_group = tiles_per_group_io};
          const sycl::nd_range<1> in_range(sycl::range<1>(in_groups * S), sycl::range<1>(S));
          launch_by_channel_stride<xk::conv2d_wino_input, SL, E>(L, x, in_range, in_params);
          {
            constexpr int RR = decltype(R)::value, QQ = decltype(Q)::value;
            const int64_t ctiles = O_pad / (SL * QQ);
            const Conv2dTiling tiling = choose_tiling(L.traits(), C, ceil_div(T, RR), 16 * ctiles);
            const int64_t groups = 16 * ctiles * ceil_div(ceil_div(T, RR), tiling.tiles_per_group);
            L.launch<xk::conv2d_wino_gemm<SL, RR, QQ>, float>(
                sycl::nd_range<1>(sycl::range<1>(groups * S), sycl::range<1>(S)),
                {.v = cptr<float>(v),
                 .u = u,
                 .m = mptr<float>(m),
                 .tiles = T,
                 .C = C,
                 .O_pad = O_pad,
                 .panel = panel,
                 .tiles_per_group = tiling.tiles_per_group});
          }
          const int64_t out_groups = ceil_div(O, S) * ceil_div(T, tiles_per_group_io);
          auto output = [&](auto DST_CL) {
            constexpr bool CL = decltype(DST_CL)::value;
            L.launch<xk::conv2d_wino_output<CL, SL>, E>(
                sycl::nd_range<1>(sycl::range<1>(out_groups * S), sycl::range<1>(S)),
                {.m = cptr<float>(m),
                 .bias = cptr_or_null<E>(bias),
                 .res = cptr_or_null<E>(res),
                 .dst = mptr<E>(dst),
                 .N = p.N,
                 .O = O,
                 .OH = p.OH,
                 .OW = p.OW,
                 .TH = TH,
                 .TW = TW,
                 .O_pad = O_pad,
                 .t0 = t0,
                 .tiles = T,
                 .tiles_per_group = tiles_per_group_io,
                 .relu = relu ? 1 : 0});
          };
          if (p.channels_last)
            output(std::true_type{});
          else
            output(std::false_type{});
        }
    });
  };
  // The table's Winograd GEMMs: 16 lanes x (6, 4) (AVX-512) and 8 lanes x (6, 2) (AVX2); see winograd_tile.
  using I = std::integral_constant<int, Conv2dConfig::kWideR>;
  auto launch_all = [&] {
    if (S == 16 && tile.Q == Conv2dConfig::kWideQ)
      launch_with(std::integral_constant<int, 16>{}, I{}, std::integral_constant<int, Conv2dConfig::kWideQ>{});
    else if (S == 8 && tile.Q == Conv2dConfig::kWideQ16)
      launch_with(std::integral_constant<int, 8>{}, I{}, std::integral_constant<int, Conv2dConfig::kWideQ16>{});
    else
      TORCH_CHECK(false, "xkernels.conv2d_packed: no Winograd kernels for ", S, " lanes");
  };
  // The scratch is freed when this returns: after the kernels (finish waits for CPU tensors; on a throw, the
  // queue is drained first).
  L.launch_then_finish(x, launch_all);
  winograd_calls.fetch_add(1, std::memory_order_relaxed);
}

// Number of pixel splits for a reduction over M pixels with `tiles` work-groups per split
// and `packed` partial-sum elements per split (see Conv2dConfig).
int64_t pixel_splits(int64_t M, int64_t tiles, int64_t packed) {
  using C = Conv2dConfig;
  const int64_t want = std::max(ceil_div(C::kTargetGroups, tiles), ceil_div(M, C::kPixelsPerSplit));
  const int64_t cap = std::min({C::kMaxSplits, M / C::kMinPixelsPerSplit, C::kMaxPartialElements / packed});
  return std::max<int64_t>(1, std::min(want, cap));
}

// Sums `splits` partials part[s, packed] into dst (weight-gradient order, see the kernel).
template <typename T>
void launch_reduce(Launcher& L, const at::Tensor& part, at::Tensor& dst, int64_t G, int64_t Opg, int64_t Opg_pad,
                   int64_t Cpg, int64_t KH, int64_t KW, bool dst_cl) {
  using acc = xk::acc_t<T>;
  const int64_t rows = xk::conv2d_reduce_splits::kRows;
  const int64_t units = G * ceil_div(KH * KW * Cpg, rows) * Opg;
  const int64_t local =
      std::min<int64_t>(Conv2dConfig::kReduceLocal, static_cast<int64_t>(L.traits().max_work_group_size));
  L.launch<xk::conv2d_reduce_splits, T>(
      sycl::nd_range<1>(sycl::range<1>(std::min(ceil_div(units, local), Conv2dConfig::kReduceMaxGroups) * local),
                        sycl::range<1>(local)),
      {.part = part.const_data_ptr<acc>(),
       .dst = mptr<T>(dst),
       .splits = part.size(0),
       .part_stride = part.numel() / part.size(0),
       .G = G,
       .Opg = Opg,
       .Opg_pad = Opg_pad,
       .Cpg = Cpg,
       .KH = KH,
       .KW = KW,
       .dst_cl = dst_cl ? 1 : 0});
}

// conv2d, or with residual / relu the conv2d_relu epilogue (the residual made dense in the output's layout);
// with `prepacked` (conv2d_packed) the weight operand is that tensor.
// ---- bfloat16 convolutions on AMX (kernels/amx_gemm.hpp), stride 1, one group, channels_last input, channel
// counts multiples of 32 (no edge tiles):
//   * 1x1 unpadded: out[pixel, o] = sum_c x[pixel, c] w[o, c] on NHWC memory, the input the matrix unit's A
//     operand as stored, the weight (small beside the activations) packed per call;
//   * 3x3 windows, any padding and dilation: the input copied once into a zero-padded NHWC buffer,
//     each tap a GEMM on that buffer shifted by a whole number of rows (AmxWindow), summed in the same
//     accumulators; the outputs of the padding's rows and columns are computed and dropped.
// The shape part of the rule, for the module layer too (nothing to pre-pack):
bool amx_conv2d_shape_fits(int64_t O, int64_t C, int64_t KH, int64_t KW, std::array<int64_t, 2> stride,
                           std::array<int64_t, 2> padding, int64_t groups) {
  return stride[0] == 1 && stride[1] == 1 && groups == 1 && C % xk::AmxTile::kTileK == 0 && O % 32 == 0 &&
         ((KH == 3 && KW == 3) || (KH == 1 && KW == 1 && padding[0] == 0 && padding[1] == 0));
}

bool amx_conv2d_applies(const Launcher& L, const at::Tensor& x, const at::Tensor& weight, const Conv2dProblem& p,
                        const at::Tensor& residual) {
  constexpr auto cl = at::MemoryFormat::ChannelsLast;
  return x.scalar_type() == at::kBFloat16 && weight.defined() && L.traits().amx_bf16 && p.channels_last &&
         amx_conv2d_shape_fits(p.O, p.C, p.KH, p.KW, p.stride, p.padding, p.groups) && x.is_contiguous(cl) &&
         (!residual.defined() || residual.is_contiguous(cl));
}

void amx_conv2d(Launcher& L, const Conv2dProblem& p, const at::Tensor& x, const at::Tensor& weight,
                const at::Tensor& bias, const at::Tensor& residual, bool relu, at::Tensor& out) {
  constexpr int TN = 2, TM = 2;
  const int64_t C = p.C, O = p.O;
  const AmxBlocksSetting setting = AmxBlocksSetting::from_env();  // before any kernel is queued
  // The temporaries are declared outside the launches: they outlive the kernels, also when a launch throws
  // (launch_then_finish drains the queue before they are freed).
  at::Tensor wp, xpad, wt;
  if (p.KH * p.KW == 1) {
    const at::Tensor A = x.permute({0, 2, 3, 1}).reshape({p.N * p.H * p.W, C});  // NHWC memory: a view
    AmxRowsTemps temps;
    L.launch_then_finish(
        out, [&] { amx_rows_gemm(L, setting, A, weight.reshape({O, C}), bias, residual, relu, out, O, temps); });
    return;
  }
  const int64_t Hp = p.H + 2 * p.padding[0], Wp = p.W + 2 * p.padding[1];
  AmxWindow win;
  win.row_shift = p.dilation[0] * Wp, win.col_shift = p.dilation[1];  // tap (kh, kw): kh * row + kw * col
  win.img = Hp * Wp, win.wp = Wp, win.oh = p.OH, win.ow = p.OW;
  const int64_t flat = p.N * win.img;
  // The padded input, with slack rows: the kernel reads up to a whole block of 16*TN rows plus the largest shift.
  xpad = empty({ceil_div(flat, 16 * TN) * (16 * TN) + win.max_shift(), C}, x.options()).zero_();
  xpad.narrow(0, 0, flat)
      .view({p.N, Hp, Wp, C})
      .narrow(1, p.padding[0], p.H)
      .narrow(2, p.padding[1], p.W)
      .copy_(x.permute({0, 2, 3, 1}));
  // The weight as [O, KH * KW * C]: k = tap * C + c, the order of the taps' shifts.
  wt = weight.permute({0, 2, 3, 1}).contiguous().view({O, p.KH * p.KW * C});
  L.launch_then_finish(out, [&] {
    wp = amx_pack_rows(L, wt);
    amx_gemm<false, TN, TM, true>(L, setting, xpad.narrow(0, 0, flat), wp, O, bias, residual, relu, out, O, 0, 0, win);
  });
}

// 1x1, unpadded, one-group convolutions of a dense channels_last tensor on a device that runs the CPU GEMM kernels:
// a GEMM on NHWC memory, pixels as rows (gemm.h: the panel GEMM with the weight packed as its B operand, or with a
// pre-packed weight, whose 1x1 panels are that operand already). Forward with every conv2d / conv2d_relu epilogue
// (bias, residual, ReLU: the panel GEMM's): out [pixels, O] = x [pixels, C] @ w^T, at a stride > 1 over the sampled
// pixels, read in place through the GEMM's row map (gemm_rows: [N, OH, OW, C] with the strides of the sampling);
// stride-1 grad_input [pixels, C] = grad_output [pixels, O] @ w. Measured on the Xeon (AVX-512), ResNet-50's stride-1
// 1x1 layers at batch 2: 1.15-2.3x faster than conv2d_igemm with the per-call weight packing; its six stride-2 1x1
// layers with pre-packed weights (one process, 2026-12-06): 1.05-1.49x faster than conv2d_igemm at batch 1 and 8,
// bit-identical (the same products summed in the same order).
// A 1x1, unpadded, one-group problem on a device that runs the CPU GEMM kernels: what every 1x1 GEMM route needs.
bool pointwise_gemm_problem(const Launcher& L, const Conv2dProblem& p) {
  return p.KH == 1 && p.KW == 1 && p.padding == std::array<int64_t, 2>{0, 0} && p.groups == 1 &&
         choose_gemm_variant(L, "conv2d") == GemmVariant::Cpu;
}
// ... over a dense channels_last tensor, any stride: the GEMM routes' common condition (pixel_gemm_fits at stride 1,
// strided_pixel_gemm_fits above it).
bool pointwise_cl_gemm_fits(const Launcher& L, const Conv2dProblem& p, const at::Tensor& dense_cl) {
  return p.channels_last && dense_cl.is_contiguous(at::MemoryFormat::ChannelsLast) && pointwise_gemm_problem(L, p);
}
// The same GEMM for a dense NCHW tensor (a 1x1, unpadded, one-group problem, any stride), except stride-1 layers
// with large images (image_gemms, below): the rows are the output pixels, the input read in place (channels H * W
// apart; gemm_rows) or, at a stride with at least twice as many output as input channels, first copied to [pixels,
// C] rows (conv2d_im2col: a strided read wastes part of every cache line, and each row is read once per 64 output
// channels); the output written in place as NCHW (its [N, OH, OW, O] view as the GEMM's 4-D C: the stores scatter
// over the channels). The
// same products summed in the same order as the channels_last route: bit-identical results. Measured against the
// direct kernel (conv2d_igemm) and image_gemms, ResNet-50's NCHW 1x1 layers with pre-packed weights at batch 1 and 8
// (2-core Intel Xeon, AVX-512 + AMX, 2026-12-07, docs/performance.md): 1.03-1.42x faster except at 56x56 stride 1
// (0.62-0.92x against image_gemms, which keeps them); copying the rows first, at a stride with O >= 2C: 1.06-1.37x
// faster at batch 8, 0.96-1.19x at batch 1; at stride 1 or with fewer output channels mostly slower (0.71-0.94x).
bool pointwise_nchw_gemm_fits(const Launcher& L, const Conv2dProblem& p, const at::Tensor& dense_nchw) {
  return !p.channels_last && dense_nchw.is_contiguous() &&
         !(p.stride == std::array<int64_t, 2>{1, 1} && p.H * p.W >= Conv2dConfig::kImageGemmMinPixels) &&
         pointwise_gemm_problem(L, p);
}
bool pointwise_nchw_copies_rows(const Launcher& L, const Conv2dProblem& p) {
  return p.stride != std::array<int64_t, 2>{1, 1} && p.O >= 2 * p.C &&
         p.C <= static_cast<int64_t>(L.traits().max_work_group_size);  // conv2d_im2col: one work-item per channel
}
bool pixel_gemm_fits(const Launcher& L, const Conv2dProblem& p, const at::Tensor& dense_cl) {
  return p.stride == std::array<int64_t, 2>{1, 1} && pointwise_cl_gemm_fits(L, p, dense_cl);
}
at::Tensor pixel_rows(const at::Tensor& t) {  // [N, C, H, W] channels_last dense -> [N*H*W, C], a view
  return t.permute({0, 2, 3, 1}).reshape({t.size(0) * t.size(2) * t.size(3), t.size(1)});
}

// grad_input of a 1x1, unpadded, one-group channels_last convolution with a stride > 1 (ResNet-50's stride-2 1x1
// layers) on a device that runs the CPU GEMM kernels: only the input pixels (oy * sh, ox * sw) receive gradient, so
// grad_input is zero except there, where it is the stride-1 GEMM grad_output [pixels, O] @ w [O, C]. The GEMM writes
// the OH * OW rows per image contiguously; zeros and the strided placement are torch copies. The destination-pixel
// kernel had walked every input pixel through all O reduction steps, three of four of them for nothing at stride 2
// (256 -> 512 on 56x56, batch 1: 2.31 ms against torch's 1.16 ms).
bool strided_pixel_gemm_fits(const Launcher& L, const Conv2dProblem& p, const at::Tensor& dense_cl) {
  return p.stride != std::array<int64_t, 2>{1, 1} && pointwise_cl_gemm_fits(L, p, dense_cl);
}

template <typename T>
void strided_pointwise_grad_input(Launcher& L, const Conv2dProblem& p, const at::Tensor& go, const at::Tensor& weight,
                                  at::Tensor& gi) {
  at::Tensor rows = empty({p.N * p.OH * p.OW, p.C}, gi.options().memory_format(at::MemoryFormat::Contiguous));
  gemm<T>(L, GemmVariant::Cpu, pixel_rows(go), weight.reshape({p.O, p.C}), at::Tensor(), /*relu=*/false, rows);
  gi.zero_();
  gi.permute({0, 2, 3, 1})  // NHWC view of the channels_last grad_input
      .slice(1, 0, p.OH * p.stride[0], p.stride[0])
      .slice(2, 0, p.OW * p.stride[1], p.stride[1])
      .copy_(rows.view({p.N, p.OH, p.OW, p.C}));
}

template <typename T>
void launch_im2col(Launcher& L, const Conv2dProblem& g, const at::Tensor& x, const at::Tensor& col, int64_t m0,
                   int64_t mc, int64_t panel, bool cl_order, bool rows);

template <typename T>
bool forward_pixel_gemm(Launcher& L, const Conv2dProblem& p, const at::Tensor& x, const at::Tensor& weight,
                        const at::Tensor& prepacked, const at::Tensor& b, const at::Tensor& r, bool relu,
                        at::Tensor& out) {
  const bool nchw = !pointwise_cl_gemm_fits(L, p, x);
  if (nchw && !pointwise_nchw_gemm_fits(L, p, x)) return false;
  const int64_t P = xk::PanelTile<T>::kCols;
  if (prepacked.defined()) {  // the panels are the GEMM's B operand as they are (1x1: one panel layout)
    const Conv2dPackLayout layout = conv2d_pack_layout({p.O, p.C, 1, 1}, 1, x.scalar_type());
    if (layout.group_lanes || layout.pad != P) return false;
  }
  // Stride 1 (channels_last): the input's pixels as rows [pixels, C]; otherwise the (strided) pixels, [N, OH, OW, C]
  // read in place (gemm_rows: the GEMM's row map).
  const at::Tensor x2 = p.stride == std::array<int64_t, 2>{1, 1} && !nchw
                            ? pixel_rows(x)
                            : x.permute({0, 2, 3, 1}).slice(1, 0, p.H, p.stride[0]).slice(2, 0, p.W, p.stride[1]);
  at::Tensor out2 = nchw ? out.permute({0, 2, 3, 1}) : pixel_rows(out);  // NCHW: a 4-D C, rows = pixels
  at::Tensor a_rows;  // the copied rows (pointwise_nchw_copies_rows): alive until the wait below
  if (nchw && pointwise_nchw_copies_rows(L, p)) {
    const int64_t M = p.N * p.OH * p.OW;
    a_rows = empty({M, p.C}, x.options());
    launch_im2col<T>(L, p, x, a_rows, 0, M, p.C, /*cl_order=*/true, /*rows=*/false);  // queued before the GEMM
  }
  const at::Tensor& xa = a_rows.defined() ? a_rows : x2;
  const T* res = r.defined() ? cptr<T>(r) : nullptr;  // dense in out's layout (conv2d_as_4d_dense): out's offsets
  if (prepacked.defined()) {
    at::Tensor partial;  // the K-block scratch of half types: alive until the wait below
    panel_gemm<T>(L, xa, cptr<T>(prepacked), P, p.C * P, P, p.O, b, relu, out2, partial, /*accumulate=*/false, res);
    L.finish(x);
    return true;
  }
  gemm<T>(L, GemmVariant::Cpu, xa, weight.reshape({p.O, p.C}).t(), b, relu, out2, res);
  return true;
}

// 1x1, stride 1, unpadded, one-group convolutions of a dense NCHW tensor on a device that runs the CPU GEMM
// kernels: per image, a GEMM with the weight as A and the image's channel planes as B, read in place (no copy, no
// packing): out[n] [O, H*W] = w [O, C] @ x[n] [C, H*W], the bias per row (output channel), a residual (dense NCHW)
// at the output's offsets, ReLU; grad_input[n] [C, H*W] = w^T [C, O] @ grad_output[n] [O, H*W]. The
// destination-pixel kernel (conv2d_igemm) reads NCHW channels H*W elements apart: a gather per lane.
// Measured against conv2d_igemm on a 2-vCPU AMD EPYC with AVX-512 (2026-12-05; ResNet-50's NCHW 1x1 layers, batch 1
// and 8, /tmp scripts timing both routes in one process): at 56x56 the forward with a pre-packed weight ran 1.11-1.75x
// faster and grad_input 1.2-2.3x; at 28x28 0.85-1.04x and 0.84-1.25x; at 14x14 and 7x7 (unpacked forward) 0.72-1.45x,
// 0.72-0.80x at batch 8, where an image's 196 or 49 pixels make at most 4 column panels, the last mostly idle
// lanes. Hence the kImageGemmMinPixels rule (Conv2dConfig).
bool image_gemm_fits(const Launcher& L, const Conv2dProblem& p, const at::Tensor& dense_nchw) {
  return p.stride == std::array<int64_t, 2>{1, 1} && !p.channels_last &&
         p.H * p.W >= Conv2dConfig::kImageGemmMinPixels && dense_nchw.is_contiguous() && pointwise_gemm_problem(L, p);
}

// dst[n] [M, H*W] = epilogue(A [M, K] @ src[n] [K, H*W]) for every image n of the dense NCHW src / dst (see
// image_gemm_fits); bias: M values, one per row; res: dense like dst, or null. Returns once the kernels are done.
template <typename T>
void image_gemms(Launcher& L, const at::Tensor& A, const at::Tensor& src, const at::Tensor& bias, const T* res,
                 bool relu, at::Tensor& dst) {
  const int64_t N = src.size(0), K = src.size(1), HW = src.size(2) * src.size(3), M = dst.size(1);
  const int64_t cols = xk::PanelTile<T>::kCols;  // B in place: panel stride = panel width
  std::vector<at::Tensor> partials(N);           // half types' K-block scratch, alive until the wait below
  L.launch_then_finish(dst, [&] {
    for (int64_t n = 0; n < N; ++n) {
      at::Tensor c = dst.select(0, n).view({M, HW});
      panel_gemm<T>(L, A, cptr<T>(src) + n * K * HW, HW, cols, cols, HW, bias, relu, c, partials[n],
                    /*accumulate=*/false, res != nullptr ? res + n * M * HW : nullptr, /*bias_rows=*/true);
    }
  });
}

// Forward through image_gemms. A pre-packed weight (conv2d_packed: panels of output channels, shapes.h) is
// unpacked to dense [O, C] rows first (shapes.h conv2d_unpack): the kernel reads A by rows, and a 6-row tile may
// straddle two panels. Only layers with at least kImageGemmMinPixels pixels per image take this path, whose
// weights are small (ResNet-50: at most 256 x 128 at 56x56).
template <typename T>
bool forward_image_gemm(Launcher& L, const Conv2dProblem& p, const at::Tensor& x, const at::Tensor& weight,
                        const at::Tensor& prepacked, const at::Tensor& b, const at::Tensor& r, bool relu,
                        at::Tensor& out) {
  if (!image_gemm_fits(L, p, x)) return false;
  const at::Tensor a = prepacked.defined()
                           ? conv2d_unpack(prepacked, {p.O, p.C, 1, 1}, 1).reshape({p.O, p.C}).contiguous()
                           : weight.reshape({p.O, p.C});
  image_gemms<T>(L, a, x, b, r.defined() ? cptr<T>(r) : nullptr, relu, out);
  return true;
}

at::Tensor forward(Launcher L, const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias,
                   const Conv2dProblem& p, const at::Tensor& residual = {}, bool relu = false,
                   const at::Tensor& prepacked = {}) {
  const auto out_fmt = p.channels_last ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous;
  const at::Tensor x = as_4d(input);
  const at::Tensor b = contiguous_if_defined(bias);
  const at::Tensor r = residual.defined() ? conv2d_as_4d_dense(residual, p) : at::Tensor();
  at::Tensor out = empty({p.N, p.O, p.OH, p.OW}, input.options().memory_format(out_fmt));
  if (amx_conv2d_applies(L, x, weight, p, r)) {
    amx_conv2d(L, p, x, weight, b, r, relu, out);
    return p.batched ? out : out.view(p.out_sizes());
  }
  bool done = false;
  XK_DISPATCH_DEVICE_TYPES(x.scalar_type(), "conv2d", [&] {
    done = forward_pixel_gemm<T>(L, p, x, weight, prepacked, b, r, relu, out) ||
           forward_image_gemm<T>(L, p, x, weight, prepacked, b, r, relu, out);
  });
  if (done) return p.batched ? out : out.view(p.out_sizes());
  {  // float32, half, bfloat16: the layout carries U only for those (shapes.h conv2d_winograd_packs)
    const Conv2dPackLayout layout = conv2d_pack_layout({p.O, p.C_per_group(), p.KH, p.KW}, p.groups, x.scalar_type());
    if (choose_winograd(L, p, layout)) {
      if (prepacked.defined()) {
        run_winograd(L, p, x, winograd_u(prepacked, layout), layout.pad, b, r, relu, out);
      } else {  // the weight transformed per call (training: the weight changes every step), from float32
        const at::Tensor w = weight.scalar_type() == at::kFloat ? weight : weight.to(at::kFloat);
        const int64_t O_pad = ceil_div(p.O, layout.pad) * layout.pad;
        const at::Tensor u = empty({16 * O_pad * p.C}, x.options().dtype(at::kFloat));
        winograd_transform(L, cptr<float>(w), p.O, p.C, {w.stride(0), w.stride(1), w.stride(2), w.stride(3)},
                           layout.pad, mptr<float>(u));
        run_winograd(L, p, x, cptr<float>(u), layout.pad, b, r, relu, out);  // returns once done: u, w die after
      }
      return p.batched ? out : out.view(p.out_sizes());
    }
  }
  XK_DISPATCH_DEVICE_TYPES(x.scalar_type(), "conv2d", [&] {
    run_destination_gemm<T>(L, p, x, weight, b, out, /*transposed=*/false, r, relu, prepacked);
  });
  return p.batched ? out : out.view(p.out_sizes());
}

// grad_input of a 3x3, stride-1, undilated, one-group float convolution with padding <= 2, where the Winograd rule
// holds for it: the forward convolution of grad_output with the flipped, transposed weight
// (w'[c, o, i, j] = w[o, c, 2 - i, 2 - j], a strided view with negative strides) and padding 2 - p, through the
// Winograd kernels (U transformed per call). Returns false (nothing launched) where it does not apply.
bool grad_input_winograd(Launcher& L, const Conv2dProblem& p, const at::Tensor& go, const at::Tensor& weight,
                         at::Tensor& gi) {
  if (p.KH != 3 || p.KW != 3 || p.groups != 1 || p.stride != std::array<int64_t, 2>{1, 1} ||
      p.dilation != std::array<int64_t, 2>{1, 1} || p.padding[0] > 2 || p.padding[1] > 2)
    return false;
  Conv2dProblem t = p;
  t.C = p.O, t.H = p.OH, t.W = p.OW, t.O = p.C, t.OH = p.H, t.OW = p.W;
  t.padding = {2 - p.padding[0], 2 - p.padding[1]};
  t.batched = true;
  const Conv2dPackLayout layout = conv2d_pack_layout({t.O, t.C, 3, 3}, 1, at::kFloat);
  if (!choose_winograd(L, t, layout)) return false;
  const int64_t O_pad = ceil_div(t.O, layout.pad) * layout.pad;
  const at::Tensor u = empty({16 * O_pad * t.C}, go.options());
  winograd_transform(L, cptr<float>(weight) + 2 * weight.stride(2) + 2 * weight.stride(3), t.O, t.C,
                     {weight.stride(1), weight.stride(0), -weight.stride(2), -weight.stride(3)}, layout.pad,
                     mptr<float>(u));
  run_winograd(L, t, go, cptr<float>(u), layout.pad, at::Tensor(), at::Tensor(), /*relu=*/false, gi);
  return true;
}

// pad_to_grid (below) on this device for `channels` channels: a CPU device (host memory), one work-group of all the
// channels.
bool pad_to_grid_fits(const Launcher& L, int64_t channels) {
  return L.traits().is_cpu && channels <= static_cast<int64_t>(L.traits().max_work_group_size);
}

// grad_weight of a stride-1 window (3x3 ...) of a channels_last problem without the im2col copy: the input copied
// once onto a zero-padded NHWC pixel grid xpad [N, Hp, Wp, C], and grad_output onto gpad [N, Hp, Wp, O], the same
// grid (grad_output at (n, oh, ow) for oh < OH, ow < OW, zero elsewhere). On that grid tap (kh, kw) of output pixel q
// is input pixel q + kh * Wp + kw, so
//   grad_weight[o, kh, kw, c] = sum_q gpad[q, o] * xpad[q + kh * Wp + kw, c],
// one panel GEMM over the grid's pixels: A = gpad^T [O, pixels] in place, B column kh * KW * C + kw * C + c read at
// xpad + kh * Wp * C + (kw * C + c) + q * C (the panel kernel's panel_cols = KW * C, panel_stride = Wp * C; whole
// panels inside one kernel row: KW * C a multiple of the panel width). The grid's extra pixels cost Hp * Wp / (OH *
// OW) more multiplications (1.07x at 56x56, 1.65x at 7x7), and their zero gradients multiply real input values: exact
// for finite inputs (the real terms are summed in the im2col route's order, the extra ones are zeros), but 0 * inf
// would put a NaN where the convolution has none, so a result with a non-finite entry is recomputed through im2col.
// The two copies are conv2d_im2col launches onto the grid (pad_to_grid), not torch ops: torch's pad right after a
// SYCL kernel, while the runtime's workers spin, cost a 0.57x round at batch 1. Measured against the im2col route
// (grad_weight alone, 3x3 channels_last, median of 5 blocks, 3 rounds; 2-vCPU AMD EPYC with AVX-512, 2026-12-06):
// 64 -> 64 56x56 1.08x at batch 1, 1.13-1.16x at batch 2, 1.09-1.10x at batch 8; 128 -> 128 28x28 0.94-0.97x at
// batch 1, 1.02x at batch 8; 14x14 0.82-0.85x, 7x7 0.53-0.60x (the grid's overhead against a small im2col). Hence
// from kWindowMinPixels pixels per image (ResNet-50: the 56x56 layers).
bool grad_weight_window_fits(const Launcher& L, const Conv2dProblem& p, int64_t panel) {
  return L.traits().is_cpu && p.KH * p.KW > 1 && p.stride == std::array<int64_t, 2>{1, 1} &&
         p.dilation == std::array<int64_t, 2>{1, 1} && p.groups == 1 && p.channels_last && (p.KW * p.C) % panel == 0 &&
         p.OH * p.OW >= Conv2dConfig::kWindowMinPixels && pad_to_grid_fits(L, std::max(p.C, p.O));
}

// conv2d_im2col for pixels [m0, m0 + mc) of problem g (its C, H, W, OH, OW, window, stride, padding, dilation) over
// x (strides as given), written as `panel`-column panels into col (kernels/conv2d.hpp). rows: conv2d_im2col_rows
// instead, col as rows of all KH*KW*C columns (panel = KH*KW*C; channels_last x with pixels C apart, undilated).
// Queued (in-order queue).
template <typename T>
void launch_im2col(Launcher& L, const Conv2dProblem& g, const at::Tensor& x, const at::Tensor& col, int64_t m0,
                   int64_t mc, int64_t panel, bool cl_order, bool rows) {
  using C = Conv2dConfig;
  const xk::conv2d_im2col_params<T> params{.x = cptr<T>(x),
                                           .col = mptr<T>(col),
                                           .m0 = m0,
                                           .Mc = mc,
                                           .C = g.C,
                                           .H = g.H,
                                           .W = g.W,
                                           .sN = x.stride(0),
                                           .sC = x.stride(1),
                                           .sH = x.stride(2),
                                           .sW = x.stride(3),
                                           .OH = g.OH,
                                           .OW = g.OW,
                                           .KH = g.KH,
                                           .KW = g.KW,
                                           .sh = g.stride[0],
                                           .sw = g.stride[1],
                                           .ph = g.padding[0],
                                           .pw = g.padding[1],
                                           .dh = g.dilation[0],
                                           .dw = g.dilation[1],
                                           .panel = panel,
                                           .pixels_per_group = C::kIm2colPixels,
                                           .cl_order = cl_order ? 1 : 0};
  const int64_t pixel_groups = ceil_div(mc, C::kIm2colPixels);
  if (rows) {
    using K = xk::conv2d_im2col_rows;
    L.launch<K, T>(sycl::nd_range<1>(sycl::range<1>(pixel_groups * K::kLocal), sycl::range<1>(K::kLocal)), params);
    return;
  }
  const int64_t panels = ceil_div(g.KH * g.KW * g.C, panel);
  L.launch<xk::conv2d_im2col, T>(
      sycl::nd_range<1>(sycl::range<1>(panel * panels * pixel_groups), sycl::range<1>(panel)), params);
}

// src [N, C, H, W] (any strides) onto a zero-padded NHWC pixel grid [N * Hp * Wp, C], src's pixel (h, w) at grid
// pixel (h + top, w + left): conv2d_im2col as a 1x1 "convolution" with one panel of all C channels (local size C),
// so a channels_last source is read and written in whole vectors. Queued (in-order queue); the caller keeps the
// result alive until the kernels that read it are done.
template <typename T>
at::Tensor pad_to_grid(Launcher& L, const at::Tensor& src, int64_t top, int64_t left, int64_t Hp, int64_t Wp) {
  Conv2dProblem g;  // 1x1, stride 1, dilation 1
  g.N = src.size(0), g.C = src.size(1), g.H = src.size(2), g.W = src.size(3), g.KH = g.KW = 1;
  g.OH = Hp, g.OW = Wp, g.padding = {top, left};
  at::Tensor grid = empty({g.N * Hp * Wp, g.C}, src.options());
  launch_im2col<T>(L, g, src, grid, 0, g.N * Hp * Wp, g.C, /*cl_order=*/true, /*rows=*/false);
  return grid;
}

// Returns false when the result has a non-finite entry (the caller then runs the im2col route).
template <typename T>
bool grad_weight_window(Launcher& L, const Conv2dProblem& p, const at::Tensor& go_cl, const at::Tensor& x,
                        at::Tensor& c) {
  const int64_t Hp = p.H + 2 * p.padding[0], Wp = p.W + 2 * p.padding[1], img = Hp * Wp;
  const at::Tensor xpad = pad_to_grid<T>(L, x, p.padding[0], p.padding[1], Hp, Wp);
  const at::Tensor gpad = pad_to_grid<T>(L, go_cl, 0, 0, Hp, Wp);
  // Up to the last pixel with a gradient: the largest tap shift then ends at the buffer's last pixel.
  const int64_t K = (p.N - 1) * img + (p.OH - 1) * Wp + p.OW;
  at::Tensor partial;  // split K's scratch (T is the accumulation type): alive until the wait below
  panel_gemm<T>(L, gpad.narrow(0, 0, K).t(), cptr<T>(xpad), p.C, Wp * p.C, p.KW * p.C, p.KH * p.KW * p.C, at::Tensor(),
                /*relu=*/false, c, partial, /*accumulate=*/false, /*res=*/nullptr, /*bias_rows=*/false,
                /*split_k=*/true);
  L.finish(c);  // xpad and gpad die here
  // Host memory (a CPU device) and a small result (the route's layers have few channels): a plain scan, no torch
  // op (which would wake torch's thread pool while the runtime's workers still spin).
  const T* v = cptr<T>(c);
  return std::all_of(v, v + c.numel(), [](T e) { return std::isfinite(e); });
}

// Pixels per chunk of an im2col route whose patches take cols_per_pixel elements per pixel: at most
// Conv2dConfig::kIm2colElements elements, whole conv2d_im2col work-groups (kIm2colPixels), at most all M pixels.
int64_t im2col_chunk(int64_t M, int64_t cols_per_pixel) {
  using C = Conv2dConfig;
  return std::min(
      M, std::max(C::kIm2colPixels, C::kIm2colElements / cols_per_pixel / C::kIm2colPixels * C::kIm2colPixels));
}

// grad_weight transposed, grad_weight^T [KH*KW*C, O] = col^T [KH*KW*C, pixels] @ grad_output [pixels, O], where the
// patches are few and grad_output's channels fill whole panels better: the 7x7 stem (3 input channels: 147 patch
// columns, 64 output channels). The GEMM's rows are then the patch columns (tiles of 6: 150 rows computed for 147)
// and its columns the output channels (one 64-column panel, grad_output's rows read in place), where the other
// orientation computes 66 rows (64 output channels) x 192 columns (147 in three panels). col holds each pixel's
// patch in one row ([pixels, KH*KW*C]; 25 % fewer bytes than three 64-column panels: conv2d_im2col_rows for a
// channels_last input, conv2d_im2col with one panel of all the columns otherwise) and is read as A with a stride
// of KH*KW*C per pixel; the chunks and K ranges are the other route's. Chosen where it computes fewer padded products
// and A's stride per pixel stays within 2 KiB (the hardware prefetcher's reach for a strided stream; a 3x3 layer's 9*C
// columns exceed it from C = 57). Measured in one process against the other orientation (2-core Intel Xeon, AVX-512 +
// AMX; docs/performance.md, "Split K for grad_weight"): the stem 1.17-1.27x faster at batch 1, 2 and 8 in both memory
// formats.
bool grad_weight_transposed_pays(const Conv2dProblem& p, int64_t panel, size_t elem_size) {
  const int64_t KKC = p.KH * p.KW * p.C, R = xk::PanelTile<float>::kRows;
  const int64_t direct = ceil_div(p.O, R) * R * ceil_div(KKC, panel) * panel;
  const int64_t transposed = ceil_div(KKC, R) * R * ceil_div(p.O, panel) * panel;
  return transposed < direct && KKC * static_cast<int64_t>(elem_size) <= 2048;
}

template <typename T>
void grad_weight_transposed(Launcher& L, const Conv2dProblem& p, const at::Tensor& go_cl, const at::Tensor& x,
                            at::Tensor& c, bool cl_order) {
  const int64_t M = p.N * p.OH * p.OW, KKC = p.KH * p.KW * p.C;
  const int64_t P = xk::PanelTile<T>::kCols;
  const int64_t chunk = im2col_chunk(M, KKC);
  const at::Tensor col = empty({chunk * KKC}, x.options());
  at::Tensor ct = empty({KKC, p.O}, c.options()), partial;  // grad_weight^T; partial: split K's scratch
  const T* go = cptr<T>(go_cl);                             // [pixels, O] rows (channels_last, dense)
  // A channels_last input whose row pixels are C apart, undilated: each kernel row's patch elements are one run of
  // an input row, copied as such (conv2d_im2col_rows) instead of gathered element by element.
  const bool rows = cl_order && x.stride(1) == 1 && x.stride(3) == p.C && p.dilation == std::array<int64_t, 2>{1, 1};
  for (int64_t s = 0, m0 = 0; m0 < M; ++s, m0 += chunk) {
    const int64_t mc = std::min(chunk, M - m0);
    launch_im2col<T>(L, p, x, col, m0, mc, /*panel=*/KKC, cl_order, rows);
    // In-order queue: the GEMM reads col after the kernel above; the wait lets the next chunk overwrite col.
    panel_gemm<T>(L, col.narrow(0, 0, mc * KKC).view({mc, KKC}).t(), go + m0 * p.O, p.O, P, P, p.O, at::Tensor(),
                  /*relu=*/false, ct, partial, /*accumulate=*/s > 0, /*res=*/nullptr, /*bias_rows=*/false,
                  /*split_k=*/true);
    L.finish(go_cl);
  }
  c.copy_(ct.t());  // [O, KKC]: a few thousand elements (torch's copy stays on this thread)
}

// grad_weight of a one-group convolution as GEMMs, on devices that run the CPU GEMM kernels: grad_weight, viewed
// as [O, KH*KW*C] in its memory order, = grad_output^T [O, pixels] @ col [pixels, KH*KW*C], col the input's
// patches (conv2d_im2col, written as the panel GEMM's packed B operand) in chunks of pixels, each chunk's product
// added to the last (gemm.h panel_gemm, accumulate). grad_output^T is read in place from channels_last memory
// (a stride of O along the pixels). Measured on the Xeon (AVX-512), ResNet-50 layers at batch 2: 1.5-10x faster
// than conv2d_grad_weight, whose per-tap tiles read grad_output once per (tap, 6 input channels). 1x1 layers of a
// dense channels_last input skip the copy (below).
template <typename T>
void grad_weight_gemm(Launcher& L, const Conv2dProblem& p, const at::Tensor& go_cl, const at::Tensor& x,
                      at::Tensor& gw) {
  const int64_t M = p.N * p.OH * p.OW, KKC = p.KH * p.KW * p.C;
  const int64_t P = xk::PanelTile<T>::kCols, panels = ceil_div(KKC, P);
  const int64_t chunk = im2col_chunk(M, panels * P);
  const at::Tensor a = go_cl.permute({0, 2, 3, 1}).reshape({M, p.O}).t();  // [O, pixels], a view
  at::Tensor c = gw.as_strided({p.O, KKC}, {KKC, 1});                      // gw is dense in its memory format
  at::Tensor partial;  // split K's scratch (T is the accumulation type): alive until each wait below
  // 1x1, stride 1, unpadded, dense channels_last input: the patches are the input's rows [pixels, C] as stored, read
  // in place as B (no im2col copy, no chunks; the kernel's K blocks of pixels accumulate in gw). Measured against
  // the im2col route on a 2-vCPU AMD EPYC with AVX-512 (2026-12-05), ResNet-50's 1x1 layers at batch 1 and 8:
  // 1.02-1.39x faster (256 -> 64 56x56 b1 0.65 -> 0.51 ms, 512 -> 128 28x28 b8 6.13 -> 4.41 ms).
  if (pixel_gemm_fits(L, p, x)) {
    panel_gemm<T>(L, a, cptr<T>(x), p.C, P, P, KKC, at::Tensor(), /*relu=*/false, c, partial, /*accumulate=*/false,
                  /*res=*/nullptr, /*bias_rows=*/false, /*split_k=*/true);
    L.finish(go_cl);
    return;
  }
  if constexpr (std::is_floating_point_v<T>) {  // the accumulation types: float and double
    if (grad_weight_window_fits(L, p, P) && grad_weight_window<T>(L, p, go_cl, x, c)) return;
  }
  const bool cl_order = p.channels_last || p.KH * p.KW == 1;
  if (grad_weight_transposed_pays(p, P, sizeof(T))) {
    grad_weight_transposed<T>(L, p, go_cl, x, c, cl_order);
    return;
  }
  const at::Tensor col = empty({panels * P * chunk}, x.options());
  for (int64_t s = 0, m0 = 0; m0 < M; ++s, m0 += chunk) {
    const int64_t mc = std::min(chunk, M - m0);
    launch_im2col<T>(L, p, x, col, m0, mc, P, cl_order, /*rows=*/false);
    // In-order queue: the GEMM reads col after the kernel above; the wait lets the next chunk overwrite col.
    panel_gemm<T>(L, a.narrow(1, m0, mc), cptr<T>(col), P, mc * P, P, KKC, at::Tensor(), /*relu=*/false, c, partial,
                  /*accumulate=*/s > 0, /*res=*/nullptr, /*bias_rows=*/false, /*split_k=*/true);
    L.finish(go_cl);
  }
}

// grad_input of a strided, undilated, one-group convolution (the 7x7 stride-2 stem, stride-2 3x3 layers, NCHW
// stride-2 1x1 layers; channels_last 1x1 layers take strided_pointwise_grad_input before this) on a device that runs
// the CPU GEMM kernels, float or double: per image, col [OH * OW, KH * KW * C] = grad_output [OH * OW, O] @
// w [O, (kh, kw, c)] (the panel GEMM, the weight packed once), then conv2d_col2im gathers each input pixel's taps from
// col. The destination-pixel kernel computed grad_input as a transposed convolution over every input pixel and tap,
// although with stride s only one tap in s of each kernel row lands on an output pixel, and with few input channels
// (the stem's 3) it ran its narrow tile with most lanes idle. Measured against it in one process (2-core Intel Xeon,
// AVX-512 + AMX, 2026-12-06, batch 1 / 8, float32): the stem 8.3-9.3x (channels_last b1 27.6 -> 3.3 ms), 3x3
// stride-2 layers of 8-512 channels 1.05-2.2x, NCHW stride-2 1x1 layers 1.24-3.0x. Stride 1 keeps the direct kernel
// (the GEMM route lost there from 8 input channels).
bool col2im_grad_input_fits(const Launcher& L, const Conv2dProblem& p) {
  constexpr int64_t kFloatExact = int64_t(1) << 20;  // conv2d_col2im's float division is exact below this
  return L.traits().is_cpu && p.groups == 1 && p.stride != std::array<int64_t, 2>{1, 1} &&
         p.dilation == std::array<int64_t, 2>{1, 1} && p.W + p.padding[1] < kFloatExact &&
         choose_gemm_variant(L, "conv2d_backward") == GemmVariant::Cpu;
}

template <typename T>
void col2im_grad_input(Launcher& L, const Conv2dProblem& p, const at::Tensor& go, const at::Tensor& weight,
                       at::Tensor& gi) {
  using K = xk::conv2d_col2im;
  const int64_t KKC = p.KH * p.KW * p.C, pixels = p.OH * p.OW;
  const int64_t cols = xk::PanelTile<T>::kCols;
  // w [O, C, KH, KW] -> [O, (kh, kw, c)] (a view of a channels_last weight, else a small copy that must outlive the
  // packing kernel), packed once.
  const at::Tensor w_rows = weight.permute({0, 2, 3, 1}).reshape({p.O, KKC});
  const at::Tensor packed = pack_panels<T>(L, w_rows);
  const at::Tensor col = empty({pixels, KKC}, go.options());
  at::Tensor c = col, partial;
  for (int64_t n = 0; n < p.N; ++n) {
    // grad_output of image n as [pixels, O] (a view in either memory format); in-order queue: this GEMM overwrites
    // col after the previous image's col2im has read it.
    const at::Tensor a = go[n].reshape({p.O, pixels}).t();
    panel_gemm<T>(L, a, cptr<T>(packed), cols, p.O * cols, cols, KKC, at::Tensor(), /*relu=*/false, c, partial);
    L.launch<K, T>(sycl::nd_range<1>(sycl::range<1>(p.H * K::kLocal), sycl::range<1>(K::kLocal)),
                   {.col = cptr<T>(col),
                    .gi = mptr<T>(gi) + n * gi.stride(0),
                    .C = p.C,
                    .H = p.H,
                    .W = p.W,
                    .sC = gi.stride(1),
                    .sH = gi.stride(2),
                    .sW = gi.stride(3),
                    .OH = p.OH,
                    .OW = p.OW,
                    .KH = p.KH,
                    .KW = p.KW,
                    .sh = p.stride[0],
                    .sw = p.stride[1],
                    .ph = p.padding[0],
                    .pw = p.padding[1]});
  }
  L.finish(gi);  // packed and col die here
}

// grad_output dense in the problem's memory format (itself when it is). A channels_last problem on a CPU device is
// copied by a SYCL kernel (pad_to_grid without padding) instead of torch: torch's copy would run on its OpenMP
// threads right after the forward's SYCL kernels, while the runtime's workers still spin (docs/performance.md,
// "Threads"); measured in the op suite's 1x1 256 -> 64 56x56 batch-1 step (`out.sum().backward()`: an expanded
// gradient), xkernels took 0.3-0.4 ms longer than with a dense gradient, torch the same.
at::Tensor dense_grad_output(Launcher& L, const at::Tensor& g, const Conv2dProblem& p, at::MemoryFormat fmt) {
  if (g.is_contiguous(fmt)) return g;
  if (!p.channels_last || !pad_to_grid_fits(L, p.O)) return g.contiguous(fmt);
  at::Tensor out;
  XK_DISPATCH_DEVICE_TYPES(g.scalar_type(), "conv2d_backward", [&] {
    out = pad_to_grid<T>(L, g, 0, 0, p.OH, p.OW).view({p.N, p.OH, p.OW, p.O}).permute({0, 3, 1, 2});
  });
  return out;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> backward(Launcher L, const at::Tensor& grad_output,
                                                        const at::Tensor& input, const at::Tensor& weight,
                                                        const Conv2dProblem& p, std::array<bool, 3> mask) {
  const auto fmt = p.channels_last ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous;
  // grad_output made dense in the problem's memory format first (a no-op when it is): the GEMM routes (1x1 pixel
  // and per-image GEMMs) and grad_weight's vector loads need it, and an expanded gradient (`out.sum().backward()`:
  // every stride 0) was otherwise read element by element by the direct kernels and copied again for grad_weight.
  // Measured (AMD EPYC, AVX-512; 1x1 256 -> 64 56x56 channels_last, sum().backward()): grad_input 1.09 ms in
  // conv2d_igemm -> a 0.5 ms GEMM.
  if (!mask[0] && !mask[1] && !mask[2])  // nothing asked for (and no copy of grad_output queued and left unwaited)
    return {empty_grad_like(input), empty_grad_like(weight), empty_grad_like(weight)};
  const at::Tensor go = dense_grad_output(L, as_4d(grad_output), p, fmt);
  const at::Tensor x = as_4d(input);
  at::Tensor gi = empty_grad_like(input), gw = empty_grad_like(weight), gb = empty_grad_like(weight);
  const int64_t G = p.groups, Opg = p.O_per_group(), Cpg = p.C_per_group();
  const int64_t M = p.N * p.OH * p.OW;
  XK_DISPATCH_DEVICE_TYPES(go.scalar_type(), "conv2d_backward", [&] {
    using acc = xk::acc_t<T>;
    const auto acc_opts = go.options().dtype(c10::CppTypeToScalarType<acc>::value);
    const int64_t S = lane_width<T>(L.traits(), L.lanes_are_work_items());
    if (mask[0]) {  // grad_input: transposed convolution of grad_output with the weight
      gi = empty({p.N, p.C, p.H, p.W}, input.options().memory_format(fmt));
      bool done = false;
      if (pixel_gemm_fits(L, p, go)) {  // 1x1: grad_input [pixels, C] = grad_output [pixels, O] @ w [O, C]
        at::Tensor gi2 = pixel_rows(gi);
        gemm<T>(L, GemmVariant::Cpu, pixel_rows(go), weight.reshape({p.O, p.C}), at::Tensor(), /*relu=*/false, gi2);
        done = true;
      } else if (strided_pixel_gemm_fits(L, p, go)) {  // 1x1, stride > 1: the same GEMM onto the strided pixels
        strided_pointwise_grad_input<T>(L, p, go, weight, gi);
        done = true;
      } else if (image_gemm_fits(L, p, go)) {  // 1x1, NCHW: grad_input[n] [C, H*W] = w^T [C, O] @ go[n] [O, H*W]
        image_gemms<T>(L, weight.reshape({p.O, p.C}).t(), go, at::Tensor(), nullptr, /*relu=*/false, gi);
        done = true;
      } else if (p.stride == std::array<int64_t, 2>{1, 1} && pointwise_nchw_gemm_fits(L, p, go)) {
        // 1x1, NCHW, smaller images: the pixel GEMM, grad_output's pixels read in place and grad_input written as
        // NCHW (1.13-1.44x faster than the direct kernel on ResNet-50's 28x28, 14x14 and 7x7 layers at batch 1 and 8,
        // 2-core Intel Xeon, 2026-12-07; docs/performance.md)
        at::Tensor gi_pixels = gi.permute({0, 2, 3, 1});
        gemm<T>(L, GemmVariant::Cpu, go.permute({0, 2, 3, 1}), weight.reshape({p.O, p.C}), at::Tensor(),
                /*relu=*/false, gi_pixels);
        done = true;
      }
      if constexpr (std::is_same_v<T, float>) {
        if (!done) done = grad_input_winograd(L, p, go, weight, gi);
      }
      if constexpr (std::is_same_v<T, acc>) {  // float and double: col holds the GEMM's rounded sums
        if (!done && col2im_grad_input_fits(L, p)) {
          col2im_grad_input<T>(L, p, go, weight, gi);
          done = true;
        }
      }
      if (!done) run_destination_gemm<T>(L, p, go, weight, at::Tensor(), gi, /*transposed=*/true);
      if (!p.batched) gi = gi.view(input.sizes());
    }
    // grad_weight with lanes over channels loads grad_output's channels as vectors: it needs
    // channels_last memory (lanes over groups read any strides).
    const bool gw_groups = conv2d_group_lanes_pay(S, G, Opg);
    const at::Tensor go_cl = mask[1] && !gw_groups ? go.contiguous(at::MemoryFormat::ChannelsLast) : at::Tensor();
    // One group, float or double, a device that runs the CPU GEMM kernels: grad_weight as GEMMs
    // (grad_weight_gemm; the chunks accumulate in the output, so half types keep the direct kernels below).
    const bool gw_gemm = mask[1] && G == 1 && std::is_same_v<T, acc> && go_cl.defined() &&
                         choose_gemm_variant(L, "conv2d_backward") == GemmVariant::Cpu;
    if (gw_gemm) {
      gw = empty(weight.sizes(), weight.options().memory_format(fmt));
      grad_weight_gemm<T>(L, p, go_cl, x, gw);
    }
    with_lanes<T>(S, [&](auto S_) {
      constexpr int SL = decltype(S_)::value;
      if (mask[1] && !gw_gemm) {  // grad_weight: split reduction over pixels, then an ordered sum of the splits
        gw = empty(weight.sizes(), weight.options().memory_format(fmt));
        int64_t Opg_pad = Opg, splits = 0;
        at::Tensor part;
        if (gw_groups) {
          const int64_t G_pad = ceil_div(G, S) * S;
          const int64_t tiles = ceil_div(p.KH * p.KW, Conv2dConfig::kGradWeightGroupsR) * Cpg * Opg * (G_pad / S);
          const int64_t packed = G * p.KH * p.KW * Cpg * Opg;
          splits = pixel_splits(M, tiles, packed);
          part = empty({splits, packed}, acc_opts);
          L.launch<xk::conv2d_grad_weight_groups<SL, Conv2dConfig::kGradWeightGroupsR>, T>(
              sycl::nd_range<1>(sycl::range<1>(splits * tiles * S), sycl::range<1>(S)),
              {.go = cptr<T>(go),
               .x = cptr<T>(x),
               .part = part.mutable_data_ptr<acc>(),
               .N = p.N,
               .C = p.C,
               .H = p.H,
               .W = p.W,
               .sN = x.stride(0),
               .sC = x.stride(1),
               .sH = x.stride(2),
               .sW = x.stride(3),
               .O = p.O,
               .OH = p.OH,
               .OW = p.OW,
               .gN = go.stride(0),
               .gC = go.stride(1),
               .gH = go.stride(2),
               .gW = go.stride(3),
               .G_pad = G_pad,
               .G = G,
               .KH = p.KH,
               .KW = p.KW,
               .sh = p.stride[0],
               .sw = p.stride[1],
               .ph = p.padding[0],
               .pw = p.padding[1],
               .dh = p.dilation[0],
               .dw = p.dilation[1],
               .splits = splits});
        } else {
          const Tile tile = igemm_tile(Opg, L.traits().vector_registers());
          Opg_pad = ceil_div(Opg, S * tile.Q) * S * tile.Q;
          const int64_t tiles = G * p.KH * p.KW * ceil_div(Cpg, tile.R) * (Opg_pad / (S * tile.Q));
          const int64_t packed = G * p.KH * p.KW * Cpg * Opg_pad;
          splits = pixel_splits(M, tiles, packed);
          part = empty({splits, packed}, acc_opts);
          with_tile<SL>(tile, [&](auto R, auto Q) {
            L.launch<xk::conv2d_grad_weight<SL, decltype(R)::value, decltype(Q)::value>, T>(
                sycl::nd_range<1>(sycl::range<1>(splits * tiles * S), sycl::range<1>(S)),
                {.go = cptr<T>(go_cl),
                 .x = cptr<T>(x),
                 .part = part.mutable_data_ptr<acc>(),
                 .N = p.N,
                 .C = p.C,
                 .H = p.H,
                 .W = p.W,
                 .sN = x.stride(0),
                 .sC = x.stride(1),
                 .sH = x.stride(2),
                 .sW = x.stride(3),
                 .O = p.O,
                 .OH = p.OH,
                 .OW = p.OW,
                 .Opg_pad = Opg_pad,
                 .G = G,
                 .KH = p.KH,
                 .KW = p.KW,
                 .sh = p.stride[0],
                 .sw = p.stride[1],
                 .ph = p.padding[0],
                 .pw = p.padding[1],
                 .dh = p.dilation[0],
                 .dw = p.dilation[1],
                 .splits = splits});
          });
        }
        // In-order queue: the reduction runs after the partial sums.
        launch_reduce<T>(L, part, gw, G, Opg, Opg_pad, Cpg, p.KH, p.KW, p.channels_last);
        L.finish(go);
      }
      if (mask[2]) {                                         // grad_bias: the same two stages over grad_output alone
        const at::Tensor& g = go_cl.defined() ? go_cl : go;  // channels_last when available: vector loads
        gb = empty({p.O}, weight.options());
        const int64_t O_pad = ceil_div(p.O, S) * S;
        const int64_t tiles = O_pad / S;
        const int64_t splits = pixel_splits(M, tiles, O_pad);
        at::Tensor part = empty({splits, O_pad}, acc_opts);
        const xk::conv2d_grad_bias_params<T> gb_params{.go = cptr<T>(g),
                                                       .part = part.mutable_data_ptr<acc>(),
                                                       .N = p.N,
                                                       .O = p.O,
                                                       .OH = p.OH,
                                                       .OW = p.OW,
                                                       .sN = g.stride(0),
                                                       .sC = g.stride(1),
                                                       .sH = g.stride(2),
                                                       .sW = g.stride(3),
                                                       .O_pad = O_pad,
                                                       .splits = splits};
        const sycl::nd_range<1> gb_range(sycl::range<1>(splits * tiles * S), sycl::range<1>(S));
        launch_by_channel_stride<xk::conv2d_grad_bias, SL, T>(L, g, gb_range, gb_params);
        launch_reduce<T>(L, part, gb, 1, p.O, O_pad, 1, 1, 1, false);
        L.finish(go);
      }
    });
  });
  return {gi, gw, gb};
}

// The packed layout (padded for shapes.h's lane count) serves the kernels this launcher runs: their lane width
// divides it (16 or 8 lanes on CPUs; not the 32 of GPU warps).
void check_pack_lanes(const char* op, const Launcher& L, at::ScalarType dtype) {
  int64_t S = 0;
  XK_DISPATCH_DEVICE_TYPES(dtype, "conv2d", [&] { S = lane_width<T>(L.traits(), L.lanes_are_work_items()); });
  XK_CHECK(conv2d_pack_lanes(dtype) % S == 0, op, "packed conv2d weights are laid out for ", conv2d_pack_lanes(dtype),
           " lanes, but this device's conv2d kernels run ", S, " (use conv2d / conv2d_relu on this device)");
}

at::Tensor pack_weight_for(Launcher L, const at::Tensor& weight, int64_t groups) {
  check_pack_lanes("pack_conv2d_weight", L, weight.scalar_type());
  const Conv2dPackLayout l = conv2d_pack_layout(weight.sizes(), groups, weight.scalar_type());
  at::Tensor packed;
  XK_DISPATCH_DEVICE_TYPES(weight.scalar_type(), "pack_conv2d_weight", [&] {
    packed = pack_on_device<T>(L, weight, groups, /*transposed=*/false, l.group_lanes, l.pad, l.numel);
    if (l.winograd > 0) pack_winograd(L, weight, packed, l);
  });
  L.finish(weight);
  return packed;
}

at::Tensor forward_packed(Launcher L, const at::Tensor& input, const at::Tensor& packed_weight, const at::Tensor& bias,
                          const at::Tensor& residual, bool relu, const Conv2dProblem& p) {
  check_pack_lanes("conv2d_packed", L, input.scalar_type());
  return forward(L, input, at::Tensor(), bias, p, residual, relu, packed_weight);
}

}  // namespace

at::Tensor pack_conv2d_weight(const at::Tensor& weight, int64_t groups) {
  return pack_weight_for(Launcher::for_tensor(weight), weight, groups);
}
int64_t conv2d_winograd_calls() { return winograd_calls.load(std::memory_order_relaxed); }
bool conv2d_amx_for_cpu_tensors(int64_t out_channels, int64_t in_channels, int64_t kh, int64_t kw,
                                std::array<int64_t, 2> stride, std::array<int64_t, 2> padding, int64_t groups) {
  return traits_of(cpu_queue()).amx_bf16 &&
         amx_conv2d_shape_fits(out_channels, in_channels, kh, kw, stride, padding, groups);
}
// Inside a deferred-wait region (launch.h PendingHostWork), a float32 / float64 convolution whose input, residual
// and bias are dense as the routes read them in place runs only kernels from here on (the forward routes of packed
// weights wait only at their end; the AMX route, which copies its input on the host, is for bfloat16), so it returns
// with them queued; any other call waits for the region's kernels first.
bool packed_forward_defers(const at::Tensor& input, const at::Tensor& bias, const at::Tensor& residual,
                           const Conv2dProblem& p) {
  const auto fmt = p.channels_last ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous;
  const auto dense = [&](const at::Tensor& t) { return t.dim() == 4 && t.is_contiguous(fmt); };
  return input.is_cpu() && (input.scalar_type() == at::kFloat || input.scalar_type() == at::kDouble) && dense(input) &&
         (!residual.defined() || dense(residual)) && (!bias.defined() || bias.is_contiguous());
}

at::Tensor conv2d_packed(const at::Tensor& input, const at::Tensor& packed_weight, const at::Tensor& bias,
                         const at::Tensor& residual, bool relu, const Conv2dProblem& p) {
  PendingHostWork& w = pending_host_work();
  if (w.defer == 0 || !packed_forward_defers(input, bias, residual, p)) {
    settle_host_work();
    return forward_packed(Launcher::for_tensor(input), input, packed_weight, bias, residual, relu, p);
  }
  w.route_defers = true;
  try {
    at::Tensor out = forward_packed(Launcher::for_tensor(input), input, packed_weight, bias, residual, relu, p);
    w.route_defers = false;
    return out;
  } catch (...) {
    w.route_defers = false;
    throw;
  }
}

at::Tensor conv2d(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias, const Conv2dProblem& p) {
  return forward(Launcher::for_tensor(input), input, weight, bias, p);
}
at::Tensor conv2d_relu(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias,
                       const at::Tensor& residual, const Conv2dProblem& p) {
  return forward(Launcher::for_tensor(input), input, weight, bias, p, residual, /*relu=*/true);
}
std::tuple<at::Tensor, at::Tensor, at::Tensor> conv2d_backward(const at::Tensor& grad_output, const at::Tensor& input,
                                                               const at::Tensor& weight, const Conv2dProblem& p,
                                                               std::array<bool, 3> mask) {
  return backward(Launcher::for_tensor(grad_output), grad_output, input, weight, p, mask);
}

}  // namespace xkernels::sycl_backend

#ifdef XKERNELS_WITH_ACPP
namespace xkernels::acpp_backend {
at::Tensor conv2d(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias, const Conv2dProblem& p) {
  return sycl_backend::forward(sycl_backend::Launcher::acpp(), input, weight, bias, p);
}
at::Tensor conv2d_relu(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias,
                       const at::Tensor& residual, const Conv2dProblem& p) {
  return sycl_backend::forward(sycl_backend::Launcher::acpp(), input, weight, bias, p, residual, /*relu=*/true);
}
at::Tensor pack_conv2d_weight(const at::Tensor& weight, int64_t groups) {
  return sycl_backend::pack_weight_for(sycl_backend::Launcher::acpp(), weight, groups);
}
at::Tensor conv2d_packed(const at::Tensor& input, const at::Tensor& packed_weight, const at::Tensor& bias,
                         const at::Tensor& residual, bool relu, const Conv2dProblem& p) {
  return sycl_backend::forward_packed(sycl_backend::Launcher::acpp(), input, packed_weight, bias, residual, relu, p);
}
std::tuple<at::Tensor, at::Tensor, at::Tensor> conv2d_backward(const at::Tensor& grad_output, const at::Tensor& input,
                                                               const at::Tensor& weight, const Conv2dProblem& p,
                                                               std::array<bool, 3> mask) {
  return sycl_backend::backward(sycl_backend::Launcher::acpp(), grad_output, input, weight, p, mask);
}
}  // namespace xkernels::acpp_backend
#endif
