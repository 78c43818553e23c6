// Launch checks shared by every run-time compiled SYCL launch (Kernel::launch, runtime.h): geometry, work-group limits
// and the argument count, which the runtime itself reports poorly; and the one synchronisation point, wait_if_host.
#include <ATen/ATen.h>

#include <sstream>

#include "sycl/runtime_internal.h"

namespace xkernels::sycl_backend {

void validate_launch(const sycl::queue& q, const sycl::kernel& k, const std::string& label, int dims,
                     const size_t* global, const size_t* local, size_t num_args) {
  auto kname = [&] { return label; };
  auto dims_str = [&](const size_t* v) {
    std::ostringstream s;
    s << "[";
    for (int d = 0; d < dims; ++d) s << (d ? ", " : "") << v[d];
    s << "]";
    return s.str();
  };
  size_t wg = 1;
  for (int d = 0; d < dims; ++d) {
    TORCH_CHECK(local[d] >= 1, "xkernels: launch of ", kname(), ": local size ", dims_str(local),
                " has a zero dimension");
    TORCH_CHECK(global[d] % local[d] == 0, "xkernels: launch of ", kname(), ": global size ", dims_str(global),
                " is not a multiple of the local size ", dims_str(local), " in dimension ", d);
    wg *= local[d];
  }
  const sycl::device dev = q.get_device();
  const size_t dev_max = traits_of(q).max_work_group_size;
  const size_t k_max = k.get_info<sycl::info::kernel_device_specific::work_group_size>(dev);
  TORCH_CHECK(wg <= dev_max && wg <= k_max, "xkernels: launch of ", kname(), ": work-group size ", wg, " (local ",
              dims_str(local), ") exceeds the limit (device ", dev_max, ", kernel ", k_max, ")");
  // Argument count. The runtime reports the kernel's parameters after dead-argument
  // elimination: 2025.3 drops unused parameters from the count (while set_arg indices still
  // follow the source), 2026.1 counts every source parameter. Too few arguments is an error
  // everywhere (the runtime's own error for it is an unhelpful code); too many only where the
  // count is the source's.
  const size_t n = k.get_info<sycl::info::kernel::num_args>();
  const bool count_is_exact = runtime_version_info().year >= 2026;
  TORCH_CHECK(num_args >= n && (num_args == n || !count_is_exact), "xkernels: launch of ", kname(), ": ", num_args,
              " arguments given, the kernel takes ", n);
}

void wait_if_host(const at::Tensor& t, sycl::event& e) {
  if (!t.device().is_cpu()) return;
  e.wait_and_throw();
}

}  // namespace xkernels::sycl_backend
