// Kernel provider's choice between ahead-of-time images and run-time compilation (provider_choice.h).
#include "provider_choice.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <sstream>
#include <stdexcept>

namespace xkernels::sycl_backend::provider_choice {

namespace {

// The SYCL runtime's kernel compiler takes the NVIDIA/AMD target architecture from this variable
// (default sm_50 for NVIDIA; mandatory for AMD). See docs/oneapi.md.
constexpr const char* kRtcTargetVar = "SYCL_JIT_AMDGCN_PTX_TARGET_CPU";
constexpr const char* kCudaTriple = "nvptx64-nvidia-cuda";

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

bool starts_with(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }

std::string join_targets(const std::vector<AotImage>& images) {
  std::string out;
  for (const auto& im : images) {
    if (!out.empty()) out += ", ";
    out += im.target;
    if (!im.archs.empty()) {
      out += ":";
      for (size_t i = 0; i < im.archs.size(); ++i) out += (i ? "," : "") + im.archs[i];
    }
  }
  return out.empty() ? std::string("none") : out;
}

const AotImage* find_target(const std::vector<AotImage>& images, const std::string& target) {
  for (const auto& im : images)
    if (im.target == target) return &im;
  return nullptr;
}

int device_cuda_number(const DeviceDesc& d) {
  if (d.cc_major > 0) return d.cc_major * 10 + d.cc_minor;
  return cuda_arch_number(d.arch);
}

Choice rtc(std::string reason) {
  Choice c;
  c.source = Source::RuntimeCompile;
  c.reason = std::move(reason);
  return c;
}

Choice choose_cuda(const std::vector<AotImage>& images, const DeviceDesc& d, const std::string& no_aot) {
  const int dev_sm = device_cuda_number(d);
  const std::string dev_arch = dev_sm > 0 ? "sm_" + std::to_string(dev_sm) : std::string();
  // Architecture-specific images (nvidia_gpu_sm_NN) load only on exactly that architecture.
  for (const auto& im : images) {
    if (starts_with(im.target, "nvidia_gpu_") && dev_sm > 0 && cuda_arch_number(im.target) == dev_sm) {
      Choice c;
      c.source = Source::AotNative;
      c.image = im.target;
      c.reason = "ahead-of-time image built for this GPU's architecture (" + dev_arch + ")";
      return c;
    }
  }
  std::string why;
  if (const AotImage* im = find_target(images, kCudaTriple)) {
    const std::string img_arch = im->archs.empty() ? std::string() : im->archs.front();
    const int img_sm = cuda_arch_number(img_arch);
    const std::string image = img_arch.empty() ? std::string(kCudaTriple) : std::string(kCudaTriple) + ":" + img_arch;
    if (dev_sm <= 0) {
      Choice c;
      c.source = Source::AotPortable;
      c.image = image;
      c.reason = "ahead-of-time PTX image (" + (img_arch.empty() ? std::string("driver default") : img_arch) +
                 "); the device's compute capability is unknown, so the runtime's compatibility check decides";
      return c;
    }
    if (img_sm <= 0 || img_sm <= dev_sm) {
      Choice c;
      c.image = image;
      if (img_sm == dev_sm) {
        c.source = Source::AotNative;
        c.reason = "ahead-of-time image built for this GPU's architecture (" + dev_arch + ")";
      } else {
        c.source = Source::AotPortable;
        c.reason = "ahead-of-time PTX for " + (img_arch.empty() ? std::string("the driver default") : img_arch) +
                   ", finalised by the CUDA driver for " + dev_arch;
      }
      return c;
    }
    why = "the ahead-of-time PTX targets " + img_arch + ", newer than this GPU (" + dev_arch + ")";
  } else {
    why = no_aot.empty() ? "the ahead-of-time library has no NVIDIA image (targets: " + join_targets(images) + ")"
                         : no_aot;
  }
  Choice c = rtc(why + "; compiling at run time" +
                 (dev_arch.empty() ? std::string(" for the runtime's default "
                                                 "architecture (compute capability "
                                                 "unknown)")
                                   : " for " + dev_arch));
  if (!dev_arch.empty()) c.runtime_env.emplace_back(kRtcTargetVar, dev_arch);
  return c;
}

Choice choose_intel(const std::vector<AotImage>& images, const DeviceDesc& d, const std::string& no_aot) {
  const std::string dev_arch = normalize_intel_arch(d.arch);
  if (d.is_gpu && !dev_arch.empty()) {
    for (const auto& im : images) {
      if (im.target == "spir64_gen") {
        for (const auto& a : im.archs) {
          if (normalize_intel_arch(a) == dev_arch) {
            Choice c;
            c.source = Source::AotNative;
            c.image = "spir64_gen:" + a;
            c.reason = "ahead-of-time native code for this GPU (" + dev_arch + ")";
            return c;
          }
        }
      } else if (starts_with(im.target, "intel_gpu_") && normalize_intel_arch(im.target) == dev_arch) {
        Choice c;
        c.source = Source::AotNative;
        c.image = im.target;
        c.reason = "ahead-of-time native code for this GPU (" + dev_arch + ")";
        return c;
      }
    }
  }
  if (d.is_cpu && find_target(images, "spir64_x86_64")) {
    Choice c;
    c.source = Source::AotNative;
    c.image = "spir64_x86_64";
    c.reason = "ahead-of-time x86-64 code for the CPU device";
    return c;
  }
  if (find_target(images, "spir64")) {
    Choice c;
    c.source = Source::AotPortable;
    c.image = "spir64";
    c.reason = std::string("ahead-of-time SPIR-V, finalised by the ") +
               (d.backend == DeviceBackend::LevelZero ? "Level Zero" : "OpenCL") + " driver at load" +
               (d.is_gpu && !dev_arch.empty() ? " (no native image for " + dev_arch + ")" : "");
    return c;
  }
  return rtc((no_aot.empty()
                  ? "the ahead-of-time library has no image for this device (targets: " + join_targets(images) + ")"
                  : no_aot) +
             "; compiling at run time");
}

}  // namespace

const char* device_backend_name(DeviceBackend b) {
  switch (b) {
    case DeviceBackend::LevelZero: return "level_zero";
    case DeviceBackend::OpenCL: return "opencl";
    case DeviceBackend::Cuda: return "cuda";
    case DeviceBackend::Hip: return "hip";
    case DeviceBackend::Other: return "other";
  }
  return "other";
}

DeviceBackend parse_device_backend(const std::string& name) {
  std::string s = lower(name);
  if (starts_with(s, "ext_oneapi_"))
    s = s.substr(11);
  else if (starts_with(s, "ext_intel_"))
    s = s.substr(10);
  if (s == "level_zero") return DeviceBackend::LevelZero;
  if (s == "opencl") return DeviceBackend::OpenCL;
  if (s == "cuda") return DeviceBackend::Cuda;
  if (s == "hip") return DeviceBackend::Hip;
  return DeviceBackend::Other;
}

std::vector<AotImage> parse_aot_targets(const std::string& spec) {
  std::vector<AotImage> out;
  std::istringstream in(spec);
  std::string entry;
  while (in >> entry) {
    AotImage im;
    const auto colon = entry.find(':');
    im.target = entry.substr(0, colon);
    if (im.target.empty()) throw std::invalid_argument("AOT target spec: entry '" + entry + "' has no target");
    if (colon != std::string::npos) {
      std::string rest = entry.substr(colon + 1);
      size_t start = 0;
      while (start <= rest.size()) {
        const size_t comma = rest.find(',', start);
        std::string a = rest.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
        if (a.empty()) throw std::invalid_argument("AOT target spec: entry '" + entry + "' has an empty architecture");
        im.archs.push_back(a);
        if (comma == std::string::npos) break;
        start = comma + 1;
      }
    }
    if (im.target == "spir64_gen" && im.archs.empty())
      throw std::invalid_argument("AOT target spec: entry '" + entry + "' lists no devices");
    if (im.target == kCudaTriple && im.archs.size() > 1)
      throw std::invalid_argument("AOT target spec: entry '" + entry + "' lists more than one architecture");
    if (find_target(out, im.target))
      throw std::invalid_argument("AOT target spec: target '" + im.target + "' appears twice in '" + spec + "'");
    out.push_back(std::move(im));
  }
  return out;
}

const char* source_name(Source s) {
  switch (s) {
    case Source::AotNative: return "aot-native";
    case Source::AotPortable: return "aot-portable";
    case Source::RuntimeCompile: return "run-time-compile";
  }
  return "?";
}

std::string cuda_arch(int cc_major, int cc_minor) {
  if (cc_major <= 0 || cc_minor < 0) return "";
  return "sm_" + std::to_string(cc_major * 10 + cc_minor);
}

int cuda_arch_number(const std::string& arch) {
  const std::string s = lower(arch);
  const auto pos = s.rfind("sm_");
  if (pos == std::string::npos || (pos != 0 && s.compare(0, pos, "nvidia_gpu_") != 0)) return -1;
  size_t i = pos + 3;
  int v = 0;
  size_t digits = 0;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) {
    v = v * 10 + (s[i] - '0');
    ++i;
    ++digits;
  }
  if (digits == 0 || digits > 3) return -1;
  if (i != s.size() && !(i + 1 == s.size() && s[i] == 'a')) return -1;
  return v;
}

