// Which implementation runs an op on CUDA tensors: native CUDA (csrc/cuda/, the default) or the
// SYCL kernels through oneAPI's CUDA plugin (csrc/sycl/, when selected). Pure policy on plain facts,
// header-only and free of torch/SYCL, so it is tested on its own (tests/test_provider_choice.py).
//
// choose_cuda_backend (backend.h) gathers the facts and acts on the decision:
//   CudaKeyFacts f;
//   f.native_built = <built with the native CUDA backend>;          f.native_why_not = "...";
//   f.sycl_built = <built with SYCL>;  f.sycl_sees_device = <SYCL has a CUDA device for this tensor's
//   device index>;                                                   f.sycl_why_not = "...";
//   auto d = policy::decide_cuda_key(backend_name(requested_backend()), f, op, device.str());
//   Error -> TORCH_CHECK(false, d.message); otherwise record_dispatch(op, <choice>, device, d.message)
//   (message is the fallback reason for 'auto', empty when the default ran).
#pragma once
#include <string>

namespace xkernels::policy {

struct CudaKeyFacts {
  bool native_built = false;      // native CUDA kernels compiled in (and torch has CUDA)
  std::string native_why_not;     // why not, when !native_built
  bool sycl_built = false;        // SYCL backend compiled in
  bool sycl_sees_device = false;  // the SYCL runtime has a CUDA device matching the tensor's device
  std::string sycl_why_not;       // why not, when built but !sycl_sees_device
};

enum class CudaKeyChoice { NativeCuda, SyclOnCuda, Error };

struct CudaKeyDecision {
  CudaKeyChoice choice = CudaKeyChoice::Error;
  // Error: the full error text. Otherwise the fallback reason ('auto' fell back), or empty.
  std::string message;
};

inline const char* cuda_key_choice_name(CudaKeyChoice c) {
  switch (c) {
    case CudaKeyChoice::NativeCuda: return "cuda";
    case CudaKeyChoice::SyclOnCuda: return "sycl";
    case CudaKeyChoice::Error: return "error";
  }
  return "error";
}

namespace detail {
inline std::string sycl_unavailable(const CudaKeyFacts& f) {
  if (!f.sycl_built) return "xkernels was built without the SYCL backend";
  return "the SYCL runtime sees no CUDA device" +
         (f.sycl_why_not.empty() ? std::string() : " (" + f.sycl_why_not + ")") +
         "; SYCL reaches NVIDIA GPUs through the oneAPI CUDA plugin (libur_adapter_cuda.so from 'oneAPI for NVIDIA "
         "GPUs', the same release as the SYCL runtime)";
}
inline std::string native_unavailable(const CudaKeyFacts& f) {
  return "the native CUDA backend is unavailable" +
         (f.native_why_not.empty() ? std::string() : ": " + f.native_why_not);
}
}  // namespace detail

// requested: "auto", "reference", "sycl" or "cuda" (backend_name of the requested backend).
// op: the op's name (for the error text); device: the tensors' device, e.g. "cuda:0".
inline CudaKeyDecision decide_cuda_key(const std::string& requested, const CudaKeyFacts& f, const std::string& op,
                                       const std::string& device) {
  const std::string who = "xkernels." + op + ": ";
  const bool sycl_ok = f.sycl_built && f.sycl_sees_device;
  if (requested == "cuda") {
    if (f.native_built) return {CudaKeyChoice::NativeCuda, ""};
    return {CudaKeyChoice::Error, who + "backend 'cuda' was requested for tensors on " + device + " but " +
                                      detail::native_unavailable(f) +
                                      (sycl_ok ? "; 'sycl' can run them (xkernels.use_backend(\"sycl\"))" : "")};
  }
  if (requested == "sycl") {
    if (sycl_ok) return {CudaKeyChoice::SyclOnCuda, ""};
    return {CudaKeyChoice::Error,
            who + "backend 'sycl' was requested for tensors on " + device + " but " + detail::sycl_unavailable(f)};
  }
  if (requested == "reference") {
    return {CudaKeyChoice::Error, who + "backend 'reference' was requested but the tensors are on " + device +
                                      "; the reference backend runs CPU tensors only: move them to the CPU or select "
                                      "'auto', 'cuda' or 'sycl'"};
  }
  if (requested == "auto") {
    if (f.native_built) return {CudaKeyChoice::NativeCuda, ""};
    if (sycl_ok) return {CudaKeyChoice::SyclOnCuda, detail::native_unavailable(f) + "; running the SYCL kernels"};
    return {CudaKeyChoice::Error, who + "no backend can run tensors on " + device + ": " +
                                      detail::native_unavailable(f) + ", and " + detail::sycl_unavailable(f)};
  }
  return {CudaKeyChoice::Error, who + "unknown backend '" + requested +
                                    "' (expected 'auto', 'reference', 'sycl' or "
                                    "'cuda')"};
}

}  // namespace xkernels::policy
