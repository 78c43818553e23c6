// fused_linear_relu on the SYCL backend: host wrapper. The entry (xkernels/entry.h) has
// validated the arguments and handled empty sizes; this makes inputs contiguous, allocates
// outputs, picks the GEMM variant and launch geometry, and launches kernels/fused_linear_relu.hpp.
//
//   forward:   out = relu(X @ W^T + b)              one GEMM, bias + ReLU in its epilogue
//   backward:  G  = grad_out * (out > 0)            linear_relu_grad (+ column partial sums)
//              db = sum_rows(G)                     linear_column_sum
//              dX = G @ W,  dW = G^T @ X            the same GEMM kernels, other strides
//
// GEMM variant, per device (XKERNELS_SYCL_GEMM_VARIANT=auto|cpu|gpu|amx, read at every call;
// default auto): "cpu" = the register-blocked sub-group kernels (linear_gemm_panel, and
// linear_gemm_dot for the forward pass with few rows), chosen automatically for CPU devices;
// "gpu" = the local-memory tiled kernel (linear_gemm_tiled), chosen for every other device;
// "amx" = the bf16 forward on the CPU's matrix unit (kernels/amx_gemm.hpp), chosen
// automatically for bf16 forward passes where the device has it and the shape fits (amx_applies).
// Forcing a variant lets each be tested on any device that has it; "cpu" needs sub-groups of 16.
#include <ATen/ATen.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <string>

#include "sycl/amx_gemm.h"
#include "sycl/host_alloc.h"
#include "sycl/launch.h"
#include "sycl/runtime_info.h"
#include "sycl/runtime_internal.h"
#include "xkernels/checks.h"
#include "xkernels/dispatch.h"
#include "xkernels/entry.h"

