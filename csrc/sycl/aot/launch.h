// The launcher of one (kernel, element type) instantiation behind abi.h's xk_aot_kernel::launch, shared by
// launchers.cpp (the listing and entry point) and launcher_part.cpp (the launchers of one part of one kernel
// table, when a build compiles the tables in parts: cmake/AcppBackend.cmake). Standard SYCL 2020 only.
#pragma once
#include <cstdio>
#include <exception>
#include <string>
#include <type_traits>
#include <vector>

#include "../kernels/common.hpp"
#include "abi.h"

namespace xk_aot {

using launch_fn = int (*)(const size_t* global, const size_t* local, const void* params, void* queue, char* err,
                          size_t errlen);

// The library's own in-order queue on its default device (launches given no queue run there), defined once in
// launchers.cpp.
sycl::queue& own_queue();

template <int D>
sycl::nd_range<D> make_range(const size_t* g, const size_t* l);
template <>
inline sycl::nd_range<1> make_range<1>(const size_t* g, const size_t* l) {
  return sycl::nd_range<1>(sycl::range<1>(g[0]), sycl::range<1>(l[0]));
}
template <>
inline sycl::nd_range<2> make_range<2>(const size_t* g, const size_t* l) {
  return sycl::nd_range<2>(sycl::range<2>(g[0], g[1]), sycl::range<2>(l[0], l[1]));
}
template <>
inline sycl::nd_range<3> make_range<3>(const size_t* g, const size_t* l) {
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
    sycl::queue& q = queue_ptr ? *static_cast<sycl::queue*>(queue_ptr) : own_queue();
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

// Launchers compiled in parts (launcher_part.cpp) register here while the library loads (static
// initialisation); the listing (launchers.cpp) takes each instantiation's launcher from here by name.
struct part_launcher {
  std::string kernel;  // xk::cxx_name<K>()
  std::string type;    // xk::type_label<T>()
  launch_fn launch;
};
std::vector<part_launcher>& part_launchers();  // defined in launchers.cpp

}  // namespace xk_aot
