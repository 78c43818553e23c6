// One dtype vocabulary for every backend: the four floating types, and the type
// each accumulates in (half and bfloat16 accumulate in float; float in float;
// double in double).
#pragma once
#include <ATen/Dispatch.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

namespace xkernels {

template <typename T>
struct AccumulateType {
  using type = float;
};
template <>
struct AccumulateType<double> {
  using type = double;
};
template <typename T>
using acc_t = typename AccumulateType<T>::type;

}  // namespace xkernels

// Runs the body with `scalar_t` bound to the element type (double, float, c10::Half, c10::BFloat16).
#define XK_DISPATCH_FLOATING_TYPES(TYPE, OPNAME, ...) \
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, TYPE, OPNAME, __VA_ARGS__)
