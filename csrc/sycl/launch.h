// Where the SYCL host wrappers launch their kernels: a Launcher. The host wrappers (conv2d.cpp,
// fused_linear_relu.cpp, layer_norm.cpp) are written once against it and serve two backends:
//   * `sycl`: a DPC++ queue (torch's current XPU/CUDA stream's, or the CPU device's in-order queue),
//     with kernels from the provider (run-time compiled, cached);
//   * `acpp`: the kernels compiled ahead of time by AdaptiveCpp into libxkernels_acpp.so
//     (aot_library.h), on that library's own host device.
// A launch names its kernel by table row and element type and passes the row's typed parameter struct:
//   L.launch<xk::layer_norm_fwd, T>(range, {.x = ..., .w = ..., ...});
// so a missing, misspelt or out-of-order parameter is a compile error, not a wrong result on one dtype.
#pragma once
#include <ATen/core/Tensor.h>

#include "sycl/aot_library.h"
#include "sycl/kernel_memo.h"
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

class Launcher {
 public:
  // The `sycl` backend on the queue for tensor t (queue_for).
  // Where the provider chose the ahead-of-time library for the device (icpx builds), its launchers run on
  // that queue; otherwise the run-time compiled kernels do.
  static Launcher for_tensor(const at::Tensor& t) {
    sycl::queue& q = queue_for(t);
    return Launcher(&q, aot_library_for(q.get_device()));
  }
  // The `acpp` backend (throws BackendUnavailable-style errors when its library is absent).
  static Launcher acpp() { return Launcher(nullptr, &acpp_library()); }

  const DeviceTraits& traits() const { return q_ ? traits_of(*q_) : lib_->traits(); }
  bool is_acpp() const { return lib_ != nullptr && q_ == nullptr; }

  template <typename K, typename T, int D>
  void launch(const sycl::nd_range<D>& range, const typename K::template params<T>& p) {
    static_assert(D == K::dims, "nd_range dimensionality differs from the kernel table's");
    static_assert(std::is_trivially_copyable_v<typename K::template params<T>>, "parameters must be plain data");
    size_t global[3] = {1, 1, 1}, local[3] = {1, 1, 1};
    for (int d = 0; d < D; ++d) {
      global[d] = range.get_global_range()[d];
      local[d] = range.get_local_range()[d];
    }
    if (lib_) {
      constexpr long index = xk::instance_index<K, T>();
      static_assert(index >= 0, "kernel/type pair is not in the kernel tables");
      lib_->launch(static_cast<size_t>(index), kernel_label<K, T>(), D, global, local, &p, sizeof(p), q_);
      return;
    }
    TORCH_CHECK((supported_on<K, T>(traits())), "xkernels: kernel ", kernel_label<K, T>(),
                " is not available on SYCL device '", traits().name, "' (element type or sub-group size ",
                xk::sub_group_of<K>::value, " unsupported)");
    static KernelMemo memo;  // one per (K, T): this function is instantiated per pair
    const sycl::kernel k = memo.get(*q_, group_of<K>(), 0, [] { return entry_name<K, T>(); });
    validate_launch(*q_, k, D, global, local, 1);
    last_ = q_->submit([&](sycl::handler& h) {
      h.set_arg(0, p);
      h.parallel_for(range, k);
    });
  }

  // The only synchronisation: for a CPU tensor `t`, waits for the work launched so far and rethrows
  // asynchronous errors; for device tensors it returns at once (work stays ordered on torch's queue).
  // The acpp library runs each launch to completion itself.
  void finish(const at::Tensor& t) {
    if (!q_ || !t.device().is_cpu()) return;
    if (lib_)
      q_->wait_and_throw();  // the ahead-of-time launchers submit to q_ without handing back an event
    else
      wait_if_host(t, last_);
  }

 private:
  Launcher(sycl::queue* q, const AotLibrary* lib) : q_(q), lib_(lib) {}
  sycl::queue* q_;
  const AotLibrary* lib_;
  sycl::event last_;
};

}  // namespace xkernels::sycl_backend
