// Device-side helpers shared by every SYCL kernel file (kernels/*.hpp).
//
// Kernel files are the single source for both ways kernels reach a device: embedded and
// compiled at run time by the SYCL runtime's kernel compiler, or compiled ahead of time by
// icpx -fsycl. So: standard SYCL 2020 + the free-function-kernel extension only, includes
// of other kernel files with "quotes", no torch headers, no host-only code.
//
// Kernel shape used throughout:
//   template <typename T>
//   XK_ND_KERNEL(1) void my_kernel(const T* x, T* y, int64_t n) { auto it = xk::item<1>(); ... }
// registered (and instantiated) by name, e.g. "xk::my_kernel<float>".
#pragma once
#include <sycl/sycl.hpp>

#include <cstdint>

namespace syclext = sycl::ext::oneapi;
namespace syclexp = sycl::ext::oneapi::experimental;

// Marks a free function as an nd_range kernel of dimension N.
#define XK_ND_KERNEL(N) SYCL_EXT_ONEAPI_FUNCTION_PROPERTY((syclexp::nd_range_kernel<N>))

namespace xk {

using bfloat16 = sycl::ext::oneapi::bfloat16;

// The calling work-item (free-function kernels receive no item argument).
template <int N> inline sycl::nd_item<N> item() { return syclext::this_work_item::get_nd_item<N>(); }

// Accumulation type: half and bfloat16 accumulate in float; float in float; double in double
// (the same mapping as the host's xkernels::acc_t).
template <typename T> struct acc_type { using type = float; };
template <> struct acc_type<double> { using type = double; };
template <typename T> using acc_t = typename acc_type<T>::type;

// bfloat16 <-> float by bit manipulation. sycl::ext::oneapi::bfloat16's own conversions
// call device-library functions that some runtimes lack at run-time compile (2025.x); these
// give the same results as torch's c10::BFloat16: exact widening, round-to-nearest-even
// narrowing, NaN -> canonical quiet NaN 0x7FC0.
inline float bf16_bits_to_float(uint16_t b) { return sycl::bit_cast<float>(static_cast<uint32_t>(b) << 16); }
inline uint16_t float_to_bf16_bits(float f) {
  const uint32_t u = sycl::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
  const uint32_t rounding_bias = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding_bias) >> 16);
}

// Element <-> accumulation type conversions.
template <typename T> inline acc_t<T> to_acc(T v) { return static_cast<acc_t<T>>(v); }
template <> inline float to_acc<bfloat16>(bfloat16 v) { return bf16_bits_to_float(sycl::bit_cast<uint16_t>(v)); }

template <typename T> inline T from_acc(acc_t<T> v) { return static_cast<T>(v); }
template <> inline bfloat16 from_acc<bfloat16>(float v) { return sycl::bit_cast<bfloat16>(float_to_bf16_bits(v)); }

// p[i] as the accumulation type / p[i] = v converted to T.
template <typename T> inline acc_t<T> load(const T* p, int64_t i) { return to_acc<T>(p[i]); }
template <typename T> inline void store(T* p, int64_t i, acc_t<T> v) { p[i] = from_acc<T>(v); }

// Sum over the sub-group (every lane gets the result).
template <typename A> inline A sub_group_sum(const sycl::sub_group& sg, A v) {
  return sycl::reduce_over_group(sg, v, sycl::plus<A>());
}

}  // namespace xk
