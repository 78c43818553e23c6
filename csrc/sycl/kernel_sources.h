// The SYCL kernel files (csrc/sycl/kernels/*.hpp) embedded as text, for the run-time
// kernel compiler. The definition is generated at build time by cmake/EmbedKernels.cmake.
#pragma once
#include <vector>

namespace xkernels::sycl_backend {

struct EmbeddedSource {
  const char* name;  // file name, e.g. "layer_norm.hpp" (what kernels #include "...")
  const char* text;  // the file's exact content
};

const std::vector<EmbeddedSource>& embedded_kernel_sources();

}  // namespace xkernels::sycl_backend
