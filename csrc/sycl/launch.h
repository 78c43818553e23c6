// Where the SYCL host wrappers launch their kernels: a Launcher. The host wrappers (conv2d.cpp,
// fused_linear_relu.cpp, layer_norm.cpp) are written once against it and serve two backends:
//   * `sycl`: a DPC++ queue (torch's current XPU/CUDA stream's, or the CPU device's in-order queue),
//     with the provider's kernels for its device (run-time compiled and cached, or the icpx library's);
//   * `acpp`: the kernels compiled ahead of time by AdaptiveCpp into libxkernels_acpp.so
//     (aot_library.h), on that library's own host device.
// Either way a launch is one path: the provider's Kernel for the instantiation, then Kernel::launch.
// A launch names its kernel by table row and element type and passes the row's typed parameter struct:
//   L.launch<xk::layer_norm_fwd, T>(range, {.x = ..., .w = ..., ...});
// so a missing, misspelt or out-of-order parameter is a compile error, not a wrong result on one dtype.
#pragma once
#include <ATen/core/Tensor.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "sycl/kernel_table.h"
#include "sycl/runtime.h"
#include "xkernels/dispatch.h"

namespace xkernels::sycl_backend {

// The kernels' element type for a host element type: c10::Half -> xk::half, c10::BFloat16 -> xk::bf16.
template <typename H>
struct device_type {
  using type = H;
};
template <>
struct device_type<c10::Half> {
  using type = xk::half;
};
template <>
struct device_type<c10::BFloat16> {
  using type = xk::bf16;
};
template <typename H>
using device_type_t = typename device_type<H>::type;

// A tensor's data as the kernels' element type T (the dtype dispatch guarantees the match).
template <typename T>
const T* cptr(const at::Tensor& t) {
  static_assert(sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8);
  return static_cast<const T*>(t.const_data_ptr());
}
template <typename T>
T* mptr(const at::Tensor& t) {
  return static_cast<T*>(t.mutable_data_ptr());
}
template <typename T>
const T* cptr_or_null(const at::Tensor& t) {
  return t.defined() ? cptr<T>(t) : nullptr;
}

}  // namespace xkernels::sycl_backend

// Runs the body with `T` bound to the kernels' element type of TYPE (float, double, xk::half, xk::bf16)
// and `scalar_t` to the host's.
#define XK_DISPATCH_DEVICE_TYPES(TYPE, OPNAME, ...)              \
  XK_DISPATCH_FLOATING_TYPES(TYPE, OPNAME, [&] {                 \
    using T = ::xkernels::sycl_backend::device_type_t<scalar_t>; \
    (__VA_ARGS__)();                                             \
  })

namespace xkernels::sycl_backend {

// The measuring switches (environment variables read at every call: XKERNELS_CONV2D_TILING,
// XKERNELS_AMX_GEMM_BLOCKS): comma-separated items "key=value", each passed to f(key, value) (value empty where the
// item has no '='). The caller checks them and raises with its own message.
template <typename F>
void for_each_env_item(const char* var, F&& f) {
  const char* env = std::getenv(var);
  if (env == nullptr || *env == 0) return;
  const std::string v(env);
  size_t pos = 0;
  while (pos < v.size()) {
    const size_t end = std::min(v.find(',', pos), v.size());
    const std::string item = v.substr(pos, end - pos);
    const size_t eq = item.find('=');
    f(eq == std::string::npos ? item : item.substr(0, eq),
      eq == std::string::npos ? std::string() : item.substr(eq + 1));
    pos = end + 1;
  }
}

// `s` as a whole decimal integer into *out (false where it is empty or has anything after the digits).
inline bool parse_env_int(const std::string& s, int64_t* out) {
  if (s.empty()) return false;
  char* stop = nullptr;
  const long long n = std::strtoll(s.c_str(), &stop, 10);
  if (*stop != 0) return false;
  *out = n;
  return true;
}

// The kernel profiler (a development tool, off by default; _C.sycl.kernel_profile*): while on, every launch waits
// for its kernel and adds the wall time from submission to completion to the kernel's row. The waits serialise
// the work, so the rows show where time goes, not how fast the unprofiled code runs.
inline std::atomic<bool>& kernel_profiling_flag() {
  static std::atomic<bool> on{false};
  return on;
}
inline bool kernel_profiling_on() { return kernel_profiling_flag().load(std::memory_order_relaxed); }
void record_kernel_time(const std::string& label, std::chrono::steady_clock::duration d);  // queues.cpp

// Kernels queued on the CPU device's in-order queue by this thread and not yet waited for: the last one's event.
// The host wrappers wait once, at the end of a route; should anything throw before that wait (a kernel build
// failure, an allocation failure, a check between two launches), the unwinding releases the route's temporaries and
// outputs while queued kernels may still read or write them. So every host block of the SYCL backend's own
// allocations (host_alloc.h `empty`) waits for this work before it is released (drain_host_work): no kernel ever
// writes into freed memory, or into a block the caching allocator has handed to the next call. On the normal path
// nothing is pending when temporaries die (the routes wait first), and device queues (XPU, CUDA) are not tracked:
// their memory is stream-ordered.
//
// Deferred-wait regions (xkernels.backend.h settle_host_work; opened by xkernels.optimize's containers through
// _C.sycl.defer_waits): while a region is open (`defer` > 0), a route that runs only SYCL kernels from its entry on
// (`route_defers`, set by the route's entry for its own duration) returns with them still queued instead of waiting,
// and a host block released meanwhile, of the SYCL backend or of torch's CPU allocator, is kept (`releases`) until
// the region's wait instead of being waited for at its release. Every other op entry waits first
// (settle_host_work), so no host code reads or writes memory that a queued kernel still uses.
struct PendingHostWork {
  bool queued = false;
  sycl::event last;
  int defer = 0;
  bool route_defers = false;
  std::vector<std::pair<void (*)(void*), void*>> releases;
};
// Per thread, allocated once and never freed: a tensor may be released while its thread exits, after the thread's
// destructors ran (a trivially destructible pointer is still valid then).
inline PendingHostWork& pending_host_work() {
  thread_local PendingHostWork* w = nullptr;
  if (w == nullptr) [[unlikely]]
    w = new PendingHostWork();
  return *w;
}
// (drain_host_work, host_alloc.h: waits for it.)

// Launch checking (a development tool, off by default; _C.sycl.set_launch_checking, launch_checking.cpp): while on,
// releases of torch's CPU memory (torch's allocator wrapped) made while this thread has pending host work are counted
// as unsafe (memory the routes got from torch ops, not from `empty`, is not drained for), and a launch can be made to
// fail on purpose (_C.sycl.fail_launch_after: the Nth launch from now throws before queuing anything, as a kernel
// build failure or a host error between two launches would). tests/test_launch_faults.py walks every route with it.
inline std::atomic<bool>& launch_checking_flag() {
  static std::atomic<bool> on{false};
  return on;
}
inline bool launch_checking_on() { return launch_checking_flag().load(std::memory_order_relaxed); }
// Before a launch of `label` while checking: throws the failure asked for by fail_launch_after when it is due,
// else remembers the label (named in the report of an unsafe release).
void check_launch(const char* label);  // launch_checking.cpp

class Launcher {
 public:
  // The `sycl` backend on the queue for tensor t (queue_for), with the provider's kernels for its device.
  static Launcher for_tensor(const at::Tensor& t) {
    sycl::queue& q = queue_for(t);
    return Launcher(&q, &table_kernels_for(q), t.device().is_cpu());
  }
  // The `acpp` backend: its launcher library, on its own queue (raises a clear error when it is absent).
  static Launcher acpp() { return Launcher(nullptr, &acpp_table_kernels(), false); }

