// User-written SYCL kernels (python/xkernels/sycl.py): kernel bodies in the project's portable form
// (kernels/common.hpp), given as source text from Python, compiled at run time per device and element
// type through the provider, like the built-in kernel groups (built_kernels: its one in-memory cache, the
// kernel files as include files, the pinned options, the persistent on-disk cache and its manifest), and
// launched on queue_for(first tensor) through the one launch path (Kernel::launch, runtime.h).
//
// A source holds one or more kernel bodies, each a function (or a function template over one element
// type T) whose first parameter is `xk::item_arg<D>` and whose other parameters are pointers or scalars:
//   template <typename T> void scale_add(xk::item_arg<1> ia, const T* x, const T* y, T* out, float a, int64_t n);
// Python parses the signatures (sycl.py) and hands them over as UserKernel descriptions; per element type
// this file generates one non-template free-function entry per kernel that calls the body:
//   SYCL_EXT_ONEAPI_FUNCTION_PROPERTY((sycl::ext::oneapi::experimental::nd_range_kernel<1>))
//   void xku_scale_add__float(const float* x, const float* y, float* out, float a, int64_t n) {
//     scale_add<float>(xk::item_arg<1>{}, x, y, out, a, n);
//   }
// (template free-function kernels with dependent parameters crash the run-time compiler; see
// kernel_table.h). The generated source includes the user's text as the file "<name>.sycl" (a
// content-addressed directory under the xkernels cache, passed with -I), so the compiler's
// diagnostics cite the user's own file and line numbers.
#pragma once
#include <ATen/core/Tensor.h>
#include <c10/core/Scalar.h>
#include <sycl/sycl.hpp>

#include "sycl/runtime.h"

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace xkernels::sycl_backend {

// One parameter of a kernel body after its item argument. `base` is normalised by sycl.py:
// "T" (the element type), "acc_t" (xk::acc_t<T>), "float", "double", "half", "bf16", "int8_t",
// "uint8_t", "int16_t", "int32_t", "int64_t", "uint32_t", "uint64_t", "bool".
struct UserParam {
  std::string name;
  std::string base;
  bool pointer = false;
  bool is_const = false;
};

struct UserKernel {
  std::string name;  // the body's name in the source
  int dims = 1;      // from its xk::item_arg<D>
  std::vector<UserParam> params;
};

class UserSource {
 public:
  // `name` names the source in messages and diagnostics ("<name>.sycl"); `templated`: the bodies are
  // templates over one element type T (else they are plain functions, built once per device).
  // `include_dir` holds the source as the file <name>.sycl (written by sycl.py; "" = inline the text).
  // `includes`: the kernel files (virtual include files, e.g. "common.hpp") the source includes; the
  // generated source includes them before it (an on-disk file cannot reach the virtual ones).
  UserSource(std::string name, std::string source, std::string include_dir, std::vector<std::string> includes,
             bool templated, std::vector<UserKernel> kernels, std::vector<std::string> extra_options,
             int sub_group_size);

  const std::string& name() const { return name_; }
  bool templated() const { return templated_; }
  // The translation unit the run-time compiler gets for element type `dtype` (nullopt: untemplated).
  std::string translation_unit(std::optional<at::ScalarType> dtype) const;
  // The build options (the runtime's pinned options, then the user's extra ones).
  const std::vector<std::string>& options() const { return options_; }

  // Is the source built for the device of `device` and `dtype` in this process? build() builds it
  // (once; thread-safe) and returns the seconds this call spent compiling or loading (0: was built).
  bool is_built(const at::Device& device, std::optional<at::ScalarType> dtype);
  double build(const at::Device& device, std::optional<at::ScalarType> dtype);

  // Validates the arguments (tensors for pointer parameters, scalars for the others, in order),
  // the element type, devices, contiguity and the launch geometry, builds if needed, and runs
  // kernel `kernel` over nd_range(global, local) on queue_for(first tensor); waits for CPU tensors.
  // Errors name the source, kernel, parameter and value.
  void launch(const std::string& kernel, const std::vector<int64_t>& global, const std::vector<int64_t>& local,
              const std::vector<at::Tensor>& tensors, const std::vector<c10::Scalar>& scalars);

  // Builds of this process: (label, seconds).
  std::vector<std::pair<std::string, double>> builds() const;

 private:
  // The source's build for `dtype` in the provider's cache (built on a miss, which builds() then lists;
  // `*seconds`: the time this call spent building).
  const KernelMap& built(const sycl::queue& q, std::optional<at::ScalarType> dtype, double* seconds);
  std::string build_key(std::optional<at::ScalarType> dtype) const;
  static std::string entry_name(const UserKernel& k, std::optional<at::ScalarType> dtype);
  const UserKernel& find(const std::string& kernel) const;
  std::string label(std::optional<at::ScalarType> dtype) const;

  std::string name_, source_, include_dir_;
  std::vector<std::string> includes_;
  bool templated_;
  std::vector<UserKernel> kernels_;
  std::vector<std::string> options_;
  int sub_group_size_;
  mutable std::mutex mu_;
  std::vector<std::pair<std::string, double>> builds_;
};

// Registry of the process's sources (the launch op refers to them by id).
int64_t register_user_source(std::shared_ptr<UserSource> src);
std::shared_ptr<UserSource> user_source(int64_t id);

}  // namespace xkernels::sycl_backend
