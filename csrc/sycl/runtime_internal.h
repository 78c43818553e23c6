// Internals shared by the files of the SYCL runtime glue (device_registry.cpp, queues.cpp,
// cuda_devices.cpp, runtime_version.cpp, disk_cache.cpp, kernel_provider.cpp, launch_checks.cpp).
// Op code uses runtime.h; the Python bindings and tests use runtime_info.h.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "sycl/runtime.h"
#include "sycl/runtime_info.h"

namespace xkernels::sycl_backend {

// ---- runtime_version.cpp
struct RuntimeVersionInfo {
  int year = 0, minor = 0, patch = 0;  // 0: unknown
  std::string text, source;
};
const RuntimeVersionInfo& runtime_version_info();

// ---- device_registry.cpp
struct Registry {
  std::vector<DeviceRecord> devices;
  std::string error;       // discovery failed / found nothing
  int cpu_index = -1;      // the device CPU tensors run on
  std::string cpu_reason;  // why there is none
};
const Registry& registry();

// ---- queues.cpp
// The SYCL CPU device's in-order queue (CPU tensors); raises when there is no CPU device.
sycl::queue& cpu_queue();

// ---- cuda_devices.cpp
// Torch's current stream on cuda:<index>, as a queue of the matching SYCL CUDA device.
sycl::queue& cuda_stream_queue(int index);
// Compute capabilities torch reports, per SYCL CUDA device record (empty without the hooks).
std::map<const DeviceRecord*, std::pair<int, int>> torch_compute_capabilities();

// ---- launch_checks.cpp
// Throws (naming the kernel by `label` and the values) unless: every local size is >= 1 and the global size is a
// multiple of it in each dimension; the work-group fits the device and the kernel limit; `num_args` matches the
// kernel's parameter count. Every run-time compiled launch calls it (Kernel::launch).
void validate_launch(const sycl::queue& q, const sycl::kernel& k, const std::string& label, int dims,
                     const size_t* global, const size_t* local, size_t num_args);

// ---- kernel_provider.cpp / aot_library.cpp
// The icpx launcher library's table kernels when the provider chose it for `dev` and it loads, else nullptr.
TableKernels* aot_table_kernels_for(const sycl::device& dev);

// ---- disk_cache.cpp
// Held around every run-time build: verifies the runtime's on-disk cache once per process (removing
// corrupted entries), serialises builds (with a file lock across processes) and records what the
// build wrote in the integrity manifest.
class CacheSession {
 public:
  CacheSession();
  ~CacheSession();
  CacheSession(const CacheSession&) = delete;
  CacheSession& operator=(const CacheSession&) = delete;
  // True when the build just done compiled source to IR and cached that IR (a cold build).
  bool wrote_new_ir() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace xkernels::sycl_backend
