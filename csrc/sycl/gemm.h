// The FMA GEMM kernels' host side (kernels/fused_linear_relu.hpp: linear_gemm_panel, linear_gemm_dot,
// linear_gemm_tiled, linear_pack_panels), shared by the ops that run GEMMs: fused_linear_relu (forward and
// backward) and conv2d (grad_weight as grad_weight^T = im2col(input)^T @ grad_output, conv2d.cpp).
//
// GEMM variant, per device (XKERNELS_SYCL_GEMM_VARIANT=auto|cpu|gpu|amx, read at every call; default auto):
// "cpu" = the register-blocked sub-group kernels (linear_gemm_panel, and linear_gemm_dot for the forward pass
// with few rows), chosen automatically for CPU devices; "gpu" = the local-memory tiled kernel
// (linear_gemm_tiled), chosen for every other device; "amx" concerns the bf16 forward on the CPU's matrix unit
// (fused_linear_relu.cpp, amx_gemm.h) and keeps the FMA GEMMs' automatic choice. Forcing a variant lets each be
// tested on any device that has it; "cpu" needs sub-groups of 16.
#pragma once
#include <ATen/ATen.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <string>

#include "sycl/host_alloc.h"
#include "sycl/launch.h"
#include "sycl/runtime_internal.h"
#include "xkernels/checks.h"

namespace xkernels::sycl_backend {

inline constexpr const char* kGemmVariantEnv = "XKERNELS_SYCL_GEMM_VARIANT";

struct GemmConfig {
  // Forward with at most this many rows runs the dot kernel (weight read as given, [N, K]).
  // Above it, packing W^T panel-major pays for itself: the panel kernel ran ~1.6x the dot
  // kernel's FLOP/s at M=64..512, N=K=1024 (141 vs 85 GFLOP/s), and the packing (a transpose,
  // strided on one side) costs about as much as ~50-100 rows of GEMM at N=K=1024.
  static constexpr int64_t kDotMaxRows = 96;
  // A backward GEMM with at least this many rows packs its B operand; below, B is read in
  // place (its rows are then touched only a few times, so packing would cost more than it saves).
  static constexpr int64_t kPackMinRows = 32;
  // K block of the panel kernel when A is not unit-stride along k (dW = G^T @ X reads G^T with
  // a stride of N per k): each k step then touches a new cache line of A, N*4 bytes (often a power
  // of two) past the last, so those lines alias in a few cache sets; short K blocks keep the A
  // lines of one block (48 rows x 64 k) resident while the work-group's row tiles reuse them.
  static constexpr int64_t kPanelKBlockStridedA = 64;
  // Rows of B per work-group of the packing kernel (keeps >= a few work-groups per panel).
  static constexpr int64_t kPackRowsPerGroup = 256;
  // The panel GEMM's work-groups walk its column panels in blocks of about this many bytes of B (at least one
  // panel; linear_gemm_panel_params::panel_block): the block's B panels stay in L2 while A's rows, read once per
  // panel, stay in L1 from one panel of the block to the next instead of being streamed from memory once per panel.
  static constexpr int64_t kPanelBlockBytes = 512 * 1024;
  // Split K (panel_gemm's split_k: conv2d's grad_weight, whose K is the batch's pixels): K is cut into about K / this
  // many ranges of equal length (whole K blocks), each summed by its own work-groups, the ranges' sums then added in
  // order (linear_gemm_panel_params::k_split). Without it, each of the few work-groups (M = output channels,
  // N = taps x input channels: 8 for 1x1 256 -> 64) streamed its A rows and B panel over all of K from memory, and
  // two cores shared 8 unequal work-groups. Ranges of 256-1024 measured alike, 2048-4096 up to 1.5x slower (2-core
  // Intel Xeon, docs/performance.md "Split K for grad_weight"). The later ranges' sums take at most
  // kSplitKMaxBytes of scratch (fewer, longer ranges beyond; ResNet-50 at batch 8 needs at most ~8 MB).
  static constexpr int64_t kSplitKLength = 512;
  static constexpr int64_t kSplitKMaxBytes = int64_t(16) << 20;
  // The AVX2 (S = 8) forward GEMM of one row, or of at most kWideMaxRows rows where that gives at least
  // kWideMinGroups work-groups, runs linear_gemm_row: one work-group per 64-column packed panel row (32 in fp64), rows
  // one at a time. Against linear_gemm_panel (2-vCPU AMD EPYC, AVX2, K = 4096, fused_linear_relu_packed; panel time /
  // row-kernel time): M = 1 1.1-2.0x at N = 64-4096; N = 4096: M = 2-8 1.5-2.6x, M = 12 1.03-1.11x, M = 16 0.99-1.05x,
  // M = 24-48 0.69-0.96x (fp32 and bf16); N = 1024 (16 work-groups): M = 8 1.35x, M = 12 0.87x; N = 64-256 (1-4
  // work-groups): M = 8 0.52-0.91x (docs/performance.md "Whole-row tiles for few rows on AVX2").
  static constexpr int64_t kWideMaxRows = 8;
  static constexpr int64_t kWideMinGroups = 16;
};

enum class GemmVariant { Cpu, Gpu };

// Lane width of the CPU kernels: 16 (one AVX-512 vector of fp32), or 8 on devices with 16 vector registers
// (simd_lanes, kernel_table.h), whose tiles (PanelTile / DotTile<T, 8>) fit that register file; 16 under acpp.
inline int cpu_lanes(const Launcher& L) { return L.lanes_are_work_items() ? 16 : simd_lanes(L.traits(), 16); }

// The CPU kernels run work-groups of cpu_lanes lanes. Under DPC++ the lanes are one sub-group (SIMD lanes),
// whose size the device must support; ahead-of-time builds (acpp) run them as 16 work-items (their lane
// reduction is a work-group reduction), which every device can.
inline bool cpu_kernels_run_on(const Launcher& L) {
  const auto& s = L.traits().sub_group_sizes;
  return L.lanes_are_work_items() || std::find(s.begin(), s.end(), size_t(cpu_lanes(L))) != s.end();
}

// Calls f(std::integral_constant<int, S>) with the CPU kernels' lane width.
template <typename F>
void with_cpu_lanes(const Launcher& L, F&& f) {
  if (cpu_lanes(L) == 8) return f(std::integral_constant<int, 8>{});
  f(std::integral_constant<int, 16>{});
}

// The variant asked for: "" (auto), "cpu", "gpu" or "amx".
inline std::string requested_gemm_variant(const char* op) {
  const char* env = std::getenv(kGemmVariantEnv);
  std::string v = env ? env : "";
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return std::tolower(c); });
  if (v == "auto") v.clear();
  XK_CHECK_VALUE(v.empty() || v == "cpu" || v == "gpu" || v == "amx", op, "environment variable ", kGemmVariantEnv,
                 " must be 'auto', 'cpu', 'gpu' or 'amx', got '", env, "'");
  return v;
}

