// The wait for this thread's pending host work (drain_host_work, host_alloc.h) and launch checking (launch.h): counts
// torch's CPU memory released while this thread's queued kernels may still use it, and makes a chosen launch fail, so
// that tests can walk every route's error path (tests/test_launch_faults.py).
#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "sycl/host_alloc.h"
#include "sycl/launch.h"
#include "xkernels/backend.h"

namespace py = pybind11;

namespace xkernels::sycl_backend {
namespace {

struct Report {
  std::mutex mu;
  int64_t unsafe = 0, injected = 0;
  std::vector<std::string> first;  // the kernel queued last at each of the first few unsafe releases
};
Report& report() {
  static Report* r = new Report();  // leaked: releases may come after static destructors ran
  return *r;
}
std::atomic<int64_t>& fail_in() {  // the launch that many launches from now fails (0: none)
  static std::atomic<int64_t> n{0};
  return n;
}
std::string& last_label() {
  thread_local std::string label;
  return label;
}

void note_unsafe() {
  Report& r = report();
  std::lock_guard<std::mutex> lock(r.mu);
  ++r.unsafe;
  if (r.first.size() < 8) r.first.push_back(last_label());
}

// torch's CPU allocator with each release reported to note_host_release (the SYCL backend's own blocks, host_alloc.h,
// report theirs after waiting for this thread's pending host work), and, inside a deferred-wait region with kernels
// queued, kept until the region's wait (defer_host_release). Installed the first time checking is turned on or a
// region opens, and kept (a later allocator may have stacked on it); otherwise it only forwards. Its pointers stay
// "simple" (context == data, one raw deleter), as torch's raw_allocate users (oneDNN's scratch) require: it wraps
// an allocator whose pointers are simple (torch's default), and hands out any other pointer unwrapped.
class CheckingCpuAllocator final : public c10::Allocator {
 public:
  explicit CheckingCpuAllocator(c10::Allocator* inner) : inner_(inner) { inner_free() = inner->raw_deleter(); }
  c10::DataPtr allocate(size_t n) override {
    c10::DataPtr d = inner_->allocate(n);
    void* data = d.get();
    if (n == 0 || data == nullptr || data != d.get_context() || d.get_deleter() != inner_free()) return d;
    (void)d.release_context();  // ours to free now, through inner_free
    return {data, data, &release, c10::Device(c10::kCPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }

 private:
  static c10::DeleterFnPtr& inner_free() {
    static c10::DeleterFnPtr f = nullptr;
    return f;
  }
  static void release(void* data) {
    if (defer_host_release(&release, data)) return;
    note_host_release();
    inner_free()(data);
  }
  c10::Allocator* inner_;
};

void install_checking_allocator() {
  static std::once_flag once;
  std::call_once(once, [] {
    c10::Allocator* inner = c10::GetCPUAllocator();
    TORCH_CHECK(inner->raw_deleter() != nullptr,
                "xkernels: launch checking needs torch's CPU allocator to have a raw deleter (another library replaced "
                "it)");
    static auto* a = new CheckingCpuAllocator(inner);
    c10::SetCPUAllocator(a, /*priority=*/UINT8_MAX);
  });
}

// Runs the releases kept by defer_host_release (their own drain finds nothing queued).
void run_kept_releases(PendingHostWork& w) noexcept {
  while (!w.releases.empty()) {
    std::vector<std::pair<void (*)(void*), void*>> kept;
    kept.swap(w.releases);
    for (auto& [fn, ctx] : kept) fn(ctx);
  }
}

// The end of a deferred-wait region (defer_waits(False), settle_host_work): waits for this thread's queued kernels
// and rethrows their asynchronous errors, after running the releases kept meanwhile (whether or not the wait throws).
void sync_host_work() {
  PendingHostWork& w = pending_host_work();
  const bool queued = w.queued;
  w.queued = false;
  try {
    if (queued) w.last.wait_and_throw();
  } catch (...) {
    run_kept_releases(w);
    throw;
  }
  run_kept_releases(w);
}

}  // namespace

void drain_host_work() noexcept {
  PendingHostWork& w = pending_host_work();
  if (w.queued) {
    w.queued = false;
    try {
      w.last.wait();
    } catch (...) {  // the kernels have ended either way; the caller may be unwinding from the first error
    }
  }
  run_kept_releases(w);
}

bool defer_host_release(void (*fn)(void*), void* ctx) noexcept {
  PendingHostWork& w = pending_host_work();
  if (w.defer == 0 || !w.queued) return false;
  try {
    w.releases.emplace_back(fn, ctx);
  } catch (...) {  // no room to keep it: the caller waits and releases now
    return false;
  }
  return true;
}

void note_host_release() noexcept {
  if (!launch_checking_on() || !pending_host_work().queued) return;
  try {
    note_unsafe();
  } catch (...) {  // a count lost to an allocation failure: a release must not throw
  }
}

void check_launch(const char* label) {
  int64_t n = fail_in().load();
  while (n > 0 && !fail_in().compare_exchange_weak(n, n - 1)) {}
  if (n == 1) {
    {
      std::lock_guard<std::mutex> lock(report().mu);
      ++report().injected;
    }
    throw std::runtime_error(std::string("xkernels: launch of ") + label +
                             " failed on purpose (launch checking: fail_launch_after)");
  }
  last_label() = label;
}

void bind_launch_checking(py::module_& m) {
  m.def(
      "host_work_pending", [] { return pending_host_work().queued; },
      "Whether this thread has SYCL CPU kernels queued and not yet waited for (inside a deferred-wait region).");
  m.def(
      "settle_host_work",
      [] {
        py::gil_scoped_release nogil;
        settle_host_work();
      },
      "Inside a deferred-wait region: waits for this thread's queued SYCL CPU kernels (and raises their errors), so "
      "that the code that follows may read and write their tensors; outside one it returns at once.");
  m.def(
      "defer_waits",
      [](bool on) {
        PendingHostWork& w = pending_host_work();
        if (on) {
          try {  // torch's releases must be kept too: no region without the forwarding allocator
            install_checking_allocator();
          } catch (const c10::Error&) {
            return false;
          }
          ++w.defer;
          return true;
        }
        TORCH_CHECK(w.defer > 0, "xkernels: defer_waits(False) without a matching defer_waits(True)");
        if (--w.defer == 0) {
          py::gil_scoped_release nogil;
          sync_host_work();
        }
        return true;
      },
      py::arg("on"),
      "Opens (True) or closes (False) a deferred-wait region on this thread (regions nest). Inside, the SYCL "
      "backend's ops on CPU tensors return with their kernels still queued on the in-order CPU queue, so only "
      "xkernels SYCL ops may read or write the tensors they return before the region closes; closing the "
      "outermost region waits for the kernels and raises their errors. Opening returns False, and opens nothing, "
      "where torch's CPU allocator cannot be wrapped (another library replaced it without a raw deleter).");
  m.def(
      "set_launch_checking",
      [](bool on) {
        if (on) install_checking_allocator();
        return launch_checking_flag().exchange(on);
      },
      py::arg("on"),
      "Turns launch checking on or off (a development tool, launch.h) and returns the previous setting: while on, "
      "host memory released while this thread's queued SYCL kernels have not been waited for is counted "
      "(launch_check_report), and fail_launch_after can make a launch fail. Turning it on replaces torch's CPU "
      "allocator by a forwarding one for the rest of the process.");
  m.def(
      "fail_launch_after", [](int64_t n) { fail_in().store(n < 0 ? 0 : n); }, py::arg("n"),
      "While launch checking is on, the n-th SYCL launch from now (1: the next) throws before queuing anything; "
      "0 cancels.");
  m.def(
      "launch_check_report",
      [](bool reset) {
        Report& r = report();
        std::lock_guard<std::mutex> lock(r.mu);
        py::dict d;
        d["unsafe_releases"] = r.unsafe;
        d["injected_failures"] = r.injected;
        d["first_unsafe"] = r.first;  // the kernel queued last
        d["pending_failure"] = fail_in().load();
        if (reset) {
          r.unsafe = r.injected = 0;
          r.first.clear();
        }
        return d;
      },
      py::arg("reset") = false,
      "Launch checking's counts: unsafe_releases (host memory released while kernels were queued and not waited "
      "for), injected_failures, first_unsafe (the kernel queued last, for the first few), "
      "pending_failure (launches left before the injected failure; 0: none).");
}

}  // namespace xkernels::sycl_backend

namespace xkernels {
void settle_host_work() {
  if (sycl_backend::pending_host_work().defer > 0) sycl_backend::sync_host_work();
}
}  // namespace xkernels
