// What the SYCL backend needs from PyTorch's CUDA runtime to run SYCL kernels on CUDA tensors: the
// current CUDA stream of a device (SYCL work is submitted to it, so it runs in stream order with the
// surrounding PyTorch work) and the device's UUID and compute capability (to find the matching SYCL
// device, and the PTX architecture for run-time compilation).
//
// The SYCL host code is built without torch's CUDA headers; the native CUDA backend (csrc/cuda/
// sycl_hooks.cpp, built with them) installs these at load time. Without the native CUDA backend the
// CUDA dispatch key is not registered at all, so SYCL never sees a CUDA tensor there.
// Plain C function pointers: no torch, no SYCL, no CUDA types.
#pragma once

namespace xkernels {

struct CudaDeviceHooks {
  // Number of CUDA devices torch sees.
  int (*device_count)() = nullptr;
  // cudaStream_t of torch's current stream on `device` (at::cuda::getCurrentCUDAStream(device)).
  void* (*current_stream)(int device) = nullptr;
  // Writes the device's 16-byte UUID (cudaDeviceProp::uuid); false when unknown.
  bool (*uuid)(int device, unsigned char* out16) = nullptr;
  // The device's compute capability; false when unknown.
  bool (*compute_capability)(int device, int* major, int* minor) = nullptr;
};

// Defined by the SYCL backend (csrc/sycl/runtime.cpp); call only when it is built (XKERNELS_WITH_SYCL).
void set_cuda_device_hooks(const CudaDeviceHooks& hooks);

namespace cuda_backend {
// The native CUDA backend's hooks (csrc/cuda/sycl_hooks.cpp).
CudaDeviceHooks make_cuda_device_hooks();
}  // namespace cuda_backend

}  // namespace xkernels
