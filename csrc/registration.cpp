// The ONLY TORCH_LIBRARY(xkernels, m): every schema, with a one-line comment each, the composite ops, and the
// CPU dispatch key's implementations (at the end). The CUDA and XPU keys register in their backends' files
// (csrc/cuda/registration.cpp, csrc/sycl/xpu_registration.cpp), which are built only with those backends.
#include <ATen/ATen.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/library.h>

#include "xkernels/backend.h"
#include "xkernels/entry.h"
#include "xkernels/shapes.h"
#include "xkernels/torch_compat.h"

namespace xkernels {
namespace {

// The .padding overloads of conv2d, conv2d_relu and conv2d_packed: 'same' / 'valid'. Like aten, an odd total
// padding is split with the extra element after (right/bottom): the input is padded by that remainder first,
// then the symmetric part goes to the op with integer padding. Differentiable through aten's pad.
struct StringPadded {
  at::Tensor input;
  std::vector<c10::SymInt> padding;  // symmetric, per spatial dim
};
StringPadded apply_string_padding(const char* op, const at::Tensor& input, at::IntArrayRef kernel_size,
                                  c10::SymIntArrayRef stride, c10::string_view padding, c10::SymIntArrayRef dilation) {
  const auto pads = conv2d_string_padding(op, kernel_size, C10_AS_INTARRAYREF_SLOW(stride), padding,
                                          C10_AS_INTARRAYREF_SLOW(dilation));
  const int64_t extra_h = pads[0][1] - pads[0][0], extra_w = pads[1][1] - pads[1][0];
  at::Tensor x = input;
  if (extra_h != 0 || extra_w != 0) x = at::constant_pad_nd(input, {0, extra_w, 0, extra_h}, 0);
  return {x, {pads[0][0], pads[1][0]}};
}

// The kernel size (KH, KW) of a 4-D weight shape, checked as the ops check it.
std::array<int64_t, 2> kernel_size_of(const char* op, const char* arg, at::IntArrayRef shape) {
  XK_CHECK_VALUE(shape.size() == 4, op, "argument '", arg, "' must be 4-D, got ", shape.size(), "-D tensor of shape ",
                 shape);
  return {shape[2], shape[3]};
}

at::Tensor conv2d_padding_composite(const at::Tensor& input, const at::Tensor& weight,
                                    const std::optional<at::Tensor>& bias, c10::SymIntArrayRef stride,
                                    c10::string_view padding, c10::SymIntArrayRef dilation, c10::SymInt groups) {
  const auto k = kernel_size_of("conv2d", "weight", weight.sizes());
  auto [x, pad] = apply_string_padding("conv2d", input, k, stride, padding, dilation);
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("xkernels::conv2d", "")
                       .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&,
                                         c10::SymIntArrayRef, c10::SymIntArrayRef, c10::SymIntArrayRef, c10::SymInt)>();
  return op.call(x, weight, bias, stride, pad, dilation, std::move(groups));
}

at::Tensor conv2d_relu_padding_composite(const at::Tensor& input, const at::Tensor& weight,
                                         const std::optional<at::Tensor>& bias, c10::SymIntArrayRef stride,
                                         c10::string_view padding, c10::SymIntArrayRef dilation, c10::SymInt groups,
                                         const std::optional<at::Tensor>& residual) {
  const auto k = kernel_size_of("conv2d_relu", "weight", weight.sizes());
  auto [x, pad] = apply_string_padding("conv2d_relu", input, k, stride, padding, dilation);
  static auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("xkernels::conv2d_relu", "")
          .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&, c10::SymIntArrayRef,
                            c10::SymIntArrayRef, c10::SymIntArrayRef, c10::SymInt, const std::optional<at::Tensor>&)>();
  return op.call(x, weight, bias, stride, pad, dilation, std::move(groups), residual);
}

at::Tensor conv2d_packed_padding_composite(const at::Tensor& input, const at::Tensor& packed_weight,
                                           c10::SymIntArrayRef weight_shape, const std::optional<at::Tensor>& bias,
                                           c10::SymIntArrayRef stride, c10::string_view padding,
                                           c10::SymIntArrayRef dilation, c10::SymInt groups,
                                           const std::optional<at::Tensor>& residual, bool relu) {
  const auto k = kernel_size_of("conv2d_packed", "weight_shape", C10_AS_INTARRAYREF_SLOW(weight_shape));
  auto [x, pad] = apply_string_padding("conv2d_packed", input, k, stride, padding, dilation);
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("xkernels::conv2d_packed", "")
                       .typed<at::Tensor(const at::Tensor&, const at::Tensor&, c10::SymIntArrayRef,
                                         const std::optional<at::Tensor>&, c10::SymIntArrayRef, c10::SymIntArrayRef,
                                         c10::SymIntArrayRef, c10::SymInt, const std::optional<at::Tensor>&, bool)>();
  return op.call(x, packed_weight, weight_shape, bias, stride, pad, dilation, std::move(groups), residual, relu);
}