// The FMA GEMMs' variant (every GEMM but the bf16 forward on AMX, which amx_applies decides).
inline GemmVariant choose_gemm_variant(const Launcher& L, const char* op) {
  const DeviceTraits& t = L.traits();
  const std::string v = requested_gemm_variant(op);
  if (v.empty() || v == "amx") return t.is_cpu && cpu_kernels_run_on(L) ? GemmVariant::Cpu : GemmVariant::Gpu;
  if (v == "gpu") return GemmVariant::Gpu;
  XK_CHECK(cpu_kernels_run_on(L), op, "GEMM variant 'cpu' (", kGemmVariantEnv, ") needs sub-groups of ", cpu_lanes(L),
           " but device '", t.name, "' does not support them");
  return GemmVariant::Cpu;
}

// Calls f(bias_tag, relu_tag) with std::integral_constant<bool, ...> for the epilogue flags: the
// table's variants are (bias + ReLU), (ReLU) for the forward pass and (none) for the backward GEMMs; the panel
// kernel also has (bias) (bias_only: conv2d's 1x1 GEMM without ReLU).
template <bool kBiasOnly = false, typename F>
inline void with_epilogue(bool bias, bool relu, F&& f) {
  using T_ = std::true_type;
  using F_ = std::false_type;
  if (bias && relu) return f(T_{}, T_{});
  if (relu) return f(F_{}, T_{});
  if constexpr (kBiasOnly) {
    if (bias) return f(T_{}, F_{});
  } else {
    TORCH_CHECK(!bias, "xkernels: this GEMM variant has no epilogue with a bias but no ReLU");
  }
  f(F_{}, F_{});
}

