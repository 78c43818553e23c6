// User-written SYCL kernels: generated entry points, builds per (device, element type), validated
// launches and the launch op (see user_kernels.h; their Python bindings are in user_kernel_bindings.cpp).
#include "sycl/user_kernels.h"

#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <array>
#include <cstring>
#include <limits>
#include <sstream>

#include "sycl/kernels/common.hpp"
#include "sycl/runtime.h"
#include "sycl/runtime_info.h"
#include "xkernels/backend.h"

namespace xkernels::sycl_backend {

namespace {

// Element type -> (spelling in generated source, part label).
struct TypeNames {
  const char* device;  // "float", "xk::half", ...
  const char* label;   // "float32", ...
};
TypeNames names_of(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return {"float", "float32"};
    case at::kDouble: return {"double", "float64"};
    case at::kHalf: return {"xk::half", "float16"};
    case at::kBFloat16: return {"xk::bf16", "bfloat16"};
    default:
      TORCH_CHECK_TYPE(false, "xkernels.sycl: element type T must be float32, float64, float16 or bfloat16, got ",
                       c10::toString(t));
  }
}

std::string dtype_str(at::ScalarType t) {
  std::string s = c10::toString(t);
  // c10 spells them "Float", "Half", ...: use torch's Python names in messages.
  switch (t) {
    case at::kFloat: return "torch.float32";
    case at::kDouble: return "torch.float64";
    case at::kHalf: return "torch.float16";
    case at::kBFloat16: return "torch.bfloat16";
    case at::kInt: return "torch.int32";
    case at::kLong: return "torch.int64";
    case at::kShort: return "torch.int16";
    case at::kChar: return "torch.int8";
    case at::kByte: return "torch.uint8";
    case at::kBool: return "torch.bool";
    default: return s;
  }
}

// The C++ spelling of a parameter's base type for element type `t` (nullopt: untemplated source).
std::string spell(const std::string& base, std::optional<at::ScalarType> t) {
  if (base == "T") return names_of(*t).device;
  if (base == "acc_t") return *t == at::kDouble ? "double" : "float";
  if (base == "half") return "xk::half";
  if (base == "bf16") return "xk::bf16";
  return base;
}

// The tensor dtype a pointer parameter's base type needs.
at::ScalarType pointee_dtype(const std::string& base, std::optional<at::ScalarType> t) {
  if (base == "T") return *t;
  if (base == "acc_t") return *t == at::kDouble ? at::kDouble : at::kFloat;
  if (base == "float") return at::kFloat;
  if (base == "double") return at::kDouble;
  if (base == "half") return at::kHalf;
  if (base == "bf16") return at::kBFloat16;
  if (base == "int8_t") return at::kChar;
  if (base == "uint8_t") return at::kByte;
  if (base == "int16_t") return at::kShort;
  if (base == "int32_t") return at::kInt;
  if (base == "int64_t") return at::kLong;
  if (base == "bool") return at::kBool;
  TORCH_CHECK_VALUE(false, "xkernels.sycl: pointer parameters of type '", base, "*' are not supported");
}

bool is_int_base(const std::string& b) {
  return b == "int8_t" || b == "uint8_t" || b == "int16_t" || b == "int32_t" || b == "int64_t" || b == "uint32_t" ||
         b == "uint64_t";
}

std::string param_decl(const UserParam& p) {
  return (p.is_const ? "const " : "") + (p.base == "acc_t" ? std::string("xk::acc_t<T>") : p.base) +
         (p.pointer ? "*" : "") + " " + p.name;
}

// sycl::queue for a device (queue_for takes a tensor).
sycl::queue& queue_for_device(const at::Device& device) {
  // Leaked on purpose, like the runtime's queues: nothing to destroy while the process exits.
  static const at::Tensor* cpu_probe = new at::Tensor(at::empty({0}, at::TensorOptions().dtype(at::kFloat)));
  if (device.is_cpu()) return queue_for(*cpu_probe);
  return queue_for(at::empty({0}, at::TensorOptions().dtype(at::kFloat).device(device)));
}

std::mutex g_registry_mu;
std::vector<std::shared_ptr<UserSource>>& registry_of_sources() {
  static auto* v = new std::vector<std::shared_ptr<UserSource>>();  // leaked like the runtime's statics
  return *v;
}

}  // namespace

