// The ahead-of-time launchers: one parallel_for per (kernel, element type) of every kernel table, in
// standard SYCL 2020, compiled by an ahead-of-time SYCL compiler into a launcher library (abi.h).
// AdaptiveCpp builds it as libxkernels_acpp.so (cmake/AcppBackend.cmake). Nothing here is DPC++-specific.
//
// Build definitions: XK_AOT_SUB_GROUP  the implementation's sub-group size on its device (AdaptiveCpp's
//                                      CPU backends: 1), reported to the host. Every kernel is built: a
//                                      kernel's S lanes are its work-group's work-items, and its lane
//                                      reductions (xk::lanes_sum) reduce over the work-group here.
//                    XK_AOT_IMPLEMENTATION, XK_AOT_FLAGS   descriptive strings for xkernels.info().
#include "abi.h"

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "../kernels/tables.hpp"

#ifndef XK_AOT_SUB_GROUP
#error "XK_AOT_SUB_GROUP (the sub-group size of the target device) must be defined"
#endif
#ifndef XK_AOT_IMPLEMENTATION
#define XK_AOT_IMPLEMENTATION "unknown SYCL implementation"
#endif
#ifndef XK_AOT_FLAGS
#define XK_AOT_FLAGS ""
#endif

namespace {

sycl::queue& queue() {
  static sycl::queue q{sycl::default_selector_v, sycl::property::queue::in_order{}};
  return q;
}

template <int D>
sycl::nd_range<D> make_range(const size_t* g, const size_t* l);
template <>
sycl::nd_range<1> make_range<1>(const size_t* g, const size_t* l) {
  return sycl::nd_range<1>(sycl::range<1>(g[0]), sycl::range<1>(l[0]));
}
template <>
sycl::nd_range<2> make_range<2>(const size_t* g, const size_t* l) {
  return sycl::nd_range<2>(sycl::range<2>(g[0], g[1]), sycl::range<2>(l[0], l[1]));
}
template <>
sycl::nd_range<3> make_range<3>(const size_t* g, const size_t* l) {
  return sycl::nd_range<3>(sycl::range<3>(g[0], g[1], g[2]), sycl::range<3>(l[0], l[1], l[2]));
}

template <typename K, typename T>
int launch_one(const size_t* global, const size_t* local, const void* params, void* queue_ptr, char* err,
               size_t errlen) {
  try {
    using P = typename K::template params<T>;
    using L = typename xk::local_of<K, T>::type;
    constexpr int D = K::dims;
    const P p = *static_cast<const P*>(params);
    const sycl::nd_range<D> range = make_range<D>(global, local);
    sycl::queue& q = queue_ptr ? *static_cast<sycl::queue*>(queue_ptr) : queue();
    sycl::event done = q.submit([&](sycl::handler& h) {
      if constexpr (std::is_void_v<L>) {
        h.parallel_for(range, [=](sycl::nd_item<D> it) { K::template run<T>(xk::item_arg<D>{it}, p); });
      } else {
        sycl::local_accessor<L, 1> scratch(sycl::range<1>(1), h);
        h.parallel_for(range, [=](sycl::nd_item<D> it) { K::template run<T>(xk::item_arg<D>{it}, p, scratch[0]); });
      }
    });
    if (!queue_ptr) done.wait_and_throw();
    return 0;
  } catch (const std::exception& e) {
    std::snprintf(err, errlen, "%s", e.what());
    return 1;
  }
}

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
    e.launch = &launch_one<K, T>;  // lanes are work-items here: any sub-group size computes the same
    l->kernels.push_back(e);
  });
  const sycl::device dev = queue().get_device();
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
