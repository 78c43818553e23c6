// layer_norm on the SYCL backend: host wrapper (checks are done by the entry; this makes
// inputs contiguous, allocates outputs, picks the launch geometry and launches the kernels
// of kernels/layer_norm.hpp).
#include <ATen/ATen.h>

#include <algorithm>

#include "sycl/kernel_memo.h"
#include "sycl/host_alloc.h"
#include "sycl/runtime.h"
#include "xkernels/dispatch.h"
#include "xkernels/entry.h"

namespace xkernels::sycl_backend {

namespace {

// Launch geometry. On the CPU device a work-group runs on one thread and a sub-group is
// one SIMD vector (16 lanes with AVX-512), so a few rows per work-group keep tasks large
// enough to amortise scheduling; on GPUs more sub-groups per work-group fill an EU/SM.
struct LayerNormConfig {
  static constexpr int64_t kCpuRowsPerGroup = 4;     // sub-groups (rows in flight) per work-group, CPU
  static constexpr int64_t kGpuRowsPerGroup = 8;     // same, GPUs
  static constexpr int64_t kAssumedSubGroup = 16;    // lanes per sub-group the local size is sized for
  static constexpr int64_t kMaxGroups = 1 << 16;     // rows are grid-strided beyond this
  static constexpr int64_t kColumnTile = 64;         // work-items per work-group, dw/db stage 2
  static constexpr int64_t kRowsPerBlock = 32;       // rows summed per stage-1 partial (dw/db)
  static constexpr int64_t kMaxBlocks = 256;         // at most this many partials per column
};

std::vector<std::string> layer_norm_kernel_names(const DeviceTraits& t) {
  std::vector<std::string> out;
  auto add = [&](const char* type) {
    for (const char* k : {"xk::layer_norm_fwd", "xk::layer_norm_bwd_dx", "xk::layer_norm_bwd_wb_partial",
                          "xk::layer_norm_bwd_wb_final"})
      out.push_back(std::string(k) + "<" + type + ">");
  };
  add(kernel_type_name<float>());
  add(kernel_type_name<sycl::ext::oneapi::bfloat16>());
  if (t.fp16) add(kernel_type_name<sycl::half>());
  if (t.fp64) add(kernel_type_name<double>());
  return out;
}

const KernelGroup& kLayerNormGroup = register_kernel_group({"layer_norm.hpp", layer_norm_kernel_names});


// One sub-group per row: the nd_range for M rows.
sycl::nd_range<1> row_range(const DeviceTraits& t, int64_t M) {
  const int64_t rows = t.is_cpu ? LayerNormConfig::kCpuRowsPerGroup : LayerNormConfig::kGpuRowsPerGroup;
  const int64_t local = std::min<int64_t>(rows * LayerNormConfig::kAssumedSubGroup, t.max_work_group_size);
  const int64_t groups = std::min(ceil_div(M, rows), LayerNormConfig::kMaxGroups);
  return sycl::nd_range<1>(sycl::range<1>(groups * local), sycl::range<1>(local));
}

}  // namespace

void layer_norm_forward_out(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias, double eps,
                            const LayerNormProblem& p, const at::Tensor& out, const at::Tensor& mean,
                            const at::Tensor& rstd) {
  const at::Tensor x = input.contiguous();
  const at::Tensor w = contiguous_if_defined(weight);
  const at::Tensor b = contiguous_if_defined(bias);
  sycl::queue& q = queue_for(x);
  const DeviceTraits& traits = traits_of(q);
  sycl::event done;
  XK_DISPATCH_FLOATING_TYPES(x.scalar_type(), "layer_norm_forward", [&] {
    using acc = acc_t<scalar_t>;
    static KernelMemo memo_layer_norm_fwd;  // one per element type (this lambda is instantiated per type)
    const sycl::kernel k = memo_layer_norm_fwd.get(q, kLayerNormGroup, 0, [] { return kernel_name<scalar_t>("xk::layer_norm_fwd"); });
    done = launch(q, k, row_range(traits, p.M), x.const_data_ptr<scalar_t>(),
                  w.defined() ? w.const_data_ptr<scalar_t>() : nullptr,
                  b.defined() ? b.const_data_ptr<scalar_t>() : nullptr, out.mutable_data_ptr<scalar_t>(),
                  mean.defined() ? mean.mutable_data_ptr<acc>() : nullptr,  // null: statistics not saved
                  rstd.defined() ? rstd.mutable_data_ptr<acc>() : nullptr, p.M, p.N, static_cast<acc>(eps));
  });
  wait_if_host(x, done);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> layer_norm_backward(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& mean, const at::Tensor& rstd,
    const at::Tensor& weight, const LayerNormProblem& p, std::array<bool, 3> mask) {
  const at::Tensor x = input.contiguous(), dy = grad_output.contiguous();
  const at::Tensor w = contiguous_if_defined(weight);
  const auto stat_dtype = layer_norm_stat_dtype(x.scalar_type());
  const at::Tensor mu_t = mean.to(stat_dtype).contiguous(), rs_t = rstd.to(stat_dtype).contiguous();
  const bool want_x = mask[0], want_w = mask[1], want_b = mask[2];  // the entry clears bits for absent parameters
  at::Tensor gi = want_x ? empty(x.sizes(), x.options().memory_format(at::MemoryFormat::Contiguous)) : empty_grad_like(x);
  at::Tensor gw = want_w ? empty(p.normalized_shape, x.options()) : empty_grad_like(x);
  at::Tensor gb = want_b ? empty(p.normalized_shape, x.options()) : empty_grad_like(x);
  sycl::queue& q = queue_for(x);
  const DeviceTraits& traits = traits_of(q);
  sycl::event done;
  XK_DISPATCH_FLOATING_TYPES(x.scalar_type(), "layer_norm_backward", [&] {
    using acc = acc_t<scalar_t>;
    static KernelMemo memo_layer_norm_bwd_dx, memo_layer_norm_bwd_wb_partial, memo_layer_norm_bwd_wb_final;
    const acc* MU = mu_t.const_data_ptr<acc>();
    const acc* RS = rs_t.const_data_ptr<acc>();
    if (want_x) {
      const sycl::kernel k = memo_layer_norm_bwd_dx.get(q, kLayerNormGroup, 0, [] { return kernel_name<scalar_t>("xk::layer_norm_bwd_dx"); });
      done = launch(q, k, row_range(traits, p.M), dy.const_data_ptr<scalar_t>(), x.const_data_ptr<scalar_t>(), MU,
                    RS, w.defined() ? w.const_data_ptr<scalar_t>() : nullptr, gi.mutable_data_ptr<scalar_t>(), p.M,
                    p.N);
    }
    if (want_w || want_b) {
      using C = LayerNormConfig;
      const int64_t blocks = std::min(ceil_div(p.M, C::kRowsPerBlock), C::kMaxBlocks);
      const int64_t rows_per_block = ceil_div(p.M, blocks);
      const auto acc_opts = x.options().dtype(stat_dtype);
      at::Tensor part_w = want_w ? empty({blocks, p.N}, acc_opts) : at::Tensor();
      at::Tensor part_b = want_b ? empty({blocks, p.N}, acc_opts) : at::Tensor();
      const int64_t cols = ceil_div(p.N, C::kColumnTile) * C::kColumnTile;
      const sycl::kernel k1 =
          memo_layer_norm_bwd_wb_partial.get(q, kLayerNormGroup, 0, [] { return kernel_name<scalar_t>("xk::layer_norm_bwd_wb_partial"); });
      launch(q, k1, row_range(traits, blocks),  // one sub-group per block of rows
             dy.const_data_ptr<scalar_t>(), x.const_data_ptr<scalar_t>(), MU, RS,
             want_w ? part_w.mutable_data_ptr<acc>() : nullptr, want_b ? part_b.mutable_data_ptr<acc>() : nullptr,
             p.M, p.N, rows_per_block);
      const sycl::kernel k2 = memo_layer_norm_bwd_wb_final.get(q, kLayerNormGroup, 0, [] { return kernel_name<scalar_t>("xk::layer_norm_bwd_wb_final"); });
      // In-order queue: stage 2 starts after stage 1.
      done = launch(q, k2, sycl::nd_range<1>(sycl::range<1>(cols), sycl::range<1>(C::kColumnTile)),
                    want_w ? part_w.const_data_ptr<acc>() : nullptr, want_b ? part_b.const_data_ptr<acc>() : nullptr,
                    want_w ? gw.mutable_data_ptr<scalar_t>() : nullptr,
                    want_b ? gb.mutable_data_ptr<scalar_t>() : nullptr, blocks, p.N);
      // part_w / part_b are freed when this scope ends: for XPU tensors the caching allocator
      // keeps the memory for later work on the same stream, so that is safe; CPU waits below.
      wait_if_host(x, done);
    }
  });
  wait_if_host(x, done);
  return {want_x ? gi.view(input.sizes()) : gi, gw, gb};
}

}  // namespace xkernels::sycl_backend
