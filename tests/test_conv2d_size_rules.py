"""conv2d's "dilated kernel larger than the padded input" rule, one dimension at a time.

The rule is eff_k = dilation * (k - 1) + 1 <= size + 2 * padding, checked separately for the height
(index 0) and the width (index 1). Every case below breaks (or just meets) it in ONE dimension only:
a kernel too wide but not too tall, too wide only after dilation[1], fitting only thanks to padding[1],
and the same for the height. PyTorch's own F.conv2d / nn.Conv2d decides whether a case is an error; an
xkernels op must raise exactly then (ValueError, naming the op and the argument), and otherwise return
PyTorch's result. Checked for conv2d, conv2d_relu, conv2d_packed, the nn modules, and the fakes
(FakeTensorMode: the meta-shape rule of ops.py).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode

import xkernels
from xkernels.tolerances import assert_close

# id -> (input [C, H, W] or [N, C, H, W], kernel (KH, KW), stride, padding, dilation)
CASES = {
    # width alone
    "too-wide": ((1, 3, 4, 4), (1, 5), 1, 0, 1),
    "wide-fits-exactly": ((1, 3, 4, 4), (1, 4), 1, 0, 1),
    "too-wide-after-dilation1": ((1, 3, 4, 4), (1, 3), 1, 0, (1, 2)),
    "dilation0-does-not-widen": ((1, 3, 4, 4), (1, 3), 1, 0, (2, 1)),
    "wide-fits-with-padding1": ((1, 3, 4, 4), (1, 5), 1, (0, 1), 1),
    "too-wide-padding0-only": ((1, 3, 4, 4), (1, 5), 1, (1, 0), 1),
    "too-wide-unbatched": ((3, 4, 4), (1, 5), 1, 0, 1),
    "too-wide-strided": ((1, 3, 6, 4), (2, 5), (2, 1), 0, 1),
    "wide-fits-strided": ((1, 3, 6, 5), (2, 3), (2, 1), 0, 1),
    # height alone
    "too-tall": ((1, 3, 4, 4), (5, 1), 1, 0, 1),
    "tall-fits-exactly": ((1, 3, 4, 4), (4, 1), 1, 0, 1),
    "too-tall-after-dilation0": ((1, 3, 4, 4), (3, 1), 1, 0, (2, 1)),
    "dilation1-does-not-heighten": ((1, 3, 4, 4), (3, 1), 1, 0, (1, 2)),
    "tall-fits-with-padding0": ((1, 3, 4, 4), (5, 1), 1, (1, 0), 1),
    "too-tall-padding1-only": ((1, 3, 4, 4), (5, 1), 1, (0, 1), 1),
    "too-tall-unbatched": ((3, 4, 4), (5, 1), 1, 0, 1),
    "tall-fits-strided": ((1, 3, 5, 6), (3, 2), (1, 2), 0, 1),
    # both at the boundary (non-square input, dilation and padding per dimension)
    "both-exact": ((2, 2, 4, 5), (2, 3), 1, 0, (3, 2)),
    "both-exact-padded": ((2, 2, 3, 3), (3, 3), 1, (1, 1), (2, 2)),
    "height-one-over": ((2, 2, 4, 5), (2, 3), 1, 0, (4, 2)),
    "width-one-over": ((2, 2, 4, 5), (2, 3), 1, 0, (3, 3)),
}


def _pair(v):
    return tuple(v) if isinstance(v, tuple) else (v, v)


def _tensors(case, dtype=torch.float32, O=2):
    in_shape, (KH, KW), stride, padding, dilation = case
    C = in_shape[-3]
    x = torch.randn(in_shape, dtype=dtype)
    w = torch.randn(O, C, KH, KW, dtype=dtype)
    b = torch.randn(O, dtype=dtype)
    return x, w, b, dict(stride=_pair(stride), padding=_pair(padding), dilation=_pair(dilation))


def _torch_outcome(fn):
    """(raised, result): PyTorch's verdict on the case."""
    try:
        return False, fn()
    except RuntimeError:
        return True, None


def _expect_same_verdict(name, torch_fn, ours_fn, check_value=None, arg="weight"):
    raised, expected = _torch_outcome(torch_fn)
    if raised:
        with pytest.raises(ValueError) as info:
            ours_fn()
        msg = str(info.value)
        assert f"xkernels.{name}" in msg and f"'{arg}'" in msg and "larger than the padded input" in msg, msg
    else:
        got = ours_fn()
        assert got.shape == expected.shape, f"{name}: shape {tuple(got.shape)}, PyTorch {tuple(expected.shape)}"
        if check_value is not None:
            check_value(got, expected)


def test_cases_break_one_dimension_each():
    """The table really is per dimension: PyTorch rejects exactly the cases named too-*/-over and accepts
    the others (so a height-only or width-only check is told apart from the full rule)."""
    for cid, case in CASES.items():
        x, w, b, args = _tensors(case)
        raised, _ = _torch_outcome(lambda: F.conv2d(x, w, b, **args))
        assert raised == (cid.startswith("too-") or cid.endswith("-over")), cid


@pytest.mark.parametrize("cid", list(CASES))
def test_conv2d(backend, cid):
    x, w, b, args = _tensors(CASES[cid])
    _expect_same_verdict(
        "conv2d",
        lambda: F.conv2d(x.double(), w.double(), b.double(), **args),
        lambda: xkernels.conv2d(x, w, b, **args),
        lambda got, exp: assert_close(got, exp, torch.float32, f"conv2d {cid}"),
    )


