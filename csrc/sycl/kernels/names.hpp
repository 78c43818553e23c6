// Names of kernel instantiations, shared by the kernel tables (tables.hpp) and the ahead-of-time launcher
// parts (aot/launcher_part.cpp), which must not include every kernel file. Not given to the run-time compiler.
#pragma once
#include <cctype>
#include <string>

#include "common.hpp"

namespace xk {

// Element type names as the tables spell them (also used in ahead-of-time library listings).
template <typename T>
constexpr const char* type_label();
template <>
constexpr const char* type_label<float>() {
  return "float";
}
template <>
constexpr const char* type_label<double>() {
  return "double";
}
template <>
constexpr const char* type_label<half>() {
  return "half";
}
template <>
constexpr const char* type_label<bf16>() {
  return "bf16";
}

}  // namespace xk

namespace xk_names {

// The C++ spelling of type X as the compiler prints it (outside namespace xk, so that the names of
// the kernel descriptors come out qualified; GCC drops the qualifier of the function's own namespace)
// ("xk::conv2d_igemm<true, 16, 6, 4>"; GCC and Clang agree on it for the descriptors), used to generate run-time entry
// points and to check that an ahead-of-time library was built from the same tables.
template <typename X>
std::string cxx_name() {
  const std::string s = __PRETTY_FUNCTION__;  // "... cxx_name() [with X = xk::layer_norm_fwd; ...]" (GCC)
  const std::string key = "X = ";             // "... cxx_name() [X = xk::layer_norm_fwd]" (Clang)
  size_t b = s.find(key);
  if (b == std::string::npos) return "?";
  b += key.size();
  int depth = 0;
  size_t e = b;
  for (; e < s.size(); ++e) {
    const char c = s[e];
    if (c == '<') ++depth;
    if (c == '>') --depth;
    if (depth == 0 && (c == ';' || c == ']')) break;
  }
  return s.substr(b, e - b);
}

// "xk::conv2d_igemm<true, 16, 6, 4>" -> "conv2d_igemm_true_16_6_4"
inline std::string identifier(const std::string& cxx) {
  std::string out;
  const std::string s = cxx.rfind("xk::", 0) == 0 ? cxx.substr(4) : cxx;
  for (char c : s) {
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '_')
      out += c;
    else if (!out.empty() && out.back() != '_')
      out += '_';
  }
  while (!out.empty() && out.back() == '_') out.pop_back();
  return out;
}

}  // namespace xk_names

namespace xk {
using xk_names::cxx_name;
using xk_names::identifier;
}  // namespace xk
