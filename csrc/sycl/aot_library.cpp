// Loading and checking the ahead-of-time launcher library of the `acpp` backend (aot_library.h).
#include "sycl/aot_library.h"

#include <c10/util/Exception.h>
#include <dlfcn.h>

#include <deque>
#include <mutex>
#include <sstream>

#include "sycl/aot/abi.h"
#include "sycl/kernel_table.h"
#include "sycl/kernels/tables.hpp"
#include "xkernels/backend.h"

namespace xkernels::sycl_backend {

namespace {

// The directory of this extension module (the launcher library is installed beside it).
std::string module_dir() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&acpp_available), &info) == 0 || !info.dli_fname) return ".";
  const std::string path = info.dli_fname;
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

// Every (kernel, type) instantiation of this extension's tables must be the library's, in the same
// order, with the same parameter layout: otherwise it was built from other kernel sources.
std::string mismatch(const xk_aot_library& lib) {
  std::vector<std::string> mine;
  std::vector<size_t> sizes;
  std::vector<int> dims;
  xk::for_each_instance([&](auto, auto k, auto t) {
    using K = typename decltype(k)::type;
    using T = typename decltype(t)::type;
    mine.push_back(xk::identifier(xk::cxx_name<K>()) + "<" + xk::type_label<T>() + ">");
    sizes.push_back(sizeof(typename K::template params<T>));
    dims.push_back(K::dims);
  });
  if (lib.count != mine.size()) {
    std::ostringstream s;
    s << "it has " << lib.count << " kernel instantiations, this extension's tables have " << mine.size();
    return s.str();
  }
  for (size_t i = 0; i < mine.size(); ++i) {
    const xk_aot_kernel& e = lib.kernels[i];
    const std::string theirs = xk::identifier(e.kernel) + "<" + e.type + ">";
    if (theirs != mine[i] || e.params_size != sizes[i] || e.dims != dims[i])
      return "instantiation " + std::to_string(i) + " is " + theirs + " (params " + std::to_string(e.params_size) +
             " bytes) where this extension has " + mine[i] + " (params " + std::to_string(sizes[i]) + " bytes)";
  }
  return "";
}

struct Loaded {
  std::unique_ptr<AotLibrary> lib;
  std::string error;
};

// Loads <extension dir>/<file>: dlopen (RTLD_LOCAL), the entry point, the interface version, the tables.
Loaded load(const std::string& file, bool own_queue) {
  Loaded l;
  const std::string path = module_dir() + "/" + file;
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* e = dlerror();
    l.error = "loading " + path + " failed: " + (e ? e : "unknown error");
    return l;
  }
  auto fn = reinterpret_cast<xk_aot_library_fn>(dlsym(h, "xk_aot_library_v1"));
  if (!fn) {
    l.error = path + " has no xk_aot_library_v1";
    return l;
  }
  char err[1024] = {0};
  const xk_aot_library* lib = fn(err, sizeof(err));
  if (!lib) {
    l.error = path + " found no device: " + err;
    return l;
  }
  if (lib->abi_version != XK_AOT_ABI_VERSION) {
    l.error = path + " has interface version " + std::to_string(lib->abi_version) + ", this extension needs " +
              std::to_string(XK_AOT_ABI_VERSION);
    return l;
  }
  const std::string bad = mismatch(*lib);
  if (!bad.empty()) {
    l.error = path + " was built from other kernel tables: " + bad;
    return l;
  }
  l.lib = std::make_unique<AotLibrary>(lib, own_queue);
  return l;
}

const Loaded& loaded() {
  static const Loaded state = [] {
#ifdef XKERNELS_WITH_ACPP
    return load("libxkernels_acpp.so", /*own_queue=*/true);
#else
    Loaded l;
    l.error = "xkernels was built without the acpp backend (AdaptiveCpp not found at build time; see README)";
    return l;
#endif
  }();
  return state;
}

// One instantiation of a launcher library's tables. The icpx library submits to the DPC++ queue it is given
// without handing back an event: the launch's event is a barrier behind it on that in-order queue. The acpp
// library (no queue) has run the launch to completion when it returns.
class AotKernel final : public Kernel {
 public:
  AotKernel(const AotLibrary* lib, size_t index, std::string label)
      : lib_(lib), index_(index), label_(std::move(label)) {}

  sycl::event launch(sycl::queue* q, int dims, const size_t* global, const size_t* local,
                     std::span<const KernelArg> args) const override {
    TORCH_CHECK(args.size() == 1 && args[0].data != nullptr, "xkernels: launch of ", label_,
                ": a table kernel takes one argument, its parameter struct; ", args.size(), " given");
    lib_->launch(index_, label_, dims, global, local, args[0].data, args[0].size, q);
    return q ? q->ext_oneapi_submit_barrier() : sycl::event();
  }
  size_t work_group_limit(const sycl::queue*) const override { return lib_->traits().max_work_group_size; }

