// fused_linear_relu on the SYCL backend: host wrapper. The entry (xkernels/entry.h) has
// validated the arguments and handled empty sizes; this makes inputs contiguous, allocates
// outputs, picks the GEMM variant and launch geometry, and launches kernels/fused_linear_relu.hpp.
//
//   forward:   out = relu(X @ W^T + b)              one GEMM, bias + ReLU in its epilogue
//   backward:  G  = grad_out * (out > 0)            linear_relu_grad (+ column partial sums)
//              db = sum_rows(G)                     linear_column_sum
//              dX = G @ W,  dW = G^T @ X            the same GEMM kernels, other strides
//
// The GEMMs run through gemm.h (variant choice, XKERNELS_SYCL_GEMM_VARIANT); the bf16 forward on the CPU's
// matrix unit (kernels/amx_gemm.hpp) is chosen here, for bf16 forward passes where the device has it and the
// shape fits (amx_applies).
#include <ATen/ATen.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <string>

#include "sycl/amx_gemm.h"
#include "sycl/gemm.h"
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

struct LinearConfig {
  // ReLU-mask / column-sum kernel: rows per partial sum, and a cap on the number of partials.
  static constexpr int64_t kRowsPerChunk = 32;
  static constexpr int64_t kMaxChunks = 256;
  static constexpr int64_t kColumnLocal = 16;  // work-items per work-group of the column kernels
};

// ---- bfloat16 on AMX (kernels/amx_gemm.hpp): the GEMM on the matrix unit, with either operand as its A
// (amx_linear_rows_role below).
// Taken where the device can (DeviceTraits::amx_bf16) and the weight has no edge tiles (in_features % 32,
// out_features % 32); any number of rows (a 16-row tile computes 16 rows however few there are, and still beat the
// FMA kernels at M = 1 and 8). XKERNELS_SYCL_GEMM_VARIANT=amx insists (a clear error where it cannot run); cpu / gpu
// keep the FMA kernels.
bool amx_applies(const DeviceTraits& t, at::ScalarType dtype, int64_t out_features, int64_t in_features) {
  const std::string v = requested_gemm_variant(kOp);
  if (v == "cpu" || v == "gpu") return false;
  const bool fits = in_features % xk::AmxTile::kTileK == 0 && out_features % 32 == 0;
  const int64_t K = in_features, N = out_features;
  if (v == "amx") {
    XK_CHECK(t.amx_bf16, kOp, "GEMM variant 'amx' (", kGemmVariantEnv, ") is not available on SYCL device '", t.name,
             "': ", amx_status().second);
    XK_CHECK_VALUE(dtype == at::kBFloat16, kOp, "GEMM variant 'amx' (", kGemmVariantEnv,
                   ") computes bfloat16 only, got input dtype ", c10::toString(dtype));
    XK_CHECK_VALUE(fits, kOp, "GEMM variant 'amx' (", kGemmVariantEnv,
                   ") needs in_features % 32 == 0 and out_features % 32 == 0, got in_features=", K,
                   ", out_features=", N);
    return true;
  }
  return dtype == at::kBFloat16 && t.amx_bf16 && fits;
}

// amx_linear_rows_role: the activations' rows are the GEMM's A operand from this many rows on and where they are at
// least a third of the output features (the weight's per-call packing, N x K, is then amortised). Measured on the
// 2-core Intel Xeon (AVX-512 + AMX; docs/performance.md, "fused_linear_relu's operand roles on AMX"), 20 shapes, M =
// 256-4096, N x K = 3072 x 768, 768 x 3072, 1024 x 1024, 4096 x 4096: where the rule takes the rows role, 1.04-1.37x
// faster from 2048 rows and 0.96-1.10x at 1024; below 1024 rows and at 1024 x 4096 -> 4096 it lost (0.61-0.94x).
constexpr int64_t kAmxLinearRowsMinM = 1024;