UserSource::UserSource(std::string name, std::string source, std::string include_dir, std::vector<std::string> includes,
                       bool templated, std::vector<UserKernel> kernels, std::vector<std::string> extra_options,
                       int sub_group_size)
    : name_(std::move(name)),
      source_(std::move(source)),
      include_dir_(std::move(include_dir)),
      includes_(std::move(includes)),
      templated_(templated),
      kernels_(std::move(kernels)),
      sub_group_size_(sub_group_size) {
  TORCH_CHECK_VALUE(!kernels_.empty(), "xkernels.sycl: source '", name_, "' declares no kernel");
  for (const auto& k : kernels_) {
    TORCH_CHECK_VALUE(k.dims >= 1 && k.dims <= 3, "xkernels.sycl: kernel '", k.name, "': xk::item_arg<", k.dims,
                      "> must have 1, 2 or 3 dimensions");
    for (const auto& p : k.params) {
      if (p.pointer) {
        (void)pointee_dtype(p.base, at::kFloat);  // throws for unsupported pointees
      } else {
        TORCH_CHECK_VALUE(
            p.base == "T" || p.base == "acc_t" || p.base == "float" || p.base == "double" || is_int_base(p.base),
            "xkernels.sycl: kernel '", k.name, "': parameter '", p.name, "' of type '", p.base,
            "' is not supported (scalars: T, xk::acc_t<T>, float, double, int8_t .. uint64_t)");
      }
      TORCH_CHECK_VALUE(templated_ || (p.base != "T" && p.base != "acc_t"), "xkernels.sycl: kernel '", k.name,
                        "': parameter '", p.name, "' uses T, but the source's kernels are not templates");
    }
  }
  options_ = build_options_for_runtime();
  if (!include_dir_.empty()) options_.push_back("-I" + include_dir_);
  options_.insert(options_.end(), extra_options.begin(), extra_options.end());
}

std::string UserSource::label(std::optional<at::ScalarType> dtype) const {
  return name_ + ".sycl" + (dtype ? std::string(" [") + names_of(*dtype).label + "]" : std::string());
}

std::string UserSource::translation_unit(std::optional<at::ScalarType> dtype) const {
  TORCH_CHECK_VALUE(dtype.has_value() == templated_, "xkernels.sycl: source '", name_, "' ",
                    templated_ ? "is templated: give an element type" : "is not templated: give no element type");
  // The user's text is the include file <name>.sycl (in include_dir_, given to the compiler with -I), so
  // the compiler's diagnostics cite it by name with its own line numbers. (A #line directive is not
  // enough: the run-time compiler's messages give physical locations, "rtc_N.cpp:<line>".) Without an
  // include directory the text is inlined after a #line directive (the code snippets then show the
  // user's lines).
  std::string s = "#include \"common.hpp\"\n";
  for (const auto& inc : includes_) s += "#include \"" + inc + "\"\n";
  if (!include_dir_.empty()) {
    s += "#include \"" + name_ + ".sycl\"\n";
  } else {
    s += "#line 1 \"" + name_ + ".sycl\"\n" + source_;
    if (s.back() != '\n') s += '\n';
  }
  const std::string sub =
      sub_group_size_ > 0 ? "[[sycl::reqd_sub_group_size(" + std::to_string(sub_group_size_) + ")]]\n" : std::string();
  for (const auto& k : kernels_) {
    const std::string d = std::to_string(k.dims);
    s += "SYCL_EXT_ONEAPI_FUNCTION_PROPERTY((sycl::ext::oneapi::experimental::nd_range_kernel<" + d + ">))\n" + sub;
    s += "void xku_" + k.name + "__" + (dtype ? names_of(*dtype).label : "any") + "(";
    std::string call = k.name + (dtype ? std::string("<") + names_of(*dtype).device + ">" : std::string()) +
                       "(xk::item_arg<" + d + ">{}";
    for (size_t i = 0; i < k.params.size(); ++i) {
      const auto& p = k.params[i];
      s += (i ? ", " : "") + std::string(p.is_const ? "const " : "") + spell(p.base, dtype) + (p.pointer ? "* " : " ") +
           p.name;
      call += ", " + p.name;
    }
    s += ") {\n  " + call + ");\n}\n";
  }
  return s;
}

