// SYCL runtime glue: device discovery, the persistent CPU-device queue, device traits,
// launch validation and the kernel provider (see runtime.h for the contract).
//
// The kernel files (kernels/*.hpp) are embedded as text (kernel_sources.h) and compiled on
// first use per (context, device, group) by the SYCL runtime's kernel compiler
// (sycl_ext_oneapi_kernel_compiler, source_language::sycl). The runtime's persistent cache
// (SYCL_CACHE_PERSISTENT / SYCL_CACHE_DIR, set by python/xkernels/_env.py) makes later
// processes skip the compiler. A build with oneAPI (XKERNELS_SYCL_AOT, docs/oneapi.md) also
// links the same kernels compiled ahead of time; provider_choice.h decides per device which
// one a device gets, and this file is the only one that knows.
// Before any SYCL header: the CUDA backend interop (cuda_stream_queue.h) needs its experimental API,
// and SYCL's backend.hpp picks one of two incompatible definitions of it on this macro.
#ifndef SYCL_EXT_ONEAPI_BACKEND_CUDA_EXPERIMENTAL
#define SYCL_EXT_ONEAPI_BACKEND_CUDA_EXPERIMENTAL 1
#endif
#include "sycl/runtime.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <fcntl.h>
#include <link.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <tuple>
#include <unordered_map>

#include "sycl/cuda_stream_queue.h"
#include "sycl/kernel_sources.h"
#include "sycl/provider_choice.h"
#include "sycl/provider_device.h"
#include "sycl/runtime_info.h"
#include "xkernels/backend.h"
#include "xkernels/cuda_device_hooks.h"

#ifdef XKERNELS_SYCL_AOT
#include "sycl/aot_kernels.h"
#endif

#ifdef XKERNELS_WITH_XPU
#include <c10/xpu/XPUStream.h>
#endif

namespace syclex = sycl::ext::oneapi::experimental;
namespace pc = xkernels::sycl_backend::provider_choice;

