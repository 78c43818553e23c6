// Every op's kernel table (kernels/<op>.hpp), in one list: what the host provider registers as kernel
// groups (one per kernel file) and what an ahead-of-time launcher library instantiates (aot/launchers.cpp).
// Not given to the run-time compiler: it compiles one kernel file at a time.
#pragma once
#include <cstddef>

#include "amx_gemm.hpp"
#include "common.hpp"
#include "conv2d.hpp"
#include "fused_linear_relu.hpp"
#include "layer_norm.hpp"
#include "names.hpp"

namespace xk {

// A kernel file and its table.
template <const char* File, typename Kernels>
struct table {
  static constexpr const char* file = File;
  using kernels = Kernels;
};

inline constexpr char layer_norm_file[] = "layer_norm.hpp";
inline constexpr char conv2d_file[] = "conv2d.hpp";
inline constexpr char fused_linear_relu_file[] = "fused_linear_relu.hpp";
inline constexpr char amx_gemm_file[] = "amx_gemm.hpp";

using all_tables =
    type_list<table<layer_norm_file, layer_norm_kernels>, table<conv2d_file, conv2d_kernels>,
              table<fused_linear_relu_file, fused_linear_relu_kernels>, table<amx_gemm_file, amx_gemm_kernels>>;

// ------------------------------------------------------------------ compile-time walks over the tables
// Calls f(table_tag, kernel_tag, type_tag) for every (table, kernel, element type), in a fixed order:
// the order of all_tables, then of each table's kernel_list, then of each kernel's types. The position
// in that order is a kernel instantiation's index in an ahead-of-time library.
template <typename X>
struct tag {
  using type = X;
};

template <typename Tab, typename K, typename F, typename... Ts>
constexpr void for_each_type(type_list<Ts...>, F& f) {
  (f(tag<Tab>{}, tag<K>{}, tag<Ts>{}), ...);
}
template <typename Tab, typename F, typename... Ks>
constexpr void for_each_kernel(kernel_list<Ks...>, F& f) {
  (for_each_type<Tab, Ks>(typename Ks::types{}, f), ...);
}
template <typename F, typename... Tabs>
constexpr void for_each_instance_in(type_list<Tabs...>, F& f) {
  (for_each_kernel<Tabs>(typename Tabs::kernels{}, f), ...);
}
template <typename F>
constexpr void for_each_instance(F&& f) {
  for_each_instance_in(all_tables{}, f);
}

// Index of (K, T) in that order (constexpr), or -1.
template <typename K, typename T>
constexpr long instance_index() {
  long i = 0, found = -1;
  auto visit = [&](auto tab, auto k, auto t) {
    (void)tab;
    if (std::is_same_v<typename decltype(k)::type, K> && std::is_same_v<typename decltype(t)::type, T>) found = i;
    ++i;
  };
  for_each_instance(visit);
  return found;
}

}  // namespace xk
