// SYCL on CUDA tensors: torch's cuda:N matched to a SYCL CUDA device (by UUID, else ordinal), torch's
// compute capabilities for the run-time PTX target, and the queue on torch's current CUDA stream.
// Torch's CUDA facts come from hooks the native CUDA backend installs (cuda_device_hooks.h).
#ifndef SYCL_EXT_ONEAPI_BACKEND_CUDA_EXPERIMENTAL
#define SYCL_EXT_ONEAPI_BACKEND_CUDA_EXPERIMENTAL 1
#endif
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "sycl/cuda_stream_queue.h"
#include "sycl/provider_choice.h"
#include "sycl/runtime_info.h"
#include "sycl/runtime_internal.h"
#include "xkernels/backend.h"
#include "xkernels/cuda_device_hooks.h"

namespace pc = xkernels::sycl_backend::provider_choice;

namespace xkernels::sycl_backend {

namespace {
std::mutex g_cuda_hooks_mu;
CudaDeviceHooks& cuda_hooks_storage() {
  static CudaDeviceHooks h;
  return h;
}
}  // namespace

CudaDeviceHooks cuda_hooks() {
  std::lock_guard<std::mutex> lock(g_cuda_hooks_mu);
  return cuda_hooks_storage();
}

// The registry's CUDA devices in the runtime's order, as provider_choice sees them.
std::vector<const DeviceRecord*> cuda_records() {
  std::vector<const DeviceRecord*> out;
  for (const auto& rec : registry().devices)
    if (rec.backend == "cuda") out.push_back(&rec);
  return out;
}

std::string sycl_device_uuid(const sycl::device& d) {
  try {
    if (!d.has(sycl::aspect::ext_intel_device_info_uuid)) return "";
    const auto u = d.get_info<sycl::ext::intel::info::device::uuid>();
    return pc::uuid_hex(u.data());
  } catch (const std::exception&) {
    return "";
  }
}

// The registry's CUDA device that is torch's cuda:<index> (provider_choice::match_cuda_device: by UUID, else
// ordinal), or nullptr with *error set. The hooks may throw (torch cannot initialise CUDA).
const DeviceRecord* torch_cuda_device_record(int index, const CudaDeviceHooks& h, std::string* error) {
  std::string torch_uuid;
  unsigned char raw[16];
  if (h.uuid && h.uuid(index, raw)) torch_uuid = pc::uuid_hex(raw);
  const auto recs = cuda_records();
  std::vector<pc::CudaSyclDevice> candidates;
  for (const DeviceRecord* rec : recs)
    candidates.push_back({rec->usable, rec->unusable_reason, sycl_device_uuid(rec->device)});
  const pc::CudaDeviceMatch m = pc::match_cuda_device(index, torch_uuid, candidates);
  if (m.index < 0) {
    *error = m.error;
    return nullptr;
  }
  return recs[static_cast<size_t>(m.index)];
}

// The SYCL device (and its context) for torch's cuda:<index>; matched once per index.
struct CudaTarget {
  sycl::device device;
  sycl::context context;
};
const CudaTarget& cuda_target(int index, const char* who) {
  static std::mutex mu;
  static auto* targets = new std::unordered_map<int, std::unique_ptr<CudaTarget>>();  // leaked: see cpu_queue
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = (*targets)[index];
  if (slot) return *slot;
  std::string error;
  const DeviceRecord* rec = torch_cuda_device_record(index, cuda_hooks(), &error);
  TORCH_CHECK(rec != nullptr, "xkernels: ", who, ": the SYCL backend cannot run on cuda:", index, ": ", error,
              registry().error.empty() ? "" : " (" + registry().error + ")");
  const sycl::device& d = rec->device;
  // The platform's default context: the CUDA adapter's contexts use the device's primary CUDA context,
  // the one torch allocates in, so torch's device pointers are valid in SYCL kernels.
  slot = std::make_unique<CudaTarget>(CudaTarget{d, d.get_platform().khr_get_default_context()});
  return *slot;
}

// Compute capabilities torch reports, per SYCL CUDA device record (matched as cuda_target does); empty
// without the native CUDA backend's hooks. Unmatched devices are left out (the architecture name decides).
std::map<const DeviceRecord*, std::pair<int, int>> torch_compute_capabilities() {
  std::map<const DeviceRecord*, std::pair<int, int>> out;
  const CudaDeviceHooks h = cuda_hooks();
  if (!h.device_count || !h.compute_capability || cuda_records().empty()) return out;
  int n = 0;
  try {
    n = h.device_count();
  } catch (const std::exception&) {
    return out;  // torch cannot initialise CUDA: nothing to add
  }
  for (int i = 0; i < n; ++i) {
    try {
      int major = 0, minor = 0;
      std::string error;
      if (!h.compute_capability(i, &major, &minor)) continue;
      if (const DeviceRecord* rec = torch_cuda_device_record(i, h, &error)) out[rec] = {major, minor};
    } catch (const std::exception&) {
      continue;
    }
  }
  return out;
}

// Torch's current stream on cuda:<index>, as a queue (cached per stream, never made per call).
sycl::queue& cuda_stream_queue(int index) {
  const CudaDeviceHooks h = cuda_hooks();
  TORCH_CHECK(h.current_stream,
              "xkernels: SYCL kernels on CUDA tensors need the native CUDA backend's access to "
              "torch's CUDA streams, and this build has no native CUDA backend");
  const CudaTarget& t = cuda_target(index, "SYCL on CUDA tensors");
  void* stream = h.current_stream(index);
  return cuda_interop::queue_for_stream(t.context, static_cast<cuda_interop::NativeStream>(stream));
}

}  // namespace xkernels::sycl_backend

namespace xkernels {

void set_cuda_device_hooks(const CudaDeviceHooks& hooks) {
  std::lock_guard<std::mutex> lock(sycl_backend::g_cuda_hooks_mu);
  sycl_backend::cuda_hooks_storage() = hooks;
}

bool sycl_cuda_device_available(int index, std::string* why_not) {
  using namespace sycl_backend;
  const auto& r = registry();
  int seen = 0;  // the CUDA plugin lists devices in CUDA's order (both honour CUDA_VISIBLE_DEVICES)
  std::string unusable;
  for (const auto& rec : r.devices) {
    if (rec.backend != "cuda") continue;
    const int i = seen++;
    if (index >= 0 && i != index) continue;
    if (rec.usable) return true;
    unusable += (unusable.empty() ? "" : "; ") + ("its CUDA device " + std::to_string(i) + " is unusable: ") +
                rec.unusable_reason;
  }
  if (why_not) {
    if (!unusable.empty())
      *why_not = unusable;
    else if (!r.error.empty())
      *why_not = r.error;
    else if (seen == 0) {
      std::string listed;
      for (const auto& rec : r.devices)
        listed += (listed.empty() ? "" : ", ") + rec.traits.name + " (" + rec.backend + " " + rec.type + ")";
      *why_not = "its devices: " + listed;
    } else
      *why_not = "it lists " + std::to_string(seen) + " CUDA device(s), none with index " + std::to_string(index);
  }
  return false;
}

}  // namespace xkernels
