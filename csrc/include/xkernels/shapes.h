// Shape rules and argument validation for every op, shared by all backends.
// Each check_* validates its arguments (naming op, argument and actual value on
// failure) and returns the problem sizes the kernels need.
#pragma once
#include <ATen/core/Tensor.h>
#include <c10/core/SymInt.h>
#include <c10/util/ArrayRef.h>
#include <array>
#include <optional>
#include <tuple>
#include <vector>

#include "xkernels/checks.h"

namespace xkernels {

// Host-side launch arithmetic.
inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Python's a // b (rounds toward minus infinity), for ints and for SymInts: a concrete SymInt divides as
// int64_t does (toward zero), a symbolic one as Python's floordiv.
inline int64_t floor_div(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }
inline c10::SymInt floor_div(const c10::SymInt& a, const c10::SymInt& b) {
  const auto ia = a.maybe_as_int(), ib = b.maybe_as_int();
  if (ia && ib) return c10::SymInt(floor_div(*ia, *ib));
  return a / b;
}

// ---------------------------------------------------------------- fused_linear_relu
// input [..., K] (any number of leading dims, or 1-D [K]); weight [N, K]; bias [N].
// The kernels see a 2-D problem: rows M = prod(leading dims), output [M, N].
struct LinearProblem {
  int64_t M = 0, N = 0, K = 0;
  std::vector<int64_t> out_sizes;  // input.sizes()[:-1] + [N]
};
LinearProblem check_fused_linear_relu(const at::Tensor& input, const at::Tensor& weight,
                                      const std::optional<at::Tensor>& bias);
// grad_output and output must have the forward output's shape.
LinearProblem check_fused_linear_relu_backward(const at::Tensor& grad_output, const at::Tensor& input,
                                               const at::Tensor& weight, const at::Tensor& output);

// Pre-packed weight (pack_linear_weight): W [N, K] as [ceil(N / C), K, C] contiguous with
// packed[p][k][c] = W[p * C + c][k] (zero past N), C = linear_pack_columns(dtype) — the column
// panels of the SYCL CPU GEMM (kernels/fused_linear_relu.hpp, PanelTile::kCols; checked there).
inline int64_t linear_pack_columns(at::ScalarType t) { return t == at::kDouble ? 32 : 64; }
void check_pack_linear_weight(const at::Tensor& weight);
// input [..., K], packed_weight from pack_linear_weight of an [out_features, K] weight, bias [out_features].
LinearProblem check_fused_linear_relu_packed(const at::Tensor& input, const at::Tensor& packed_weight,
                                             const std::optional<at::Tensor>& bias, int64_t out_features);

// ---------------------------------------------------------------- conv2d
// One spatial output size of a convolution with symmetric `padding`: the one definition of the rule, for the
// kernels (int64_t, conv2d_problem) and for the fake tensors under torch.compile (c10::SymInt, through the
// Python binding xkernels._C.conv2d_out_size that python/xkernels/ops.py calls). Not positive when the dilated
// kernel is larger than the padded input.
template <typename Int>
Int conv2d_out_size(const Int& size, const Int& kernel, const Int& stride, const Int& padding, const Int& dilation) {
  return floor_div(size + 2 * padding - dilation * (kernel - 1) - 1, stride) + 1;
}
// F.conv2d semantics: input [N, C, H, W] or unbatched [C, H, W]; weight [O, C/groups, KH, KW];
// bias [O]; symmetric padding (the 'same' overload pads the odd remainder first, like aten).
struct Conv2dProblem {
  int64_t N = 0, C = 0, H = 0, W = 0;  // input (batch 1 when unbatched)
  int64_t O = 0, KH = 0, KW = 0;       // weight
  int64_t OH = 0, OW = 0;              // output
  int64_t groups = 1;
  std::array<int64_t, 2> stride{1, 1}, padding{0, 0}, dilation{1, 1};
  bool batched = true;         // false: 3-D input and output
  bool channels_last = false;  // output (and preferred compute) memory format, PyTorch's rule
  int64_t C_per_group() const { return C / groups; }
  int64_t O_per_group() const { return O / groups; }
  std::vector<int64_t> out_sizes() const {
    return batched ? std::vector<int64_t>{N, O, OH, OW} : std::vector<int64_t>{O, OH, OW};
  }
};
Conv2dProblem check_conv2d(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                           at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups);
// conv2d_relu: check_conv2d (errors name conv2d_relu), plus residual: the output's shape, dtype and device.
Conv2dProblem check_conv2d_relu(const at::Tensor& input, const at::Tensor& weight,
                                const std::optional<at::Tensor>& bias, at::IntArrayRef stride, at::IntArrayRef padding,
                                at::IntArrayRef dilation, int64_t groups, const std::optional<at::Tensor>& residual);
Conv2dProblem check_conv2d_backward(const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
                                    at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation,
                                    int64_t groups);
// Pre-packed conv2d weights (pack_conv2d_weight / conv2d_packed; CPU tensors): the weight in the layout the
// SYCL conv2d forward kernels read (kernels/conv2d.hpp), made once instead of on every call. With S lanes
// (16; 8 for float64) and the channel vectors Q of the tile (4 from kWideMinChannels output channels per
// group, else 1), one of
//   lanes over channels, in panels of P = S*Q output channels: [G, ceil(O/G / P), KH, KW, C/G, P] (the last
//   panel of each group zero-padded), then one zero element;
//   lanes over groups (depthwise-like, conv2d_group_lanes_pay): [KH, KW, C/G, O/G, G zero-padded to S].
// Lanes over channels, float32, half or bfloat16, 3x3, one group, at least kConv2dWinogradMinChannels input and
// output channels also carry the Winograd F(2x2, 3x3) weights (conv2d_winograd_packs): after the trailing
// zero, zeros up to a multiple of 64 bytes (aligned vector loads), then U = G g G^T as [16, ceil(O / P), C, P]
// (kernels/conv2d.hpp, Winograd; the output-channel panels zero-padded), starting at element `winograd` (0:
// none). U is float32 for every element type: for half and bfloat16 it is computed from the weight widened to
// float32 and its floats are stored in the packed tensor's memory (two 16-bit elements each; `winograd` counts
// elements of the packed tensor's type). conv2d_packed runs it for stride 1, dilation 1 where sycl/conv2d.cpp's
// rule and XKERNELS_CONV_WINOGRAD say so.
inline int64_t conv2d_pack_lanes(at::ScalarType t) { return t == at::kDouble ? 8 : 16; }
constexpr int64_t kConv2dWideMinChannels = 48;  // the wide tile from this many channels per group
inline int64_t conv2d_channel_vectors(int64_t channels_per_group) {
  return channels_per_group >= kConv2dWideMinChannels ? 4 : 1;
}
// Lanes over groups keep more lanes busy than lanes over the dst_pg channels of one group:
// G / (G rounded up to S)  >  dst_pg / (dst_pg rounded up to S), cross-multiplied.
inline bool conv2d_group_lanes_pay(int64_t S, int64_t G, int64_t dst_pg) {
  return G * (ceil_div(dst_pg, S) * S) > dst_pg * (ceil_div(G, S) * S);
}
constexpr int64_t kConv2dWinogradMinChannels = 64;  // sycl/conv2d.cpp WinogradConfig: measured
inline bool conv2d_winograd_packs(at::IntArrayRef weight_shape, int64_t groups, at::ScalarType dtype) {
  return (dtype == at::kFloat || dtype == at::kHalf || dtype == at::kBFloat16) && groups == 1 && weight_shape[2] == 3 &&
         weight_shape[3] == 3 && weight_shape[0] >= kConv2dWinogradMinChannels &&
         weight_shape[1] >= kConv2dWinogradMinChannels;
}
// Elements of the packed tensor's type per float32 of U (1 for float32, 2 for half and bfloat16).
inline int64_t conv2d_winograd_elements_per_float(at::ScalarType dtype) {
  return static_cast<int64_t>(sizeof(float) / c10::elementSize(dtype));
}
struct Conv2dPackLayout {
  bool group_lanes = false;
  int64_t lanes = 0, pad = 0, numel = 0;  // pad: the panel width P (lanes over channels) or G padded
  int64_t winograd = 0;                   // element offset of the Winograd weights U, 0: none
};
Conv2dPackLayout conv2d_pack_layout(at::IntArrayRef weight_shape, int64_t groups, at::ScalarType dtype);
// The packed layout above made with torch ops (the reference backend's pack_conv2d_weight; the SYCL backends
// pack with kernels, kernels/conv2d.hpp), flat; and its inverse.
at::Tensor conv2d_pack(const at::Tensor& weight, int64_t groups);
at::Tensor conv2d_unpack(const at::Tensor& packed, at::IntArrayRef weight_shape, int64_t groups);
void check_pack_conv2d_weight(const at::Tensor& weight, int64_t groups);
Conv2dProblem check_conv2d_packed(const at::Tensor& input, const at::Tensor& packed_weight,
                                  at::IntArrayRef weight_shape, const std::optional<at::Tensor>& bias,
                                  at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation,
                                  int64_t groups, const std::optional<at::Tensor>& residual);
// Padding for the ops' .padding overloads ('same' / 'valid') of a kernel of `kernel_size` (KH, KW): per spatial
// dim the (before, after) amounts. Like aten, an odd total 'same' padding puts the extra element after.
std::array<std::array<int64_t, 2>, 2> conv2d_string_padding(const char* op, at::IntArrayRef kernel_size,
                                                            at::IntArrayRef stride, c10::string_view padding,
                                                            at::IntArrayRef dilation);
// Views `t` (4-D, or 3-D when !p.batched) as 4-D and makes it dense in the problem's memory format.
at::Tensor conv2d_as_4d_dense(const at::Tensor& t, const Conv2dProblem& p);

// ---------------------------------------------------------------- layer_norm
// F.layer_norm semantics: normalize over the trailing dims `normalized_shape`;
// rows M = prod(leading dims), row length N = prod(normalized_shape).
struct LayerNormProblem {
  int64_t M = 0, N = 0;
  std::vector<int64_t> normalized_shape;
  std::vector<int64_t> stat_sizes;  // leading dims + [1]*len(normalized_shape) (shape of mean / rstd)
};
LayerNormProblem check_layer_norm(const at::Tensor& input, at::IntArrayRef normalized_shape,
                                  const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
                                  double eps);
// layer_norm.out's `out`: defined, the input's dtype, device and shape (it is never resized: torch.library
// forbids custom ops to change an argument's metadata, which torch.compile relies on), no element written
// twice (no internal overlap), and either exactly the input / weight / bias or no memory shared with it.
// Any strides are accepted (a non-dense out is written through a temporary).
void check_layer_norm_out(const at::Tensor& input, const std::optional<at::Tensor>& weight,
                          const std::optional<at::Tensor>& bias, const at::Tensor& out);
LayerNormProblem check_layer_norm_backward(const at::Tensor& grad_output, const at::Tensor& input,
                                           at::IntArrayRef normalized_shape, const at::Tensor& mean,
                                           const at::Tensor& rstd, const std::optional<at::Tensor>& weight,
                                           const std::optional<at::Tensor>& bias);

// Dtype of layer_norm's saved mean / rstd: the accumulation type (float64 for float64, else float32).
inline at::ScalarType layer_norm_stat_dtype(at::ScalarType t) { return t == at::kDouble ? at::kDouble : at::kFloat; }
// Uninitialized (output, mean, rstd) of layer_norm_forward in the layout ops.h specifies (output dense,
// stats shaped p.stat_sizes in layer_norm_stat_dtype), for every backend to fill. `empty` allocates them
// (default at::empty; the SYCL backend passes its caching host allocator's).
using EmptyFn = at::Tensor (*)(at::IntArrayRef sizes, const at::TensorOptions& opts);
std::tuple<at::Tensor, at::Tensor, at::Tensor> layer_norm_empty_outputs(const at::Tensor& input,
                                                                        const LayerNormProblem& p,
                                                                        EmptyFn empty = nullptr);

// An optional parameter made dense, or left undefined when absent.
inline at::Tensor contiguous_if_defined(const at::Tensor& t) { return t.defined() ? t.contiguous() : t; }

// Returns the tensor if defined and present, else an undefined tensor.
inline at::Tensor value_or_undefined(const std::optional<at::Tensor>& t) {
  return (t.has_value() && t->defined()) ? *t : at::Tensor();
}

}  // namespace xkernels
