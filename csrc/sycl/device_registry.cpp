// The SYCL device registry: every device of every platform, discovered once, with the traits the
// kernels and launch code need, and the device CPU tensors run on (runtime_internal.h).
#include <ATen/ATen.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <unordered_map>

#include "sycl/provider_choice.h"
#include "sycl/runtime_info.h"
#include "sycl/runtime_internal.h"
#include "xkernels/backend.h"

namespace syclex = sycl::ext::oneapi::experimental;

namespace xkernels::sycl_backend {

namespace {

// What to install / check when no usable device is found.
std::string install_hint() {
  const RuntimeVersionInfo& rv = runtime_version_info();
  const bool from_wheel = rv.source.rfind("intel-sycl-rt wheel", 0) == 0;
  const std::string v = from_wheel ? rv.text : "<the intel-sycl-rt version>";
  std::string hint =
      "install Intel's OpenCL CPU runtime and the Unified Runtime adapters of the same version as "
      "the SYCL runtime: pip install 'intel-opencl-rt==" +
      v + "' 'intel-cmplr-lib-ur==" + v +
      "' (intel-cmplr-lib-ur 2026.2.0 ships no OpenCL adapter), and import xkernels before any other "
      "SYCL user so that OCL_ICD_FILENAMES names libintelocl.so";
  if (const char* sel = std::getenv("ONEAPI_DEVICE_SELECTOR"))
    hint += std::string("; note ONEAPI_DEVICE_SELECTOR='") + sel + "' restricts the devices the runtime shows";
  return hint;
}

std::string backend_string(sycl::backend b) {
  switch (b) {
    case sycl::backend::opencl: return "opencl";
    case sycl::backend::ext_oneapi_level_zero: return "level_zero";
    case sycl::backend::ext_oneapi_cuda: return "cuda";
    case sycl::backend::ext_oneapi_hip: return "hip";
    default: return "other";
  }
}

std::string type_string(const sycl::device& d) {
  if (d.is_cpu()) return "cpu";
  if (d.is_gpu()) return "gpu";
  if (d.is_accelerator()) return "accelerator";
  return "other";
}

// The CPU's flags as /proc/cpuinfo lists them (the first processor's; empty where the file is missing).
std::set<std::string> cpu_flags() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::istringstream words(line.substr(colon + 1));
    std::set<std::string> out;
    for (std::string w; words >> w;) out.insert(w);
    return out;
  }
  return {};
}

DeviceTraits make_traits(const sycl::device& d) {
  DeviceTraits t;
  t.is_cpu = d.is_cpu();
  t.fp64 = d.has(sycl::aspect::fp64);
  t.fp16 = d.has(sycl::aspect::fp16);
  t.max_work_group_size = d.get_info<sycl::info::device::max_work_group_size>();
  t.local_mem_bytes = d.get_info<sycl::info::device::local_mem_size>();
  t.sub_group_sizes = d.get_info<sycl::info::device::sub_group_sizes>();
  t.name = d.get_info<sycl::info::device::name>();
  t.native_vector_width_float = d.get_info<sycl::info::device::native_vector_width_float>();
  t.amx_bf16 = t.is_cpu && d.has(sycl::aspect::ext_intel_matrix) && amx_status().first;
  return t;
}

}  // namespace

