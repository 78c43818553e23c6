"""A user-written SYCL kernel, from source text to a torch op: RMSNorm.

    PYTHONPATH=python:. python examples/custom_sycl_kernel.py [--quick]

1. the kernel body, in the project's portable form, as a string (a template over the element type);
2. the torch op around it: schema, launch (grid and arguments from the tensors), fake function,
   backward made of torch ops;
3. checks: the op against torch's composition in every dtype (xkernels.parity.check_op), gradcheck
   in float64, torch.compile(fullgraph=True), opcheck;
4. a benchmark against the torch composition with the project's harness (benchmarks/harness.py).

Ends with `custom kernel: ok` when every check passed; exits 1 otherwise.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

import xkernels
from xkernels import sycl

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # for benchmarks.harness
from benchmarks.harness import Case, Provider, time_case  # noqa: E402

# ---------------------------------------------------------------------------- 1. the kernel
LANES = 16  # one sub-group of 16 lanes per row (one AVX-512 vector on the OpenCL CPU device)

RMS_NORM_SRC = r"""
// y[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * w
// One work-group = one sub-group = one row; its lanes stride over the row.
template <typename T>
void rms_norm(xk::item_arg<1> ia, const T* x, const T* w, T* y, int64_t n, float eps) {
  using A = xk::acc_t<T>;  // float for float/half/bfloat16, double for double
  const auto it = xk::item(ia);
  const auto sg = it.get_sub_group();
  const int64_t row = it.get_group(0);
  const int64_t lane = sg.get_local_id()[0], lanes = sg.get_local_range()[0];
  const T* xr = x + row * n;
  T* yr = y + row * n;
  A ss = 0;
  for (int64_t j = lane; j < n; j += lanes) {
    const A v = xk::load(xr, j);
    ss += v * v;
  }
  ss = xk::sub_group_sum(sg, ss);
  const A r = A(1) / sycl::sqrt(ss / A(n) + A(eps));
  for (int64_t j = lane; j < n; j += lanes) xk::store(yr, j, xk::load(xr, j) * r * xk::load(w, j));
}
"""

lib = sycl.load_inline("rms_norm", RMS_NORM_SRC, sub_group_size=LANES)


# ---------------------------------------------------------------------------- 2. the op
@sycl.custom_op("mylib::rms_norm(Tensor x, Tensor weight, float eps=1e-6) -> Tensor")
def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    n = x.shape[-1]
    torch._check(
        weight.shape == (n,), lambda: f"mylib::rms_norm: weight must have shape ({n},), got {tuple(weight.shape)}"
    )
    x, weight = x.contiguous(), weight.contiguous()
    y = torch.empty_like(x)
    rows = x.numel() // n if n else 0
    lib.rms_norm[rows * LANES, LANES](x, weight, y, n, eps)  # grid and arguments from the tensors
    return y


@rms_norm.register_fake
def _(x, weight, eps=1e-6):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def _setup(ctx, inputs, output):
    x, weight, eps = inputs
    ctx.save_for_backward(x, weight)
    ctx.eps = eps


def _backward(ctx, g):  # made of torch ops (in the accumulation precision, like the kernel)
    x, weight = ctx.saved_tensors
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    xa, wa, ga = x.to(acc), weight.to(acc), g.to(acc)
    r = torch.rsqrt(xa.pow(2).mean(-1, keepdim=True) + ctx.eps)
    gw = ga * wa
    gx = r * gw - xa * r.pow(3) * (gw * xa).mean(-1, keepdim=True)
    gweight = (ga * xa * r).reshape(-1, x.shape[-1]).sum(0)
    return gx.to(x.dtype), gweight.to(weight.dtype), None


rms_norm.register_autograd(_backward, setup_context=_setup)


def rms_norm_torch(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """The torch composition: reference and benchmark baseline."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


