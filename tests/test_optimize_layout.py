"""xkernels.optimize(..., memory_format=...): a conv network runs channels_last end to end (the input converted
once, at the first convolution; every later convolution, epilogue and the torch ops between them keep NHWC), or
keeps the format its input comes in; the choice of "auto"; the same numbers either way, in eval and train mode;
the user's model untouched; bad values refused."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import xkernels
import xkernels.nn as xnn
from xkernels import models
from xkernels.tolerances import against_torch

RTOL, ATOL = against_torch(torch.float32)


def _net(seed=0):
    """A small ResNet (stem conv, max-pool, bottlenecks with projection shortcuts, average pool, linear) made
    on the CPU, then moved to the backend's device, and an NCHW input."""
    device = torch.get_default_device()
    with torch.device("cpu"):
        torch.manual_seed(seed)
        model = models.ResNet(layers=(1, 1), widths=(4, 8), num_classes=5, stem_channels=8)
        g = torch.Generator().manual_seed(seed + 1)
        models.calibrate_batchnorm(model, torch.randn(4, 3, 32, 32, generator=g))
        x = torch.randn(2, 3, 32, 32, generator=g)
    return model.to(device), x.to(device)


def _conv_inputs(model, x, grad=False):
    """Runs `model(x)`; returns the output and, per xkernels convolution in call order, whether its input and
    its output were channels_last (4-D tensors with more than one channel and pixel, so the two formats differ)."""
    seen = []

    def pre(m, args):
        seen.append([args[0].is_contiguous(memory_format=torch.channels_last), None])

    def post(m, args, out):
        seen[-1][1] = out.is_contiguous(memory_format=torch.channels_last)

    convs = [m for m in model.modules() if isinstance(m, xnn.Conv2d)]
    handles = [m.register_forward_pre_hook(pre) for m in convs] + [m.register_forward_hook(post) for m in convs]
    try:
        with torch.set_grad_enabled(grad):
            out = model(x)
    finally:
        for h in handles:
            h.remove()
    return out, seen


@pytest.mark.parametrize("train", [False, True], ids=["eval", "train"])
def test_channels_last_end_to_end(backend, train):
    """channels_last: only the first convolution gets an NCHW input (the model's); every convolution's output,
    and so every later convolution's input after BatchNorm, ReLU, max-pool and residual additions, is NHWC; the
    output equals torch's NCHW model within float32's budget, and in train mode so do the gradients."""
    model, x = _net()
    model.train(train)
    ref_model = copy.deepcopy(model)
    opt = xkernels.optimize(model, memory_format="channels_last")
    out, seen = _conv_inputs(opt, x, grad=train)
    assert len(seen) >= 6
    assert seen[0][0] is False, "the model's input arrives NCHW"
    assert all(inp for inp, _ in seen[1:]), f"a later convolution got an input in another format: {seen}"
    assert all(o for _, o in seen), f"a convolution's output was not channels_last: {seen}"
    want = ref_model(x)
    torch.testing.assert_close(out, want, rtol=RTOL, atol=ATOL)
    if train:
        out.square().sum().backward()
        want.square().sum().backward()
        for (name, p), q in zip(opt.named_parameters(), ref_model.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=RTOL, atol=ATOL * 10, msg=f"grad of {name}")


def test_preserve_keeps_the_input_format(backend):
    """preserve: NCHW in, NCHW all the way (no convolution converts); channels_last in, channels_last all the
    way; the same numbers as channels_last."""
    model, x = _net()
    model.eval()
    opt = xkernels.optimize(model, memory_format="preserve")
    assert not any(getattr(m, "channels_last", False) for m in opt.modules())
    out, seen = _conv_inputs(opt, x)
    assert not any(i or o for i, o in seen), seen
    out_cl, seen_cl = _conv_inputs(opt, x.contiguous(memory_format=torch.channels_last))
    assert all(i and o for i, o in seen_cl), seen_cl
    cl = xkernels.optimize(model, memory_format=torch.channels_last)
    out2 = cl(x)
    torch.testing.assert_close(out, out2, rtol=RTOL, atol=ATOL)
    torch.testing.assert_close(out_cl, out2, rtol=RTOL, atol=ATOL)


def test_float64_stays_contiguous(backend):
    """ATen computes float64 convolutions contiguous (CPU and cuDNN): channels_last does not convert them, so
    no layer pays a copy back and forth."""
    model, x = _net()
    model = model.double().eval()
    opt = xkernels.optimize(model, memory_format="channels_last")
    out, seen = _conv_inputs(opt, x.double())
    assert not any(i for i, _ in seen), seen
    torch.testing.assert_close(out, model(x.double()), rtol=1e-10, atol=1e-12)


def test_auto_choice_and_the_user_model_untouched():
    """auto: channels_last for a CPU network (two or more convolutions); a single convolution and a model
    without convolutions are left as they are. The user's model (including an xkernels.nn.Conv2d of its own)
    is never changed, and the new modules say channels_last in their repr."""
    own = xnn.Conv2d(4, 4, 1)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), own, nn.Conv2d(4, 4, 3), nn.ReLU())
    opt = xkernels.optimize(model)
    made = [m for m in opt.modules() if isinstance(m, xnn.Conv2d) and m is not own]
    assert len(made) == 2 and all(m.channels_last for m in made)
    assert "channels_last=True" in repr(made[0])
    assert own.channels_last is False, "the user's own xkernels.nn.Conv2d was changed"
    assert not any(getattr(m, "channels_last", False) for m in model.modules())
    x = torch.randn(1, 3, 9, 9)
    torch.testing.assert_close(opt(x), model(x), rtol=RTOL, atol=ATOL)
    single = xkernels.optimize(nn.Conv2d(3, 4, 3))
    assert isinstance(single, xnn.Conv2d) and not single.channels_last
    assert xkernels.optimize(nn.Conv2d(3, 4, 3), memory_format="channels_last").channels_last
    kept = xkernels.optimize(model, memory_format="preserve")
    assert not any(getattr(m, "channels_last", False) for m in kept.modules())


@pytest.mark.parametrize("bad", ["nhwc", torch.contiguous_format, None, 1])
def test_bad_memory_format(bad):
    with pytest.raises(ValueError, match=r"xkernels\.optimize: argument 'memory_format' .* got " + repr(bad)[:4]):
        xkernels.optimize(nn.Sequential(nn.Conv2d(3, 4, 3), nn.Conv2d(4, 4, 3)), memory_format=bad)
