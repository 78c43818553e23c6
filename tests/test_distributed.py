"""xkernels modules under torch.distributed: DistributedDataParallel and FSDP2 (``fully_shard``), gloo, 2 processes.

A small model of xkernels modules (Conv2d, LayerNorm, FusedLinearReLU, then a torch Linear head) is trained for a
few SGD steps in float64 by 2 processes started with torchrun, each on its half of every global batch. The
parameters after the steps must equal (float64 elementwise budget) those of a single-process run on the whole
batches, both of the same xkernels model and of its torch.nn twin (independent: a wrong backward formula in
xkernels shows here), and be identical on both ranks. Both ranks start from one empty kernel cache directory;
afterwards the cache must be consistent (every file in xkernels' manifest with its size and FNV-1a hash, no
half-written or duplicated entries) and neither rank may have found a corrupted entry.

This file is also the worker: torchrun runs it as a script (``_worker``).
"""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

STEPS = 3
GLOBAL_BATCH = 8
LR = 0.1
WORLD = 2
TIMEOUT_S = 240  # a bound, not the expected time (seconds, most of it process start-up and a cold kernel cache)


class Net(nn.Module):
    """conv -> ReLU -> layer norm -> flatten -> linear+ReLU -> linear, from xkernels modules or torch.nn's."""

    def __init__(self, xk: bool):
        super().__init__()
        if xk:
            import xkernels.nn as xnn

            self.conv = xnn.Conv2d(2, 4, 3, padding=1)
            self.norm = xnn.LayerNorm([4, 6, 6])
            self.fc = xnn.FusedLinearReLU(144, 16)
        else:
            self.conv = nn.Conv2d(2, 4, 3, padding=1)
            self.norm = nn.LayerNorm([4, 6, 6])
            self.fc = nn.Linear(144, 16)
        self.xk = xk
        self.head = nn.Linear(16, 3)

    def forward(self, x):
        x = self.norm(torch.relu(self.conv(x))).flatten(1)
        x = self.fc(x) if self.xk else torch.relu(self.fc(x))
        return self.head(x)


def _model(xk: bool) -> Net:
    torch.manual_seed(0)
    return Net(xk).double()


def _batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(100 + step)
    x = torch.randn(GLOBAL_BATCH, 2, 6, 6, generator=g, dtype=torch.float64)
    y = torch.randint(0, 3, (GLOBAL_BATCH,), generator=g)
    return x, y


def _train(model: nn.Module, rank: int, world: int) -> None:
    """STEPS steps of SGD with momentum; this rank takes its contiguous share of every global batch. The loss is
    the mean over the share: DDP and FSDP average the gradients over the ranks, i.e. the whole batch's mean."""
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    per = GLOBAL_BATCH // world
    for step in range(STEPS):
        x, y = _batch(step)
        share = slice(rank * per, (rank + 1) * per)
        opt.zero_grad()
        F.cross_entropy(model(x[share]), y[share]).backward()
        opt.step()


def _worker(out_dir: str, mode: str, backend: str) -> None:
    import torch.distributed as dist

    import xkernels

    torch.set_num_threads(1)  # two ranks on a small shared machine
    dist.init_process_group("gloo", timeout=timedelta(seconds=TIMEOUT_S))
    rank, world = dist.get_rank(), dist.get_world_size()
    with xkernels.use_backend(backend):
        model = _model(xk=True)
        if mode == "ddp":
            from torch.nn.parallel import DistributedDataParallel

            wrapped = DistributedDataParallel(model)
        else:
            from torch.distributed.fsdp import fully_shard

            for m in (model.conv, model.norm, model.fc, model.head):
                fully_shard(m)
            wrapped = fully_shard(model)
        _train(wrapped, rank, world)
    params = {}
    for name, p in model.named_parameters():
        t = p.full_tensor() if hasattr(p, "full_tensor") else p  # FSDP2 parameters are DTensor shards
        params[name] = t.detach().clone()
    sharded = [name for name, p in model.named_parameters() if hasattr(p, "to_local")]
    purged = list(xkernels._C.sycl.cache_purged()) if getattr(xkernels._C, "with_sycl", False) else []
    torch.save({"params": params, "purged": purged, "sharded": sharded}, Path(out_dir) / f"rank{rank}.pt")
    dist.barrier()
    # Shut down while the interpreter is fully alive: drop the DDP / FSDP wrapper (it keeps the process group and
    # its work objects alive), collect, then destroy the group, whose destructor joins gloo's worker threads. Left
    # to interpreter shutdown, a gloo thread can drop the last reference to a finished work object after
    # finalization began; its thread-local state holds a Python object, taking the GIL there exits the thread
    # inside a noexcept destructor and the rank aborts ("terminate called without an active exception", torch's
    # c10d: ProcessGroupGloo::AsyncWork::~AsyncWork -> gil_scoped_acquire -> pthread_exit). Seen in about 1 of 16
    # runs on a loaded 2-core machine, on any backend; a core dump showed that stack.
    del wrapped, model
    gc.collect()
    dist.destroy_process_group()


