"""User-written SYCL kernels, compiled at run time and registered as torch ops.

Write kernel bodies in the project's portable form (``csrc/sycl/kernels/common.hpp``: ``xk::item``,
``xk::load``/``xk::store``, ``xk::acc_t``, ``xk::sub_group_sum``, ...), load them from source text, and
wrap their launches in a torch op::

    import torch, xkernels
    from xkernels import sycl

    lib = sycl.load_inline("scale_add", r'''
        template <typename T>
        void scale_add(xk::item_arg<1> ia, const T* x, const T* y, T* out, float alpha, int64_t n) {
          const int64_t i = xk::item(ia).get_global_id(0);
          if (i < n) xk::store(out, i, xk::load(x, i) + alpha * xk::load(y, i));
        }
    ''')

    @sycl.custom_op("mylib::scale_add(Tensor x, Tensor y, float alpha) -> Tensor")
    def scale_add(x, y, alpha):
        out = torch.empty_like(x)
        n = x.numel()
        lib.scale_add[sycl.round_up(n, 256), 256](x.contiguous(), y.contiguous(), out, alpha, n)
        return out

    @scale_add.register_fake
    def _(x, y, alpha):
        return torch.empty_like(x)

    torch.ops.mylib.scale_add(x, y, 2.0)

Kernels are compiled on first use per device and element type T (the dtype of the first tensor passed
to a ``T*`` parameter), through the same build path as xkernels' own kernels: the SYCL runtime's
kernel compiler, the pinned floating-point options, and the on-disk cache (``XKERNELS_CACHE_DIR``), so
later processes load them in a fraction of a second. A first compile that takes more than a second
shows a progress indicator on stderr (``XKERNELS_SYCL_PROGRESS=0`` turns it off). Compile errors raise
:class:`CompileError` with the compiler's diagnostics, which cite ``<name>.sycl:<line>`` — the lines of
your source text. Launches are validated (argument count and types, dtypes, devices, contiguity, the
launch geometry) and raise ``TypeError``/``ValueError`` naming the kernel, argument and value.

See docs/custom_kernels.md.
"""

from __future__ import annotations

import hashlib
import logging
import numbers
import os
import re
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from . import _C, _env
from ._progress import compile_progress
from ._signature import Param, _Signature, parse_kernels

__all__ = ["load_inline", "KernelLibrary", "Kernel", "Param", "CompileError", "custom_op", "round_up", "cdiv"]

log = logging.getLogger("xkernels.sycl")

_DTYPE_NAMES = {
    torch.float32: "float32",
    torch.float64: "float64",
    torch.float16: "float16",
    torch.bfloat16: "bfloat16",
}


class CompileError(RuntimeError):
    """A user kernel source failed to compile. ``diagnostics`` holds the compiler's messages (they cite
    ``<name>.sycl:<line>:<column>``, lines of the source text given to :func:`load_inline`)."""

    def __init__(self, name: str, kernels: Sequence[str], target: str, diagnostics: str, build: str = ""):
        self.name, self.kernels, self.target, self.diagnostics = name, list(kernels), target, diagnostics
        errors = [ln.strip() for ln in diagnostics.splitlines() if re.search(r": (fatal )?error:", ln)]
        head = f"xkernels.sycl: compiling kernel source '{name}' (kernels: {', '.join(kernels)}) for {target} failed"
        if errors:
            head += ":\n  " + "\n  ".join(errors[:5]) + ("\n  ..." if len(errors) > 5 else "")
        if build:
            head += f"\n({build})"
        super().__init__(f"{head}\n\nCompiler diagnostics:\n{diagnostics}")


