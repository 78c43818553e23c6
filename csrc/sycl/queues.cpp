// The queues SYCL ops launch on: the process-wide in-order queue of the SYCL CPU device (CPU
// tensors, zero copy), torch's current XPU stream's queue, and torch's current CUDA stream as a queue
// of the matching SYCL CUDA device (cuda_devices.cpp). Never a queue per call.
#include <ATen/ATen.h>

#include <map>
#include <mutex>
#include <string>

#include "sycl/launch.h"
#include "sycl/runtime_info.h"
#include "sycl/runtime_internal.h"

#ifdef XKERNELS_WITH_XPU
#include <c10/xpu/XPUStream.h>
#endif

namespace xkernels::sycl_backend {

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

// The kernel profiler's rows (launch.h): label -> (launches, seconds).
namespace {
std::mutex& profile_mutex() {
  static std::mutex m;
  return m;
}
std::map<std::string, std::pair<int64_t, double>>& profile_rows() {
  static std::map<std::string, std::pair<int64_t, double>> rows;
  return rows;
}
}  // namespace

void record_kernel_time(const std::string& label, std::chrono::steady_clock::duration d) {
  std::lock_guard<std::mutex> lock(profile_mutex());
  auto& row = profile_rows()[label];
  row.first += 1;
  row.second += std::chrono::duration<double>(d).count();
}

std::map<std::string, std::pair<int64_t, double>> kernel_profile(bool reset) {
  std::lock_guard<std::mutex> lock(profile_mutex());
  auto rows = profile_rows();
  if (reset) profile_rows().clear();
  return rows;
}

}  // namespace xkernels::sycl_backend