// layer_norm: the public op returns the output only; autograd is attached to
// layer_norm_forward, which also returns the saved statistics.
at::Tensor layer_norm_composite(const at::Tensor& input, c10::SymIntArrayRef normalized_shape,
                                const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
                                double eps) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("xkernels::layer_norm_forward", "")
                       .typed<std::tuple<at::Tensor, at::Tensor, at::Tensor>(
                           const at::Tensor&, c10::SymIntArrayRef, const std::optional<at::Tensor>&,
                           const std::optional<at::Tensor>&, double)>();
  return std::get<0>(op.call(input, normalized_shape, weight, bias, eps));
}

// layer_norm.out under autograd: like aten's out= ops, it does not differentiate. With grad mode on,
// an argument that requires grad is an error (aten's rule and wording, naming the argument);
// otherwise it runs the backend kernel below autograd and bumps out's version counter (what the
// ADInplaceOrView kernel of an aten out= op does), so autograd notices out was overwritten.
at::Tensor& layer_norm_out_autograd(const at::Tensor& input, c10::SymIntArrayRef normalized_shape,
                                    const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
                                    double eps, at::Tensor& out) {
  if (at::GradMode::is_enabled()) {
    const std::pair<const char*, const at::Tensor*> args[] = {
        {"input", &input}, {"weight", weight ? &*weight : nullptr}, {"bias", bias ? &*bias : nullptr}, {"out", &out}};
    for (const auto& [name, t] : args)
      TORCH_CHECK(t == nullptr || !t->defined() || !t->requires_grad(),
                  "xkernels.layer_norm(): functions with out=... arguments don't support automatic differentiation, "
                  "but argument '",
                  name,
                  "' requires grad; call it under torch.no_grad() / torch.inference_mode(), "
                  "or without out= to differentiate");
  }
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("xkernels::layer_norm", "out")
                       .typed<at::Tensor&(const at::Tensor&, c10::SymIntArrayRef, const std::optional<at::Tensor>&,
                                          const std::optional<at::Tensor>&, double, at::Tensor&)>();
  {
    at::AutoDispatchBelowADInplaceOrView below;
    op.call(input, normalized_shape, weight, bias, eps, out);
  }
  torch::autograd::impl::bump_version(out);
  return out;
}

// fused_linear_relu_packed under autograd: not differentiable (the packed copy is not the module's
// parameter). With grad mode on, an argument that requires grad raises; otherwise runs below autograd.
at::Tensor fused_linear_relu_packed_autograd(const at::Tensor& input, const at::Tensor& packed_weight,
                                             const std::optional<at::Tensor>& bias, c10::SymInt out_features) {
  if (at::GradMode::is_enabled()) {
    const std::pair<const char*, const at::Tensor*> args[] = {
        {"input", &input}, {"packed_weight", &packed_weight}, {"bias", bias ? &*bias : nullptr}};
    for (const auto& [name, t] : args)
      TORCH_CHECK(t == nullptr || !t->defined() || !t->requires_grad(),
                  "xkernels.fused_linear_relu_packed: not differentiable (inference only), but argument '", name,
                  "' requires grad; call it under torch.no_grad() / torch.inference_mode(), or use "
                  "fused_linear_relu with the unpacked weight to differentiate");
  }
  static auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("xkernels::fused_linear_relu_packed", "")
          .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&, c10::SymInt)>();
  at::AutoDispatchBelowADInplaceOrView below;
  return op.call(input, packed_weight, bias, std::move(out_features));
}

