"""Native CUDA backend (csrc/cuda), what the suites of the `backend` fixture do not already run on cuda: the
CUDA kernels' own tiling paths (split-K, ragged tiles, warp- and block-per-row layer norm) against float64 torch
and against the CPU reference backend, forward and backward, in float64 / float32 / float16 / bfloat16; exact
results on small-integer inputs in every dtype; dispatch; 64-bit indexing; stream ordering on a non-default
stream and under torch.compile(mode="reduce-overhead") (CUDA graphs). opcheck, gradcheck, strided views and
memory formats run on cuda through test_opcheck.py, test_gradcheck.py and the op suites (test_<op>.py).

Needs an NVIDIA GPU and xkernels built with the CUDA backend (XKERNELS_CUDA=ON); every test
is skipped, with the reason, otherwise. scripts/gpu_check.sh runs this file on a GPU machine.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import xkernels
from xkernels.tolerances import DTYPES, between_backends, max_error, within_budget

import _backends

pytestmark = pytest.mark.cuda


@pytest.fixture(autouse=True, scope="module")
def _cuda_available():
    _backends.get("cuda")  # fails if XKERNELS_REQUIRE_BACKENDS names cuda, else skips with the reason


ops = torch.ops.xkernels

# Error budget against the float64 oracle: the relative-to-torch policy of xkernels.tolerances, scope
# "cuda_op" (torch's own same-dtype result -- cuBLAS / cuDNN / aten -- on the same inputs sets the scale,
# so the budget follows the problem's conditioning).


def _dev():
    return torch.device("cuda", torch.cuda.current_device())


def _rand(shape, dtype, scale=1.0, seed=0, device=None):
    g = torch.Generator().manual_seed(seed)
    t = (torch.randn(shape, generator=g, dtype=torch.float64) * scale).to(dtype)
    return t.to(device or _dev())


def _ints(shape, dtype, seed=0, lo=-2, hi=2):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(lo, hi + 1, shape, generator=g).to(dtype).to(_dev())


def _check(name, ours, torch_same, ref64):
    assert ours.shape == ref64.shape, f"{name}: shape {tuple(ours.shape)} != {tuple(ref64.shape)}"
    assert ours.dtype == torch_same.dtype, f"{name}: dtype {ours.dtype} != {torch_same.dtype}"
    ok, err, budget = within_budget(ours, torch_same, ref64, ours.dtype, scope="cuda_op")
    assert ok, (
        f"{name} [{ours.dtype}]: max error {err:.3e} vs float64 exceeds the budget {budget:.3e} "
        f"(torch's own {ours.dtype} error {max_error(torch_same, ref64):.3e})"
    )


def _exact(name, ours, ref64):
    """Small-integer inputs: every partial sum is an integer far below 2**24, so float / double
    accumulation is exact and the only rounding left is the final one to the output dtype."""
    got = ours.detach().cpu().double()
    ref = ref64.detach().cpu().to(ours.dtype).double()
    assert got.shape == ref.shape, f"{name}: shape {tuple(got.shape)} != {tuple(ref.shape)}"
    diff = (got - ref).abs()
    assert torch.equal(got, ref), f"{name}: not exact, max difference {diff.max().item()} at {diff.argmax().item()}"


def _to64(*ts):
    return [None if t is None else t.detach().cpu().double().requires_grad_(t.requires_grad) for t in ts]


# ================================================================== fused_linear_relu
LINEAR_CASES = [  # input shape, N
    ((13,), 5),  # 1-D input
    ((1, 1), 1),
    ((7, 13), 5),
    ((3, 7, 33), 17),  # leading dims
    ((65, 129), 67),  # several tiles, ragged edges
    ((4, 2000), 8),  # few tiles, long K: split-K in forward and grad_input
    ((3000, 16), 9),  # long M: split-K in grad_weight, chunked grad_bias
]


def _linear_ref(x, w, b):
    return torch.relu(F.linear(x, w, b))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape,N", LINEAR_CASES, ids=str)
@pytest.mark.parametrize("has_bias", [True, False], ids=["bias", "nobias"])
def test_fused_linear_relu_forward(dtype, shape, N, has_bias):
    K = shape[-1]
    x = _rand(shape, dtype, seed=1)
    w = _rand((N, K), dtype, scale=1 / math.sqrt(K), seed=2)
    b = _rand((N,), dtype, seed=3) if has_bias else None
    ours = xkernels.fused_linear_relu(x, w, b)
    assert ours.is_contiguous() and ours.device == x.device
    _check("fused_linear_relu", ours, _linear_ref(x, w, b), _linear_ref(*_to64(x, w, b)))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape,N", LINEAR_CASES, ids=str)
def test_fused_linear_relu_backward(dtype, shape, N):
    # The ReLU mask comes from our own forward output, and the float64 oracle uses that same
    # mask, so outputs that round to the other side of 0 cannot flip a gradient.
    K = shape[-1]
    x = _rand(shape, dtype, seed=4)
    w = _rand((N, K), dtype, scale=1 / math.sqrt(K), seed=5)
    b = _rand((N,), dtype, seed=6)
    out = xkernels.fused_linear_relu(x, w, b)
    dy = _rand(out.shape, dtype, seed=7)
    gi, gw, gb = ops.fused_linear_relu_backward(dy, x, w, out, [True, True, True])
    m = (out > 0).to(dtype)
    g = (dy * m).reshape(-1, N)
    x2 = x.reshape(-1, K)
    g64, x64, w64 = _to64(g, x2, w)
    _check("fused_linear_relu grad_input", gi, (g @ w).reshape(x.shape), (g64 @ w64).reshape(x.shape))
    _check("fused_linear_relu grad_weight", gw, g.t() @ x2, g64.t() @ x64)
    _check("fused_linear_relu grad_bias", gb, g.sum(0), g64.sum(0))
    for t, like in ((gi, x), (gw, w)):
        assert t.shape == like.shape and t.is_contiguous()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_fused_linear_relu_exact_small_integers(dtype):
    x, w, b = _ints((37, 30), dtype, 1), _ints((19, 30), dtype, 2), _ints((19,), dtype, 3)
    out = xkernels.fused_linear_relu(x, w, b)
    _exact("fused_linear_relu", out, _linear_ref(*_to64(x, w, b)))
    dy = _ints(out.shape, dtype, 4)
    gi, gw, gb = ops.fused_linear_relu_backward(dy, x, w, out, [True, True, True])
    g64 = dy.cpu().double() * (out.cpu().double() > 0)
    _exact("grad_input", gi, g64 @ w.cpu().double())
    _exact("grad_weight", gw, g64.t() @ x.cpu().double())
    _exact("grad_bias", gb, g64.sum(0))


# ================================================================== conv2d
CONV_CASES = [
    # N, C, H, W, O, KH, KW, stride, padding, dilation, groups, channels_last
    (2, 3, 9, 11, 4, 3, 3, (1, 1), (1, 1), (1, 1), 1, False),
    (1, 4, 8, 8, 6, 3, 2, (2, 1), (0, 1), (1, 2), 2, True),
    (3, 6, 7, 5, 6, 1, 1, (1, 1), (0, 0), (1, 1), 6, False),  # depthwise 1x1
    (None, 3, 10, 10, 5, 3, 3, (2, 2), (1, 1), (1, 1), 1, False),  # unbatched
    (2, 8, 16, 16, 16, 3, 3, (1, 1), (1, 1), (1, 1), 1, True),
    (1, 64, 12, 12, 8, 3, 3, (1, 1), (1, 1), (1, 1), 1, False),  # K = 576: split-K forward
    (4, 4, 32, 32, 4, 3, 3, (1, 1), (1, 1), (1, 1), 1, False),  # grad_weight K = 4096: split-K
    (2, 5, 13, 7, 10, 5, 3, (3, 2), (2, 0), (2, 1), 5, True),
]


def _conv_inputs(case, dtype, ints=False, seed=0):
    N, C, H, W, O, KH, KW, stride, padding, dilation, groups, cl = case
    shape = (C, H, W) if N is None else (N, C, H, W)
    if ints:
        x, w, b = (
            _ints(shape, dtype, seed),
            _ints((O, C // groups, KH, KW), dtype, seed + 1),
            _ints((O,), dtype, seed + 2),
        )
    else:
        fan_in = C // groups * KH * KW
        x = _rand(shape, dtype, seed=seed)
        w = _rand((O, C // groups, KH, KW), dtype, scale=1 / math.sqrt(fan_in), seed=seed + 1)
        b = _rand((O,), dtype, seed=seed + 2)
    if cl:
        x = x.contiguous(memory_format=torch.channels_last)
        w = w.contiguous(memory_format=torch.channels_last)
    return x, w, b, dict(stride=stride, padding=padding, dilation=dilation, groups=groups)


def _formats(t):
    """(contiguous, channels_last-contiguous): compared instead of strides, which may differ in size-1 dims."""
    return t.is_contiguous(), t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last)


def _conv_id(case):
    return "N{}C{}H{}W{}O{}k{}x{}s{}p{}d{}g{}{}".format(*case[:7], *case[7:11], "cl" if case[11] else "")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", CONV_CASES, ids=_conv_id)
@pytest.mark.parametrize("has_bias", [True, False], ids=["bias", "nobias"])
def test_conv2d_forward(dtype, case, has_bias):
    x, w, b, kw = _conv_inputs(case, dtype, seed=11)
    b = b if has_bias else None
    ours = xkernels.conv2d(x, w, b, **kw)
    theirs = F.conv2d(x, w, b, **kw)
    _check("conv2d", ours, theirs, F.conv2d(*_to64(x, w, b), **kw))
    # The memory format of torch's own conv2d on the same tensors (on CUDA: cuDNN's choice, contiguous for float64).
    assert _formats(ours) == _formats(theirs), f"conv2d output strides {ours.stride()}, torch's {theirs.stride()}"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", CONV_CASES, ids=_conv_id)
def test_conv2d_backward(dtype, case):
    x, w, b, kw = _conv_inputs(case, dtype, seed=12)
    out = F.conv2d(x, w, b, **kw)
    dy = _rand(out.shape, dtype, seed=13)
    if case[-1]:
        dy = dy.contiguous(memory_format=torch.channels_last)
    p = kw
    gi, gw, gb = ops.conv2d_backward(
        dy, x, w, list(p["stride"]), list(p["padding"]), list(p["dilation"]), p["groups"], [True, True, True]
    )
    x64, w64, b64 = (t.detach().cpu().double().requires_grad_() for t in (x, w, b))
    F.conv2d(x64, w64, b64, **kw).backward(dy.cpu().double())
    xt, wt, bt = (t.detach().clone().requires_grad_() for t in (x, w, b))
    F.conv2d(xt, wt, bt, **kw).backward(dy)
    _check("conv2d grad_input", gi, xt.grad, x64.grad)
    _check("conv2d grad_weight", gw, wt.grad, w64.grad)
    _check("conv2d grad_bias", gb, bt.grad, b64.grad)
    assert _formats(gi) == _formats(xt.grad), f"grad_input strides {gi.stride()}, torch's {xt.grad.stride()}"
    assert _formats(gw) == _formats(wt.grad), f"grad_weight strides {gw.stride()}, torch's {wt.grad.stride()}"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", [CONV_CASES[0], CONV_CASES[1], CONV_CASES[3], CONV_CASES[7]], ids=_conv_id)
def test_conv2d_exact_small_integers(dtype, case):
    x, w, b, kw = _conv_inputs(case, dtype, ints=True, seed=14)
    out = xkernels.conv2d(x, w, b, **kw)
    _exact("conv2d", out, F.conv2d(*_to64(x, w, b), **kw))
    dy = _ints(out.shape, dtype, 15)
    gi, gw, gb = ops.conv2d_backward(
        dy, x, w, list(kw["stride"]), list(kw["padding"]), list(kw["dilation"]), kw["groups"], [True, False, True]
    )
    x64, w64 = (t.detach().cpu().double().requires_grad_() for t in (x, w))
    F.conv2d(x64, w64, None, **kw).backward(dy.cpu().double())
    _exact("conv2d grad_input", gi, x64.grad)
    _exact("conv2d grad_bias", gb, dy.cpu().double().sum((0, 2, 3) if dy.dim() == 4 else (1, 2)))
    assert gw.numel() == 0


# ================================================================== layer_norm
LN_CASES = [  # input shape, normalized_shape
    ((4, 7), (7,)),
    ((3, 1), (1,)),
    ((2, 3, 1024), (1024,)),  # longest warp-per-row
    ((5, 1025), (1025,)),  # block-per-row
    ((2, 4100), (4100,)),
    ((3, 4, 5), (4, 5)),  # multi-dim normalized_shape
    ((300, 33), (33,)),  # many rows: chunked weight/bias grads
]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape,ns", LN_CASES, ids=str)
@pytest.mark.parametrize("affine", ["wb", "w", "none"])
def test_layer_norm_forward_backward(dtype, shape, ns, affine):
    x = (_rand(shape, dtype, seed=18).double() * 3 + 1).to(dtype).requires_grad_()
    w = _rand(ns, dtype, seed=19).requires_grad_() if affine in ("wb", "w") else None
    b = _rand(ns, dtype, seed=20).requires_grad_() if affine == "wb" else None
    out, mean, rstd = ops.layer_norm_forward(x, list(ns), w, b, 1e-5)
    stat_dtype = torch.float64 if dtype == torch.float64 else torch.float32
    assert mean.dtype == stat_dtype and rstd.dtype == stat_dtype
    assert mean.shape == shape[: len(shape) - len(ns)] + (1,) * len(ns)
    x64, w64, b64 = _to64(x, w, b)
    ref = F.layer_norm(x64, ns, w64, b64, 1e-5)
    theirs = F.layer_norm(x, ns, w, b, 1e-5)
    _check("layer_norm", out, theirs, ref)
    dims = tuple(range(len(shape) - len(ns), len(shape)))
    xd = x.detach().cpu().double()
    mu64 = xd.mean(dims, keepdim=True)
    rs64 = 1 / torch.sqrt(xd.var(dims, unbiased=False, keepdim=True) + 1e-5)
    _check("layer_norm mean", mean, mu64.to(stat_dtype), mu64)
    _check("layer_norm rstd", rstd, rs64.to(stat_dtype), rs64)

    dy = _rand(shape, dtype, seed=21)
    params = [t for t in (x, w, b) if t is not None]
    ours_g = torch.autograd.grad(xkernels.layer_norm(x, ns, w, b), params, dy)
    theirs_g = torch.autograd.grad(theirs, params, dy)
    ref_g = torch.autograd.grad(ref, [t for t in (x64, w64, b64) if t is not None], dy.cpu().double())
    for name, o, t, r in zip(("grad_input", "grad_weight", "grad_bias"), ours_g, theirs_g, ref_g):
        _check(f"layer_norm {name}", o, t, r)


# ================================================================== vs the CPU reference backend
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
def test_matches_cpu_reference_backend(dtype):
    """Same inputs through the CUDA kernels and the CPU reference kernels (the oracle)."""
    rtol, atol = between_backends(dtype)
    x, w, b = _rand((33, 47), dtype, seed=24), _rand((21, 47), dtype, 0.2, seed=25), _rand((21,), dtype, seed=26)
    cx, cw, cb, kw = _conv_inputs(CONV_CASES[7], dtype, seed=27)
    lx, lw, lb = _rand((7, 300), dtype, seed=28), _rand((300,), dtype, seed=29), _rand((300,), dtype, seed=30)

    def run(dev):
        t = lambda a: a.to(dev)  # noqa: E731
        lin = xkernels.fused_linear_relu(t(x), t(w), t(b))
        conv = xkernels.conv2d(t(cx), t(cw), t(cb), **kw)
        dy = torch.ones_like(conv)
        cg = ops.conv2d_backward(
            dy,
            t(cx),
            t(cw),
            list(kw["stride"]),
            list(kw["padding"]),
            list(kw["dilation"]),
            kw["groups"],
            [True, True, True],
        )
        ln = ops.layer_norm_forward(t(lx), [300], t(lw), t(lb), 1e-5)
        lg = ops.layer_norm_backward(
            torch.ones_like(ln[0]), t(lx), [300], ln[1], ln[2], t(lw), t(lb), [True, True, True]
        )
        return [lin, conv, *cg, *ln, *lg]

    ours = run(_dev())
    with xkernels.use_backend("reference"):
        ref = run(torch.device("cpu"))
    names = [
        "linear",
        "conv2d",
        "conv gi",
        "conv gw",
        "conv gb",
        "ln out",
        "ln mean",
        "ln rstd",
        "ln gi",
        "ln gw",
        "ln gb",
    ]
    for n, o, r in zip(names, ours, ref):
        torch.testing.assert_close(o.cpu(), r, rtol=rtol, atol=atol, msg=lambda m, n=n: f"{n}: {m}")


# ================================================================== dispatch and selection
def test_dispatch_record_and_selection():
    x, w = _rand((3, 4), torch.float32), _rand((2, 4), torch.float32)
    with xkernels.dispatch_record() as rec:
        xkernels.fused_linear_relu(x, w)
    assert any(op == "fused_linear_relu" and be == "cuda" for (op, be, _dev_), _n in rec.counts().items()), (
        rec.summary()
    )
    with xkernels.use_backend("reference"):
        with pytest.raises(RuntimeError, match="reference backend runs CPU tensors only"):
            xkernels.fused_linear_relu(x, w)
    try:
        ctx = xkernels.use_backend("sycl")
        ctx.__enter__()
    except xkernels.BackendUnavailableError:
        return  # no SYCL at all here: use_backend refuses before any op runs
    try:
        with pytest.raises(RuntimeError, match="oneAPI CUDA plugin"):
            xkernels.layer_norm(x, 4)
    finally:
        ctx.__exit__(None, None, None)


# ================================================================== 64-bit indexing
def test_int64_indexing_layer_norm_and_linear():
    need = 20 * 2**30
    if torch.cuda.get_device_properties(_dev()).total_memory < 3 * need:
        pytest.skip("needs a GPU with > 60 GiB for > 2**31-element tensors")
    d = torch.float16
    rows, n = 2**31 // 1024 + 5, 1024  # 2**31 + 5120 elements
    x = torch.empty((rows, n), dtype=d, device=_dev())
    x[:, :] = torch.arange(n, device=_dev(), dtype=torch.float32).to(d) / n
    x[-1] = _rand((n,), d, seed=60)
    y = xkernels.layer_norm(x, n)
    _check("layer_norm row beyond 2**31", y[-1], F.layer_norm(x[-1:], (n,))[0], F.layer_norm(*_to64(x[-1:]), (n,))[0])
    _check("layer_norm row 0", y[0], F.layer_norm(x[:1], (n,))[0], F.layer_norm(*_to64(x[:1]), (n,))[0])
    del y
    w = _rand((3, n), d, scale=1 / 32, seed=61)
    out = xkernels.fused_linear_relu(x, w)
    _check(
        "fused_linear_relu row beyond 2**31", out[-1], _linear_ref(x[-1], w, None), _linear_ref(*_to64(x[-1], w), None)
    )


# ================================================================== stream ordering
def _stream_cases():
    d = torch.float32
    x, w, b = _rand((64, 96), d, seed=70), _rand((48, 96), d, seed=71), _rand((48,), d, seed=72)
    cx, cw, cb, kw = _conv_inputs(CONV_CASES[4], d, seed=73)
    ln_w = _rand((96,), d, seed=74)
    return [
        ("fused_linear_relu", x, lambda t: xkernels.fused_linear_relu(t, w, b)),
        ("conv2d", cx, lambda t: xkernels.conv2d(t, cw, cb, **kw)),
        ("layer_norm", x, lambda t: xkernels.layer_norm(t, 96, ln_w)),
        (
            "fused_linear_relu_backward",
            x,
            lambda t: torch.autograd.grad(xkernels.fused_linear_relu(t.requires_grad_(), w, b).sum(), t)[0],
        ),
        (
            "conv2d_backward",
            cx,
            lambda t: torch.autograd.grad(xkernels.conv2d(t.requires_grad_(), cw, cb, **kw).sum(), t)[0],
        ),
        (
            "layer_norm_backward",
            x,
            lambda t: torch.autograd.grad((xkernels.layer_norm(t.requires_grad_(), 96, ln_w) ** 2).sum(), t)[0],
        ),
    ]


@pytest.mark.parametrize("index", range(6))
def test_non_default_stream_ordering(index):
    """The kernels must run on torch's current stream: the input is written on a side stream
    after a long GPU sleep, so a kernel launched on any other stream would read the NaNs."""
    name, x, fn = _stream_cases()[index]
    expected = fn(x.clone())
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    staged = torch.full_like(x, float("nan"))
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(100_000_000)  # ~50 ms of spinning on `side` before the input is written
        staged.copy_(x)
        got = fn(staged)
    side.synchronize()
    torch.testing.assert_close(got, expected, msg=lambda m: f"{name} on a non-default stream: {m}")


def test_torch_compile_reduce_overhead_cuda_graphs():
    """Under CUDA graphs every launch must go to the capturing (current) stream; a launch on
    another stream fails the capture or replays stale data."""
    d = torch.float32
    w, b = _rand((32, 64), d, seed=80), _rand((32,), d, seed=81)
    cw, cb = _rand((8, 4, 3, 3), d, seed=82), _rand((8,), d, seed=83)
    ln_w = _rand((32,), d, seed=84)

    def f(x, img):
        h = xkernels.layer_norm(xkernels.fused_linear_relu(x, w, b), 32, ln_w)
        c = xkernels.conv2d(img, cw, cb, padding=1)
        return h.sum(-1), c.mean((1, 2, 3))

    compiled = torch.compile(f, mode="reduce-overhead", fullgraph=True)
    for i in range(4):  # warm-up, record, replays
        x, img = _rand((16, 64), d, seed=90 + i), _rand((2, 4, 10, 10), d, seed=95 + i)
        got = compiled(x, img)
        want = f(x, img)
        for g, e in zip(got, want):
            torch.testing.assert_close(g.clone(), e, msg=lambda m, i=i: f"reduce-overhead call {i}: {m}")
