// The launchers of one part of one kernel table, for builds that compile the tables in parts instead of
// in launchers.cpp's single translation unit (cmake/AcppBackend.cmake: AdaptiveCpp spends most of the build
// instantiating kernels, and parts compile in parallel; a part includes only its own kernel file, so a
// change to one kernel file recompiles only that file's parts). Standard SYCL 2020 only.
//
// Build definitions (all required):
//   XK_AOT_PART_HEADER   the kernel file, a quoted path, e.g. "../kernels/conv2d.hpp"
//   XK_AOT_PART_KERNELS  its table, e.g. conv2d_kernels
//   XK_AOT_PART          this part, 0 <= XK_AOT_PART < XK_AOT_PARTS: the table's instantiations (kernel, element
//   XK_AOT_PARTS         type), in table order, whose position modulo XK_AOT_PARTS is XK_AOT_PART.
// Every instantiation of the table belongs to exactly one part; launchers.cpp fails the library's load with
// the instantiation's name if a build left one out.
#include <cstddef>
#include <tuple>
#include <utility>

#include "../kernels/names.hpp"
#include "launch.h"

#if !defined(XK_AOT_PART_HEADER) || !defined(XK_AOT_PART_KERNELS) || !defined(XK_AOT_PART) || !defined(XK_AOT_PARTS)
#error "XK_AOT_PART_HEADER, XK_AOT_PART_KERNELS, XK_AOT_PART and XK_AOT_PARTS must be defined"
#endif
#include XK_AOT_PART_HEADER

static_assert(XK_AOT_PARTS >= 1 && XK_AOT_PART >= 0 && XK_AOT_PART < XK_AOT_PARTS, "bad part number");

namespace {

template <typename K, typename T>
struct instance {};

// The table's (kernel, element type) pairs as one tuple type, in table order.
template <typename K, typename... Ts>
std::tuple<instance<K, Ts>...> instances_of_kernel(xk::type_list<Ts...>);
template <typename... Ks>
auto instances_of(xk::kernel_list<Ks...>) -> decltype(std::tuple_cat(instances_of_kernel<Ks>(typename Ks::types{})...));
using instances = decltype(instances_of(xk::XK_AOT_PART_KERNELS{}));

template <typename K, typename T>
void add(instance<K, T>) {
  xk_aot::part_launchers().push_back({xk::cxx_name<K>(), xk::type_label<T>(), &xk_aot::launch_one<K, T>});
}

template <size_t... I>
bool register_part(std::index_sequence<I...>) {
  // Only this part's instantiations are named here, so only they are compiled in this translation unit.
  auto one = [](auto i) {
    constexpr size_t idx = decltype(i)::value;
    if constexpr (idx % XK_AOT_PARTS == XK_AOT_PART) add(std::tuple_element_t<idx, instances>{});
  };
  (one(std::integral_constant<size_t, I>{}), ...);
  return true;
}

const bool registered = register_part(std::make_index_sequence<std::tuple_size_v<instances>>{});

}  // namespace
