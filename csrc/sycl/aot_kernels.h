// Interface of libxkernels_sycl_aot.so, the kernels compiled ahead of time by icpx (oneAPI) from
// csrc/sycl/kernels/*.hpp. Built only when the build found a oneAPI toolchain (buildtools/oneapi.py,
// cmake/OneAPIAOT.cmake); then _C links it and is compiled with XKERNELS_SYCL_AOT=1.
//
// Both sides include this header: the generated sources compiled by icpx, and the kernel provider
// compiled by the host compiler against the same libsycl major version (the build checks that), so
// sycl::kernel_id crosses the boundary unchanged. Plain data, no STL types in the interface.
#pragma once
#include <sycl/sycl.hpp>

#include <cstddef>

namespace xkernels::sycl_aot {

struct AotKernel {
  const char* file;  // kernel file, e.g. "layer_norm.hpp" (== KernelGroup::file)
  const char* name;  // registered name, e.g. "xk::layer_norm_fwd<float>" (== what KernelGroup::names returns)
  sycl::kernel_id (*id)();  // the kernel's id in this library's device images
};

struct AotLibrary {
  // Device images in the library, as provider_choice.h's parse_aot_targets() reads them, e.g.
  // "spir64 spir64_gen:pvc,bmg-g21 nvptx64-nvidia-cuda:sm_75".
  const char* targets = "";
  const char* compiler = "";  // "icpx 2025.2.0"
  const char* flags = "";     // the floating-point flags the kernels were compiled with
  const AotKernel* kernels = nullptr;
  std::size_t count = 0;
};

// Every kernel in the library (defined in the generated index, aot_index.cpp).
const AotLibrary& aot_library();

}  // namespace xkernels::sycl_aot