namespace xkernels::sycl_backend {

namespace {

constexpr const char* kOp = "fused_linear_relu";
constexpr const char* kVariantEnv = "XKERNELS_SYCL_GEMM_VARIANT";

struct LinearConfig {
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
  // ReLU-mask / column-sum kernel: rows per partial sum, and a cap on the number of partials.
  static constexpr int64_t kRowsPerChunk = 32;
  static constexpr int64_t kMaxChunks = 256;
  static constexpr int64_t kColumnLocal = 16;  // work-items per work-group of the column kernels
};

enum class GemmVariant { Cpu, Gpu };

// Lane width of the CPU kernels: 16 (one AVX-512 vector of fp32), or 8 on devices with 16 vector registers
// (simd_lanes, kernel_table.h), whose tiles (PanelTile / DotTile<T, 8>) fit that register file; 16 under acpp.
int cpu_lanes(const Launcher& L) { return L.lanes_are_work_items() ? 16 : simd_lanes(L.traits(), 16); }

// The CPU kernels run work-groups of cpu_lanes lanes. Under DPC++ the lanes are one sub-group (SIMD lanes),
// whose size the device must support; ahead-of-time builds (acpp) run them as 16 work-items (their lane
// reduction is a work-group reduction), which every device can.
bool cpu_kernels_run_on(const Launcher& L) {
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
std::string requested_variant() {
  const char* env = std::getenv(kVariantEnv);
  std::string v = env ? env : "";
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return std::tolower(c); });
  if (v == "auto") v.clear();
  XK_CHECK_VALUE(v.empty() || v == "cpu" || v == "gpu" || v == "amx", kOp, "environment variable ", kVariantEnv,
                 " must be 'auto', 'cpu', 'gpu' or 'amx', got '", env, "'");
  return v;
}

// The FMA GEMMs' variant (every GEMM but the bf16 forward on AMX, which amx_applies decides).
GemmVariant choose_variant(const Launcher& L) {
  const DeviceTraits& t = L.traits();
  const std::string v = requested_variant();
  if (v.empty() || v == "amx") return t.is_cpu && cpu_kernels_run_on(L) ? GemmVariant::Cpu : GemmVariant::Gpu;
  if (v == "gpu") return GemmVariant::Gpu;
  XK_CHECK(cpu_kernels_run_on(L), kOp, "GEMM variant 'cpu' (", kVariantEnv, ") needs sub-groups of ", cpu_lanes(L),
           " but device '", t.name, "' does not support them");
  return GemmVariant::Cpu;
}

// Calls f(bias_tag, relu_tag) with std::integral_constant<bool, ...> for the epilogue flags: the
// table's variants are (bias + ReLU), (ReLU) for the forward pass and (none) for the backward GEMMs.
template <typename F>
void with_epilogue(bool bias, bool relu, F&& f) {
  using T_ = std::true_type;
  using F_ = std::false_type;
  if (bias && relu) return f(T_{}, T_{});
  if (relu) return f(F_{}, T_{});
  TORCH_CHECK(!bias, "xkernels.fused_linear_relu: no GEMM variant with a bias but no ReLU");
  f(F_{}, F_{});
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
  const int64_t k_chunks = ceil_div(K, LinearConfig::kPackRowsPerGroup);
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
                      at::Tensor& partial) {
  using G = xk::PanelTile<T, S>;
  using acc = xk::acc_t<T>;
  const int64_t M = A.size(0), K = A.size(1);
  T* c_ptr = mptr<T>(C);
  // K blocks: partial sums live in C itself when T is the accumulation type.
  const int64_t k_block = A.stride(1) == 1 ? xk::kPanelKBlock : LinearConfig::kPanelKBlockStridedA;
  acc* partial_ptr = nullptr;
  if (K > k_block) {
    if constexpr (std::is_same_v<T, acc>) {
      partial_ptr = c_ptr;
    } else {
      partial = empty({M, N}, C.options().dtype(c10::CppTypeToScalarType<acc>::value));
      partial_ptr = partial.mutable_data_ptr<acc>();
    }
  }
  const int64_t row_groups = ceil_div(M, int64_t{G::kRows} * G::kRowTilesPerGroup);
  const int64_t groups = row_groups * ceil_div(N, int64_t{G::kCols});
  const sycl::nd_range<1> range(sycl::range<1>(groups * G::kSubGroup), sycl::range<1>(G::kSubGroup));
  with_epilogue(bias.defined(), relu, [&](auto BIAS, auto RELU) {
    L.launch<xk::linear_gemm_panel<BIAS, RELU, S>, T>(range, {.A = cptr<T>(A),
                                                              .a_rs = A.stride(0),
                                                              .a_ks = A.stride(1),
                                                              .B = b_ptr,
                                                              .ldb = ldb,
                                                              .b_panel_stride = panel_stride,
                                                              .bias = cptr_or_null<T>(bias),
                                                              .C = c_ptr,
                                                              .ldc = N,
                                                              .partial = partial_ptr,
                                                              .M = M,
                                                              .N = N,
                                                              .K = K,
                                                              .k_block = k_block,
                                                              .row_groups = row_groups,
                                                              .b_panel_cols = panel_cols});
  });
}

// The panel GEMM (linear_gemm_panel) on a B operand already in place or packed: C [M, N] =
// epilogue(A @ B [+ bias]), column n of B read at b_ptr + (n / panel_cols) * panel_stride + k * ldb +
// n % panel_cols (B in place: panel_cols = panel_stride). `partial` receives the acc-type K-block scratch when
// T is not the accumulation type (the caller keeps it alive until the kernel is done).
template <typename T>
void panel_gemm(Launcher& L, const at::Tensor& A, const T* b_ptr, int64_t ldb, int64_t panel_stride, int64_t panel_cols,
                int64_t N, const at::Tensor& bias, bool relu, at::Tensor& C, at::Tensor& partial) {
  with_cpu_lanes(L, [&](auto S_) {
    panel_gemm_lanes<T, decltype(S_)::value>(L, A, b_ptr, ldb, panel_stride, panel_cols, N, bias, relu, C, partial);
  });
}

// C = epilogue(A @ B [+ bias]) with C [M, N] contiguous; A [M, K] and B [K, N] are 2-D views
// with any strides. Returns once the kernel is done for CPU tensors (temporaries die here).
template <typename T>
void gemm(Launcher& L, GemmVariant variant, const at::Tensor& A, const at::Tensor& B, const at::Tensor& bias, bool relu,
          at::Tensor& C) {
  const int64_t M = A.size(0), K = A.size(1), N = B.size(1);
  at::Tensor packed, partial;  // temporaries: must outlive the kernel (see the wait at the end)
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
  } else if (relu && M <= LinearConfig::kDotMaxRows && A.stride(1) == 1 && B.stride(0) == 1) {
    // Both operands unit-stride along k (the forward pass as given): dot products, no packing.
    // (Instantiated for the forward epilogues only, hence `relu`.)
    with_cpu_lanes(L, [&](auto S_) {
      constexpr int S = decltype(S_)::value;
      using G = xk::DotTile<T, S>;
      const int64_t row_tiles = ceil_div(M, G::kRows);
      const int64_t groups = row_tiles * ceil_div(N, G::kCols);
      const sycl::nd_range<1> range(sycl::range<1>(groups * G::kSubGroup), sycl::range<1>(G::kSubGroup));
      if (bias.defined())
        L.launch<xk::linear_gemm_dot<true, true, S>, T>(range, {.A = cptr<T>(A),
                                                                .lda = A.stride(0),
                                                                .Bt = cptr<T>(B),
                                                                .ldb = B.stride(1),
                                                                .bias = cptr<T>(bias),
                                                                .C = mptr<T>(C),
                                                                .ldc = N,
                                                                .M = M,
                                                                .N = N,
                                                                .K = K,
                                                                .row_tiles = row_tiles});
      else
        L.launch<xk::linear_gemm_dot<false, true, S>, T>(range, {.A = cptr<T>(A),
                                                                 .lda = A.stride(0),
                                                                 .Bt = cptr<T>(B),
                                                                 .ldb = B.stride(1),
                                                                 .bias = nullptr,
                                                                 .C = mptr<T>(C),
                                                                 .ldc = N,
                                                                 .M = M,
                                                                 .N = N,
                                                                 .K = K,
                                                                 .row_tiles = row_tiles});
    });
  } else {
    const int64_t cols = xk::PanelTile<T>::kCols;
    const T* b_ptr;
    int64_t ldb, panel_stride;
    if (B.stride(1) == 1 && M < LinearConfig::kPackMinRows) {
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
                  C, partial);
  }
  L.finish(C);
}

