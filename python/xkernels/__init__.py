"""xkernels: portable custom PyTorch ops — fused linear+bias+ReLU, conv2d, layer norm —
as single-source SYCL kernels, with CPU reference kernels, native CUDA kernels, and a
numerical parity harness.

    import xkernels
    y = xkernels.fused_linear_relu(x, w, b)          # or torch.ops.xkernels.fused_linear_relu
    with xkernels.use_backend("reference"): ...
    xkernels.backends()                              # what is built and available, and why not
"""

from __future__ import annotations

from . import _env

_env.prepare()  # before the native library (and with it libsycl) loads

import torch  # noqa: F401  (torch must be loaded before the extension)

try:
    from . import _C  # registers torch.ops.xkernels.*
except ImportError as e:  # pragma: no cover - depends on the installation
    raise ImportError(
        f"xkernels: the native library failed to load ({e}). If it mentions libsycl, the SYCL runtime "
        "it was built against is missing: pip install 'intel-sycl-rt>=2025.3.3,!=2026.2.*' "
        "'intel-cmplr-lib-ur>=2025.3.3,!=2026.2.*' intel-opencl-rt, then rebuild xkernels with "
        "pip install --no-build-isolation ."
    ) from e

# The version lives once, in pyproject.toml: setup.py passes it to CMake, which compiles it into _C.
__version__ = _C.__version__

from . import nn, parity, reference, sycl
from ._optimize import optimize
from .backends import (
    BackendUnavailableError,
    DeviceUnavailableError,
    backends,
    best_device,
    current_backend,
    device_choice,
    dispatch_record,
    empty_cache,
    info,
    set_default_backend,
    use_backend,
    warmup,
)
from .ops import (
    conv2d,
    conv2d_packed,
    conv2d_relu,
    fused_linear_relu,
    fused_linear_relu_packed,
    layer_norm,
    pack_conv2d_weight,
    pack_linear_weight,
)

__all__ = [
    "fused_linear_relu",
    "pack_linear_weight",
    "fused_linear_relu_packed",
    "conv2d",
    "conv2d_relu",
    "pack_conv2d_weight",
    "conv2d_packed",
    "layer_norm",
    "backends",
    "use_backend",
    "set_default_backend",
    "current_backend",
    "info",
    "warmup",
    "best_device",
    "device_choice",
    "dispatch_record",
    "empty_cache",
    "BackendUnavailableError",
    "DeviceUnavailableError",
    "nn",
    "optimize",
    "parity",
    "reference",
    "sycl",
    "__version__",
]