def cdiv(a: int, b: int) -> int:
    """ceil(a / b) for non-negative ints."""
    return -(-a // b)


def round_up(n: int, multiple: int) -> int:
    """The smallest multiple of `multiple` >= n (a global size for work-groups of `multiple`)."""
    return cdiv(n, multiple) * multiple


# ----------------------------------------------------------------------------------- kernels

_COMPILER_LOG = re.compile(r"Compiler log:\n(.*)", re.S)


class Kernel:
    """One kernel of a :class:`KernelLibrary`. Launch it over an nd-range::

        kernel[global_size, local_size](*args)       # or kernel.launch(global_size, local_size, *args)

    `global_size` / `local_size`: ints (1-D) or tuples of D ints; every global size a multiple of the
    local size. `args` follow the body's parameters after the item argument: tensors (contiguous, one
    device) for pointers, Python numbers for scalars. For CPU tensors the launch returns when the kernel
    has finished; for XPU/CUDA tensors it is ordered on torch's current stream."""

    def __init__(self, library: KernelLibrary, sig: _Signature):
        self._lib = library
        self._sig = sig
        self.name = sig.name
        self.dims = sig.dims
        self.params = sig.params

    def __repr__(self) -> str:
        params = ", ".join(p.text for p in self.params)
        return f"<xkernels.sycl.Kernel {self.name}(xk::item_arg<{self.dims}>, {params}) from '{self._lib.name}.sycl'>"

    def __getitem__(self, geometry) -> Callable[..., None]:
        if not (isinstance(geometry, tuple) and len(geometry) == 2):
            raise TypeError(
                f"xkernels.sycl: launch kernel '{self.name}' as kernel[global_size, local_size](*args), "
                f"got kernel[{geometry!r}]"
            )
        global_size, local_size = geometry
        return lambda *args: self.launch(global_size, local_size, *args)

    def _sizes(self, value, what: str) -> list[int]:
        if type(value) is int and self.dims == 1:  # the common case, without the ABC checks below
            return [value]
        v = (
            (value,)
            if isinstance(value, numbers.Integral) or (isinstance(value, Tensor) and value.dim() == 0)
            else value
        )
        try:
            out = [int(x) for x in v]
            ok = all(isinstance(x, numbers.Integral) and not isinstance(x, bool) for x in v)
        except TypeError:
            ok = False
        if not ok:
            raise TypeError(
                f"xkernels.sycl: kernel '{self.name}': {what} must be an int or a tuple of "
                f"{self.dims} ints, got {value!r}"
            )
        if len(out) != self.dims:
            raise ValueError(
                f"xkernels.sycl: kernel '{self.name}' is {self.dims}-dimensional "
                f"(xk::item_arg<{self.dims}>): {what} must have {self.dims} entries, got {value!r}"
            )
        return out

    def launch(self, global_size, local_size, *args: Any) -> None:
        g = self._sizes(global_size, "global_size")
        lo = self._sizes(local_size, "local_size")
        if len(args) != len(self.params):
            names = ", ".join(p.name for p in self.params)
            raise TypeError(
                f"xkernels.sycl: kernel '{self.name}' takes {len(self.params)} arguments ({names}), got {len(args)}"
            )
        tensors: list[Tensor] = []
        scalars: list[int | float] = []
        dtype = None
        for p, a in zip(self.params, args):
            if p.pointer:
                if not isinstance(a, Tensor):
                    raise TypeError(
                        f"xkernels.sycl: kernel '{self.name}': argument '{p.name}' ({p.text}) must be a "
                        f"Tensor, got {type(a).__name__} {a!r}"
                    )
                if dtype is None and p.base == "T":
                    dtype = a.dtype
                tensors.append(a)
            elif type(a) is int and p.is_int or type(a) is float and not p.is_int:  # fast path
                scalars.append(a)
            else:
                if isinstance(a, Tensor):
                    raise TypeError(
                        f"xkernels.sycl: kernel '{self.name}': argument '{p.name}' ({p.text}) is a "
                        f"scalar: pass a Python number (e.g. tensor.item()), got a Tensor"
                    )
                if isinstance(a, bool) or not isinstance(a, numbers.Real):
                    raise TypeError(
                        f"xkernels.sycl: kernel '{self.name}': argument '{p.name}' ({p.text}) must be "
                        f"{'an int' if p.is_int else 'a float'}, got {type(a).__name__} {a!r}"
                    )
                if p.is_int:
                    if not isinstance(a, numbers.Integral):
                        raise TypeError(
                            f"xkernels.sycl: kernel '{self.name}': argument '{p.name}' ({p.text}) must "
                            f"be an int, got {type(a).__name__} {a!r}"
                        )
                    scalars.append(int(a))
                else:
                    scalars.append(float(a))
        if tensors and all(x > 0 for x in g):
            dev = tensors[0].device
            if dev.type in ("cpu", "xpu", "cuda") and (not self._lib.templated or dtype in _DTYPE_NAMES):
                self._lib._ensure_built(dev, dtype if self._lib.templated else None)
        torch.ops.xkernels_sycl_user.launch(self._lib._id, self.name, g, lo, tensors, scalars)


class KernelLibrary:
    """The kernels of one source text (:func:`load_inline`); each is an attribute (a :class:`Kernel`)."""

    def __init__(
        self, name: str, source: str, sigs: list[_Signature], extra_cflags: Sequence[str], sub_group_size: int
    ):
        self.name = name
        self.source = source
        self.templated = sigs[0].templated
        kernels = [(s.name, s.dims, [(p.name, p.base, p.pointer, p.is_const) for p in s.params]) for s in sigs]
        disk_text, includes = _hoist_kernel_includes(source)
        self.source_file = _write_source_file(name, disk_text)
        self._src = _C.sycl.UserSource(
            name,
            source,
            str(self.source_file.parent) if self.source_file else "",
            includes if self.source_file else [],
            self.templated,
            kernels,
            list(extra_cflags),
            sub_group_size,
        )
        self._id = self._src.register()
        self._built: set = set()
        self._lock = threading.Lock()
        self.kernels: dict[str, Kernel] = {s.name: Kernel(self, s) for s in sigs}

    def __getattr__(self, item: str) -> Kernel:
        kernels = self.__dict__.get("kernels", {})
        if item in kernels:
            return kernels[item]
        raise AttributeError(
            f"xkernels.sycl: source '{self.__dict__.get('name')}' has no kernel '{item}' (it has: {', '.join(kernels)})"
        )

    def __repr__(self) -> str:
        return f"<xkernels.sycl.KernelLibrary '{self.name}.sycl': {', '.join(self.kernels)}>"

    def __dir__(self):
        return list(super().__dir__()) + list(self.kernels)

    @property
    def build_options(self) -> list[str]:
        """The options the run-time compiler gets (xkernels' pinned ones, then `extra_cflags`)."""
        return list(self._src.options())

    def translation_unit(self, dtype: torch.dtype | None = None) -> str:
        """The source the run-time compiler gets for element type `dtype`: yours after a #line directive,
        then the generated entry points."""
        return self._src.translation_unit(_dtype_name(dtype) if self.templated else None)

    def builds(self) -> list[tuple[str, float]]:
        """This process's builds of the source: [(label, seconds)] (a cache hit is a fast build)."""
        return list(self._src.builds())

    def build(self, device: torch.device | str = "cpu", dtypes: Iterable[torch.dtype] | None = None) -> None:
        """Compiles now (what the first launch would do) for `device` and each of `dtypes` (templated
        sources; default float32)."""
        device = torch.device(device)
        if not self.templated:
            self._ensure_built(device, None)
            return
        for dt in dtypes or [torch.float32]:
            _dtype_name(dt)
            self._ensure_built(device, dt)

    def _ensure_built(self, device: torch.device, dtype: torch.dtype | None) -> None:
        key = (str(device), dtype)
        if key in self._built:
            return
        dname = _DTYPE_NAMES[dtype] if dtype is not None else None
        dev = str(device)
        if self._src.is_built(dev, dname):
            self._built.add(key)
            return
        label = f"'{self.name}.sycl'" + (f" [{dname}]" if dname else "") + f" for {device}"
        t0 = time.perf_counter()
        try:
            with compile_progress(label):
                seconds = self._src.build(dev, dname)
        except RuntimeError as e:
            msg = str(e)
            m = _COMPILER_LOG.search(msg)
            if "compiling SYCL kernels" in msg and m:
                b = re.search(r"failed \((SYCL runtime .*?)\)\. Compiler log:", msg, re.S)
                raise CompileError(
                    self.name,
                    list(self.kernels),
                    label.split(" for ", 1)[1] + (f" [{dname}]" if dname else ""),
                    m.group(1).strip(),
                    b.group(1) if b else "",
                ) from None
            raise
        self._built.add(key)
        log.info("xkernels.sycl: built %s in %.2f s", label, seconds or (time.perf_counter() - t0))


def _dtype_name(dtype: torch.dtype | None) -> str:
    try:
        return _DTYPE_NAMES[dtype]
    except KeyError:
        raise TypeError(
            f"xkernels.sycl: element type T must be one of {', '.join(str(d) for d in _DTYPE_NAMES)}, got {dtype}"
        ) from None


_QUOTED_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"/]+\.hpp)"[^\n]*$', re.M)


def _hoist_kernel_includes(source: str) -> tuple[str, list[str]]:
    """xkernels' kernel files ("common.hpp", ...) are virtual include files of the run-time compiler, which an
    on-disk source cannot reach: quoted includes of "<name>.hpp" move to the generated source (before the
    user's file) and become comments in the file on disk (line numbers unchanged)."""
    found: list[str] = []

    def repl(m: re.Match) -> str:
        if m.group(1) not in found:
            found.append(m.group(1))
        return f"// {m.group(0).strip()}  (included by the generated source before this file)"

    return _QUOTED_INCLUDE.sub(repl, source), found


def _write_source_file(name: str, source: str) -> Path | None:
    """The source as <cache>/user-sources/<content hash>/<name>.sycl (the compiler includes it from there, so
    diagnostics cite it; the directory is content-addressed, so the build options, and with them the
    on-disk cache key, are stable across processes). None when no directory is writable (the text is
    then compiled inline)."""
    digest = hashlib.sha256(f"{name}\0{source}".encode()).hexdigest()[:20]
    for root in (_env.cache_dir(), Path(tempfile.gettempdir()) / f"xkernels-{os.getuid()}"):
        d = root / "user-sources" / digest
        f = d / f"{name}.sycl"
        try:
            if f.is_file() and f.read_text() == source:
                return f
            d.mkdir(parents=True, exist_ok=True)
            tmp = d / f".{name}.sycl.{os.getpid()}.{threading.get_ident()}.tmp"
            tmp.write_text(source)
            os.replace(tmp, f)
            return f
        except OSError:
            continue
    return None


_LIBRARIES: dict[tuple, KernelLibrary] = {}
_LIBRARIES_LOCK = threading.Lock()


def load_inline(
    name: str,
    source: str,
    functions: str | Sequence[str] | None = None,
    *,
    extra_cflags: Sequence[str] = (),
    sub_group_size: int = 0,
) -> KernelLibrary:
    """Loads SYCL kernel bodies from source text (compiled lazily, per device and element type, on first
    launch; see the module doc).

    name: names the source in diagnostics (``<name>.sycl:<line>``) and the on-disk cache labels; a C
      identifier.
    source: kernel bodies in the portable form; ``common.hpp`` (the ``xk::`` helpers) is included
      before it. A kernel body's first parameter is ``xk::item_arg<D>`` (D = 1, 2, 3); the others are
      pointers (``const T* x``, ``float* out``: tensors) and scalars (``float``, ``double``,
      ``xk::acc_t<T>``, ``int64_t``, ``int``, ...: numbers). Templates over one element type T are
      instantiated for float32, float64, float16 (``xk::half``) and bfloat16 (``xk::bf16``).
    functions: the kernel bodies to expose (default: every function whose first parameter is an
      item argument).
    extra_cflags: options after xkernels' own (e.g. ``-DBLOCK=64``; ``-ffp-contract=fast`` overrides the
      pinned no-contraction policy).
    sub_group_size: when > 0, every kernel requires this sub-group size ([[sycl::reqd_sub_group_size]]).

    Loading the same (name, source, options) again returns the same library."""
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_]\w*", name):
        raise ValueError(f"xkernels.sycl.load_inline: argument 'name' must be a C identifier, got {name!r}")
    if not isinstance(source, str):
        raise TypeError(f"xkernels.sycl.load_inline: argument 'source' must be a str, got {type(source).__name__}")
    if not _C.with_sycl:
        raise RuntimeError("xkernels.sycl: this xkernels build has no SYCL backend")
    if isinstance(functions, str):
        functions = [functions]
    if isinstance(extra_cflags, str):
        raise TypeError("xkernels.sycl.load_inline: argument 'extra_cflags' must be a list of strings")
    if not isinstance(sub_group_size, int) or sub_group_size < 0:
        raise ValueError(
            f"xkernels.sycl.load_inline: argument 'sub_group_size' must be an int >= 0, got {sub_group_size!r}"
        )
    key = (name, source, tuple(functions) if functions is not None else None, tuple(extra_cflags), sub_group_size)
    with _LIBRARIES_LOCK:
        lib = _LIBRARIES.get(key)
        if lib is None:
            lib = KernelLibrary(name, source, parse_kernels(source, functions), extra_cflags, sub_group_size)
            _LIBRARIES[key] = lib
    return lib


