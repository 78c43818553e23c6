"""Deferred-wait regions (python/xkernels/_deferred.py, csrc/sycl/launch.h PendingHostWork): optimize(pack_weights=True)
wraps containers that only chain packed convolutions so that their kernels are waited for once, when the container
returns. Checked: the same bits as waiting per convolution (and the float64 oracle's values), that work really is
left queued inside a region, that every other op entry and every long-path convolution waits for it before touching
data, that hooks, swapped-in modules and errors close or skip the region, and the unbalanced-close error."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import xkernels
import xkernels.nn as xnn
from xkernels import _deferred, models
from xkernels.tolerances import against_torch

import _backends

pytestmark = pytest.mark.sycl


@pytest.fixture(autouse=True, scope="module")
def _sycl_available():
    _backends.get("sycl")


@pytest.fixture(autouse=True)
def _sycl():
    with xkernels.use_backend("sycl"):
        yield
    assert not xkernels._C.sycl.host_work_pending(), "a test left kernels queued"


def _resnet(dtype=torch.float32, seed=0):
    torch.manual_seed(seed)
    model = models.ResNet(layers=(2, 1), widths=(8, 16), num_classes=5, stem_channels=16)
    g = torch.Generator().manual_seed(seed + 1)
    models.calibrate_batchnorm(model, torch.randn(4, 3, 64, 64, generator=g))
    x = torch.randn(2, 3, 64, 64, generator=g)
    return model.eval().to(dtype), x.to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_regions_give_the_same_bits(dtype):
    model, x = _resnet(dtype)
    waiting = xkernels.optimize(model, pack_weights=True, defer_waits=False)
    deferred = xkernels.optimize(model, pack_weights=True)
    assert [n for n, m in deferred.named_modules() if m._forward_hooks] == ["layer1", "layer2"]
    assert not any(m._forward_hooks for m in waiting.modules())
    assert not any(m._forward_hooks for m in model.modules()), "the user's model got hooks"
    with torch.no_grad():
        oracle = copy.deepcopy(model).double()(x.double())
        for i in range(3):  # the first call of each convolution goes the long way; later ones defer
            xi = x + i  # a new input each time, deferred first: memory reused from the last call holds other values
            b = deferred(xi)
            assert torch.equal(b, waiting(xi))
        b = deferred(x)
    rtol, atol = against_torch(dtype)
    torch.testing.assert_close(b.double(), oracle, rtol=rtol * 10, atol=atol * 10)


def _block(c=32, size=48):
    """A packed conv -> conv chain with a residual, as optimize() leaves a bottleneck (channels_last)."""
    torch.manual_seed(0)
    first = xnn.Conv2dEpilogue.from_conv2d(nn.Conv2d(c, c, 3, padding=1), relu=True)
    second = xnn.Conv2dEpilogue.from_conv2d(nn.Conv2d(c, c, 1), relu=True)
    for m in (first, second):
        m.pack_weight, m.channels_last = True, True
        m.eval()
    x = torch.randn(2, c, size, size).contiguous(memory_format=torch.channels_last)
    with torch.no_grad():
        first(x), second(first(x), x)  # remember the packed routes
    return first, second, x


def test_work_is_left_queued_inside_a_region():
    first, second, x = _block()
    with torch.no_grad():
        xkernels._C.sycl.defer_waits(True)
        try:
            h = first(x)
            assert xkernels._C.sycl.host_work_pending(), "conv2d_packed waited inside a region"
            y = second(h, x)
            assert xkernels._C.sycl.host_work_pending()
        finally:
            xkernels._C.sycl.defer_waits(False)
        assert not xkernels._C.sycl.host_work_pending()
        assert torch.equal(y, second(first(x), x))


@pytest.mark.parametrize(
    "consumer",
    [
        "layer_norm_of_a_view",  # layer_norm's entry makes the view dense with a host copy
        "reference_backend",  # the oracle reads the data on the host
        "conv2d_relu_strided_residual",  # conv2d_relu's entry: its residual is made dense on the host
        "module_long_path",  # an unpacked xkernels module: torch's format conversion of a strided view
        "strided_residual",  # conv2d_packed itself: its residual is made dense on the host
    ],
)
def test_every_other_entry_waits_first(consumer):
    first, second, x = _block(c=64, size=96)  # a few ms of kernel: a read that does not wait sees unwritten memory
    plain = xnn.Conv2d.from_conv2d(nn.Conv2d(64, 64, 1))
    plain.channels_last = True

    def consume(h):
        if consumer == "layer_norm_of_a_view":
            return xkernels.layer_norm(h.transpose(1, 3), [64])
        if consumer == "reference_backend":
            with xkernels.use_backend("reference"):
                return xkernels.layer_norm(h, [96])
        if consumer == "conv2d_relu_strided_residual":
            return xkernels.conv2d_relu(x, second.weight, second.bias, residual=h.transpose(2, 3))
        if consumer == "module_long_path":
            return plain(h[:, :, ::2, ::2])
        return second(x, h.transpose(2, 3))

    with torch.no_grad():
        for i in range(3):
            # A new input each time, and the region first: a read that does not wait finds the memory of the last
            # call (the pool hands the same blocks back), which holds other values.
            xi = x * (i + 2)
            xkernels._C.sycl.defer_waits(True)
            try:
                got = consume(first(xi))
            finally:
                xkernels._C.sycl.defer_waits(False)
            assert torch.equal(got, consume(first(xi))), consumer


def test_a_hook_added_later_sees_finished_tensors():
    model, x = _resnet()
    opt = xkernels.optimize(model, pack_weights=True)
    seen = []

    def hook(m, args, out):
        seen.append((xkernels._C.sycl.host_work_pending(), out.clone()))

    with torch.no_grad():
        opt(x)
        want = opt(x)
        conv = opt.layer1[1].conv2
        handle = conv.register_forward_hook(hook)
        got = opt(x)
        handle.remove()
        again = opt(x)
    assert torch.equal(got, want) and torch.equal(again, want)
    assert seen and not seen[0][0], "the hook ran with kernels still queued"


def test_a_swapped_in_module_closes_the_region():
    model, x = _resnet()
    opt = xkernels.optimize(model, pack_weights=True)
    with torch.no_grad():
        opt(x)
        block = opt.layer1[1]  # inside layer1's region
        torch_conv = nn.Conv2d(block.conv2.in_channels, block.conv2.out_channels, 3, padding=1)
        torch_conv.weight.copy_(block.conv2.weight)
        torch_conv.bias.copy_(block.conv2.bias)
        block.conv2 = torch_conv  # torch's convolution reads conv1's output on the host
        ref = xkernels.optimize(model, pack_weights=True, defer_waits=False)
        ref.layer1[1].conv2 = torch_conv
        for i in range(2):
            xi = x + i + 1
            assert torch.equal(opt(xi), ref(xi))
        pre = next(iter(opt.layer1._forward_pre_hooks.values()))
        assert not pre.__self__._unchanged(opt.layer1)


def test_an_error_inside_a_region_closes_it():
    model, x = _resnet()
    opt = xkernels.optimize(model, pack_weights=True)
    with torch.no_grad():
        opt(x)
        with pytest.raises(ValueError, match="conv2d"):
            opt.layer1(torch.randn(2, 7, 16, 16).contiguous(memory_format=torch.channels_last))
    with pytest.raises(RuntimeError, match="without a matching defer_waits"):
        xkernels._C.sycl.defer_waits(False)
    assert not _deferred._stack()


def test_no_region_under_grad_or_for_unpacked_models():
    model, x = _resnet()
    assert not any(m._forward_hooks for m in xkernels.optimize(model).modules())  # pack_weights off
    assert not any(m._forward_hooks for m in xkernels.optimize(model.train(), pack_weights=True).modules())
    model.eval()
    opt = xkernels.optimize(model, pack_weights=True)
    with torch.no_grad():
        want = opt(x)
    got = opt(x)  # grad mode: the convolutions go the autograd way, which waits
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_unbalanced_close_is_refused():
    with pytest.raises(RuntimeError, match=r"defer_waits\(False\) without a matching defer_waits\(True\)"):
        xkernels._C.sycl.defer_waits(False)


def test_inplace_models_and_deep_copies_keep_their_regions():
    model, x = _resnet()
    with torch.no_grad():
        waiting = xkernels.optimize(model, pack_weights=True, defer_waits=False)
        inplace = xkernels.optimize(copy.deepcopy(model), inplace=True, pack_weights=True)
        assert [n for n, m in inplace.named_modules() if m._forward_hooks] == ["layer1", "layer2"]
        inplace(x)
        clone = copy.deepcopy(inplace)  # the hooks' regions follow the copied modules
        pre = next(iter(clone.layer1._forward_pre_hooks.values()))
        assert pre.__self__._unchanged(clone.layer1)
        for i, model_ in enumerate((inplace, clone, inplace)):
            xi = x + i + 1  # a new input each time, the regions first (see test_regions_give_the_same_bits)
            assert torch.equal(model_(xi), waiting(xi))


def test_a_global_module_hook_keeps_regions_closed():
    model, x = _resnet()
    opt = xkernels.optimize(model, pack_weights=True)
    seen = []

    def hook(m, args, out):
        if isinstance(m, xnn.Conv2d):
            seen.append(xkernels._C.sycl.host_work_pending())

    with torch.no_grad():
        opt(x)
        handle = nn.modules.module.register_module_forward_hook(hook)
        try:
            opt(x)
        finally:
            handle.remove()
    assert seen and not any(seen), "a global hook ran with kernels still queued"


def test_a_forward_set_on_an_instance_keeps_the_region_closed():
    model, x = _resnet()
    opt = xkernels.optimize(model, pack_weights=True)
    seen = []
    with torch.no_grad():
        opt(x)
        conv = opt.layer1[1].conv1  # after layer1[0]'s convolutions, which a region leaves queued
        inner = conv.forward

        def forward(*args):
            seen.append(xkernels._C.sycl.host_work_pending())
            return inner(*args)

        conv.forward = forward
        opt(x)
    assert seen == [False]
