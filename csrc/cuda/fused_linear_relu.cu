// fused_linear_relu on CUDA tensors: host wrappers (allocation, dtype dispatch, launch).
// Arguments arrive validated by entry.h; the math lives in kernels/fused_linear_relu.cuh
// (operand loaders / epilogues) run by the GEMM cores of kernels/gemm.cuh.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

#include "kernels/fused_linear_relu.cuh"
#include "launch.cuh"
#include "xkernels/dispatch.h"
#include "xkernels/ops.h"

namespace xkernels::cuda {

at::Tensor fused_linear_relu(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias,
                             const LinearProblem& p) {
  const char* op = "fused_linear_relu";
  const c10::cuda::CUDAGuard guard(input.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  const at::Tensor x = input.reshape({p.M, p.K}).contiguous();
  const at::Tensor w = weight.contiguous();
  const at::Tensor b = contiguous_if_defined(bias);
  at::Tensor out = at::empty({p.M, p.N}, input.options());
  XK_DISPATCH_FLOATING_TYPES(input.scalar_type(), "xkernels.fused_linear_relu", [&] {
    using T = cuda_t<scalar_t>;
    const k::RowMajorA<T> a{data_in<scalar_t>(x), p.K};
    const k::TransposedB<T> bt{data_in<scalar_t>(w), p.K};
    if (b.defined())
      run_gemm<T>(op, 1, p.M, p.N, p.K, a, bt,
                  k::LinearReluEpilogue<T, true>{data_out<scalar_t>(out), data_in<scalar_t>(b), p.N}, out, stream);
    else
      run_gemm<T>(op, 1, p.M, p.N, p.K, a, bt, k::LinearReluEpilogue<T, false>{data_out<scalar_t>(out), nullptr, p.N},
                  out, stream);
  });
  return out.view(p.out_sizes);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> fused_linear_relu_backward(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, const at::Tensor& output,
    const LinearProblem& p, std::array<bool, 3> mask) {
  const char* op = "fused_linear_relu_backward";
  const c10::cuda::CUDAGuard guard(input.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  const at::Tensor dy = grad_output.reshape({p.M, p.N}).contiguous();
  const at::Tensor out = output.reshape({p.M, p.N}).contiguous();
  const at::Tensor x = input.reshape({p.M, p.K}).contiguous();
  const at::Tensor w = weight.contiguous();
  at::Tensor gi = mask[0] ? at::empty({p.M, p.K}, input.options()) : empty_grad_like(input);
  at::Tensor gw = mask[1] ? at::empty({p.N, p.K}, weight.options()) : empty_grad_like(weight);
  at::Tensor gb = mask[2] ? at::empty({p.N}, weight.options()) : empty_grad_like(weight);
  XK_DISPATCH_FLOATING_TYPES(input.scalar_type(), "xkernels.fused_linear_relu_backward", [&] {
    using T = cuda_t<scalar_t>;
    const k::MaskedGrad<T> g{data_in<scalar_t>(dy), data_in<scalar_t>(out), p.N};
    if (mask[0])  // dx[M, K] = g[M, N] * w[N, K]
      run_gemm<T>(op, 1, p.M, p.K, p.N, k::MaskedGradA<T>{g}, k::RowMajorB<T>{data_in<scalar_t>(w), p.K},
                  k::StoreMatrix<T>{data_out<scalar_t>(gi), p.K}, input, stream);
    if (mask[1])  // dw[N, K] = g^T[N, M] * x[M, K]
      run_gemm<T>(op, 1, p.N, p.K, p.M, k::MaskedGradTA<T>{g}, k::RowMajorB<T>{data_in<scalar_t>(x), p.K},
                  k::StoreMatrix<T>{data_out<scalar_t>(gw), p.K}, input, stream);
    if (mask[2])  // db[N] = column sums of g
      run_column_sum<k::acc_t<T>, false>(op, p.M, p.N, k::MaskedGradColumns<T>{g},
                                         k::StoreVector<T>{data_out<scalar_t>(gb)}, input, stream);
  });
  return {mask[0] ? gi.view(input.sizes()) : gi, gw, gb};
}

}  // namespace xkernels::cuda