namespace xkernels::sycl_backend {

// Floating-point semantics of device code (the project policy, cmake/FPFlags.cmake):
//  * -fno-fast-math: no reassociation / reciprocal / approximate math, NaN and Inf honoured;
//  * -ffp-contract=off: a*b+c stays two roundings unless a kernel calls fma() itself. This is
//    the one that changes results here: the kernel compiler contracts by default (measured on
//    the OpenCL CPU device: 77 % of fp32 a*b+c bit-identical to the unfused result without it,
//    100 % with it);
//  * -foffload-fp32-prec-div, -foffload-fp32-prec-sqrt: correctly rounded fp32 division and
//    sqrt. The OpenCL CPU device rounds both correctly anyway (measured with and without);
//    GPU back ends otherwise may use 2.5 / 3 ulp approximations.
// (-ffp-model=precise is not used: it implies -ffp-contract=on and only draws an "overriding"
// warning.) The 2026.1.2 and 2025.3.3 kernel compilers accept all four (checked: layer_norm.hpp
// built and ran with them on both); tests/test_sycl_runtime.py checks the effect: exact a*b+c,
// division and sqrt.
static const std::vector<std::string> kDeviceFPOptions = {"-fno-fast-math", "-ffp-contract=off",
                                                          "-foffload-fp32-prec-div", "-foffload-fp32-prec-sqrt"};

namespace {

struct RuntimeVersionInfo {
  int year = 0, minor = 0, patch = 0;  // 0: unknown
  std::string text, source;
};
const RuntimeVersionInfo& runtime_version_info();

// What to install / check when no usable device is found.
std::string install_hint() {
  const RuntimeVersionInfo& rv = runtime_version_info();
  const bool from_wheel = rv.source.rfind("intel-sycl-rt wheel", 0) == 0;
  const std::string v = from_wheel ? rv.text : "<the intel-sycl-rt version>";
  std::string hint = "install Intel's OpenCL CPU runtime and the Unified Runtime adapters of the same version as "
                     "the SYCL runtime: pip install 'intel-opencl-rt==" + v + "' 'intel-cmplr-lib-ur==" + v +
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

DeviceTraits make_traits(const sycl::device& d) {
  DeviceTraits t;
  t.is_cpu = d.is_cpu();
  t.fp64 = d.has(sycl::aspect::fp64);
  t.fp16 = d.has(sycl::aspect::fp16);
  t.max_work_group_size = d.get_info<sycl::info::device::max_work_group_size>();
  t.local_mem_bytes = d.get_info<sycl::info::device::local_mem_size>();
  t.sub_group_sizes = d.get_info<sycl::info::device::sub_group_sizes>();
  t.name = d.get_info<sycl::info::device::name>();
  return t;
}

struct Registry {
  std::vector<DeviceRecord> devices;
  std::string error;       // discovery failed / found nothing
  int cpu_index = -1;      // the device CPU tensors run on
  std::string cpu_reason;  // why there is none
};

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
      r.error = std::string("the SYCL runtime found no device (OCL_ICD_FILENAMES=") + (icd ? icd : "<unset>") +
                "); " + install_hint();
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

// ---------------------------------------------------------------- the CPU queue
[[noreturn]] void throw_async(const sycl::exception_list& errors) {
  for (const auto& e : errors) std::rethrow_exception(e);
  TORCH_CHECK(false, "xkernels: SYCL reported an empty list of asynchronous errors");
}

sycl::queue& cpu_queue() {
  static sycl::queue* q = [] {
    const Registry& r = registry();
    TORCH_CHECK(r.cpu_index >= 0, "xkernels: the SYCL backend has no CPU device: ", r.cpu_reason);
    const sycl::device& d = r.devices[r.cpu_index].device;
    // Leaked on purpose: the runtime may already be shutting down when static destructors run.
    return new sycl::queue(sycl::context(d), d, throw_async, sycl::property_list{sycl::property::queue::in_order()});
  }();
  return *q;
}

// ---------------------------------------------------------------- SYCL on CUDA tensors
// Torch's CUDA stream and device facts come from the native CUDA backend (cuda_device_hooks.h);
// the queue on that stream is made through the CUDA backend interop (cuda_stream_queue.h).
std::mutex g_cuda_hooks_mu;
CudaDeviceHooks& cuda_hooks_storage() {
  static CudaDeviceHooks h;
  return h;
}
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
  for (const DeviceRecord* rec : recs) candidates.push_back({rec->usable, rec->unusable_reason, sycl_device_uuid(rec->device)});
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
  TORCH_CHECK(h.current_stream, "xkernels: SYCL kernels on CUDA tensors need the native CUDA backend's access to "
              "torch's CUDA streams, and this build has no native CUDA backend");
  const CudaTarget& t = cuda_target(index, "SYCL on CUDA tensors");
  void* stream = h.current_stream(index);
  return cuda_interop::queue_for_stream(t.context, static_cast<cuda_interop::NativeStream>(stream));
}

// ---------------------------------------------------------------- runtime version

int find_loaded_object(struct dl_phdr_info* info, size_t, void* data) {
  auto* out = static_cast<std::string*>(data);
  const char* name = info->dlpi_name;
  if (name && std::strstr(name, "/libsycl.so")) {
    *out = name;
    return 1;
  }
  return 0;
}

bool parse_version(const std::string& s, RuntimeVersionInfo& v) {
  return std::sscanf(s.c_str(), "%d.%d.%d", &v.year, &v.minor, &v.patch) >= 2 && v.year >= 2020;
}

const RuntimeVersionInfo& runtime_version_info() {
  static const RuntimeVersionInfo ver = [] {
    RuntimeVersionInfo v;
    namespace fs = std::filesystem;
    std::string lib;
    dl_iterate_phdr(find_loaded_object, &lib);
    std::error_code ec;
    if (!lib.empty()) {
      // pip wheels: <prefix>/lib/libsycl.so and <prefix>/lib/pythonX.Y/site-packages/intel_sycl_rt-V.dist-info
      const fs::path libdir = fs::path(lib).parent_path();
      for (const auto& py : fs::directory_iterator(libdir, ec)) {
        const std::string pyname = py.path().filename().string();
        if (pyname.rfind("python", 0) != 0) continue;
        for (const auto& e : fs::directory_iterator(py.path() / "site-packages", ec)) {
          const std::string n = e.path().filename().string();
          const std::string prefix = "intel_sycl_rt-";
          if (n.rfind(prefix, 0) == 0 && n.size() > prefix.size() + 10 &&
              n.compare(n.size() - 10, 10, ".dist-info") == 0) {
            const std::string text = n.substr(prefix.size(), n.size() - prefix.size() - 10);
            if (parse_version(text, v)) {
              v.text = text;
              v.source = "intel-sycl-rt wheel metadata next to " + lib;
              return v;
            }
          }
        }
      }
    }
    // Otherwise (e.g. a oneAPI installation) the headers this module was built with; libsycl's
    // soname (major 8 = 2025.x, 9 = 2026.x) guarantees the loaded library is the same generation.
    v.year = __LIBSYCL_MAJOR_VERSION >= 9 ? 2026 : 2025;
    v.text = std::to_string(v.year) + ".x (libsycl.so." + std::to_string(__LIBSYCL_MAJOR_VERSION) + ", build " +
             std::to_string(__SYCL_COMPILER_VERSION) + ")";
    v.source = "headers used at build time" + (lib.empty() ? std::string() : " (loaded: " + lib + ")");
    return v;
  }();
  return ver;
}

// ---------------------------------------------------------------- persistent cache integrity
// The SYCL runtime's on-disk cache (SYCL_CACHE_PERSISTENT=1, SYCL_CACHE_DIR) has no integrity
// check of its own. Measured with 2026.1.2: a truncated or garbage entry makes it recompile
// in every later process without ever rewriting the entry (the cache silently stops working
// for it), and a few flipped bytes in a cached device binary crash the process (SIGSEGV) in
// every later process. So we keep a manifest of the files the runtime writes during our
// builds (size + FNV-1a hash) next to them, and before the first build of each process verify
// it: an entry whose file changed, or a zero-length binary, is removed (its directory) and
// simply recompiled. Builds and verification hold an exclusive lock file, so concurrent
// xkernels processes never see each other's half-written entries.
namespace fs = std::filesystem;

constexpr const char* kManifestName = "xkernels-manifest.txt";
constexpr const char* kLockName = "xkernels.lock";

std::string persistent_cache_dir() {
  const char* on = std::getenv("SYCL_CACHE_PERSISTENT");
  const char* dir = std::getenv("SYCL_CACHE_DIR");
  if (!on || std::string(on) != "1" || !dir || !*dir) return "";
  return dir;
}

bool is_bookkeeping(const fs::path& p) {
  const std::string n = p.filename().string();
  auto ends_with = [&](const std::string& s) {
    return n.size() >= s.size() && n.compare(n.size() - s.size(), s.size(), s) == 0;
  };
  return n == kManifestName || n == kLockName || ends_with("_access_time.txt") || ends_with(".lock") ||
         ends_with(".tmp");
}

uint64_t fnv1a_file(const fs::path& p, bool* ok) {
  std::FILE* f = std::fopen(p.c_str(), "rb");
  *ok = f != nullptr;
  uint64_t h = 1469598103934665603ull;
  if (!f) return h;
  unsigned char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0)
    for (size_t i = 0; i < n; ++i) h = (h ^ buf[i]) * 1099511628211ull;
  std::fclose(f);
  return h;
}

struct FileStamp {
  uintmax_t size = 0;
  int64_t mtime = 0;
};

// Every cache file (relative path -> size, mtime), bookkeeping files excluded.
std::unordered_map<std::string, FileStamp> scan_cache(const fs::path& root) {
  std::unordered_map<std::string, FileStamp> out;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    if (!it->is_regular_file(ec) || is_bookkeeping(it->path())) continue;
    FileStamp s;
    s.size = it->file_size(ec);
    s.mtime = static_cast<int64_t>(it->last_write_time(ec).time_since_epoch().count());
    out[fs::relative(it->path(), root, ec).string()] = s;
  }
  return out;
}

