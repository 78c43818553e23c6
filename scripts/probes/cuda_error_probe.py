"""Bad input on the CUDA build: which calls raise and which kill the process (issue: a segmentation fault in
test_conv2d_relu.py::test_errors[cuda-*], CPU tensors with the cuda backend selected).

Each variant runs in its own child process (a crash cannot take the others down) with faulthandler on;
the parent prints one line per variant: raised (exception type and the first line of its message),
returned, or died (signal), with the child's faulthandler stack for the dead ones.

Usage: python scripts/probes/cuda_error_probe.py [--gdb] [--native-backtrace]
  --gdb               also a gdb backtrace of each crash, when gdb is installed;
  --native-backtrace  children run with scripts/probes/segv_backtrace.c (built here with cc) preloaded: the
                      native call stack of a crash, demangled with c++filt when present.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap

SETUP = """
import faulthandler, sys, torch, xkernels
faulthandler.enable(all_threads=True)
CL = torch.channels_last
def run(fn):
    try:
        fn()
        print("RESULT returned")
    except Exception as e:
        print("RESULT raised", type(e).__name__, str(e).splitlines()[0][:160])
"""

# name -> (backend, device context or None, tensor device, call)
VARIANTS = {
    "relu-residual-shape/cpu-tensors/cuda-backend/device-ctx": (
        "cuda",
        "cuda",
        "cpu",
        "xkernels.conv2d_relu(x, w, residual=torch.randn(2, 4, 5, 5, device=dev))",
    ),
    "relu-residual-shape/cpu-tensors/cuda-backend/no-ctx": (
        "cuda",
        None,
        "cpu",
        "xkernels.conv2d_relu(x, w, residual=torch.randn(2, 4, 5, 5, device=dev))",
    ),
    "relu-residual-shape/cpu-tensors/reference/device-ctx": (
        "reference",
        "cuda",
        "cpu",
        "xkernels.conv2d_relu(x, w, residual=torch.randn(2, 4, 5, 5, device=dev))",
    ),
    "relu-residual-shape/cuda-tensors/cuda-backend": (
        "cuda",
        None,
        "cuda",
        "xkernels.conv2d_relu(x, w, residual=torch.randn(2, 4, 5, 5, device=dev))",
    ),
    "relu-residual-shape/cpu-tensors/auto": (
        "auto",
        None,
        "cpu",
        "xkernels.conv2d_relu(x, w, residual=torch.randn(2, 4, 5, 5, device=dev))",
    ),
    "relu-residual-dtype/cpu-tensors/cuda-backend/device-ctx": (
        "cuda",
        "cuda",
        "cpu",
        "xkernels.conv2d_relu(x, w, residual=torch.randn(2, 4, 3, 3, device=dev, dtype=torch.float64))",
    ),
    "relu-bias-shape/cpu-tensors/cuda-backend/direct-op": (
        "cuda",
        None,
        "cpu",
        "torch.ops.xkernels.conv2d_relu(x, w, torch.randn(5, device=dev), [1, 1], [0, 0], [1, 1], 1, None)",
    ),
    "conv2d-bias-shape/cpu-tensors/cuda-backend": (
        "cuda",
        None,
        "cpu",
        "xkernels.conv2d(x, w, torch.randn(5, device=dev))",
    ),
    "conv2d-bias-shape/cuda-tensors/cuda-backend": (
        "cuda",
        None,
        "cuda",
        "xkernels.conv2d(x, w, torch.randn(5, device=dev))",
    ),
    "linear-bias-shape/cpu-tensors/cuda-backend": (
        "cuda",
        None,
        "cpu",
        "xkernels.fused_linear_relu(torch.randn(2, 3, device=dev), torch.randn(4, 3, device=dev), "
        "torch.randn(5, device=dev))",
    ),
    "layer_norm-weight-shape/cpu-tensors/cuda-backend": (
        "cuda",
        None,
        "cpu",
        "xkernels.layer_norm(torch.randn(2, 3, device=dev), [3], torch.randn(4, device=dev))",
    ),
    "value-error-from-c10/cpu": (
        "auto",
        None,
        "cpu",
        "torch.ops.xkernels.conv2d(x, w, None, [0, 1], [0, 0], [1, 1], 1)",
    ),
    "value-error-from-c10/cuda": (
        "cuda",
        None,
        "cuda",
        "torch.ops.xkernels.conv2d(x, w, None, [0, 1], [0, 0], [1, 1], 1)",
    ),
}


def child_source(backend, ctx, dev, call):
    body = f"""
dev = {dev!r}
x, w = torch.randn(2, 3, 5, 5, device=dev), torch.randn(4, 3, 3, 3, device=dev)
ctx = {ctx!r}
with xkernels.use_backend({backend!r}):
    if ctx is None:
        run(lambda: {call})
    else:
        with torch.device(ctx):
            run(lambda: {call})
"""
    return SETUP + textwrap.dedent(body)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gdb", action="store_true")
    ap.add_argument("--native-backtrace", action="store_true")
    args = ap.parse_args()
    gdb = shutil.which("gdb") if args.gdb else None
    env = dict(os.environ)
    if args.native_backtrace and shutil.which("cc"):
        lib = os.path.join(tempfile.mkdtemp(), "segv_backtrace.so")
        src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "segv_backtrace.c")
        subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-g", "-o", lib, src], check=True)
        env["LD_PRELOAD"] = lib
    cxxfilt = shutil.which("c++filt")
    died = 0

    def child(item):
        name, (backend, ctx, dev, call) = item
        src = child_source(backend, ctx, dev, call)
        p = subprocess.run([sys.executable, "-c", src], capture_output=True, text=True, timeout=120, env=env)
        if cxxfilt and p.returncode != 0:
            p.stderr = subprocess.run([cxxfilt], input=p.stderr, capture_output=True, text=True).stdout
        return name, src, p

    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 4) as pool:
        results = list(pool.map(child, VARIANTS.items()))
    for name, src, p in results:
        lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
        if p.returncode == 0 and lines:
            print(f"{name:60s} {lines[-1][7:]}")
            continue
        died += 1
        print(f"{name:60s} DIED (exit {p.returncode})")
        print(textwrap.indent(p.stderr[-6000:], "    | "))
        if gdb:
            g = subprocess.run(
                [gdb, "-batch", "-ex", "run", "-ex", "bt 40", "--args", sys.executable, "-c", src],
                capture_output=True,
                text=True,
                timeout=300,
            )
            print(textwrap.indent(g.stdout[-6000:], "    gdb| "))
    print(f"{died} of {len(VARIANTS)} variants killed the process")
    return 1 if died else 0


if __name__ == "__main__":
    sys.exit(main())
