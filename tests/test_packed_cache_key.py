"""The packed-weight cache of xkernels.nn modules (nn._packed_copy) notices every field of its key on its own:
a `.data` replacement (same Parameter object and version counter, new storage: the data pointer) and a
`.data` reshape (same object, storage and version: the shape). test_nn.py / test_conv2d_packed.py cover
in-place updates (version), new Parameters (identity), load_state_dict and .to(dtype)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import xkernels
import xkernels.nn as xnn
from xkernels.tolerances import assert_close

import _backends


@pytest.fixture
def sycl_backend():
    be = _backends.get("sycl")  # the packed path runs on the SYCL backend only
    with xkernels.use_backend(be.name):
        yield be


def _cache(m):
    return m.__dict__.get("_packed_cache")


def test_conv2d_data_replaced(sycl_backend):
    torch.manual_seed(0)
    m = xnn.Conv2d(4, 6, 3, padding=1)
    m.pack_weight = True
    x = torch.randn(2, 4, 7, 7)
    with torch.no_grad():
        m(x)
        first = _cache(m)
        assert first is not None
        version = m.weight._version
        m.weight.data = torch.randn_like(m.weight)  # new storage; the Parameter and its version stay
        assert m.weight._version == version
        y = m(x)
    assert _cache(m)[2] is not first[2], "a new storage behind the same Parameter must re-pack"
    assert_close(y, F.conv2d(x.double(), m.weight.double(), m.bias.double(), padding=1), torch.float32, "conv2d")


def test_conv2d_data_reshaped(sycl_backend):
    """The weight viewed as another kernel shape (3x5 -> 5x3): same storage, same version, other shape."""
    torch.manual_seed(1)
    m = xnn.Conv2d(4, 6, (3, 5), padding=2)
    m.pack_weight = True
    x = torch.randn(2, 4, 7, 7)
    with torch.no_grad():
        m(x)
        first = _cache(m)
        assert first is not None
        ptr, version = m.weight.data_ptr(), m.weight._version
        m.weight.data = m.weight.data.view(6, 4, 5, 3)
        assert m.weight.data_ptr() == ptr and m.weight._version == version
        y = m(x)
    assert _cache(m)[2] is not first[2], "a reshaped weight must re-pack"
    assert_close(y, F.conv2d(x.double(), m.weight.double(), m.bias.double(), padding=2), torch.float32, "conv2d")


def test_fused_linear_relu_data_replaced(sycl_backend):
    torch.manual_seed(2)
    m = xnn.FusedLinearReLU(40, 130, pack_weight=True)
    x = torch.randn(100, 40)
    with torch.no_grad():
        m(x)
        first = _cache(m)
        assert first is not None
        m.weight.data = torch.randn_like(m.weight)
        y = m(x)
    assert _cache(m)[2] is not first[2]
    expected = torch.relu(F.linear(x.double(), m.weight.double(), m.bias.double()))
    assert_close(y, expected, torch.float32, "fused_linear_relu")