struct ManifestEntry {
  uint64_t hash = 0;
  uintmax_t size = 0;
};
using Manifest = std::unordered_map<std::string, ManifestEntry>;

Manifest read_manifest(const fs::path& root) {
  Manifest m;
  std::FILE* f = std::fopen((root / kManifestName).c_str(), "r");
  if (!f) return m;
  char path[4096];
  unsigned long long hash, size;
  while (std::fscanf(f, "%llx %llu %4095[^\n]\n", &hash, &size, path) == 3) m[path] = {hash, size};
  std::fclose(f);
  return m;
}

void write_manifest(const fs::path& root, const Manifest& m) {
  const fs::path tmp = root / (std::string(kManifestName) + ".tmp");
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  if (!f) return;  // read-only cache: nothing to keep
  for (const auto& [path, e] : m)
    std::fprintf(f, "%016llx %llu %s\n", static_cast<unsigned long long>(e.hash),
                 static_cast<unsigned long long>(e.size), path.c_str());
  const bool ok = std::fclose(f) == 0;
  std::error_code ec;
  if (ok) fs::rename(tmp, root / kManifestName, ec);
}

// Exclusive inter-process lock on <cache>/xkernels.lock (no-op if it cannot be created).
struct CacheLock {
  int fd = -1;
  explicit CacheLock(const fs::path& root) {
    std::error_code ec;
    fs::create_directories(root, ec);
    fd = ::open((root / kLockName).c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0)
      while (::flock(fd, LOCK_EX) != 0 && errno == EINTR) {
      }
  }
  ~CacheLock() {
    if (fd >= 0) ::close(fd);  // releases the lock
  }
  CacheLock(const CacheLock&) = delete;
  CacheLock& operator=(const CacheLock&) = delete;
};

std::mutex g_cache_mu;      // serialises this process's builds (with the file lock, across processes)
bool g_cache_verified = false;
std::vector<std::string> g_cache_purged;  // what verification removed (for tests / diagnostics)

