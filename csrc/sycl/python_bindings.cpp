// _C.sycl: control plane of the SYCL backend for python/xkernels/backends.py and the tests.
#include <c10/core/ScalarType.h>
#include <c10/util/Exception.h>
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "sycl/amx_gemm.h"
#include "sycl/aot_library.h"
#include "sycl/host_alloc.h"
#include "sycl/launch.h"
#include "sycl/runtime_info.h"
#include "xkernels/backend.h"

namespace py = pybind11;

namespace xkernels::sycl_backend {

namespace {

py::dict device_dict(const DeviceRecord& r) {
  py::dict d;
  d["name"] = r.traits.name;
  d["vendor"] = r.vendor;
  d["platform"] = r.platform;
  d["backend"] = r.backend;
  d["type"] = r.type;
  d["driver"] = r.driver;
  d["fp16"] = r.traits.fp16;
  d["fp64"] = r.traits.fp64;
  d["compute_units"] = r.compute_units;
  d["max_work_group_size"] = r.traits.max_work_group_size;
  d["local_mem"] = r.traits.local_mem_bytes;
  d["sub_group_sizes"] = r.traits.sub_group_sizes;
  d["usable"] = r.usable;
  if (!r.usable) d["reason"] = r.unusable_reason;
  return d;
}

}  // namespace

void bind_user_kernels(py::module_& m);     // user_kernels.cpp
void bind_launch_checking(py::module_& m);  // launch_checking.cpp

int64_t linear_dot_max_rows();                                                 // fused_linear_relu.cpp
bool linear_amx_for_cpu_tensors(int64_t out_features, int64_t in_features);    // fused_linear_relu.cpp
int64_t linear_unpacked_max_rows();                                            // fused_linear_relu.cpp
int64_t conv2d_winograd_calls();                                               // conv2d.cpp
std::map<std::string, std::pair<int64_t, double>> kernel_profile(bool reset);  // queues.cpp
bool conv2d_amx_for_cpu_tensors(int64_t out_channels, int64_t in_channels, int64_t kh, int64_t kw,
                                std::array<int64_t, 2> stride, std::array<int64_t, 2> padding,
                                int64_t groups);  // conv2d.cpp

void bind_python(py::module_& m) {
  m.def(
      "set_kernel_profiling", [](bool on) { kernel_profiling_flag().store(on); }, py::arg("on"),
      "Turns the kernel profiler on or off (a development tool: while on, every SYCL launch waits for its kernel "
      "and its wall time is added to the kernel's row; see scripts/kernel_profile.py).");
  m.def("kernel_profile", &kernel_profile, py::arg("reset") = false,
        "The kernel profiler's rows: {kernel label: (launches, seconds)}; reset=True clears them.");
  m.def("linear_dot_max_rows", &linear_dot_max_rows,
        "Forward fused_linear_relu calls with at most this many rows use the dot kernel (weight read as given); "
        "more rows use the panel GEMM (packed weight).");
  m.def("linear_unpacked_max_rows", &linear_unpacked_max_rows,
        "FusedLinearReLU(pack_weight=True) calls on CPU tensors with at most this many rows run fused_linear_relu "
        "with the weight as stored (faster there on this CPU) instead of the packed op; 0: always the packed op.");
  m.def("linear_amx_for_cpu_tensors", &linear_amx_for_cpu_tensors, py::arg("out_features"), py::arg("in_features"),
        "Whether a bfloat16 fused_linear_relu forward of this weight shape on CPU tensors runs on AMX (the weight read "
        "as stored: nothing to pre-pack).");
  m.def(
      "amx_gemm_launches", [] { return amx_gemm_launch_count().load(); },
      "AMX GEMM launches so far in this process (bf16 fused_linear_relu forward, bf16 1x1 conv2d).");
  m.def("conv2d_amx_for_cpu_tensors", &conv2d_amx_for_cpu_tensors, py::arg("out_channels"), py::arg("in_channels"),
        py::arg("kh"), py::arg("kw"), py::arg("stride"), py::arg("padding"), py::arg("groups"),
        "Whether a bfloat16 conv2d of this weight shape on channels_last CPU tensors runs on AMX (the weight read as "
        "stored: nothing to pre-pack).");
  bind_user_kernels(m);
  bind_launch_checking(m);
  m.def(
      "acpp_device",
      [] {
        const AotLibrary& lib = acpp_library();
        py::dict d;
        d["name"] = lib.traits().name;
        d["implementation"] = lib.implementation();
        d["flags"] = lib.flags();
        d["kernels"] = lib.kernel_count();
        d["max_work_group_size"] = lib.traits().max_work_group_size;
        d["sub_group_sizes"] = lib.traits().sub_group_sizes;
        d["fp16"] = lib.traits().fp16;
        d["fp64"] = lib.traits().fp64;
        return d;
      },
      "The acpp backend's device and launcher library (raises when it is unavailable).");
  m.def(
      "devices",
      [] {
        py::list out;
        const std::vector<DeviceRecord>* devs;
        {
          py::gil_scoped_release nogil;  // the first call discovers devices (loads OpenCL runtimes)
          devs = &devices();
        }
        for (const auto& r : *devs) out.append(device_dict(r));
        return out;
      },
      "Every SYCL device of every platform, as dicts (name, vendor, platform, backend, type, driver, fp16, fp64, "
      "compute_units, max_work_group_size, local_mem, sub_group_sizes, usable[, reason]).");
  m.def(
      "discovery_error", [] { return discovery_error(); },
      "Why the SYCL runtime found no device ('' when it found some).");
  m.def(
      "cpu_status",
      [](const std::string& dtype_name) {
        const at::ScalarType t =
            scalar_type_from_name(dtype_name, "xkernels._C.sycl.cpu_status: argument 'dtype_name'");
        std::string why;
        bool ok;
        {
          py::gil_scoped_release nogil;
          ok = sycl_cpu_available(t, &why);
        }
        return py::make_tuple(ok, why);
      },
      py::arg("dtype_name"), "(available, reason): can CPU tensors of this dtype run on the SYCL CPU device?");
  m.def("runtime_version", &runtime_version, "The SYCL runtime in use, e.g. '2026.1.2'.");
  m.def("runtime_version_source", &runtime_version_source, "Where runtime_version() came from.");
  m.def("build_options", &build_options_for_runtime, "Options every kernel build gets (incl. the FP options).");
  m.def("build_log", &build_log,
        "Kernel-group builds done by this process: [(label, seconds)] (once per device and group).");
  m.def(
      "kernel_groups",
      [] {
        std::vector<std::string> out;
        for (const KernelGroup* g : kernel_groups()) out.push_back(g->file);
        return out;
      },
      "Kernel files (groups) registered by the SYCL ops.");
  m.def("cache_purged", &cache_purged,
        "Directories of corrupted on-disk kernel-cache entries this process removed before building.");
  m.def("provider_kind", &provider_kind, "How kernels reach the device.");
  m.def(
      "kernel_names",
      [] {
        // For the CPU device when there is one (the dtypes it supports), else every type.
        DeviceTraits all;
        all.fp16 = all.fp64 = true;
        const DeviceTraits* t = &all;
        for (const auto& r : devices())
          if (r.usable && r.traits.is_cpu) {
            t = &r.traits;
            break;
          }
        return all_kernel_names(*t);
      },
      "Registered kernel names (instantiations) of every kernel group.");
  m.def(
      "group_kernel_names",
      [](const std::string& file, bool fp16, bool fp64, const std::vector<size_t>& sub_group_sizes,
         size_t cpu_native_vector_width_float) {
        for (const KernelGroup* g : kernel_groups()) {
          if (g->file != file) continue;
          DeviceTraits t;
          t.fp16 = fp16;
          t.fp64 = fp64;
          t.sub_group_sizes = sub_group_sizes;
          t.is_cpu = cpu_native_vector_width_float > 0;
          t.native_vector_width_float = cpu_native_vector_width_float;
          std::vector<std::string> names;
          for (auto& e : g->entries(t)) names.push_back(std::move(e.name));
          return names;
        }
        TORCH_CHECK_VALUE(
            false, "xkernels._C.sycl.group_kernel_names: argument 'file' must name a kernel group (",
            [] {
              std::string known;
              for (const KernelGroup* g : kernel_groups()) known += (known.empty() ? "" : ", ") + g->file;
              return known;
            }(),
            "), got '", file, "'");
      },
      py::arg("file"), py::arg("fp16"), py::arg("fp64"), py::arg("sub_group_sizes"),
      py::arg("cpu_native_vector_width_float") = 0,
      "Registered kernel names group `file` asks the provider for on a device with these traits (what its "
      "'// xkernels-aot:' lines must cover); cpu_native_vector_width_float > 0: a CPU with that native float "
      "vector width (8: AVX2, 16: AVX-512), else a device that is not a CPU.");
  m.def(
      "provider_devices",
      [] {
        std::vector<DeviceProvider> devs;
        {
          py::gil_scoped_release nogil;
          devs = provider_devices();
        }
        py::list out;
        for (const auto& p : devs) {
          py::dict d;
          d["device"] = p.device;
          d["backend"] = p.backend;
          d["source"] = p.source;
          d["image"] = p.image;
          d["choice"] = p.choice;
          py::dict groups;
          for (const auto& [file, what] : p.groups) groups[py::str(file)] = what;
          d["groups"] = groups;
          out.append(d);
        }
        return out;
      },
      "Per usable device, where its kernels come from: dicts (device, backend, source, image, choice, groups: "
      "{kernel file: what it got, for the groups built so far}).");
  m.def(
      "amx_status",
      []() {
        const auto s = amx_status();
        return py::make_tuple(s.first, s.second);
      },
      "(on, why): whether bf16 fused_linear_relu and conv2d may run on AMX (joint_matrix kernels), and the reason.");
  m.def("runtime_compile_env", &runtime_compile_env,
        "Environment set for the runtime's kernel compiler before the first run-time build (one line per variable).");
  m.def(
      "warmup",
      [](py::object progress) {
        std::function<void(size_t, size_t, const std::string&)> cb;
        if (!progress.is_none())
          cb = [progress](size_t done, size_t total, const std::string& label) {
            py::gil_scoped_acquire gil;
            progress(done, total, label);
          };
        std::vector<std::pair<std::string, double>> out;
        {
          py::gil_scoped_release nogil;
          out = warmup(cb);
        }
        return out;
      },
      py::arg("progress") = py::none(),
      "Compiles every kernel group for every usable device now; progress(done, total, label) is called before "
      "each build. Returns [(label, seconds)].");
  m.def(
      "host_cache_stats",
      [] {
        const HostCacheStats s = host_cache_stats();
        py::dict d;
        d["limit_bytes"] = s.limit_bytes;
        d["cached_bytes"] = s.cached_bytes;
        d["cached_blocks"] = s.cached_blocks;
        d["in_use_bytes"] = s.in_use_bytes;
        d["hits"] = s.hits;
        d["misses"] = s.misses;
        return d;
      },
      "The caching host allocator of the SYCL backend's CPU tensors (host_alloc.h): bound, cached and in-use "
      "bytes, hits and misses.");
  m.def("host_cache_clear", &host_cache_clear, "Frees every cached host block (blocks in use are unaffected).");
  m.def("conv2d_winograd_calls", &conv2d_winograd_calls,
        "conv2d_packed calls (sycl and acpp backends) that ran the Winograd F(2x2, 3x3) kernels, since the process "
        "started (sycl/conv2d.cpp).");
}

}  // namespace xkernels::sycl_backend