std::string UserSource::build_key(std::optional<at::ScalarType> dtype) const {
  // Unique per source object (two sources may share a name) and element type, within the provider's cache.
  std::ostringstream s;
  s << "user:" << static_cast<const void*>(this) << ":" << name_ << ".sycl|" << (dtype ? names_of(*dtype).label : "");
  return s.str();
}

const KernelMap& UserSource::built(const sycl::queue& q, std::optional<at::ScalarType> dtype, double* seconds) {
  double s = 0;
  const KernelMap& kernels = built_kernels(
      q, build_key(dtype),
      [&] {
        const DeviceTraits& traits = traits_of(q);
        if (dtype) {
          TORCH_CHECK_TYPE(*dtype != at::kDouble || traits.fp64, "xkernels.sycl: '", name_, "': the SYCL device '",
                           traits.name, "' has no fp64 support (torch.float64)");
          TORCH_CHECK_TYPE(*dtype != at::kHalf || traits.fp16, "xkernels.sycl: '", name_, "': the SYCL device '",
                           traits.name, "' has no fp16 support (torch.float16)");
        }
        if (sub_group_size_ > 0) {
          bool ok = false;
          std::string have;
          for (size_t s : traits.sub_group_sizes) {
            ok = ok || s == static_cast<size_t>(sub_group_size_);
            have += (have.empty() ? "" : ", ") + std::to_string(s);
          }
          TORCH_CHECK_VALUE(ok, "xkernels.sycl: '", name_, "': sub_group_size=", sub_group_size_,
                            " is not a sub-group size of the SYCL device '", traits.name, "' (it has ", have, ")");
        }
        BuildSpec spec;
        spec.label = label(dtype);
        spec.source = [this, dtype] { return translation_unit(dtype); };
        for (const auto& k : kernels_) spec.names.push_back(entry_name(k, dtype));
        spec.options = options_;
        return spec;
      },
      &s);
  if (s > 0) {
    std::lock_guard<std::mutex> lock(mu_);
    builds_.emplace_back(traits_of(q).name + ": " + label(dtype), s);
  }
  if (seconds) *seconds = s;
  return kernels;
}

std::string UserSource::entry_name(const UserKernel& k, std::optional<at::ScalarType> dtype) {
  return "xku_" + k.name + "__" + (dtype ? names_of(*dtype).label : "any");
}

bool UserSource::is_built(const at::Device& device, std::optional<at::ScalarType> dtype) {
  return sycl_backend::is_built(queue_for_device(device), build_key(dtype));
}

double UserSource::build(const at::Device& device, std::optional<at::ScalarType> dtype) {
  TORCH_CHECK_VALUE(dtype.has_value() == templated_, "xkernels.sycl: source '", name_, "' ",
                    templated_ ? "is templated: give an element type" : "is not templated: give no element type");
  if (dtype) (void)names_of(*dtype);
  sycl::queue& q = queue_for_device(device);
  double seconds = 0;
  built(q, dtype, &seconds);
  return seconds;
}

const UserKernel& UserSource::find(const std::string& kernel) const {
  for (const auto& k : kernels_)
    if (k.name == kernel) return k;
  std::string known;
  for (const auto& k : kernels_) known += (known.empty() ? "" : ", ") + k.name;
  TORCH_CHECK_VALUE(false, "xkernels.sycl: source '", name_, "' has no kernel '", kernel, "' (it has: ", known, ")");
}