// Under the lock: checks the manifest's files, removes corrupted entries. Once per process.
void verify_cache(const fs::path& root) {
  if (g_cache_verified) return;
  g_cache_verified = true;
  Manifest m = read_manifest(root);
  const size_t recorded = m.size();
  std::vector<fs::path> bad_dirs;
  std::error_code ec;
  for (auto it = m.begin(); it != m.end();) {
    const fs::path p = root / it->first;
    bool ok = fs::exists(p, ec);
    if (!ok) {  // evicted by the runtime: forget it
      it = m.erase(it);
      continue;
    }
    bool readable;
    const uintmax_t size = fs::file_size(p, ec);
    if (size != it->second.size || fnv1a_file(p, &readable) != it->second.hash || !readable) {
      bad_dirs.push_back(p.parent_path());
      it = m.erase(it);
      continue;
    }
    ++it;
  }
  // Files we did not record (written by a process that died mid-build, or before this
  // manifest existed): an empty binary or source is certainly broken.
  for (const auto& [rel, stamp] : scan_cache(root)) {
    if (m.count(rel) || stamp.size != 0) continue;
    const fs::path p = root / rel;
    if (p.extension() == ".bin" || p.extension() == ".src") bad_dirs.push_back(p.parent_path());
  }
  for (const auto& d : bad_dirs) {
    if (d == root || !fs::exists(d, ec)) continue;
    const std::string prefix = fs::relative(d, root, ec).string() + "/";
    for (auto it = m.begin(); it != m.end();) it = it->first.rfind(prefix, 0) == 0 ? m.erase(it) : std::next(it);
    fs::remove_all(d, ec);
    g_cache_purged.push_back(d.string());
    TORCH_WARN("xkernels: removed a corrupted entry of the SYCL kernel cache (", d.string(),
               "); its kernels are compiled again");
  }
  if (m.size() != recorded) write_manifest(root, m);
}

// Held around every build: verifies the cache once, then records what the build wrote.
class CacheSession {
 public:
  CacheSession() : root_(persistent_cache_dir()), lock_(g_cache_mu) {
    if (root_.empty()) return;
    file_lock_ = std::make_unique<CacheLock>(root_);
    verify_cache(root_);
    before_ = scan_cache(root_);
  }
  ~CacheSession() {
    if (root_.empty()) return;
    try {
      Manifest m = read_manifest(root_);
      bool changed = false;
      for (const auto& [rel, stamp] : scan_cache(root_)) {
        auto b = before_.find(rel);
        if (b != before_.end() && b->second.size == stamp.size && b->second.mtime == stamp.mtime) continue;
        bool readable;
        const uint64_t h = fnv1a_file(root_ / rel, &readable);
        if (!readable) continue;
        m[rel] = {h, stamp.size};
        changed = true;
      }
      if (changed) write_manifest(root_, m);
    } catch (const std::exception&) {
      // Bookkeeping only: a failure here must not fail the build.
    }
  }
  // True when the build just done compiled source to IR and cached that IR (a cold build).
  bool wrote_new_ir() const {
    if (root_.empty()) return false;
    for (const auto& [rel, stamp] : scan_cache(root_))
      if (rel.rfind("ext_kernel_compiler/", 0) == 0 && !before_.count(rel)) return true;
    return false;
  }
  CacheSession(const CacheSession&) = delete;
  CacheSession& operator=(const CacheSession&) = delete;

 private:
  fs::path root_;
  std::lock_guard<std::mutex> lock_;
  std::unique_ptr<CacheLock> file_lock_;
  std::unordered_map<std::string, FileStamp> before_;
};

// ---------------------------------------------------------------- kernel groups
const EmbeddedSource* find_source(const std::string& file) {
  for (const auto& s : embedded_kernel_sources())
    if (file == s.name) return &s;
  return nullptr;
}

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + v[i];
  return out;
}

// ---------------------------------------------------------------- where a device's kernels come from
// Device images of the ahead-of-time library; none without one (then every device compiles at run time).
const std::vector<pc::AotImage>& aot_images() {
#ifdef XKERNELS_SYCL_AOT
  static const auto images = pc::parse_aot_targets(sycl_aot::aot_library().targets);
#else
  static const std::vector<pc::AotImage> images;
#endif
  return images;
}

// Per device: the choice (made once) and what each kernel group actually got.
struct DeviceSource {
  pc::Choice choice;
  std::vector<std::pair<std::string, std::string>> groups;  // (file, describe(...) or the fallback's reason)
};
std::mutex g_sources_mu;
std::unordered_map<sycl::device, DeviceSource>& device_sources() {
  static auto* m = new std::unordered_map<sycl::device, DeviceSource>();
  return *m;
}

pc::Choice device_choice(const sycl::device& dev) {
  std::lock_guard<std::mutex> lock(g_sources_mu);
  auto it = device_sources().find(dev);
  if (it == device_sources().end())
    it = device_sources().emplace(dev, DeviceSource{pc::choose(aot_images(), pc::describe_device(dev)), {}}).first;
  return it->second.choice;
}

void note_group_source(const sycl::device& dev, const std::string& file, const std::string& what) {
  std::lock_guard<std::mutex> lock(g_sources_mu);
  auto& groups = device_sources()[dev].groups;
  for (auto& g : groups)
    if (g.first == file) {  // the same group built in another context
      g.second = what;
      return;
    }
  groups.emplace_back(file, what);
}