// ---- bfloat16 on AMX (kernels/amx_gemm.hpp): out^T = W x X^T on the matrix unit, W as stored.
// Taken where the device can (DeviceTraits::amx_bf16) and the weight has no edge tiles (in_features % 32,
// out_features % 32); any number of rows (a 16-row tile computes 16 rows however few there are, and still beat the
// FMA kernels at M = 1 and 8). XKERNELS_SYCL_GEMM_VARIANT=amx insists (a clear error where it cannot run); cpu / gpu
// keep the FMA kernels.
bool amx_applies(const DeviceTraits& t, at::ScalarType dtype, int64_t out_features, int64_t in_features) {
  const std::string v = requested_variant();
  if (v == "cpu" || v == "gpu") return false;
  const bool fits = in_features % xk::AmxTile::kTileK == 0 && out_features % 32 == 0;
  const int64_t K = in_features, N = out_features;
  if (v == "amx") {
    XK_CHECK(t.amx_bf16, kOp, "GEMM variant 'amx' (", kVariantEnv, ") is not available on SYCL device '", t.name,
             "': ", amx_status().second);
    XK_CHECK_VALUE(dtype == at::kBFloat16, kOp, "GEMM variant 'amx' (", kVariantEnv,
                   ") computes bfloat16 only, got input dtype ", c10::toString(dtype));
    XK_CHECK_VALUE(fits, kOp, "GEMM variant 'amx' (", kVariantEnv,
                   ") needs in_features % 32 == 0 and out_features % 32 == 0, got in_features=", K,
                   ", out_features=", N);
    return true;
  }
  return dtype == at::kBFloat16 && t.amx_bf16 && fits;
}

void amx_forward(Launcher& L, const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias, at::Tensor& out) {
  const int64_t M = x.size(0), K = x.size(1), N = w.size(0);
  // X packed (amx_pack_rows), W read as stored: out^T = W x X^T (kernels/amx_gemm.hpp, TRANS_OUT).
  const at::Tensor xr = amx_packable_rows(x);
  const at::Tensor xp = amx_pack_rows(L, xr);
  auto run = [&](auto TM_) {
    constexpr int TM = decltype(TM_)::value;
    amx_gemm<true, 2, TM>(L, w, xp, M, bias, at::Tensor(), /*relu=*/true, out, N);
  };
  M > 16 ? run(std::integral_constant<int, 2>{}) : run(std::integral_constant<int, 1>{});
  L.finish(out);  // xr and xp die here
}

