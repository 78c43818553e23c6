// The kernel provider: kernel groups (one per kernel table) compiled on first use per (context, device,
// element type) by the SYCL runtime's kernel compiler (sycl_ext_oneapi_kernel_compiler, source_language::sycl)
// from the embedded kernel files plus generated entry points (kernel_table.h); the runtime's persistent
// cache (SYCL_CACHE_PERSISTENT / SYCL_CACHE_DIR, set by python/xkernels/_env.py) makes later processes
// skip the compiler, guarded by disk_cache.cpp. provider_choice.h decides per device where its kernels
// come from; this file is the only one that knows.
#include <ATen/ATen.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "sycl/aot_library.h"
#include "sycl/kernel_sources.h"
#include "sycl/provider_choice.h"
#include "sycl/provider_device.h"
#include "sycl/runtime_info.h"
#include "sycl/runtime_internal.h"

namespace syclex = sycl::ext::oneapi::experimental;
namespace pc = xkernels::sycl_backend::provider_choice;

namespace xkernels::sycl_backend {

// Floating-point options of the run-time compiler: the "sycl:" line of cmake/fp_flags.txt, which the build
// passes in (XKERNELS_SYCL_FP_OPTIONS). -ffp-contract=off is the one that changes results here: the kernel
// compiler contracts a*b+c by default (measured on the OpenCL CPU device: 77 % of fp32 a*b+c bit-identical to
// the unfused result without it, 100 % with it). -ffp-model=precise is not used: it implies
// -ffp-contract=on. The 2026.1.2 and 2025.3.3 kernel compilers accept the list; tests/test_sycl_runtime.py
// checks its effect (exact a*b+c, division and sqrt).
const std::vector<std::string> kDeviceFPOptions = [] {
  std::vector<std::string> out;
  std::string word;
  for (const char c : std::string(XKERNELS_SYCL_FP_OPTIONS)) {
    if (c == ' ') {
      if (!word.empty()) out.push_back(word);
      word.clear();
    } else {
      word += c;
    }
  }
  if (!word.empty()) out.push_back(word);
  return out;
}();

namespace {

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
  static const auto images = pc::parse_aot_targets(XKERNELS_SYCL_AOT_TARGETS);
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
      return syclex::build(
          src, std::vector<sycl::device>{dev},
          syclex::properties{syclex::build_options{options}, syclex::save_log{&log}, syclex::registered_names{names}});
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

// A kernel of the runtime's kernel compiler, launched on a queue of its device.
class RuntimeKernel final : public Kernel {
 public:
  RuntimeKernel(sycl::kernel k, std::string label) : k_(std::move(k)), label_(std::move(label)) {}

  sycl::event launch(sycl::queue* q, int dims, const size_t* global, const size_t* local,
                     std::span<const KernelArg> args) const override {
    TORCH_CHECK(q != nullptr, "xkernels: kernel ", label_, " was compiled at run time and needs a queue");
    validate_launch(*q, k_, label_, dims, global, local, args.size());
    return q->submit([&](sycl::handler& h) {
      for (size_t i = 0; i < args.size(); ++i) {
        const int idx = static_cast<int>(i);
        if (args[i].usm_pointer)
          h.set_arg(idx, *static_cast<void* const*>(args[i].data));
        else
          h.set_arg(idx, syclex::raw_kernel_arg(args[i].data, args[i].size));
      }
      if (dims == 1)
        h.parallel_for(sycl::nd_range<1>({global[0]}, {local[0]}), k_);
      else if (dims == 2)
        h.parallel_for(sycl::nd_range<2>({global[0], global[1]}, {local[0], local[1]}), k_);
      else
        h.parallel_for(sycl::nd_range<3>({global[0], global[1], global[2]}, {local[0], local[1], local[2]}), k_);
    });
  }

  size_t work_group_limit(const sycl::queue* q) const override {
    TORCH_CHECK(q != nullptr, "xkernels: kernel ", label_, " was compiled at run time and needs a queue");
    return k_.get_info<sycl::info::kernel_device_specific::work_group_size>(q->get_device());
  }