 private:
  const AotLibrary* lib_;
  size_t index_;
  std::string label_;
};

class AotTableKernels final : public TableKernels {
 public:
  AotTableKernels(const AotLibrary* lib, const xk_aot_library& raw, bool work_item_lanes)
      : lib_(lib), work_item_lanes_(work_item_lanes) {
    for (size_t i = 0; i < raw.count; ++i) {
      const xk_aot_kernel& e = raw.kernels[i];
      kernels_.emplace_back(lib, i, kernel_label_of(e.kernel ? e.kernel : "", e.type ? e.type : ""));
    }
  }
  const DeviceTraits& traits() const override { return lib_->traits(); }
  const Kernel& get(size_t index, TableEntry (*)()) override {
    TORCH_CHECK(index < kernels_.size(), "xkernels: kernel instantiation ", index, " is not in the library");
    return kernels_[index];
  }
  bool lanes_are_work_items() const override { return work_item_lanes_; }

 private:
  const AotLibrary* lib_;
  bool work_item_lanes_;
  std::deque<AotKernel> kernels_;  // stable addresses
};

}  // namespace

AotLibrary::~AotLibrary() = default;

AotLibrary::AotLibrary(const xk_aot_library* lib, bool own_queue) : lib_(lib) {
  const xk_aot_device& d = lib->device;
  traits_.is_cpu = d.is_cpu != 0;
  traits_.fp64 = d.fp64 != 0;
  traits_.fp16 = d.fp16 != 0;
  traits_.max_work_group_size = d.max_work_group_size;
  traits_.local_mem_bytes = d.local_mem_bytes;
  for (size_t i = 0; i < d.n_sub_group_sizes && i < 8; ++i) traits_.sub_group_sizes.push_back(d.sub_group_sizes[i]);
  traits_.name = d.name ? d.name : "";
  kernels_ = std::make_unique<AotTableKernels>(this, *lib, own_queue);
}

std::string AotLibrary::implementation() const { return lib_->implementation ? lib_->implementation : ""; }
std::string AotLibrary::flags() const { return lib_->flags ? lib_->flags : ""; }
size_t AotLibrary::kernel_count() const { return lib_->count; }

void AotLibrary::launch(size_t index, const std::string& label, int dims, const size_t* global, const size_t* local,
                        const void* params, size_t params_size, void* queue) const {
  TORCH_CHECK(index < lib_->count, "xkernels: acpp kernel index ", index, " out of range");
  const xk_aot_kernel& k = lib_->kernels[index];
  TORCH_CHECK(k.launch, "xkernels: kernel ", label, " requires sub-group size ", k.sub_group,
              ", which the acpp device '", traits_.name, "' does not have");
  TORCH_CHECK(k.params_size == params_size && k.dims == dims, "xkernels: acpp kernel ", label,
              " has another parameter layout");
  size_t wg = 1;
  for (int d = 0; d < dims; ++d) {
    TORCH_CHECK(local[d] >= 1 && global[d] % local[d] == 0, "xkernels: launch of ", label, ": global size ", global[d],
                " is not a positive multiple of the local size ", local[d], " in dimension ", d);
    wg *= local[d];
  }
  TORCH_CHECK(wg <= traits_.max_work_group_size, "xkernels: launch of ", label, ": work-group size ", wg,
              " exceeds the acpp device limit ", traits_.max_work_group_size);
  char err[2048] = {0};
  TORCH_CHECK(k.launch(global, local, params, queue, err, sizeof(err)) == 0, "xkernels: acpp kernel ", label,
              " failed: ", err);
}

const AotLibrary* sycl_aot_library(std::string* why_not) {
#ifdef XKERNELS_SYCL_AOT
  static const Loaded state = load(XKERNELS_SYCL_AOT_LIBRARY, /*own_queue=*/false);
  if (!state.lib && why_not) *why_not = state.error;
  return state.lib.get();
#else
  if (why_not) *why_not = "xkernels was built without ahead-of-time SYCL kernels (no oneAPI icpx at build time)";
  return nullptr;
#endif
}

bool acpp_available(std::string* why_not) {
  const Loaded& l = loaded();
  if (!l.lib && why_not) *why_not = l.error;
  return l.lib != nullptr;
}

const AotLibrary& acpp_library() {
  const Loaded& l = loaded();
  TORCH_CHECK(l.lib, "xkernels: the acpp backend is unavailable: ", l.error);
  return *l.lib;
}

TableKernels& acpp_table_kernels() { return acpp_library().table_kernels(); }

}  // namespace xkernels::sycl_backend

#ifdef XKERNELS_WITH_ACPP
bool xkernels::acpp_cpu_available(std::string* why_not) { return sycl_backend::acpp_available(why_not); }
#endif
