// The SYCL runtime's version: from the intel-sycl-rt wheel's metadata next to the loaded libsycl.so,
// else from the headers this module was built with (runtime_internal.h).
#include <link.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>

#include "sycl/runtime_info.h"
#include "sycl/runtime_internal.h"

namespace xkernels::sycl_backend {

namespace {

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

}  // namespace

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

std::string runtime_version() { return runtime_version_info().text; }
std::string runtime_version_source() { return runtime_version_info().source; }

}  // namespace xkernels::sycl_backend
