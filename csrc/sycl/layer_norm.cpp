// layer_norm on the SYCL backend: host wrapper (checks are done by the entry; this makes
// inputs contiguous, allocates outputs, picks the launch geometry and launches the kernels
// of kernels/layer_norm.hpp).
#include <ATen/ATen.h>

#include <algorithm>

#include "sycl/host_alloc.h"
#include "sycl/launch.h"
#include "xkernels/dispatch.h"
#include "xkernels/entry.h"

namespace xkernels::sycl_backend {

namespace {

// Launch geometry. On the CPU device a work-group runs on one thread and a sub-group is
// one SIMD vector (16 lanes with AVX-512), so a few rows per work-group keep tasks large
// enough to amortise scheduling; on GPUs more sub-groups per work-group fill an EU/SM.
struct LayerNormConfig {
  static constexpr int64_t kCpuRowsPerGroup = 4;   // sub-groups (rows in flight) per work-group, CPU
  static constexpr int64_t kGpuRowsPerGroup = 8;   // same, GPUs
  static constexpr int64_t kAssumedSubGroup = 16;  // lanes per sub-group the local size is sized for
  static constexpr int64_t kMaxGroups = 1 << 16;   // rows are grid-strided beyond this
  static constexpr int64_t kColumnTile = 64;       // work-items per work-group, dw/db stage 2
  static constexpr int64_t kRowsPerBlock = 32;     // rows summed per stage-1 partial (dw/db)
  static constexpr int64_t kMaxBlocks = 256;       // at most this many partials per column
  // Row blocks (backward) per work-group on the CPU: one, so that the few blocks of a small M still spread
  // over every core (a block is already >= kRowsPerBlock rows of work).
  static constexpr int64_t kCpuBlocksPerGroup = 1;
};

// One sub-group per row: the nd_range for M rows.
sycl::nd_range<1> row_range(const DeviceTraits& t, int64_t M) {
  const int64_t rows = t.is_cpu ? LayerNormConfig::kCpuRowsPerGroup : LayerNormConfig::kGpuRowsPerGroup;
  const int64_t local = std::min<int64_t>(rows * LayerNormConfig::kAssumedSubGroup, t.max_work_group_size);
  const int64_t groups = std::min(ceil_div(M, rows), LayerNormConfig::kMaxGroups);
  return sycl::nd_range<1>(sycl::range<1>(groups * local), sycl::range<1>(local));
}

// One sub-group per block of rows (backward with dw / db partials): the nd_range for `blocks` blocks.
sycl::nd_range<1> block_range(const DeviceTraits& t, int64_t blocks) {
  if (!t.is_cpu) return row_range(t, blocks);
  const int64_t per = LayerNormConfig::kCpuBlocksPerGroup;
  const int64_t local = std::min<int64_t>(per * LayerNormConfig::kAssumedSubGroup, t.max_work_group_size);
  const int64_t groups = std::min(ceil_div(blocks, per), LayerNormConfig::kMaxGroups);
  return sycl::nd_range<1>(sycl::range<1>(groups * local), sycl::range<1>(local));
}

void forward_out(Launcher L, const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias, double eps,
                 const LayerNormProblem& p, const at::Tensor& out, const at::Tensor& mean, const at::Tensor& rstd) {
  const at::Tensor x = input.contiguous();
  const at::Tensor w = contiguous_if_defined(weight);
  const at::Tensor b = contiguous_if_defined(bias);
  XK_DISPATCH_DEVICE_TYPES(x.scalar_type(), "layer_norm_forward", [&] {
    using acc = xk::acc_t<T>;
    L.launch<xk::layer_norm_fwd, T>(row_range(L.traits(), p.M),
                                    {.x = cptr<T>(x),
                                     .w = cptr_or_null<T>(w),
                                     .b = cptr_or_null<T>(b),
                                     .y = mptr<T>(out),
                                     .mean = mean.defined() ? mean.mutable_data_ptr<acc>() : nullptr,  // not saved
                                     .rstd = rstd.defined() ? rstd.mutable_data_ptr<acc>() : nullptr,
                                     .M = p.M,
                                     .N = p.N,
                                     .eps = static_cast<acc>(eps)});
  });
  L.finish(x);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> backward(Launcher L, const at::Tensor& grad_output,
                                                        const at::Tensor& input, const at::Tensor& mean,
                                                        const at::Tensor& rstd, const at::Tensor& weight,
                                                        const LayerNormProblem& p, std::array<bool, 3> mask) {
  const at::Tensor x = input.contiguous(), dy = grad_output.contiguous();
  const at::Tensor w = contiguous_if_defined(weight);
  const auto stat_dtype = layer_norm_stat_dtype(x.scalar_type());
  const at::Tensor mu_t = mean.to(stat_dtype).contiguous(), rs_t = rstd.to(stat_dtype).contiguous();
  const bool want_x = mask[0], want_w = mask[1], want_b = mask[2];  // the entry clears bits for absent parameters
  at::Tensor gi =
      want_x ? empty(x.sizes(), x.options().memory_format(at::MemoryFormat::Contiguous)) : empty_grad_like(x);
  at::Tensor gw = want_w ? empty(p.normalized_shape, x.options()) : empty_grad_like(x);
  at::Tensor gb = want_b ? empty(p.normalized_shape, x.options()) : empty_grad_like(x);
  XK_DISPATCH_DEVICE_TYPES(x.scalar_type(), "layer_norm_backward", [&] {
    using acc = xk::acc_t<T>;
    const acc* MU = mu_t.const_data_ptr<acc>();
    const acc* RS = rs_t.const_data_ptr<acc>();
    using C = LayerNormConfig;
    const bool want_wb = want_w || want_b;
    // Row blocks of the dw / db partial sums: a function of M only (not of the device or the launch), so
    // dw / db are the same bits on every device and every run.
    // The block count follows from rows_per_block: with the cap, ceil(M / rows_per_block) can be fewer than
    // the capped count (M = 8200: 33 rows per block, 249 blocks, not 256), and stage 2 must sum only blocks
    // stage 1 wrote (it summed 7 unwritten partials before).
    const int64_t rows_per_block =
        want_wb ? ceil_div(p.M, std::min(ceil_div(p.M, C::kRowsPerBlock), C::kMaxBlocks)) : 1;
    const int64_t blocks = want_wb ? ceil_div(p.M, rows_per_block) : 0;
    const auto acc_opts = x.options().dtype(stat_dtype);
    at::Tensor part_w = want_w ? empty({blocks, p.N}, acc_opts) : at::Tensor();
    at::Tensor part_b = want_b ? empty({blocks, p.N}, acc_opts) : at::Tensor();
    const xk::layer_norm_bwd_params<T> args{.dy = cptr<T>(dy),
                                            .x = cptr<T>(x),
                                            .mean = MU,
                                            .rstd = RS,
                                            .w = cptr_or_null<T>(w),
                                            .dx = want_x ? mptr<T>(gi) : nullptr,
                                            .part_w = want_w ? part_w.mutable_data_ptr<acc>() : nullptr,
                                            .part_b = want_b ? part_b.mutable_data_ptr<acc>() : nullptr,
                                            .M = p.M,
                                            .N = p.N,
                                            .rows_per_block = rows_per_block};
    if (!want_wb) {
      L.launch<xk::layer_norm_bwd, T>(row_range(L.traits(), p.M), args);  // dx only: one row per block
    } else if (!want_x || L.traits().is_cpu) {
      // One pass over dy and x for dx and the partials (CPU: `blocks` sub-groups keep both cores busy).
      L.launch<xk::layer_norm_bwd, T>(block_range(L.traits(), blocks), args);
    } else {
      // GPUs: dx with one row per sub-group (M-way parallel), then the partials (blocks-way); the same
      // arithmetic per element as the one-pass launch, so the same bits.
      auto dx_only = args;
      dx_only.part_w = dx_only.part_b = nullptr;
      dx_only.rows_per_block = 1;
      L.launch<xk::layer_norm_bwd, T>(row_range(L.traits(), p.M), dx_only);
      auto wb_only = args;
      wb_only.dx = nullptr;
      L.launch<xk::layer_norm_bwd, T>(block_range(L.traits(), blocks), wb_only);
    }
    if (want_wb) {
      const int64_t cols = ceil_div(p.N, C::kColumnTile) * C::kColumnTile;
      // In-order queue: stage 2 starts after stage 1.
      L.launch<xk::layer_norm_bwd_wb_final, T>(sycl::nd_range<1>(sycl::range<1>(cols), sycl::range<1>(C::kColumnTile)),
                                               {.part_w = want_w ? part_w.const_data_ptr<acc>() : nullptr,
                                                .part_b = want_b ? part_b.const_data_ptr<acc>() : nullptr,
                                                .dw = want_w ? mptr<T>(gw) : nullptr,
                                                .db = want_b ? mptr<T>(gb) : nullptr,
                                                .blocks = blocks,
                                                .N = p.N});
      // part_w / part_b are freed when this scope ends: for XPU tensors the caching allocator
      // keeps the memory for later work on the same stream, so that is safe; CPU waits below.
      L.finish(x);
    }
  });
  L.finish(x);
  return {want_x ? gi.view(input.sizes()) : gi, gw, gb};
}

}  // namespace

void layer_norm_forward_out(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias, double eps,
                            const LayerNormProblem& p, const at::Tensor& out, const at::Tensor& mean,
                            const at::Tensor& rstd) {
  forward_out(Launcher::for_tensor(input), input, weight, bias, eps, p, out, mean, rstd);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> layer_norm_backward(const at::Tensor& grad_output,
                                                                   const at::Tensor& input, const at::Tensor& mean,
                                                                   const at::Tensor& rstd, const at::Tensor& weight,
                                                                   const LayerNormProblem& p,
                                                                   std::array<bool, 3> mask) {
  return backward(Launcher::for_tensor(input), grad_output, input, mean, rstd, weight, p, mask);
}

}  // namespace xkernels::sycl_backend

#ifdef XKERNELS_WITH_ACPP
namespace xkernels::acpp_backend {
using sycl_backend::Launcher;

void layer_norm_forward_out(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias, double eps,
                            const LayerNormProblem& p, const at::Tensor& out, const at::Tensor& mean,
                            const at::Tensor& rstd) {
  sycl_backend::forward_out(Launcher::acpp(), input, weight, bias, eps, p, out, mean, rstd);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> layer_norm_backward(const at::Tensor& grad_output,
                                                                   const at::Tensor& input, const at::Tensor& mean,
                                                                   const at::Tensor& rstd, const at::Tensor& weight,
                                                                   const LayerNormProblem& p,
                                                                   std::array<bool, 3> mask) {
  return sycl_backend::backward(Launcher::acpp(), grad_output, input, mean, rstd, weight, p, mask);
}

}  // namespace xkernels::acpp_backend
#endif