at::Tensor forward(Launcher L, const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias,
                   const LinearProblem& p) {
  const at::Tensor x = input.reshape({p.M, p.K}).contiguous();
  const at::Tensor w = weight.contiguous();
  const at::Tensor b = contiguous_if_defined(bias);
  at::Tensor out = empty({p.M, p.N}, x.options());
  if (amx_applies(L.traits(), x.scalar_type(), p.N, p.K)) {
    amx_forward(L, x, w, b, out);
    return out.view(p.out_sizes);
  }
  XK_DISPATCH_DEVICE_TYPES(x.scalar_type(), "fused_linear_relu",
                           [&] { gemm<T>(L, choose_variant(L), x, w.t(), b, /*relu=*/true, out); });
  return out.view(p.out_sizes);
}

// ---- pre-packed weights (pack_linear_weight / fused_linear_relu_packed): the panel GEMM's B
// operand W^T packed once by the caller instead of on every forward call.
static_assert(xk::PanelTile<float>::kCols == 64 && xk::PanelTile<double>::kCols == 32 &&
                  xk::PanelTile<xk::half>::kCols == 64 && xk::PanelTile<xk::bf16>::kCols == 64,
              "linear_pack_columns (shapes.h) must match the panel width of linear_gemm_panel");

void check_packed_device(const char* op, const Launcher& L) {
  XK_CHECK(cpu_kernels_run_on(L), op,
           "the packed weight layout is that of the panel GEMM, which needs sub-groups of 16, "
           "but SYCL device '",
           L.traits().name, "' does not support them; use fused_linear_relu");
}

at::Tensor pack_weight(Launcher L, const at::Tensor& weight) {
  check_packed_device("pack_linear_weight", L);
  at::Tensor packed;
  XK_DISPATCH_DEVICE_TYPES(weight.scalar_type(), "pack_linear_weight",
                           [&] { packed = pack_panels<T>(L, weight.t()); });  // B = W^T [K, N], any strides
  L.finish(weight);
  return packed;
}

at::Tensor forward_packed(Launcher L, const at::Tensor& input, const at::Tensor& packed_weight, const at::Tensor& bias,
                          const LinearProblem& p) {
  const at::Tensor x = input.reshape({p.M, p.K}).contiguous();
  const at::Tensor b = contiguous_if_defined(bias);
  at::Tensor out = empty({p.M, p.N}, x.options());
  check_packed_device("fused_linear_relu_packed", L);
  XK_DISPATCH_DEVICE_TYPES(x.scalar_type(), "fused_linear_relu_packed", [&] {
    const int64_t cols = xk::PanelTile<T>::kCols;
    at::Tensor partial;  // K-block scratch for half types; alive until the wait below
    panel_gemm<T>(L, x, cptr<T>(packed_weight), cols, p.K * cols, cols, p.N, b, /*relu=*/true, out, partial);
    L.finish(x);
  });
  return out.view(p.out_sizes);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> backward(Launcher L, const at::Tensor& grad_output,
                                                        const at::Tensor& input, const at::Tensor& weight,
                                                        const at::Tensor& output, const LinearProblem& p,
                                                        std::array<bool, 3> mask) {
  const int64_t M = p.M, N = p.N, K = p.K;
  const bool want_x = mask[0], want_w = mask[1], want_b = mask[2];
  at::Tensor gi = empty_grad_like(input), gw = empty_grad_like(weight), gb = empty_grad_like(weight);
  if (!want_x && !want_w && !want_b) return {gi, gw, gb};
  const at::Tensor dy = grad_output.reshape({M, N}).contiguous();
  const at::Tensor y = output.reshape({M, N}).contiguous();
  const GemmVariant variant = choose_variant(L);
  XK_DISPATCH_DEVICE_TYPES(dy.scalar_type(), "fused_linear_relu_backward", [&] {
    using acc = xk::acc_t<T>;
    using C = LinearConfig;
    // grad_pre = grad_output where output > 0, and (for grad_bias) its column sums per row chunk.
    at::Tensor grad_pre = empty({M, N}, dy.options());
    const int64_t chunks0 = std::min(ceil_div(M, C::kRowsPerChunk), C::kMaxChunks);
    const int64_t rows_per_chunk = ceil_div(M, chunks0);
    const int64_t chunks = ceil_div(M, rows_per_chunk);
    at::Tensor partial =
        want_b ? empty({chunks, N}, dy.options().dtype(c10::CppTypeToScalarType<acc>::value)) : at::Tensor();
    const int64_t cols = ceil_div(N, C::kColumnLocal) * C::kColumnLocal;
    const sycl::nd_range<2> mask_range({static_cast<size_t>(chunks), static_cast<size_t>(cols)},
                                       {size_t{1}, static_cast<size_t>(C::kColumnLocal)});
    auto mask_params = [&](auto kernel) {
      using K = decltype(kernel);
      return typename K::template params<T>{.grad_output = cptr<T>(dy),
                                            .output = cptr<T>(y),
                                            .grad_pre = mptr<T>(grad_pre),
                                            .partial = want_b ? partial.mutable_data_ptr<acc>() : nullptr,
                                            .M = M,
                                            .N = N,
                                            .rows_per_chunk = rows_per_chunk};
    };
    if (want_b) {
      L.launch<xk::linear_relu_grad<true>, T>(mask_range, mask_params(xk::linear_relu_grad<true>{}));
      gb = empty({N}, dy.options());
      L.launch<xk::linear_column_sum, T>(
          sycl::nd_range<1>(sycl::range<1>(cols), sycl::range<1>(C::kColumnLocal)),
          {.partial = partial.const_data_ptr<acc>(), .out = mptr<T>(gb), .R = chunks, .N = N});
    } else {
      L.launch<xk::linear_relu_grad<false>, T>(mask_range, mask_params(xk::linear_relu_grad<false>{}));
    }
    L.finish(dy);
    if (want_x) {  // dX [M, K] = G [M, N] @ W [N, K]
      gi = empty({M, K}, dy.options());
      gemm<T>(L, variant, grad_pre, weight.contiguous(), at::Tensor(), /*relu=*/false, gi);
      gi = gi.view(input.sizes());
    }
    if (want_w) {  // dW [N, K] = G^T [N, M] @ X [M, K]
      gw = empty({N, K}, dy.options());
      gemm<T>(L, variant, grad_pre.t(), input.reshape({M, K}).contiguous(), at::Tensor(), /*relu=*/false, gw);
    }
  });
  return {gi, gw, gb};
}

}  // namespace