std::vector<std::pair<std::string, double>> UserSource::builds() const {
  std::lock_guard<std::mutex> lock(mu_);
  return builds_;
}

void UserSource::launch(const std::string& kernel, const std::vector<int64_t>& global,
                        const std::vector<int64_t>& local, const std::vector<at::Tensor>& tensors,
                        const std::vector<c10::Scalar>& scalars) {
  const UserKernel& k = find(kernel);
  const std::string who = "xkernels.sycl: kernel '" + kernel + "' (" + name_ + ".sycl)";
  size_t n_ptr = 0;
  for (const auto& p : k.params) n_ptr += p.pointer;
  const size_t n_scalar = k.params.size() - n_ptr;
  TORCH_CHECK_TYPE(tensors.size() == n_ptr && scalars.size() == n_scalar, who, " takes ", k.params.size(),
                   " arguments (", n_ptr, " tensors, ", n_scalar, " scalars), got ", tensors.size() + scalars.size(),
                   " (", tensors.size(), " tensors, ", scalars.size(), " scalars)");
  TORCH_CHECK_VALUE(!tensors.empty(), who, " needs at least one tensor argument (it chooses the device)");
  // Geometry.
  auto dims_str = [](const std::vector<int64_t>& v) {
    std::ostringstream s;
    s << "[";
    for (size_t i = 0; i < v.size(); ++i) s << (i ? ", " : "") << v[i];
    return s.str() + "]";
  };
  TORCH_CHECK_VALUE(global.size() == static_cast<size_t>(k.dims) && local.size() == static_cast<size_t>(k.dims), who,
                    " is ", k.dims, "-dimensional (xk::item_arg<", k.dims, ">): global size ", dims_str(global),
                    " and local size ", dims_str(local), " must have ", k.dims, " entries each");
  bool empty = false;
  for (int d = 0; d < k.dims; ++d) {
    TORCH_CHECK_VALUE(global[d] >= 0, who, ": global size ", dims_str(global), " has a negative entry");
    TORCH_CHECK_VALUE(local[d] >= 1, who, ": local size ", dims_str(local), " must be >= 1 in every dimension");
    TORCH_CHECK_VALUE(global[d] % local[d] == 0, who, ": global size ", dims_str(global),
                      " is not a multiple of the local size ", dims_str(local), " in dimension ", d);
    empty = empty || global[d] == 0;
  }
  // Element type: the dtype of the first tensor for a T (or acc_t) pointer.
  std::optional<at::ScalarType> dtype;
  if (templated_) {
    size_t ti = 0;
    for (const auto& p : k.params) {
      if (!p.pointer) continue;
      if (p.base == "T") {
        dtype = tensors[ti].scalar_type();
        TORCH_CHECK_TYPE(dtype == at::kFloat || dtype == at::kDouble || dtype == at::kHalf || dtype == at::kBFloat16,
                         who, ": argument '", p.name, "' (", param_decl(p),
                         ") gives the element type T, which must be "
                         "torch.float32, torch.float64, torch.float16 or torch.bfloat16, got ",
                         dtype_str(*dtype));
        break;
      }
      ++ti;
    }
    TORCH_CHECK_VALUE(dtype.has_value(), who, " has no T* parameter, so its element type cannot be inferred");
  }
  // Tensors: defined, same device as the first, dtype, contiguous.
  const at::Device device = tensors[0].device();
  {
    size_t ti = 0;
    for (const auto& p : k.params) {
      if (!p.pointer) continue;
      const at::Tensor& t = tensors[ti++];
      TORCH_CHECK_VALUE(t.defined(), who, ": argument '", p.name, "' (", param_decl(p), ") is an undefined tensor");
      TORCH_CHECK_VALUE(t.device() == device, who, ": argument '", p.name, "' is on ", t.device(),
                        ", but the first tensor argument is on ", device, " (all tensors must be on one device)");
      const at::ScalarType want = pointee_dtype(p.base, dtype);
      TORCH_CHECK_TYPE(t.scalar_type() == want, who, ": argument '", p.name, "' (", param_decl(p), ") must be ",
                       dtype_str(want),
                       dtype && (p.base == "T" || p.base == "acc_t") ? std::string(" (T = ") + dtype_str(*dtype) + ")"
                                                                     : std::string(),
                       ", got ", dtype_str(t.scalar_type()));
      TORCH_CHECK_VALUE(p.is_const || at::has_internal_overlap(t) != at::MemOverlap::Yes, who, ": argument '", p.name,
                        "' is written by the kernel but has overlapping elements (e.g. an expanded tensor)");
      TORCH_CHECK_VALUE(t.is_contiguous(), who, ": argument '", p.name, "' (", param_decl(p),
                        ") must be contiguous, got shape ", t.sizes(), " strides ", t.strides(),
                        " (call .contiguous() in the op)");
    }
  }
  // Scalars: exact types, in range.
  struct ScalarArg {
    std::string base;
    c10::Scalar value;
  };
  std::vector<ScalarArg> sargs;
  {
    size_t si = 0;
    for (const auto& p : k.params) {
      if (p.pointer) continue;
      const c10::Scalar& s = scalars[si++];
      if (is_int_base(p.base)) {
        TORCH_CHECK_TYPE(s.isIntegral(false), who, ": argument '", p.name, "' (", p.base, ") must be an int, got ",
                         s.isBoolean() ? "a bool" : "a float", " (", s.toDouble(), ")");
        const int64_t v = s.toLong();
        int64_t lo = std::numeric_limits<int64_t>::min(), hi = std::numeric_limits<int64_t>::max();
        if (p.base == "int8_t")
          lo = -128, hi = 127;
        else if (p.base == "uint8_t")
          lo = 0, hi = 255;
        else if (p.base == "int16_t")
          lo = -32768, hi = 32767;
        else if (p.base == "int32_t")
          lo = std::numeric_limits<int32_t>::min(), hi = std::numeric_limits<int32_t>::max();
        else if (p.base == "uint32_t")
          lo = 0, hi = std::numeric_limits<uint32_t>::max();
        else if (p.base == "uint64_t")
          lo = 0;
        TORCH_CHECK_VALUE(v >= lo && v <= hi, who, ": argument '", p.name, "' (", p.base, ") is out of range: ", v);
      } else {
        TORCH_CHECK_TYPE(s.isFloatingPoint() || s.isIntegral(false), who, ": argument '", p.name, "' (",
                         p.base == "acc_t" ? "xk::acc_t<T>" : p.base, ") must be a float, got ",
                         s.isBoolean()   ? "a bool"
                         : s.isComplex() ? "a complex"
                                         : "another type");
      }
      sargs.push_back({p.base, s});
    }
  }
  if (empty) return;  // nothing to run (no build needed either)

  sycl::queue& q = queue_for(tensors[0]);
  const KernelMap& kernels = built(q, dtype, nullptr);
  const Kernel& kern = *kernels.at(entry_name(k, dtype));  // read-only once built
  size_t g[3], l[3], wg = 1;
  for (int d = 0; d < k.dims; ++d) {
    g[d] = static_cast<size_t>(global[d]), l[d] = static_cast<size_t>(local[d]);
    wg *= l[d];
  }
  {  // the launch checks this too, but names the kernel by its generated entry point
    const size_t dev_max = traits_of(q).max_work_group_size;
    const size_t k_max = kern.work_group_limit(&q);
    TORCH_CHECK_VALUE(wg <= dev_max && wg <= k_max, who, ": work-group size ", wg, " (local size ", dims_str(local),
                      ") exceeds the limit (device '", traits_of(q).name, "': ", dev_max, ", this kernel: ", k_max,
                      ")");
  }
  // The arguments as bytes, in order: tensors' data as USM pointers, scalars converted to the parameter's exact type.
  std::vector<std::array<unsigned char, 8>> bytes(k.params.size());
  std::vector<KernelArg> args(k.params.size());
  {
    size_t ti = 0, si = 0;
    for (size_t i = 0; i < k.params.size(); ++i) {
      const auto& p = k.params[i];
      if (p.pointer) {
        const void* ptr = tensors[ti++].const_data_ptr();
        std::memcpy(bytes[i].data(), &ptr, sizeof(ptr));
        args[i] = KernelArg{bytes[i].data(), sizeof(ptr), /*usm_pointer=*/true};
        continue;
      }
      const ScalarArg& a = sargs[si++];
      auto put = [&](auto v) {
        static_assert(sizeof(v) <= 8 && std::is_trivially_copyable_v<decltype(v)>);
        std::memcpy(bytes[i].data(), &v, sizeof(v));
        args[i] = KernelArg{bytes[i].data(), sizeof(v)};
      };
      const std::string& b = a.base;
      if (b == "T") {
        const double v = a.value.toDouble();
        switch (*dtype) {
          case at::kFloat: put(static_cast<float>(v)); break;
          case at::kDouble: put(v); break;
          case at::kHalf: put(sycl::half(static_cast<float>(v))); break;
          default: put(xk::bf16{xk::float_to_bf16_bits(static_cast<float>(v))}); break;
        }
      } else if (b == "acc_t") {
        if (*dtype == at::kDouble)
          put(a.value.toDouble());
        else
          put(static_cast<float>(a.value.toDouble()));
      } else if (b == "float") {
        put(static_cast<float>(a.value.toDouble()));
      } else if (b == "double") {
        put(a.value.toDouble());
      } else if (b == "int8_t") {
        put(static_cast<int8_t>(a.value.toLong()));
      } else if (b == "uint8_t") {
        put(static_cast<uint8_t>(a.value.toLong()));
      } else if (b == "int16_t") {
        put(static_cast<int16_t>(a.value.toLong()));
      } else if (b == "int32_t") {
        put(static_cast<int32_t>(a.value.toLong()));
      } else if (b == "uint32_t") {
        put(static_cast<uint32_t>(a.value.toLong()));
      } else if (b == "uint64_t") {
        put(static_cast<uint64_t>(a.value.toLong()));
      } else {
        put(static_cast<int64_t>(a.value.toLong()));
      }
    }
  }
  sycl::event e = kern.launch(&q, k.dims, g, l, args);
  wait_if_host(tensors[0], e);
}

