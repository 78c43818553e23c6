// conv2d on CUDA tensors: host wrappers (layouts, allocation, dtype dispatch, launch).
// Arguments arrive validated by entry.h. Implicit GEMM: the loaders of kernels/conv2d.cuh
// read input/weight/grad_output in place (NCHW or channels_last via explicit strides),
// run by the GEMM cores of kernels/gemm.cuh; no im2col buffer is ever allocated.
//
// Memory formats (ops.h, python/xkernels/ops.py fakes): output, grad_input and grad_weight are
// channels_last when p.channels_last (PyTorch's rule), else contiguous; unbatched (3-D)
// input gives 3-D output / grad_input.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

#include "kernels/conv2d.cuh"
#include "launch.cuh"
#include "xkernels/dispatch.h"
#include "xkernels/ops.h"

namespace xkernels::cuda {
namespace {

k::ConvGeometry geometry(const Conv2dProblem& p) {
  return {p.N,
          p.C,
          p.H,
          p.W,
          p.O,
          p.KH,
          p.KW,
          p.OH,
          p.OW,
          p.C_per_group(),
          p.O_per_group(),
          p.stride[0],
          p.stride[1],
          p.padding[0],
          p.padding[1],
          p.dilation[0],
          p.dilation[1]};
}

k::Strides4 strides4(const at::Tensor& t) {  // t is 4-D
  return {t.stride(0), t.stride(1), t.stride(2), t.stride(3)};
}

at::MemoryFormat problem_format(const Conv2dProblem& p) {
  return p.channels_last ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous;
}

// conv2d, or conv2d_relu (RELU: relu(conv + bias + r), r undefined or laid out exactly as y).
template <typename scalar_t, bool CL, bool RELU>
void conv2d_forward_impl(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, const at::Tensor& r,
                         at::Tensor& y, const Conv2dProblem& p, cudaStream_t stream) {
  using T = cuda_t<scalar_t>;
  const char* op = RELU ? "conv2d_relu" : "conv2d";
  const k::ConvGeometry geo = geometry(p);
  const k::ConvWeightA<T, CL> a{data_in<scalar_t>(w), strides4(w), geo};
  const k::ConvInputPatchB<T, CL> bp{data_in<scalar_t>(x), strides4(x), geo};
  const int64_t M = geo.Og, N = p.N * p.OH * p.OW, K = geo.Cg * p.KH * p.KW;
  const T* res = r.defined() ? data_in<scalar_t>(r) : nullptr;
  if (b.defined())
    run_gemm<T>(
        op, p.groups, M, N, K, a, bp,
        k::ConvOutputEpilogue<T, true, RELU>{data_out<scalar_t>(y), strides4(y), data_in<scalar_t>(b), geo, res}, x,
        stream);
  else
    run_gemm<T>(op, p.groups, M, N, K, a, bp,
                k::ConvOutputEpilogue<T, false, RELU>{data_out<scalar_t>(y), strides4(y), nullptr, geo, res}, x,
                stream);
}

template <typename scalar_t, bool CL>
void conv2d_backward_impl(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& w, at::Tensor& gi,
                          at::Tensor& gw, at::Tensor& gb, const Conv2dProblem& p, std::array<bool, 3> mask,
                          cudaStream_t stream) {
  using T = cuda_t<scalar_t>;
  const char* op = "conv2d_backward";
  const k::ConvGeometry geo = geometry(p);
  if (mask[0]) {  // dx: M = Cg, N = B*H*W, K = Og*KH*KW
    run_gemm<T>(op, p.groups, geo.Cg, p.N * p.H * p.W, geo.Og * p.KH * p.KW,
                k::ConvWeightTA<T, CL>{data_in<scalar_t>(w), strides4(w), geo},
                k::ConvGradOutputScatterB<T, CL>{data_in<scalar_t>(dy), strides4(dy), geo},
                k::ConvGradInputEpilogue<T>{data_out<scalar_t>(gi), strides4(gi), geo}, x, stream);
  }
  if (mask[1]) {  // dw: M = Og, N = Cg*KH*KW, K = B*OH*OW
    run_gemm<T>(op, p.groups, geo.Og, geo.Cg * p.KH * p.KW, p.N * p.OH * p.OW,
                k::ConvGradOutputA<T, CL>{data_in<scalar_t>(dy), strides4(dy), geo},
                k::ConvInputPatchTB<T, CL>{data_in<scalar_t>(x), strides4(x), geo},
                k::ConvGradWeightEpilogue<T, CL>{data_out<scalar_t>(gw), strides4(gw), geo}, x, stream);
  }
  if (mask[2]) {  // db(o) = sum over (b, oh, ow) of dy
    run_column_sum<k::acc_t<T>, !CL>(op, p.N * p.OH * p.OW, p.O,
                                     k::ConvGradOutputColumns<T>{data_in<scalar_t>(dy), strides4(dy), p.OH, p.OW},
                                     k::StoreVector<T>{data_out<scalar_t>(gb)}, x, stream);
  }
}

template <bool RELU>
at::Tensor forward(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias,
                   const at::Tensor& residual, const Conv2dProblem& p) {
  const c10::cuda::CUDAGuard guard(input.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  const auto fmt = problem_format(p);
  const at::Tensor x = conv2d_as_4d_dense(input, p);
  const at::Tensor w = weight.contiguous(fmt);
  const at::Tensor b = contiguous_if_defined(bias);
  const at::Tensor r = residual.defined() ? conv2d_as_4d_dense(residual, p) : at::Tensor();
  at::Tensor y = at::empty({p.N, p.O, p.OH, p.OW}, input.options().memory_format(fmt));
  XK_DISPATCH_FLOATING_TYPES(input.scalar_type(), RELU ? "xkernels.conv2d_relu" : "xkernels.conv2d", [&] {
    if (p.channels_last)
      conv2d_forward_impl<scalar_t, true, RELU>(x, w, b, r, y, p, stream);
    else
      conv2d_forward_impl<scalar_t, false, RELU>(x, w, b, r, y, p, stream);
  });
  return p.batched ? y : y.squeeze(0);
}

}  // namespace

at::Tensor conv2d(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias, const Conv2dProblem& p) {
  return forward<false>(input, weight, bias, at::Tensor(), p);
}

at::Tensor conv2d_relu(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias,
                       const at::Tensor& residual, const Conv2dProblem& p) {
  return forward<true>(input, weight, bias, residual, p);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> conv2d_backward(const at::Tensor& grad_output, const at::Tensor& input,
                                                               const at::Tensor& weight, const Conv2dProblem& p,
                                                               std::array<bool, 3> mask) {
  const c10::cuda::CUDAGuard guard(input.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  const auto fmt = problem_format(p);
  const at::Tensor dy = conv2d_as_4d_dense(grad_output, p);
  const at::Tensor x = conv2d_as_4d_dense(input, p);
  const at::Tensor w = weight.contiguous(fmt);
  at::Tensor gi =
      mask[0] ? at::empty({p.N, p.C, p.H, p.W}, input.options().memory_format(fmt)) : empty_grad_like(input);
  at::Tensor gw = mask[1] ? at::empty(weight.sizes(), weight.options().memory_format(fmt)) : empty_grad_like(weight);
  at::Tensor gb = mask[2] ? at::empty({p.O}, weight.options()) : empty_grad_like(weight);
  XK_DISPATCH_FLOATING_TYPES(input.scalar_type(), "xkernels.conv2d_backward", [&] {
    if (p.channels_last)
      conv2d_backward_impl<scalar_t, true>(dy, x, w, gi, gw, gb, p, mask, stream);
    else
      conv2d_backward_impl<scalar_t, false>(dy, x, w, gi, gw, gb, p, mask, stream);
  });
  if (mask[0] && !p.batched) gi = gi.squeeze(0);
  return {gi, gw, gb};
}

}  // namespace xkernels::cuda
