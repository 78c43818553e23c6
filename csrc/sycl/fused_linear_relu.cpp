// fused_linear_relu on the SYCL backend: host wrapper. The entry (xkernels/entry.h) has
// validated the arguments and handled empty sizes; this makes inputs contiguous, allocates
// outputs, picks the GEMM variant and launch geometry, and launches kernels/fused_linear_relu.hpp.
//
//   forward:   out = relu(X @ W^T + b)              one GEMM, bias + ReLU in its epilogue
//   backward:  G  = grad_out * (out > 0)            linear_relu_grad (+ column partial sums)
//              db = sum_rows(G)                     linear_column_sum
//              dX = G @ W,  dW = G^T @ X            the same GEMM kernels, other strides
//
// GEMM variant, per device (XKERNELS_SYCL_GEMM_VARIANT=auto|cpu|gpu, read at every call;
// default auto): "cpu" = the register-blocked sub-group kernels (linear_gemm_panel, and
// linear_gemm_dot for the forward pass with few rows), chosen automatically for CPU devices;
// "gpu" = the local-memory tiled kernel (linear_gemm_tiled), chosen for every other device.
// Forcing a variant lets both be tested on any device; "cpu" needs sub-groups of 16.
#include <ATen/ATen.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <string>

#include "sycl/kernels/fused_linear_relu.hpp"  // tile geometry shared with the kernels (constants only)
#include "sycl/kernel_memo.h"
#include "sycl/host_alloc.h"
#include "sycl/runtime.h"
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

bool has_sub_group_16(const DeviceTraits& t) {
  return std::find(t.sub_group_sizes.begin(), t.sub_group_sizes.end(), size_t{16}) != t.sub_group_sizes.end();
}

GemmVariant choose_variant(const DeviceTraits& t) {
  const char* env = std::getenv(kVariantEnv);
  std::string v = env ? env : "";
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return std::tolower(c); });
  if (v.empty() || v == "auto") return t.is_cpu && has_sub_group_16(t) ? GemmVariant::Cpu : GemmVariant::Gpu;
  if (v == "gpu") return GemmVariant::Gpu;
  XK_CHECK_VALUE(v == "cpu", kOp, "environment variable ", kVariantEnv, " must be 'auto', 'cpu' or 'gpu', got '",
                 env, "'");
  XK_CHECK(has_sub_group_16(t), kOp, "GEMM variant 'cpu' (", kVariantEnv, ") needs sub-groups of 16 but device '",
           t.name, "' does not support them");
  return GemmVariant::Cpu;
}

const char* bool_name(bool b) { return b ? "true" : "false"; }

std::string gemm_name(const char* kernel, const char* type, bool bias, bool relu) {
  return std::string(kernel) + "<" + type + ", " + bool_name(bias) + ", " + bool_name(relu) + ">";
}

// Instantiations: forward GEMMs with bias+ReLU or ReLU only, backward GEMMs plain.
std::vector<std::string> linear_kernel_names(const DeviceTraits& t) {
  std::vector<std::string> out;
  const bool sg16 = has_sub_group_16(t);
  auto add = [&](const char* type) {
    for (auto [bias, relu] : {std::pair{true, true}, std::pair{false, true}, std::pair{false, false}}) {
      out.push_back(gemm_name("xk::linear_gemm_tiled", type, bias, relu));
      if (sg16) out.push_back(gemm_name("xk::linear_gemm_panel", type, bias, relu));
      if (sg16 && relu) out.push_back(gemm_name("xk::linear_gemm_dot", type, bias, relu));
    }
    out.push_back(std::string("xk::linear_relu_grad<") + type + ", true>");
    out.push_back(std::string("xk::linear_relu_grad<") + type + ", false>");
    out.push_back(std::string("xk::linear_column_sum<") + type + ">");
    if (sg16) out.push_back(std::string("xk::linear_pack_panels<") + type + ">");
  };
  add(kernel_type_name<float>());
  add(kernel_type_name<sycl::ext::oneapi::bfloat16>());
  if (t.fp16) add(kernel_type_name<sycl::half>());
  if (t.fp64) add(kernel_type_name<double>());
  return out;
}

const KernelGroup& kLinearGroup = register_kernel_group({"fused_linear_relu.hpp", linear_kernel_names});

