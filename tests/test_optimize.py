"""xkernels.optimize() for inference and training: BatchNorm folding (eval mode), the refusal to train a
folded model, exact BatchNorm semantics in train mode, and the conv-epilogue pattern pass (matching,
rewrite, and the single conv2d_epilogue plug-in point)."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import xkernels
import xkernels.nn as xnn
from xkernels import models
from xkernels.parity import tensor_error
from xkernels.tolerances import MODEL_AGAINST_TORCH, against_torch

# Rewritten modules (folded BatchNorm, conv epilogues) against the torch modules they replace, float32.
RTOL, ATOL = against_torch(torch.float32)


def _small_resnet(seed=0):
    """A ResNet-style model (stem, two stages of two bottlenecks, projection shortcuts) for 32x32 inputs, with
    calibrated (non-trivial) BatchNorm statistics and affine parameters. Made on the CPU (the same values
    whatever the backend), then moved to torch's default device (the backend's, under the fixture)."""
    device = torch.get_default_device()
    with torch.device("cpu"):
        torch.manual_seed(seed)
        model = models.ResNet(layers=(2, 2), widths=(4, 8), num_classes=10, stem_channels=8)
        g = torch.Generator().manual_seed(seed + 1)
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                with torch.no_grad():
                    m.weight.uniform_(0.5, 1.5, generator=g)
                    m.bias.normal_(0, 0.2, generator=g)
        models.calibrate_batchnorm(model, torch.randn(8, 3, 32, 32, generator=g))
        x = torch.randn(4, 3, 32, 32, generator=g)
    return model.to(device), x.to(device)


def _n_bn(model):
    return sum(isinstance(m, nn.BatchNorm2d) for m in model.modules())


def _check_budget(name, got, model, x):
    """`got` against the float64 copy of the (unfolded, torch) model, float32 budget of xkernels.parity
    (4x torch's own float32 error + 1e-5 of the magnitude)."""
    m64 = copy.deepcopy(model).double()
    with torch.no_grad():
        ref = m64(x.double())
        base = model(x)
    err = tensor_error(name, got, ref, torch.float32, base)
    assert err.passed, err
    return err


# ----------------------------------------------------------------------------- folding (eval)


def test_fold_batchnorm_matches_unfolded_model(backend):
    model, x = _small_resnet()
    model.eval()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    types_before = {n: type(m) for n, m in model.named_modules()}
    report = []
    opt = xkernels.optimize(model, report=report)
    folds = [r for r in report if r[2] == "xkernels.nn.FoldedConv2d"]
    assert len(folds) == _n_bn(model) == 1 + 2 * 2 * 3 + 2  # stem, 3 per bottleneck, 2 projections
    assert _n_bn(opt) == 0
    assert not any(type(m) is nn.Conv2d for m in opt.modules())
    with torch.no_grad():
        out = opt(x)
    _check_budget("folded output", out, model, x)
    # The original model is untouched: same structure, same values, still BatchNorm in it.
    assert {n: type(m) for n, m in model.named_modules()} == types_before
    assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items())


def test_fold_values_are_the_batchnorm_formula():
    torch.manual_seed(0)
    conv, bn = nn.Conv2d(3, 5, 3, padding=1), nn.BatchNorm2d(5, eps=1e-3)
    with torch.no_grad():
        bn.running_mean.normal_()
        bn.running_var.uniform_(0.5, 2)
        bn.weight.normal_()
        bn.bias.normal_()
    bn.eval()
    f = xnn.FoldedConv2d.from_conv_bn(conv, bn)
    s = bn.weight / torch.sqrt(bn.running_var + bn.eps)
    torch.testing.assert_close(f.weight, conv.weight * s[:, None, None, None])
    torch.testing.assert_close(f.bias, (conv.bias - bn.running_mean) * s + bn.bias)
    assert not f.weight.requires_grad and not f.training
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        torch.testing.assert_close(f(x), bn(conv(x)), rtol=RTOL, atol=ATOL)
    with pytest.raises(ValueError, match="eval mode"):
        xnn.FoldedConv2d.from_conv_bn(conv, bn.train())


