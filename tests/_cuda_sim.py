"""The native CUDA kernels (csrc/cuda/kernels/*.cuh) as Python ops, executed on the CPU by the simulator of
csrc/cuda/compile_check/cpu_sim.h: no GPU and no CUDA build of torch needed, only the host C++ compiler and
CUDA's headers (cuda_fp16.h, cuda_bf16.h, cuda_runtime.h).

``library()`` builds csrc/cuda/compile_check/sim_ops.cpp into a shared library under build/cuda-sim/ (cached:
the file name carries a hash of the sources, the compiler and the flags, so an unchanged tree reuses it) and
loads it with ctypes. ``SimulatedCuda`` has fused_linear_relu, conv2d, conv2d_relu and layer_norm with
xkernels' signatures and autograd (forward and backward through the CUDA kernels), laying the operands out as
the host wrappers csrc/cuda/*.cu do. CPU tensors only.
"""

from __future__ import annotations

import ctypes
import hashlib
import math
import os
import shutil
import subprocess
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
CUDA_DIR = ROOT / "csrc" / "cuda"
SOURCE = CUDA_DIR / "compile_check" / "sim_ops.cpp"
BUILD_DIR = Path(os.environ.get("XK_CUDA_SIM_DIR", ROOT / "build" / "cuda-sim"))
FLAGS = [
    "-std=c++20",
    "-O1",
    "-fPIC",
    "-shared",
    "-pthread",
    "-Wall",
    "-Wextra",
    "-Wno-unknown-pragmas",
    "-Werror",
    "-ffp-contract=off",  # as the kernels are compiled for the GPU (cmake/fp_flags.txt: --fmad=false)
]
DTYPE_CODE = {torch.float64: 0, torch.float32: 1, torch.float16: 2, torch.bfloat16: 3}