int64_t linear_dot_max_rows() { return LinearConfig::kDotMaxRows; }

bool linear_amx_for_cpu_tensors(int64_t out_features, int64_t in_features) {
  return amx_applies(traits_of(cpu_queue()), at::kBFloat16, out_features, in_features);
}

at::Tensor fused_linear_relu(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias,
                             const LinearProblem& p) {
  return forward(Launcher::for_tensor(input), input, weight, bias, p);
}
std::tuple<at::Tensor, at::Tensor, at::Tensor> fused_linear_relu_backward(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, const at::Tensor& output,
    const LinearProblem& p, std::array<bool, 3> mask) {
  return backward(Launcher::for_tensor(grad_output), grad_output, input, weight, output, p, mask);
}
at::Tensor pack_linear_weight(const at::Tensor& weight) { return pack_weight(Launcher::for_tensor(weight), weight); }
at::Tensor fused_linear_relu_packed(const at::Tensor& input, const at::Tensor& packed_weight, const at::Tensor& bias,
                                    const LinearProblem& p) {
  return forward_packed(Launcher::for_tensor(input), input, packed_weight, bias, p);
}

}  // namespace xkernels::sycl_backend

#ifdef XKERNELS_WITH_ACPP
namespace xkernels::acpp_backend {
using sycl_backend::Launcher;

at::Tensor fused_linear_relu(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias,
                             const LinearProblem& p) {
  return sycl_backend::forward(Launcher::acpp(), input, weight, bias, p);
}
std::tuple<at::Tensor, at::Tensor, at::Tensor> fused_linear_relu_backward(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, const at::Tensor& output,
    const LinearProblem& p, std::array<bool, 3> mask) {
  return sycl_backend::backward(Launcher::acpp(), grad_output, input, weight, output, p, mask);
}
at::Tensor pack_linear_weight(const at::Tensor& weight) { return sycl_backend::pack_weight(Launcher::acpp(), weight); }
at::Tensor fused_linear_relu_packed(const at::Tensor& input, const at::Tensor& packed_weight, const at::Tensor& bias,
                                    const LinearProblem& p) {
  return sycl_backend::forward_packed(Launcher::acpp(), input, packed_weight, bias, p);
}

}  // namespace xkernels::acpp_backend
#endif