def test_folded_model_refuses_train():
    model, x = _small_resnet()
    opt = xkernels.optimize(model.eval())
    with pytest.raises(RuntimeError, match=r"folded into its weight and bias.*inference only"):
        opt.train()
    opt.eval()  # eval() stays allowed
    with torch.no_grad():
        opt(x)
    # Optimizing in train mode folds nothing, and that model trains.
    trainable = xkernels.optimize(model.train())
    assert _n_bn(trainable) == _n_bn(model)
    trainable.train()


def test_train_mode_keeps_batchnorm_and_updates_statistics_as_torch(backend):
    model, x = _small_resnet()
    model.train()
    twin = copy.deepcopy(model)  # plain torch
    opt = xkernels.optimize(model)
    assert _n_bn(opt) == _n_bn(model)
    assert not any(isinstance(m, (xnn.FoldedConv2d, xnn.Conv2dEpilogue)) for m in opt.modules())
    target = torch.randn(4, 10, generator=torch.Generator().manual_seed(3), device="cpu").to(x.device)
    # torch's float32 convolutions in float32 (on CUDA cuDNN would otherwise use TF32 by default).
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        for m in (opt, twin):
            sgd = torch.optim.SGD(m.parameters(), lr=0.05)
            for _ in range(2):
                sgd.zero_grad()
                nn.functional.mse_loss(m(x), target).backward()
                sgd.step()
    # The BatchNorm modules of the optimized model are the original's (shared): their running statistics
    # and the parameters were updated exactly as torch updates the twin's, within float32 rounding.
    for (n, b), tb in zip(opt.state_dict().items(), twin.state_dict().values()):
        if "num_batches_tracked" in n:
            assert int(b) == int(tb) == 1 + 2, n  # calibration's batch, then two steps
        else:
            rtol, atol = MODEL_AGAINST_TORCH
            torch.testing.assert_close(b, tb, rtol=rtol, atol=atol, msg=lambda m, n=n: f"{n}: {m}")
    assert opt.layer1[0].bn1 is model.layer1[0].bn1


def test_fold_only_exclusive_conv_bn_pairs():
    class Shared(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3, padding=1)
            self.bn = nn.BatchNorm2d(4)
            self.conv2 = nn.Conv2d(3, 4, 3, padding=1)
            self.bn2 = nn.BatchNorm2d(4)

        def forward(self, x):
            y = self.conv(x)
            return self.bn(y) + y + self.bn2(self.conv2(x))  # conv's output also used elsewhere: no folding

    m = Shared().eval()
    with torch.no_grad():
        m.bn.running_var.fill_(2.0)
        m.bn2.running_var.fill_(3.0)
    matches = xnn.find_conv_bn(m)
    assert [(c.conv, c.bn) for c in matches] == [("conv2", "bn2")]
    opt = xkernels.optimize(m, epilogues=False)
    assert type(opt.bn) is nn.BatchNorm2d and type(opt.conv2) is xnn.FoldedConv2d and type(opt.bn2) is nn.Identity
    full = xkernels.optimize(m)  # the folded conv2 then feeds an add: an epilogue without ReLU
    assert type(full.conv2) is xnn.Conv2dEpilogue and not full.conv2.relu and full.conv2.folded_batchnorm
    x = torch.randn(2, 3, 6, 6)
    with torch.no_grad():
        torch.testing.assert_close(opt(x), m(x), rtol=RTOL, atol=ATOL)
        torch.testing.assert_close(full(x), m(x), rtol=RTOL, atol=ATOL)


def test_untraceable_module_is_left_alone():
    class Dynamic(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3, padding=1)
            self.bn = nn.BatchNorm2d(4)

        def forward(self, x):
            if x.sum() > 0:  # data-dependent: torch.fx cannot trace it
                x = -x
            return torch.relu(self.bn(self.conv(x)))

    assert xnn.call_graph(Dynamic()) is None
    report = []
    opt = xkernels.optimize(Dynamic().eval(), report=report)
    assert type(opt.bn) is nn.BatchNorm2d and type(opt.conv) is xnn.Conv2d
    assert [r[2] for r in report] == ["xkernels.nn.Conv2d"]


# ----------------------------------------------------------------------------- conv epilogues


