// SYCL runtime glue shared by the SYCL host wrappers: devices, queues and the
// kernel provider. Host code only (no kernel bodies; those are in kernels/*.hpp).
//
// Kernel provider contract: launch code asks for a Kernel (a table kernel by instantiation index, a user
// kernel by build and name) and launches it with its arguments; it never knows whether the kernel was
// compiled ahead of time or at run time (sycl_ext_oneapi_kernel_compiler, from the embedded kernels/*.hpp).
#pragma once
#include <ATen/core/Tensor.h>
#include <sycl/sycl.hpp>

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <unordered_map>
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
  // The run-time compiler builds bf16 joint_matrix kernels for AMX here (kernels/amx_gemm.hpp): a CPU
  // device whose CPU reports amx_bf16 and amx_tile, with the OpenCL CPU compiler's target set to an AMX
  // architecture for this process (CL_CONFIG_CPU_TARGET_ARCH) and XKERNELS_SYCL_AMX not 0 (amx_status()).
  bool amx_bf16 = false;
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
// How many (kernel, element type) instantiations the tables have (the range of TableEntry::index).
size_t table_instance_count();

// The queue an op on tensor `t` launches on: CPU tensors -> the process-wide in-order
// queue of the SYCL CPU device (host pointers are used zero-copy); XPU tensors -> torch's
// current XPU stream's queue. Never a queue per call.
sycl::queue& queue_for(const at::Tensor& t);
const DeviceTraits& traits_of(const sycl::queue& q);

// ---------------------------------------------------------------- the one launch path
// One argument of a launch, as the bytes of a plain-data value (copied when the launch is submitted). A pointer
// parameter of a kernel (user kernels take them; table kernels carry theirs inside their parameter struct) is
// `usm_pointer`: `data` points at the pointer value, which the runtime must be told is a USM pointer.
struct KernelArg {
  const void* data;
  size_t size;
  bool usm_pointer = false;
};

// A kernel ready to launch, handed out by the provider. It was compiled at run time (a kernel of the runtime's
// kernel compiler) or ahead of time (an entry of a launcher library: the icpx library on DPC++ queues, or the acpp
// library with its own queue); launch code never knows which.
class Kernel {
 public:
  virtual ~Kernel() = default;
  // Checks the geometry (every local size >= 1 and dividing the global size, the work-group within the device's
  // and the kernel's limit) and the argument count, then runs the kernel over nd_range(global, local) with `args`
  // on `q`: a queue of the device the kernel was built for, or nullptr for a launcher library with its own queue
  // (which runs the launch to completion). The event completes with the launch (wait_if_host waits on it).
  virtual sycl::event launch(sycl::queue* q, int dims, const size_t* global, const size_t* local,
                             std::span<const KernelArg> args) const = 0;
  // The largest work-group this kernel can run with on the queue's device.
  virtual size_t work_group_limit(const sycl::queue* q) const = 0;
};

// What the provider needs to know about one (kernel, element type) instantiation of the kernel tables, which
// TableKernels::get finds by its index (xk::instance_index<K, T>(), the launcher libraries' numbering too);
// launch.h fills it in from the types, asked only on the first launch on a device.
struct TableEntry {
  const KernelGroup* group;                // the run-time build it belongs to
  std::string name;                        // the run-time entry point ("xk_layer_norm_fwd__float")
  std::string label;                       // for messages ("layer_norm_fwd<float>")
  int sub_group;                           // required sub-group size (0: none)
  bool (*supported)(const DeviceTraits&);  // supported_on<K, T>
};

// The kernels of the tables for one device (one context), wherever they come from: every table launch asks
// this for its kernel, by instantiation index (a lock-free lookup once the kernel is there).
class TableKernels {
 public:
  virtual ~TableKernels() = default;
  virtual const DeviceTraits& traits() const = 0;
  // The kernel of instantiation `index`; `entry()` describes it (called on the first use only). Raises, naming the
  // kernel and the device, when the device cannot run it.
  virtual const Kernel& get(size_t index, TableEntry (*entry)()) = 0;
  // True when the kernels' sub-group lanes are work-items (the acpp library's host device), not SIMD lanes.
  virtual bool lanes_are_work_items() const { return false; }
};

// The table kernels for the queue's device and context: the icpx launcher library where the provider chose it
// for the device and it loads, else run-time compiled (provider_choice.h decides; kernel_provider.cpp is the only
// file that knows).
TableKernels& table_kernels_for(const sycl::queue& q);
// The acpp backend's table kernels (its launcher library; raises a clear error when it is unavailable).
TableKernels& acpp_table_kernels();

// A run-time build of several kernels together: a part of a built-in kernel group, or a user source for one
// element type (user_kernels.cpp). `source()` gives the translation unit; `names` are the kernels it registers.
struct BuildSpec {
  std::string label;
  std::function<std::string()> source;
  std::vector<std::string> names;
  std::vector<std::string> options;
};
using KernelMap = std::unordered_map<std::string, std::unique_ptr<Kernel>>;
// The kernels of build `key` for the queue's context and device, by registered name: looked up in the provider's
// one in-memory cache (a slot per context, device and key; built-in groups are keyed "<file>|<part>"), built on a
// miss from `spec()` (once, thread-safe, through the runtime's on-disk cache; compile errors raise with the
// compiler log). `*seconds`, when given: the time this call spent building (0 when it was built before).
const KernelMap& built_kernels(const sycl::queue& q, const std::string& key, const std::function<BuildSpec()>& spec,
                               double* seconds = nullptr);
// Is `key` built for the queue's context and device in this process?
bool is_built(const sycl::queue& q, const std::string& key);

// The only synchronisation: for a CPU tensor `t`, waits for `e` and rethrows any
// asynchronous error (the op returns to PyTorch with its outputs written). For device
// (XPU) tensors it returns at once: work stays ordered on torch's queue.
void wait_if_host(const at::Tensor& t, sycl::event& e);

}  // namespace xkernels::sycl_backend