// The environment the runtime's kernel compiler reads once per process (the PTX / gfx architecture
// for CUDA / HIP devices), set before the first run-time build unless the user has set it. CUDA
// devices share one PTX target: the lowest compute capability among them.
std::once_flag g_runtime_env_once;
std::mutex g_runtime_env_mu;
std::vector<std::string> g_runtime_env_lines;  // apply_runtime_env's report, for xkernels.info()
void prepare_runtime_compile() {
  std::call_once(g_runtime_env_once, [] {
    std::vector<std::pair<std::string, std::string>> env;
    std::vector<pc::DeviceDesc> cuda;
    auto add = [&](const std::string& k, const std::string& v) {
      for (const auto& kv : env)
        if (kv.first == k) return;  // one value per variable: the first device's
      env.emplace_back(k, v);
    };
    const std::map<const DeviceRecord*, std::pair<int, int>> torch_cc = torch_compute_capabilities();
    for (const auto& rec : registry().devices) {
      if (!rec.usable) continue;
      pc::DeviceDesc d = pc::describe_device(rec.device);
      if (d.backend == pc::DeviceBackend::Cuda) {
        // torch's compute capability wins: it also covers GPUs newer than the runtime's architecture list.
        if (auto it = torch_cc.find(&rec); it != torch_cc.end()) std::tie(d.cc_major, d.cc_minor) = it->second;
        cuda.push_back(d);
        continue;
      }
      for (const auto& [k, v] : pc::choose(aot_images(), d).runtime_env) add(k, v);
    }
    const std::string ptx = pc::runtime_ptx_target(cuda);
    if (!ptx.empty()) add("SYCL_JIT_AMDGCN_PTX_TARGET_CPU", ptx);
    auto lines = pc::apply_runtime_env(env);
    std::lock_guard<std::mutex> lock(g_runtime_env_mu);
    g_runtime_env_lines = std::move(lines);
  });
}

// One build: the source plus every kernel file as an include file, the run-time options
// and the registered names. Compile errors raise with the compiler's full diagnostics.
sycl::kernel_bundle<sycl::bundle_state::executable> build_bundle(const sycl::context& ctx, const sycl::device& dev,
                                                                 const std::string& label, const std::string& source,
                                                                 const std::vector<std::string>& names,
                                                                 const std::vector<std::string>& options) {
  prepare_runtime_compile();
  syclex::include_files includes;
  for (const auto& s : embedded_kernel_sources()) includes.add(s.name, s.text);
  std::string log;
  try {
    const CacheSession cache;  // the on-disk cache is checked before and recorded after the build
    auto build_once = [&] {
      auto src = syclex::create_kernel_bundle_from_source(ctx, syclex::source_language::sycl, source,
                                                          syclex::properties{includes});
      return syclex::build(src, std::vector<sycl::device>{dev},
                           syclex::properties{syclex::build_options{options}, syclex::save_log{&log},
                                              syclex::registered_names{names}});
    };
    auto bundle = build_once();
    if (cache.wrote_new_ir()) {
      // A cold build caches the source's IR, but not the device code of that path; later
      // processes find the IR and compile its device code (a separately cached path) again:
      // measured 1.8-2.9 s instead of 0.5-0.7 s for the second process. Building once more
      // now takes that path and caches its device code, so the second process is warm.
      bundle = build_once();
    }
    return bundle;
  } catch (const sycl::exception& e) {
    TORCH_CHECK(false, "xkernels: compiling SYCL kernels '", label, "' for device '",
                dev.get_info<sycl::info::device::name>(), "' failed (SYCL runtime ", runtime_version_info().text,
                ", options: ", join(options, " "), "). Compiler log:\n", e.what(), log.empty() ? "" : "\n", log);
  }
}

// A kernel group is built in parts, one per element type (KernelEntry::part): a process compiles only
// the element types it runs (one dtype's bundle is roughly a quarter of the kernels plus a fixed ~2 s
// per bundle on the 2-core CI machine). warmup() builds every part.
// "layer_norm.hpp [float]", "conv2d.hpp [bfloat16]": a part's label in build logs and warmup().
std::string part_label(const std::string& file, const std::string& part) {
  if (part.empty()) return file;
  const size_t ns = part.rfind("::");
  return file + " [" + (ns == std::string::npos ? part : part.substr(ns + 2)) + "]";
}

// The parts of `group` on a device with `traits`, in the order of its names.
std::vector<std::string> group_parts(const KernelGroup& group, const DeviceTraits& traits) {
  std::vector<std::string> parts;
  for (const auto& e : group.entries(traits))
    if (std::find(parts.begin(), parts.end(), e.part) == parts.end()) parts.push_back(e.part);
  return parts;
}

