"""The reference models (xkernels.models) and the model benchmark's parity gate (benchmarks.models)."""

from __future__ import annotations

import copy
import types

import pytest
import torch
from torch import nn

import xkernels
import xkernels.nn as xnn
from xkernels import models
from xkernels.parity import tensor_error
from xkernels.tolerances import MODEL_AGAINST_TORCH


def test_resnet50_structure_matches_the_paper():
    m = models.resnet50()
    # 25,557,032 parameters, as torchvision's resnet50 (the paper's 50-layer network with option-B shortcuts).
    assert sum(p.numel() for p in m.parameters()) == 25_557_032
    convs = [c for c in m.modules() if isinstance(c, nn.Conv2d)]
    assert len(convs) == 1 + 3 * 16 + 4  # stem, 16 bottlenecks, 4 projections (49 weighted conv + fc = 50 layers)
    assert [len(s) for s in (m.layer1, m.layer2, m.layer3, m.layer4)] == [3, 4, 6, 3]
    # The paper puts the downsampling stride on the first 1x1 conv; v1.5 on the 3x3.
    assert m.layer2[0].conv1.stride == (2, 2) and m.layer2[0].conv2.stride == (1, 1)
    v15 = models.resnet50(stride_in_3x3=True)
    assert v15.layer2[0].conv1.stride == (1, 1) and v15.layer2[0].conv2.stride == (2, 2)
    with torch.no_grad():
        assert m.eval()(torch.randn(1, 3, 64, 64)).shape == (1, 1000)


def test_calibrate_batchnorm_sets_statistics_and_restores_modes():
    torch.manual_seed(0)
    m = models.ResNet(layers=(1,), widths=(4,), num_classes=3, stem_channels=8).eval()
    x = torch.randn(6, 3, 16, 16)
    models.calibrate_batchnorm(m, x)
    assert not any(mod.training for mod in m.modules())
    assert all(b.momentum == 0.1 for b in m.modules() if isinstance(b, nn.BatchNorm2d))
    with torch.no_grad():
        h = m.conv1(x)
    rtol, atol = MODEL_AGAINST_TORCH  # batch statistics over N*H*W terms
    torch.testing.assert_close(m.bn1.running_mean, h.mean((0, 2, 3)), rtol=rtol, atol=atol)
    torch.testing.assert_close(m.bn1.running_var, h.var((0, 2, 3)), rtol=rtol, atol=atol)


def test_encoder_and_mlp_shapes_and_optimize(backend):
    torch.manual_seed(0)
    enc = models.TransformerEncoder(layers=2, d_model=32, heads=4, ffn=64).eval()
    x = torch.randn(2, 10, 32)
    report = []
    opt = xkernels.optimize(enc, report=report)
    assert sorted({r[2] for r in report}) == ["FusedLinearReLU", "xkernels.nn.LayerNorm"]
    assert sum(r[2] == "FusedLinearReLU" for r in report) == 2
    with torch.no_grad():
        out = opt(x)
        ref = copy.deepcopy(enc).double()(x.double())
        assert tensor_error("encoder", out, ref, torch.float32, enc(x)).passed
    mlp = models.mlp((16, 32, 8))
    assert [type(m) for m in mlp] == [nn.Linear, nn.ReLU, nn.Linear, nn.ReLU]
    assert all(type(m) in (xnn.FusedLinearReLU, nn.Identity) for m in xkernels.optimize(mlp))


# -------------------------------------------------------------------- benchmarks.models parity gate


def _tiny_case(mode):
    from benchmarks import models as bm

    def build():
        torch.manual_seed(1)
        model = models.mlp((8, 16, 4))
        t = torch.randn(3, 4) if mode == "train" else None
        return (model.train() if mode == "train" else model.eval()), torch.randn(3, 8), t

    return bm.ModelCase("tiny", mode, "3x8", 3, build)


def _args(**kw):
    return types.SimpleNamespace(rounds=3, min_time=0.03, compile_timeout=60.0, **kw)


@pytest.mark.parametrize("mode", ["infer", "train"])
def test_model_benchmark_times_only_checked_providers(mode):
    from benchmarks import models as bm

    def wrong(case, model, t):  # a provider whose model computes something else
        with torch.no_grad():
            model[0].weight.mul_(1.001)
        return bm.Runner(model, model, case.mode == "infer", target=t)

    st = xkernels.backends()["reference"]
    provs = [bm._torch_provider(), bm._xkernels_provider("reference", st), bm.Provider("wrong", wrong)]
    logged = []
    rows, failures = bm.run_case(_tiny_case(mode), provs, _args(), log=logged.append)
    timed = {r["provider"]: r for r in rows if r.get("median_ms")}
    assert set(timed) == {"torch", "xkernels[reference]"}
    assert float(timed["xkernels[reference]"]["peer_over_xkernels"]) == 1.0
    assert float(timed["torch"]["peer_over_xkernels"]) > 0
    assert len(failures) == 1 and failures[0].startswith("tiny") and "wrong" in failures[0]
    assert any("PARITY FAILED" in line for line in logged)
    bad = next(r for r in rows if r["provider"] == "wrong")
    assert "median_ms" not in bad and bad["note"].startswith("PARITY FAILED")


