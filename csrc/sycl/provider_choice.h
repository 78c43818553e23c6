// Where the kernel provider gets a device's kernels from: the ahead-of-time launcher library (built by icpx
// from csrc/sycl/aot/launchers.cpp, see aot_library.h and docs/oneapi.md) or the SYCL runtime's kernel
// compiler at run time.
// Pure logic on plain structs (no SYCL, no torch), so it is tested without a device or a compiler.
//
// How kernel_provider.cpp uses it, once per device (the first launch on that device):
//
//   #ifdef XKERNELS_SYCL_AOT
//     auto images = provider_choice::parse_aot_targets(XKERNELS_SYCL_AOT_TARGETS);   // the build's spec
//   #else
//     std::vector<provider_choice::AotImage> images;   // no AOT library: always run-time compile
//   #endif
//   provider_choice::DeviceDesc d = provider_choice::describe_device(dev);   // provider_device.h
//   // (backend, kind, architecture name such as "intel_gpu_pvc" / "nvidia_gpu_sm_90", and for CUDA the
//   //  compute capability from it; for CUDA tensors torch's at::cuda::getDeviceProperties(i)->major/minor
//   //  may overwrite cc_major/cc_minor, covering GPUs newer than the runtime's architecture list)
//   provider_choice::Choice c = provider_choice::choose(images, d);
//
//   * c.source != RuntimeCompile: collect the group's ids (AotKernel::id() for entries whose file is the
//     group's file), confirm with sycl::is_compatible(ids, dev) — the runtime's own image matching has the
//     last word — then sycl::get_kernel_bundle<executable>(ctx, {dev}, ids) and bundle.get_kernel(id).
//     If a registered name the group asks for is not in the library, or is_compatible is false, compile the
//     group at run time and record why (the library was built from other sources, or lacks the image).
//   * c.source == RuntimeCompile: before the process's first run-time build, apply_runtime_env(c.runtime_env)
//     (SYCL reads SYCL_JIT_AMDGCN_PTX_TARGET_CPU once; with several CUDA devices pass
//     {{"SYCL_JIT_AMDGCN_PTX_TARGET_CPU", runtime_ptx_target(all CUDA devices)}} instead) and keep its lines
//     for info(). Then build from the embedded sources as without oneAPI.
//   * Keep describe(c) (plus any override above) per device for xkernels.info()["sycl"]["provider"].
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace xkernels::sycl_backend::provider_choice {

enum class DeviceBackend { LevelZero, OpenCL, Cuda, Hip, Other };
const char* device_backend_name(DeviceBackend b);
// Accepts the names SYCL prints for sycl::backend ("ext_oneapi_level_zero", "opencl", "ext_oneapi_cuda",
// "ext_oneapi_hip") and the short ones ("level_zero", "cuda", "hip"); anything else is Other.
DeviceBackend parse_device_backend(const std::string& name);

struct DeviceDesc {
  DeviceBackend backend = DeviceBackend::Other;
  bool is_gpu = false;
  bool is_cpu = false;
  // Architecture as SYCL names it ("intel_gpu_pvc", "nvidia_gpu_sm_90", "amd_gpu_gfx90a") or as ocloc
  // does ("pvc", "bmg-g21"); empty when unknown.
  std::string arch;
  int cc_major = 0;  // CUDA compute capability; 0 when unknown (then taken from arch if it names sm_NN)
  int cc_minor = 0;
};

// One device image kind in the AOT library: a target and, where it has them, its architectures.
struct AotImage {
  std::string target;              // "spir64", "spir64_gen", "nvptx64-nvidia-cuda", "intel_gpu_pvc", ...
  std::vector<std::string> archs;  // spir64_gen: ocloc devices; nvptx64-nvidia-cuda: its sm_NN
};

// Parses the library's target spec (XKERNELS_SYCL_AOT_TARGETS, from the build plan): entries separated by spaces,
// each "target" or "target:arch[,arch...]". Throws std::invalid_argument naming the bad entry.
std::vector<AotImage> parse_aot_targets(const std::string& spec);

enum class Source {
  AotNative,       // machine code for this device's architecture, built by icpx
  AotPortable,     // SPIR-V, or PTX for an older sm: built by icpx, finalised by the device driver at load
  RuntimeCompile,  // no usable image: the SYCL runtime's kernel compiler builds the embedded sources
};
const char* source_name(Source s);  // "aot-native", "aot-portable", "run-time-compile"

struct Choice {
  Source source = Source::RuntimeCompile;
  std::string image;   // the image used, e.g. "nvptx64-nvidia-cuda:sm_75"; empty for run-time compilation
  std::string reason;  // one sentence, for xkernels.info()
  // Run-time compilation only: environment the runtime's kernel compiler reads (set if the user has not).
  std::vector<std::pair<std::string, std::string>> runtime_env;
};

// "sm_90" from compute capability 9.0; "" when major <= 0.
std::string cuda_arch(int cc_major, int cc_minor);
// 90 from "sm_90" / "sm_90a" / "nvidia_gpu_sm_90"; -1 when the text names no sm architecture.
int cuda_arch_number(const std::string& arch);
// Intel architecture name normalised to ocloc's spelling: "intel_gpu_bmg_g21" -> "bmg-g21", "acm-g10" -> "dg2-g10".
std::string normalize_intel_arch(const std::string& arch);

Choice choose(const std::vector<AotImage>& images, const DeviceDesc& dev);

// SYCL reads SYCL_JIT_AMDGCN_PTX_TARGET_CPU once per process, so CUDA devices compiled at run time
// share one PTX architecture: the lowest among them (PTX runs on newer GPUs). "" if none is known.
std::string runtime_ptx_target(const std::vector<DeviceDesc>& cuda_devices);

// Sets each variable of `env` that the process environment does not already have (the user's value
// wins). Call before the first run-time build in the process. Returns one line per variable:
// "SYCL_JIT_AMDGCN_PTX_TARGET_CPU=sm_90 (set)" or "... =sm_80 (kept the user's value; wanted sm_90)".
std::vector<std::string> apply_runtime_env(const std::vector<std::pair<std::string, std::string>>& env);

// ---- SYCL on CUDA tensors: which SYCL device is torch's cuda:<index>
// One SYCL device of the CUDA backend, in the order the runtime lists them.
struct CudaSyclDevice {
  bool usable = false;
  std::string unusable_reason;
  std::string uuid;  // 32 lowercase hex digits, "" when the runtime does not report one
};
struct CudaDeviceMatch {
  int index = -1;  // into the list passed to match_cuda_device; -1 on error
  bool by_uuid = false;
  std::string error;  // why none matched (complete sentence fragment without the op name)
};
// Matches torch's CUDA device `torch_index` (whose UUID is `torch_uuid`, "" if unknown) to one of the
// SYCL runtime's CUDA devices. By UUID when both sides know it (a CUDA_VISIBLE_DEVICES mismatch between
// the two runtimes cannot then pick the wrong GPU); otherwise by ordinal (both list devices in CUDA's
// order). The matched device must be usable.
CudaDeviceMatch match_cuda_device(int torch_index, const std::string& torch_uuid,
                                  const std::vector<CudaSyclDevice>& sycl_cuda_devices);
// 32 lowercase hex digits of 16 bytes.
std::string uuid_hex(const unsigned char* bytes16);

// "aot-native (spir64_gen:pvc): <reason>" / "run-time-compile: <reason>".
std::string describe(const Choice& c);

}  // namespace xkernels::sycl_backend::provider_choice