 private:
  sycl::kernel k_;
  std::string label_;
};

// The provider's one in-memory cache: a slot per (context, device, build key), each built once. Built-in kernel
// groups are keyed "<file>|<part>", user sources by user_kernels.cpp.
struct SlotKey {
  sycl::context ctx;
  sycl::device dev;
  std::string key;
  bool operator==(const SlotKey& o) const { return ctx == o.ctx && dev == o.dev && key == o.key; }
};
struct SlotKeyHash {
  size_t operator()(const SlotKey& k) const {
    size_t h = std::hash<sycl::context>()(k.ctx);
    h = h * 1000003u ^ std::hash<sycl::device>()(k.dev);
    return h * 1000003u ^ std::hash<std::string>()(k.key);
  }
};
struct Slot {
  std::mutex mu;  // held while this build compiles for this device; other builds compile in parallel
  bool built = false;
  KernelMap kernels;
};

std::mutex g_slots_mu;
std::unordered_map<SlotKey, std::shared_ptr<Slot>, SlotKeyHash>& slots() {
  static auto* m = new std::unordered_map<SlotKey, std::shared_ptr<Slot>, SlotKeyHash>();
  return *m;
}

std::shared_ptr<Slot> slot_of(const sycl::context& ctx, const sycl::device& dev, const std::string& key) {
  std::lock_guard<std::mutex> lock(g_slots_mu);
  auto& p = slots()[SlotKey{ctx, dev, key}];
  if (!p) p = std::make_shared<Slot>();
  return p;
}

std::mutex g_build_log_mu;
std::vector<std::pair<std::string, double>> g_build_log;  // every build of this process

// The slot of `key`, built (compiling now if nobody has). `*seconds`: the time this call spent building.
Slot& built_slot(const sycl::context& ctx, const sycl::device& dev, const std::string& key,
                 const std::function<BuildSpec()>& make_spec, double* seconds) {
  std::shared_ptr<Slot> slot = slot_of(ctx, dev, key);
  std::lock_guard<std::mutex> lock(slot->mu);
  if (seconds) *seconds = 0;
  if (slot->built) return *slot;
  const auto t0 = std::chrono::steady_clock::now();
  const BuildSpec spec = make_spec();
  TORCH_CHECK(!spec.names.empty(), "xkernels: '", spec.label, "' has no kernels for device '",
              dev.get_info<sycl::info::device::name>(), "'");
  auto bundle = build_bundle(ctx, dev, spec.label, spec.source(), spec.names, spec.options);
  for (const auto& n : spec.names) {
    TORCH_CHECK(bundle.ext_oneapi_has_kernel(n), "xkernels: '", spec.label, "' built, but it has no kernel '", n, "'");
    slot->kernels.emplace(n, std::make_unique<RuntimeKernel>(bundle.ext_oneapi_get_kernel(n), spec.label + ": " + n));
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  slot->built = true;
  {
    std::lock_guard<std::mutex> log_lock(g_build_log_mu);
    g_build_log.emplace_back(traits_of_device(dev).name + ": " + spec.label, s);
  }
  if (seconds) *seconds = s;
  return *slot;
}

// The build of one part (element type) of a built-in kernel group. The source: the kernel file, reached through
// its include file so that diagnostics in kernel bodies name it ("layer_norm.hpp:12:3: error: ..."), then the
// part's generated entry points.
Slot& built_group(const sycl::context& ctx, const sycl::device& dev, const KernelGroup& group,
                  const std::string& part) {
  return built_slot(
      ctx, dev, group.file + "|" + part,
      [&] {
        TORCH_CHECK(
            find_source(group.file), "xkernels: kernel group '", group.file, "' has no embedded source (known: ",
            [] {
              std::vector<std::string> n;
              for (const auto& s : embedded_kernel_sources()) n.push_back(s.name);
              return join(n, ", ");
            }(),
            ")");
        BuildSpec spec;
        spec.label = part_label(group.file, part);
        std::string source = "#include \"" + group.file + "\"\n";
        for (auto& e : group.entries(traits_of_device(dev)))
          if (e.part == part) {
            spec.names.push_back(std::move(e.name));
            source += e.definition;
          }
        spec.source = [source] { return source; };
        spec.options = build_options_for_runtime();
        note_group_source(dev, group.file, pc::describe(device_choice(dev)));
        return spec;
      },
      nullptr);
}

// The table kernels of one (context, device) that compiles at run time: a kernel per instantiation index, found
// once (building its group's part on first use) and then read without a lock.
class RuntimeTableKernels final : public TableKernels {
 public:
  RuntimeTableKernels(sycl::context ctx, sycl::device dev)
      : ctx_(std::move(ctx)), dev_(std::move(dev)), kernels_(table_instance_count()) {}

  const DeviceTraits& traits() const override { return traits_of_device(dev_); }

  const Kernel& get(size_t index, TableEntry (*entry)()) override {
    TORCH_CHECK(index < kernels_.size(), "xkernels: kernel instantiation ", index, " out of range");
    if (const Kernel* k = kernels_[index].load(std::memory_order_acquire)) return *k;
    const TableEntry e = entry();
    const DeviceTraits& t = traits();
    TORCH_CHECK(e.supported(t), "xkernels: kernel ", e.label, " is not available on SYCL device '", t.name,
                "' (element type or sub-group size ", e.sub_group, " unsupported)");
    // The entry's part (element type) ends its name: "xk_layer_norm_fwd__float" (kernel_table.h).
    const size_t sep = e.name.rfind("__");
    const std::string part = sep == std::string::npos ? "" : e.name.substr(sep + 2);
    const Slot& slot = built_group(ctx_, dev_, *e.group, part);
    auto it = slot.kernels.find(e.name);  // read-only once built
    TORCH_CHECK(it != slot.kernels.end(), "xkernels: kernel '", e.name, "' is not among the kernels of group '",
                e.group->file, "' for device '", t.name, "'");
    kernels_[index].store(it->second.get(), std::memory_order_release);
    return *it->second;
  }

 private:
  sycl::context ctx_;
  sycl::device dev_;
  std::vector<std::atomic<const Kernel*>> kernels_;
};

}  // namespace

const KernelMap& built_kernels(const sycl::queue& q, const std::string& key, const std::function<BuildSpec()>& spec,
                               double* seconds) {
  return built_slot(q.get_context(), q.get_device(), key, spec, seconds).kernels;
}

bool is_built(const sycl::queue& q, const std::string& key) {
  std::shared_ptr<Slot> slot = slot_of(q.get_context(), q.get_device(), key);
  std::lock_guard<std::mutex> lock(slot->mu);
  return slot->built;
}

TableKernels& table_kernels_for(const sycl::queue& q) {
  const sycl::device dev = q.get_device();
  if (TableKernels* lib = aot_table_kernels_for(dev)) return *lib;
  // The last (context, device) asked for, per thread: ops launch on the same queue call after call. Leaked
  // like the runtime's statics (no SYCL object is destroyed while the process exits).
  struct Last {
    std::optional<sycl::context> ctx;
    std::optional<sycl::device> dev;
    TableKernels* kernels = nullptr;
  };
  thread_local Last* last = new Last();
  const sycl::context ctx = q.get_context();
  if (last->kernels && *last->ctx == ctx && *last->dev == dev) return *last->kernels;
  static std::mutex mu;
  static auto* all = new std::vector<std::unique_ptr<RuntimeTableKernels>>();
  static auto* keys = new std::vector<std::pair<sycl::context, sycl::device>>();
  std::lock_guard<std::mutex> lock(mu);
  size_t i = 0;
  while (i < keys->size() && !((*keys)[i].first == ctx && (*keys)[i].second == dev)) ++i;
  if (i == keys->size()) {
    keys->emplace_back(ctx, dev);
    all->push_back(std::make_unique<RuntimeTableKernels>(ctx, dev));
  }
  last->ctx = ctx, last->dev = dev, last->kernels = (*all)[i].get();
  return *last->kernels;
}

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

std::string provider_kind() {
#ifdef XKERNELS_SYCL_AOT
  std::string why;
  const AotLibrary* lib = sycl_aot_library(&why);
  if (!lib) return "compiled at run time (kernel_compiler); the ahead-of-time library is unusable: " + why;
  return "ahead of time (" + lib->implementation() +
         ") where the library has an image for the device, else compiled at run time (kernel_compiler)";
#else
  return "compiled at run time (kernel_compiler)";
#endif
}

TableKernels* aot_table_kernels_for(const sycl::device& dev) {
#ifdef XKERNELS_SYCL_AOT
  if (device_choice(dev).source == pc::Source::RuntimeCompile) return nullptr;
  std::string why;
  const AotLibrary* lib = sycl_aot_library(&why);
  if (!lib) {
    note_group_source(dev, "(ahead-of-time library)",
                      std::string(pc::source_name(pc::Source::RuntimeCompile)) + ": " + why);
    return nullptr;
  }
  return &lib->table_kernels();
#else
  (void)dev;
  return nullptr;
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
    built_group(ctx, rec->device, *g, part);
    out.emplace_back(label, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    ++done;
  }
  if (progress) progress(done, work.size(), "done");
  return out;
}

}  // namespace xkernels::sycl_backend