def cuda_include_dir() -> str | None:
    """CUDA's include directory (cuda_runtime.h), from CUDA_HOME, nvcc's location or /usr/local/cuda."""
    cands = []
    if os.environ.get("CUDA_HOME"):
        cands.append(Path(os.environ["CUDA_HOME"]) / "include")
    for nvcc in (os.environ.get("NVCC"), shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc"):
        if nvcc and os.path.isfile(nvcc):
            cands.append(Path(os.path.realpath(nvcc)).parent.parent / "include")
    cands.append(Path("/usr/local/cuda/include"))
    return next((str(c) for c in cands if (c / "cuda_runtime.h").is_file()), None)


def _compiler() -> str:
    return os.environ.get("CXX", "c++")


def _stamp(cxx: str, inc: str) -> str:
    h = hashlib.sha256()
    files = sorted((CUDA_DIR / "kernels").glob("*.cuh")) + sorted((CUDA_DIR / "compile_check").glob("*"))
    for f in files:
        h.update(f.name.encode())
        h.update(f.read_bytes())
    version = subprocess.run([cxx, "--version"], capture_output=True, text=True).stdout
    h.update("\0".join([version, inc, *FLAGS]).encode())
    return h.hexdigest()[:16]


def build() -> Path:
    """Compiles the simulator library (or finds it already built); raises RuntimeError with the compiler's
    output when it does not compile."""
    inc = cuda_include_dir()
    if inc is None:
        raise FileNotFoundError("CUDA headers (cuda_runtime.h) not found (CUDA_HOME, nvcc, /usr/local/cuda)")
    cxx = _compiler()
    lib = BUILD_DIR / f"libxk_cuda_sim-{_stamp(cxx, inc)}.so"
    if lib.is_file():
        return lib
    BUILD_DIR.mkdir(parents=True, exist_ok=True)
    tmp = lib.with_suffix(f".{os.getpid()}.tmp")
    cmd = [cxx, *FLAGS, "-I", str(CUDA_DIR), "-I", inc, str(SOURCE), "-o", str(tmp)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise RuntimeError(f"building the CUDA simulator failed:\n{' '.join(cmd)}\n{r.stderr[-6000:]}")
    os.replace(tmp, lib)  # atomic: a concurrent build of the same stamp writes the same file
    for old in BUILD_DIR.glob("libxk_cuda_sim-*.so"):  # keep the cache to the current build
        if old != lib:
            old.unlink(missing_ok=True)
    return lib


_LIB: ctypes.CDLL | None = None


def library() -> ctypes.CDLL:
    global _LIB
    if _LIB is None:
        lib = ctypes.CDLL(str(build()))
        P, I64, I, D = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_double
        I64P = ctypes.POINTER(ctypes.c_int64)
        lib.xk_sim_configure.argtypes = [I64, I]
        lib.xk_sim_fused_linear_relu.argtypes = [I, P, P, P, P, I64, I64, I64]
        lib.xk_sim_fused_linear_relu_backward.argtypes = [I, P, P, P, P, P, P, P, I64, I64, I64]
        lib.xk_sim_conv2d.argtypes = [I, I, I, P, I64P, P, I64P, P, P, P, I64P, I64P, I64]
        lib.xk_sim_conv2d_backward.argtypes = [I, I, P, I64P, P, I64P, P, I64P, P, I64P, P, I64P, P, I64P, I64]
        lib.xk_sim_layer_norm.argtypes = [I, P, P, P, P, P, P, I64, I64, D]
        lib.xk_sim_layer_norm_backward.argtypes = [I, P, P, P, P, P, P, P, P, I64, I64]
        _LIB = lib
    return _LIB


def configure(sm_count: int = 132, tensor_cores: bool = True) -> None:
    """The simulated device: SM count (split-K and column-sum chunking depend on it) and whether the
    half / bfloat16 GEMMs run the WMMA kernel (sm_80+). Default: an H200 (132 SMs, sm_90)."""
    library().xk_sim_configure(sm_count, int(tensor_cores))


# ---------------------------------------------------------------------------- helpers


def _ptr(t: torch.Tensor | None):
    return None if t is None else ctypes.c_void_p(t.data_ptr())


def _i64s(values) -> ctypes.Array:
    values = list(values)
    return (ctypes.c_int64 * len(values))(*values)


def _code(t: torch.Tensor) -> int:
    if t.device.type != "cpu":
        raise ValueError(f"simulated CUDA kernels: tensors must be on the CPU, got {t.device}")
    return DTYPE_CODE[t.dtype]


def _check(rc: int, op: str) -> None:
    if rc != 0:
        raise RuntimeError(f"simulated CUDA {op}: unsupported dtype")


def _pair(v) -> list[int]:
    return [int(v), int(v)] if isinstance(v, int) else [int(e) for e in v]


def _suggests_channels_last(t: torch.Tensor) -> bool:  # at::Tensor::suggest_memory_format for 4-D tensors
    return t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last) and not t.is_contiguous()


# ---------------------------------------------------------------------------- fused_linear_relu


class _LinearRelu(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, b):
        K, N = x.shape[-1], w.shape[0]
        x2 = x.detach().reshape(-1, K).contiguous()
        w2, b2 = w.detach().contiguous(), None if b is None else b.detach().contiguous()
        y = torch.empty(x2.shape[0], N, dtype=x.dtype)
        _check(
            library().xk_sim_fused_linear_relu(_code(x), _ptr(x2), _ptr(w2), _ptr(b2), _ptr(y), x2.shape[0], N, K),
            "fused_linear_relu",
        )
        ctx.save_for_backward(x2, w2, y)
        ctx.x_shape, ctx.has_bias = x.shape, b is not None
        return y.view(*x.shape[:-1], N)

    @staticmethod
    def backward(ctx, dy):
        x2, w2, y = ctx.saved_tensors
        M, K, N = x2.shape[0], x2.shape[1], w2.shape[0]
        want = ctx.needs_input_grad
        gi = torch.empty(M, K, dtype=x2.dtype) if want[0] else None
        gw = torch.empty(N, K, dtype=x2.dtype) if want[1] else None
        gb = torch.empty(N, dtype=x2.dtype) if want[2] and ctx.has_bias else None
        dy2 = dy.reshape(M, N).contiguous()
        _check(
            library().xk_sim_fused_linear_relu_backward(
                _code(x2), _ptr(dy2), _ptr(y), _ptr(x2), _ptr(w2), _ptr(gi), _ptr(gw), _ptr(gb), M, N, K
            ),
            "fused_linear_relu_backward",
        )
        return (gi.view(ctx.x_shape) if gi is not None else None), gw, gb


# ---------------------------------------------------------------------------- conv2d / conv2d_relu


def _conv_geometry(x4, w, stride, padding, dilation, groups):
    N, C, H, W = x4.shape
    O, _, KH, KW = w.shape
    OH = (H + 2 * padding[0] - dilation[0] * (KH - 1) - 1) // stride[0] + 1
    OW = (W + 2 * padding[1] - dilation[1] * (KW - 1) - 1) // stride[1] + 1
    return [N, C, H, W, O, KH, KW, OH, OW, C // groups, O // groups, *stride, *padding, *dilation]


class _Conv(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, b, r, stride, padding, dilation, groups, relu):
        batched = x.dim() == 4
        x4 = x.detach() if batched else x.detach().unsqueeze(0)
        cl = batched and (_suggests_channels_last(x4) or _suggests_channels_last(w))  # shapes.cpp's rule
        fmt = torch.channels_last if cl else torch.contiguous_format
        x4 = x4.contiguous(memory_format=fmt)
        w4 = w.detach().contiguous(memory_format=fmt)
        b1 = None if b is None else b.detach().contiguous()
        geo = _conv_geometry(x4, w4, stride, padding, dilation, groups)
        y = torch.empty(geo[0], geo[4], geo[7], geo[8], dtype=x.dtype).contiguous(memory_format=fmt)
        r4 = None
        if r is not None:
            r4 = (r.detach() if batched else r.detach().unsqueeze(0)).contiguous(memory_format=fmt)
        _check(
            library().xk_sim_conv2d(
                _code(x4),
                int(cl),
                int(relu),
                _ptr(x4),
                _i64s(x4.stride()),
                _ptr(w4),
                _i64s(w4.stride()),
                _ptr(b1),
                _ptr(r4),
                _ptr(y),
                _i64s(y.stride()),
                _i64s(geo),
                groups,
            ),
            "conv2d_relu" if relu else "conv2d",
        )
        ctx.save_for_backward(x4, w4, y)
        ctx.conf = (cl, fmt, geo, groups, batched, b is not None, relu, r is not None)
        return y if batched else y.squeeze(0)

    @staticmethod
    def backward(ctx, dy):
        x4, w4, y = ctx.saved_tensors
        cl, fmt, geo, groups, batched, has_bias, relu, has_res = ctx.conf
        dy4 = dy if batched else dy.unsqueeze(0)
        if relu:  # conv2d_relu's backward: torch.relu's (threshold_backward on the output), then conv2d's
            dy4 = torch.where(y <= 0, torch.zeros((), dtype=dy4.dtype), dy4)
        dy4 = dy4.contiguous(memory_format=fmt)
        want = ctx.needs_input_grad
        gi = torch.empty(geo[0], geo[1], geo[2], geo[3], dtype=x4.dtype).contiguous(memory_format=fmt)
        gi = gi if want[0] else None
        gw = torch.empty(w4.shape, dtype=w4.dtype).contiguous(memory_format=fmt) if want[1] else None
        gb = torch.empty(geo[4], dtype=w4.dtype) if want[2] and has_bias else None
        _check(
            library().xk_sim_conv2d_backward(
                _code(x4),
                int(cl),
                _ptr(dy4),
                _i64s(dy4.stride()),
                _ptr(x4),
                _i64s(x4.stride()),
                _ptr(w4),
                _i64s(w4.stride()),
                _ptr(gi),
                _i64s(gi.stride()) if gi is not None else None,
                _ptr(gw),
                _i64s(gw.stride()) if gw is not None else None,
                _ptr(gb),
                _i64s(geo),
                groups,
            ),
            "conv2d_backward",
        )
        if gi is not None and not batched:
            gi = gi.squeeze(0)
        gr = None
        if relu and has_res and want[3]:
            gr = dy4 if batched else dy4.squeeze(0)
        return gi, gw, gb, gr, None, None, None, None, None


# ---------------------------------------------------------------------------- layer_norm


class _LayerNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, normalized_shape, w, b, eps):
        N = math.prod(normalized_shape)
        M = x.numel() // N if N else 0
        x2 = x.detach().contiguous()
        w1 = None if w is None else w.detach().contiguous()
        b1 = None if b is None else b.detach().contiguous()
        acc = torch.float64 if x.dtype == torch.float64 else torch.float32
        y = torch.empty_like(x2)
        mean, rstd = torch.empty(M, dtype=acc), torch.empty(M, dtype=acc)
        _check(
            library().xk_sim_layer_norm(
                _code(x2), _ptr(x2), _ptr(w1), _ptr(b1), _ptr(y), _ptr(mean), _ptr(rstd), M, N, float(eps)
            ),
            "layer_norm",
        )
        ctx.save_for_backward(x2, w1, mean, rstd)
        ctx.mn, ctx.has, ctx.norm = (M, N), (w is not None, b is not None), list(normalized_shape)
        return y

    @staticmethod
    def backward(ctx, dy):
        x2, w1, mean, rstd = ctx.saved_tensors
        (M, N), (has_w, has_b) = ctx.mn, ctx.has
        want = ctx.needs_input_grad
        gi = torch.empty_like(x2) if want[0] else None
        gw = torch.empty(ctx.norm, dtype=x2.dtype) if want[2] and has_w else None
        gb = torch.empty(ctx.norm, dtype=x2.dtype) if want[3] and has_b else None
        dy2 = dy.contiguous()
        _check(
            library().xk_sim_layer_norm_backward(
                _code(x2), _ptr(dy2), _ptr(x2), _ptr(mean), _ptr(rstd), _ptr(w1), _ptr(gi), _ptr(gw), _ptr(gb), M, N
            ),
            "layer_norm_backward",
        )
        return gi, None, gw, gb, None


class SimulatedCuda:
    """xkernels' op signatures, run by the CUDA kernels on the CPU simulator."""

    @staticmethod
    def fused_linear_relu(input, weight, bias=None):
        return _LinearRelu.apply(input, weight, bias)

    @staticmethod
    def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
        return _Conv.apply(
            input, weight, bias, None, _pair(stride), _pair(padding), _pair(dilation), int(groups), False
        )

    @staticmethod
    def conv2d_relu(input, weight, bias=None, residual=None, stride=1, padding=0, dilation=1, groups=1):
        return _Conv.apply(
            input, weight, bias, residual, _pair(stride), _pair(padding), _pair(dilation), int(groups), True
        )

    @staticmethod
    def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
        shape = [normalized_shape] if isinstance(normalized_shape, int) else list(normalized_shape)
        return _LayerNorm.apply(input, shape, weight, bias, eps)
