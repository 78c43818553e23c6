// Host side of the kernel tables (kernels/tables.hpp): the run-time compiler's entry points are
// generated from them, and every name the provider uses comes from them.
//
// For each (kernel K, element type T) of a table the run-time compiler gets one generated
// free-function kernel, e.g.
//   SYCL_EXT_ONEAPI_FUNCTION_PROPERTY((sycl::ext::oneapi::experimental::nd_range_kernel<1>))
//   void xk_layer_norm_fwd__float(xk::layer_norm_fwd::params<float> p) {
//     xk::layer_norm_fwd::run<float>(xk::item_arg<1>{}, p);
//   }
// (plus [[sycl::reqd_sub_group_size(S)]] and a work_group_static for kernels that ask for them). The
// kernel takes ONE argument, its typed parameter struct. Measured with intel-sycl-rt 2026.1.2: a
// non-template free-function kernel taking a struct works; a *template* free-function kernel whose
// parameter type depends on a template parameter crashes the run-time compiler (SIGSEGV in build()),
// which is why the entries are generated per instantiation rather than registered as template names.
#pragma once
#include <cctype>
#include <string>
#include <type_traits>
#include <vector>

#include "sycl/kernels/tables.hpp"
#include "sycl/runtime.h"

namespace xkernels::sycl_backend {

namespace table_detail {

using xk::cxx_name;
using xk::identifier;

// The device type's spelling in generated source.
template <typename T>
std::string device_type_name() {
  return cxx_name<T>();
}
template <>
inline std::string device_type_name<xk::half>() {
  return "xk::half";
}
template <>
inline std::string device_type_name<xk::bf16>() {
  return "xk::bf16";
}

using xk::identifier;

}  // namespace table_detail

// Registered name of (K, T)'s run-time entry point, e.g. "xk_layer_norm_fwd__float".
template <typename K, typename T>
std::string entry_name() {
  return "xk_" + table_detail::identifier(xk::cxx_name<K>()) + "__" + xk::type_label<T>();
}

// A human-readable name, e.g. "layer_norm_fwd<float>" (launch errors, listings).
// (kernel_label_of: the same from the names, for the launcher libraries' listings.)
inline std::string kernel_label_of(const std::string& kernel, const std::string& type) {
  return (kernel.rfind("xk::", 0) == 0 ? kernel.substr(4) : kernel) + "<" + type + ">";
}
template <typename K, typename T>
std::string kernel_label() {
  return kernel_label_of(xk::cxx_name<K>(), xk::type_label<T>());
}

// The lane-width rule, once: kernels sized for `natural` lanes (one 512-bit vector of the accumulation type:
// 16 floats / 8 doubles; the GEMM tiles: 16 of any type) run 8 lanes on devices with 16 vector registers (AVX2
// CPUs, DeviceTraits::vector_registers: 8 floats per ymm; doubles keep 8 lanes, two ymm per vector), whose
// register file the tiles of width 8 fit. lane_width (conv2d's lane-variant kernels) and the GEMM's cpu_lanes
// (sycl/fused_linear_relu.cpp) both use it.
inline int simd_lanes(const DeviceTraits& t, int natural) {
  return natural > 8 && t.vector_registers() == 16 ? 8 : natural;
}

// The lane width (the kernels' template S) the host launches lane-variant kernels with for T on a device with
// `t`: simd_lanes of the preferred width where the device has that sub-group size, else 32 (the widths
// kernels/conv2d.hpp instantiates). The ahead-of-time (`acpp`) kernels' lanes are work-items, not SIMD lanes,
// so any width runs there: the preferred one.
template <typename T>
int lane_width(const DeviceTraits& t, bool acpp = false) {
  if (acpp) return xk::preferred_lanes<T>();
  const int want = simd_lanes(t, xk::preferred_lanes<T>());
  for (size_t s : t.sub_group_sizes)
    if (s == static_cast<size_t>(want)) return want;
  return 32;
}

// Can (K, T) run on a device with `t`, and is it one the host launches there? Element type aspects, the
// required sub-group size, and for lane-variant kernels the one width the host picks (lane_width).
template <typename K, typename T>
bool supported_on(const DeviceTraits& t) {
  if (std::is_same_v<T, double> && !t.fp64) return false;
  if (std::is_same_v<T, xk::half> && !t.fp16) return false;
  if (xk::is_amx<K>::value && !t.amx_bf16) return false;
  constexpr int S = xk::sub_group_of<K>::value;
  if (S > 0) {
    bool ok = false;
    for (size_t s : t.sub_group_sizes) ok = ok || s == static_cast<size_t>(S);
    if (!ok) return false;
    if constexpr (xk::is_lane_variant<K>::value)
      if (S != lane_width<T>(t)) return false;
  }
  if constexpr (xk::vector_registers_of<K>::value > 0)
    if (xk::vector_registers_of<K>::value != t.vector_registers()) return false;
  return true;
}

// The generated free-function kernel of (K, T).
template <typename K, typename T>
std::string entry_definition() {
  const std::string k = xk::cxx_name<K>(), t = table_detail::device_type_name<T>(), d = std::to_string(K::dims);
  constexpr int S = xk::sub_group_of<K>::value;
  using L = typename xk::local_of<K, T>::type;
  std::string s = "SYCL_EXT_ONEAPI_FUNCTION_PROPERTY((sycl::ext::oneapi::experimental::nd_range_kernel<" + d + ">))\n";
  if (S > 0) s += "[[sycl::reqd_sub_group_size(" + std::to_string(S) + ")]]\n";
  s += "void " + entry_name<K, T>() + "(" + k + "::params<" + t + "> p) {\n";
  if constexpr (std::is_void_v<L>) {
    s += "  " + k + "::run<" + t + ">(xk::item_arg<" + d + ">{}, p);\n";
  } else {
    s += "  static sycl::ext::oneapi::experimental::work_group_static<xk::local_of<" + k + ", " + t +
         ">::type> local;\n";
    s += "  " + k + "::run<" + t + ">(xk::item_arg<" + d + ">{}, p, *&local);\n";
  }
  return s + "}\n";
}

// A table's kernel group: the entries of every (kernel, type) the device supports, one part per type.
template <typename Tab>
KernelGroup make_kernel_group() {
  KernelGroup g;
  g.file = Tab::file;
  g.entries = [](const DeviceTraits& traits) {
    std::vector<KernelEntry> out;
    auto visit = [&](auto tab, auto k, auto t) {
      using TabT = typename decltype(tab)::type;
      using K = typename decltype(k)::type;
      using T = typename decltype(t)::type;
      if constexpr (std::is_same_v<TabT, Tab>) {
        if (supported_on<K, T>(traits))
          out.push_back(KernelEntry{entry_name<K, T>(), xk::type_label<T>(), entry_definition<K, T>()});
      }
    };
    xk::for_each_instance(visit);
    return out;
  };
  return g;
}

// The kernel group of the table that holds kernel K (kernel_groups() in kernel_groups.cpp).
template <typename K>
const KernelGroup& group_of() {
  static const KernelGroup& group = []() -> const KernelGroup& {
    const char* file = nullptr;
    auto visit = [&](auto tab, auto k, auto) {
      if constexpr (std::is_same_v<typename decltype(k)::type, K>) file = decltype(tab)::type::file;
    };
    xk::for_each_instance(visit);
    return find_kernel_group(file);
  }();
  return group;
}

}  // namespace xkernels::sycl_backend