# ---------------------------------------------------------------------------- 3. checks
def checks() -> bool:
    ok = True
    reports = []
    g = torch.Generator().manual_seed(0)
    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        for shape in ((8, 64), (3, 5, 100), (1, 4096)):
            x = (torch.randn(shape, generator=g, dtype=torch.float64) * 2).to(dtype)
            w = (torch.rand(shape[-1], generator=g, dtype=torch.float64) + 0.5).to(dtype)
            reports.append(xkernels.parity.check_op(torch.ops.mylib.rms_norm, x, w, 1e-6, reference_fn=rms_norm_torch))
    xkernels.parity.print_reports(reports)
    ok &= all(r.passed for r in reports)

    x = torch.randn(4, 33, dtype=torch.float64, requires_grad=True)
    w = (torch.rand(33, dtype=torch.float64) + 0.5).requires_grad_()
    grad_ok = torch.autograd.gradcheck(lambda a, b: torch.ops.mylib.rms_norm(a, b, 1e-6), (x, w))
    print(f"gradcheck (float64): {'ok' if grad_ok else 'FAILED'}")
    ok &= grad_ok

    def block(x, w):
        return torch.nn.functional.gelu(torch.ops.mylib.rms_norm(x, w, 1e-6)) + x

    xc, wc = torch.randn(16, 128), torch.rand(128) + 0.5
    got = torch.compile(block, fullgraph=True)(xc, wc)
    want = torch.nn.functional.gelu(rms_norm_torch(xc, wc)) + xc
    comp_ok = torch.allclose(got, want, rtol=1e-5, atol=1e-5)
    print(f"torch.compile(fullgraph=True): {'ok' if comp_ok else 'FAILED'}")
    ok &= comp_ok

    try:
        torch.library.opcheck(
            torch.ops.mylib.rms_norm,
            (torch.randn(3, 40, requires_grad=True), (torch.rand(40) + 0.5).requires_grad_(), 1e-5),
        )
        print("opcheck: ok")
    except Exception as e:  # noqa: BLE001
        print(f"opcheck: FAILED {type(e).__name__}: {e}")
        ok = False
    return ok


# ---------------------------------------------------------------------------- 4. benchmark
def benchmark(quick: bool) -> bool:
    shapes = [(4096, 1024)] if quick else [(4096, 1024), (512, 4096), (16384, 256)]
    providers = [
        Provider("custom sycl kernel", lambda op, a, kw: torch.ops.mylib.rms_norm(*a)),
        Provider("torch composition", lambda op, a, kw: rms_norm_torch(*a)),
    ]
    rows = []
    for m, n in shapes:

        def make_inputs(m=m, n=n):
            gen = torch.Generator().manual_seed(1)
            return (torch.randn(m, n, generator=gen), torch.rand(n, generator=gen) + 0.5, 1e-6), {}

        case = Case(
            op="rms_norm",
            mode="fwd",
            dtype=torch.float32,
            shape=f"{m}x{n}",
            make_inputs=make_inputs,
            oracle=lambda a, kw: rms_norm_torch(a[0].double(), a[1].double(), a[2]),
            work=2 * m * n * 4 + n * 4,
            metric="GB/s",
        )
        with torch.no_grad():
            rows += time_case(case, providers, repeats=5 if quick else 9, min_time=0.5 if quick else 1.5)
    print(f"\nbenchmark (float32 forward, {torch.get_num_threads()} threads; median of interleaved samples):")
    print(f"  {'shape':>10s}  {'provider':20s} {'GB/s':>8s} {'ms':>9s} {'spread':>7s}")
    for r in rows:
        print(
            f"  {r['shape']:>10s}  {r['provider']:20s} {float(r['median']):8.2f} {float(r['median_ms']):9.3f} "
            f"{float(r['spread']):7.1%}"
        )
    return len(rows) == 2 * len(shapes)  # both providers ran (and passed the harness's own check)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="one benchmark shape, fewer samples")
    args = ap.parse_args()
    print(f"xkernels {xkernels.__version__}, torch {torch.__version__}; kernel source: {lib}")
    ok = checks()
    ok &= benchmark(args.quick)
    print("custom kernel: ok" if ok else "custom kernel: FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
