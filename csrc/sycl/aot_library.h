// The `acpp` backend's kernels: libxkernels_acpp.so, the launcher library AdaptiveCpp compiled ahead of
// time from the same kernel tables (aot/launchers.cpp, aot/abi.h). Loaded on first use from the
// directory of the extension, with RTLD_LOCAL so that its SYCL implementation's symbols stay its own.
#pragma once
#include <memory>
#include <string>

#include "sycl/runtime.h"

struct xk_aot_library;

namespace xkernels::sycl_backend {

class AotLibrary {
 public:
  // `own_queue`: the library runs on its own queue (acpp: its host device, whose sub-group lanes are
  // work-items), else it submits to the DPC++ queues it is given (icpx).
  AotLibrary(const xk_aot_library* lib, bool own_queue);
  ~AotLibrary();
  const DeviceTraits& traits() const { return traits_; }
  std::string implementation() const;
  std::string flags() const;
  size_t kernel_count() const;
  // Launches instantiation `index` of the kernel tables (validates the geometry first): on `queue`, a
  // sycl::queue* of the library's own implementation (the icpx library on DPC++ queues), not waited for; or,
  // with queue == nullptr, on the library's own queue, run to completion (the acpp library).
  void launch(size_t index, const std::string& label, int dims, const size_t* global, const size_t* local,
              const void* params, size_t params_size, void* queue = nullptr) const;
  // The library's kernels as the provider hands them out (one Kernel per instantiation index).
  TableKernels& table_kernels() const { return *kernels_; }

 private:
  const xk_aot_library* lib_;
  DeviceTraits traits_;
  std::unique_ptr<TableKernels> kernels_;
};

// The icpx-built launcher library (libxkernels_sycl_aot.so; builds with XKERNELS_SYCL_AOT), or nullptr with
// the reason in *why_not.
const AotLibrary* sycl_aot_library(std::string* why_not);

// Is the acpp backend usable? (built with it, library loads, its tables match this extension's)
bool acpp_available(std::string* why_not);
// The loaded library; raises a clear error when acpp_available() is false.
const AotLibrary& acpp_library();

}  // namespace xkernels::sycl_backend
