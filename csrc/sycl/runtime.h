// SYCL runtime glue shared by the SYCL host wrappers: devices, queues and the
// kernel provider. Host code only (no kernel bodies; those are in kernels/*.hpp).
//
// Kernel provider contract: launch code asks for a sycl::kernel by registered name
// and sets arguments; it never knows whether the kernel was compiled ahead of time
// or at run time (sycl_ext_oneapi_kernel_compiler, from the embedded kernels/*.hpp).
#pragma once
#include <ATen/core/Tensor.h>
#include <sycl/sycl.hpp>

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <functional>
#include <string>
#include <type_traits>
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
  // info::device::native_vector_width_float: 16 on AVX-512 CPUs, 8 on AVX2 CPUs (0: not queried, e.g. acpp).
  size_t native_vector_width_float = 0;
  // Vector registers the CPU's tiles are sized for: 16 (AVX2: 16 ymm) where the native float vector is 8 wide,
  // else 32 (AVX-512's 32 zmm; GPUs and unknown devices take the same tiles). kernels/conv2d.hpp's
  // register-sized tiles declare the budget they fit (vector_registers) and are built only for it.
  int vector_registers() const { return is_cpu && native_vector_width_float == 8 ? 16 : 32; }
};

// One kernel file (csrc/sycl/kernels/<file>) = one kernel table = one kernel group, built per device
// and element type ("part") on first use. `entries` lists the generated run-time entry points the
// device supports (kernel_table.h).
struct KernelEntry {
  std::string name;        // registered name, e.g. "xk_layer_norm_fwd__float"
  std::string part;        // element type, e.g. "float": a process compiles only the types it runs
  std::string definition;  // the generated free-function kernel
};
struct KernelGroup {
  std::string file;
  std::function<std::vector<KernelEntry>(const DeviceTraits&)> entries;
};

// Every table's group (kernel_groups.cpp), and the one of a kernel file.
const std::vector<const KernelGroup*>& kernel_groups();
const KernelGroup& find_kernel_group(const char* file);

// The queue an op on tensor `t` launches on: CPU tensors -> the process-wide in-order
// queue of the SYCL CPU device (host pointers are used zero-copy); XPU tensors -> torch's
// current XPU stream's queue. Never a queue per call.
sycl::queue& queue_for(const at::Tensor& t);
const DeviceTraits& traits_of(const sycl::queue& q);

class AotLibrary;
// The ahead-of-time launcher library (icpx build, aot_library.h) when the provider's choice for `dev` is an image
// of it and it loads; nullptr when the device compiles its kernels at run time.
const AotLibrary* aot_library_for(const sycl::device& dev);

// Compiled kernel `name` from `group` for the queue's device (built once per device and
// group, thread-safe; compile errors raise with the compiler log).
sycl::kernel get_kernel(const sycl::queue& q, const KernelGroup& group, const std::string& name);

// Throws (naming the kernel and the values) unless: every local size is >= 1 and the global
// size is a multiple of it in each dimension; the work-group fits the device and the kernel
// limit; `num_args` matches the kernel's parameter count. launch() calls it.
void validate_launch(const sycl::queue& q, const sycl::kernel& k, int dims, const size_t* global, const size_t* local,
                     size_t num_args);

// Submits `k` over `range` with `args` (set in order) after validating the geometry
// (global divisible by local, local size within the device limit). For CPU tensors the
// caller waits on the returned event before returning to PyTorch (wait_if_host).
// Arguments are passed by value: device pointers (for CPU tensors: the host pointers
// themselves), integers and floating-point scalars of exactly the kernel's parameter types.
template <int D, typename... Args>
sycl::event launch(sycl::queue& q, const sycl::kernel& k, const sycl::nd_range<D>& range, const Args&... args) {
  static_assert((std::is_trivially_copyable_v<Args> && ...), "kernel arguments must be trivially copyable");
  size_t global[D], local[D];
  for (int d = 0; d < D; ++d) {
    global[d] = range.get_global_range()[d];
    local[d] = range.get_local_range()[d];
  }
  validate_launch(q, k, D, global, local, sizeof...(Args));
  return q.submit([&](sycl::handler& h) {
    int index = 0;
    (h.set_arg(index++, args), ...);
    h.parallel_for(range, k);
  });
}

// Builds `source` for the queue's device through the kernel groups' build path (the kernel files as
// include files, the on-disk cache and its manifest, compile errors raised with the compiler's
// diagnostics under `label`), with `options` (build_options_for_runtime() plus any extra ones) and the
// registered `names`. No in-memory cache: the caller keeps the bundle (user_kernels.cpp).
sycl::kernel_bundle<sycl::bundle_state::executable> build_source(const sycl::queue& q, const std::string& label,
                                                                 const std::string& source,
                                                                 const std::vector<std::string>& names,
                                                                 const std::vector<std::string>& options);

// The only synchronisation: for a CPU tensor `t`, waits for `e` and rethrows any
// asynchronous error (the op returns to PyTorch with its outputs written). For device
// (XPU) tensors it returns at once: work stays ordered on torch's queue.
void wait_if_host(const at::Tensor& t, sycl::event& e);

}  // namespace xkernels::sycl_backend
