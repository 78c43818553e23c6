"""Every validation error: the right exception type, and a message naming the op, the argument
and the offending value. Validation is shared by all backends (entry.h / shapes.cpp in eager
mode, the fakes in ops.py for meta/fake tensors), so these run once, on the default backend."""

from __future__ import annotations

import pytest
import torch

import xkernels

ops = torch.ops.xkernels


def r(*shape, **kw):
    return torch.randn(*shape, **kw)


def ints(*shape, dtype=torch.long):
    return torch.ones(*shape, dtype=dtype)


# id -> (call, exception type, substrings the message must contain)
CASES = {
    # ---- fused_linear_relu
    "linear-input-0d": (
        lambda: xkernels.fused_linear_relu(torch.tensor(1.0), r(3, 1)),
        ValueError,
        ["xkernels.fused_linear_relu", "'input'", "0-D"],
    ),
    "linear-weight-rank": (
        lambda: xkernels.fused_linear_relu(r(2, 3), r(1, 4, 3)),
        ValueError,
        ["xkernels.fused_linear_relu", "'weight'", "2-D", "3-D", "[1, 4, 3]"],
    ),
    "linear-K-mismatch": (
        lambda: xkernels.fused_linear_relu(r(2, 3), r(4, 5)),
        ValueError,
        ["xkernels.fused_linear_relu", "'weight'", "[4, 5]", "K=3"],
    ),
    "linear-bias-shape": (
        lambda: xkernels.fused_linear_relu(r(2, 3), r(4, 3), r(5)),
        ValueError,
        ["xkernels.fused_linear_relu", "'bias'", "[4]", "[5]"],
    ),
    "linear-dtype-mismatch": (
        lambda: xkernels.fused_linear_relu(r(2, 3), r(4, 3).double()),
        RuntimeError,
        ["xkernels.fused_linear_relu", "'weight'", "Double", "Float"],
    ),
    "linear-bias-dtype": (
        lambda: xkernels.fused_linear_relu(r(2, 3), r(4, 3), r(4).half()),
        RuntimeError,
        ["xkernels.fused_linear_relu", "'bias'", "Half"],
    ),
    "linear-integer-input": (
        lambda: xkernels.fused_linear_relu(ints(2, 3), ints(4, 3)),
        RuntimeError,
        ["xkernels.fused_linear_relu", "'input'", "Long"],
    ),
    "linear-device-weight": (
        lambda: xkernels.fused_linear_relu(r(2, 3), r(4, 3, device="meta")),
        RuntimeError,
        ["xkernels.fused_linear_relu", "'weight'", "meta", "cpu"],
    ),
    "linear-device-bias": (
        lambda: xkernels.fused_linear_relu(r(2, 3), r(4, 3), r(4, device="meta")),
        RuntimeError,
        ["xkernels.fused_linear_relu", "'bias'", "meta", "cpu"],
    ),
    "linear-backward-grad-shape": (
        lambda: ops.fused_linear_relu_backward(r(2, 5), r(2, 3), r(4, 3), r(2, 4), [True] * 3),
        ValueError,
        ["xkernels.fused_linear_relu_backward", "'grad_output'", "[2, 4]", "[2, 5]"],
    ),
    "linear-backward-output-shape": (
        lambda: ops.fused_linear_relu_backward(r(2, 4), r(2, 3), r(4, 3), r(4, 2), [True] * 3),
        ValueError,
        ["xkernels.fused_linear_relu_backward", "'output'", "[2, 4]", "[4, 2]"],
    ),
    "linear-backward-grad-dtype": (
        lambda: ops.fused_linear_relu_backward(r(2, 4).double(), r(2, 3), r(4, 3), r(2, 4), [True] * 3),
        RuntimeError,
        ["xkernels.fused_linear_relu_backward", "'grad_output'", "Double"],
    ),
    # ---- conv2d
    "conv-input-rank": (
        lambda: xkernels.conv2d(r(3, 4), r(2, 3, 1, 1)),
        ValueError,
        ["xkernels.conv2d", "'input'", "2-D", "[3, 4]"],
    ),
    "conv-weight-rank": (
        lambda: xkernels.conv2d(r(1, 3, 4, 4), r(2, 3, 1)),
        ValueError,
        ["xkernels.conv2d", "'weight'", "4-D", "[2, 3, 1]"],
    ),
    "conv-channel-mismatch": (
        lambda: xkernels.conv2d(r(1, 3, 4, 4), r(2, 4, 1, 1)),
        ValueError,
        ["xkernels.conv2d", "'weight'", "[2, 4, 1, 1]", "[1, 3, 4, 4]"],
    ),
    "conv-stride-zero": (
        lambda: xkernels.conv2d(r(1, 3, 4, 4), r(2, 3, 1, 1), stride=(0, 1)),
        ValueError,
        ["xkernels.conv2d", "'stride'", "[0, 1]"],
    ),
    "conv-stride-negative": (
        lambda: xkernels.conv2d(r(1, 3, 4, 4), r(2, 3, 1, 1), stride=-2),
        ValueError,
        ["xkernels.conv2d", "'stride'", "[-2, -2]"],
    ),
    "conv-stride-length": (
        lambda: xkernels.conv2d(r(1, 3, 4, 4), r(2, 3, 1, 1), stride=(1, 1, 1)),
        ValueError,
        ["xkernels.conv2d", "'stride'", "[1, 1, 1]"],
    ),
    "conv-dilation": (
        lambda: xkernels.conv2d(r(1, 3, 4, 4), r(2, 3, 1, 1), dilation=(1, 0)),
        ValueError,
        ["xkernels.conv2d", "'dilation'", "[1, 0]"],
    ),
    "conv-padding-negative": (
        lambda: xkernels.conv2d(r(1, 3, 4, 4), r(2, 3, 1, 1), padding=(1, -2)),
        ValueError,
        ["xkernels.conv2d", "'padding'", "[1, -2]"],
    ),
    "conv-groups-input-channels": (
        lambda: xkernels.conv2d(r(1, 3, 4, 4), r(2, 1, 1, 1), groups=2),
        ValueError,
        ["xkernels.conv2d", "'groups'=2", "C=3"],
    ),
    "conv-groups-output-channels": (
        lambda: xkernels.conv2d(r(1, 4, 4, 4), r(3, 2, 1, 1), groups=2),
        ValueError,
        ["xkernels.conv2d", "'groups'=2", "=3"],
    ),
    "conv-groups-zero": (
        lambda: xkernels.conv2d(r(1, 4, 4, 4), r(3, 2, 1, 1), groups=0),
        ValueError,
        ["xkernels.conv2d", "'groups'", "0"],
    ),
    "conv-padding-string": (
        lambda: xkernels.conv2d(r(1, 3, 4, 4), r(2, 3, 1, 1), padding="full"),
        ValueError,
        ["xkernels.conv2d", "'padding'", "'full'"],
    ),
    "conv-same-strided": (
        lambda: xkernels.conv2d(r(1, 3, 4, 4), r(2, 3, 3, 3), stride=(1, 2), padding="same"),
        ValueError,
        ["xkernels.conv2d", "padding='same'", "stride", "[1, 2]"],
    ),
    "conv-kernel-too-large": (
        lambda: xkernels.conv2d(r(1, 3, 4, 4), r(2, 3, 6, 3)),
        ValueError,
        ["xkernels.conv2d", "'weight'", "(6, 3)", "(4, 4)"],
    ),
    "conv-bias-shape": (
        lambda: xkernels.conv2d(r(1, 3, 4, 4), r(2, 3, 1, 1), r(3)),
        ValueError,
        ["xkernels.conv2d", "'bias'", "[2]", "[3]"],
    ),
    "conv-integer-input": (
        lambda: xkernels.conv2d(ints(1, 3, 4, 4, dtype=torch.int32), ints(2, 3, 1, 1, dtype=torch.int32)),
        RuntimeError,
        ["xkernels.conv2d", "'input'", "Int"],
    ),
    "conv-dtype-mismatch": (
        lambda: xkernels.conv2d(r(1, 3, 4, 4), r(2, 3, 1, 1).half()),
        RuntimeError,
        ["xkernels.conv2d", "'weight'", "Half", "Float"],
    ),
    "conv-device-weight": (
        lambda: xkernels.conv2d(r(1, 3, 4, 4), r(2, 3, 1, 1, device="meta")),
        RuntimeError,
        ["xkernels.conv2d", "'weight'", "meta", "cpu"],
    ),
    "conv-device-bias": (
        lambda: xkernels.conv2d(r(1, 3, 4, 4), r(2, 3, 1, 1), r(2, device="meta")),
        RuntimeError,
        ["xkernels.conv2d", "'bias'", "meta", "cpu"],
    ),
    "conv-backward-grad-shape": (
        lambda: ops.conv2d_backward(r(1, 2, 3, 3), r(1, 3, 4, 4), r(2, 3, 1, 1), [1, 1], [0, 0], [1, 1], 1, [True] * 3),
        ValueError,
        ["xkernels.conv2d_backward", "'grad_output'", "[1, 2, 4, 4]", "[1, 2, 3, 3]"],
    ),
    # ---- layer_norm
    "ln-normalized-shape-mismatch": (
        lambda: xkernels.layer_norm(r(2, 3), [4]),
        ValueError,
        ["xkernels.layer_norm", "'normalized_shape'", "[4]", "[2, 3]"],
    ),
    "ln-normalized-shape-too-long": (
        lambda: xkernels.layer_norm(r(3), [1, 3]),
        ValueError,
        ["xkernels.layer_norm", "'normalized_shape'", "[1, 3]", "[3]"],
    ),
    "ln-normalized-shape-empty": (
        lambda: xkernels.layer_norm(r(2, 3), []),
        ValueError,
        ["xkernels.layer_norm", "'normalized_shape'", "[]"],
    ),
    "ln-weight-shape": (
        lambda: xkernels.layer_norm(r(2, 3), [3], r(4)),
        ValueError,
        ["xkernels.layer_norm", "'weight'", "[3]", "[4]"],
    ),
    "ln-bias-shape": (
        lambda: xkernels.layer_norm(r(2, 3), [3], None, r(2, 3)),
        ValueError,
        ["xkernels.layer_norm", "'bias'", "[3]", "[2, 3]"],
    ),
    "ln-dtype-mismatch": (
        lambda: xkernels.layer_norm(r(2, 3), [3], r(3).double()),
        RuntimeError,
        ["xkernels.layer_norm", "'weight'", "Double", "Float"],
    ),
    "ln-integer-input": (
        lambda: xkernels.layer_norm(ints(2, 3), [3]),
        RuntimeError,
        ["xkernels.layer_norm", "'input'", "Long"],
    ),
    "ln-device-weight": (
        lambda: xkernels.layer_norm(r(2, 3), [3], r(3, device="meta")),
        RuntimeError,
        ["xkernels.layer_norm", "'weight'", "meta", "cpu"],
    ),
    "ln-device-bias": (
        lambda: xkernels.layer_norm(r(2, 3), [3], None, r(3, device="meta")),
        RuntimeError,
        ["xkernels.layer_norm", "'bias'", "meta", "cpu"],
    ),
    "ln-out-dtype": (
        lambda: xkernels.layer_norm(r(2, 3), [3], out=r(2, 3).double()),
        RuntimeError,
        ["xkernels.layer_norm", "'out'", "Double", "Float"],
    ),
    "ln-out-device": (
        lambda: xkernels.layer_norm(r(2, 3), [3], out=r(2, 3, device="meta")),
        RuntimeError,
        ["xkernels.layer_norm", "'out'", "meta", "cpu"],
    ),
    "ln-out-shape": (
        lambda: xkernels.layer_norm(r(2, 3), [3], out=r(3, 2)),
        ValueError,
        ["xkernels.layer_norm", "'out'", "[2, 3]", "[3, 2]", "not resized"],
    ),
    "ln-out-empty-not-resized": (
        lambda: xkernels.layer_norm(r(2, 3), [3], out=r(0)),
        ValueError,
        ["xkernels.layer_norm", "'out'", "[2, 3]", "[0]"],
    ),
    "ln-out-internal-overlap": (
        lambda: xkernels.layer_norm(r(2, 3), [3], out=r(1, 3).expand(2, 3)),
        RuntimeError,
        ["xkernels.layer_norm", "'out'", "[0, 1]", "share memory"],
    ),
    "ln-out-overlaps-input": (
        lambda: (lambda s: xkernels.layer_norm(s[:6].view(2, 3), [3], out=s[3:].view(2, 3)))(r(9)),
        RuntimeError,
        ["xkernels.layer_norm", "'out'", "partially overlaps argument 'input'", "offset 3"],
    ),
    "ln-out-overlaps-weight": (
        lambda: (lambda s: xkernels.layer_norm(r(2, 3), [3], s[:3], out=s[1:].view(2, 3)))(r(7)),
        RuntimeError,
        ["xkernels.layer_norm", "'out'", "partially overlaps argument 'weight'"],
    ),
    "ln-out-overlaps-bias": (
        lambda: (lambda s: xkernels.layer_norm(r(2, 3), [3], None, s[4:7], out=s[:6].view(2, 3)))(r(7)),
        RuntimeError,
        ["xkernels.layer_norm", "'out'", "partially overlaps argument 'bias'"],
    ),
    "ln-out-requires-grad": (
        lambda: xkernels.layer_norm(r(2, 3, requires_grad=True), [3], out=r(2, 3)),
        RuntimeError,
        ["xkernels.layer_norm", "out=", "automatic differentiation", "'input'"],
    ),
    "ln-backward-stats": (
        lambda: ops.layer_norm_backward(r(2, 3), r(2, 3), [3], r(3), r(2), None, None, [True] * 3),
        ValueError,
        ["xkernels.layer_norm_backward", "'mean'", "[3]"],
    ),
    "ln-backward-grad-shape": (
        lambda: ops.layer_norm_backward(r(3, 3), r(2, 3), [3], r(2), r(2), None, None, [True] * 3),
        ValueError,
        ["xkernels.layer_norm_backward", "'grad_output'", "[2, 3]", "[3, 3]"],
    ),
}


