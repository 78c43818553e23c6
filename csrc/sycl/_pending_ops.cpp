// TEMPORARY: placeholders for the SYCL ops other branches implement (sycl-linear:
// fused_linear_relu; sycl-conv: conv2d), so that this branch links. Deleted at merge.
#include "xkernels/ops.h"

#include <c10/util/Exception.h>

namespace xkernels::sycl_backend {

at::Tensor fused_linear_relu(const at::Tensor&, const at::Tensor&, const at::Tensor&, const LinearProblem&) {
  TORCH_CHECK(false, "xkernels.fused_linear_relu: the SYCL implementation is not implemented yet");
}
std::tuple<at::Tensor, at::Tensor, at::Tensor> fused_linear_relu_backward(const at::Tensor&, const at::Tensor&,
                                                                          const at::Tensor&, const at::Tensor&,
                                                                          const LinearProblem&, std::array<bool, 3>) {
  TORCH_CHECK(false, "xkernels.fused_linear_relu_backward: the SYCL implementation is not implemented yet");
}
at::Tensor conv2d(const at::Tensor&, const at::Tensor&, const at::Tensor&, const Conv2dProblem&) {
  TORCH_CHECK(false, "xkernels.conv2d: the SYCL implementation is not implemented yet");
}
std::tuple<at::Tensor, at::Tensor, at::Tensor> conv2d_backward(const at::Tensor&, const at::Tensor&,
                                                               const at::Tensor&, const Conv2dProblem&,
                                                               std::array<bool, 3>) {
  TORCH_CHECK(false, "xkernels.conv2d_backward: the SYCL implementation is not implemented yet");
}

}  // namespace xkernels::sycl_backend