// The A operand of the CPU GEMM: [M, K] with any strides, or [N, OH, OW, K] with any strides, whose rows are the
// N * OH * OW pixels (ow fastest) at n * stride(0) + oh * stride(1) + ow * stride(2): a strided 1x1 convolution's
// NHWC input read in place (x.permute(0, 2, 3, 1) sliced with the stride), which no 2-D view can describe.
struct GemmRows {
  int64_t M, K, rs, ks;
  int64_t ow = 0, ohw = 0, sn = 0, sh = 0;  // linear_gemm_panel_params' row map; ow == 0: row m at m * rs
};
inline GemmRows gemm_rows(const at::Tensor& A) {
  if (A.dim() == 2) return {A.size(0), A.size(1), A.stride(0), A.stride(1)};
  TORCH_CHECK(A.dim() == 4, "xkernels: a GEMM's A operand is 2-D or 4-D, got ", A.dim(), " dimensions");
  return {A.size(0) * A.size(1) * A.size(2),
          A.size(3),
          A.stride(2),
          A.stride(3),
          A.size(2),
          A.size(1) * A.size(2),
          A.stride(0),
          A.stride(1)};
}

// B [K, N] (any strides) -> [ceil(N / kCols), K, kCols] contiguous, the panel-major layout of
// linear_gemm_panel's B operand (columns past N zero). Queued before the GEMM that reads it
// (in-order queue); the caller keeps the result alive until that GEMM is done.
template <typename T>
at::Tensor pack_panels(Launcher& L, const at::Tensor& B) {
  using G = xk::PanelTile<T>;
  const int64_t K = B.size(0), N = B.size(1);
  const int64_t panels = ceil_div(N, G::kCols);
  at::Tensor packed = empty({panels, K, int64_t{G::kCols}}, B.options());
  const int64_t k_chunks = ceil_div(K, GemmConfig::kPackRowsPerGroup);
  const int64_t k_chunk = ceil_div(K, k_chunks);
  L.launch<xk::linear_pack_panels, T>(
      sycl::nd_range<1>(sycl::range<1>(panels * k_chunks * G::kSubGroup), sycl::range<1>(G::kSubGroup)),
      {.B = cptr<T>(B),
       .b_ks = B.stride(0),
       .b_ns = B.stride(1),
       .packed = mptr<T>(packed),
       .K = K,
       .N = N,
       .k_chunk = k_chunk,
       .k_chunks = k_chunks});
  return packed;
}