// B [K, N] (any strides) -> [ceil(N / kCols), K, kCols] contiguous, the panel-major layout of
// linear_gemm_panel's B operand (columns past N zero). Queued before the GEMM that reads it
// (in-order queue); the caller keeps the result alive until that GEMM is done.
template <typename T>
at::Tensor pack_panels(sycl::queue& q, const at::Tensor& B, sycl::event* done = nullptr) {
  using G = xk::PanelTile<T>;
  const int64_t K = B.size(0), N = B.size(1);
  const int64_t panels = ceil_div(N, G::kCols);
  at::Tensor packed = empty({panels, K, int64_t{G::kCols}}, B.options());
  const int64_t k_chunks = ceil_div(K, LinearConfig::kPackRowsPerGroup);
  const int64_t k_chunk = ceil_div(K, k_chunks);
  static KernelMemo memo;
  const sycl::kernel k = memo.get(q, kLinearGroup, 0, [] { return kernel_name<T>("xk::linear_pack_panels"); });
  const sycl::event e =
      launch(q, k, sycl::nd_range<1>(sycl::range<1>(panels * k_chunks * G::kSubGroup), sycl::range<1>(G::kSubGroup)),
             B.const_data_ptr<T>(), B.stride(0), B.stride(1), packed.mutable_data_ptr<T>(), K, N, k_chunk, k_chunks);
  if (done) *done = e;
  return packed;
}

// The panel GEMM (linear_gemm_panel) on a B operand already in place or packed: C [M, N] =
// epilogue(A @ B [+ bias]), B read at b_ptr + panel * panel_stride + k * ldb + c. `partial` receives
// the acc-type K-block scratch when T is not the accumulation type (the caller keeps it alive until
// the returned event is done).
template <typename T>
sycl::event panel_gemm(sycl::queue& q, const at::Tensor& A, const T* b_ptr, int64_t ldb, int64_t panel_stride,
                       int64_t N, const at::Tensor& bias, bool relu, at::Tensor& C, at::Tensor& partial) {
  using G = xk::PanelTile<T>;
  const int64_t M = A.size(0), K = A.size(1);
  const bool has_bias = bias.defined();
  T* c_ptr = C.mutable_data_ptr<T>();
  // K blocks: partial sums live in C itself when T is the accumulation type.
  const int64_t k_block = A.stride(1) == 1 ? xk::kPanelKBlock : LinearConfig::kPanelKBlockStridedA;
  acc_t<T>* partial_ptr = nullptr;
  if (K > k_block) {
    if constexpr (std::is_same_v<T, acc_t<T>>) {
      partial_ptr = c_ptr;
    } else {
      partial = empty({M, N}, C.options().dtype(c10::CppTypeToScalarType<acc_t<T>>::value));
      partial_ptr = partial.mutable_data_ptr<acc_t<T>>();
    }
  }
  const int64_t row_groups = ceil_div(M, int64_t{G::kRows} * G::kRowTilesPerGroup);
  const int64_t groups = row_groups * ceil_div(N, int64_t{G::kCols});
  static KernelMemo memo;
  const int flags = (has_bias ? 2 : 0) | (relu ? 1 : 0);  // the KernelMemo key
  const sycl::kernel k = memo.get(q, kLinearGroup, flags, [&] {
    return gemm_name("xk::linear_gemm_panel", kernel_type_name<T>(), has_bias, relu);
  });
  const sycl::nd_range<1> range(sycl::range<1>(groups * G::kSubGroup), sycl::range<1>(G::kSubGroup));
  return launch(q, k, range, A.const_data_ptr<T>(), A.stride(0), A.stride(1), b_ptr, ldb, panel_stride,
                has_bias ? bias.const_data_ptr<T>() : nullptr, c_ptr, N, partial_ptr, M, N, K, k_block, row_groups);
}

