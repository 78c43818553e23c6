// SYCL on CUDA tensors: a sycl::queue that submits to PyTorch's current CUDA stream, so that SYCL
// kernels run in stream order with the surrounding PyTorch work (no host synchronisation, no extra
// events). Made through the CUDA backend interop of DPC++ (sycl::make_queue<ext_oneapi_cuda> from a
// native CUstream), which needs the oneAPI CUDA plugin at run time. No torch here: the caller passes
// the raw stream, e.g. (in a file built with torch's CUDA headers):
//
//   CUstream s = reinterpret_cast<CUstream>(at::cuda::getCurrentCUDAStream(device_index).stream());
//   sycl::queue& q = cuda_interop::queue_for_stream(sycl_context_of(device_index), s);
//   ... launch(q, kernel, range, args...);   // no q.wait(): ordering comes from the stream
//
// Queues are cached per (context, stream) and never made per call: PyTorch hands out streams from a
// bounded pool, so the cache stays small. Which SYCL device/context corresponds to a torch CUDA
// device index is the caller's (runtime.cpp's) business; both sides use the device's primary CUDA
// context, so torch's device pointers are valid in SYCL kernels.
#pragma once
// The experimental CUDA interop API must be chosen before the first SYCL header of the translation unit
// (backend.hpp defines the stable variant otherwise, and the two collide): define this macro first.
#if !defined(SYCL_EXT_ONEAPI_BACKEND_CUDA_EXPERIMENTAL) && defined(__LIBSYCL_MAJOR_VERSION)
#error "cuda_stream_queue.h: define SYCL_EXT_ONEAPI_BACKEND_CUDA_EXPERIMENTAL before including any SYCL header"
#endif
#ifndef SYCL_EXT_ONEAPI_BACKEND_CUDA_EXPERIMENTAL
#define SYCL_EXT_ONEAPI_BACKEND_CUDA_EXPERIMENTAL 1
#endif
#include <sycl/ext/oneapi/experimental/backend/cuda.hpp>
#include <sycl/sycl.hpp>

#include <map>
#include <mutex>
#include <utility>
#include <vector>

namespace xkernels::sycl_backend::cuda_interop {

// CUstream, as the SYCL CUDA backend spells its native queue type.
using NativeStream = sycl::backend_input_t<sycl::backend::ext_oneapi_cuda, sycl::queue>;

// The queue for `stream` in `ctx` (a context holding the CUDA device the stream belongs to).
// Thread-safe; the returned reference stays valid for the life of the process.
inline sycl::queue& queue_for_stream(const sycl::context& ctx, NativeStream stream) {
  static std::mutex mu;
  // Leaked on purpose: destroying SYCL objects after the runtime shut down at exit is unsafe.
  static auto* cache = new std::map<const void*, std::vector<std::pair<sycl::context, sycl::queue>>>();
  std::lock_guard<std::mutex> lock(mu);
  auto& entries = (*cache)[static_cast<const void*>(stream)];
  for (auto& [c, q] : entries)
    if (c == ctx) return q;
  entries.emplace_back(ctx, sycl::make_queue<sycl::backend::ext_oneapi_cuda>(stream, ctx));
  return entries.back().second;
}

}  // namespace xkernels::sycl_backend::cuda_interop
