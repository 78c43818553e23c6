// The Python module xkernels._C. Importing it loads the library, which registers
// the ops with the dispatcher (TORCH_LIBRARY in registration.cpp). Ops are reached
// only through torch.ops.xkernels.*; this module carries control-plane functions
// (backend selection, dispatch record, build facts, SYCL runtime control).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>  // the c10::SymInt casters

#include "xkernels/backend.h"
#include "xkernels/shapes.h"
#include "xkernels_build_config.h"

namespace py = pybind11;

#ifdef XKERNELS_WITH_SYCL
namespace xkernels::sycl_backend {
void bind_python(py::module_& m);  // csrc/sycl/python_bindings.cpp
}
#endif

PYBIND11_MODULE(_C, m) {
  using namespace xkernels;
  m.doc() = "xkernels native library (control plane; ops are torch.ops.xkernels.*)";
  m.attr("__version__") = XKERNELS_VERSION;
  m.attr("build_config") = XKERNELS_BUILD_CONFIG;
#ifdef XKERNELS_WITH_SYCL
  m.attr("with_sycl") = true;
#else
  m.attr("with_sycl") = false;
#endif
#ifdef XKERNELS_WITH_ACPP
  m.attr("with_acpp") = true;
#else
  m.attr("with_acpp") = false;
#endif
  m.def(
      "acpp_status",
      [] {
        std::string why;
        const bool ok = acpp_cpu_available(&why);
        return py::make_tuple(ok, why);
      },
      "(available, reason) of the acpp backend (AdaptiveCpp's ahead-of-time kernels) for CPU tensors.");
#ifdef XKERNELS_WITH_CUDA
  m.attr("with_cuda") = true;
#else
  m.attr("with_cuda") = false;
#endif

  m.def("default_backend", [] { return std::string(backend_name(default_backend())); });
  m.def("set_default_backend", [](const std::string& name) { set_default_backend(parse_backend(name, "backend")); });
  m.def("thread_backend", []() -> std::optional<std::string> {
    auto b = thread_backend();
    return b ? std::optional<std::string>(backend_name(*b)) : std::nullopt;
  });
  m.def("set_thread_backend", [](std::optional<std::string> name) {
    set_thread_backend(name ? std::optional<Backend>(parse_backend(*name, "backend")) : std::nullopt);
  });
  m.def("requested_backend", [] { return std::string(backend_name(requested_backend())); });
  m.def("validate_backend_name", [](const std::string& name, const std::string& what) {
    return std::string(backend_name(parse_backend(name, what.c_str())));
  });
  m.def(
      "cpu_backend",
      [](const std::string& dtype_name) {
        return std::string(backend_name(
            cpu_backend_choice(scalar_type_from_name(dtype_name, "xkernels._C.cpu_backend: argument 'dtype_name'"))));
      },
      py::arg("dtype_name"),
      "The backend ops on CPU tensors of this dtype ('float32', ...) run on in this thread, as the CPU dispatch "
      "decides it (csrc/backend.cpp cpu_backend_choice): the requested backend, or under 'auto' 'sycl' where the "
      "SYCL CPU device runs the dtype, else 'reference'. Neither checks nor records the request.");

  // Shape rules for Python (the fakes in python/xkernels/ops.py, xkernels.nn): the C++ definitions the kernels use
  // (xkernels/shapes.h), exported instead of written again. conv2d_out_size takes ints or SymInts.
  m.def(
      "conv2d_out_size",
      [](const c10::SymInt& size, const c10::SymInt& kernel, const c10::SymInt& stride, const c10::SymInt& padding,
         const c10::SymInt& dilation) { return conv2d_out_size(size, kernel, stride, padding, dilation); },
      py::arg("size"), py::arg("kernel"), py::arg("stride"), py::arg("padding"), py::arg("dilation"),
      "One spatial output size of conv2d with symmetric padding (not positive when the dilated kernel is larger "
      "than the padded input); ints or SymInts.");
  m.def(
      "linear_pack_columns",
      [](const std::string& dtype_name) {
        return linear_pack_columns(scalar_type_from_name(dtype_name, "xkernels._C.linear_pack_columns"));
      },
      py::arg("dtype_name"), "Columns C of a pack_linear_weight panel: its result is [ceil(N / C), K, C].");
  m.def(
      "conv2d_pack_layout",
      [](const std::vector<int64_t>& weight_shape, int64_t groups, const std::string& dtype_name) {
        const Conv2dPackLayout l = conv2d_pack_layout(
            weight_shape, groups, scalar_type_from_name(dtype_name, "xkernels._C.conv2d_pack_layout"));
        return py::make_tuple(l.group_lanes, l.lanes, l.pad, l.numel, l.winograd);
      },
      py::arg("weight_shape"), py::arg("groups"), py::arg("dtype_name"),
      "pack_conv2d_weight's layout for a weight of this shape (shapes.h conv2d_pack_layout): (lanes over groups?, "
      "lanes, pad, numel, winograd); pad is G padded to the lanes (lanes over groups) or the output-channel panel "
      "width; winograd the element offset of the Winograd weights (0: none).");

  m.def("dispatch_record_enabled", &dispatch_record_enabled);
  m.def("set_dispatch_record_enabled", &set_dispatch_record_enabled);
  m.def("dispatch_record_clear", &dispatch_record_clear);
  m.def("dispatch_record_snapshot", [] {
    py::list out;
    for (const auto& e : dispatch_record_snapshot())
      out.append(py::make_tuple(e.op, e.backend, e.device, e.fallback_reason, e.count));
    return out;
  });

#ifdef XKERNELS_WITH_SYCL
  auto sycl = m.def_submodule("sycl", "SYCL runtime control");
  sycl_backend::bind_python(sycl);
#endif
}