// conv2d_packed under autograd: not differentiable (the packed copy is not the module's parameter), as
// fused_linear_relu_packed.
at::Tensor conv2d_packed_autograd(const at::Tensor& input, const at::Tensor& packed_weight,
                                  c10::SymIntArrayRef weight_shape, const std::optional<at::Tensor>& bias,
                                  c10::SymIntArrayRef stride, c10::SymIntArrayRef padding, c10::SymIntArrayRef dilation,
                                  c10::SymInt groups, const std::optional<at::Tensor>& residual, bool relu) {
  if (at::GradMode::is_enabled()) {
    const std::pair<const char*, const at::Tensor*> args[] = {{"input", &input},
                                                              {"packed_weight", &packed_weight},
                                                              {"bias", bias ? &*bias : nullptr},
                                                              {"residual", residual ? &*residual : nullptr}};
    for (const auto& [name, t] : args)
      TORCH_CHECK(t == nullptr || !t->defined() || !t->requires_grad(),
                  "xkernels.conv2d_packed: not differentiable (inference only), but argument '", name,
                  "' requires grad; call it under torch.no_grad() / torch.inference_mode(), or use "
                  "conv2d / conv2d_relu with the unpacked weight to differentiate");
  }
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("xkernels::conv2d_packed", "")
                       .typed<at::Tensor(const at::Tensor&, const at::Tensor&, c10::SymIntArrayRef,
                                         const std::optional<at::Tensor>&, c10::SymIntArrayRef, c10::SymIntArrayRef,
                                         c10::SymIntArrayRef, c10::SymInt, const std::optional<at::Tensor>&, bool)>();
  at::AutoDispatchBelowADInplaceOrView below;
  return op.call(input, packed_weight, weight_shape, bias, stride, padding, dilation, std::move(groups), residual,
                 relu);
}

}  // namespace
}  // namespace xkernels

TORCH_LIBRARY(xkernels, m) {
  // relu(input @ weight.T + bias); input [..., K], weight [N, K], bias [N].
  m.def("fused_linear_relu(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor");
  // weight [N, K] packed for fused_linear_relu_packed: [ceil(N / C), K, C], C = 64 (32 for float64) columns per
  // panel, zero padded (the SYCL CPU GEMM's B operand). CPU tensors only.
  m.def("pack_linear_weight(Tensor weight) -> Tensor");
  // fused_linear_relu with a weight from pack_linear_weight (out_features = the original weight's N). CPU tensors
  // only; inference only (not differentiable: arguments that require grad raise with grad mode on).
  m.def("fused_linear_relu_packed(Tensor input, Tensor packed_weight, Tensor? bias, SymInt out_features) -> Tensor");
  // Grads of fused_linear_relu (input, weight, bias) from the forward output's ReLU mask; unrequested grads are empty.
  m.def(
      "fused_linear_relu_backward(Tensor grad_output, Tensor input, Tensor weight, Tensor output, "
      "bool[3] output_mask) -> (Tensor, Tensor, Tensor)");
  // F.conv2d with integer padding: NCHW or channels_last, batched or unbatched, groups, dilation.
  m.def(
      "conv2d(Tensor input, Tensor weight, Tensor? bias=None, SymInt[2] stride=1, SymInt[2] padding=0, "
      "SymInt[2] dilation=1, SymInt groups=1) -> Tensor");
  // relu(F.conv2d(input, weight, bias, ...) + residual) in one op (residual optional, the output's shape): the
  // conv + [BatchNorm folded into weight/bias] + [residual add] + ReLU chains of CNN inference (xkernels.optimize).
  m.def(
      "conv2d_relu(Tensor input, Tensor weight, Tensor? bias=None, SymInt[2] stride=1, SymInt[2] padding=0, "
      "SymInt[2] dilation=1, SymInt groups=1, Tensor? residual=None) -> Tensor");
  // The weight [O, C/groups, KH, KW] packed for conv2d_packed (the SYCL CPU kernels' layout, shapes.h
  // conv2d_pack_layout): a flat tensor. CPU tensors only; not differentiable.
  m.def("pack_conv2d_weight(Tensor weight, SymInt groups=1) -> Tensor");
  // conv2d (relu=False) or conv2d_relu (relu=True) with a weight from pack_conv2d_weight (weight_shape = the
  // original weight's shape). CPU tensors only; inference only (arguments that require grad raise in grad mode).
  m.def(
      "conv2d_packed(Tensor input, Tensor packed_weight, SymInt[4] weight_shape, Tensor? bias, SymInt[2] stride, "
      "SymInt[2] padding, SymInt[2] dilation, SymInt groups, Tensor? residual=None, bool relu=False) -> Tensor");
  // F.conv2d with padding='same' | 'valid' (composite: pads the odd remainder, then calls conv2d).
  m.def(
      "conv2d.padding(Tensor input, Tensor weight, Tensor? bias=None, SymInt[2] stride=1, str padding=\"valid\", "
      "SymInt[2] dilation=1, SymInt groups=1) -> Tensor");
  // conv2d_relu and conv2d_packed with padding='same' | 'valid' (composites as conv2d.padding).
  m.def(
      "conv2d_relu.padding(Tensor input, Tensor weight, Tensor? bias=None, SymInt[2] stride=1, "
      "str padding=\"valid\", SymInt[2] dilation=1, SymInt groups=1, Tensor? residual=None) -> Tensor");
  m.def(
      "conv2d_packed.padding(Tensor input, Tensor packed_weight, SymInt[4] weight_shape, Tensor? bias, "
      "SymInt[2] stride, str padding, SymInt[2] dilation, SymInt groups, Tensor? residual=None, "
      "bool relu=False) -> Tensor");
  // Grads of conv2d (input, weight, bias); unrequested grads are empty.
  m.def(
      "conv2d_backward(Tensor grad_output, Tensor input, Tensor weight, SymInt[2] stride, SymInt[2] padding, "
      "SymInt[2] dilation, SymInt groups, bool[3] output_mask) -> (Tensor, Tensor, Tensor)");
  // F.layer_norm over the trailing normalized_shape dims (composite over layer_norm_forward).
  m.def(
      "layer_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight=None, Tensor? bias=None, "
      "float eps=1e-05) -> Tensor");
  // layer_norm into a caller-provided `out` (inference only: no statistics saved, not differentiable);
  // out must have the input's shape, dtype and device and must not partially overlap the inputs.
  m.def(
      "layer_norm.out(Tensor input, SymInt[] normalized_shape, Tensor? weight=None, Tensor? bias=None, "
      "float eps=1e-05, *, Tensor(a!) out) -> Tensor(a!)",
      {xkernels::compat::out_tag()});
  // layer_norm returning (output, mean, rstd); mean/rstd in the accumulation dtype, shaped for broadcasting.
  m.def(
      "layer_norm_forward(Tensor input, SymInt[] normalized_shape, Tensor? weight=None, Tensor? bias=None, "
      "float eps=1e-05) -> (Tensor, Tensor, Tensor)");
  // Grads of layer_norm (input, weight, bias) from the saved mean/rstd; unrequested grads are empty.
  m.def(
      "layer_norm_backward(Tensor grad_output, Tensor input, SymInt[] normalized_shape, Tensor mean, Tensor rstd, "
      "Tensor? weight, Tensor? bias, bool[3] output_mask) -> (Tensor, Tensor, Tensor)");

  m.impl("conv2d.padding", c10::DispatchKey::CompositeImplicitAutograd, TORCH_FN(xkernels::conv2d_padding_composite));
  m.impl("conv2d_relu.padding", c10::DispatchKey::CompositeImplicitAutograd,
         TORCH_FN(xkernels::conv2d_relu_padding_composite));
  m.impl("conv2d_packed.padding", c10::DispatchKey::CompositeImplicitAutograd,
         TORCH_FN(xkernels::conv2d_packed_padding_composite));
  m.impl("layer_norm", c10::DispatchKey::CompositeImplicitAutograd, TORCH_FN(xkernels::layer_norm_composite));
  m.impl("layer_norm.out", c10::DispatchKey::Autograd, TORCH_FN(xkernels::layer_norm_out_autograd));
  m.impl("fused_linear_relu_packed", c10::DispatchKey::Autograd, TORCH_FN(xkernels::fused_linear_relu_packed_autograd));
  m.impl("conv2d_packed", c10::DispatchKey::Autograd, TORCH_FN(xkernels::conv2d_packed_autograd));
}