// panel_gemm at lane width S.
template <typename T, int S>
void panel_gemm_lanes(Launcher& L, const at::Tensor& A, const T* b_ptr, int64_t ldb, int64_t panel_stride,
                      int64_t panel_cols, int64_t N, const at::Tensor& bias, bool relu, at::Tensor& C,
                      at::Tensor& partial, bool accumulate, const T* res, bool bias_rows, bool split_k) {
  using G = xk::PanelTile<T, S>;
  using acc = xk::acc_t<T>;
  const GemmRows a = gemm_rows(A);
  const int64_t M = a.M, K = a.K;
  T* c_ptr = mptr<T>(C);
  // A 4-D C: its rows are pixels, like A's (gemm_rows; an NCHW output's [N, OH, OW, O] view: columns OH * OW apart).
  const bool pixel_out = C.dim() == 4;
  const GemmRows c = pixel_out ? gemm_rows(C) : GemmRows{M, N, N, 1};
  // K blocks: partial sums live in C itself when T is the accumulation type. Not where C's rows are pixels: partial
  // sums there would be scattered loads and stores once per block; the whole K in one pass.
  TORCH_CHECK(!pixel_out || (!accumulate && !split_k),
              "xkernels: a panel GEMM into a 4-D (pixel-row) output neither accumulates nor splits K");
  const int64_t k_block = pixel_out   ? std::max<int64_t>(K, 1)
                          : a.ks == 1 ? xk::kPanelKBlock
                                      : GemmConfig::kPanelKBlockStridedA;
  acc* partial_ptr = nullptr;
  if (accumulate) {
    TORCH_CHECK((std::is_same_v<T, acc>) && !bias.defined() && !relu && res == nullptr,
                "xkernels: an accumulating panel GEMM needs the accumulation type and no epilogue");
    if constexpr (std::is_same_v<T, acc>) partial_ptr = c_ptr;
  } else if (K > k_block) {
    if constexpr (std::is_same_v<T, acc>) {
      partial_ptr = c_ptr;
    } else {
      partial = empty({M, N}, C.options().dtype(c10::CppTypeToScalarType<acc>::value));
      partial_ptr = partial.mutable_data_ptr<acc>();
    }
  }
  // Split K: the ranges after the first sum into scratch ([ranges - 1, M, N]) handed back in `partial` (unused for
  // the accumulation type otherwise; the caller keeps it alive until the kernels are done), added to C below.
  int64_t k_split = 0, ranges = 1;
  if (split_k) {
    // About K / kSplitKLength ranges (rounded to the nearest), at most as many as the scratch bound allows, of equal
    // lengths rounded up to whole K blocks (a short last range would cost a full set of work-groups' overhead).
    constexpr int64_t kLen = GemmConfig::kSplitKLength;
    const int64_t max_ranges = 1 + GemmConfig::kSplitKMaxBytes / std::max<int64_t>(M * N * int64_t{sizeof(T)}, 1);
    const int64_t want = std::min((K + kLen / 2) / kLen, max_ranges);
    if (want >= 2) {
      k_split = ceil_div(ceil_div(K, want), k_block) * k_block;
      ranges = ceil_div(K, k_split);
      if (ranges == 1) k_split = 0;
    }
  }
  if (ranges > 1) {
    TORCH_CHECK((std::is_same_v<T, acc>) && !bias.defined() && !relu && res == nullptr && C.is_contiguous(),
                "xkernels: a split-K panel GEMM needs the accumulation type, a dense C and no epilogue");
    if constexpr (std::is_same_v<T, acc>) partial_ptr = c_ptr;
    partial = empty({(ranges - 1) * M * N}, C.options());
  }
  // The kernels' parameters; row_groups and panel_block are linear_gemm_panel's, set below.
  xk::linear_gemm_panel_params<T> params{.A = cptr<T>(A),
                                         .a_rs = a.rs,
                                         .a_ks = a.ks,
                                         .B = b_ptr,
                                         .ldb = ldb,
                                         .b_panel_stride = panel_stride,
                                         .bias = cptr_or_null<T>(bias),
                                         .C = c_ptr,
                                         .ldc = c.rs,
                                         .partial = partial_ptr,
                                         .M = M,
                                         .N = N,
                                         .K = K,
                                         .k_block = k_block,
                                         .row_groups = 1,
                                         .b_panel_cols = panel_cols,
                                         .accumulate = accumulate ? 1 : 0,
                                         .res = res,
                                         .bias_rows = bias_rows ? 1 : 0,
                                         .a_ow = a.ow,
                                         .a_ohw = a.ohw,
                                         .a_sn = a.sn,
                                         .a_sh = a.sh,
                                         .panel_block = 1,
                                         .k_split = k_split,
                                         .splits = ranges > 1 ? mptr<T>(partial) : nullptr,
                                         .c_ow = c.ow,
                                         .c_ohw = c.ohw,
                                         .c_sn = c.sn,
                                         .c_sh = c.sh,
                                         .c_cs = c.ks};
  // Whole-row tiles (GemmConfig::kWideMaxRows, linear_gemm_row): the AVX2 kernel's 16-column tiles would each read
  // 64 of every 256 bytes of a packed row; a work-group over the whole packed row reads B as one stream. The kernel
  // needs B's columns contiguous across the work-group's width (packed panels of a multiple of it, or B in place), a
  // dense C and one K range; the route is further limited to what was measured: ReLU epilogues (the two instantiated
  // variants), no residual, a column bias.
  if constexpr (S == 8) {
    constexpr int64_t wide_cols = int64_t{G::kCols} * xk::kWideTiles;
    const int64_t wide_groups = ceil_div(N, wide_cols);
    const bool few_rows = M == 1 || (M <= GemmConfig::kWideMaxRows && wide_groups >= GemmConfig::kWideMinGroups);
    if (!L.lanes_are_work_items() && few_rows && relu && !pixel_out && ranges == 1 && res == nullptr && !bias_rows &&
        (panel_cols % wide_cols == 0 || panel_stride == panel_cols)) {
      const sycl::nd_range<1> rows_range(sycl::range<1>(wide_groups * G::kSubGroup), sycl::range<1>(G::kSubGroup));
      if (bias.defined())
        L.launch<xk::linear_gemm_row<true, true>, T>(rows_range, params);
      else
        L.launch<xk::linear_gemm_row<false, true>, T>(rows_range, params);
      return;
    }
  }
  const int64_t row_groups = ceil_div(M, int64_t{G::kRows} * G::kRowTilesPerGroup);
  const int64_t panels = ceil_div(N, int64_t{G::kCols});
  const int64_t groups = row_groups * panels * ranges;
  // Panel blocks (GemmConfig::kPanelBlockBytes) where A is larger than a block's budget; a smaller A stays in L2
  // across the panels anyway, and one panel at a time keeps that panel in L1 across the row groups.
  constexpr int64_t budget = GemmConfig::kPanelBlockBytes;
  const int64_t k_range = ranges > 1 ? k_split : K;  // the K of one range's work-groups
  const int64_t panel_bytes = int64_t{G::kCols} * k_range * static_cast<int64_t>(sizeof(T));
  params.row_groups = row_groups;
  params.panel_block =
      M * k_range * static_cast<int64_t>(sizeof(T)) > budget
          ? std::clamp<int64_t>(budget / std::max<int64_t>(panel_bytes, 1), 1, std::max<int64_t>(panels, 1))
          : 1;
  const sycl::nd_range<1> range(sycl::range<1>(groups * G::kSubGroup), sycl::range<1>(G::kSubGroup));
  with_epilogue</*kBiasOnly=*/true>(bias.defined(), relu, [&](auto BIAS, auto RELU) {
    L.launch<xk::linear_gemm_panel<BIAS, RELU, S>, T>(range, params);
  });
  if (ranges > 1) {  // C += the later ranges' sums, in range order (C is dense [M, N]: one column of M * N)
    constexpr int64_t kLocal = 16;
    L.launch<xk::linear_column_sum, T>(
        sycl::nd_range<1>(sycl::range<1>(ceil_div(M * N, kLocal) * kLocal), sycl::range<1>(kLocal)),
        {.partial = reinterpret_cast<const acc*>(cptr<T>(partial)),
         .out = c_ptr,
         .R = ranges - 1,
         .N = M * N,
         .accumulate = 1});
  }
}