  const DeviceTraits& traits() const { return kernels_->traits(); }
  // Sub-group lanes are work-items (the acpp host device), not SIMD lanes: any lane width runs.
  bool lanes_are_work_items() const { return kernels_->lanes_are_work_items(); }

  template <typename K, typename T, int D>
  void launch(const sycl::nd_range<D>& range, const typename K::template params<T>& p) {
    static_assert(D == K::dims, "nd_range dimensionality differs from the kernel table's");
    static_assert(std::is_trivially_copyable_v<typename K::template params<T>>, "parameters must be plain data");
    constexpr long index = xk::instance_index<K, T>();
    static_assert(index >= 0, "kernel/type pair is not in the kernel tables");
    size_t global[3] = {1, 1, 1}, local[3] = {1, 1, 1};
    for (int d = 0; d < D; ++d) {
      global[d] = range.get_global_range()[d];
      local[d] = range.get_local_range()[d];
    }
    if (launch_checking_on()) [[unlikely]]
      check_launch(kernel_label<K, T>().c_str());
    const Kernel& k = kernels_->get(static_cast<size_t>(index), &table_entry<K, T>);
    const KernelArg arg{&p, sizeof(p)};
    if (kernel_profiling_on()) [[unlikely]] {
      const auto t0 = std::chrono::steady_clock::now();
      last_ = k.launch(q_, D, global, local, std::span<const KernelArg>(&arg, 1));
      last_.wait_and_throw();
      record_kernel_time(kernel_label<K, T>(), std::chrono::steady_clock::now() - t0);
      return;
    }
    last_ = k.launch(q_, D, global, local, std::span<const KernelArg>(&arg, 1));
    if (host_queue_) {  // (a launcher library's launch runs to completion: nothing is left queued)
      PendingHostWork& w = pending_host_work();
      w.queued = true;
      w.last = last_;
    }
  }

  // The only synchronisation: for a CPU tensor `t`, waits for the work launched so far and rethrows
  // asynchronous errors; for device tensors it returns at once (work stays ordered on torch's queue).
  void finish(const at::Tensor& t) {
    if (host_queue_ && pending_host_work().route_defers) return;  // waited for when the deferred-wait region closes
    if (t.device().is_cpu()) pending_host_work().queued = false;  // the wait ends it, whether or not it throws
    wait_if_host(t, last_);
  }

  // Calls launch() (which queues kernels), then finish(t). Should launch() throw after queuing some kernels, the
  // queue is drained first, so that no kernel still reads or writes the caller's temporaries once the unwinding
  // frees them (memory handed back to the allocator); the first error is the one rethrown.
  template <typename F>
  void launch_then_finish(const at::Tensor& t, F&& launch) {
    try {
      launch();
    } catch (...) {
      try {
        finish(t);
      } catch (...) {  // the first error is the one to report
      }
      throw;
    }
    finish(t);
  }

 private:
  Launcher(sycl::queue* q, TableKernels* kernels, bool host_queue)
      : q_(q), kernels_(kernels), host_queue_(host_queue && q != nullptr) {}
  template <typename K, typename T>
  static TableEntry table_entry() {
    return TableEntry{&group_of<K>(), entry_name<K, T>(), kernel_label<K, T>(), xk::sub_group_of<K>::value,
                      &supported_on<K, T>};
  }
  sycl::queue* q_;
  TableKernels* kernels_;
  bool host_queue_;  // the CPU device's queue (CPU tensors): its pending work is tracked (PendingHostWork)
  sycl::event last_;
};

}  // namespace xkernels::sycl_backend