@pytest.mark.parametrize("cid", list(CASES))
def test_conv2d_relu(backend, cid):
    x, w, b, args = _tensors(CASES[cid])
    _expect_same_verdict(
        "conv2d_relu",
        lambda: torch.relu(F.conv2d(x.double(), w.double(), b.double(), **args)),
        lambda: xkernels.conv2d_relu(x, w, b, **args),
        lambda got, exp: assert_close(got, exp, torch.float32, f"conv2d_relu {cid}"),
    )


@pytest.mark.parametrize("cid", list(CASES))
def test_conv2d_relu_with_residual_and_grad(backend, cid):
    """The rule holds on the autograd path too (inputs requiring grad, a residual)."""
    x, w, b, args = _tensors(CASES[cid])
    x.requires_grad_(True)
    w.requires_grad_(True)

    def ours():
        y = xkernels.conv2d(x, w, b, **args)  # the output's shape, for the residual (raises first if invalid)
        return xkernels.conv2d_relu(x, w, b, **args, residual=torch.zeros_like(y))

    _expect_same_verdict("conv2d", lambda: F.conv2d(x.detach(), w.detach(), b, **args), ours)


@pytest.mark.parametrize("relu", [False, True], ids=["conv2d", "relu"])
@pytest.mark.parametrize("cid", list(CASES))
def test_conv2d_packed(cpu_backend, cid, relu):
    x, w, b, args = _tensors(CASES[cid])
    packed = xkernels.pack_conv2d_weight(w)
    ref = (lambda: torch.relu(F.conv2d(x, w, b, **args))) if relu else (lambda: F.conv2d(x, w, b, **args))
    _expect_same_verdict(
        "conv2d_packed",
        ref,
        lambda: xkernels.conv2d_packed(x, packed, w.shape, b, **args, relu=relu),
        lambda got, exp: assert_close(got, exp.double(), torch.float32, f"conv2d_packed {cid}"),
        arg="weight_shape",
    )


def _module_pair(case, relu):
    in_shape, (KH, KW), stride, padding, dilation = case
    C = in_shape[-3]
    kw = dict(stride=_pair(stride), padding=_pair(padding), dilation=_pair(dilation))
    ref = torch.nn.Conv2d(C, 2, (KH, KW), **kw)
    if relu:
        ours = xkernels.nn.Conv2dEpilogue.from_conv2d(ref, relu=True)
    else:
        ours = xkernels.nn.Conv2d(C, 2, (KH, KW), **kw)
        ours.load_state_dict(ref.state_dict())
    return ref, ours


@pytest.mark.parametrize("relu", [False, True], ids=["Conv2d", "Conv2dEpilogue"])
@pytest.mark.parametrize("cid", list(CASES))
def test_nn_modules(backend, cid, relu):
    ref, ours = _module_pair(CASES[cid], relu)
    x = torch.randn(CASES[cid][0])
    with torch.no_grad():
        _expect_same_verdict(
            "conv2d_relu" if relu else "conv2d",
            (lambda: torch.relu(ref(x))) if relu else (lambda: ref(x)),
            lambda: ours(x),
            lambda got, exp: assert_close(got, exp.double(), torch.float32, f"module {cid}"),
        )


@pytest.mark.parametrize("cid", list(CASES))
def test_fakes(cid):
    """The register_fake rule (torch.compile / export shapes) agrees with PyTorch per dimension."""
    x, w, b, args = _tensors(CASES[cid])
    raised, expected = _torch_outcome(lambda: F.conv2d(x, w, b, **args))
    with FakeTensorMode() as mode:
        fx, fw, fb = (mode.from_tensor(t) for t in (x, w, b))
        for op in (torch.ops.xkernels.conv2d, torch.ops.xkernels.conv2d_relu):
            if raised:
                with pytest.raises(RuntimeError, match="larger than the padded input"):
                    op(fx, fw, fb, args["stride"], args["padding"], args["dilation"], 1)
            else:
                got = op(fx, fw, fb, args["stride"], args["padding"], args["dilation"], 1)
                assert got.shape == expected.shape, (op, cid)


# stride / dilation must be positive and padding non-negative in EACH dimension: the bad value in the
# second element only (the first element alone is covered by tests/test_validation.py).
BAD_ARGS = {
    "stride-w-zero": (dict(stride=(1, 0)), "stride"),
    "stride-w-negative": (dict(stride=(2, -1)), "stride"),
    "dilation-w-zero": (dict(dilation=(1, 0)), "dilation"),
    "padding-w-minus-one": (dict(padding=(0, -1)), "padding"),
    "stride-h-zero": (dict(stride=(0, 1)), "stride"),
    "padding-h-minus-one": (dict(padding=(-1, 0)), "padding"),
}


@pytest.mark.parametrize("bad", list(BAD_ARGS))
@pytest.mark.parametrize("op", ["conv2d", "conv2d_relu", "torch.ops.conv2d", "torch.ops.conv2d_relu"])
def test_argument_rules_per_dimension(backend, op, bad):
    kwargs, arg = BAD_ARGS[bad]
    x, w, b = torch.randn(1, 3, 5, 5), torch.randn(2, 3, 1, 1), torch.randn(2)
    with pytest.raises(RuntimeError):  # PyTorch rejects every one of them
        F.conv2d(x, w, b, **kwargs)
    args = dict(stride=(1, 1), padding=(0, 0), dilation=(1, 1)) | kwargs
    if op.startswith("torch.ops."):  # the C++ checks directly, without the Python wrapper's
        fn = getattr(torch.ops.xkernels, op.removeprefix("torch.ops."))
        call = lambda: fn(x, w, b, args["stride"], args["padding"], args["dilation"], 1)  # noqa: E731
    else:
        call = lambda: getattr(xkernels, op)(x, w, b, **args)  # noqa: E731
    with pytest.raises(ValueError, match=rf"xkernels\.conv2d(_relu)?: argument '{arg}'"):
        call()
