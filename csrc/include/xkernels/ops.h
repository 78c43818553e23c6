// The per-backend implementation interface. Every backend namespace
// (xkernels::reference, xkernels::sycl_backend, xkernels::cuda) provides these
// functions with identical signatures. They receive arguments already validated
// by the registered dispatcher function (check_* in shapes.h) plus the problem
// sizes; optional tensors arrive as undefined at::Tensor() when absent.
// Outputs with numel() == 0 never reach a backend.
//
// Conventions:
//  * fused_linear_relu: out = relu(input @ weight.T + bias), shape p.out_sizes, contiguous.
//  * *_backward(mask): returns (grad_input, grad_weight, grad_bias); a grad whose mask bit
//    is false is returned as an empty tensor (numel 0). fused_linear_relu's backward takes
//    the forward output for the ReLU mask: grad flows where NOT (output <= 0), i.e. also
//    where the output is NaN, exactly as torch.relu's backward (threshold_backward).
//  * conv2d: output in p.channels_last memory format, 3-D when !p.batched.
//  * conv2d_relu: relu(conv2d(input, weight, bias) + residual), the same output layout as conv2d;
//    residual (optional) has the output's sizes, any strides. The sum is formed in the accumulation
//    type and rounded once; relu keeps NaN (as torch.relu).
//  * layer_norm_forward_out: writes the output into `out` (dense, contiguous, the input's sizes
//    and dtype; it may be the input itself — in place — but shares no other memory with the
//    inputs) and, when defined, the statistics into mean/rstd (p.stat_sizes, contiguous, the
//    accumulation dtype: float32 for float16/bfloat16/float32 input, float64 for float64).
//    Undefined mean/rstd (layer_norm.out, inference) are not computed into memory at all.
//    The entry allocates: layer_norm_forward's (output, mean, rstd) come from layer_norm_empty_outputs.
#pragma once
#include <ATen/core/Tensor.h>
#include <array>
#include <tuple>

#include "xkernels/shapes.h"