// C = epilogue(A @ B [+ bias]) with C [M, N] contiguous; A [M, K] and B [K, N] are 2-D views
// with any strides. Returns once the kernel is done for CPU tensors (temporaries die here).
template <typename T>
void gemm(sycl::queue& q, GemmVariant variant, const at::Tensor& A, const at::Tensor& B, const at::Tensor& bias,
          bool relu, at::Tensor& C) {
  const int64_t M = A.size(0), K = A.size(1), N = B.size(1);
  const bool has_bias = bias.defined();
  const T* bias_ptr = has_bias ? bias.const_data_ptr<T>() : nullptr;
  const char* type = kernel_type_name<T>();
  T* c_ptr = C.mutable_data_ptr<T>();
  const int flags = (has_bias ? 2 : 0) | (relu ? 1 : 0);  // the KernelMemo key
  at::Tensor packed, partial;  // temporaries: must outlive the kernel (see the wait at the end)
  sycl::event done;
  if (variant == GemmVariant::Gpu) {
    using G = xk::TiledTile;
    static KernelMemo memo;
    const sycl::kernel k = memo.get(q, kLinearGroup, flags, [&] { return gemm_name("xk::linear_gemm_tiled", type, has_bias, relu); });
    const sycl::nd_range<2> range({static_cast<size_t>(ceil_div(M, G::kTile) * G::kLocal),
                                   static_cast<size_t>(ceil_div(N, G::kTile) * G::kLocal)},
                                  {size_t{G::kLocal}, size_t{G::kLocal}});
    done = launch(q, k, range, A.const_data_ptr<T>(), A.stride(0), A.stride(1), B.const_data_ptr<T>(), B.stride(0),
                  B.stride(1), bias_ptr, c_ptr, N, M, N, K);
  } else if (relu && M <= LinearConfig::kDotMaxRows && A.stride(1) == 1 && B.stride(0) == 1) {
    // Both operands unit-stride along k (the forward pass as given): dot products, no packing.
    // (Instantiated for the forward epilogues only, hence `relu`.)
    using G = xk::DotTile<T>;
    static KernelMemo memo;
    const sycl::kernel k = memo.get(q, kLinearGroup, flags, [&] { return gemm_name("xk::linear_gemm_dot", type, has_bias, relu); });
    const int64_t row_tiles = ceil_div(M, G::kRows);
    const int64_t groups = row_tiles * ceil_div(N, G::kCols);
    const sycl::nd_range<1> range(sycl::range<1>(groups * G::kSubGroup), sycl::range<1>(G::kSubGroup));
    done = launch(q, k, range, A.const_data_ptr<T>(), A.stride(0), B.const_data_ptr<T>(), B.stride(1), bias_ptr, c_ptr,
                  N, M, N, K, row_tiles);
  } else {
    const int64_t cols = xk::PanelTile<T>::kCols;
    const T* b_ptr;
    int64_t ldb, panel_stride;
    if (B.stride(1) == 1 && M < LinearConfig::kPackMinRows) {
      b_ptr = B.const_data_ptr<T>();
      ldb = B.stride(0);
      panel_stride = cols;
    } else {
      packed = pack_panels<T>(q, B);
      b_ptr = packed.const_data_ptr<T>();
      ldb = cols;
      panel_stride = K * cols;
    }
    done = panel_gemm<T>(q, A, b_ptr, ldb, panel_stride, N, bias, relu, C, partial);
  }
  wait_if_host(C, done);
}

}  // namespace

at::Tensor fused_linear_relu(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias,
                             const LinearProblem& p) {
  const at::Tensor x = input.reshape({p.M, p.K}).contiguous();
  const at::Tensor w = weight.contiguous();
  const at::Tensor b = contiguous_if_defined(bias);
  at::Tensor out = empty({p.M, p.N}, x.options());
  sycl::queue& q = queue_for(x);
  const GemmVariant variant = choose_variant(traits_of(q));
  XK_DISPATCH_FLOATING_TYPES(x.scalar_type(), "fused_linear_relu", [&] {
    gemm<scalar_t>(q, variant, x, w.t(), b, /*relu=*/true, out);
  });
  return out.view(p.out_sizes);
}

// ---- pre-packed weights (pack_linear_weight / fused_linear_relu_packed): the panel GEMM's B
// operand W^T packed once by the caller instead of on every forward call.
static_assert(xk::PanelTile<float>::kCols == 64 && xk::PanelTile<double>::kCols == 32 &&
                  xk::PanelTile<sycl::half>::kCols == 64 && xk::PanelTile<sycl::ext::oneapi::bfloat16>::kCols == 64,
              "linear_pack_columns (shapes.h) must match the panel width of linear_gemm_panel");

namespace {
void check_packed_device(const char* op, sycl::queue& q) {
  const DeviceTraits& t = traits_of(q);
  XK_CHECK(has_sub_group_16(t), op, "the packed weight layout is that of the panel GEMM, which needs sub-groups of 16, "
           "but SYCL device '", t.name, "' does not support them; use fused_linear_relu");
}
}  // namespace

at::Tensor pack_linear_weight(const at::Tensor& weight) {
  sycl::queue& q = queue_for(weight);
  check_packed_device("pack_linear_weight", q);
  at::Tensor packed;
  sycl::event done;
  XK_DISPATCH_FLOATING_TYPES(weight.scalar_type(), "pack_linear_weight", [&] {
    packed = pack_panels<scalar_t>(q, weight.t(), &done);  // B = W^T [K, N], any strides
  });
  wait_if_host(weight, done);
  return packed;
}

