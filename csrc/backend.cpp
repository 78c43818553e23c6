// Backend selection and the dispatch record (see include/xkernels/backend.h).
#include "xkernels/backend.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <map>
#include <mutex>
#include <tuple>

#include "xkernels/checks.h"

namespace xkernels {

const char* backend_name(Backend b) {
  switch (b) {
    case Backend::Auto: return "auto";
    case Backend::Reference: return "reference";
    case Backend::Sycl: return "sycl";
    case Backend::Cuda: return "cuda";
    case Backend::Acpp: return "acpp";
  }
  return "?";
}

Backend parse_backend(const std::string& name, const char* what) {
  std::string s = name;
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  if (s == "auto" || s.empty()) return Backend::Auto;
  if (s == "reference" || s == "ref") return Backend::Reference;
  if (s == "sycl") return Backend::Sycl;
  if (s == "cuda") return Backend::Cuda;
  if (s == "acpp") return Backend::Acpp;
  TORCH_CHECK_VALUE(false, "xkernels: ", what, " must be one of 'auto', 'reference', 'sycl', 'cuda', 'acpp', got '",
                    name, "'");
}

at::ScalarType scalar_type_from_name(const std::string& name, const char* what) {
  if (name == "float32" || name == "float") return at::kFloat;
  if (name == "float64" || name == "double") return at::kDouble;
  if (name == "float16" || name == "half") return at::kHalf;
  if (name == "bfloat16") return at::kBFloat16;
  TORCH_CHECK_VALUE(false, what, " must be one of 'float32', 'float64', 'float16', 'bfloat16', got '", name, "'");
}

namespace {
std::atomic<int> g_default{-1};  // -1: not read from the environment yet
thread_local std::optional<Backend> t_override;
}  // namespace

Backend default_backend() {
  int v = g_default.load(std::memory_order_acquire);
  if (v < 0) {
    const char* env = std::getenv("XKERNELS_BACKEND");
    Backend b = env ? parse_backend(env, "environment variable XKERNELS_BACKEND") : Backend::Auto;
    int expected = -1;
    g_default.compare_exchange_strong(expected, static_cast<int>(b));
    v = g_default.load(std::memory_order_acquire);
  }
  return static_cast<Backend>(v);
}

void set_default_backend(Backend b) { g_default.store(static_cast<int>(b), std::memory_order_release); }
std::optional<Backend> thread_backend() { return t_override; }
void set_thread_backend(std::optional<Backend> b) { t_override = b; }
Backend requested_backend() { return t_override ? *t_override : default_backend(); }

#ifndef XKERNELS_WITH_SYCL
bool sycl_cpu_available(at::ScalarType, std::string* why_not) {
  if (why_not) *why_not = "xkernels was built without the SYCL backend (SYCL runtime headers not found at build time)";
  return false;
}
#endif

#ifndef XKERNELS_WITH_SYCL
void settle_host_work() {}
#endif

#ifndef XKERNELS_WITH_ACPP
bool acpp_cpu_available(std::string* why_not) {
  if (why_not)
    *why_not =
        "xkernels was built without the acpp backend (AdaptiveCpp's acpp was not found at build time; "
        "set ACPP_ROOT or put acpp on PATH and rebuild, see README)";
  return false;
}
#endif

Backend cpu_backend_choice(at::ScalarType dtype, std::string* auto_fallback_reason) {
  const Backend req = requested_backend();
  if (req != Backend::Auto) return req;
  std::string why;
  if (sycl_cpu_available(dtype, &why)) return Backend::Sycl;
  if (auto_fallback_reason) *auto_fallback_reason = "sycl unavailable: " + why;
  return Backend::Reference;
}

Backend choose_cpu_backend(const char* op, at::ScalarType dtype) {
  std::string fallback_reason;
  const Backend chosen = cpu_backend_choice(dtype, &fallback_reason);
  if (requested_backend() != Backend::Auto) {  // an explicit request runs as asked or raises
    std::string why;
    switch (chosen) {
      case Backend::Sycl:
        TORCH_CHECK(sycl_cpu_available(dtype, &why), "xkernels.", op,
                    ": backend 'sycl' was requested for a CPU tensor of dtype ", dtype, " but is unavailable: ", why);
        break;
      case Backend::Acpp:
        TORCH_CHECK(acpp_cpu_available(&why), "xkernels.", op,
                    ": backend 'acpp' was requested for a CPU tensor but is unavailable: ", why);
        break;
      case Backend::Cuda:
        TORCH_CHECK(false, "xkernels.", op,
                    ": backend 'cuda' was requested but the tensors are on the CPU; move them to a CUDA device "
                    "or select 'auto', 'reference' or 'sycl'");
      default: break;
    }
  }
  if (dispatch_record_enabled()) record_dispatch(op, chosen, c10::Device(c10::kCPU), fallback_reason);
  return chosen;
}

Backend choose_xpu_backend(const char* op, at::ScalarType dtype) {
  const Backend req = requested_backend();
  TORCH_CHECK(req == Backend::Auto || req == Backend::Sycl, "xkernels.", op, ": backend '", backend_name(req),
              "' was requested but the tensors are on an XPU device, which only the 'sycl' backend runs");
  if (dispatch_record_enabled()) record_dispatch(op, Backend::Sycl, c10::Device(c10::kXPU), "");
  return Backend::Sycl;
}

// ---- dispatch record ----
namespace {
std::atomic<bool> g_record{false};
std::mutex g_record_mu;
std::map<std::tuple<std::string, std::string, std::string, std::string>, int64_t>& record_map() {
  static auto* m = new std::map<std::tuple<std::string, std::string, std::string, std::string>, int64_t>();
  return *m;
}
}  // namespace

bool dispatch_record_enabled() { return g_record.load(std::memory_order_relaxed); }
void set_dispatch_record_enabled(bool on) { g_record.store(on, std::memory_order_relaxed); }

void record_dispatch(const char* op, Backend ran, const c10::Device& device, const std::string& fallback_reason) {
  std::lock_guard<std::mutex> lock(g_record_mu);
  ++record_map()[{op, backend_name(ran), device.str(), fallback_reason}];
}

std::vector<DispatchEvent> dispatch_record_snapshot() {
  std::lock_guard<std::mutex> lock(g_record_mu);
  std::vector<DispatchEvent> out;
  for (const auto& [k, n] : record_map())
    out.push_back({std::get<0>(k), std::get<1>(k), std::get<2>(k), std::get<3>(k), n});
  return out;
}

void dispatch_record_clear() {
  std::lock_guard<std::mutex> lock(g_record_mu);
  record_map().clear();
}

}  // namespace xkernels