const Registry& registry() {
  static const Registry reg = [] {
    Registry r;
    std::vector<sycl::platform> platforms;
    try {
      platforms = sycl::platform::get_platforms();
    } catch (const std::exception& e) {
      r.error = std::string("the SYCL runtime failed to list platforms: ") + e.what() + "; " + install_hint();
    }
    for (const auto& p : platforms) {
      std::vector<sycl::device> devs;
      try {
        devs = p.get_devices();
      } catch (const std::exception&) {
        continue;  // a broken platform must not hide the others
      }
      for (const auto& d : devs) {
        DeviceRecord rec;
        rec.device = d;
        try {
          rec.traits = make_traits(d);
          rec.vendor = d.get_info<sycl::info::device::vendor>();
          rec.platform = p.get_info<sycl::info::platform::name>();
          rec.backend = backend_string(d.get_backend());
          rec.type = type_string(d);
          rec.driver = d.get_info<sycl::info::device::driver_version>();
          rec.compute_units = d.get_info<sycl::info::device::max_compute_units>();
          if (!sycl::device(d).ext_oneapi_can_build(syclex::source_language::sycl)) {  // (non-const API)
            rec.unusable_reason = "the SYCL runtime cannot compile SYCL source for this device (kernel_compiler)";
          } else {
            rec.usable = true;
          }
        } catch (const std::exception& e) {
          rec.unusable_reason = std::string("querying the device failed: ") + e.what();
        }
        r.devices.push_back(std::move(rec));
      }
    }
    if (r.devices.empty() && r.error.empty()) {
      const char* icd = std::getenv("OCL_ICD_FILENAMES");
      r.error = std::string("the SYCL runtime found no device (OCL_ICD_FILENAMES=") + (icd ? icd : "<unset>") + "); " +
                install_hint();
    }
    // The device for CPU tensors: a usable CPU device that takes ordinary host pointers.
    // Prefer the OpenCL one (Intel's CPU runtime), the one this project is tested on.
    for (int pass = 0; pass < 2 && r.cpu_index < 0; ++pass) {
      for (size_t i = 0; i < r.devices.size(); ++i) {
        const auto& rec = r.devices[i];
        if (!rec.usable || !rec.traits.is_cpu) continue;
        if (pass == 0 && rec.backend != "opencl") continue;
        if (!rec.device.has(sycl::aspect::usm_system_allocations)) continue;
        r.cpu_index = static_cast<int>(i);
        break;
      }
    }
    if (r.cpu_index < 0) {
      if (!r.error.empty()) {
        r.cpu_reason = r.error;
      } else {
        bool any_cpu = false;
        std::string why;
        for (const auto& rec : r.devices) {
          if (!rec.traits.is_cpu) continue;
          any_cpu = true;
          why += "; '" + rec.traits.name + "': " +
                 (rec.usable ? std::string("no usm_system_allocations (host pointers cannot be passed to kernels)")
                             : rec.unusable_reason);
        }
        r.cpu_reason = any_cpu ? "no usable SYCL CPU device" + why
                               : std::string("the SYCL runtime lists no CPU device; ") + install_hint();
      }
    }
    return r;
  }();
  return reg;
}

std::pair<bool, std::string> amx_status() {
  static const std::pair<bool, std::string> status = []() -> std::pair<bool, std::string> {
    const char* off = std::getenv("XKERNELS_SYCL_AMX");
    if (off && std::string(off) == "0") return {false, "turned off (XKERNELS_SYCL_AMX=0)"};
    const std::set<std::string> flags = cpu_flags();
    if (!flags.count("amx_bf16") || !flags.count("amx_tile"))
      return {false, "the CPU reports no amx_bf16/amx_tile in /proc/cpuinfo"};
    const char* target = std::getenv("CL_CONFIG_CPU_TARGET_ARCH");
    const std::string t = target ? target : "";
    if (t != "sapphirerapids" && t != "graniterapids")
      return {false,
              "CL_CONFIG_CPU_TARGET_ARCH is '" + (target ? t : std::string("<unset>")) +
                  "', not an AMX architecture (sapphirerapids, graniterapids): building a joint_matrix kernel "
                  "for another target aborts the process; import xkernels before any SYCL user so it can set it"};
    return {true, "AMX bf16 (joint_matrix, CL_CONFIG_CPU_TARGET_ARCH=" + t + ")"};
  }();
  return status;
}

const DeviceTraits& traits_of_device(const sycl::device& d) {
  for (const auto& rec : registry().devices)
    if (rec.device == d) return rec.traits;
  static std::mutex mu;
  static auto* extra = new std::unordered_map<sycl::device, std::unique_ptr<DeviceTraits>>();
  std::lock_guard<std::mutex> lock(mu);
  auto& p = (*extra)[d];
  if (!p) p = std::make_unique<DeviceTraits>(make_traits(d));
  return *p;
}

const std::vector<DeviceRecord>& devices() { return registry().devices; }
const std::string& discovery_error() { return registry().error; }

}  // namespace xkernels::sycl_backend

namespace xkernels {

bool sycl_cpu_available(at::ScalarType dtype, std::string* why_not) {
  using namespace sycl_backend;
  const auto& r = registry();  // the probe runs once
  auto fail = [&](const std::string& why) {
    if (why_not) *why_not = why;
    return false;
  };
  if (r.cpu_index < 0) return fail(r.cpu_reason);
  const DeviceRecord& rec = r.devices[r.cpu_index];
  switch (dtype) {
    case at::kFloat:
    case at::kBFloat16: return true;
    case at::kDouble:
      return rec.traits.fp64 ? true : fail("the SYCL CPU device '" + rec.traits.name + "' has no fp64 support");
    case at::kHalf:
      return rec.traits.fp16 ? true : fail("the SYCL CPU device '" + rec.traits.name + "' has no fp16 support");
    default: return fail(std::string("dtype ") + c10::toString(dtype) + " is not supported by the SYCL kernels");
  }
}

}  // namespace xkernels
