// Shared shape rules and validation (see include/xkernels/shapes.h).
#include "xkernels/shapes.h"

#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/native/ConvUtils.h>

#include <algorithm>

namespace xkernels {
namespace {

bool present(const std::optional<at::Tensor>& t) { return t.has_value() && t->defined(); }

void check_pair(const char* op, const char* arg, at::IntArrayRef v) {
  XK_CHECK_VALUE(v.size() == 2, op, "argument '", arg, "' must have 2 elements, got ", v.size(), ": ", v);
}

}  // namespace

// ---------------------------------------------------------------- fused_linear_relu
// The rows, sizes and bias check shared by the linear ops: input [..., K] -> output [..., N].
static LinearProblem linear_problem(const char* op, const at::Tensor& input, int64_t K, int64_t N,
                                    const std::optional<at::Tensor>& bias, const char* n_is) {
  LinearProblem p;
  p.K = K;
  p.N = N;
  if (present(bias)) {
    XK_CHECK_VALUE(bias->dim() == 1 && bias->size(0) == p.N, op, "argument 'bias' must have shape [", p.N, "] (", n_is,
                   "), got ", bias->sizes());
  }
  p.M = 1;
  for (int64_t d = 0; d + 1 < input.dim(); ++d) {
    p.M *= input.size(d);
    p.out_sizes.push_back(input.size(d));
  }
  p.out_sizes.push_back(p.N);
  return p;
}

LinearProblem check_fused_linear_relu(const at::Tensor& input, const at::Tensor& weight,
                                      const std::optional<at::Tensor>& bias) {
  const char* op = "fused_linear_relu";
  check_defined(op, "input", input);
  check_defined(op, "weight", weight);
  check_dtype_supported(op, "input", input);
  check_same_dtype_device(op, "weight", weight, "input", input);
  check_optional_same(op, "bias", bias, "input", input);
  XK_CHECK_VALUE(input.dim() >= 1, op, "argument 'input' must have at least 1 dimension [..., K], got a 0-D tensor");
  check_dim(op, "weight", weight, 2);
  const int64_t K = input.size(-1);
  XK_CHECK_VALUE(weight.size(1) == K, op, "argument 'weight' has shape ", weight.sizes(),
                 " but input's last dimension is K=", K, "; weight must be [N, K=", K, "]");
  return linear_problem(op, input, K, weight.size(0), bias, "N = weight.size(0)");
}

LinearProblem check_fused_linear_relu_backward(const at::Tensor& grad_output, const at::Tensor& input,
                                               const at::Tensor& weight, const at::Tensor& output) {
  const char* op = "fused_linear_relu_backward";
  LinearProblem p = check_fused_linear_relu(input, weight, std::nullopt);
  check_defined(op, "grad_output", grad_output);
  check_defined(op, "output", output);
  check_same_dtype_device(op, "grad_output", grad_output, "input", input);
  check_same_dtype_device(op, "output", output, "input", input);
  XK_CHECK_VALUE(grad_output.sizes() == at::IntArrayRef(p.out_sizes), op, "argument 'grad_output' must have shape ",
                 at::IntArrayRef(p.out_sizes), ", got ", grad_output.sizes());
  XK_CHECK_VALUE(output.sizes() == at::IntArrayRef(p.out_sizes), op, "argument 'output' must have shape ",
                 at::IntArrayRef(p.out_sizes), ", got ", output.sizes());
  return p;
}

void check_pack_linear_weight(const at::Tensor& weight) {
  const char* op = "pack_linear_weight";
  check_defined(op, "weight", weight);
  check_dtype_supported(op, "weight", weight);
  check_dim(op, "weight", weight, 2);
}

LinearProblem check_fused_linear_relu_packed(const at::Tensor& input, const at::Tensor& packed_weight,
                                             const std::optional<at::Tensor>& bias, int64_t out_features) {
  const char* op = "fused_linear_relu_packed";
  check_defined(op, "input", input);
  check_defined(op, "packed_weight", packed_weight);
  check_dtype_supported(op, "input", input);
  check_same_dtype_device(op, "packed_weight", packed_weight, "input", input);
  check_optional_same(op, "bias", bias, "input", input);
  XK_CHECK_VALUE(input.dim() >= 1, op, "argument 'input' must have at least 1 dimension [..., K], got a 0-D tensor");
  XK_CHECK_VALUE(out_features >= 0, op, "argument 'out_features' must be non-negative, got ", out_features);
  check_dim(op, "packed_weight", packed_weight, 3);
  const int64_t K = input.size(-1), C = linear_pack_columns(input.scalar_type());
  const std::vector<int64_t> expected{ceil_div(out_features, C), K, C};
  XK_CHECK_VALUE(packed_weight.sizes() == at::IntArrayRef(expected), op, "argument 'packed_weight' has shape ",
                 packed_weight.sizes(), " but pack_linear_weight of a [out_features=", out_features, ", K=", K,
                 "] weight has shape ", at::IntArrayRef(expected));
  XK_CHECK_VALUE(packed_weight.is_contiguous(), op,
                 "argument 'packed_weight' must be contiguous (as "
                 "pack_linear_weight returns it), got strides ",
                 packed_weight.strides());
  return linear_problem(op, input, K, out_features, bias, "out_features");
}

// ---------------------------------------------------------------- conv2d
// The problem of `input` convolved with a weight of sizes `wsizes` (named `wname` in errors); the output
// is channels_last when the input suggests it or `weight_channels_last`.
static Conv2dProblem conv2d_problem_sizes(const char* op, const at::Tensor& input, at::IntArrayRef wsizes,
                                          const char* wname, bool weight_channels_last, at::IntArrayRef stride,
                                          at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups) {
  check_pair(op, "stride", stride);
  check_pair(op, "padding", padding);
  check_pair(op, "dilation", dilation);
  XK_CHECK_VALUE(input.dim() == 3 || input.dim() == 4, op,
                 "argument 'input' must be 3-D (unbatched [C, H, W]) or 4-D ([N, C, H, W]), got ", input.dim(),
                 "-D tensor of shape ", input.sizes());
  XK_CHECK_VALUE(wsizes.size() == 4, op, "argument '", wname, "' must be 4-D, got ", wsizes.size(),
                 "-D tensor of shape ", wsizes);
  XK_CHECK_VALUE(stride[0] > 0 && stride[1] > 0, op, "argument 'stride' must be positive, got ", stride);
  XK_CHECK_VALUE(dilation[0] > 0 && dilation[1] > 0, op, "argument 'dilation' must be positive, got ", dilation);
  XK_CHECK_VALUE(padding[0] >= 0 && padding[1] >= 0, op, "argument 'padding' must be non-negative, got ", padding);
  XK_CHECK_VALUE(groups > 0, op, "argument 'groups' must be positive, got ", groups);

  Conv2dProblem p;
  p.batched = input.dim() == 4;
  const int64_t off = p.batched ? 1 : 0;
  p.N = p.batched ? input.size(0) : 1;
  p.C = input.size(off);
  p.H = input.size(off + 1);
  p.W = input.size(off + 2);
  XK_CHECK_VALUE(wsizes[0] >= 0 && wsizes[1] >= 0 && wsizes[2] >= 0 && wsizes[3] >= 0, op, "argument '", wname,
                 "' must have non-negative sizes, got ", wsizes);
  p.O = wsizes[0];
  p.KH = wsizes[2];
  p.KW = wsizes[3];
  p.groups = groups;
  p.stride = {stride[0], stride[1]};
  p.padding = {padding[0], padding[1]};
  p.dilation = {dilation[0], dilation[1]};

  XK_CHECK_VALUE(p.C % groups == 0, op, "argument 'groups'=", groups, " must divide the input channels C=", p.C);
  XK_CHECK_VALUE(p.O % groups == 0, op, "argument 'groups'=", groups,
                 " must divide the output channels weight.size(0)=", p.O);
  XK_CHECK_VALUE(wsizes[1] * groups == p.C, op, "argument '", wname, "' has shape ", wsizes,
                 ": expected weight.size(1) = C/groups = ", p.C, "/", groups, " = ", p.C / groups,
                 " for input of shape ", input.sizes());
  const int64_t eff_kh = p.dilation[0] * (p.KH - 1) + 1, eff_kw = p.dilation[1] * (p.KW - 1) + 1;
  const int64_t ph = p.H + 2 * p.padding[0], pw = p.W + 2 * p.padding[1];
  XK_CHECK_VALUE(eff_kh <= ph && eff_kw <= pw, op, "argument '", wname, "': the dilated kernel size (", eff_kh, ", ",
                 eff_kw, ") is larger than the padded input size (", ph, ", ", pw, ") for input of shape ",
                 input.sizes(), ", padding ", padding, ", dilation ", dilation);
  p.OH = conv2d_out_size(p.H, p.KH, p.stride[0], p.padding[0], p.dilation[0]);
  p.OW = conv2d_out_size(p.W, p.KW, p.stride[1], p.padding[1], p.dilation[1]);
  // The suggestion rule (CPU's, and the packed path's, which has no weight tensor); conv2d_problem replaces
  // it by ATen's rule for the tensors' device (conv2d_channels_last).
  p.channels_last =
      p.batched && (input.suggest_memory_format() == at::MemoryFormat::ChannelsLast || weight_channels_last);
  return p;
}

// The memory format of conv2d's output and of its input/weight gradients: PyTorch's own rule for these
// tensors' device, dtype and sizes. aten::convolution picks a backend (at::native::select_conv_backend:
// cuDNN, mkldnn, slow2d, depthwise, ...) and lays the output out as that backend prefers
// (at::native::_determine_backend_memory_format, ATen/native/ConvUtils.h); on CUDA that is
// cudnn_conv_suggest_memory_format (contiguous for float64, for instance), on CPU mkldnn's or slow2d's
// "input or weight suggests channels_last". Both functions are called here, so the rule is ATen's exactly
// (torch's fake tensors call the same pair; python/xkernels/ops.py _conv_memory_format mirrors this
// function for xkernels' fakes). Sizes aten::convolution rejects (no output or input channels, an empty
// kernel) keep the suggestion rule.
static bool conv2d_channels_last(const at::Tensor& input, const at::Tensor& weight, const Conv2dProblem& p) {
  if (!p.batched) return false;
  const bool suggested = input.suggest_memory_format() == at::MemoryFormat::ChannelsLast ||
                         weight.suggest_memory_format() == at::MemoryFormat::ChannelsLast;
  if (p.O == 0 || p.C == 0 || p.KH == 0 || p.KW == 0) return suggested;
  const std::vector<c10::SymInt> stride{p.stride[0], p.stride[1]}, padding{p.padding[0], p.padding[1]},
      dilation{p.dilation[0], p.dilation[1]}, output_padding{0, 0};
  const at::native::ConvBackend backend =
      at::native::select_conv_backend(input, weight, std::nullopt, stride, padding, dilation, /*transposed=*/false,
                                      output_padding, p.groups, std::nullopt);
  return at::native::_determine_backend_memory_format(input, weight, backend) == at::MemoryFormat::ChannelsLast;
}

static Conv2dProblem conv2d_problem(const char* op, const at::Tensor& input, const at::Tensor& weight,
                                    at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation,
                                    int64_t groups) {
  check_defined(op, "input", input);
  check_defined(op, "weight", weight);
  check_dtype_supported(op, "input", input);
  check_same_dtype_device(op, "weight", weight, "input", input);
  check_dim(op, "weight", weight, 4);
  Conv2dProblem p = conv2d_problem_sizes(op, input, weight.sizes(), "weight",
                                         weight.suggest_memory_format() == at::MemoryFormat::ChannelsLast, stride,
                                         padding, dilation, groups);
  p.channels_last = conv2d_channels_last(input, weight, p);
  return p;
}

static void check_conv2d_bias(const char* op, const at::Tensor& input, const std::optional<at::Tensor>& bias,
                              const Conv2dProblem& p) {
  check_optional_same(op, "bias", bias, "input", input);
  if (present(bias)) {
    XK_CHECK_VALUE(bias->dim() == 1 && bias->size(0) == p.O, op, "argument 'bias' must have shape [", p.O,
                   "] (out_channels), got ", bias->sizes());
  }
}

// conv2d_relu's residual: the output's shape, the input's dtype and device.
static void check_conv2d_residual(const char* op, const at::Tensor& input, const std::optional<at::Tensor>& residual,
                                  const Conv2dProblem& p) {
  check_optional_same(op, "residual", residual, "input", input);
  if (present(residual)) {
    const auto expect = p.out_sizes();
    XK_CHECK_VALUE(residual->sizes() == at::IntArrayRef(expect), op,
                   "argument 'residual' must have the output's shape ", at::IntArrayRef(expect), ", got ",
                   residual->sizes());
  }
}

Conv2dProblem check_conv2d(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                           at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups) {
  const char* op = "conv2d";
  Conv2dProblem p = conv2d_problem(op, input, weight, stride, padding, dilation, groups);
  check_conv2d_bias(op, input, bias, p);
  return p;
}

Conv2dProblem check_conv2d_relu(const at::Tensor& input, const at::Tensor& weight,
                                const std::optional<at::Tensor>& bias, at::IntArrayRef stride, at::IntArrayRef padding,
                                at::IntArrayRef dilation, int64_t groups, const std::optional<at::Tensor>& residual) {
  const char* op = "conv2d_relu";
  Conv2dProblem p = conv2d_problem(op, input, weight, stride, padding, dilation, groups);
  check_conv2d_bias(op, input, bias, p);
  check_conv2d_residual(op, input, residual, p);
  return p;
}

// ---- pre-packed conv2d weights
Conv2dPackLayout conv2d_pack_layout(at::IntArrayRef weight_shape, int64_t groups, at::ScalarType dtype) {
  Conv2dPackLayout l;
  const int64_t O = weight_shape[0], Cpg = weight_shape[1], KH = weight_shape[2], KW = weight_shape[3];
  const int64_t Opg = O / groups;
  l.lanes = conv2d_pack_lanes(dtype);
  l.group_lanes = conv2d_group_lanes_pay(l.lanes, groups, Opg);
  if (l.group_lanes) {
    l.pad = ceil_div(groups, l.lanes) * l.lanes;
    l.numel = KH * KW * Cpg * Opg * l.pad;
  } else {
    l.pad = l.lanes * conv2d_channel_vectors(Opg);
    l.numel = groups * ceil_div(Opg, l.pad) * l.pad * KH * KW * Cpg + 1;
    if (conv2d_winograd_packs(weight_shape, groups, dtype)) {
      const int64_t per_float = conv2d_winograd_elements_per_float(dtype);
      l.winograd = ceil_div(l.numel, 16 * per_float) * 16 * per_float;  // 64 bytes
      l.numel = l.winograd + 16 * ceil_div(Opg, l.pad) * l.pad * Cpg * per_float;
    }
  }
  return l;
}

at::Tensor conv2d_pack(const at::Tensor& weight, int64_t groups) {
  const Conv2dPackLayout l = conv2d_pack_layout(weight.sizes(), groups, weight.scalar_type());
  const int64_t G = groups, Opg = weight.size(0) / G, Cpg = weight.size(1), KH = weight.size(2), KW = weight.size(3);
  const at::Tensor w5 = weight.reshape({G, Opg, Cpg, KH, KW});
  if (l.group_lanes) {  // [G, Opg, Cpg, KH, KW] -> [KH, KW, Cpg, Opg, G_pad]
    at::Tensor packed = at::zeros({KH, KW, Cpg, Opg, l.pad}, weight.options());
    packed.narrow(4, 0, G).copy_(w5.permute({3, 4, 2, 1, 0}));
    return packed.view({-1});
  }
  // [G, Opg, Cpg, KH, KW] -> [G, KH, KW, Cpg, Opg], the output channels cut into panels of P: [G, npanels, KH, KW,
  // Cpg, P] (+ 1 zero).
  const at::Tensor src = w5.permute({0, 3, 4, 2, 1});
  const int64_t P = l.pad, npanels = ceil_div(Opg, P);
  const int64_t body = G * npanels * P * KH * KW * Cpg;
  at::Tensor packed = at::zeros({l.numel}, weight.options());
  const at::Tensor panels = packed.narrow(0, 0, body).view({G, npanels, KH, KW, Cpg, P});
  for (int64_t pi = 0; pi < npanels; ++pi) {
    const int64_t width = std::min(P, Opg - pi * P);
    panels.select(1, pi).narrow(4, 0, width).copy_(src.narrow(4, pi * P, width));
  }
  if (l.winograd > 0) {
    // U = G g G^T in the order of kernels/conv2d.hpp's wino_weight_transform (rows, then columns; the halvings
    // exact), as [16, npanels, Cpg, P].
    const at::Tensor g = weight.to(at::kFloat).permute({2, 3, 1, 0});  // [3, 3, Cpg, O], float32 for every type
    auto rows = [](const at::Tensor& a, int64_t dim) {                 // G applied along `dim` (size 3 -> 4)
      const at::Tensor a0 = a.select(dim, 0), a1 = a.select(dim, 1), a2 = a.select(dim, 2);
      return at::stack({a0, ((a0 + a1) + a2) * 0.5, ((a0 - a1) + a2) * 0.5, a2}, dim);
    };
    const at::Tensor u = rows(rows(g, 0), 1).reshape({16, Cpg, Opg});  // [16, Cpg, O]
    const at::Tensor dst =  // U's floats in the packed tensor's memory (a float32 view of it for 16-bit types)
        packed.narrow(0, l.winograd, l.numel - l.winograd).view(at::kFloat).view({16, npanels, Cpg, P});
    for (int64_t pi = 0; pi < npanels; ++pi) {
      const int64_t width = std::min(P, Opg - pi * P);
      dst.select(1, pi).narrow(2, 0, width).copy_(u.narrow(2, pi * P, width));
    }
  }
  return packed;
}

at::Tensor conv2d_unpack(const at::Tensor& packed, at::IntArrayRef weight_shape, int64_t groups) {
  const Conv2dPackLayout l = conv2d_pack_layout(weight_shape, groups, packed.scalar_type());
  const int64_t G = groups, O = weight_shape[0], Opg = O / G, Cpg = weight_shape[1];
  const int64_t KH = weight_shape[2], KW = weight_shape[3];
  if (l.group_lanes)  // [KH, KW, Cpg, Opg, G_pad] -> [G, Opg, Cpg, KH, KW]
    return packed.view({KH, KW, Cpg, Opg, l.pad}).narrow(4, 0, G).permute({4, 3, 2, 0, 1}).reshape(weight_shape);
  // [G, npanels, KH, KW, Cpg, P] (+ 1) -> [G, KH, KW, Cpg, npanels * P] -> [G, Opg, Cpg, KH, KW]
  const int64_t npanels = ceil_div(Opg, l.pad);
  return packed.narrow(0, 0, G * npanels * l.pad * KH * KW * Cpg)
      .view({G, npanels, KH, KW, Cpg, l.pad})
      .permute({0, 2, 3, 4, 1, 5})
      .reshape({G, KH, KW, Cpg, npanels * l.pad})
      .narrow(4, 0, Opg)
      .permute({0, 4, 3, 1, 2})
      .reshape(weight_shape);
}

void check_pack_conv2d_weight(const at::Tensor& weight, int64_t groups) {
  const char* op = "pack_conv2d_weight";
  check_defined(op, "weight", weight);
  check_dtype_supported(op, "weight", weight);
  check_dim(op, "weight", weight, 4);
  XK_CHECK(weight.device().is_cpu(), op,
           "argument 'weight' must be a CPU tensor (packed weights are for the CPU "
           "backends), got ",
           describe(weight));
  XK_CHECK_VALUE(groups > 0, op, "argument 'groups' must be positive, got ", groups);
  XK_CHECK_VALUE(weight.size(0) % groups == 0, op, "argument 'groups'=", groups,
                 " must divide the output channels weight.size(0)=", weight.size(0));
}

Conv2dProblem check_conv2d_packed(const at::Tensor& input, const at::Tensor& packed_weight,
                                  at::IntArrayRef weight_shape, const std::optional<at::Tensor>& bias,
                                  at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation,
                                  int64_t groups, const std::optional<at::Tensor>& residual) {
  const char* op = "conv2d_packed";
  check_defined(op, "input", input);
  check_defined(op, "packed_weight", packed_weight);
  check_dtype_supported(op, "input", input);
  check_same_dtype_device(op, "packed_weight", packed_weight, "input", input);
  XK_CHECK(input.device().is_cpu(), op,
           "argument 'input' must be a CPU tensor (packed weights are for the CPU "
           "backends), got ",
           describe(input));
  Conv2dProblem p =
      conv2d_problem_sizes(op, input, weight_shape, "weight_shape", false, stride, padding, dilation, groups);
  const int64_t numel = conv2d_pack_layout(weight_shape, groups, input.scalar_type()).numel;
  XK_CHECK_VALUE(packed_weight.dim() == 1 && packed_weight.numel() == numel && packed_weight.is_contiguous(), op,
                 "argument 'packed_weight' must be what pack_conv2d_weight returns for a weight of shape ",
                 weight_shape, " and groups=", groups, ": a contiguous 1-D tensor of ", numel, " elements, got ",
                 describe(packed_weight));
  check_conv2d_bias(op, input, bias, p);
  check_conv2d_residual(op, input, residual, p);
  return p;
}

Conv2dProblem check_conv2d_backward(const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
                                    at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation,
                                    int64_t groups) {
  const char* op = "conv2d_backward";
  Conv2dProblem p = conv2d_problem(op, input, weight, stride, padding, dilation, groups);
  check_defined(op, "grad_output", grad_output);
  check_same_dtype_device(op, "grad_output", grad_output, "input", input);
  const auto expect = p.out_sizes();
  XK_CHECK_VALUE(grad_output.sizes() == at::IntArrayRef(expect), op, "argument 'grad_output' must have shape ",
                 at::IntArrayRef(expect), ", got ", grad_output.sizes());
  return p;
}

std::array<std::array<int64_t, 2>, 2> conv2d_string_padding(const char* op, at::IntArrayRef kernel_size,
                                                            at::IntArrayRef stride, c10::string_view padding,
                                                            at::IntArrayRef dilation) {
  check_pair(op, "stride", stride);
  check_pair(op, "dilation", dilation);
  std::array<std::array<int64_t, 2>, 2> pads{};
  if (padding == "valid") return pads;
  XK_CHECK_VALUE(padding == "same", op, "argument 'padding' must be 'same', 'valid' or integers, got '",
                 std::string(padding), "'");
  XK_CHECK_VALUE(stride[0] == 1 && stride[1] == 1, op,
                 "padding='same' is not supported for strided convolutions, got stride ", stride);
  for (int d = 0; d < 2; ++d) {
    const int64_t total = dilation[d] * (kernel_size[d] - 1);
    pads[d][0] = floor_div(total, 2);
    pads[d][1] = total - pads[d][0];
  }
  return pads;
}

at::Tensor conv2d_as_4d_dense(const at::Tensor& t, const Conv2dProblem& p) {
  at::Tensor t4 = t.dim() == 3 ? t.unsqueeze(0) : t;
  return t4.contiguous(p.channels_last ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous);
}

// ---------------------------------------------------------------- layer_norm
LayerNormProblem check_layer_norm(const at::Tensor& input, at::IntArrayRef normalized_shape,
                                  const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
                                  double eps) {
  const char* op = "layer_norm";
  check_defined(op, "input", input);
  check_dtype_supported(op, "input", input);
  check_optional_same(op, "weight", weight, "input", input);
  check_optional_same(op, "bias", bias, "input", input);
  const int64_t nd = static_cast<int64_t>(normalized_shape.size());
  XK_CHECK_VALUE(nd >= 1, op, "argument 'normalized_shape' must have at least 1 dimension, got ", normalized_shape);
  for (int64_t s : normalized_shape)
    XK_CHECK_VALUE(s >= 0, op, "argument 'normalized_shape' must be non-negative, got ", normalized_shape);
  XK_CHECK_VALUE(input.dim() >= nd && input.sizes().slice(input.dim() - nd) == normalized_shape, op,
                 "argument 'normalized_shape'=", normalized_shape,
                 " must match the trailing dimensions of input of shape ", input.sizes());
  if (present(weight))
    XK_CHECK_VALUE(weight->sizes() == normalized_shape, op,
                   "argument 'weight' must have shape normalized_shape=", normalized_shape, ", got ", weight->sizes());
  if (present(bias))
    XK_CHECK_VALUE(bias->sizes() == normalized_shape, op,
                   "argument 'bias' must have shape normalized_shape=", normalized_shape, ", got ", bias->sizes());
  LayerNormProblem p;
  p.normalized_shape = normalized_shape.vec();
  p.M = 1;
  p.N = 1;
  for (int64_t d = 0; d < input.dim(); ++d) {
    if (d < input.dim() - nd) {
      p.M *= input.size(d);
      p.stat_sizes.push_back(input.size(d));
    } else {
      p.N *= input.size(d);
      p.stat_sizes.push_back(1);
    }
  }
  return p;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> layer_norm_empty_outputs(const at::Tensor& input,
                                                                        const LayerNormProblem& p, EmptyFn empty) {
  if (empty == nullptr)
    empty = [](at::IntArrayRef sizes, const at::TensorOptions& opts) { return at::empty(sizes, opts); };
  const auto stat_opts = input.options().dtype(layer_norm_stat_dtype(input.scalar_type()));
  return {empty(input.sizes(), input.options().memory_format(at::MemoryFormat::Contiguous)),
          empty(p.stat_sizes, stat_opts), empty(p.stat_sizes, stat_opts)};
}

void check_layer_norm_out(const at::Tensor& input, const std::optional<at::Tensor>& weight,
                          const std::optional<at::Tensor>& bias, const at::Tensor& out) {
  const char* op = "layer_norm";
  check_defined(op, "out", out);
  check_same_dtype_device(op, "out", out, "input", input);
  XK_CHECK_VALUE(out.sizes() == input.sizes(), op, "argument 'out' must have the input's shape ", input.sizes(),
                 ", got ", out.sizes(), " (out= tensors are not resized)");
  XK_CHECK(at::has_internal_overlap(out) != at::MemOverlap::Yes, op,
           "argument 'out' has elements that share memory (strides ", out.strides(),
           ", e.g. an expanded tensor); every element of out must be a separate memory location");
  const std::pair<const char*, const at::Tensor*> reads[] = {
      {"input", &input}, {"weight", present(weight) ? &*weight : nullptr}, {"bias", present(bias) ? &*bias : nullptr}};
  for (const auto& [name, t] : reads) {
    if (t == nullptr || t->numel() == 0 || out.numel() == 0) continue;
    const at::MemOverlapStatus st = at::get_overlap_status(out, *t);
    // Full: the very same tensor (in place, element by element: safe). TooHard (one of them is not
    // dense): the entry then computes from a dense copy or into a dense temporary, so no element is
    // read after it was written.
    XK_CHECK(st != at::MemOverlapStatus::Partial, op, "argument 'out' (", describe(out), ", storage offset ",
             out.storage_offset(), ") partially overlaps argument '", name, "' (", describe(*t), ", storage offset ",
             t->storage_offset(), "); out must be the same tensor as '", name, "' or share no memory with it");
  }
}

LayerNormProblem check_layer_norm_backward(const at::Tensor& grad_output, const at::Tensor& input,
                                           at::IntArrayRef normalized_shape, const at::Tensor& mean,
                                           const at::Tensor& rstd, const std::optional<at::Tensor>& weight,
                                           const std::optional<at::Tensor>& bias) {
  const char* op = "layer_norm_backward";
  LayerNormProblem p = check_layer_norm(input, normalized_shape, weight, bias, 0.0);
  check_defined(op, "grad_output", grad_output);
  check_same_dtype_device(op, "grad_output", grad_output, "input", input);
  XK_CHECK_VALUE(grad_output.sizes() == input.sizes(), op, "argument 'grad_output' must have the input's shape ",
                 input.sizes(), ", got ", grad_output.sizes());
  for (const auto& [name, t] : {std::pair<const char*, const at::Tensor&>{"mean", mean}, {"rstd", rstd}}) {
    check_defined(op, name, t);
    XK_CHECK_VALUE(t.numel() == p.M, op, "argument '", name, "' must have ", p.M, " elements (one per row), got shape ",
                   t.sizes());
    XK_CHECK(t.device() == input.device(), op, "argument '", name, "' is on device ", t.device(),
             " but 'input' is on device ", input.device());
  }
  return p;
}

}  // namespace xkernels