// The panel GEMM (linear_gemm_panel) on a B operand already in place or packed: C [M, N] =
// epilogue(A @ B [+ bias] [+ res]), column n of B read at b_ptr + (n / panel_cols) * panel_stride + k * ldb +
// n % panel_cols (B in place: panel_cols = panel_stride). `partial` receives the acc-type K-block scratch when
// T is not the accumulation type, or split_k's scratch (the caller keeps it alive until the kernels are done).
// accumulate: C += A @ B (no epilogue). res: [M, N] at C's offsets, added after the bias and before ReLU (null:
// none). bias_rows: the bias is per row (bias[m], M values) instead of per column. split_k (accumulation type, no
// epilogue, dense C): K cut into ranges (GemmConfig::kSplitKLength) summed in parallel, then added in order (a
// deterministic order that depends on the shape only, not the same rounding as one sequential sum). A: [M, K], or [N,
// OH, OW, K] whose first three dimensions are the rows (gemm_rows). C: [M, N] dense, or like A [N, OH, OW, N] with
// any strides (an NCHW output's permuted view; res then has its offsets).
template <typename T>
void panel_gemm(Launcher& L, const at::Tensor& A, const T* b_ptr, int64_t ldb, int64_t panel_stride, int64_t panel_cols,
                int64_t N, const at::Tensor& bias, bool relu, at::Tensor& C, at::Tensor& partial,
                bool accumulate = false, const T* res = nullptr, bool bias_rows = false, bool split_k = false) {
  with_cpu_lanes(L, [&](auto S_) {
    panel_gemm_lanes<T, decltype(S_)::value>(L, A, b_ptr, ldb, panel_stride, panel_cols, N, bias, relu, C, partial,
                                             accumulate, res, bias_rows, split_k);
  });
}