// The operand roles: with few rows, W's rows are A (read as stored) and X is packed, out^T = W x X^T (TRANS_OUT: the
// epilogue reads the accumulators' columns, a gather per output row); with many rows, X's rows are A (read in
// place) and W is packed per call, out = X x W^T (the 1x1 convolution's route: rows written whole), the packing
// amortised over the rows. Both sum the same products in the same order (bit-identical, tested).
bool amx_linear_rows_role(int64_t M, int64_t N, const AmxBlocksSetting& setting) {
  if (setting.linear_rows >= 0) return setting.linear_rows == 1;
  return M >= kAmxLinearRowsMinM && 3 * M >= N;
}

void amx_forward(Launcher& L, const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias, at::Tensor& out) {
  const int64_t M = x.size(0), N = w.size(0);
  const AmxBlocksSetting setting = AmxBlocksSetting::from_env();  // before any kernel is queued
  if (amx_linear_rows_role(M, N, setting)) {
    AmxRowsTemps temps;  // declared outside the launch: they outlive the kernels, also when a launch throws
    L.launch_then_finish(out,
                         [&] { amx_rows_gemm(L, setting, x, w, bias, at::Tensor(), /*relu=*/true, out, N, temps); });
    return;
  }
  // X packed (amx_pack_rows), W read as stored: out^T = W x X^T (kernels/amx_gemm.hpp, TRANS_OUT).
  at::Tensor xr, xp;  // declared outside the launch: they outlive the kernels, also when a launch throws
  auto run = [&](auto TM_) {
    constexpr int TM = decltype(TM_)::value;
    amx_gemm<true, 2, TM>(L, setting, w, xp, M, bias, at::Tensor(), /*relu=*/true, out, N);
  };
  L.launch_then_finish(out, [&] {
    xr = amx_packable_rows(x);
    xp = amx_pack_rows(L, xr);
    M > 16 ? run(std::integral_constant<int, 2>{}) : run(std::integral_constant<int, 1>{});
  });
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
                           [&] { gemm<T>(L, choose_gemm_variant(L, kOp), x, w.t(), b, /*relu=*/true, out); });
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
  const GemmVariant variant = choose_gemm_variant(L, kOp);
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
          {.partial = partial.const_data_ptr<acc>(), .out = mptr<T>(gb), .R = chunks, .N = N, .accumulate = 0});
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

int64_t linear_dot_max_rows() { return GemmConfig::kDotMaxRows; }

// FusedLinearReLU(pack_weight=True) calls with at most this many rows run fused_linear_relu (the dot kernel reads
// W as stored) instead of fused_linear_relu_packed. On CPUs with 16 vector registers (AVX2) the packed panel kernel
// runs 16-column tiles, each work-group reading 64 of every 256 bytes of a packed row, and 6-row tiles (a single-row
// tile where one row is left): at N = K = 4096 the dot kernel took 0.27x (M = 1, before the single-row tile; 0.40-0.55x
// with it), 0.59x (M = 8) and 0.79x (M = 16) of its time in float32 (bfloat16 0.17x, then 0.28-0.37x / 0.65x / 0.81x,
// float64 0.34x-1.00x), and 1.04x (bfloat16 0.98x) at M = 32 (2-vCPU AMD EPYC, AVX2; docs/performance.md "Small M with
// packed weights on AVX2" and "The packed panel GEMM's single-row tile"). AVX-512 CPUs read whole
// 64-column panel rows; the packed path measured 1.02-1.06x the dot kernel's speed at M = 1-8 there (Intel Xeon,
// N = K = 1024, an older dot kernel), so they keep it. Since the packed path runs linear_gemm_row for few rows on AVX2
// (gemm.h, GemmConfig::kWideMaxRows), the dot kernel took 0.79-0.90x of its time at M = 1, 0.83-0.84x at M = 8 and
// 0.82-0.86x at M = 16 (float32, bfloat16; same CPU, docs/performance.md "Whole-row tiles for few rows on AVX2"):
// still the faster of the two there.
int64_t linear_unpacked_max_rows() {
  const DeviceTraits& t = traits_of(cpu_queue());
  return t.is_cpu && t.vector_registers() == 16 ? 16 : 0;
}

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
