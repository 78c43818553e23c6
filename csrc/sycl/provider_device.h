// The facts provider_choice needs about a sycl::device, read from the SYCL runtime: backend, device
// kind and architecture (its sycl_ext_oneapi_device_architecture name; for NVIDIA GPUs that name,
// nvidia_gpu_sm_NN, carries the compute capability). Header-only; used by the kernel provider.
#pragma once
#include <sycl/sycl.hpp>

#include <sstream>
#include <string>

#include "provider_choice.h"

namespace xkernels::sycl_backend::provider_choice {

// The architecture enumerator's name ("intel_gpu_pvc", "nvidia_gpu_sm_90", "x86_64"), "" for unknown
// or for a value this header's runtime does not name. Generated from the runtime's own list, so it
// always matches the installed SYCL release (aliases map to their primary name).
inline std::string architecture_name(sycl::ext::oneapi::experimental::architecture a) {
  using arch = sycl::ext::oneapi::experimental::architecture;
  switch (a) {
#define __SYCL_ARCHITECTURE(NAME, VAL) \
  case arch::NAME: return #NAME;
#define __SYCL_ARCHITECTURE_ALIAS(NAME, VAL)
#define __SYCL_ARCHITECTURE_CONDITIONAL(NAME, VAL, FEATURE_GUARD) __SYCL_ARCHITECTURE(NAME, VAL)
#include <sycl/ext/oneapi/experimental/device_architecture.def>
#undef __SYCL_ARCHITECTURE
#undef __SYCL_ARCHITECTURE_ALIAS
#undef __SYCL_ARCHITECTURE_CONDITIONAL
    default: break;
  }
  return "";
}

// A DeviceDesc for `dev`. The architecture query can throw for devices whose backend does not report
// one; that leaves arch empty (provider_choice then falls back to SPIR-V or run-time compilation).
inline DeviceDesc describe_device(const sycl::device& dev) {
  DeviceDesc d;
  std::ostringstream backend;
  backend << dev.get_backend();  // "opencl", "ext_oneapi_level_zero", "ext_oneapi_cuda", ...
  d.backend = parse_device_backend(backend.str());
  d.is_gpu = dev.is_gpu();
  d.is_cpu = dev.is_cpu();
  try {
    const std::string name =
        architecture_name(dev.get_info<sycl::ext::oneapi::experimental::info::device::architecture>());
    d.arch = name == "unknown" ? std::string() : name;
  } catch (const sycl::exception&) {
    d.arch.clear();
  }
  if (d.backend == DeviceBackend::Cuda) {
    const int sm = cuda_arch_number(d.arch);
    if (sm > 0) {
      d.cc_major = sm / 10;
      d.cc_minor = sm % 10;
    }
  }
  return d;
}

}  // namespace xkernels::sycl_backend::provider_choice