def _run_torchrun(tmp_path: Path, mode: str, backend: str) -> list[dict]:
    """Runs _worker on WORLD processes under torchrun with a fresh kernel cache; returns each rank's results."""
    import xkernels

    cache = tmp_path / "kcache"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SYCL_CACHE", "TORCHELASTIC", "MASTER_"))}
    env["XKERNELS_CACHE_DIR"] = str(cache)
    pkg_root = str(Path(xkernels.__file__).resolve().parent.parent)  # the xkernels this process imported
    env["PYTHONPATH"] = os.pathsep.join([pkg_root, *filter(None, [env.get("PYTHONPATH")])])
    env["OMP_NUM_THREADS"] = "1"
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",  # a local rendezvous on a free port
        f"--nproc-per-node={WORLD}",
        __file__,
        str(tmp_path),
        mode,
        backend,
    ]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # torchrun and its workers: their own session
        out, _ = proc.communicate()
        raise AssertionError(
            f"torchrun {mode} did not finish in {TIMEOUT_S} s:\n{out.decode(errors='replace')}"
        ) from None
    text = out.decode(errors="replace")
    assert proc.returncode == 0, f"torchrun {mode} failed (exit {proc.returncode}):\n{text}"
    return [torch.load(tmp_path / f"rank{r}.pt") for r in range(WORLD)]


def _fnv1a(data: bytes) -> int:
    """csrc/sycl/disk_cache.cpp's fnv1a_file: FNV-1a 64 with its offset basis 1469598103934665603 (the standard
    basis is 14695981039346656037; any fixed basis serves the integrity check, this one must match the C++)."""
    h = 1469598103934665603
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def _check_cache(root: Path) -> None:
    """The SYCL persistent cache both ranks wrote into: xkernels' manifest lists every entry file with its size
    and FNV-1a hash (csrc/sycl/disk_cache.cpp); no temporary files are left; no entry is duplicated (the runtime
    numbers a second binary for the same key 1.bin, 2.bin, ... next to 0.bin)."""
    assert root.is_dir(), f"no kernel cache written under {root}"
    files = {p.relative_to(root).as_posix(): p for p in root.rglob("*") if p.is_file()}
    bookkeeping = {"xkernels-manifest.txt", "xkernels.lock"}
    entries = {
        rel: p
        for rel, p in files.items()
        if p.name not in bookkeeping and not p.name.endswith(("_access_time.txt", ".lock"))
    }
    assert entries, f"the kernel cache {root} is empty"
    leftovers = [rel for rel in files if rel.endswith(".tmp")]
    assert not leftovers, f"temporary files left in the kernel cache: {leftovers}"
    manifest = {}
    for line in (root / "xkernels-manifest.txt").read_text().splitlines():
        h, size, rel = line.split(" ", 2)
        manifest[rel] = (int(h, 16), int(size))
    assert set(manifest) == set(entries), (
        f"manifest and cache differ: not in manifest {sorted(set(entries) - set(manifest))}, "
        f"missing files {sorted(set(manifest) - set(entries))}"
    )
    for rel, p in entries.items():
        data = p.read_bytes()
        assert data, f"empty cache entry {rel}"
        assert (len(data), _fnv1a(data)) == (manifest[rel][1], manifest[rel][0]), f"cache entry {rel} was corrupted"
    duplicated = [rel for rel, p in entries.items() if p.suffix in (".bin", ".src") and p.stem not in ("0", "ir")]
    assert not duplicated, f"duplicated cache entries: {duplicated}"


def _check_training(results: list[dict], backend: str, mode: str) -> None:
    import xkernels
    from xkernels.tolerances import elementwise

    rtol, atol = elementwise(torch.float64)
    ranks = [r["params"] for r in results]
    for name in ranks[0]:
        assert torch.equal(ranks[0][name], ranks[1][name]), f"{mode}: rank 0 and rank 1 differ in {name}"
    for r, res in enumerate(results):
        assert res["purged"] == [], f"{mode}: rank {r} found corrupted kernel-cache entries: {res['purged']}"
    single_xk, single_torch = _model(xk=True), _model(xk=False)
    with xkernels.use_backend(backend):
        _train(single_xk, 0, 1)
    _train(single_torch, 0, 1)
    start = dict(_model(xk=False).named_parameters())
    for ref_name, ref in (("xkernels single-process", single_xk), ("torch.nn single-process", single_torch)):
        for name, p in ref.named_parameters():
            assert not torch.equal(p, start[name]), f"{name} did not change in training"
            torch.testing.assert_close(
                ranks[0][name],
                p.detach(),
                rtol=rtol,
                atol=atol,
                msg=lambda m, name=name, ref_name=ref_name: f"{mode} on '{backend}': {name} vs {ref_name}: {m}",
            )


def _cpu_backend_or_skip(backend) -> None:
    import pytest

    if backend.device.type != "cpu":
        pytest.skip(f"gloo on CPU tensors: backend '{backend.name}' runs {backend.device.type} tensors")


def test_ddp_matches_single_process(backend, tmp_path):
    _cpu_backend_or_skip(backend)
    results = _run_torchrun(tmp_path, "ddp", backend.name)
    _check_training(results, backend.name, "DDP")
    if backend.name == "sycl":
        _check_cache(tmp_path / "kcache" / "sycl")


def test_fsdp2_matches_single_process(backend, tmp_path):
    _cpu_backend_or_skip(backend)
    results = _run_torchrun(tmp_path, "fsdp2", backend.name)
    assert set(results[0]["sharded"]) == {n for n, _ in _model(xk=True).named_parameters()}, "not sharded"
    _check_training(results, backend.name, "FSDP2")
    if backend.name == "sycl":
        _check_cache(tmp_path / "kcache" / "sycl")


if __name__ == "__main__":
    _worker(*sys.argv[1:4])
