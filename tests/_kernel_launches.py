"""Which SYCL kernels a call launched, from the backend's kernel profiler (csrc/sycl/launch.h)."""

from __future__ import annotations


def profiled(fn):
    """fn()'s result and the kernel profiler's rows for it: label -> (launches, seconds)."""
    from xkernels import _C

    _C.sycl.kernel_profile(reset=True)
    _C.sycl.set_kernel_profiling(True)
    try:
        out = fn()
    finally:
        _C.sycl.set_kernel_profiling(False)
    return out, _C.sycl.kernel_profile(reset=True)


def launches(fn):
    """fn()'s result and how many times it launched each SYCL kernel (by name, template arguments dropped)."""
    out, rows = profiled(fn)
    counts: dict[str, int] = {}
    for label, (n, _) in rows.items():
        counts[label.split("<")[0]] = counts.get(label.split("<")[0], 0) + n
    return out, counts