// Every op's CPU dispatch-key implementation: the op's registered entry function (xkernels/entry.h: validation,
// empty sizes) with the CPU chooser, which picks the reference kernels (csrc/cpu/), the SYCL CPU device or, when
// selected, the acpp backend.
TORCH_LIBRARY_IMPL(xkernels, CPU, m) {
  using xkernels::choose_cpu_backend;
  namespace entry = xkernels::entry;
  m.impl("fused_linear_relu", &entry::fused_linear_relu<choose_cpu_backend>);
  m.impl("fused_linear_relu_backward", &entry::fused_linear_relu_backward<choose_cpu_backend>);
  m.impl("pack_linear_weight", &entry::pack_linear_weight<choose_cpu_backend>);
  m.impl("fused_linear_relu_packed", &entry::fused_linear_relu_packed<choose_cpu_backend>);
  m.impl("conv2d", &entry::conv2d<choose_cpu_backend>);
  m.impl("conv2d_relu", &entry::conv2d_relu<choose_cpu_backend>);
  m.impl("pack_conv2d_weight", &entry::pack_conv2d_weight<choose_cpu_backend>);
  m.impl("conv2d_packed", &entry::conv2d_packed<choose_cpu_backend>);
  m.impl("conv2d_backward", &entry::conv2d_backward<choose_cpu_backend>);
  m.impl("layer_norm_forward", &entry::layer_norm_forward<choose_cpu_backend>);
  m.impl("layer_norm.out", &entry::layer_norm_out<choose_cpu_backend>);
  m.impl("layer_norm_backward", &entry::layer_norm_backward<choose_cpu_backend>);
}