def test_epilogue_patterns_found_in_resnet():
    model, _ = _small_resnet()
    folded = xkernels.optimize(model.eval(), epilogues=False)
    matches = xnn.find_conv_epilogues(folded)
    kinds = sorted((m.conv, m.residual is not None, m.relu) for m in matches)
    expected = [("conv1", False, True)]
    for stage in ("layer1", "layer2"):
        for block in ("0", "1"):
            p = f"{stage}.{block}"
            expected += [(f"{p}.conv1", False, True), (f"{p}.conv2", False, True), (f"{p}.conv3", True, True)]
    assert kinds == sorted(expected)
    # The projection shortcut's conv feeds the residual add as its *other* operand: not an epilogue of its own.
    assert not any("downsample" in m.conv for m in matches)


def test_epilogue_rewrite_runs_through_the_plug_in_point(backend, monkeypatch):
    model, x = _small_resnet()
    report = []
    opt = xkernels.optimize(model.eval(), report=report)
    epi = [r for r in report if r[2] == "xkernels.nn.Conv2dEpilogue"]
    assert len(epi) == 13 and sum(r[1] == "conv2d+add+ReLU" for r in epi) == 4
    convs = [m for m in opt.modules() if isinstance(m, xnn.Conv2dEpilogue)]
    assert len(convs) == 13 and all(c.relu and c.folded_batchnorm for c in convs)
    # Bottlenecks (and the root, for the stem) are GraphModules with the original children names.
    assert isinstance(opt.layer1[0], torch.fx.GraphModule) and type(opt.layer1[0]).__name__ == "Bottleneck"
    assert isinstance(opt.layer1, nn.Sequential)
    calls = []
    real = xnn.conv2d_epilogue

    def counting(*args, **kwargs):
        calls.append(kwargs.get("residual", args[7] if len(args) > 7 else None) is not None)
        return real(*args, **kwargs)

    monkeypatch.setattr(xnn, "conv2d_epilogue", counting)
    with torch.no_grad():
        out = opt(x)
    assert len(calls) == 13 and sum(calls) == 4  # every matched chain went through the one function
    _check_budget("optimized output", out, model, x)
    # Idempotent.
    again = []
    xkernels.optimize(opt, report=again)
    assert again == []


def test_sequential_epilogue_keeps_sequential():
    torch.manual_seed(0)
    seq = nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Conv2d(4, 4, 1), nn.ReLU(), nn.Conv2d(4, 2, 1)
    ).eval()
    with torch.no_grad():
        seq[1].running_var.fill_(0.5)
    report = []
    opt = xkernels.optimize(seq, report=report)
    assert type(opt) is nn.Sequential and len(opt) == 6
    assert [type(m).__name__ for m in opt] == [
        "Conv2dEpilogue",
        "Identity",
        "Identity",
        "Conv2dEpilogue",
        "Identity",
        "Conv2d",
    ]
    assert [r[1] for r in report if r[2] == "xkernels.nn.Conv2dEpilogue"] == ["conv2d+ReLU", "conv2d+ReLU"]
    x = torch.randn(2, 3, 5, 5)
    with torch.no_grad():
        torch.testing.assert_close(opt(x), seq(x), rtol=RTOL, atol=ATOL)
    assert type(seq[0]) is nn.Conv2d and type(seq[1]) is nn.BatchNorm2d  # original untouched


def test_epilogue_functional_relu_and_add_orders():
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Conv2d(4, 4, 3, padding=1)
            self.b = nn.Conv2d(4, 4, 1)

        def forward(self, x):
            y = torch.nn.functional.relu(self.a(x))
            return torch.relu(x + self.b(y))  # residual on the left

    m = Block().eval()
    opt = xkernels.optimize(m)
    assert type(opt.a) is xnn.Conv2dEpilogue and type(opt.b) is xnn.Conv2dEpilogue
    x = torch.randn(2, 4, 5, 5)
    with torch.no_grad():
        torch.testing.assert_close(opt(x), m(x), rtol=RTOL, atol=ATOL)
    # Train-mode models are not rewritten (exact module semantics).
    t = xkernels.optimize(Block().train())
    assert type(t.a) is xnn.Conv2d and not isinstance(t, torch.fx.GraphModule)


def test_optimized_resnet_under_torch_compile():
    torch._dynamo.reset()
    model, x = _small_resnet()
    opt = xkernels.optimize(model.eval())
    compiled = torch.compile(opt, backend="aot_eager", fullgraph=True)
    with torch.no_grad():
        out = compiled(x)
    _check_budget("compiled optimized output", out, model, x)
