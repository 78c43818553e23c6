"""The SYCL backend's caching host allocator (csrc/sycl/host_alloc.h): outputs and scratch buffers of SYCL ops
on CPU tensors of at least 1 MiB come from a bounded pool, so a fresh output per call does not pay the page
faults of a new mmap every time. Checked: reuse after release, correctness of reused (dirty) memory, the bound
(XKERNELS_HOST_CACHE_MB) and turning it off, empty_cache(), that the outputs are ordinary resizable tensors,
channels_last outputs, and the error for a bad setting."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

import xkernels
from xkernels.tolerances import against_torch, between_backends

import _backends
from _reliability import child_env, describe_result, run_python

pytestmark = pytest.mark.sycl


@pytest.fixture(autouse=True, scope="module")
def _sycl_available():
    _backends.get("sycl")


def stats():
    return xkernels.info()["sycl"]["host_cache"]


def test_large_outputs_are_reused_after_release():
    x = torch.randn(1024, 1024)  # 4 MiB output
    with xkernels.use_backend("sycl"):
        y = xkernels.layer_norm(x, [1024])
        ptr = y.data_ptr()
        del y
        before = stats()
        y2 = xkernels.layer_norm(x, [1024])
    after = stats()
    assert y2.data_ptr() == ptr  # the released block served the next call
    assert after["hits"] > before["hits"]
    rtol, atol = against_torch(torch.float32)
    torch.testing.assert_close(y2, F.layer_norm(x, [1024]), rtol=rtol, atol=atol)


def test_reused_memory_gives_right_results_for_every_op():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(512, 1024, generator=g)
    w = torch.randn(768, 1024, generator=g)
    img = torch.randn(2, 64, 40, 40, generator=g).to(memory_format=torch.channels_last)
    k = torch.randn(64, 64, 3, 3, generator=g)
    lin_rtol, lin_atol = between_backends(torch.float32, terms=1024)
    conv_rtol, conv_atol = between_backends(torch.float32, terms=64 * 3 * 3)
    ln_rtol, ln_atol = between_backends(torch.float32)
    for _ in range(3):  # later rounds write into blocks that held other ops' results
        with xkernels.use_backend("sycl"):
            y = xkernels.fused_linear_relu(x, w)
            c = xkernels.conv2d(img, k, padding=1)
            n = xkernels.layer_norm(y, [768])
        # Against torch's float32 result, each within the elementwise tolerance of the truth: twice it,
        # for reductions of 1024 (linear) and 576 (conv) terms; layer_norm's error does not grow with the row.
        torch.testing.assert_close(y, torch.relu(F.linear(x, w)), rtol=lin_rtol, atol=lin_atol)
        torch.testing.assert_close(c, F.conv2d(img, k, padding=1), rtol=conv_rtol, atol=conv_atol)
        assert c.is_contiguous(memory_format=torch.channels_last)
        torch.testing.assert_close(n, F.layer_norm(y, [768]), rtol=ln_rtol, atol=ln_atol)
        del y, c, n


def test_outputs_are_ordinary_resizable_tensors():
    with xkernels.use_backend("sycl"):
        y = xkernels.layer_norm(torch.randn(1024, 1024), [1024])
    y.resize_(2048, 1024)  # grows through the storage's allocator (the cache's)
    y.fill_(3.0)
    assert y.shape == (2048, 1024) and bool((y == 3.0).all())
    z = y.clone()
    assert torch.equal(z, y)


def test_empty_cache_frees_the_pool():
    with xkernels.use_backend("sycl"):
        for n in (1024, 1536, 2048):
            xkernels.layer_norm(torch.randn(n, 1024), [1024])
    assert stats()["cached_bytes"] > 0
    xkernels.empty_cache()
    s = stats()
    assert s["cached_bytes"] == 0 and s["cached_blocks"] == 0


_CHILD = """
import json, torch, xkernels
import torch.nn.functional as F
x = torch.randn(1024, 1024)
from xkernels.tolerances import against_torch
rtol, atol = against_torch(torch.float32)
ok = True
with xkernels.use_backend("sycl"):
    for rows in (256, 512, 768, 1024, 1280, 1536, 1792, 2048) * 2:
        xr = torch.randn(rows, 1024)
        ok &= bool(torch.allclose(xkernels.layer_norm(xr, [1024]), F.layer_norm(xr, [1024]), rtol=rtol, atol=atol))
print(json.dumps({"ok": ok, "stats": xkernels.info()["sycl"]["host_cache"]}))
"""


@pytest.mark.parametrize("mb", [0, 8])
def test_bound_and_off(mb):
    r = run_python(_CHILD, env=child_env(XKERNELS_HOST_CACHE_MB=mb))
    assert r.returncode == 0, describe_result(r)
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["ok"]
    s = out["stats"]
    assert s["limit_bytes"] == mb << 20
    assert s["cached_bytes"] <= s["limit_bytes"]
    if mb == 0:
        assert s["hits"] == 0 and s["misses"] == 0 and s["cached_blocks"] == 0  # not used at all
    else:
        assert s["hits"] > 0 and s["cached_bytes"] > 0


def test_bad_setting_names_the_variable():
    r = run_python(
        "import torch, xkernels\nwith xkernels.use_backend('sycl'):\n"
        "    xkernels.layer_norm(torch.randn(1024, 1024), [1024])\n",
        env=child_env(XKERNELS_HOST_CACHE_MB="lots"),
    )
    assert r.returncode != 0
    assert "XKERNELS_HOST_CACHE_MB" in r.stderr and "'lots'" in r.stderr


_PHASES = """
import json, torch, xkernels
with xkernels.use_backend("sycl"):
    # phase 1 fills the 64 MiB pool with 16 MiB blocks; phase 2 repeats a 24 MiB output
    phase1 = [xkernels.layer_norm(torch.randn(4096, 1024), [1024]) for _ in range(4)]
    del phase1
    x = torch.randn(6144, 1024)
    before = xkernels.info()["sycl"]["host_cache"]
    for _ in range(10):
        y = xkernels.layer_norm(x, [1024])
        del y
    after = xkernels.info()["sycl"]["host_cache"]
print(json.dumps({"before": before, "after": after}))
"""


def test_newer_sizes_evict_older_ones():
    # The bound must not keep an earlier phase's sizes forever: the released 24 MiB block evicts the least
    # recently released 16 MiB ones, so the later calls are served from the pool.
    r = run_python(_PHASES, env=child_env(XKERNELS_HOST_CACHE_MB=64))
    assert r.returncode == 0, describe_result(r)
    out = json.loads(r.stdout.strip().splitlines()[-1])
    hits = out["after"]["hits"] - out["before"]["hits"]
    assert hits >= 9, out  # every call after the first reuses the block
    assert out["after"]["cached_bytes"] <= 64 << 20
