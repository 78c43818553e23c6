"""torch.compile(fullgraph=True) of a model using all three ops: one graph, no break, and the
same forward and backward results as eager."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch._dynamo.testing import CompileCounterWithBackend

import xkernels


class SmallNet(nn.Module):
    """conv2d (channels_last input, padding='same') -> layer_norm over (C, H, W) -> conv2d (strided)
    -> flatten -> fused_linear_relu."""

    def __init__(self):
        super().__init__()
        self.w1 = nn.Parameter(torch.randn(4, 3, 4, 3) * 0.3)
        self.b1 = nn.Parameter(torch.randn(4) * 0.1)
        self.ln_w = nn.Parameter(1 + 0.1 * torch.randn(4, 6, 5))
        self.ln_b = nn.Parameter(0.1 * torch.randn(4, 6, 5))
        self.w2 = nn.Parameter(torch.randn(6, 2, 3, 3) * 0.3)
        self.w3 = nn.Parameter(torch.randn(7, 6 * 2 * 3) * 0.2)
        self.b3 = nn.Parameter(torch.randn(7) * 0.1)

    def forward(self, x):
        y = xkernels.conv2d(x, self.w1, self.b1, padding="same")
        y = xkernels.layer_norm(y, (4, 6, 5), self.ln_w, self.ln_b)
        y = xkernels.conv2d(y, self.w2, None, stride=2, padding=(0, 1), groups=2)
        return xkernels.fused_linear_relu(y.flatten(1), self.w3, self.b3)


def _run(fn, model, x):
    model.zero_grad(set_to_none=True)
    xg = x.detach().clone().requires_grad_()
    out = fn(xg)
    out.square().sum().backward()
    return out.detach(), xg.grad, {n: p.grad for n, p in model.named_parameters()}


def _check_matches_eager(compiled, model, x):
    out_c, gx_c, gp_c = _run(compiled, model, x)
    out_e, gx_e, gp_e = _run(model, model, x)
    assert (out_e > 0).any()  # not all clipped by the ReLU: the comparison means something
    torch.testing.assert_close(out_c, out_e)
    torch.testing.assert_close(gx_c, gx_e)
    for name in gp_e:
        torch.testing.assert_close(gp_c[name], gp_e[name], msg=lambda m: f"grad of {name}: {m}")


def _compare(backend_name, dynamic):
    torch._dynamo.reset()
    model = SmallNet()
    counter = CompileCounterWithBackend(backend_name)
    # fullgraph=True: any graph break raises.
    compiled = torch.compile(model, backend=counter, fullgraph=True, dynamic=dynamic)
    _check_matches_eager(compiled, model, torch.randn(2, 3, 6, 5).to(memory_format=torch.channels_last))
    if not dynamic:
        assert counter.frame_count == 1
    else:
        # (Dynamo may hand the backend the first graph twice: it restarts analysis once to turn
        # the float eps into a graph input.) A new batch size must not recompile.
        compiled_graphs = counter.frame_count
        _check_matches_eager(compiled, model, torch.randn(5, 3, 6, 5).to(memory_format=torch.channels_last))
        assert counter.frame_count == compiled_graphs


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_compile_aot_eager(backend, dynamic):
    """Dynamo + AOTAutograd (fake tensors, functionalization, the registered autograd) without
    code generation — the parts that concern custom ops, and fast."""
    _compare("aot_eager", dynamic)


@pytest.mark.slow
def test_compile_inductor(backend):
    _compare("inductor", False)


def test_compile_layer_norm_out(backend):
    """layer_norm.out (tagged torch.Tag.out) is functionalized by torch.compile: one graph, and the
    caller's `out` holds the result afterwards, as in eager."""
    torch._dynamo.reset()
    counter = CompileCounterWithBackend("aot_eager")

    def fn(x, w, out):
        xkernels.layer_norm(x, [7], w, None, 1e-5, out=out)
        return out * 2

    compiled = torch.compile(fn, backend=counter, fullgraph=True)
    x, w = torch.randn(5, 7), torch.randn(7)
    out_c, out_e = torch.empty(5, 7), torch.empty(5, 7)
    with torch.no_grad():
        y_c = compiled(x, w, out_c)
        y_e = fn(x, w, out_e)
    assert counter.frame_count == 1
    torch.testing.assert_close(out_c, out_e)
    torch.testing.assert_close(y_c, y_e)
    torch.testing.assert_close(out_e, xkernels.layer_norm(x, [7], w))


def test_layer_norm_out_decomposition(backend):
    """The CompositeImplicitAutograd kernel that torch versions without torch.Tag.out (2.11, 2.12) trace under
    torch.compile (python/xkernels/ops.py): the eager out= result bit for bit, `out` returned, and the same
    argument errors. Called directly, so it is checked on every torch, not only where it is registered."""
    from xkernels.ops import _layer_norm_out_decomposed

    x, w, b = torch.randn(4, 3, 9), torch.randn(9), torch.randn(9)
    out_d, out_e = torch.empty(4, 3, 9), torch.empty(4, 3, 9)
    with torch.no_grad():
        r = _layer_norm_out_decomposed(x, [9], w, b, 1e-3, out=out_d)
        xkernels.layer_norm(x, [9], w, b, 1e-3, out=out_e)
    assert r is out_d
    assert torch.equal(out_d, out_e)
    with pytest.raises((RuntimeError, ValueError), match=r"xkernels\.layer_norm: argument 'out' .*\[4, 3, 8\]"):
        _layer_norm_out_decomposed(x, [9], w, b, 1e-3, out=torch.empty(4, 3, 8))
