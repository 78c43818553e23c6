// Output and scratch tensors of the SYCL backend on CPU tensors come from a caching host allocator.
//
// Why: a fresh output per call is how users call ops, and for large tensors glibc serves each allocation
// with a new mmap and returns it to the kernel on free, so every call pays a page fault per 4 KiB page on
// first touch. Measured here (2-core Xeon, fp32): filling a fresh 32 MiB tensor takes 7.8 ms, copying into
// an existing one 0.6 ms; torch's own layer_norm at 8192x1024 spends most of its 9.3 ms on those faults.
//
// Policy: requests of at least 1 MiB are rounded up to 2 MiB multiples, allocated 2 MiB-aligned and marked
// MADV_HUGEPAGE (first touch then faults 2 MiB at a time where transparent huge pages are enabled), and on
// release kept in a pool for the next request of that size (or up to 25 % smaller), up to a bound:
// XKERNELS_HOST_CACHE_MB (default 512; 0 turns caching off; read when the allocator is first used). When a
// released block does not fit, the least recently released blocks are freed to make room. Smaller requests
// go to torch's default CPU allocator. Tensors made this
// way are ordinary CPU tensors (resizable; their storage's allocator is this one).
//
// Safe to reuse at release: for CPU tensors every SYCL op waits for its kernels before returning, so no
// kernel still reads or writes a block when its tensor dies.
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
// Frees every cached block (blocks in use are unaffected and are freed or cached when released).
void host_cache_clear();

}  // namespace xkernels::sycl_backend
