"""Pre-packed conv2d weights: pack_conv2d_weight + conv2d_packed against conv2d / conv2d_relu and float64 torch,
their errors, and the packed-weight cache of the xkernels.nn convolution modules."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import xkernels
import xkernels.nn as xnn
from xkernels import reference
from xkernels.tolerances import DTYPES, assert_close

import _backends
from compare import randn

# (N, C, H, W, O, KH, KW, stride, padding, dilation, groups): every layout of shapes.h's conv2d_pack_layout
CASES = {
    "narrow": (2, 3, 7, 9, 5, 3, 3, 1, 1, 1, 1),  # lanes over channels, one channel vector
    "wide": (1, 8, 6, 5, 64, 3, 3, 2, 1, 1, 1),  # lanes over channels, 4 channel vectors (>= 48 per group)
    "groups": (2, 6, 9, 8, 9, 3, 2, (1, 2), (2, 0), (1, 2), 3),
    "depthwise": (2, 32, 7, 7, 32, 3, 3, 1, 1, 1, 32),  # lanes over groups
    "pointwise": (2, 16, 5, 6, 24, 1, 1, 1, 0, 1, 1),
    "panels": (1, 8, 5, 4, 200, 3, 3, 1, 1, 1, 1),  # 200 channels: 4 panels of 64, the last one partly padding
    "group_panels": (1, 8, 5, 4, 160, 1, 1, 1, 0, 1, 2),  # 2 groups of 80 output channels: 2 panels each
}


def _tensors(case, dtype):
    N, C, H, W, O, KH, KW, stride, padding, dilation, groups = case
    x = randn(N, C, H, W, dtype=dtype)
    w = randn(O, C // groups, KH, KW, dtype=dtype)
    b = randn(O, dtype=dtype)
    args = (stride, padding, dilation, groups)
    r = randn(*F.conv2d(x, w, b, *args).shape, dtype=dtype)
    return x, w, b, r, args


@pytest.fixture
def cpu_packing_backend(backend):
    if backend.device.type != "cpu":
        pytest.skip(f"packed conv2d weights are for CPU tensors; backend '{backend.name}' runs on {backend.device}")
    return backend


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_packed_equals_unpacked(cpu_packing_backend, dtype, case):
    """The same kernels read the same operand: bit-identical to conv2d / conv2d_relu, and within the
    float64 oracle's budget."""
    x, w, b, r, args = _tensors(case, dtype)
    packed = xkernels.pack_conv2d_weight(w, args[3])
    assert packed.dim() == 1 and packed.dtype == dtype
    with torch.no_grad():
        plain = xkernels.conv2d_packed(x, packed, w.shape, b, *args)
        fused = xkernels.conv2d_packed(x, packed, w.shape, b, *args, residual=r, relu=True)
        fused_nores = xkernels.conv2d_packed(x, packed, w.shape, None, *args, relu=True)
    assert torch.equal(plain, xkernels.conv2d(x, w, b, *args))
    assert torch.equal(fused, xkernels.conv2d_relu(x, w, b, *args, residual=r))
    assert torch.equal(fused_nores, xkernels.conv2d_relu(x, w, None, *args))
    x64, w64, b64, r64 = (t.double() for t in (x, w, b, r))
    assert_close(plain, F.conv2d(x64, w64, b64, *args), dtype, "conv2d_packed")
    assert_close(fused, torch.relu(F.conv2d(x64, w64, b64, *args) + r64), dtype, "conv2d_packed relu")


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_layout_matches_independent_torch_implementation(cpu_packing_backend, dtype, case):
    """The C++ packing equals xkernels.reference's torch-op packing of the documented layout (bit for bit),
    and the torch pseudo-backend's conv2d_packed (which unpacks that layout) gives conv2d's result."""
    x, w, b, r, args = _tensors(case, dtype)
    packed = xkernels.pack_conv2d_weight(w, args[3])
    with reference.torch_ops() as calls:
        packed_t = xkernels.pack_conv2d_weight(w, args[3])
        with torch.no_grad():
            out_t = xkernels.conv2d_packed(x, packed, w.shape, b, *args, residual=r, relu=True)
    assert calls == {"pack_conv2d_weight": 1, "conv2d_packed": 1}
    assert torch.equal(packed, packed_t)
    assert torch.equal(out_t, torch.relu(F.conv2d(x, w, b, *args) + r))


