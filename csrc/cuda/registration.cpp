// CUDA dispatch key: backend selection for CUDA tensors and the registration of the
// shared entry functions (entry.h) for every op. Plain C++ (no device code): compiled by the
// host compiler with the other C++ sources when the CUDA backend is built.
#include <torch/library.h>

#include "xkernels/backend.h"
#include "xkernels/cuda_key_policy.h"
#include "xkernels/entry.h"

namespace xkernels {

// Native CUDA (the default) or the SYCL kernels through oneAPI's CUDA plugin; the rules are
// policy::decide_cuda_key (cuda_key_policy.h), this function gathers its facts and acts on it.
Backend choose_cuda_backend(const char* op, at::ScalarType dtype) {
  (void)dtype;  // every dtype the ops accept runs on both
  policy::CudaKeyFacts facts;
  facts.native_built = true;  // this file is compiled only with the native CUDA backend
  // The chooser is not given the tensors' device index; the record names the key ("cuda") and the
  // SYCL fact is whether the runtime has any usable CUDA device.
  const c10::Device device(c10::kCUDA);
  const Backend requested = requested_backend();
#ifdef XKERNELS_WITH_SYCL
  facts.sycl_built = true;
  // With native CUDA built only an explicit 'sycl' request depends on this fact; asking only then
  // keeps SYCL device discovery out of ordinary CUDA calls.
  if (requested == Backend::Sycl)
    facts.sycl_sees_device = sycl_cuda_device_available(device.index(), &facts.sycl_why_not);
#endif
  const policy::CudaKeyDecision d = policy::decide_cuda_key(backend_name(requested), facts, op, device.str());
  TORCH_CHECK(d.choice != policy::CudaKeyChoice::Error, d.message);
  const Backend ran = d.choice == policy::CudaKeyChoice::SyclOnCuda ? Backend::Sycl : Backend::Cuda;
  if (dispatch_record_enabled()) record_dispatch(op, ran, device, d.message);
  return ran;
}

}  // namespace xkernels

TORCH_LIBRARY_IMPL(xkernels, CUDA, m) {
  using xkernels::choose_cuda_backend;
  namespace entry = xkernels::entry;
  m.impl("fused_linear_relu", &entry::fused_linear_relu<choose_cuda_backend>);
  m.impl("fused_linear_relu_backward", &entry::fused_linear_relu_backward<choose_cuda_backend>);
  m.impl("conv2d", &entry::conv2d<choose_cuda_backend>);
  m.impl("conv2d_relu", &entry::conv2d_relu<choose_cuda_backend>);
  m.impl("conv2d_backward", &entry::conv2d_backward<choose_cuda_backend>);
  m.impl("layer_norm_forward", &entry::layer_norm_forward<choose_cuda_backend>);
  m.impl("layer_norm_backward", &entry::layer_norm_backward<choose_cuda_backend>);
  m.impl("layer_norm.out", &entry::layer_norm_out<choose_cuda_backend>);
}
