// Per call-site memo of get_kernel() for the host wrappers. The provider's lookup takes a
// process-wide lock, hashes (context, device, kernel file) and finds the kernel by its
// registered-name string, and the call site first builds that string: together about a
// microsecond per launch, which shows on small tensors. A KernelMemo (a function-local
// static at the launch site) keeps the kernels it was given per (context, device, key), so
// the name is built and looked up once per device. `key` tells apart the kernels one call
// site may launch (e.g. template flags); the element type is told apart by the memo itself
// being a static inside the dtype-dispatched code.
#pragma once
#include <mutex>
#include <vector>

#include "sycl/runtime.h"

namespace xkernels::sycl_backend {

class KernelMemo {
 public:
  // get_kernel(q, group, name()) for the queue's context and device; `name` is called on a miss only.
  template <typename NameFn>
  sycl::kernel get(const sycl::queue& q, const KernelGroup& group, int key, NameFn&& name) {
    const sycl::context ctx = q.get_context();
    const sycl::device dev = q.get_device();
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const Entry& e : entries_)
        if (e.key == key && e.dev == dev && e.ctx == ctx) return e.kernel;
    }
    sycl::kernel k = get_kernel(q, group, name());  // may compile: not under our lock
    std::lock_guard<std::mutex> lock(mu_);
    entries_.push_back(Entry{ctx, dev, key, k});
    return k;
  }

 private:
  struct Entry {
    sycl::context ctx;
    sycl::device dev;
    int key;
    sycl::kernel kernel;
  };
  std::mutex mu_;
  std::vector<Entry> entries_;  // a few: one per device (and key) this call site has run on
};

}  // namespace xkernels::sycl_backend
