// The kernel groups: one per kernel table (kernels/tables.hpp), i.e. per kernel file.
#include <c10/util/Exception.h>

#include "sycl/kernel_table.h"

namespace xkernels::sycl_backend {

const std::vector<const KernelGroup*>& kernel_groups() {
  static const std::vector<const KernelGroup*> groups = [] {
    std::vector<const KernelGroup*> out;
    auto add = [&](auto tab) {
      using Tab = typename decltype(tab)::type;
      for (const KernelGroup* g : out)
        if (g->file == Tab::file) return;
      out.push_back(new KernelGroup(make_kernel_group<Tab>()));
    };
    xk::for_each_instance([&](auto tab, auto, auto) { add(tab); });
    return out;
  }();
  return groups;
}

const KernelGroup& find_kernel_group(const char* file) {
  for (const KernelGroup* g : kernel_groups())
    if (file && g->file == file) return *g;
  TORCH_CHECK(false, "xkernels: no kernel table for kernel file '", file ? file : "?", "'");
}

size_t table_instance_count() {
  static const size_t n = [] {
    size_t i = 0;
    xk::for_each_instance([&](auto, auto, auto) { ++i; });
    return i;
  }();
  return n;
}

}  // namespace xkernels::sycl_backend