# ----------------------------------------------------------------------------------- ops


def custom_op(
    schema: str,
    fn: Callable | None = None,
    *,
    device_types: str | Sequence[str] | None = ("cpu", "xpu", "cuda"),
    tags: Sequence[torch.Tag] | None = None,
):
    """``torch.library.custom_op`` with the op's schema written out, e.g.
    ``"mylib::scale_add(Tensor x, Tensor y, float alpha) -> Tensor"``: registers `fn` (which allocates
    outputs and launches kernels) as the op's implementation for `device_types`. Arguments written
    (``Tensor(a!) out``) are taken from the schema. Returns torch's ``CustomOpDef``: add a fake (meta)
    function with ``.register_fake`` (needed for torch.compile) and a backward with
    ``.register_autograd``. Use as a decorator or call with `fn`."""
    if not isinstance(schema, str) or "::" not in schema.split("(", 1)[0]:
        raise ValueError(f"xkernels.sycl.custom_op: the schema must start with 'namespace::name(', got {schema!r}")
    qualname, paren, rest = schema.partition("(")
    qualname = qualname.strip()
    try:
        parsed = torch._C.parse_schema(schema)
    except RuntimeError as e:
        raise ValueError(f"xkernels.sycl.custom_op: invalid schema {schema!r}: {str(e).splitlines()[0]}") from None
    mutates = [a.name for a in parsed.arguments if a.alias_info is not None and a.alias_info.is_write]
    return torch.library.custom_op(
        qualname, fn, mutates_args=mutates, device_types=device_types, schema="(" + rest, tags=tags
    )
