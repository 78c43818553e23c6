// Prints what the SYCL runtime says about each CPU device: architecture, the matrix aspect and the
// joint_matrix combinations. Host code only (compiled by bf16_matrix_probe.py with plain g++ against the
// intel-sycl-rt headers; no SYCL compiler needed).
#define SYCL_DISABLE_FSYCL_SYCLHPP_WARNING 1
#include <sycl/sycl.hpp>

#include <iostream>
#include <string>

namespace syclex = sycl::ext::oneapi::experimental;

static std::string arch_name(syclex::architecture a) {
  switch (a) {
#define __SYCL_ARCHITECTURE(NAME, VAL) \
  case syclex::architecture::NAME:     \
    return #NAME;
#define __SYCL_ARCHITECTURE_ALIAS(NAME, VAL)
#define __SYCL_ARCHITECTURE_CONDITIONAL(NAME, VAL, FEATURE_GUARD) __SYCL_ARCHITECTURE(NAME, VAL)
#include <sycl/ext/oneapi/experimental/device_architecture.def>
#undef __SYCL_ARCHITECTURE
#undef __SYCL_ARCHITECTURE_ALIAS
#undef __SYCL_ARCHITECTURE_CONDITIONAL
    default:
      return "unknown(" + std::to_string(static_cast<long long>(a)) + ")";
  }
}

static const char* mtype(syclex::matrix::matrix_type t) {
  using mt = syclex::matrix::matrix_type;
  switch (t) {
    case mt::bf16: return "bf16";
    case mt::fp16: return "fp16";
    case mt::tf32: return "tf32";
    case mt::fp32: return "fp32";
    case mt::fp64: return "fp64";
    case mt::sint8: return "sint8";
    case mt::sint16: return "sint16";
    case mt::sint32: return "sint32";
    case mt::sint64: return "sint64";
    case mt::uint8: return "uint8";
    case mt::uint16: return "uint16";
    case mt::uint32: return "uint32";
    case mt::uint64: return "uint64";
  }
  return "?";
}

int main() {
  for (const auto& d : sycl::device::get_devices(sycl::info::device_type::cpu)) {
    std::cout << "device: " << d.get_info<sycl::info::device::name>() << "\n";
    std::cout << "driver: " << d.get_info<sycl::info::device::driver_version>() << "\n";
    try {
      std::cout << "architecture: " << arch_name(d.get_info<syclex::info::device::architecture>()) << "\n";
    } catch (const std::exception& e) {
      std::cout << "architecture: (query threw: " << e.what() << ")\n";
    }
    std::cout << "aspect ext_intel_matrix: " << (d.has(sycl::aspect::ext_intel_matrix) ? "yes" : "no") << "\n";
    std::cout << "aspects:";
#define __SYCL_ASPECT(ASPECT, ID) \
  if (d.has(sycl::aspect::ASPECT)) std::cout << " " #ASPECT;
#define __SYCL_ASPECT_DEPRECATED(ASPECT, ID, MESSAGE)
#define __SYCL_ASPECT_DEPRECATED_ALIAS(ASPECT, ID, MESSAGE)
#include <sycl/info/aspects.def>
#undef __SYCL_ASPECT
#undef __SYCL_ASPECT_DEPRECATED
#undef __SYCL_ASPECT_DEPRECATED_ALIAS
    std::cout << "\n";
    try {
      auto combos = d.get_info<syclex::info::device::matrix_combinations>();
      std::cout << "matrix_combinations: " << combos.size() << "\n";
      for (const auto& c : combos)
        std::cout << "  " << mtype(c.atype) << " x " << mtype(c.btype) << " -> " << mtype(c.ctype)
                  << " (result " << mtype(c.dtype) << ") max M,N,K=" << c.max_msize << "," << c.max_nsize << ","
                  << c.max_ksize << " M,N,K=" << c.msize << "," << c.nsize << "," << c.ksize << "\n";
    } catch (const std::exception& e) {
      std::cout << "matrix_combinations: (query threw: " << e.what() << ")\n";
    }
  }
  return 0;
}
