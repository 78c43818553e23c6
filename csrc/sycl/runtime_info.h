// Introspection and control of the SYCL runtime glue, for the Python bindings
// (python_bindings.cpp) and tests. Op code uses runtime.h only.
#pragma once
#include <sycl/sycl.hpp>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "sycl/runtime.h"

namespace xkernels::sycl_backend {

struct DeviceRecord {
  sycl::device device;
  DeviceTraits traits;
  std::string vendor, platform, backend, type, driver;
  uint32_t compute_units = 0;
  bool usable = false;          // the kernel provider can build and run kernels on it
  std::string unusable_reason;  // why not, when !usable
};

// Whether bf16 GEMMs may run on the CPU's AMX unit through joint_matrix kernels compiled at run time, and why
// (not): XKERNELS_SYCL_AMX is not 0, /proc/cpuinfo has amx_bf16 and amx_tile, and the OpenCL CPU compiler's target
// (CL_CONFIG_CPU_TARGET_ARCH, read by that runtime when it loads; python/xkernels/_env.py sets it) is an AMX
// architecture. Decided once per process. A CPU device's DeviceTraits::amx_bf16 is this and its ext_intel_matrix.
std::pair<bool, std::string> amx_status();

// Traits of any device (discovered ones are cached; others, e.g. sub-devices, are added).
const DeviceTraits& traits_of_device(const sycl::device& d);

// Every device of every platform (discovered once; empty with discovery_error() set when
// the runtime found none or failed).
const std::vector<DeviceRecord>& devices();
const std::string& discovery_error();

// The SYCL runtime in use: e.g. "2026.1.2"; how it was determined is in runtime_version_source().
std::string runtime_version();
std::string runtime_version_source();
// The options every build gets (version-dependent options + kDeviceFPOptions).
std::vector<std::string> build_options_for_runtime();
// The same with `fp_options` in place of kDeviceFPOptions (tests show what the FP options change).
std::vector<std::string> build_options_with(const std::vector<std::string>& fp_options);
// "compiled at run time (kernel_compiler)" (or, for an ahead-of-time build, what was used).
std::string provider_kind();

// Where each usable device gets its kernels (provider_choice.h): the device's choice, and per
// kernel group built so far what it got ("<source> (<image>): <reason>", or "run-time-compile: <why>"
// when the ahead-of-time library could not serve the group).
struct DeviceProvider {
  std::string device, backend;
  std::string source;                                       // "aot-native" | "aot-portable" | "run-time-compile"
  std::string image;                                        // the library's image, "" for run-time compilation
  std::string choice;                                       // provider_choice::describe of the device's choice
  std::vector<std::pair<std::string, std::string>> groups;  // (kernel file, what it got)
};
std::vector<DeviceProvider> provider_devices();
// The environment set for the runtime's kernel compiler before the first run-time build
// (provider_choice::apply_runtime_env lines); empty before that build or when none was needed.
std::vector<std::string> runtime_compile_env();

// Every kernel-group build of this process: ("<device>: <file>", seconds), in order. A build
// served by the on-disk cache is listed too (it is fast).
std::vector<std::pair<std::string, double>> build_log();

// Entries of the on-disk kernel cache this process found corrupted and removed (directories).
std::vector<std::string> cache_purged();

// Every registered name of every group for `traits` (for xkernels.info()).
std::vector<std::string> all_kernel_names(const DeviceTraits& traits);

// Builds every registered group for every usable device (into the provider's cache, as a first launch would).
// progress(done, total, label) is called before each build; returns (label, seconds).
std::vector<std::pair<std::string, double>> warmup(
    const std::function<void(size_t, size_t, const std::string&)>& progress);

}  // namespace xkernels::sycl_backend
