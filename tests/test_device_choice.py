"""XKERNELS_DEVICE=auto|cpu|cuda|xpu: xkernels.best_device() / device_choice(), and the CLI's report of it.

The devices present are faked by monkeypatching torch (torch.version.cuda / .xpu, torch.cuda.is_available,
torch.xpu.is_available) and the build flags of the extension (_C.with_cuda, _C.with_sycl), so every branch runs on
a CPU-only machine."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import xkernels
from xkernels import _C
from xkernels.backends import device_report

PKG_ROOT = str(Path(xkernels.__file__).resolve().parent.parent)


@pytest.fixture
def fake(monkeypatch):
    """fake(cuda=..., xpu=..., torch_cuda=..., torch_xpu=..., built_cuda=..., built_sycl=...): what is present."""
    monkeypatch.delenv("XKERNELS_DEVICE", raising=False)

    def apply(cuda=False, xpu=False, torch_cuda=None, torch_xpu=None, built_cuda=None, built_sycl=True):
        monkeypatch.setattr(torch.version, "cuda", torch_cuda if torch_cuda is not None else ("12.8" if cuda else None))
        monkeypatch.setattr(torch.version, "xpu", torch_xpu if torch_xpu is not None else ("2025.3" if xpu else None))
        monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
        monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
        monkeypatch.setattr(torch.xpu, "is_available", lambda: xpu)
        monkeypatch.setattr(torch.xpu, "current_device", lambda: 0)
        monkeypatch.setattr(_C, "with_cuda", cuda if built_cuda is None else built_cuda)
        monkeypatch.setattr(_C, "with_sycl", built_sycl)

    return apply


def test_auto_prefers_cuda_then_xpu_then_cpu(fake):
    fake(cuda=True, xpu=True)
    assert xkernels.best_device() == torch.device("cuda", 0)
    fake(cuda=False, xpu=True)
    assert xkernels.best_device() == torch.device("xpu", 0)
    fake(cuda=False, xpu=False)
    choice = xkernels.device_choice()
    assert choice.device == torch.device("cpu") and choice.requested == "auto"
    # the fallback says why each better device was passed over
    assert "falling back to cpu" in choice.reason
    assert "no cuda: torch" in choice.reason and "built without CUDA" in choice.reason
    assert "no xpu: torch" in choice.reason and "without XPU" in choice.reason


def test_unset_and_empty_mean_auto(fake, monkeypatch):
    fake(cuda=True)
    assert xkernels.best_device().type == "cuda"
    monkeypatch.setenv("XKERNELS_DEVICE", "")
    assert xkernels.best_device().type == "cuda"
    monkeypatch.setenv("XKERNELS_DEVICE", " AUTO ")
    assert xkernels.best_device().type == "cuda"


def test_auto_skips_cuda_when_xkernels_lacks_the_cuda_backend(fake):
    fake(cuda=True, built_cuda=False)
    choice = xkernels.device_choice()
    assert choice.device == torch.device("cpu")
    assert "xkernels was built without its CUDA backend" in choice.reason


def test_explicit_cpu_wins_over_a_present_gpu(fake, monkeypatch):
    fake(cuda=True, xpu=True)
    monkeypatch.setenv("XKERNELS_DEVICE", "cpu")
    choice = xkernels.device_choice()
    assert choice.device == torch.device("cpu")
    assert choice.reason == "requested by XKERNELS_DEVICE=cpu"


@pytest.mark.parametrize("name", ["cuda", "xpu"])
def test_explicit_present_device_is_taken(fake, monkeypatch, name):
    fake(cuda=True, xpu=True)
    monkeypatch.setenv("XKERNELS_DEVICE", name)
    assert xkernels.best_device() == torch.device(name, 0)
    # an argument overrides the variable
    assert xkernels.best_device("cpu") == torch.device("cpu")


@pytest.mark.parametrize(
    ("device", "present", "want"),
    [
        ("cuda", {"cuda": False}, "torch .* was built without CUDA"),
        ("cuda", {"cuda": False, "torch_cuda": "12.8"}, r"no CUDA device is visible to torch"),
        ("cuda", {"cuda": True, "built_cuda": False}, "xkernels was built without its CUDA backend"),
        ("xpu", {"xpu": False}, "torch .* was built without XPU support"),
        ("xpu", {"xpu": False, "torch_xpu": "2025.3"}, r"no XPU device is visible to torch"),
        ("xpu", {"xpu": True, "built_sycl": False}, "xkernels was built without its SYCL backend"),
    ],
)
def test_explicit_absent_device_raises_with_the_reason(fake, monkeypatch, device, present, want):
    fake(**present)
    monkeypatch.setenv("XKERNELS_DEVICE", device)
    prefix = f"XKERNELS_DEVICE={device}: the {device} device is unavailable: "
    with pytest.raises(xkernels.DeviceUnavailableError, match=prefix + want):
        xkernels.best_device()


@pytest.mark.parametrize("bad", ["gpu", "cuda:0", "tpu", "mps"])
def test_invalid_value_names_the_variable_and_the_allowed_values(fake, monkeypatch, bad):
    fake()
    monkeypatch.setenv("XKERNELS_DEVICE", bad)
    with pytest.raises(ValueError, match=f"XKERNELS_DEVICE='{bad}'.*allowed values are auto, cpu, cuda, xpu"):
        xkernels.best_device()
    with pytest.raises(ValueError, match=r"best_device\(requested\)='tpu'"):
        xkernels.best_device("tpu")


def test_report_for_info(fake, monkeypatch):
    fake()
    rep = device_report()
    assert rep["status"] == "ok" and rep["device"] == "cpu" and rep["requested"] == "auto" and rep["error"] == ""
    monkeypatch.setenv("XKERNELS_DEVICE", "cuda")
    rep = device_report()
    assert rep["status"] == "unavailable" and rep["device"] is None and "XKERNELS_DEVICE=cuda" in rep["error"]
    monkeypatch.setenv("XKERNELS_DEVICE", "nope")
    assert device_report()["status"] == "invalid"
    assert xkernels.info()["device"]["status"] == "invalid"


def _cli(*args, device):
    env = dict(os.environ, XKERNELS_DEVICE=device, COLUMNS="200")
    env["PYTHONPATH"] = PKG_ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.pop("FORCE_COLOR", None)
    p = subprocess.run([sys.executable, "-m", "xkernels", *args], capture_output=True, text=True, env=env, timeout=300)
    return p.returncode, " ".join((p.stdout + p.stderr).split())  # rich may wrap long lines


@pytest.mark.skipif(torch.version.cuda is not None, reason="needs a torch built without CUDA (the CPU wheel)")
def test_cli_info_and_check_report_the_device_and_fail_clearly():
    rc, out = _cli("info", device="cpu")
    assert rc == 0, out
    assert "requested: cpu chosen: cpu (requested by XKERNELS_DEVICE=cpu)" in out
    rc, out = _cli("info", device="auto")
    assert rc == 0, out
    assert "chosen: cpu (auto: falling back to cpu (no cuda: torch" in out
    rc, out = _cli("info", device="cuda")
    assert rc == 3, out
    assert "XKERNELS_DEVICE=cuda: the cuda device is unavailable: torch" in out and "built without CUDA" in out
    rc, out = _cli("check", "--quick", device="cuda")
    assert rc == 3, out
    assert "xkernels check: XKERNELS_DEVICE=cuda: the cuda device is unavailable" in out
    rc, out = _cli("info", device="gpu")
    assert rc == 2, out
    assert "XKERNELS_DEVICE='gpu' is not a device xkernels knows: allowed values are auto, cpu, cuda, xpu" in out
    # --device overrides the variable
    rc, out = _cli("check", "--quick", "--no-backward", "--dtypes", "float32", "--device", "cpu", device="cuda")
    assert rc == 0, out