std::string normalize_intel_arch(const std::string& arch) {
  std::string s = lower(arch);
  if (starts_with(s, "intel_gpu_")) s = s.substr(10);
  std::replace(s.begin(), s.end(), '_', '-');
  // ocloc accepts both spellings for Alchemist (DG2) parts.
  if (s == "acm-g10") return "dg2-g10";
  if (s == "acm-g11") return "dg2-g11";
  if (s == "acm-g12") return "dg2-g12";
  return s;
}

Choice choose(const std::vector<AotImage>& images, const DeviceDesc& dev) {
  const std::string no_aot = images.empty() ? "this build has no ahead-of-time kernels (no oneAPI compiler at build "
                                              "time)"
                                            : "";
  switch (dev.backend) {
    case DeviceBackend::Cuda: return choose_cuda(images, dev, no_aot);
    case DeviceBackend::LevelZero:
    case DeviceBackend::OpenCL: return choose_intel(images, dev, no_aot);
    case DeviceBackend::Hip: {
      Choice c =
          rtc((no_aot.empty() ? "xkernels builds no AMD image ahead of time" : no_aot) + "; compiling at run time" +
              (dev.arch.empty() ? std::string(" (set ") + kRtcTargetVar + " to the GPU's gfx architecture)"
                                : " for " + dev.arch));
      std::string a = lower(dev.arch);
      if (starts_with(a, "amd_gpu_")) a = a.substr(8);
      if (!a.empty()) c.runtime_env.emplace_back(kRtcTargetVar, a);
      return c;
    }
    case DeviceBackend::Other:
    default:
      return rtc((no_aot.empty() ? "the ahead-of-time library has no image for this backend" : no_aot) +
                 "; compiling at run time");
  }
}