@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel lengths")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_channels_last_unbatched_and_string_padding(cpu_packing_backend, dtype):
    x, w, b, r, args = _tensors(CASES["narrow"], dtype)
    packed = xkernels.pack_conv2d_weight(w)
    with torch.no_grad():
        xc = x.to(memory_format=torch.channels_last)
        out = xkernels.conv2d_packed(xc, packed, w.shape, b, *args)
        assert out.is_contiguous(memory_format=torch.channels_last)
        assert torch.equal(out, xkernels.conv2d(xc, w, b, *args))
        out3 = xkernels.conv2d_packed(x[1], packed, w.shape, b, *args, residual=r[1], relu=True)
        assert torch.equal(out3, xkernels.conv2d_relu(x[1], w, b, *args, residual=r[1]))
        w4 = randn(5, 3, 3, 4, dtype=dtype)  # 'same' with an odd total padding
        same = xkernels.conv2d_packed(x, xkernels.pack_conv2d_weight(w4), w4.shape, None, padding="same")
    assert_close(same, F.conv2d(x.double(), w4.double(), padding="same"), dtype, "conv2d_packed padding='same'")


def test_errors(cpu_packing_backend):
    x, w, b, r, args = _tensors(CASES["narrow"], torch.float32)
    packed = xkernels.pack_conv2d_weight(w)
    with torch.no_grad():
        with pytest.raises(ValueError, match=r"xkernels\.conv2d_packed: argument 'packed_weight' must be what "):
            xkernels.conv2d_packed(x, packed[:-1], w.shape, b, *args)
        with pytest.raises(ValueError, match=r"argument 'packed_weight' must be what pack_conv2d_weight returns"):
            xkernels.conv2d_packed(x, packed, (5, 3, 3, 2), b, *args)
        with pytest.raises(RuntimeError, match=r"argument 'packed_weight' has dtype Double but 'input' has dtype"):
            xkernels.conv2d_packed(x, packed.double(), w.shape, b, *args)
        with pytest.raises(ValueError, match=r"xkernels\.conv2d_packed: argument 'weight_shape' must be 4-D"):
            xkernels.conv2d_packed(x, packed, (5, 3, 3), b, *args)
        with pytest.raises(ValueError, match=r"argument 'residual' needs relu=True"):
            xkernels.conv2d_packed(x, packed, w.shape, b, *args, residual=r)
        with pytest.raises(ValueError, match=r"xkernels\.conv2d_packed: argument 'residual' must have the output's"):
            xkernels.conv2d_packed(x, packed, w.shape, b, *args, residual=r[:, :2], relu=True)
        with pytest.raises(ValueError, match=r"xkernels\.pack_conv2d_weight: argument 'groups'=2 must divide"):
            xkernels.pack_conv2d_weight(w, 2)
        with pytest.raises(ValueError, match=r"xkernels\.pack_conv2d_weight: argument 'weight' must be 4-D"):
            xkernels.pack_conv2d_weight(w[0])
    # not differentiable: an argument that requires grad raises with grad mode on
    with pytest.raises(RuntimeError, match=r"xkernels\.conv2d_packed: not differentiable .* argument 'input'"):
        xkernels.conv2d_packed(x.requires_grad_(), packed, w.shape, b, *args)


def test_opcheck(cpu_packing_backend):
    x, w, b, r, args = _tensors(CASES["groups"], torch.float32)
    stride, padding, dilation = ([v, v] if isinstance(v, int) else list(v) for v in args[:3])
    groups = args[3]
    torch.library.opcheck(torch.ops.xkernels.pack_conv2d_weight.default, (w, groups))
    packed = xkernels.pack_conv2d_weight(w, groups)
    for res, relu in ((None, False), (r, True)):
        torch.library.opcheck(
            torch.ops.xkernels.conv2d_packed.default,
            (x, packed, list(w.shape), b, stride, padding, dilation, groups, res, relu),
        )


# ------------------------------------------------------------------ the modules' cache (SYCL backend)
def _cache(m):
    return m.__dict__.get("_packed_cache")


