// The registered dispatcher functions, one per op, shared by every dispatch key.
// Each first lets a deferred-wait region's queued kernels finish (backend.h settle_host_work; conv2d_packed's SYCL
// route decides for itself), validates (shapes.h), handles degenerate sizes once for all backends,
// asks the key's chooser which backend runs, and calls it (ops.h).
//
// A dispatch key registers them as, e.g.
//   m.impl("conv2d", &xkernels::entry::conv2d<xkernels::choose_cpu_backend>);
#pragma once
#include <ATen/ATen.h>

#include "xkernels/backend.h"
#include "xkernels/ops.h"
#include "xkernels/shapes.h"

#ifdef XKERNELS_WITH_CUDA
#define XK_IF_CUDA(expr) expr
#else
#define XK_IF_CUDA(expr) TORCH_CHECK(false, "xkernels was built without the native CUDA backend")
#endif

// Calls backend `b`'s implementation OP(args...) and returns its result.
#define XK_CALL_BACKEND(b, OP, ...)                                                               \
  switch (b) {                                                                                    \
    case ::xkernels::Backend::Reference: return ::xkernels::reference::OP(__VA_ARGS__);           \
    case ::xkernels::Backend::Sycl: XK_IF_SYCL(return ::xkernels::sycl_backend::OP(__VA_ARGS__)); \
    case ::xkernels::Backend::Cuda: XK_IF_CUDA(return ::xkernels::cuda::OP(__VA_ARGS__));         \
    case ::xkernels::Backend::Acpp: XK_IF_ACPP(return ::xkernels::acpp_backend::OP(__VA_ARGS__)); \
    default: TORCH_CHECK(false, "xkernels." #OP ": no backend chosen");                           \
  }

namespace xkernels::entry {

using Chooser = Backend (*)(const char* op, at::ScalarType dtype);
using Grads = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

// Zeros in the given memory format. (at::zeros ignores TensorOptions' memory_format: the
// aten op has no such argument; at::empty honours it.)
inline at::Tensor zeros_in(at::IntArrayRef sizes, const at::TensorOptions& opts,
                           at::MemoryFormat fmt = at::MemoryFormat::Contiguous) {
  return at::empty(sizes, opts.memory_format(fmt)).zero_();
}

// ---------------------------------------------------------------- fused_linear_relu
template <Chooser choose>
at::Tensor fused_linear_relu(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias) {
  settle_host_work();
  const LinearProblem p = check_fused_linear_relu(input, weight, bias);
  const at::Tensor b = value_or_undefined(bias);
  if (p.M == 0 || p.N == 0) return at::empty(p.out_sizes, input.options());
  if (p.K == 0)  // empty reduction: relu(bias) (or 0) in every row
    return b.defined() ? b.clamp_min(0).expand(p.out_sizes).contiguous() : at::zeros(p.out_sizes, input.options());
  const Backend chosen = choose("fused_linear_relu", input.scalar_type());
  XK_CALL_BACKEND(chosen, fused_linear_relu, input, weight, b, p);
}

template <Chooser choose>
Grads fused_linear_relu_backward(const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
                                 const at::Tensor& output, std::array<bool, 3> output_mask) {
  settle_host_work();
  const LinearProblem p = check_fused_linear_relu_backward(grad_output, input, weight, output);
  const auto mask = output_mask;
  if (p.M == 0 || p.N == 0 || p.K == 0) {
    // Nothing to multiply: grad_input / grad_weight are zero; grad_bias sums the masked grad over rows.
    at::Tensor gi = mask[0] ? at::zeros_like(input, at::MemoryFormat::Contiguous) : empty_grad_like(input);
    at::Tensor gw = mask[1] ? at::zeros_like(weight, at::MemoryFormat::Contiguous) : empty_grad_like(weight);
    at::Tensor gb = mask[2]
                        ? at::where(output.le(0), at::zeros_like(grad_output), grad_output).reshape({p.M, p.N}).sum(0)
                        : empty_grad_like(weight);
    return {gi, gw, gb};
  }
  const Backend chosen = choose("fused_linear_relu_backward", input.scalar_type());
  XK_CALL_BACKEND(chosen, fused_linear_relu_backward, grad_output, input, weight, output, p, mask);
}

// Pre-packed weights: CPU key only (reference or SYCL on the CPU device); no CUDA / XPU kernels.
template <Chooser choose>
at::Tensor pack_linear_weight(const at::Tensor& weight) {
  settle_host_work();
  check_pack_linear_weight(weight);
  const int64_t N = weight.size(0), K = weight.size(1), C = linear_pack_columns(weight.scalar_type());
  if (N == 0 || K == 0) return at::zeros({ceil_div(N, C), K, C}, weight.options());
  switch (choose("pack_linear_weight", weight.scalar_type())) {
    case Backend::Reference: return reference::pack_linear_weight(weight);
    case Backend::Sycl: XK_IF_SYCL(return sycl_backend::pack_linear_weight(weight));
    case Backend::Acpp: XK_IF_ACPP(return acpp_backend::pack_linear_weight(weight));
    default:
      TORCH_CHECK(false, "xkernels.pack_linear_weight: only the 'reference', 'sycl' and 'acpp' backends pack weights");
  }
}

template <Chooser choose>
at::Tensor fused_linear_relu_packed(const at::Tensor& input, const at::Tensor& packed_weight,
                                    const std::optional<at::Tensor>& bias, int64_t out_features) {
  settle_host_work();
  const LinearProblem p = check_fused_linear_relu_packed(input, packed_weight, bias, out_features);
  const at::Tensor b = value_or_undefined(bias);
  if (p.M == 0 || p.N == 0) return at::empty(p.out_sizes, input.options());
  if (p.K == 0)  // empty reduction: relu(bias) (or 0) in every row, as fused_linear_relu
    return b.defined() ? b.clamp_min(0).expand(p.out_sizes).contiguous() : at::zeros(p.out_sizes, input.options());
  switch (choose("fused_linear_relu_packed", input.scalar_type())) {
    case Backend::Reference: return reference::fused_linear_relu_packed(input, packed_weight, b, p);
    case Backend::Sycl: XK_IF_SYCL(return sycl_backend::fused_linear_relu_packed(input, packed_weight, b, p));
    case Backend::Acpp: XK_IF_ACPP(return acpp_backend::fused_linear_relu_packed(input, packed_weight, b, p));
    default:
      TORCH_CHECK(false, "xkernels.fused_linear_relu_packed: only the 'reference', 'sycl' and 'acpp' backends run it");
  }
}

// conv2d (and its conv2d_relu / conv2d_packed forms) where no kernel runs, for every backend: no output
// elements (empty), or an empty reduction (C, KH or KW = 0: [relu](bias (or 0) + residual) everywhere);
// nullopt when the backend must compute.
inline std::optional<at::Tensor> conv2d_degenerate(const at::Tensor& input, const at::Tensor& bias,
                                                   const at::Tensor& residual, bool relu, const Conv2dProblem& p) {
  const auto fmt = p.channels_last ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous;
  if (p.N == 0 || p.O == 0) return at::empty(p.out_sizes(), input.options().memory_format(fmt));
  if (p.C != 0 && p.KH != 0 && p.KW != 0) return std::nullopt;
  at::Tensor out = zeros_in(p.out_sizes(), input.options(), fmt);
  if (bias.defined()) out.add_(p.batched ? bias.view({1, p.O, 1, 1}) : bias.view({p.O, 1, 1}));
  if (residual.defined()) out.add_(residual);
  return relu ? out.clamp_min_(0) : out;
}

// ---------------------------------------------------------------- conv2d
template <Chooser choose>
at::Tensor conv2d(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                  at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups) {
  settle_host_work();
  const Conv2dProblem p = check_conv2d(input, weight, bias, stride, padding, dilation, groups);
  const at::Tensor b = value_or_undefined(bias);
  if (auto out = conv2d_degenerate(input, b, at::Tensor(), /*relu=*/false, p)) return *out;
  const Backend chosen = choose("conv2d", input.scalar_type());
  XK_CALL_BACKEND(chosen, conv2d, input, weight, b, p);
}

// relu(conv2d + residual): the conv2d entry with the fused epilogue (ops.h).
template <Chooser choose>
at::Tensor conv2d_relu(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                       at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups,
                       const std::optional<at::Tensor>& residual) {
  settle_host_work();
  const Conv2dProblem p = check_conv2d_relu(input, weight, bias, stride, padding, dilation, groups, residual);
  const at::Tensor b = value_or_undefined(bias);
  const at::Tensor r = value_or_undefined(residual);
  if (auto out = conv2d_degenerate(input, b, r, /*relu=*/true, p)) return *out;
  const Backend chosen = choose("conv2d_relu", input.scalar_type());
  XK_CALL_BACKEND(chosen, conv2d_relu, input, weight, b, r, p);
}

// Pre-packed conv2d weights: CPU key only (reference, SYCL on the CPU device, acpp).
template <Chooser choose>
at::Tensor pack_conv2d_weight(const at::Tensor& weight, int64_t groups) {
  settle_host_work();
  check_pack_conv2d_weight(weight, groups);
  if (weight.numel() == 0)
    return at::zeros({conv2d_pack_layout(weight.sizes(), groups, weight.scalar_type()).numel}, weight.options());
  switch (choose("pack_conv2d_weight", weight.scalar_type())) {
    case Backend::Reference: return reference::pack_conv2d_weight(weight, groups);
    case Backend::Sycl: XK_IF_SYCL(return sycl_backend::pack_conv2d_weight(weight, groups));
    case Backend::Acpp: XK_IF_ACPP(return acpp_backend::pack_conv2d_weight(weight, groups));
    default:
      TORCH_CHECK(false, "xkernels.pack_conv2d_weight: only the 'reference', 'sycl' and 'acpp' backends pack weights");
  }
}

template <Chooser choose>
at::Tensor conv2d_packed(const at::Tensor& input, const at::Tensor& packed_weight, at::IntArrayRef weight_shape,
                         const std::optional<at::Tensor>& bias, at::IntArrayRef stride, at::IntArrayRef padding,
                         at::IntArrayRef dilation, int64_t groups, const std::optional<at::Tensor>& residual,
                         bool relu) {
  const Conv2dProblem p =
      check_conv2d_packed(input, packed_weight, weight_shape, bias, stride, padding, dilation, groups, residual);
  const at::Tensor b = value_or_undefined(bias);
  const at::Tensor r = value_or_undefined(residual);
  if (p.N == 0 || p.O == 0 || p.C == 0 || p.KH == 0 || p.KW == 0) settle_host_work();  // conv2d_degenerate's host ops
  if (auto out = conv2d_degenerate(input, b, r, relu, p)) return *out;
  const Backend chosen = choose("conv2d_packed", input.scalar_type());
  if (chosen != Backend::Sycl) settle_host_work();  // the SYCL route settles or defers itself
  switch (chosen) {
    case Backend::Reference: return reference::conv2d_packed(input, packed_weight, b, r, relu, p);
    case Backend::Sycl: XK_IF_SYCL(return sycl_backend::conv2d_packed(input, packed_weight, b, r, relu, p));
    case Backend::Acpp: XK_IF_ACPP(return acpp_backend::conv2d_packed(input, packed_weight, b, r, relu, p));
    default: TORCH_CHECK(false, "xkernels.conv2d_packed: only the 'reference', 'sycl' and 'acpp' backends run it");
  }
}

template <Chooser choose>
Grads conv2d_backward(const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
                      at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups,
                      std::array<bool, 3> output_mask) {
  settle_host_work();
  const Conv2dProblem p = check_conv2d_backward(grad_output, input, weight, stride, padding, dilation, groups);
  const auto mask = output_mask;
  if (grad_output.numel() == 0 || input.numel() == 0 || weight.numel() == 0) {
    // Same memory formats as the backends (and the fake in ops.py): the problem's format,
    // grad_input contiguous 3-D when unbatched (p.channels_last is false then).
    const auto fmt = p.channels_last ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous;
    at::Tensor gi = mask[0] ? zeros_in(input.sizes(), input.options(), fmt) : empty_grad_like(input);
    at::Tensor gw = mask[1] ? zeros_in(weight.sizes(), weight.options(), fmt) : empty_grad_like(weight);
    at::Tensor gb =
        mask[2] ? (p.batched ? grad_output.sum({0, 2, 3}) : grad_output.sum({1, 2})) : empty_grad_like(weight);
    return {gi, gw, gb};
  }
  const Backend chosen = choose("conv2d_backward", input.scalar_type());
  XK_CALL_BACKEND(chosen, conv2d_backward, grad_output, input, weight, p, mask);
}

// ---------------------------------------------------------------- layer_norm

// How backend `b` allocates its outputs: the SYCL backend's CPU outputs come from its caching host
// allocator (csrc/sycl/host_alloc.h), every other backend's from at::empty.
inline EmptyFn empty_for(Backend b) {
#ifdef XKERNELS_WITH_SYCL
  if (b == Backend::Sycl || b == Backend::Acpp) return &::xkernels::sycl_backend::empty;
#endif
  (void)b;
  return [](at::IntArrayRef sizes, const at::TensorOptions& opts) { return at::empty(sizes, opts); };
}

// Runs backend `chosen`'s layer_norm_forward_out (ops.h) on validated, non-empty arguments.
inline void layer_norm_run_forward(Backend chosen, const at::Tensor& input, const std::optional<at::Tensor>& weight,
                                   const std::optional<at::Tensor>& bias, double eps, const LayerNormProblem& p,
                                   const at::Tensor& out, const at::Tensor& mean, const at::Tensor& rstd) {
  XK_CALL_BACKEND(chosen, layer_norm_forward_out, input, value_or_undefined(weight), value_or_undefined(bias), eps, p,
                  out, mean, rstd);
}

template <Chooser choose>
Grads layer_norm_forward(const at::Tensor& input, at::IntArrayRef normalized_shape,
                         const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias, double eps) {
  settle_host_work();
  const LayerNormProblem p = check_layer_norm(input, normalized_shape, weight, bias, eps);
  if (p.M == 0 || p.N == 0) {
    const auto stat_opts = input.options().dtype(layer_norm_stat_dtype(input.scalar_type()));
    // Rows of length 0 have mean 0 and an undefined (NaN) rstd, as in aten.
    return {at::empty_like(input, at::MemoryFormat::Contiguous), at::zeros(p.stat_sizes, stat_opts),
            at::full(p.stat_sizes, std::numeric_limits<double>::quiet_NaN(), stat_opts)};
  }
  const Backend chosen = choose("layer_norm", input.scalar_type());
  at::Tensor out, mean, rstd;
  std::tie(out, mean, rstd) = layer_norm_empty_outputs(input, p, empty_for(chosen));
  layer_norm_run_forward(chosen, input, weight, bias, eps, p, out, mean, rstd);
  return {out, mean, rstd};
}

// layer_norm.out: the output into a caller-provided tensor, no statistics (inference). The Autograd
// kernel (registration.cpp) has refused arguments that require grad before this runs.
template <Chooser choose>
at::Tensor& layer_norm_out(const at::Tensor& input, at::IntArrayRef normalized_shape,
                           const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias, double eps,
                           at::Tensor& out) {
  settle_host_work();
  const LayerNormProblem p = check_layer_norm(input, normalized_shape, weight, bias, eps);
  check_layer_norm_out(input, weight, bias, out);
  if (p.M == 0 || p.N == 0) return out;  // nothing to write
  const Backend chosen = choose("layer_norm.out", input.scalar_type());
  // A non-contiguous out (strided view, other memory format) is computed densely, then copied in.
  const bool dense = out.is_contiguous();
  const at::Tensor target = dense ? out : empty_for(chosen)(input.sizes(), input.options());
  layer_norm_run_forward(chosen, input, weight, bias, eps, p, target, at::Tensor(), at::Tensor());
  if (!dense) out.copy_(target);
  return out;
}

template <Chooser choose>
Grads layer_norm_backward(const at::Tensor& grad_output, const at::Tensor& input, at::IntArrayRef normalized_shape,
                          const at::Tensor& mean, const at::Tensor& rstd, const std::optional<at::Tensor>& weight,
                          const std::optional<at::Tensor>& bias, std::array<bool, 3> output_mask) {
  settle_host_work();
  const LayerNormProblem p = check_layer_norm_backward(grad_output, input, normalized_shape, mean, rstd, weight, bias);
  auto mask = output_mask;
  const at::Tensor w = value_or_undefined(weight);
  mask[1] = mask[1] && w.defined();  // no parameter, no grad (an empty tensor)
  mask[2] = mask[2] && bias.has_value() && bias->defined();
  if (p.M == 0 || p.N == 0) {
    at::Tensor gi = mask[0] ? at::zeros_like(input, at::MemoryFormat::Contiguous) : empty_grad_like(input);
    at::Tensor gw = mask[1] ? zeros_in(w.sizes(), w.options()) : empty_grad_like(input);  // contiguous, as the backends
    at::Tensor gb = mask[2] ? zeros_in(bias->sizes(), bias->options()) : empty_grad_like(input);
    return {gi, gw, gb};
  }
  const Backend chosen = choose("layer_norm_backward", input.scalar_type());
  XK_CALL_BACKEND(chosen, layer_norm_backward, grad_output, input, mean, rstd, w, p, mask);
}

}  // namespace xkernels::entry
