// The C interface of an ahead-of-time launcher library (launchers.cpp compiled by a SYCL compiler,
// e.g. AdaptiveCpp's acpp into libxkernels_acpp.so). Plain C types only: the library carries its own
// SYCL implementation, whose types must never meet DPC++'s in the extension. The extension dlopens the
// library (RTLD_LOCAL) and finds its one entry point, xk_aot_library_v1.
#pragma once
#include <stddef.h>

extern "C" {

#define XK_AOT_ABI_VERSION 1

// One (kernel, element type) instantiation, in the order of xk::for_each_instance (kernels/tables.hpp).
struct xk_aot_kernel {
  const char* kernel;  // C++ name of the table row, e.g. "xk::layer_norm_fwd"
  const char* type;    // element type label, e.g. "float"
  int dims;
  int sub_group;       // required sub-group size (0: any)
  size_t params_size;  // sizeof(params<T>)
  // Launches the kernel. queue == null: on the library's own in-order queue, run to completion (the acpp
  // backend). Otherwise `queue` is a sycl::queue* of the library's own SYCL implementation (an icpx-built
  // library used by the DPC++ extension: same libsycl major version, checked at build time): the launch is
  // submitted there and not waited for. Returns 0, or non-zero with a message in err.
  int (*launch)(const size_t* global, const size_t* local, const void* params, void* queue, char* err, size_t errlen);
};

struct xk_aot_device {
  const char* name;
  int is_cpu, fp64, fp16;
  size_t max_work_group_size, local_mem_bytes;
  size_t sub_group_sizes[8];
  size_t n_sub_group_sizes;
};

struct xk_aot_library {
  int abi_version;             // XK_AOT_ABI_VERSION
  const char* implementation;  // e.g. "AdaptiveCpp 24.06.0 (omp.library-only)"
  const char* flags;           // compile flags of the kernels (the floating-point policy)
  size_t count;
  const xk_aot_kernel* kernels;
  xk_aot_device device;
};

// Returns the library, or null with a message in err (e.g. no device).
typedef const xk_aot_library* (*xk_aot_library_fn)(char* err, size_t errlen);
const xk_aot_library* xk_aot_library_v1(char* err, size_t errlen);
}