// Every backend declares the same functions, written out per namespace (grep finds each one).
namespace xkernels {

// csrc/cpu/: the plain C++ oracle.
namespace reference {
at::Tensor fused_linear_relu(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias,
                             const LinearProblem& p);
std::tuple<at::Tensor, at::Tensor, at::Tensor> fused_linear_relu_backward(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, const at::Tensor& output,
    const LinearProblem& p, std::array<bool, 3> mask);
at::Tensor conv2d(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias, const Conv2dProblem& p);
at::Tensor conv2d_relu(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias,
                       const at::Tensor& residual, const Conv2dProblem& p);
// Pre-packed conv2d weights (CPU tensors only): pack_conv2d_weight returns the weight in shapes.h's
// conv2d_pack layout; conv2d_packed is conv2d (relu = false) or conv2d_relu (true) with it.
at::Tensor pack_conv2d_weight(const at::Tensor& weight, int64_t groups);
at::Tensor conv2d_packed(const at::Tensor& input, const at::Tensor& packed_weight, const at::Tensor& bias,
                         const at::Tensor& residual, bool relu, const Conv2dProblem& p);
std::tuple<at::Tensor, at::Tensor, at::Tensor> conv2d_backward(const at::Tensor& grad_output, const at::Tensor& input,
                                                               const at::Tensor& weight, const Conv2dProblem& p,
                                                               std::array<bool, 3> mask);
void layer_norm_forward_out(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias, double eps,
                            const LayerNormProblem& p, const at::Tensor& out, const at::Tensor& mean,
                            const at::Tensor& rstd);
std::tuple<at::Tensor, at::Tensor, at::Tensor> layer_norm_backward(const at::Tensor& grad_output,
                                                                   const at::Tensor& input, const at::Tensor& mean,
                                                                   const at::Tensor& rstd, const at::Tensor& weight,
                                                                   const LayerNormProblem& p, std::array<bool, 3> mask);
// Pre-packed linear weights (CPU tensors only): pack_linear_weight returns the weight [N, K] in the
// layout of shapes.h (linear_pack_columns); fused_linear_relu_packed is fused_linear_relu with it
// (p from check_fused_linear_relu_packed).
at::Tensor pack_linear_weight(const at::Tensor& weight);
at::Tensor fused_linear_relu_packed(const at::Tensor& input, const at::Tensor& packed_weight, const at::Tensor& bias,
                                    const LinearProblem& p);
}  // namespace reference

// csrc/sycl/: the SYCL kernels on DPC++ (run-time compiled), CPU / XPU / CUDA tensors.
namespace sycl_backend {
at::Tensor fused_linear_relu(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias,
                             const LinearProblem& p);
std::tuple<at::Tensor, at::Tensor, at::Tensor> fused_linear_relu_backward(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, const at::Tensor& output,
    const LinearProblem& p, std::array<bool, 3> mask);
at::Tensor conv2d(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias, const Conv2dProblem& p);
at::Tensor conv2d_relu(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias,
                       const at::Tensor& residual, const Conv2dProblem& p);
// Pre-packed conv2d weights (CPU tensors only): pack_conv2d_weight returns the weight in shapes.h's
// conv2d_pack layout; conv2d_packed is conv2d (relu = false) or conv2d_relu (true) with it.
at::Tensor pack_conv2d_weight(const at::Tensor& weight, int64_t groups);
at::Tensor conv2d_packed(const at::Tensor& input, const at::Tensor& packed_weight, const at::Tensor& bias,
                         const at::Tensor& residual, bool relu, const Conv2dProblem& p);
std::tuple<at::Tensor, at::Tensor, at::Tensor> conv2d_backward(const at::Tensor& grad_output, const at::Tensor& input,
                                                               const at::Tensor& weight, const Conv2dProblem& p,
                                                               std::array<bool, 3> mask);
void layer_norm_forward_out(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias, double eps,
                            const LayerNormProblem& p, const at::Tensor& out, const at::Tensor& mean,
                            const at::Tensor& rstd);
std::tuple<at::Tensor, at::Tensor, at::Tensor> layer_norm_backward(const at::Tensor& grad_output,
                                                                   const at::Tensor& input, const at::Tensor& mean,
                                                                   const at::Tensor& rstd, const at::Tensor& weight,
                                                                   const LayerNormProblem& p, std::array<bool, 3> mask);
// Pre-packed linear weights (CPU tensors only): pack_linear_weight returns the weight [N, K] in the
// layout of shapes.h (linear_pack_columns); fused_linear_relu_packed is fused_linear_relu with it
// (p from check_fused_linear_relu_packed).
at::Tensor pack_linear_weight(const at::Tensor& weight);
at::Tensor fused_linear_relu_packed(const at::Tensor& input, const at::Tensor& packed_weight, const at::Tensor& bias,
                                    const LinearProblem& p);
// at::empty through the SYCL backend's caching host allocator for CPU tensors (csrc/sycl/host_alloc.h).
at::Tensor empty(at::IntArrayRef sizes, const at::TensorOptions& opts);
}  // namespace sycl_backend

// csrc/sycl/ host wrappers with AdaptiveCpp's ahead-of-time kernels (the acpp conformance backend), CPU tensors.
namespace acpp_backend {
at::Tensor fused_linear_relu(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias,
                             const LinearProblem& p);
std::tuple<at::Tensor, at::Tensor, at::Tensor> fused_linear_relu_backward(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, const at::Tensor& output,
    const LinearProblem& p, std::array<bool, 3> mask);
at::Tensor conv2d(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias, const Conv2dProblem& p);
at::Tensor conv2d_relu(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias,
                       const at::Tensor& residual, const Conv2dProblem& p);
// Pre-packed conv2d weights (CPU tensors only): pack_conv2d_weight returns the weight in shapes.h's
// conv2d_pack layout; conv2d_packed is conv2d (relu = false) or conv2d_relu (true) with it.
at::Tensor pack_conv2d_weight(const at::Tensor& weight, int64_t groups);
at::Tensor conv2d_packed(const at::Tensor& input, const at::Tensor& packed_weight, const at::Tensor& bias,
                         const at::Tensor& residual, bool relu, const Conv2dProblem& p);
std::tuple<at::Tensor, at::Tensor, at::Tensor> conv2d_backward(const at::Tensor& grad_output, const at::Tensor& input,
                                                               const at::Tensor& weight, const Conv2dProblem& p,
                                                               std::array<bool, 3> mask);
void layer_norm_forward_out(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias, double eps,
                            const LayerNormProblem& p, const at::Tensor& out, const at::Tensor& mean,
                            const at::Tensor& rstd);
std::tuple<at::Tensor, at::Tensor, at::Tensor> layer_norm_backward(const at::Tensor& grad_output,
                                                                   const at::Tensor& input, const at::Tensor& mean,
                                                                   const at::Tensor& rstd, const at::Tensor& weight,
                                                                   const LayerNormProblem& p, std::array<bool, 3> mask);
// Pre-packed linear weights (CPU tensors only): pack_linear_weight returns the weight [N, K] in the
// layout of shapes.h (linear_pack_columns); fused_linear_relu_packed is fused_linear_relu with it
// (p from check_fused_linear_relu_packed).
at::Tensor pack_linear_weight(const at::Tensor& weight);
at::Tensor fused_linear_relu_packed(const at::Tensor& input, const at::Tensor& packed_weight, const at::Tensor& bias,
                                    const LinearProblem& p);
}  // namespace acpp_backend

// csrc/cuda/: native CUDA kernels, CUDA tensors.
namespace cuda {
at::Tensor fused_linear_relu(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias,
                             const LinearProblem& p);
std::tuple<at::Tensor, at::Tensor, at::Tensor> fused_linear_relu_backward(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, const at::Tensor& output,
    const LinearProblem& p, std::array<bool, 3> mask);
at::Tensor conv2d(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias, const Conv2dProblem& p);
at::Tensor conv2d_relu(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias,
                       const at::Tensor& residual, const Conv2dProblem& p);
std::tuple<at::Tensor, at::Tensor, at::Tensor> conv2d_backward(const at::Tensor& grad_output, const at::Tensor& input,
                                                               const at::Tensor& weight, const Conv2dProblem& p,
                                                               std::array<bool, 3> mask);
void layer_norm_forward_out(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias, double eps,
                            const LayerNormProblem& p, const at::Tensor& out, const at::Tensor& mean,
                            const at::Tensor& rstd);
std::tuple<at::Tensor, at::Tensor, at::Tensor> layer_norm_backward(const at::Tensor& grad_output,
                                                                   const at::Tensor& input, const at::Tensor& mean,
                                                                   const at::Tensor& rstd, const at::Tensor& weight,
                                                                   const LayerNormProblem& p, std::array<bool, 3> mask);
}  // namespace cuda

}  // namespace xkernels
