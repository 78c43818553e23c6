// The portable kernel form, shared by every kernel file (kernels/<op>.hpp).
//
// A kernel file holds, per op, ONE table of kernels and their bodies. Each table row is a descriptor
// struct: the kernel's name, its dimensionality, the element types it is instantiated for, its variant
// parameters (template arguments of the descriptor), its typed parameter struct, and its body:
//
//   struct layer_norm_fwd {                       // the row; the struct's name is the kernel's name
//     static constexpr int dims = 1;              // nd_range dimensionality
//     static constexpr int sub_group = 0;         // required sub-group size, 0: any
//     using types = xk::float_types;              // element types it is built for
//     template <typename T> struct params { const T* x; ...; int64_t M, N; };   // the one kernel argument
//     template <typename T> static void run(xk::item_arg<1> ia, const params<T>& p);
//   };
//   using layer_norm_kernels = xk::kernel_list<layer_norm_fwd, ...>;            // the op's table
//
// Bodies are standard SYCL 2020: they take their item from the item argument, use sub-groups and group
// algorithms, and no DPC++-only extension. Work-group local memory, where a kernel needs it, is a
// `local_t<T>` struct the body receives by reference. A thin adapter gives the bodies what each SYCL
// implementation needs:
//   * DPC++'s run-time compiler (the provider, XK_RTC defined): generated free-function kernels
//     (SYCL_EXT_ONEAPI_FUNCTION_PROPERTY) take the params struct; the item argument is empty and
//     item() reads this_work_item::get_nd_item; local memory is a work_group_static.
//   * Ahead-of-time compilers (AdaptiveCpp's acpp; icpx): csrc/sycl/aot/launchers.cpp submits
//     parallel_for(nd_range, lambda) per (kernel, type); the lambda's nd_item goes into the item argument;
//     local memory is a local_accessor.
// bfloat16 is xk::bf16, a 2-byte struct converted at the bit level (no implementation's bfloat16 type).
//
// Kernel files include no torch headers and no host-only code, and include each other with "quotes"
// (the run-time compiler receives them as virtual include files). The host includes them too, for the
// descriptors and parameter structs: parameter layouts are therefore shared by construction.
#pragma once
#include <sycl/sycl.hpp>

#include <cstdint>
#include <type_traits>

// Loop unrolling hint for device compilers (the run-time compiler, clang-based ahead-of-time compilers);
// the host compiler, which sees kernel files for their tables only, gets nothing.
#if defined(__SYCL_DEVICE_ONLY__) || defined(__clang__)
#define XK_UNROLL _Pragma("unroll")
#else
#define XK_UNROLL
#endif

namespace xk {

// ------------------------------------------------------------------ element types
// bfloat16 as its bits. Conversions below give the same results as torch's c10::BFloat16: exact
// widening, round-to-nearest-even narrowing, NaN -> canonical quiet NaN 0x7FC0.
struct bf16 {
  uint16_t bits;
};
static_assert(sizeof(bf16) == 2 && std::is_trivially_copyable_v<bf16>, "bf16 must be a 2-byte plain struct");
using half = sycl::half;

template <typename... Ts>
struct type_list {};
using float_types = type_list<float, double, half, bf16>;  // every op's element types

// Accumulation type: half and bfloat16 accumulate in float; float in float; double in double
// (the same mapping as the host's xkernels::acc_t).
template <typename T>
struct acc_type {
  using type = float;
};
template <>
struct acc_type<double> {
  using type = double;
};
template <typename T>
using acc_t = typename acc_type<T>::type;

inline float bf16_bits_to_float(uint16_t b) { return sycl::bit_cast<float>(static_cast<uint32_t>(b) << 16); }
inline uint16_t float_to_bf16_bits(float f) {
  const uint32_t u = sycl::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
  const uint32_t rounding_bias = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding_bias) >> 16);
}

// Element <-> accumulation type conversions.
template <typename T>
inline acc_t<T> to_acc(T v) {
  return static_cast<acc_t<T>>(v);
}
template <>
inline float to_acc<bf16>(bf16 v) {
  return bf16_bits_to_float(v.bits);
}
template <typename T>
inline T from_acc(acc_t<T> v) {
  return static_cast<T>(v);
}
template <>
inline bf16 from_acc<bf16>(float v) {
  return bf16{float_to_bf16_bits(v)};
}

// p[i] as the accumulation type / p[i] = v converted to T.
template <typename T>
inline acc_t<T> load(const T* p, int64_t i) {
  return to_acc<T>(p[i]);
}
template <typename T>
inline void store(T* p, int64_t i, acc_t<T> v) {
  p[i] = from_acc<T>(v);
}

// ------------------------------------------------------------------ the calling work-item
// What a body receives as its first argument; item(ia) is the body's first line.
#ifdef XK_RTC
template <int D>
struct item_arg {};
template <int D>
inline sycl::nd_item<D> item(item_arg<D>) {
  return sycl::ext::oneapi::this_work_item::get_nd_item<D>();
}
#else
template <int D>
struct item_arg {
  sycl::nd_item<D> it;
};
template <int D>
inline sycl::nd_item<D> item(item_arg<D> ia) {
  return ia.it;
}
#endif

// ------------------------------------------------------------------ reductions
// Sum over the sub-group (every lane gets the result).
template <typename A>
inline A sub_group_sum(const sycl::sub_group& sg, A v) {
  return sycl::reduce_over_group(sg, v, sycl::plus<A>());
}