int64_t register_user_source(std::shared_ptr<UserSource> src) {
  std::lock_guard<std::mutex> lock(g_registry_mu);
  registry_of_sources().push_back(std::move(src));
  return static_cast<int64_t>(registry_of_sources().size()) - 1;
}

std::shared_ptr<UserSource> user_source(int64_t id) {
  std::lock_guard<std::mutex> lock(g_registry_mu);
  TORCH_CHECK_VALUE(id >= 0 && id < static_cast<int64_t>(registry_of_sources().size()),
                    "xkernels.sycl: no user kernel source with id ", id);
  return registry_of_sources()[static_cast<size_t>(id)];
}

namespace {

void launch_op(int64_t source, const std::string& kernel, at::IntArrayRef global, at::IntArrayRef local,
               const std::vector<at::Tensor>& tensors, const std::vector<c10::Scalar>& scalars) {
  settle_host_work();  // backend.h: a deferred-wait region's kernels finish first
  user_source(source)->launch(kernel, global.vec(), local.vec(), tensors, scalars);
}

}  // namespace

// The launch as an op, so tensors reach C++ as tensors (the module has no torch Python bindings):
// torch.ops.xkernels_sycl_user.launch(source id, kernel, global, local, tensors, scalars). Private:
// xkernels.sycl.Kernel calls it; the user's torch op (a torch.library custom op) wraps the launches.
TORCH_LIBRARY(xkernels_sycl_user, m) {
  m.def("launch(int source, str kernel, int[] global_size, int[] local_size, Tensor[] tensors, Scalar[] scalars) -> ()",
        &launch_op);
}

}  // namespace xkernels::sycl_backend
