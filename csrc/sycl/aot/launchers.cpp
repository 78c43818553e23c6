// The ahead-of-time launchers: one parallel_for per (kernel, element type) of every kernel table, in
// standard SYCL 2020, compiled by an ahead-of-time SYCL compiler into a launcher library (abi.h).
// AdaptiveCpp builds it as libxkernels_acpp.so (cmake/AcppBackend.cmake). Nothing here is DPC++-specific.
//
// Build definitions: XK_AOT_SUB_GROUP  the implementation's sub-group size on its device (AdaptiveCpp's
//                                      CPU backends: 1), reported to the host. Every kernel is built: a
//                                      kernel's S lanes are its work-group's work-items, and its lane
//                                      reductions (xk::lanes_sum) reduce over the work-group here.
//                    XK_AOT_IMPLEMENTATION, XK_AOT_FLAGS   descriptive strings for xkernels.info().
//                    XK_AOT_IN_PARTS      the launchers are compiled in parts (launcher_part.cpp, linked into
//                                         the same library) and this file only lists them; without it this
//                                         one translation unit instantiates every launcher (the icpx build).
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

#include "../kernels/tables.hpp"
#include "abi.h"
#include "launch.h"

#ifndef XK_AOT_SUB_GROUP
#error "XK_AOT_SUB_GROUP (the sub-group size of the target device) must be defined"
#endif
#ifndef XK_AOT_IMPLEMENTATION
#define XK_AOT_IMPLEMENTATION "unknown SYCL implementation"
#endif
#ifndef XK_AOT_FLAGS
#define XK_AOT_FLAGS ""
#endif

namespace xk_aot {

sycl::queue& own_queue() {
  static sycl::queue q{sycl::default_selector_v, sycl::property::queue::in_order{}};
  return q;
}

std::vector<part_launcher>& part_launchers() {
  static std::vector<part_launcher> v;
  return v;
}

}  // namespace xk_aot

namespace {

#ifdef XK_AOT_IN_PARTS
// The launchers come from the parts (launcher_part.cpp), each registered under its instantiation's name.
xk_aot::launch_fn part_launcher_of(const std::string& kernel, const char* type) {
  xk_aot::launch_fn found = nullptr;
  for (const xk_aot::part_launcher& p : xk_aot::part_launchers()) {
    if (p.kernel != kernel || p.type != type) continue;
    if (found)
      throw std::runtime_error("the kernel launcher library has two launchers of " + kernel + " <" + type +
                               ">: two of its parts overlap (cmake/AcppBackend.cmake)");
    found = p.launch;
  }
  if (!found)
    throw std::runtime_error("the kernel launcher library has no launcher of " + kernel + " <" + type +
                             ">: its build left that kernel table (or a part of it) out (cmake/AcppBackend.cmake)");
  return found;
}
#endif

struct Listing {
  std::vector<std::string> names;  // storage for the kernel names
  std::vector<xk_aot_kernel> kernels;
  std::string device_name;
  xk_aot_library lib{};
};

Listing* make_listing() {
  auto* l = new Listing();
  size_t n = 0;
  xk::for_each_instance([&](auto, auto, auto) { ++n; });
  l->names.reserve(n);
  xk::for_each_instance([&](auto, auto k, auto t) {
    using K = typename decltype(k)::type;
    using T = typename decltype(t)::type;
    constexpr int S = xk::sub_group_of<K>::value;
    l->names.push_back(xk::cxx_name<K>());
    xk_aot_kernel e{};
    e.kernel = l->names.back().c_str();
    e.type = xk::type_label<T>();
    e.dims = K::dims;
    e.sub_group = S;
    e.params_size = sizeof(typename K::template params<T>);
    // Lanes are work-items here: any sub-group size computes the same.
#ifdef XK_AOT_IN_PARTS
    e.launch = part_launcher_of(l->names.back(), e.type);
#else
    e.launch = &xk_aot::launch_one<K, T>;
#endif
    l->kernels.push_back(e);
  });
  const sycl::device dev = xk_aot::own_queue().get_device();
  l->device_name = dev.get_info<sycl::info::device::name>();
  xk_aot_device& d = l->lib.device;
  d.name = l->device_name.c_str();
  d.is_cpu = dev.is_cpu() ? 1 : 0;
  d.fp64 = dev.has(sycl::aspect::fp64) ? 1 : 0;
  d.fp16 = dev.has(sycl::aspect::fp16) ? 1 : 0;
  d.max_work_group_size = dev.get_info<sycl::info::device::max_work_group_size>();
  d.local_mem_bytes = dev.get_info<sycl::info::device::local_mem_size>();
  d.sub_group_sizes[0] = XK_AOT_SUB_GROUP;
  d.n_sub_group_sizes = 1;
  l->lib.abi_version = XK_AOT_ABI_VERSION;
  l->lib.implementation = XK_AOT_IMPLEMENTATION;
  l->lib.flags = XK_AOT_FLAGS;
  l->lib.count = l->kernels.size();
  l->lib.kernels = l->kernels.data();
  return l;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) const xk_aot_library* xk_aot_library_v1(char* err, size_t errlen) {
  try {
    static Listing* listing = make_listing();
    return &listing->lib;
  } catch (const std::exception& e) {
    std::snprintf(err, errlen, "%s", e.what());
    return nullptr;
  }
}