@pytest.fixture
def sycl_backend():
    be = _backends.get("sycl")
    with xkernels.use_backend(be.name):
        yield be


def test_conv2d_module_cache_used_and_invalidated(sycl_backend):
    torch.manual_seed(0)
    ref = nn.Conv2d(4, 8, 3, padding=1)
    m = xnn.Conv2d.from_conv2d(ref)
    m.pack_weight = True
    x = torch.randn(2, 4, 6, 6)
    with torch.no_grad():
        y = m(x)
        first = _cache(m)
        assert first is not None, "no grad needed on the SYCL backend: the packed copy is used"
        assert torch.equal(y, xkernels.conv2d(x, m.weight, m.bias, 1, 1))
        m(x)
        assert _cache(m)[2] is first[2], "unchanged weight: reused"
        m.weight.add_(0.5)  # in place: the version counter moves
        y = m(x)
        assert _cache(m)[2] is not first[2]
        assert_close(y, F.conv2d(x.double(), m.weight.double(), m.bias.double(), padding=1), torch.float32, "repacked")
        second = _cache(m)
        m.load_state_dict({"weight": torch.randn_like(m.weight), "bias": m.bias.clone()})  # copy_ into the weight
        y = m(x)
        assert _cache(m)[2] is not second[2]
        assert_close(y, F.conv2d(x.double(), m.weight.double(), m.bias.double(), padding=1), torch.float32, "reloaded")
        third = _cache(m)
        m.weight = nn.Parameter(torch.randn_like(m.weight))  # a new Parameter object
        y = m(x)
        assert _cache(m)[2] is not third[2]
        assert_close(y, F.conv2d(x.double(), m.weight.double(), m.bias.double(), padding=1), torch.float32, "new param")
        m.double()  # .to(dtype): the packed copy follows
        y = m(x.double())
        assert y.dtype == torch.float64 and _cache(m)[2].dtype == torch.float64
        m.invalidate_packed_weight()
        assert _cache(m) is None
    # gradients needed: the parameter itself, so the gradient reaches it
    y = m(x.double())
    y.sum().backward()
    assert m.weight.grad is not None and _cache(m) is None


def test_optimize_pack_weights_reaches_convolutions(sycl_backend):
    """optimize(pack_weights=True) on an eval-mode conv-BN-ReLU block with a residual: every convolution
    (folded, with epilogue) packs, and the output matches the unpacked optimized model exactly."""

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1, self.bn1 = nn.Conv2d(8, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8)
            self.conv2, self.bn2 = nn.Conv2d(8, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8)
            self.down = nn.Conv2d(8, 8, 1)

        def forward(self, x):
            y = torch.relu(self.bn1(self.conv1(x)))
            return torch.relu(self.bn2(self.conv2(y)) + self.down(x))

    torch.manual_seed(0)
    model = Block().eval()
    for bn in (model.bn1, model.bn2):
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 2.0)
    x = torch.randn(2, 8, 7, 7)
    plain = xkernels.optimize(model)
    packed = xkernels.optimize(model, pack_weights=True)
    convs = [m for m in packed.modules() if isinstance(m, xnn.Conv2d)]
    assert len(convs) == 3 and all(m.pack_weight for m in convs)
    assert sum(isinstance(m, xnn.Conv2dEpilogue) for m in convs) == 2
    with torch.no_grad():
        out = packed(x)
        assert all(_cache(m) is not None for m in convs)
        assert torch.equal(out, plain(x))
        assert_close(out, model.double()(x.double()), torch.float32, "packed optimized block")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_wide_weight_panels_grad_input(backend, dtype):
    """512 input channels: the grad_input GEMM packs the weight into panels of input channels (8 panels of 64
    on AVX-512, 32 of 16 on AVX2); output and gradients match float64 torch (budgets scaled to the reductions:
    512 x 9 terms per output element, 8 x 9 per grad_input element, 20 pixels per grad_weight element)."""
    x, w, b = randn(1, 512, 4, 5, dtype=dtype), randn(8, 512, 3, 3, dtype=dtype), randn(8, dtype=dtype)
    ours = [t.clone().requires_grad_() for t in (x, w, b)]
    ref = [t.double().requires_grad_() for t in (x, w, b)]
    out, expected = xkernels.conv2d(*ours, padding=1), F.conv2d(*ref, padding=1)
    assert_close(out, expected, dtype, "conv2d[512 channels] output", terms=512 * 9)
    g = randn(*out.shape, dtype=dtype)
    grads = torch.autograd.grad(out, ours, g)
    ref_grads = torch.autograd.grad(expected, ref, g.double())
    for name, got, want, terms in zip(("input", "weight", "bias"), grads, ref_grads, (8 * 9, 20, 20), strict=True):
        assert_close(got, want, dtype, f"conv2d[512 channels] grad of {name}", terms=terms)


