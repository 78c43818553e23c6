// fused_linear_relu on CUDA tensors: host wrappers (allocation, dtype dispatch, launch).
// Arguments arrive validated by entry.h. The GEMMs run on cuBLASLt's tensor-core kernels with the bias and
// ReLU fused into the GEMM's epilogue (blaslt.h), or, where the build has no cuBLASLt or it has no algorithm
// for a problem, on the own GEMM cores of kernels/gemm.cuh with the loaders / epilogues of
// kernels/fused_linear_relu.cuh.
//
// Row-major [M, K] x [N, K]^T as cuBLAS's column-major problem: out^T [N, M] = w [N, K] * x^T [K, M], i.e.
// A = w stored [K, N] (transposed), B = x stored [K, M], D = out stored [N, M]; the bias runs along D's rows.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

#include "blaslt.h"
#include "kernels/fused_linear_relu.cuh"
#include "launch.cuh"
#include "xkernels/dispatch.h"
#include "xkernels/ops.h"

namespace xkernels::cuda {
namespace {

// The bias as cuBLASLt's epilogue reads it: contiguous and 16-byte aligned (a view at an odd offset is copied).
at::Tensor aligned_bias(const at::Tensor& b) {
  if (!b.defined()) return b;
  const at::Tensor c = b.contiguous();
  return reinterpret_cast<uintptr_t>(c.const_data_ptr()) % 16 == 0 ? c : c.clone();
}

}  // namespace

at::Tensor fused_linear_relu(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias,
                             const LinearProblem& p) {
  const char* op = "fused_linear_relu";
  const c10::cuda::CUDAGuard guard(input.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  const at::Tensor x = input.reshape({p.M, p.K}).contiguous();
  const at::Tensor w = weight.contiguous();
  at::Tensor out = at::empty({p.M, p.N}, input.options());
  if (blaslt::enabled()) {
    const at::Tensor b = aligned_bias(bias);
    blaslt::Gemm g;
    g.trans_a = true;
    g.m = p.N, g.n = p.M, g.k = p.K;
    g.a = w.const_data_ptr(), g.lda = p.K;
    g.b = x.const_data_ptr(), g.ldb = p.K;
    g.d = out.mutable_data_ptr(), g.ldd = p.N;
    g.bias = b.defined() ? b.const_data_ptr() : nullptr;
    g.relu = true;
    if (blaslt::gemm(op, input.scalar_type(), g, stream)) return out.view(p.out_sizes);
  }
  const at::Tensor b = contiguous_if_defined(bias);
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
    bool dx_done = false, dw_done = false;
    if (blaslt::enabled() && (mask[0] || mask[1])) {
      // The masked gradient written out once [M, N] (stored [N, M] column-major), read by both GEMMs.
      at::Tensor gm = at::empty({p.M, p.N}, dy.options());
      run_materialize<T>(g, data_out<scalar_t>(gm), p.M, p.N, stream);
      blaslt::Gemm lt;
      lt.b = gm.const_data_ptr(), lt.ldb = p.N;
      if (mask[0]) {  // dx^T [K, M] = w stored [K, N] * g stored [N, M]
        lt.m = p.K, lt.n = p.M, lt.k = p.N;
        lt.a = w.const_data_ptr(), lt.lda = p.K;
        lt.d = gi.mutable_data_ptr(), lt.ldd = p.K;
        dx_done = blaslt::gemm(op, input.scalar_type(), lt, stream);
      }
      if (mask[1]) {  // dw^T [K, N] = x stored [K, M] * (g stored [N, M])^T
        lt.trans_b = true;
        lt.m = p.K, lt.n = p.N, lt.k = p.M;
        lt.a = x.const_data_ptr(), lt.lda = p.K;
        lt.d = gw.mutable_data_ptr(), lt.ldd = p.K;
        dw_done = blaslt::gemm(op, input.scalar_type(), lt, stream);
      }
    }
    if (mask[0] && !dx_done)  // dx[M, K] = g[M, N] * w[N, K]
      run_gemm<T>(op, 1, p.M, p.K, p.N, k::MaskedGradA<T>{g}, k::RowMajorB<T>{data_in<scalar_t>(w), p.K},
                  k::StoreMatrix<T>{data_out<scalar_t>(gi), p.K}, input, stream);
    if (mask[1] && !dw_done)  // dw[N, K] = g^T[N, M] * x[M, K]
      run_gemm<T>(op, 1, p.N, p.K, p.M, k::MaskedGradTA<T>{g}, k::RowMajorB<T>{data_in<scalar_t>(x), p.K},
                  k::StoreMatrix<T>{data_out<scalar_t>(gw), p.K}, input, stream);
    if (mask[2])  // db[N] = column sums of g
      run_column_sum<k::acc_t<T>, false>(op, p.M, p.N, k::MaskedGradColumns<T>{g},
                                         k::StoreVector<T>{data_out<scalar_t>(gb)}, input, stream);
  });
  return {mask[0] ? gi.view(input.sizes()) : gi, gw, gb};
}

}  // namespace xkernels::cuda