// In-memory provider cache: one slot per (context, device, group, part), each built once.
struct SlotKey {
  sycl::context ctx;
  sycl::device dev;
  std::string file;
  std::string part;
  bool operator==(const SlotKey& o) const {
    return ctx == o.ctx && dev == o.dev && file == o.file && part == o.part;
  }
};
struct SlotKeyHash {
  size_t operator()(const SlotKey& k) const {
    size_t h = std::hash<sycl::context>()(k.ctx);
    h = h * 1000003u ^ std::hash<sycl::device>()(k.dev);
    h = h * 1000003u ^ std::hash<std::string>()(k.part);
    return h * 1000003u ^ std::hash<std::string>()(k.file);
  }
};
struct Slot {
  std::mutex mu;  // held while this group compiles for this device; other groups compile in parallel
  bool built = false;
  std::unordered_map<std::string, sycl::kernel> kernels;
  double seconds = 0;
};

std::mutex g_slots_mu;
std::unordered_map<SlotKey, std::shared_ptr<Slot>, SlotKeyHash>& slots() {
  static auto* m = new std::unordered_map<SlotKey, std::shared_ptr<Slot>, SlotKeyHash>();
  return *m;
}

std::mutex g_build_log_mu;
std::vector<std::pair<std::string, double>> g_build_log;  // every group build of this process


// Returns the slot, built (compiling now if nobody has). `*compiled` says whether this call compiled.
Slot& built_slot(const sycl::context& ctx, const sycl::device& dev, const KernelGroup& group, const std::string& part,
                 bool* compiled) {
  std::shared_ptr<Slot> slot;
  {
    std::lock_guard<std::mutex> lock(g_slots_mu);
    auto& p = slots()[SlotKey{ctx, dev, group.file, part}];
    if (!p) p = std::make_shared<Slot>();
    slot = p;
  }
  std::lock_guard<std::mutex> lock(slot->mu);
  if (compiled) *compiled = false;
  if (slot->built) return *slot;
  const EmbeddedSource* src = find_source(group.file);
  TORCH_CHECK(src, "xkernels: kernel group '", group.file, "' has no embedded source (known: ", [] {
    std::vector<std::string> n;
    for (const auto& s : embedded_kernel_sources()) n.push_back(s.name);
    return join(n, ", ");
  }(), ")");
  std::vector<std::string> names;
  // The source: the kernel file, reached through its include file so that diagnostics in kernel
  // bodies name it ("layer_norm.hpp:12:3: error: ..."), then the part's generated entry points.
  std::string source = "#include \"" + group.file + "\"\n";
  for (auto& e : group.entries(traits_of_device(dev)))
    if (e.part == part) {
      names.push_back(std::move(e.name));
      source += e.definition;
    }
  const std::string label = part_label(group.file, part);
  TORCH_CHECK(!names.empty(), "xkernels: kernel group '", label, "' has no kernels for device '",
              dev.get_info<sycl::info::device::name>(), "'");
  const auto t0 = std::chrono::steady_clock::now();
  const std::string source_note = pc::describe(device_choice(dev));
  auto bundle = build_bundle(ctx, dev, label, source, names, build_options_for_runtime());
  for (const auto& n : names) {
    TORCH_CHECK(bundle.ext_oneapi_has_kernel(n), "xkernels: kernel group '", label, "' built, but it has no kernel '",
                n, "'");
    slot->kernels.emplace(n, bundle.ext_oneapi_get_kernel(n));
  }
  note_group_source(dev, group.file, source_note);
  slot->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  slot->built = true;
  {
    std::lock_guard<std::mutex> log_lock(g_build_log_mu);
    g_build_log.emplace_back(traits_of_device(dev).name + ": " + label, slot->seconds);
  }
  if (compiled) *compiled = true;
  return *slot;
}

}  // namespace

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

// ---------------------------------------------------------------- runtime.h
sycl::queue& queue_for(const at::Tensor& t) {
  if (t.device().is_cpu()) return cpu_queue();
#ifdef XKERNELS_WITH_XPU
  if (t.device().is_xpu()) {
    // torch's current stream of the tensor's device (its queue is in order, like ours).
    return c10::xpu::getCurrentXPUStream(t.device().index()).queue();
  }
#endif
  // CUDA tensors reach here only when the CUDA key chose SYCL (choose_cuda_backend, native CUDA built):
  // torch's current stream on the tensor's device, as a SYCL queue of the matching CUDA device.
  if (t.device().is_cuda()) return cuda_stream_queue(t.device().index());
  TORCH_CHECK(false, "xkernels: the SYCL backend cannot run on tensors on device ", t.device(),
              " (CPU tensors run on the SYCL CPU device; XPU tensors need torch built with XPU; CUDA tensors need "
              "the oneAPI CUDA plugin)");
}

const DeviceTraits& traits_of(const sycl::queue& q) { return traits_of_device(q.get_device()); }

