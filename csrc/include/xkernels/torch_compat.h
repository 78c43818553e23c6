// Where torch's C++ API differs between the versions xkernels builds against, the difference is
// bridged here, once, by detecting the feature (not by comparing version numbers). Tested range:
// README "Compatibility".
//
//  - at::Tag::out (torch >= 2.13) marks an op with out= semantics, which torch.compile uses to
//    functionalize it. Before that, torch 2.11/2.12 have at::Tag::out_variant for the same purpose
//    (2.13 keeps out_variant as a deprecated no-op). out_tag() returns whichever the headers have.
#pragma once
#include <ATen/core/enum_tag.h>

#include <type_traits>

namespace xkernels::compat {
namespace detail {
template <class T, class = void>
struct HasOutTag : std::false_type {};
template <class T>
struct HasOutTag<T, std::void_t<decltype(T::out)>> : std::true_type {};

template <class T>
constexpr T out_tag_of() {
  if constexpr (HasOutTag<T>::value)
    return T::out;
  else
    return T::out_variant;
}
}  // namespace detail

// The tag of an op whose mutable arguments are write-only outputs (layer_norm.out).
constexpr at::Tag out_tag() { return detail::out_tag_of<at::Tag>(); }

}  // namespace xkernels::compat
