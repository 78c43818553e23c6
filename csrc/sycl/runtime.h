// SYCL runtime glue shared by the SYCL host wrappers: devices, queues and the
// kernel provider. Host code only (no kernel bodies; those are in kernels/*.hpp).
//
// Kernel provider contract: launch code asks for a sycl::kernel by registered name
// and sets arguments; it never knows whether the kernel was compiled ahead of time
// or at run time (sycl_ext_oneapi_kernel_compiler, from the embedded kernels/*.hpp).
#pragma once
#include <ATen/core/Tensor.h>
#include <sycl/sycl.hpp>

#include <functional>
#include <string>
#include <vector>

namespace xkernels::sycl_backend {

// What the kernels and launch code need to know about a device.
struct DeviceTraits {
  bool is_cpu = false;
  bool fp64 = false;
  bool fp16 = false;
  size_t max_work_group_size = 0;
  size_t local_mem_bytes = 0;
  std::vector<size_t> sub_group_sizes;
  std::string name;
};

// One kernel file (csrc/sycl/kernels/<file>) = one kernel group = one bundle built per
// device on first use. `names` returns the registered (instantiated) kernel names the
// device supports, e.g. {"xk::layer_norm_fwd<float>", "xk::layer_norm_fwd<sycl::half>"}.
struct KernelGroup {
  std::string file;
  std::function<std::vector<std::string>(const DeviceTraits&)> names;
};

// Registers a group (call from a static initializer in the op's host file); returns it.
const KernelGroup& register_kernel_group(KernelGroup group);
std::vector<const KernelGroup*> kernel_groups();

// The queue an op on tensor `t` launches on: CPU tensors -> the process-wide in-order
// queue of the SYCL CPU device (host pointers are used zero-copy); XPU tensors -> torch's
// current XPU stream's queue. Never a queue per call.
sycl::queue& queue_for(const at::Tensor& t);
const DeviceTraits& traits_of(const sycl::queue& q);

// Compiled kernel `name` from `group` for the queue's device (built once per device and
// group, thread-safe; compile errors raise with the compiler log).
sycl::kernel get_kernel(const sycl::queue& q, const KernelGroup& group, const std::string& name);

// The C++ spelling of an element type inside kernel names.
template <typename T> const char* kernel_type_name();

// Submits `k` over `range` with `args` (set in order) after validating the geometry
// (global divisible by local, local size within the device limit). For CPU tensors the
// caller waits on the returned event before returning to PyTorch.
template <int D, typename... Args>
sycl::event launch(sycl::queue& q, const sycl::kernel& k, const sycl::nd_range<D>& range, const Args&... args);

}  // namespace xkernels::sycl_backend