// C = epilogue(A @ B [+ bias] [+ res]) with C [M, N] contiguous; A [M, K] and B [K, N] are 2-D views
// with any strides (the CPU variant also takes a 4-D A, gemm_rows); res and a 4-D C (CPU variant only) as
// panel_gemm's (a 4-D C: the panel kernel).
// Returns once the kernel is done for CPU tensors (temporaries die here).
template <typename T>
void gemm(Launcher& L, GemmVariant variant, const at::Tensor& A, const at::Tensor& B, const at::Tensor& bias, bool relu,
          at::Tensor& C, const T* res = nullptr) {
  const int64_t M = gemm_rows(A).M, K = B.size(0), N = B.size(1);
  at::Tensor packed, partial;  // temporaries: must outlive the kernel (see the wait at the end)
  TORCH_CHECK(res == nullptr || variant == GemmVariant::Cpu, "xkernels: a residual epilogue needs the CPU GEMM");
  TORCH_CHECK(A.dim() == 2 || variant == GemmVariant::Cpu, "xkernels: a 4-D A operand needs the CPU GEMM");
  TORCH_CHECK(C.dim() == 2 || variant == GemmVariant::Cpu, "xkernels: a 4-D C operand needs the CPU GEMM");
  if (variant == GemmVariant::Gpu) {
    using G = xk::TiledTile;
    const sycl::nd_range<2> range({static_cast<size_t>(ceil_div(M, G::kTile) * G::kLocal),
                                   static_cast<size_t>(ceil_div(N, G::kTile) * G::kLocal)},
                                  {size_t{G::kLocal}, size_t{G::kLocal}});
    with_epilogue(bias.defined(), relu, [&](auto BIAS, auto RELU) {
      L.launch<xk::linear_gemm_tiled<BIAS, RELU>, T>(range, {.A = cptr<T>(A),
                                                             .a_rs = A.stride(0),
                                                             .a_ks = A.stride(1),
                                                             .B = cptr<T>(B),
                                                             .b_ks = B.stride(0),
                                                             .b_ns = B.stride(1),
                                                             .bias = cptr_or_null<T>(bias),
                                                             .C = mptr<T>(C),
                                                             .ldc = N,
                                                             .M = M,
                                                             .N = N,
                                                             .K = K});
    });
  } else if (relu && res == nullptr && M <= GemmConfig::kDotMaxRows && A.dim() == 2 && C.dim() == 2 &&
             A.stride(1) == 1 && B.stride(0) == 1) {
    // Both operands unit-stride along k (the forward pass as given): dot products, no packing.
    // (Instantiated for the forward epilogues only, hence `relu`.)
    with_cpu_lanes(L, [&](auto S_) {
      constexpr int S = decltype(S_)::value;
      using G = xk::DotTile<T, S>;
      const int64_t row_tiles = ceil_div(M, G::rows(M));
      const int64_t groups = row_tiles * ceil_div(N, G::cols(M));
      const sycl::nd_range<1> range(sycl::range<1>(groups * G::kSubGroup), sycl::range<1>(G::kSubGroup));
      auto launch = [&](auto BIAS) {  // the table has (bias + ReLU) and (ReLU) dot kernels
        L.launch<xk::linear_gemm_dot<decltype(BIAS)::value, true, S>, T>(range, {.A = cptr<T>(A),
                                                                                 .lda = A.stride(0),
                                                                                 .Bt = cptr<T>(B),
                                                                                 .ldb = B.stride(1),
                                                                                 .bias = cptr_or_null<T>(bias),
                                                                                 .C = mptr<T>(C),
                                                                                 .ldc = N,
                                                                                 .M = M,
                                                                                 .N = N,
                                                                                 .K = K,
                                                                                 .row_tiles = row_tiles});
      };
      bias.defined() ? launch(std::true_type{}) : launch(std::false_type{});
    });
  } else {
    const int64_t cols = xk::PanelTile<T>::kCols;
    const T* b_ptr;
    int64_t ldb, panel_stride;
    if (B.stride(1) == 1 && M < GemmConfig::kPackMinRows) {
      b_ptr = cptr<T>(B);
      ldb = B.stride(0);
      panel_stride = cols;
    } else {
      packed = pack_panels<T>(L, B);  // queued before the GEMM that reads it (in-order queue)
      b_ptr = cptr<T>(packed);
      ldb = cols;
      panel_stride = K * cols;
    }
    panel_gemm<T>(L, A, b_ptr, ldb, panel_stride, /*panel_cols=*/packed.defined() ? cols : panel_stride, N, bias, relu,
                  C, partial, /*accumulate=*/false, res);
  }
  L.finish(C);
}

}  // namespace xkernels::sycl_backend