def test_no_ipex_provider_in_the_benchmarks():
    """No provider may carry IPEX's name unless it really runs ipex.optimize; none can be built here
    (docs/performance.md), so there is none, in either suite."""
    from benchmarks import models as bm
    from benchmarks import providers as op_providers

    names = [p.name for p in bm.all_providers(None)] + [p.name for p in op_providers.all_providers(None)]
    assert not any("ipex" in n.lower() for n in names), names
    assert "torch.compile+freezing" in [p.name for p in bm.all_providers(None)]
    assert "torch.compile+freezing" in [p.name for p in op_providers.all_providers(None)]


def test_model_benchmark_case_catalogue():
    """benchmarks.models lists every model's cases, the ResNet-50 training step among them, and --modes selects."""
    from benchmarks import models as bm

    def cases(**kw):
        args = types.SimpleNamespace(models=["resnet50", "encoder", "mlp"], quick=True, batches=[1], **kw)
        return [(c.model, c.mode, c.batch) for c in bm.build_cases(args)]

    assert cases() == [
        ("resnet50", "infer", 1),
        ("resnet50", "train", bm.TRAIN_BATCH),
        ("encoder", "infer", 1),
        ("encoder", "train", 1),
        ("mlp", "infer", 64),
        ("mlp", "train", 64),
    ]
    assert cases(modes=["train"], train_batch=4) == [
        ("resnet50", "train", 4),
        ("encoder", "train", 1),
        ("mlp", "train", 64),
    ]


def test_resnet_training_step_case(cpu_backend):
    """The ResNet training step case, tiny (one bottleneck, 32x32, batch 2): train mode (torch's BatchNorm on batch
    statistics, xkernels' convolutions), and the gate passes torch and xkernels on output and on every parameter's
    first-step gradient against float64, BatchNorm's included."""
    from benchmarks import models as bm

    case = bm.ModelCase("resnet-tiny", "train", "batch=2,32x32", 2, bm._resnet(2, 32, stages=(1,), mode="train"))
    model, x, t = case.build()
    assert model.training and t.shape == (2, 1000)
    opt = xkernels.optimize(model)
    assert any(isinstance(m, xnn.Conv2d) for m in opt.modules())
    assert any(isinstance(m, nn.BatchNorm2d) and m.training for m in opt.modules())  # not folded
    backend = cpu_backend.name
    st = xkernels.backends()[backend]
    provs = [bm._torch_provider(), bm._xkernels_provider(backend, st)]
    logged = []
    rows, failures = bm.run_case(case, provs, _args(), log=logged.append)
    assert failures == [], failures
    timed = {r["provider"] for r in rows if r.get("median_ms")}
    assert timed == {"torch", f"xkernels[{backend}]"}, logged
    assert any("parity ok" in line and backend in line for line in logged)


def test_model_benchmark_in_bfloat16(cpu_backend):
    """--dtype bfloat16: the model and input in bf16 for every provider, the gate against float64 with bf16's budget
    (a provider off by 0.1 % of a weight passes in bf16 only if that is inside the budget: so a 5 % one must fail)."""
    from benchmarks import models as bm

    def wrong(case, model, t):
        with torch.no_grad():
            model[0].weight.mul_(1.05)
        return bm.Runner(model, model, True, target=t)

    backend = cpu_backend.name
    st = xkernels.backends()[backend]
    provs = [bm._torch_provider(), bm._xkernels_provider(backend, st), bm.Provider("wrong", wrong)]
    case = bm.ModelCase("tiny", "infer", "3x64", 3, lambda: (models.mlp((64, 64, 32)).eval(), torch.randn(3, 64), None))
    logged = []
    rows, failures = bm.run_case(case, provs, _args(dtype="bfloat16"), log=logged.append)
    timed = {r["provider"] for r in rows if r.get("median_ms")}
    assert timed == {"torch", f"xkernels[{backend}]"}, logged
    assert len(failures) == 1 and "wrong" in failures[0], failures
    assert any("bfloat16 budget" in line for line in logged), logged