def _oracle(m, x, residual=None):
    """float64 torch: relu?(conv2d(x) + residual?) with the module's current weight, bias and geometry."""
    y = F.conv2d(x.double(), m.weight.double(), m.bias.double(), m.stride, m.padding, m.dilation, m.groups)
    if residual is not None:
        y = y + residual.double()
    return torch.relu(y) if getattr(m, "relu", False) else y


def _ops_called(fn):
    """The xkernels/aten op names torch's profiler saw while fn() ran, and fn's result."""
    with torch.profiler.profile() as prof:
        out = fn()
    return {e.key for e in prof.key_averages()}, out


def test_remembered_route_rechecks_what_it_was_chosen_on(sycl_backend):
    """After a call on the packed route, a module remembers it (nn._PackedConvCall) and later calls skip the
    Python that chose it. Every condition of that choice is re-checked per call: each change below must give
    the result the long way gives (float64 oracle, memory format), never the remembered route's stale one."""
    torch.manual_seed(0)
    conv = nn.Conv2d(8, 16, 3, padding=1)
    m = xnn.Conv2dEpilogue.from_conv2d(conv, relu=True)
    m.pack_weight, m.channels_last = True, True
    cl = torch.channels_last
    x = torch.randn(2, 8, 6, 6).contiguous(memory_format=cl)
    r = torch.randn(2, 16, 6, 6).contiguous(memory_format=cl)
    with torch.no_grad():
        first = m(x, r)
        plan = m.__dict__.get("_packed_call")
        assert plan is not None, "the packed route was taken: it is remembered"
        again = m(x, r)
        assert m.__dict__["_packed_call"] is plan
        assert torch.equal(again, first)
        direct = xkernels.ops.conv2d_packed(x, m._packed_weight(x), m.weight.shape, m.bias, 1, 1, 1, 1, r, relu=True)
        assert torch.equal(again, direct), "the remembered route is conv2d_packed with the same arguments"
        assert_close(again, _oracle(m, x, r), torch.float32, "remembered route")

        m.weight.mul_(-1.5)  # in place: the version counter moves
        assert_close(m(x, r), _oracle(m, x, r), torch.float32, "after an in-place weight update")
        m.weight.data = torch.randn_like(m.weight)  # new storage, same Parameter and version
        assert_close(m(x, r), _oracle(m, x, r), torch.float32, "after a .data replacement")
        m.weight = nn.Parameter(torch.randn_like(m.weight))  # a new Parameter (the assignment forgets the plan)
        assert "_packed_call" not in m.__dict__
        assert_close(m(x, r), _oracle(m, x, r), torch.float32, "with a new Parameter")
        m.bias.add_(1.0)  # the bias is read per call, not remembered
        assert_close(m(x, r), _oracle(m, x, r), torch.float32, "after an in-place bias update")

        x2, r2 = x[:1].clone(memory_format=cl), r[:1].clone(memory_format=cl)  # another input shape
        assert_close(m(x2, r2), _oracle(m, x2, r2), torch.float32, "another batch size")
        m(x, r)
        # batch 1 with the remembered batch-2 residual: the long way broadcasts the residual in an unfused add
        assert_close(m(x2, r), _oracle(m, x2, r), torch.float32, "batch 1 input, batch 2 residual")
        m(x, r)
        nchw = x.contiguous()  # the module runs channels_last: the long way converts the input
        y = m(nchw, r)
        assert y.is_contiguous(memory_format=cl)
        assert_close(y, _oracle(m, x, r), torch.float32, "NCHW input to a channels_last module")
        bcast = torch.randn(1, 16, 1, 1)  # not the output's shape: the unfused add broadcasts it
        assert_close(m(x, bcast), _oracle(m, x, bcast), torch.float32, "broadcast residual")
        assert_close(m(x), _oracle(m, x), torch.float32, "no residual")
        with pytest.raises(RuntimeError, match="'weight' has dtype Float but 'input' has dtype Double"):
            m(x.double(), r.double())  # the long way's clear error, not the remembered float32 route

        m(x, r)
        with xkernels.use_backend("reference"):
            called, y = _ops_called(lambda: m(x, r))
        assert "xkernels::conv2d_relu" in called and "xkernels::conv2d_packed" not in called, (
            "another backend: the long way's choice (the unpacked op), not the remembered SYCL route"
        )
        assert_close(y, _oracle(m, x, r), torch.float32, "reference backend")

        m.stride = (2, 2)  # a geometry change (the assignment forgets the plan)
        assert_close(m(x), _oracle(m, x), torch.float32, "stride changed")
        m.stride = (1, 1)
        m(x, r)
        m.pack_weight = False
        called, y = _ops_called(lambda: m(x, r))
        assert "xkernels::conv2d_relu" in called and "xkernels::conv2d_packed" not in called
        assert "_packed_call" not in m.__dict__, "packing off: the op with the weight itself, nothing remembered"
        assert_close(y, _oracle(m, x, r), torch.float32, "packing off")
        m.pack_weight = True
        m(x, r)

        m.weight.requires_grad_(False)  # (.data of an integer type is refused while it requires grad)
        m.weight.data = m.weight.data.view(torch.int32)  # same storage, version and shape; another dtype
        with pytest.raises(RuntimeError, match="'weight' has dtype Int but 'input' has dtype Float"):
            m(x, r)
        m.weight.data = m.weight.data.view(torch.float32)
        m.weight.requires_grad_(True)

        # conv + residual without ReLU: conv2d_epilogue's unfused add, which in bfloat16 rounds twice
        add_only = xnn.Conv2dEpilogue.from_conv2d(nn.Conv2d(8, 16, 3, padding=1).bfloat16(), relu=False)
        add_only.pack_weight = True
        xb, rb = x.bfloat16(), r.bfloat16()
        assert_close(add_only(xb), _oracle(add_only, xb), torch.bfloat16, "epilogue without ReLU")
        unfused = add_only(xb) + rb
        assert torch.equal(add_only(xb, rb), unfused)
        assert_close(unfused, _oracle(add_only, xb, rb), torch.bfloat16, "epilogue without ReLU, residual")

    # grad mode with an input that needs a gradient: the differentiable op, never the inference-only route
    xg = x.clone().requires_grad_()
    y = m(xg, r)
    assert y.requires_grad
    y.sum().backward()
    assert xg.grad is not None and xg.grad.shape == x.shape


@pytest.mark.parametrize("make", ["conv2d", "folded", "linear"])
def test_modules_with_packed_caches_pickle(sycl_backend, make, tmp_path):
    """torch.save(module) after calls that filled the packed-weight caches (which hold weak references) works, and
    the loaded module computes the same result (its caches are rebuilt)."""
    torch.manual_seed(0)
    if make == "linear":
        m, x = xnn.FusedLinearReLU(6, 5, pack_weight=True), torch.randn(24, 6)  # > 16 rows: the packed op
    else:
        m, x = xnn.Conv2d(4, 6, 3, padding=1), torch.randn(2, 4, 5, 5)
        if make == "folded":
            bn = nn.BatchNorm2d(6).eval()
            m = xnn.FoldedConv2d.from_conv_bn(m, bn)
        m.pack_weight = True
    with torch.no_grad():
        y = m(x)
        m(x)
        assert m.__dict__.get("_packed_cache") is not None
        torch.save(m, tmp_path / "m.pt")
        loaded = torch.load(tmp_path / "m.pt", weights_only=False)
        assert "_packed_cache" not in loaded.__dict__ and "_packed_call" not in loaded.__dict__
        assert torch.equal(loaded(x), y)
