// The Python bindings of user-written SYCL kernels (xkernels._C.sycl.UserSource; xkernels.sycl drives them):
// construction from the parsed signatures, registration for the launch op, builds and their queries.
#include <c10/util/Exception.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "sycl/user_kernels.h"

namespace py = pybind11;

namespace xkernels::sycl_backend {

namespace {

std::optional<at::ScalarType> dtype_arg(const std::optional<std::string>& name) {
  if (!name) return std::nullopt;
  const std::string& n = *name;
  if (n == "float32") return at::kFloat;
  if (n == "float64") return at::kDouble;
  if (n == "float16") return at::kHalf;
  if (n == "bfloat16") return at::kBFloat16;
  TORCH_CHECK_TYPE(false, "xkernels.sycl: element type must be float32, float64, float16 or bfloat16, got '", n, "'");
}

}  // namespace

void bind_user_kernels(py::module_& m) {
  py::class_<UserSource, std::shared_ptr<UserSource>>(m, "UserSource",
                                                      "A user kernel source (xkernels.sycl.load_inline).")
      .def(py::init(
               [](const std::string& name, const std::string& source, const std::string& include_dir,
                  const std::vector<std::string>& includes, bool templated,
                  const std::vector<std::tuple<std::string, int,
                                               std::vector<std::tuple<std::string, std::string, bool, bool>>>>& kernels,
                  const std::vector<std::string>& extra_options, int sub_group_size) {
                 std::vector<UserKernel> ks;
                 for (const auto& [kname, dims, params] : kernels) {
                   UserKernel k{kname, dims, {}};
                   for (const auto& [pname, base, pointer, is_const] : params)
                     k.params.push_back(UserParam{pname, base, pointer, is_const});
                   ks.push_back(std::move(k));
                 }
                 return std::make_shared<UserSource>(name, source, include_dir, includes, templated, std::move(ks),
                                                     extra_options, sub_group_size);
               }),
           py::arg("name"), py::arg("source"), py::arg("include_dir"), py::arg("includes"), py::arg("templated"),
           py::arg("kernels"), py::arg("extra_options"), py::arg("sub_group_size"))
      .def(
          "register", [](std::shared_ptr<UserSource> s) { return register_user_source(std::move(s)); },
          "Registers the source for the launch op; returns its id.")
      .def(
          "translation_unit",
          [](const UserSource& s, std::optional<std::string> dtype) { return s.translation_unit(dtype_arg(dtype)); },
          py::arg("dtype") = py::none())
      .def("options", &UserSource::options)
      .def(
          "is_built",
          [](UserSource& s, const std::string& device, std::optional<std::string> dtype) {
            py::gil_scoped_release nogil;
            return s.is_built(at::Device(device), dtype_arg(dtype));
          },
          py::arg("device"), py::arg("dtype") = py::none())
      .def(
          "build",
          [](UserSource& s, const std::string& device, std::optional<std::string> dtype) {
            py::gil_scoped_release nogil;
            return s.build(at::Device(device), dtype_arg(dtype));
          },
          py::arg("device"), py::arg("dtype") = py::none(),
          "Builds for the device and element type (once); returns the seconds spent (0: already built).")
      .def("builds", &UserSource::builds);
}

}  // namespace xkernels::sycl_backend
