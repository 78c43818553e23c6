// CUDA dispatch key: backend selection for CUDA tensors and the registration of the
// shared entry functions (entry.h) for every op. Plain C++ (no device code): compiled by the
// host compiler with the other C++ sources when the CUDA backend is built.
#include <torch/library.h>

#include "xkernels/backend.h"
#include "xkernels/entry.h"

namespace xkernels {

// CUDA tensors run the native CUDA kernels. 'sycl' would mean SYCL kernels through oneAPI's
// CUDA plugin (XKERNELS_WITH_SYCL_CUDA builds); 'reference' runs CPU tensors only.
Backend choose_cuda_backend(const char* op, at::ScalarType dtype) {
  const Backend req = requested_backend();
  const c10::Device device(c10::kCUDA);
  switch (req) {
    case Backend::Reference:
      TORCH_CHECK(false, "xkernels.", op, ": backend 'reference' was requested but the tensors (dtype ", dtype,
                  ") are on a CUDA device; the reference backend runs CPU tensors only. Move the tensors to the "
                  "CPU or select 'auto' or 'cuda'");
    case Backend::Sycl:
#ifdef XKERNELS_WITH_SYCL_CUDA
      if (dispatch_record_enabled()) record_dispatch(op, Backend::Sycl, device, "");
      return Backend::Sycl;
#else
      TORCH_CHECK(false, "xkernels.", op, ": backend 'sycl' was requested for CUDA tensors (dtype ", dtype,
                  "), but SYCL on CUDA tensors needs the oneAPI CUDA plugin, and this build of xkernels was made "
                  "without it; select 'auto' or 'cuda' for the native CUDA kernels");
#endif
    case Backend::Cuda:
    case Backend::Auto:
    default:
      if (dispatch_record_enabled()) record_dispatch(op, Backend::Cuda, device, "");
      return Backend::Cuda;
  }
}

}  // namespace xkernels

TORCH_LIBRARY_IMPL(xkernels, CUDA, m) {
  using xkernels::choose_cuda_backend;
  namespace entry = xkernels::entry;
  m.impl("fused_linear_relu", &entry::fused_linear_relu<choose_cuda_backend>);
  m.impl("fused_linear_relu_backward", &entry::fused_linear_relu_backward<choose_cuda_backend>);
  m.impl("conv2d", &entry::conv2d<choose_cuda_backend>);
  m.impl("conv2d_backward", &entry::conv2d_backward<choose_cuda_backend>);
  m.impl("layer_norm_forward", &entry::layer_norm_forward<choose_cuda_backend>);
  m.impl("layer_norm_backward", &entry::layer_norm_backward<choose_cuda_backend>);
}