std::string runtime_ptx_target(const std::vector<DeviceDesc>& cuda_devices) {
  int best = -1;
  for (const auto& d : cuda_devices) {
    const int n = device_cuda_number(d);
    if (n > 0 && (best < 0 || n < best)) best = n;
  }
  return best > 0 ? "sm_" + std::to_string(best) : std::string();
}

std::vector<std::string> apply_runtime_env(const std::vector<std::pair<std::string, std::string>>& env) {
  std::vector<std::string> done;
  for (const auto& [k, v] : env) {
    const char* have = std::getenv(k.c_str());
    if (have != nullptr && *have != '\0') {
      done.push_back(k + "=" + have + (v == have ? " (already set)" : " (kept the user's value; wanted " + v + ")"));
    } else {
      ::setenv(k.c_str(), v.c_str(), /*overwrite=*/1);
      done.push_back(k + "=" + v + " (set)");
    }
  }
  return done;
}

std::string describe(const Choice& c) {
  std::string out = source_name(c.source);
  if (!c.image.empty()) out += " (" + c.image + ")";
  out += ": " + c.reason;
  for (const auto& [k, v] : c.runtime_env) out += " [" + k + "=" + v + "]";
  return out;
}

std::string uuid_hex(const unsigned char* bytes16) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (int i = 0; i < 16; ++i) {
    out += digits[bytes16[i] >> 4];
    out += digits[bytes16[i] & 15];
  }
  return out;
}

CudaDeviceMatch match_cuda_device(int torch_index, const std::string& torch_uuid,
                                  const std::vector<CudaSyclDevice>& devs) {
  CudaDeviceMatch m;
  const std::string who = "cuda:" + std::to_string(torch_index);
  if (devs.empty()) {
    m.error =
        "the SYCL runtime lists no CUDA device (the oneAPI CUDA plugin, libur_adapter_cuda.so, is not "
        "installed or found no GPU)";
    return m;
  }
  const bool sycl_has_uuids = std::all_of(devs.begin(), devs.end(), [](const auto& d) { return !d.uuid.empty(); });
  if (!torch_uuid.empty() && sycl_has_uuids) {
    for (size_t i = 0; i < devs.size(); ++i)
      if (lower(devs[i].uuid) == lower(torch_uuid)) {
        m.index = static_cast<int>(i);
        m.by_uuid = true;
        break;
      }
    if (m.index < 0) {
      m.error = "none of the SYCL runtime's " + std::to_string(devs.size()) + " CUDA device(s) has the UUID of " + who +
                " (" + lower(torch_uuid) + "); do torch and SYCL see the same GPUs (CUDA_VISIBLE_DEVICES)?";
      return m;
    }
  } else {
    if (torch_index < 0 || torch_index >= static_cast<int>(devs.size())) {
      m.error = "the SYCL runtime lists " + std::to_string(devs.size()) + " CUDA device(s), none with index " +
                std::to_string(torch_index) + " for " + who;
      return m;
    }
    m.index = torch_index;
  }
  const auto& d = devs[static_cast<size_t>(m.index)];
  if (!d.usable) {
    m.error = "the SYCL runtime's CUDA device " + std::to_string(m.index) + " (matched to " + who +
              (m.by_uuid ? " by UUID" : " by index") + ") is unusable: " + d.unusable_reason;
    m.index = -1;
  }
  return m;
}

}  // namespace xkernels::sycl_backend::provider_choice