at::Tensor fused_linear_relu_packed(const at::Tensor& input, const at::Tensor& packed_weight, const at::Tensor& bias,
                                    const LinearProblem& p) {
  const at::Tensor x = input.reshape({p.M, p.K}).contiguous();
  const at::Tensor b = contiguous_if_defined(bias);
  at::Tensor out = empty({p.M, p.N}, x.options());
  sycl::queue& q = queue_for(x);
  check_packed_device("fused_linear_relu_packed", q);
  XK_DISPATCH_FLOATING_TYPES(x.scalar_type(), "fused_linear_relu_packed", [&] {
    const int64_t cols = xk::PanelTile<scalar_t>::kCols;
    at::Tensor partial;  // K-block scratch for half types; alive until the wait below
    sycl::event done = panel_gemm<scalar_t>(q, x, packed_weight.const_data_ptr<scalar_t>(), cols, p.K * cols, p.N, b,
                                            /*relu=*/true, out, partial);
    wait_if_host(x, done);
  });
  return out.view(p.out_sizes);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> fused_linear_relu_backward(const at::Tensor& grad_output,
                                                                          const at::Tensor& input,
                                                                          const at::Tensor& weight,
                                                                          const at::Tensor& output,
                                                                          const LinearProblem& p,
                                                                          std::array<bool, 3> mask) {
  const int64_t M = p.M, N = p.N, K = p.K;
  const bool want_x = mask[0], want_w = mask[1], want_b = mask[2];
  at::Tensor gi = empty_grad_like(input), gw = empty_grad_like(weight), gb = empty_grad_like(weight);
  if (!want_x && !want_w && !want_b) return {gi, gw, gb};
  const at::Tensor dy = grad_output.reshape({M, N}).contiguous();
  const at::Tensor y = output.reshape({M, N}).contiguous();
  sycl::queue& q = queue_for(dy);
  const GemmVariant variant = choose_variant(traits_of(q));
  XK_DISPATCH_FLOATING_TYPES(dy.scalar_type(), "fused_linear_relu_backward", [&] {
    using acc = acc_t<scalar_t>;
    using C = LinearConfig;
    const char* type = kernel_type_name<scalar_t>();
    // grad_pre = grad_output where output > 0, and (for grad_bias) its column sums per row chunk.
    at::Tensor grad_pre = empty({M, N}, dy.options());
    const int64_t chunks0 = std::min(ceil_div(M, C::kRowsPerChunk), C::kMaxChunks);
    const int64_t rows_per_chunk = ceil_div(M, chunks0);
    const int64_t chunks = ceil_div(M, rows_per_chunk);
    at::Tensor partial = want_b ? empty({chunks, N}, dy.options().dtype(c10::CppTypeToScalarType<acc>::value))
                                : at::Tensor();
    const int64_t cols = ceil_div(N, C::kColumnLocal) * C::kColumnLocal;
    const sycl::kernel k_mask =
        get_kernel(q, kLinearGroup, std::string("xk::linear_relu_grad<") + type + (want_b ? ", true>" : ", false>"));
    sycl::event done = launch(q, k_mask,
                              sycl::nd_range<2>({static_cast<size_t>(chunks), static_cast<size_t>(cols)},
                                                {size_t{1}, static_cast<size_t>(C::kColumnLocal)}),
                              dy.const_data_ptr<scalar_t>(), y.const_data_ptr<scalar_t>(),
                              grad_pre.mutable_data_ptr<scalar_t>(), want_b ? partial.mutable_data_ptr<acc>() : nullptr,
                              M, N, rows_per_chunk);
    if (want_b) {
      gb = empty({N}, dy.options());
      const sycl::kernel k_sum = get_kernel(q, kLinearGroup, kernel_name<scalar_t>("xk::linear_column_sum"));
      done = launch(q, k_sum, sycl::nd_range<1>(sycl::range<1>(cols), sycl::range<1>(C::kColumnLocal)),
                    partial.const_data_ptr<acc>(), gb.mutable_data_ptr<scalar_t>(), chunks, N);
    }
    wait_if_host(dy, done);
    if (want_x) {  // dX [M, K] = G [M, N] @ W [N, K]
      gi = empty({M, K}, dy.options());
      gemm<scalar_t>(q, variant, grad_pre, weight.contiguous(), at::Tensor(), /*relu=*/false, gi);
      gi = gi.view(input.sizes());
    }
    if (want_w) {  // dW [N, K] = G^T [N, M] @ X [M, K]
      gw = empty({N, K}, dy.options());
      gemm<scalar_t>(q, variant, grad_pre.t(), input.reshape({M, K}).contiguous(), at::Tensor(), /*relu=*/false, gw);
    }
  });
  return {gi, gw, gb};
}

}  // namespace xkernels::sycl_backend