sycl::kernel get_kernel(const sycl::queue& q, const KernelGroup& group, const std::string& name) {
  // The entry's part (element type) ends its name: "xk_layer_norm_fwd__float" (kernel_table.h).
  const size_t sep = name.rfind("__");
  const std::string part = sep == std::string::npos ? "" : name.substr(sep + 2);
  Slot& slot = built_slot(q.get_context(), q.get_device(), group, part, nullptr);
  auto it = slot.kernels.find(name);  // read-only once built
  TORCH_CHECK(it != slot.kernels.end(), "xkernels: kernel '", name, "' is not among the kernels of group '",
              group.file, "' for device '", traits_of(q).name, "'");
  return it->second;
}

void validate_launch(const sycl::queue& q, const sycl::kernel& k, int dims, const size_t* global, const size_t* local,
                     size_t num_args) {
  auto kname = [&] {
    try {
      return k.get_info<sycl::info::kernel::function_name>();
    } catch (const std::exception&) {
      return std::string("<kernel>");
    }
  };
  auto dims_str = [&](const size_t* v) {
    std::ostringstream s;
    s << "[";
    for (int d = 0; d < dims; ++d) s << (d ? ", " : "") << v[d];
    s << "]";
    return s.str();
  };
  size_t wg = 1;
  for (int d = 0; d < dims; ++d) {
    TORCH_CHECK(local[d] >= 1, "xkernels: launch of ", kname(), ": local size ", dims_str(local),
                " has a zero dimension");
    TORCH_CHECK(global[d] % local[d] == 0, "xkernels: launch of ", kname(), ": global size ", dims_str(global),
                " is not a multiple of the local size ", dims_str(local), " in dimension ", d);
    wg *= local[d];
  }
  const sycl::device dev = q.get_device();
  const size_t dev_max = traits_of(q).max_work_group_size;
  const size_t k_max = k.get_info<sycl::info::kernel_device_specific::work_group_size>(dev);
  TORCH_CHECK(wg <= dev_max && wg <= k_max, "xkernels: launch of ", kname(), ": work-group size ", wg, " (local ",
              dims_str(local), ") exceeds the limit (device ", dev_max, ", kernel ", k_max, ")");
  // Argument count. The runtime reports the kernel's parameters after dead-argument
  // elimination: 2025.3 drops unused parameters from the count (while set_arg indices still
  // follow the source), 2026.1 counts every source parameter. Too few arguments is an error
  // everywhere (the runtime's own error for it is an unhelpful code); too many only where the
  // count is the source's.
  const size_t n = k.get_info<sycl::info::kernel::num_args>();
  const bool count_is_exact = runtime_version_info().year >= 2026;
  TORCH_CHECK(num_args >= n && (num_args == n || !count_is_exact), "xkernels: launch of ", kname(), ": ", num_args,
              " arguments given, the kernel takes ", n);
}

void wait_if_host(const at::Tensor& t, sycl::event& e) {
  if (!t.device().is_cpu()) return;
  e.wait_and_throw();
}

// ---------------------------------------------------------------- runtime_info.h
const std::vector<DeviceRecord>& devices() { return registry().devices; }
const std::string& discovery_error() { return registry().error; }

std::string runtime_version() { return runtime_version_info().text; }
std::string runtime_version_source() { return runtime_version_info().source; }

std::vector<std::string> build_options_for_runtime() { return build_options_with(kDeviceFPOptions); }

std::vector<std::string> build_options_with(const std::vector<std::string>& fp_options) {
  std::vector<std::string> opts;
  // 2025.x: the default device libraries (libsycl-crt.bc, ...) are missing from the wheels and
  // every build fails without this (checked with 2025.3.3, which accepts it with a deprecation
  // warning in the build log); 2026.1 rejects the option as unknown.
  if (runtime_version_info().year < 2026) opts.push_back("-fno-sycl-device-lib=all");
  opts.insert(opts.end(), fp_options.begin(), fp_options.end());
  // The kernel files' portable form: bodies read their item through this_work_item (kernels/common.hpp).
  opts.push_back("-DXK_RTC=1");
  return opts;
}

std::vector<std::pair<std::string, double>> build_log() {
  std::lock_guard<std::mutex> lock(g_build_log_mu);
  return g_build_log;
}

std::vector<std::string> cache_purged() {
  std::lock_guard<std::mutex> lock(g_cache_mu);
  return g_cache_purged;
}

std::string provider_kind() {
#ifdef XKERNELS_SYCL_AOT
  const sycl_aot::AotLibrary& lib = sycl_aot::aot_library();
  return std::string("ahead of time (") + lib.compiler + ": " + lib.targets +
         ") where the library has an image for the device, else compiled at run time (kernel_compiler)";
#else
  return "compiled at run time (kernel_compiler)";
#endif
}

