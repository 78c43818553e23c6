// Output and scratch tensors of the SYCL backend on CPU tensors come from a caching host allocator.
//
// Why: a fresh output per call is how users call ops, and for large tensors glibc serves each allocation
// with a new mmap and returns it to the kernel on free, so every call pays a page fault per 4 KiB page on
// first touch. Measured here (2-core Xeon, fp32): filling a fresh 32 MiB tensor takes 7.8 ms, copying into
// an existing one 0.6 ms; torch's own layer_norm at 8192x1024 spends most of its 9.3 ms on those faults.
//
// Policy: requests of at least 1 MiB are rounded up to 2 MiB multiples, allocated 2 MiB-aligned and marked
// MADV_HUGEPAGE (first touch then faults 2 MiB at a time where transparent huge pages are enabled), and on
// release kept in a pool for the next request of that size (or up to 25 % smaller; of equal blocks, the one
// released last), up to a bound: XKERNELS_HOST_CACHE_MB (default 512; 0 turns caching off; read when the
// allocator is first used). When a released block does not fit, the least recently released blocks are freed to
// make room. Smaller requests go to torch's default CPU allocator. Tensors made this way are ordinary CPU tensors
// (resizable; their storage's allocator is this one).
//
// Safe to reuse at release: for CPU tensors every SYCL op waits for its kernels before returning, and a block
// released while this thread still has kernels queued (an error part way through an op) first waits for them
// (drain_host_work), so no kernel still reads or writes a block when its tensor dies. That holds for every size:
// requests below 1 MiB, served by torch's allocator, are released through the same wait.
#pragma once
#include <ATen/core/Tensor.h>
#include <c10/core/Allocator.h>

#include <cstddef>

namespace xkernels::sycl_backend {

// at::empty(sizes, opts) (memory format from opts), CPU tensors through the caching host allocator.
at::Tensor empty(at::IntArrayRef sizes, const at::TensorOptions& opts);

c10::Allocator* caching_host_allocator();

struct HostCacheStats {
  size_t limit_bytes = 0;   // the bound on cached bytes (XKERNELS_HOST_CACHE_MB)
  size_t cached_bytes = 0;  // held in the pool now, not in use
  size_t cached_blocks = 0;
  size_t in_use_bytes = 0;  // handed out, not yet released
  size_t hits = 0;          // requests served from the pool
  size_t misses = 0;        // requests that allocated new memory
};
HostCacheStats host_cache_stats();
// Waits for the kernels this thread queued on the CPU device and has not waited for (launch.h PendingHostWork);
// errors are dropped (the caller is releasing memory, maybe while unwinding from the first error). Every block
// this allocator hands out calls it before it is released. Defined in launch_checking.cpp.
void drain_host_work() noexcept;
// Inside a deferred-wait region (launch.h PendingHostWork) with kernels still queued: keeps the release
// `fn(ctx)` for the region's end and returns true; else false (the caller drains and releases now).
bool defer_host_release(void (*fn)(void*), void* ctx) noexcept;
// Launch checking (launch.h): counts a release of host memory made while this thread still has pending host work.
// Called by every host block's release, after its drain_host_work; cheap while checking is off.
void note_host_release() noexcept;

// Frees every cached block (blocks in use are unaffected and are freed or cached when released).
void host_cache_clear();

}  // namespace xkernels::sycl_backend
