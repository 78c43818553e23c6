// Runs provider_choice on the devices the installed SYCL runtime really has (compiled and run by
// tests/test_provider_choice.py against the pip runtime):
//   provider_device_probe SPEC   -> one "device=" line per device: backend|is_cpu|is_gpu|arch|source|image
// plus "name=" lines mapping a few architecture enumerators through architecture_name().
#include <iostream>
#include <string>

#include "provider_device.h"

namespace pc = xkernels::sycl_backend::provider_choice;
namespace syclexp = sycl::ext::oneapi::experimental;

int main(int argc, char** argv) {
  const std::string spec = argc > 1 ? argv[1] : "";
  const auto images = pc::parse_aot_targets(spec);
  for (const auto& dev : sycl::device::get_devices()) {
    const pc::DeviceDesc d = pc::describe_device(dev);
    const pc::Choice c = pc::choose(images, d);
    std::cout << "device=" << pc::device_backend_name(d.backend) << "|" << d.is_cpu << "|" << d.is_gpu << "|"
              << d.arch << "|" << pc::source_name(c.source) << "|" << c.image << "\n";
  }
  std::cout << "name=" << pc::architecture_name(syclexp::architecture::intel_gpu_dg2_g10) << "\n";
  std::cout << "name=" << pc::architecture_name(syclexp::architecture::nvidia_gpu_sm_90) << "\n";
  std::cout << "name=" << pc::architecture_name(syclexp::architecture::x86_64) << "\n";
  std::cout << "name=" << pc::architecture_name(syclexp::architecture::unknown) << "\n";
  return 0;
}
