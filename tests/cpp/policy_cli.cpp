// Test driver for the two pure policies (compiled and run by tests/test_provider_choice.py):
//   policy_cli provider --targets SPEC --backend NAME [--gpu] [--cpu] [--arch A] [--cc MAJOR.MINOR]
//   policy_cli ptx-target CC [CC...]                 (CC like 8.0; 0 = unknown)
//   policy_cli cuda-key REQUESTED NATIVE_BUILT SYCL_BUILT SYCL_SEES  (0/1 flags; why-not texts fixed)
//   policy_cli apply-env NAME VALUE [NAME VALUE...]  (apply_runtime_env, then the resulting values)
//   policy_cli cuda-match INDEX TORCH_UUID DEV...    (DEV: "u:<uuid>" usable, "x:<uuid>" unusable; uuid may
//                                                     be empty; TORCH_UUID "-" for unknown)
// Prints key=value lines; exit code 2 with "error=..." when the input is rejected.
#include <cstdlib>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "provider_choice.h"
#include "xkernels/cuda_key_policy.h"

namespace pc = xkernels::sycl_backend::provider_choice;

namespace {

bool parse_cc(const std::string& s, int* major, int* minor) {
  const auto dot = s.find('.');
  if (dot == std::string::npos) return false;
  *major = std::atoi(s.substr(0, dot).c_str());
  *minor = std::atoi(s.substr(dot + 1).c_str());
  return true;
}

int provider(int argc, char** argv) {
  std::string spec, backend, arch, cc;
  pc::DeviceDesc d;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument("missing value after " + a);
      return argv[++i];
    };
    if (a == "--targets") spec = next();
    else if (a == "--backend") backend = next();
    else if (a == "--arch") d.arch = next();
    else if (a == "--cc") cc = next();
    else if (a == "--gpu") d.is_gpu = true;
    else if (a == "--cpu") d.is_cpu = true;
    else throw std::invalid_argument("unknown option " + a);
  }
  d.backend = pc::parse_device_backend(backend);
  if (!cc.empty() && !parse_cc(cc, &d.cc_major, &d.cc_minor)) throw std::invalid_argument("bad --cc " + cc);
  const auto images = pc::parse_aot_targets(spec);
  const pc::Choice c = pc::choose(images, d);
  std::cout << "backend=" << pc::device_backend_name(d.backend) << "\n";
  std::cout << "source=" << pc::source_name(c.source) << "\n";
  std::cout << "image=" << c.image << "\n";
  for (const auto& [k, v] : c.runtime_env) std::cout << "env=" << k << "=" << v << "\n";
  std::cout << "reason=" << c.reason << "\n";
  std::cout << "describe=" << pc::describe(c) << "\n";
  return 0;
}

int ptx_target(int argc, char** argv) {
  std::vector<pc::DeviceDesc> devs;
  for (int i = 2; i < argc; ++i) {
    pc::DeviceDesc d;
    d.backend = pc::DeviceBackend::Cuda;
    if (!parse_cc(argv[i], &d.cc_major, &d.cc_minor)) throw std::invalid_argument(std::string("bad cc ") + argv[i]);
    devs.push_back(d);
  }
  std::cout << "ptx_target=" << pc::runtime_ptx_target(devs) << "\n";
  return 0;
}

// apply-env: applies the provider choice's run-time environment, then prints what the process now has.
int apply_env(int argc, char** argv) {
  int i = 2;
  std::vector<std::pair<std::string, std::string>> env;
  for (; i + 1 < argc; i += 2) env.emplace_back(argv[i], argv[i + 1]);
  for (const auto& line : pc::apply_runtime_env(env)) std::cout << "applied=" << line << "\n";
  for (const auto& [k, v] : env) std::cout << "now=" << k << "=" << std::getenv(k.c_str()) << "\n";
  return 0;
}

int cuda_key(int argc, char** argv) {
  if (argc != 6) throw std::invalid_argument("cuda-key needs REQUESTED NATIVE_BUILT SYCL_BUILT SYCL_SEES");
  xkernels::policy::CudaKeyFacts f;
  f.native_built = std::string(argv[3]) == "1";
  f.native_why_not = f.native_built ? "" : "nvcc was not found at build time";
  f.sycl_built = std::string(argv[4]) == "1";
  f.sycl_sees_device = std::string(argv[5]) == "1";
  f.sycl_why_not = f.sycl_sees_device ? "" : "no ext_oneapi_cuda platform";
  const auto d = xkernels::policy::decide_cuda_key(argv[2], f, "layer_norm", "cuda:1");
  std::cout << "choice=" << xkernels::policy::cuda_key_choice_name(d.choice) << "\n";
  std::cout << "message=" << d.message << "\n";
  return 0;
}

int cuda_match(int argc, char** argv) {
  if (argc < 4) throw std::invalid_argument("cuda-match needs INDEX TORCH_UUID DEV...");
  std::vector<pc::CudaSyclDevice> devs;
  for (int i = 4; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.size() < 2 || a[1] != ':' || (a[0] != 'u' && a[0] != 'x')) throw std::invalid_argument("bad device " + a);
    pc::CudaSyclDevice d;
    d.usable = a[0] == 'u';
    d.unusable_reason = d.usable ? "" : "querying the device failed";
    d.uuid = a.substr(2);
    devs.push_back(d);
  }
  const std::string uuid = std::string(argv[3]) == "-" ? "" : argv[3];
  const auto m = pc::match_cuda_device(std::atoi(argv[2]), uuid, devs);
  std::cout << "index=" << m.index << "\n";
  std::cout << "by_uuid=" << (m.by_uuid ? 1 : 0) << "\n";
  std::cout << "why=" << m.error << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string mode = argc > 1 ? argv[1] : "";
    if (mode == "provider") return provider(argc, argv);
    if (mode == "ptx-target") return ptx_target(argc, argv);
    if (mode == "cuda-key") return cuda_key(argc, argv);
    if (mode == "apply-env") return apply_env(argc, argv);
    if (mode == "cuda-match") return cuda_match(argc, argv);
    throw std::invalid_argument("mode must be provider, ptx-target, cuda-key, apply-env or cuda-match");
  } catch (const std::invalid_argument& e) {
    std::cout << "error=" << e.what() << "\n";
    return 2;
  }
}
