// XPU dispatch key: every xkernels op on XPU tensors runs the SYCL backend on torch's
// current XPU stream's queue (runtime.cpp: queue_for), behind a device guard so that
// allocations and torch's current-stream queries refer to the tensors' device.
// Compiled only when torch was built with XPU (XKERNELS_WITH_XPU).
#ifdef XKERNELS_WITH_XPU
#include <ATen/DeviceGuard.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <utility>

#include "xkernels/entry.h"

namespace xkernels::sycl_backend {
namespace {

// Calls Fn with the device of its first argument (a tensor: input or grad_output; the
// entry checks that all tensors share it) made current.
template <auto Fn>
struct WithDeviceGuard;
template <typename R, typename First, typename... Rest, R (*Fn)(First, Rest...)>
struct WithDeviceGuard<Fn> {
  static R call(First first, Rest... rest) {
    const c10::OptionalDeviceGuard guard(at::device_of(first));
    return Fn(std::forward<First>(first), std::forward<Rest>(rest)...);
  }
};

}  // namespace
}  // namespace xkernels::sycl_backend

TORCH_LIBRARY_IMPL(xkernels, XPU, m) {
  using namespace xkernels;
  using sycl_backend::WithDeviceGuard;
  m.impl("fused_linear_relu", &WithDeviceGuard<&entry::fused_linear_relu<choose_xpu_backend>>::call);
  m.impl("fused_linear_relu_backward", &WithDeviceGuard<&entry::fused_linear_relu_backward<choose_xpu_backend>>::call);
  m.impl("conv2d", &WithDeviceGuard<&entry::conv2d<choose_xpu_backend>>::call);
  m.impl("conv2d_relu", &WithDeviceGuard<&entry::conv2d_relu<choose_xpu_backend>>::call);
  m.impl("conv2d_backward", &WithDeviceGuard<&entry::conv2d_backward<choose_xpu_backend>>::call);
  m.impl("layer_norm_forward", &WithDeviceGuard<&entry::layer_norm_forward<choose_xpu_backend>>::call);
  m.impl("layer_norm_backward", &WithDeviceGuard<&entry::layer_norm_backward<choose_xpu_backend>>::call);
  m.impl("layer_norm.out", &WithDeviceGuard<&entry::layer_norm_out<choose_xpu_backend>>::call);
}
#endif  // XKERNELS_WITH_XPU
