// layer_norm on CUDA tensors: host wrappers (allocation, dtype dispatch, launch geometry).
// Arguments arrive validated by entry.h; the kernels live in kernels/layer_norm.cuh.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

#include "kernels/layer_norm.cuh"
#include "launch.cuh"
#include "layer_norm_launch.h"
#include "xkernels/dispatch.h"
#include "xkernels/ops.h"

namespace xkernels::cuda {

void layer_norm_forward_out(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias, double eps,
                            const LayerNormProblem& p, const at::Tensor& out, const at::Tensor& mean,
                            const at::Tensor& rstd) {
  const c10::cuda::CUDAGuard guard(input.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  const at::Tensor x = input.contiguous();
  const at::Tensor w = contiguous_if_defined(weight);
  const at::Tensor b = contiguous_if_defined(bias);
  // The kernel's x and y are __restrict__: layer_norm.out in place (out is the input) goes
  // through a temporary, copied back on the same stream.
  const bool in_place = out.data_ptr() == x.data_ptr();
  at::Tensor y = in_place ? at::empty(out.sizes(), out.options()) : out;
  const RowLaunch L = row_launch(p.M, p.N);
  const RowsLaunch R = rows_launch(p.M, p.N, x.element_size(),
                                   {x.const_data_ptr(), w.defined() ? w.const_data_ptr() : nullptr,
                                    b.defined() ? b.const_data_ptr() : nullptr, y.const_data_ptr()});
  XK_DISPATCH_FLOATING_TYPES(input.scalar_type(), "xkernels.layer_norm", [&] {
    using T = cuda_t<scalar_t>;
    using Acc = k::acc_t<T>;
    if (R.vecs > 0) {
      with_rows_kernel<LayerNormForwardRows, T>(R, [&](auto kernel) {
        kernel<<<R.grid, R.block, 0, stream>>>(
            data_in<scalar_t>(x), data_in<scalar_t>(w), data_in<scalar_t>(b), data_out<scalar_t>(y),
            mean.defined() ? mean.mutable_data_ptr<Acc>() : nullptr,
            rstd.defined() ? rstd.mutable_data_ptr<Acc>() : nullptr, p.M, p.N, static_cast<Acc>(eps));
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      });
      return;
    }
    auto kernel = L.block_row ? k::layer_norm_forward_kernel<T, true> : k::layer_norm_forward_kernel<T, false>;
    kernel<<<L.grid, L.block, 0, stream>>>(
        data_in<scalar_t>(x), data_in<scalar_t>(w), data_in<scalar_t>(b), data_out<scalar_t>(y),
        mean.defined() ? mean.mutable_data_ptr<Acc>() : nullptr,  // null: not saved
        rstd.defined() ? rstd.mutable_data_ptr<Acc>() : nullptr, p.M, p.N, static_cast<Acc>(eps));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  if (in_place) out.copy_(y);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> layer_norm_backward(const at::Tensor& grad_output,
                                                                   const at::Tensor& input, const at::Tensor& mean,
                                                                   const at::Tensor& rstd, const at::Tensor& weight,
                                                                   const LayerNormProblem& p,
                                                                   std::array<bool, 3> mask) {
  const char* op = "layer_norm_backward";
  const c10::cuda::CUDAGuard guard(input.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  const at::Tensor x = input.contiguous(), dy = grad_output.contiguous();
  const at::Tensor w = contiguous_if_defined(weight);
  const at::ScalarType sd = layer_norm_stat_dtype(input.scalar_type());
  const at::Tensor mu = mean.to(sd).contiguous(), rs = rstd.to(sd).contiguous();
  at::Tensor gi = mask[0] ? at::empty(input.sizes(), input.options()) : empty_grad_like(input);
  at::Tensor gw = mask[1] ? at::empty(p.normalized_shape, input.options()) : empty_grad_like(input);
  at::Tensor gb = mask[2] ? at::empty(p.normalized_shape, input.options()) : empty_grad_like(input);
  const RowLaunch L = row_launch(p.M, p.N);
  const RowsLaunch R = rows_launch(p.M, p.N, x.element_size(),
                                   {x.const_data_ptr(), dy.const_data_ptr(), w.defined() ? w.const_data_ptr() : nullptr,
                                    mask[0] ? gi.const_data_ptr() : nullptr});
  XK_DISPATCH_FLOATING_TYPES(input.scalar_type(), "xkernels.layer_norm_backward", [&] {
    using T = cuda_t<scalar_t>;
    using Acc = k::acc_t<T>;
    const Acc* MU = mu.const_data_ptr<Acc>();
    const Acc* RS = rs.const_data_ptr<Acc>();
    if (mask[0] && R.vecs > 0) {
      with_rows_kernel<LayerNormBackwardInputRows, T>(R, [&](auto kernel) {
        kernel<<<R.grid, R.block, 0, stream>>>(data_in<scalar_t>(dy), data_in<scalar_t>(x), MU, RS,
                                               data_in<scalar_t>(w), data_out<scalar_t>(gi), p.M, p.N);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      });
    } else if (mask[0]) {
      auto kernel =
          L.block_row ? k::layer_norm_backward_input_kernel<T, true> : k::layer_norm_backward_input_kernel<T, false>;
      kernel<<<L.grid, L.block, 0, stream>>>(data_in<scalar_t>(dy), data_in<scalar_t>(x), MU, RS, data_in<scalar_t>(w),
                                             data_out<scalar_t>(gi), p.M, p.N);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
    if (mask[1])
      run_column_sum<Acc, false>(
          op, p.M, p.N, k::LayerNormGradWeightLoad<T>{data_in<scalar_t>(dy), data_in<scalar_t>(x), MU, RS, p.N},
          k::StoreVector<T>{data_out<scalar_t>(gw)}, input, stream);
    if (mask[2])
      run_column_sum<Acc, false>(op, p.M, p.N, k::LayerNormGradBiasLoad<T>{data_in<scalar_t>(dy), p.N},
                                 k::StoreVector<T>{data_out<scalar_t>(gb)}, input, stream);
  });
  return {gi, gw, gb};
}

}  // namespace xkernels::cuda
