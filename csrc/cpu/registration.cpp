// Every op's CPU dispatch-key implementation, in one place. Each is the op's registered entry function
// (xkernels/entry.h: validation, empty sizes) with the CPU chooser, which picks the reference kernels
// (csrc/cpu/), the SYCL CPU device or, when selected, the acpp backend.
#include <torch/library.h>

#include "xkernels/backend.h"
#include "xkernels/entry.h"

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