// A work-item's place among the sub-groups of its 1-D work-group. Ahead of time, from its local id and the
// sub-group width:
// sub-group `index` of `count`, lane `lane` of `width`. Kernels that give each sub-group its own rows use this
// rather than the sub-group's group id and range: AdaptiveCpp's CPU backend (sub-groups 1 wide) reported every
// work-item as sub-group 0 of 1, so all 64 work-items of a group took the same row (tests/test_fuzz.py found it:
// layer_norm in place, where a lane then read an element another had already normalized).
struct SubGroupSlot {
  int64_t lane, width, index, count;
};
inline SubGroupSlot sub_group_slot(const sycl::nd_item<1>& it) {
#ifdef XK_RTC
  // DPC++ reports the slot correctly, and its CPU vectorizer needs the sub-group's own lane id to keep the
  // row loops' addresses uniform (the local-id form below made layer_norm 5x slower there).
  const sycl::sub_group sg = it.get_sub_group();
  return SubGroupSlot{static_cast<int64_t>(sg.get_local_linear_id()), static_cast<int64_t>(sg.get_local_linear_range()),
                      static_cast<int64_t>(sg.get_group_linear_id()),
                      static_cast<int64_t>(sg.get_group_linear_range())};
#else
  const int64_t width = static_cast<int64_t>(it.get_sub_group().get_local_linear_range());
  const int64_t local = static_cast<int64_t>(it.get_local_linear_id());
  return SubGroupSlot{local % width, width, local / width, static_cast<int64_t>(it.get_local_range(0)) / width};
#endif
}

// Sum over the lanes that a work-group launched as "one sub-group" has. Under DPC++ the host sizes such
// work-groups to one sub-group (required size S), so the sub-group reduction is the whole work-group's;
// elsewhere (AdaptiveCpp's CPU sub-groups are 1 wide, CUDA's warps 32) the work-group can hold several
// sub-groups, so it reduces over the work-group. Every work-item of the group must call it.
template <int D, typename A>
inline A lanes_sum(const sycl::nd_item<D>& it, A v) {
#ifdef XK_RTC
  return sycl::reduce_over_group(it.get_sub_group(), v, sycl::plus<A>());
#else
  return sycl::reduce_over_group(it.get_group(), v, sycl::plus<A>());
#endif
}

// ------------------------------------------------------------------ tables
template <typename... Ks>
struct kernel_list {};

// kernel_list concatenation.
template <typename... Ls>
struct concat;
template <typename... A>
struct concat<kernel_list<A...>> {
  using type = kernel_list<A...>;
};
template <typename... A, typename... B, typename... Rest>
struct concat<kernel_list<A...>, kernel_list<B...>, Rest...> {
  using type = typename concat<kernel_list<A..., B...>, Rest...>::type;
};
template <typename... Ls>
using concat_t = typename concat<Ls...>::type;

// Element types of kernels whose lanes are a template parameter S (lane-per-SIMD-lane kernels): the
// host launches width 16 for 4- and 2-byte types and 8 for double where the device has those
// sub-group sizes (one 512-bit vector), else 32 for every type (lanes_for in kernel_table.h).
template <int S>
struct lane_types_of {
  using type = type_list<>;
};
template <>
struct lane_types_of<8> {  // double on AVX-512; every type on AVX2 CPUs (8 floats per ymm)
  using type = float_types;
};
template <>
struct lane_types_of<16> {
  using type = type_list<float, half, bf16>;
};
template <>
struct lane_types_of<32> {
  using type = float_types;
};
template <int S>
using lane_types = typename lane_types_of<S>::type;

// The preferred lane width of such kernels for element type T (one 512-bit vector of the accumulation type).
template <typename T>
constexpr int preferred_lanes() {
  return std::is_same_v<T, double> ? 8 : 16;
}

// Descriptors of lane-variant kernels say `static constexpr bool lane_variant = true`: a device builds only the
// width the host launches for each type (lane_width in kernel_table.h), not every width it supports.
// Register-tiled kernels say `static constexpr int vector_registers = 16 | 32`: the register file their tile
// fits (DeviceTraits::vector_registers); they are built only for devices with that budget.
template <typename K, typename = void>
struct vector_registers_of : std::integral_constant<int, 0> {};
template <typename K>
struct vector_registers_of<K, std::void_t<decltype(K::vector_registers)>>
    : std::integral_constant<int, K::vector_registers> {};

template <typename K, typename = void>
struct is_lane_variant : std::false_type {};
template <typename K>
struct is_lane_variant<K, std::void_t<decltype(K::lane_variant)>> : std::bool_constant<K::lane_variant> {};

// Is T one of the list's types?
template <typename L, typename T>
struct has_type;
template <typename... Ts, typename T>
struct has_type<type_list<Ts...>, T> {
  static constexpr bool value = (std::is_same_v<Ts, T> || ...);
};

// Descriptor defaults: a row may leave these out.
template <typename K, typename = void>
struct sub_group_of : std::integral_constant<int, 0> {};
template <typename K>
struct sub_group_of<K, std::void_t<decltype(K::sub_group)>> : std::integral_constant<int, K::sub_group> {};

// Matrix-unit kernels say `static constexpr bool amx = true` (kernels/amx_gemm.hpp): built and
// launched only on devices whose traits say amx_bf16.
template <typename K, typename = void>
struct is_amx : std::false_type {};
template <typename K>
struct is_amx<K, std::void_t<decltype(K::amx)>> : std::bool_constant<K::amx> {};

template <typename K, typename T, typename = void>
struct local_of {
  using type = void;
};
template <typename K, typename T>
struct local_of<K, T, std::void_t<typename K::template local_t<T>>> {
  using type = typename K::template local_t<T>;
};

}  // namespace xk