@pytest.mark.parametrize("call,exc,parts", CASES.values(), ids=CASES.keys())
def test_error_names_op_argument_and_value(call, exc, parts):
    with pytest.raises(exc) as info:
        call()
    msg = str(info.value)
    for part in parts:
        assert part in msg, f"{part!r} missing from the message: {msg}"


# With every tensor on 'meta' (or fake), the fakes in ops.py validate: the same errors, in
# Python's spelling of values (torch.float64 rather than Double), as torch._check RuntimeErrors.
META_CASES = {
    "linear-K-mismatch": (
        lambda m: xkernels.fused_linear_relu(m(2, 3), m(4, 5)),
        ["xkernels.fused_linear_relu", "'weight'", "K=3"],
    ),
    "linear-dtype-mismatch": (
        lambda m: xkernels.fused_linear_relu(m(2, 3), m(4, 3).double()),
        ["xkernels.fused_linear_relu", "'weight'", "torch.float64"],
    ),
    "linear-integer-input": (
        lambda m: xkernels.fused_linear_relu(m(2, 3).long(), m(4, 3).long()),
        ["xkernels.fused_linear_relu", "'input'", "torch.int64"],
    ),
    "conv-stride": (
        lambda m: xkernels.conv2d(m(1, 3, 4, 4), m(2, 3, 1, 1), stride=(0, 1)),
        ["xkernels.conv2d", "'stride'", "[0, 1]"],
    ),
    "conv-groups": (
        lambda m: xkernels.conv2d(m(1, 3, 4, 4), m(2, 1, 1, 1), groups=2),
        ["xkernels.conv2d", "'groups'=2", "C=3"],
    ),
    "conv-dtype-mismatch": (
        lambda m: xkernels.conv2d(m(1, 3, 4, 4), m(2, 3, 1, 1).half()),
        ["xkernels.conv2d", "'weight'", "torch.float16"],
    ),
    "conv-bias-dtype": (
        lambda m: xkernels.conv2d(m(1, 3, 4, 4), m(2, 3, 1, 1), m(2).double()),
        ["xkernels.conv2d", "'bias'", "torch.float64"],
    ),
    "ln-normalized-shape": (
        lambda m: xkernels.layer_norm(m(2, 3), [4]),
        ["xkernels.layer_norm", "'normalized_shape'", "[4]"],
    ),
    "ln-weight-dtype": (
        lambda m: xkernels.layer_norm(m(2, 3), [3], m(3).half()),
        ["xkernels.layer_norm", "'weight'", "torch.float16"],
    ),
    "ln-out-dtype": (
        lambda m: xkernels.layer_norm(m(2, 3), [3], out=m(2, 3).half()),
        ["xkernels.layer_norm", "'out'", "torch.float16"],
    ),
    "ln-out-shape": (
        lambda m: xkernels.layer_norm(m(2, 3), [3], out=m(2, 4)),
        ["xkernels.layer_norm", "'out'", "[2, 3]", "[2, 4]"],
    ),
}


@pytest.mark.parametrize("call,parts", META_CASES.values(), ids=META_CASES.keys())
def test_meta_tensor_errors(call, parts):
    with pytest.raises((RuntimeError, ValueError)) as info:
        call(lambda *shape: torch.empty(*shape, device="meta"))
    msg = str(info.value)
    for part in parts:
        assert part in msg, f"{part!r} missing from the message: {msg}"


def test_valid_meta_call_gives_meta_output():
    """The counterpart of the meta errors: valid meta inputs give meta outputs of the right shape."""
    m = lambda *s: torch.empty(*s, device="meta")  # noqa: E731
    assert xkernels.fused_linear_relu(m(2, 3), m(4, 3), m(4)).shape == (2, 4)
    out = xkernels.conv2d(m(2, 3, 5, 5), m(4, 3, 3, 3), None, stride=2, padding=1)
    assert out.device.type == "meta" and out.shape == (2, 4, 3, 3)
    assert xkernels.layer_norm(m(2, 3), [3]).device.type == "meta"
    out = m(2, 3)
    assert xkernels.layer_norm(m(2, 3), [3], out=out) is out
