// Backend selection, shared by every dispatch key.
//
// The *requested* backend is "auto" unless set by XKERNELS_BACKEND (process default)
// or xkernels.use_backend(...) (a per-thread override). Where two implementations
// share a dispatch key (CPU: reference vs SYCL-on-CPU), the single registered
// function asks choose_*() which one runs. An explicit request that cannot be
// honoured raises; "auto" may fall back, and the reason is recorded.
#pragma once
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <optional>
#include <string>
#include <vector>

namespace xkernels {

enum class Backend { Auto = 0, Reference = 1, Sycl = 2, Cuda = 3, Acpp = 4 };

const char* backend_name(Backend b);
// Parses "auto" | "reference" | "sycl" | "cuda" | "acpp" (case-insensitive); throws ValueError naming `what`.
Backend parse_backend(const std::string& name, const char* what);

Backend default_backend();  // process default (XKERNELS_BACKEND at first use)
void set_default_backend(Backend b);
std::optional<Backend> thread_backend();  // per-thread override (use_backend)
void set_thread_backend(std::optional<Backend> b);
Backend requested_backend();  // thread override, else process default

// Availability of the SYCL backend for CPU tensors (built, runtime loaded, CPU device found,
// dtype supported by the device). Implemented by csrc/sycl/runtime.cpp when built with SYCL.
bool sycl_cpu_available(at::ScalarType dtype, std::string* why_not);

// Availability of the acpp backend (AdaptiveCpp's ahead-of-time kernels, libxkernels_acpp.so) for
// CPU tensors. A conformance backend: it runs only when selected explicitly, never under "auto".
bool acpp_cpu_available(std::string* why_not);

// Does the SYCL runtime have a usable CUDA device (oneAPI's CUDA plugin) for CUDA device `index`
// (any CUDA device when index < 0)? Implemented by csrc/sycl/runtime.cpp when built with SYCL.
bool sycl_cuda_device_available(int index, std::string* why_not);

// Which implementation runs an op on CPU tensors: Reference, Sycl or (explicitly selected) Acpp.
Backend choose_cpu_backend(const char* op, at::ScalarType dtype);
// Inside a deferred-wait region on this thread (csrc/sycl/launch.h PendingHostWork; xkernels.optimize opens them
// around containers of packed convolutions): waits for the SYCL CPU kernels this thread has queued and rethrows their
// errors, so that the host code that follows may read and write their tensors. Every op entry calls it before
// touching data (entry.h), except conv2d_packed's SYCL route, which decides for itself. Outside a region (or built
// without SYCL) it returns at once.
void settle_host_work();
// The decision choose_cpu_backend makes, without checking an explicit request or recording it: the requested
// backend, or under "auto" Sycl when the SYCL CPU device runs `dtype`, else Reference (`auto_fallback_reason`,
// if given, then says why). xkernels._C.cpu_backend exports it to Python.
Backend cpu_backend_choice(at::ScalarType dtype, std::string* auto_fallback_reason = nullptr);
// "float32" | "float64" | "float16" | "bfloat16" (also torch's short names) -> ScalarType (the Python control
// functions name dtypes so); throws ValueError naming `what` (e.g. "xkernels._C.cpu_backend: argument 'dtype_name'").
at::ScalarType scalar_type_from_name(const std::string& name, const char* what);

// Which implementation runs an op on CUDA tensors: Cuda (native, default) or Sycl
// (SYCL through oneAPI's CUDA plugin, when selected). Implemented with the CUDA backend.
Backend choose_cuda_backend(const char* op, at::ScalarType dtype);
// XPU tensors: always Sycl (on torch's current XPU queue); raises for 'reference' / 'cuda'.
Backend choose_xpu_backend(const char* op, at::ScalarType dtype);

// ---- dispatch record (off by default; one relaxed atomic load when off) ----
bool dispatch_record_enabled();
void set_dispatch_record_enabled(bool on);
void record_dispatch(const char* op, Backend ran, const c10::Device& device, const std::string& fallback_reason);
struct DispatchEvent {
  std::string op, backend, device, fallback_reason;
  int64_t count;
};
std::vector<DispatchEvent> dispatch_record_snapshot();
void dispatch_record_clear();

}  // namespace xkernels

// Runs `expr` when built with the SYCL backend; otherwise reports that it is not built.
#ifdef XKERNELS_WITH_SYCL
#define XK_IF_SYCL(expr) expr
#else
#define XK_IF_SYCL(expr) TORCH_CHECK(false, "xkernels was built without the SYCL backend")
#endif
#ifdef XKERNELS_WITH_ACPP
#define XK_IF_ACPP(expr) expr
#else
#define XK_IF_ACPP(expr) TORCH_CHECK(false, "xkernels was built without the acpp backend")
#endif