std::vector<DeviceProvider> provider_devices() {
  std::vector<DeviceProvider> out;
  for (const auto& rec : registry().devices) {
    if (!rec.usable) continue;
    DeviceProvider p;
    p.device = rec.traits.name;
    p.backend = rec.backend;
    const pc::Choice c = device_choice(rec.device);
    p.source = pc::source_name(c.source);
    p.image = c.image;
    p.choice = pc::describe(c);
    std::lock_guard<std::mutex> lock(g_sources_mu);
    p.groups = device_sources()[rec.device].groups;
    out.push_back(std::move(p));
  }
  return out;
}

std::vector<std::string> runtime_compile_env() {
  std::lock_guard<std::mutex> lock(g_runtime_env_mu);
  return g_runtime_env_lines;
}

std::vector<std::string> all_kernel_names(const DeviceTraits& traits) {
  std::vector<std::string> out;
  for (const KernelGroup* g : kernel_groups())
    for (auto& e : g->entries(traits)) out.push_back(std::move(e.name));
  return out;
}

namespace {
sycl::context default_context(const sycl::device& d) {
#if __LIBSYCL_MAJOR_VERSION >= 9
  return d.get_platform().khr_get_default_context();
#else
  return d.get_platform().ext_oneapi_get_default_context();
#endif
}
}  // namespace

std::vector<std::pair<std::string, double>> warmup(
    const std::function<void(size_t, size_t, const std::string&)>& progress) {
  struct Work {
    const DeviceRecord* rec;
    const KernelGroup* group;
    std::string part;
  };
  std::vector<Work> work;
  for (const auto& rec : devices())
    if (rec.usable)
      for (const KernelGroup* g : kernel_groups())
        for (auto& part : group_parts(*g, rec.traits)) work.push_back({&rec, g, std::move(part)});
  std::vector<std::pair<std::string, double>> out;
  size_t done = 0;
  for (const auto& [rec, g, part] : work) {
    const std::string label = rec->traits.name + ": " + part_label(g->file, part);
    if (progress) progress(done, work.size(), label);
    // Build in the context ops will use: the CPU queue's for the CPU device; for other devices
    // the platform's default context (torch's XPU queues live in it). Either way the on-disk
    // cache is filled, which serves any context.
    const bool is_cpu_dev = registry().cpu_index >= 0 && rec == &registry().devices[registry().cpu_index];
    const sycl::context ctx = is_cpu_dev ? cpu_queue().get_context() : default_context(rec->device);
    const auto t0 = std::chrono::steady_clock::now();
    built_slot(ctx, rec->device, *g, part, nullptr);
    out.emplace_back(label, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    ++done;
  }
  if (progress) progress(done, work.size(), "done");
  return out;
}

sycl::kernel_bundle<sycl::bundle_state::executable> build_source(const sycl::queue& q, const std::string& label,
                                                                 const std::string& source,
                                                                 const std::vector<std::string>& names,
                                                                 const std::vector<std::string>& options) {
  return build_bundle(q.get_context(), q.get_device(), label, source, names, options);
}

std::vector<std::string> build_source_for_test(const std::string& source, const std::vector<std::string>& names) {
  sycl::queue& q = cpu_queue();
  auto bundle =
      build_bundle(q.get_context(), q.get_device(), "test source", source, names, build_options_for_runtime());
  std::vector<std::string> found;
  for (const auto& n : names)
    if (bundle.ext_oneapi_has_kernel(n)) found.push_back(n);
  return found;
}

void run_test_kernel(const std::string& source, const std::string& name, const std::vector<uintptr_t>& pointers,
                     int64_t n, size_t global, size_t local, const std::vector<std::string>* fp_options) {
  sycl::queue& q = cpu_queue();
  auto bundle = build_bundle(q.get_context(), q.get_device(), "test source", source, {name},
                             fp_options ? build_options_with(*fp_options) : build_options_for_runtime());
  const sycl::kernel k = bundle.ext_oneapi_get_kernel(name);
  validate_launch(q, k, 1, &global, &local, pointers.size() + 1);
  sycl::event e = q.submit([&](sycl::handler& h) {
    int i = 0;
    for (const uintptr_t p : pointers) h.set_arg(i++, reinterpret_cast<void*>(p));
    h.set_arg(i, n);
    h.parallel_for(sycl::nd_range<1>(global, local), k);
  });
  e.wait_and_throw();
}

}  // namespace xkernels::sycl_backend

// ---------------------------------------------------------------- backend.h
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
    if (!unusable.empty()) *why_not = unusable;
    else if (!r.error.empty()) *why_not = r.error;
    else if (seen == 0) {
      std::string listed;
      for (const auto& rec : r.devices)
        listed += (listed.empty() ? "" : ", ") + rec.traits.name + " (" + rec.backend + " " + rec.type + ")";
      *why_not = "its devices: " + listed;
    }
    else *why_not = "it lists " + std::to_string(seen) + " CUDA device(s), none with index " + std::to_string(index);
  }
  return false;
}

}  // namespace xkernels
