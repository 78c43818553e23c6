"""conv2d_relu (relu(conv2d + bias + residual) in one op) against torch in float64, on every backend."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import xkernels
from xkernels.tolerances import DTYPES, assert_close

from compare import check_forward_backward, randn, small_ints
from test_conv2d import Case as ConvCase

CL = torch.channels_last


class Case(ConvCase):
    """test_conv2d's cases, with a residual and the ReLU."""

    def conv_args(self):
        return self.stride, self.padding, self.dilation, self.groups

    def out_shape(self):
        x = torch.empty(self.N, self.C, self.H, self.W, device="meta")
        w = torch.empty(self.O, self.C // self.groups, self.KH, self.KW, device="meta")
        return list(F.conv2d(x, w, None, *self.conv_args()).shape)

    def tensors(self, dtype, with_bias=True, with_residual=True):
        x = randn(self.N, self.C, self.H, self.W, dtype=dtype)
        w = randn(self.O, self.C // self.groups, self.KH, self.KW, dtype=dtype)
        b = randn(self.O, dtype=dtype) if with_bias else None
        r = randn(*self.out_shape(), dtype=dtype) if with_residual else None
        return x, w, b, r

    def ours(self, x, w, b, r=None):
        return xkernels.conv2d_relu(x, w, b, *self.conv_args(), residual=r)

    def oracle(self, x, w, b, r=None):
        y = F.conv2d(x, w, b, *self.conv_args())
        return torch.relu(y if r is None else y + r)


CASES = {
    "basic": Case(2, 3, 7, 9, 4, 3, 3, padding=1),
    "primes_strided_dilated": Case(3, 5, 11, 13, 7, 3, 5, stride=(2, 3), padding=(1, 2), dilation=(2, 1)),
    "groups_asymmetric": Case(2, 6, 9, 8, 9, 3, 2, stride=(1, 2), padding=(2, 0), dilation=(1, 2), groups=3),
    "depthwise": Case(2, 16, 7, 7, 16, 3, 3, padding=1, groups=16),  # SYCL: lanes over groups
    "wide": Case(1, 8, 6, 5, 64, 3, 3, padding=1),  # SYCL: the wide tile (>= 48 channels per group)
    "pointwise_strided": Case(2, 8, 5, 6, 5, 1, 1, stride=2),
    "empty_batch": Case(0, 3, 5, 5, 4, 3, 3, padding=1),
}
NAMES = ("input", "weight", "bias", "residual")


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
@pytest.mark.parametrize("with_residual", [True, False], ids=["residual", "noresidual"])
@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_matches_torch(backend, dtype, case, with_bias, with_residual):
    """Output and the gradients of input, weight, bias and residual, against float64 torch."""
    out, expected = check_forward_backward(
        case.ours, case.oracle, case.tensors(dtype, with_bias, with_residual), NAMES, dtype, "conv2d_relu"
    )
    assert out.is_contiguous()
    if out.numel() > 8:
        assert (expected > 0).any() and (expected == 0).any(), "the ReLU must matter in this case"


@pytest.mark.parametrize("layout", ["input", "weight", "residual", "all"], ids=lambda s: f"channels_last_{s}")
@pytest.mark.parametrize("case", [CASES["basic"], CASES["depthwise"], CASES["wide"]], ids=["basic", "dw", "wide"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_memory_formats(backend, dtype, case, layout):
    """channels_last anywhere: the values, and the output memory format F.conv2d gives (residual's own format
    never changes it)."""
    x, w, b, r = case.tensors(dtype)
    if layout in ("input", "all"):
        x = x.to(memory_format=CL)
    if layout in ("weight", "all"):
        w = w.to(memory_format=CL)
    if layout in ("residual", "all"):
        r = r.to(memory_format=CL)
    out, _ = check_forward_backward(case.ours, case.oracle, [x, w, b, r], NAMES, dtype, f"conv2d_relu[{layout}]")
    torch_out = F.conv2d(x.detach(), w.detach(), b, *case.conv_args())
    assert out.is_contiguous(memory_format=CL) == torch_out.is_contiguous(memory_format=CL)
    assert out.is_contiguous() == torch_out.is_contiguous()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_strided_residual_and_unbatched(backend, dtype):
    case = CASES["basic"]
    x, w, b, _ = case.tensors(dtype)
    shape = case.out_shape()
    r = randn(shape[0], shape[1], shape[2], 2 * shape[3], dtype=dtype)[..., ::2]  # a strided view
    assert not r.is_contiguous()
    check_forward_backward(case.ours, case.oracle, [x, w, b, r], NAMES, dtype, "conv2d_relu[strided residual]")
    # unbatched 3-D input and residual
    check_forward_backward(
        case.ours, case.oracle, [x[0], w, b, randn(*shape[1:], dtype=dtype)], NAMES, dtype, "conv2d_relu[unbatched]"
    )


@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel lengths")
@pytest.mark.parametrize(
    "padding,dilation,kernel", [("same", 1, (3, 4)), ("same", (2, 1), (3, 3)), ("valid", 1, (2, 3))], ids=str
)
def test_string_padding(backend, padding, dilation, kernel):
    """padding='same' (with an odd total: the extra row/column after, as torch) and 'valid'."""
    dtype = torch.float32
    x, w, b = randn(2, 3, 8, 7, dtype=dtype), randn(5, 3, *kernel, dtype=dtype), randn(5, dtype=dtype)
    shape = list(F.conv2d(x, w, b, 1, padding, dilation).shape)
    r = randn(*shape, dtype=dtype)

    def ours(x, w, b, r):
        return xkernels.conv2d_relu(x, w, b, padding=padding, dilation=dilation, residual=r)

    def oracle(x, w, b, r):
        return torch.relu(F.conv2d(x, w, b, 1, padding, dilation) + r)

    check_forward_backward(ours, oracle, [x, w, b, r], NAMES, dtype, f"conv2d_relu[padding={padding}]")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_small_integers_exact(backend, dtype):
    """Integer inputs whose sums are exact in every dtype: bit-identical to float64, ReLU zeros included."""
    x, w = small_ints(2, 4, 6, 6, dtype=dtype), small_ints(8, 4, 3, 3, dtype=dtype)
    b, r = small_ints(8, dtype=dtype), small_ints(2, 8, 6, 6, dtype=dtype)
    out = xkernels.conv2d_relu(x, w, b, padding=1, residual=r)
    expected = torch.relu(F.conv2d(x.double(), w.double(), b.double(), padding=1) + r.double())
    assert torch.equal(out.double(), expected)
    assert (out == 0).any() and (out > 0).any()


def test_nan_and_inf_propagate(backend):
    """relu keeps NaN (as torch.relu): a NaN residual element gives NaN there, -inf gives 0, +inf gives inf."""
    dtype = torch.float32
    x, w, b = randn(1, 2, 5, 5, dtype=dtype), randn(3, 2, 3, 3, dtype=dtype), randn(3, dtype=dtype)
    r = randn(1, 3, 5, 5, dtype=dtype)
    r[0, 0, 1, 1], r[0, 1, 2, 3], r[0, 2, 4, 4] = float("nan"), float("-inf"), float("inf")
    out = xkernels.conv2d_relu(x, w, b, padding=1, residual=r)
    expected = torch.relu(F.conv2d(x.double(), w.double(), b.double(), padding=1) + r.double())
    assert out[0, 0, 1, 1].isnan() and out[0, 1, 2, 3] == 0 and out[0, 2, 4, 4] == float("inf")
    assert_close(out, expected, dtype, "conv2d_relu with NaN/Inf residual")


@pytest.mark.parametrize("with_residual", [True, False], ids=["residual", "noresidual"])
def test_empty_reduction(backend, with_residual):
    """C = 0: relu(bias + residual) everywhere, as torch."""
    x, w, b = torch.empty(2, 0, 4, 4), torch.empty(3, 0, 1, 1), randn(3, dtype=torch.float32)
    r = randn(2, 3, 4, 4, dtype=torch.float32) if with_residual else None
    out = xkernels.conv2d_relu(x, w, b, residual=r)
    expected = b.view(1, 3, 1, 1).expand(2, 3, 4, 4)  # an empty sum is 0 (torch returns no channels here)
    expected = torch.relu(expected if r is None else expected + r)
    assert torch.equal(out, expected)


def test_output_mask(backend):
    """Only the requested gradients are computed; the residual gets the ReLU-masked grad_output."""
    case = CASES["basic"]
    x, w, b, r = case.tensors(torch.float64)
    r.requires_grad_(True)
    out = case.ours(x, w, b, r)
    (gr,) = torch.autograd.grad(out, [r], torch.ones_like(out))
    assert torch.equal(gr, (out > 0).to(gr.dtype))


def _errors():
    x, w = torch.randn(2, 3, 5, 5), torch.randn(4, 3, 3, 3)
    return [
        (
            dict(input=x, weight=w, residual=torch.randn(2, 4, 5, 5)),
            ValueError,
            r"xkernels\.conv2d_relu: argument 'residual' must have the output's shape \[2, 4, 3, 3\], "
            r"got \[2, 4, 5, 5\]",
        ),
        (
            dict(input=x, weight=w, residual=torch.randn(4, 3, 3)),
            ValueError,
            r"argument 'residual' must have the output's shape \[2, 4, 3, 3\], got \[4, 3, 3\]",
        ),
        (
            dict(input=x, weight=w, residual=torch.randn(2, 4, 3, 3, dtype=torch.float64)),
            RuntimeError,
            r"xkernels\.conv2d_relu: argument 'residual' has dtype Double but 'input' has dtype Float",
        ),
        (
            dict(input=x, weight=w, bias=torch.randn(5)),
            ValueError,
            r"xkernels\.conv2d_relu: argument 'bias' must have shape \[4\] \(out_channels\), got \[5\]",
        ),
        (
            dict(input=x, weight=torch.randn(4, 2, 3, 3)),
            ValueError,
            r"xkernels\.conv2d_relu: argument 'weight' has shape \[4, 2, 3, 3\]",
        ),
        (
            dict(input=x, weight=w, padding="full"),
            ValueError,
            r"xkernels\.conv2d_relu: argument 'padding' must be 'same', 'valid' or integers, got 'full'",
        ),
        (
            dict(input=x, weight=w, padding="same", stride=2),
            ValueError,
            r"xkernels\.conv2d_relu: padding='same' is not supported for strided convolutions",
        ),
    ]


@pytest.mark.parametrize("kwargs,exc,match", _errors(), ids=range(len(_errors())))
def test_errors(backend, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        xkernels.conv2d_relu(**kwargs)


def _pair(v):
    return [v, v] if isinstance(v, int) else list(v)


def test_opcheck(backend):
    """torch.library.opcheck: schema, fake (meta) implementation, autograd registration."""
    case = CASES["groups_asymmetric"]
    stride, padding, dilation, groups = case.conv_args()
    for with_residual in (True, False):
        x, w, b, r = case.tensors(torch.float32, with_residual=with_residual)
        args = (x.requires_grad_(), w.requires_grad_(), b, _pair(stride), _pair(padding), _pair(dilation), groups, r)
        torch.library.opcheck(torch.ops.xkernels.conv2d_relu.default, args)


def test_gradcheck(backend):
    case = Case(1, 2, 5, 4, 3, 3, 2, stride=(1, 2), padding=1)
    x, w, b, r = (t.requires_grad_() for t in case.tensors(torch.float64))
    assert torch.autograd.gradcheck(case.ours, (x, w, b, r))


def test_compile(backend):
    """torch.compile(fullgraph=True) traces through the op (its fake) and gives the same result."""
    case = CASES["basic"]
    x, w, b, r = case.tensors(torch.float32)
    compiled = torch.compile(case.ours, fullgraph=True, backend="eager")
    assert torch.equal(compiled(x, w, b, r), case.ours(x, w, b, r))
