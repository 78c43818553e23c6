// The native CUDA backend's side of "SYCL kernels on CUDA tensors" (xkernels/cuda_device_hooks.h):
// hands the SYCL backend torch's current CUDA stream and the device facts it needs. Plain C++ with
// torch's CUDA headers; compiled only with the native CUDA backend.
// c10's CUDA headers and the CUDA runtime API only (ATen/cuda/CUDAContext.h would pull in cuBLAS and
// cuSPARSE headers, which a minimal CUDA toolkit lacks).
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include <cstring>

#include "xkernels/cuda_device_hooks.h"

namespace xkernels::cuda_backend {
namespace {

int device_count() { return static_cast<int>(c10::cuda::device_count()); }

void* current_stream(int device) {
  return static_cast<void*>(at::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device)).stream());
}

bool device_uuid(int device, unsigned char* out16) {
  cudaDeviceProp p{};
  C10_CUDA_CHECK(cudaGetDeviceProperties(&p, device));  // called once per device (cuda_target memoises)
  static_assert(sizeof(p.uuid.bytes) == 16, "cudaUUID_t is 16 bytes");
  std::memcpy(out16, p.uuid.bytes, 16);
  return true;
}

bool compute_capability(int device, int* major, int* minor) {
  C10_CUDA_CHECK(cudaDeviceGetAttribute(major, cudaDevAttrComputeCapabilityMajor, device));
  C10_CUDA_CHECK(cudaDeviceGetAttribute(minor, cudaDevAttrComputeCapabilityMinor, device));
  return true;
}

}  // namespace

CudaDeviceHooks make_cuda_device_hooks() {
  CudaDeviceHooks h;
  h.device_count = &device_count;
  h.current_stream = &current_stream;
  h.uuid = &device_uuid;
  h.compute_capability = &compute_capability;
  return h;
}

}  // namespace xkernels::cuda_backend

#ifdef XKERNELS_WITH_SYCL
namespace {
// Installed when the extension loads (before any op can run); set_cuda_device_hooks keeps them in a
// function-local static, so the order of static initialisation across files does not matter.
const bool g_installed = [] {
  xkernels::set_cuda_device_hooks(xkernels::cuda_backend::make_cuda_device_hooks());
  return true;
}();
}  // namespace
#endif
