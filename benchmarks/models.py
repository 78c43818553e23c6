"""Model-level benchmarks: python -m benchmarks.models [--quick] [--models ...] [--providers ...]

Cases (float32 unless --dtype bfloat16, which times inference only; CPU):
  resnet50   eval, batch 1 and 8, 224x224 (xkernels.models.resnet50, BN statistics calibrated on one batch);
             one training step at batch 2, 224x224 (--train-batch; --quick: 112x112): train mode, so torch's
             BatchNorm with batch statistics, xkernels' convolutions (optimize() of a train-mode model folds
             nothing and fuses no epilogue), forward, MSE loss on the 1000 logits, backward, SGD step
  encoder    pre-LN transformer encoder, 4 layers, d=768, 12 heads, FFN 3072 (ReLU), batch 1 x 512 tokens:
             inference, and one training step (forward, MSE loss, backward, SGD step)
  mlp        Linear+ReLU blocks 1024-4096-4096-4096-1024, batch 64: inference and one training step

Providers: torch (eager), torch.compile (default settings), torch.compile+freezing
(torch._inductor.config.freezing = True, compiled and run under torch.no_grad(); inference only),
xkernels[<backend>] = xkernels.optimize(model) run on that backend (every available backend of
xkernels.backends() but the plain-loop reference oracle, which --providers reference adds; inference: eval model,
BatchNorm folded, conv epilogues matched, pack_weights=True). No IPEX provider: it could not be
built here (docs/performance.md, "Intel Extension for PyTorch (IPEX)").

Before any timing, every provider's float32 output (training: of the first step) is checked against a float64
copy of the torch model with xkernels.parity's float32 budget (4x PyTorch's own float32 error + 1e-5 of the
magnitude); for training, every parameter gradient of the first step of torch eager and of the xkernels
providers is checked too, from the same provider set up on a float64 copy of the model (float64 budget; why
float64: see run_case). A provider that fails is not timed, the failure is printed and recorded as a row without
timing, and the exit status is 1. Timing: warm-up (compilation) excluded; then `--rounds` (5) interleaved rounds,
each running every provider for >= min-time / rounds seconds in turn (the first round's single call sets the loop
length); per provider the median time per call, and the median over rounds of (provider time / xkernels time) =
"peer/xk" (> 1: xkernels faster).
Rows go to benchmarks/results/models.csv (the op suite's provenance columns plus warm-up time, parity and
ratio), the plot to benchmarks/results/models.png.
"""

from __future__ import annotations

# xkernels before torch (GOMP_SPINCOUNT, as in benchmarks.run).
import xkernels  # isort: skip
import torch  # isort: skip

import argparse
import copy
import csv
import datetime as _dt
import math
import signal
import statistics
import sys
import time
import types
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import torch.nn.functional as F
from torch import nn

from xkernels import models as M
from xkernels.parity import tensor_error

from .harness import CSV_FIELDS, RESULTS_DIR, env_summary, open_for_append, provenance

MODEL_CSV_FIELDS = CSV_FIELDS + ["warmup_s", "parity_budget_used", "peer_over_xkernels", "note"]
# ResNet-50 training step batch: 2 keeps a step (~25 GFLOP at 224x224) near a second on a 2-core CPU, and with
# BatchNorm's batch statistics over 2 x 7 x 7 values in the last stage still meaningful.
TRAIN_BATCH = 2
XK_REFERENCE = "xkernels[sycl]"  # the ratios' denominator (falls back to the first xkernels provider timed)


# ------------------------------------------------------------------------------------------- cases


@dataclass
class ModelCase:
    model: str  # resnet50 / encoder / mlp
    mode: str  # infer / train
    shape: str
    batch: int
    build: Callable  # () -> (model in the right mode, input, target or None)


def _seeded(seed):
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed + 1)


def _resnet(batch: int, size: int = 224, stages=(3, 4, 6, 3), mode: str = "infer"):
    def build():
        g = _seeded(50)
        model = M.ResNet(stages)
        M.calibrate_batchnorm(model, torch.randn(4, 3, 64, 64, generator=g))
        x = torch.randn(batch, 3, size, size, generator=g)
        if mode == "train":  # BatchNorm on batch statistics (and its running statistics updated), as torch trains
            return model.train(), x, torch.randn(batch, model.fc.out_features, generator=g)
        return model.eval(), x, None

    return build


def _encoder(mode: str, layers: int, tokens: int, d: int = 768, heads: int = 12, ffn: int = 3072):
    def build():
        g = _seeded(768)
        model = M.TransformerEncoder(layers, d, heads, ffn)
        x = torch.randn(1, tokens, d, generator=g)
        t = torch.randn(1, tokens, d, generator=g) if mode == "train" else None
        return (model.train() if mode == "train" else model.eval()), x, t

    return build


def _mlp(mode: str, batch: int, sizes=(1024, 4096, 4096, 4096, 1024)):
    def build():
        g = _seeded(64)
        model = M.mlp(sizes)
        x = torch.randn(batch, sizes[0], generator=g)
        t = torch.randn(batch, sizes[-1], generator=g) if mode == "train" else None
        return (model.train() if mode == "train" else model.eval()), x, t

    return build


def build_cases(args) -> list[ModelCase]:
    out = []
    modes = getattr(args, "modes", None) or ("infer", "train")
    if "resnet50" in args.models:
        size = 224 if not args.quick else 112
        if "infer" in modes:
            for b in args.batches:
                out.append(ModelCase("resnet50", "infer", f"batch={b},{size}x{size}", b, _resnet(b, size)))
        if "train" in modes:
            b = getattr(args, "train_batch", None) or TRAIN_BATCH
            out.append(ModelCase("resnet50", "train", f"batch={b},{size}x{size}", b, _resnet(b, size, mode="train")))
    if "encoder" in args.models:
        layers, tokens = (4, 512) if not args.quick else (2, 128)
        for mode in (m for m in ("infer", "train") if m in modes):
            out.append(
                ModelCase(
                    "encoder",
                    mode,
                    f"{layers}x(d=768,h=12,ffn=3072),1x{tokens} tokens",
                    1,
                    _encoder(mode, layers, tokens),
                )
            )
    if "mlp" in args.models:
        for mode in (m for m in ("infer", "train") if m in modes):
            out.append(ModelCase("mlp", mode, "1024-4096-4096-4096-1024,batch=64", 64, _mlp(mode, 64)))
    return out


# --------------------------------------------------------------------------------------- providers


class Skip(Exception):
    """A provider that does not apply to a case (the reason is printed)."""


@dataclass
class Runner:
    """One provider's prepared model for one case."""

    model: nn.Module
    fwd: Callable  # x -> output
    infer: bool
    ctx: Callable = nullcontext  # context around every call (backend selection)
    target: torch.Tensor | None = None
    lr: float = 1e-3
    opt: torch.optim.Optimizer | None = None
    extra: dict = field(default_factory=dict)

    def __post_init__(self):
        if not self.infer and self.opt is None:
            self.opt = torch.optim.SGD(self.model.parameters(), lr=self.lr)

    def first(self, x):
        """The warm-up call (compilation happens here): (output, {param name: grad} of the first step)."""
        with self.ctx():
            if self.infer:
                with torch.no_grad():
                    return self.fwd(x), {}
            self.opt.zero_grad(set_to_none=True)
            out = self.fwd(x)
            F.mse_loss(out, self.target).backward()
            grads = {n: p.grad.detach().clone() for n, p in self.model.named_parameters() if p.grad is not None}
            self.opt.step()
            return out.detach(), grads

    def __call__(self, x):
        with self.ctx():
            if self.infer:
                with torch.no_grad():
                    return self.fwd(x)
            self.opt.zero_grad(set_to_none=True)
            out = self.fwd(x)
            F.mse_loss(out, self.target).backward()
            self.opt.step()
            return out


def _unique_compile(model: nn.Module, tag: str, **kwargs):
    """torch.compile of `lambda x: model(x)` through a function with its own code object: dynamo keeps compiled
    code per code object, and with inlined nn.Modules another instance of the same model class (another
    provider's copy, compiled with other settings) could otherwise match its cache entry."""

    def run(x):
        return model(x)

    run = types.FunctionType(
        run.__code__.replace(co_name=f"run_{tag}"), run.__globals__, f"run_{tag}", None, run.__closure__
    )
    return torch.compile(run, **kwargs)


@dataclass
class Provider:
    name: str
    prepare: Callable  # (case, model, target) -> Runner; raises Skip
    available: bool = True
    reason: str = ""
    xkernels: bool = False


def _torch_provider() -> Provider:
    return Provider("torch", lambda case, model, t: Runner(model, model, case.mode == "infer", target=t))


def _compile_provider() -> Provider:
    def prepare(case, model, t):
        return Runner(model, _unique_compile(model, "compile", dynamic=False), case.mode == "infer", target=t)

    return Provider("torch.compile", prepare)


def _freezing_provider() -> Provider:
    def prepare(case, model, t):
        if case.mode != "infer":
            raise Skip("freezing is for inference only")
        import torch._inductor.config as inductor_config

        compiled = _unique_compile(model, "freezing", dynamic=False)

        # Freezing is read when the graph is compiled, i.e. at the first call (under no_grad, from Runner).
        def fwd(x):
            if not runner.extra.get("compiled"):
                with inductor_config.patch(freezing=True):
                    out = compiled(x)
                runner.extra["compiled"] = True
                return out
            return compiled(x)

        runner = Runner(model, fwd, True, target=t)
        return runner

    return Provider("torch.compile+freezing", prepare)


def _xkernels_provider(backend: str, status, memory_format: str = "auto") -> Provider:
    """xkernels.optimize(model) (its defaults; pack_weights for inference) on `backend`; with memory_format
    "preserve", the same with optimize(..., memory_format="preserve"): the model in the format it comes in
    (NCHW here), for the side-by-side measurement of optimize()'s channels_last choice."""

    def prepare(case, model, t):
        if backend == "cuda":
            raise Skip("CPU models (the cuda backend runs CUDA tensors)")
        if memory_format != "auto" and not any(isinstance(m, nn.Conv2d) for m in model.modules()):
            raise Skip("no convolutions: the memory format choice does not apply")
        infer = case.mode == "infer"
        opt = xkernels.optimize(model, pack_weights=infer, memory_format=memory_format)
        return Runner(opt, opt, infer, ctx=lambda: xkernels.use_backend(backend), target=t)

    name = f"xkernels[{backend}]" + ("" if memory_format == "auto" else f" memory_format={memory_format}")
    return Provider(name, prepare, status.available, status.reason, xkernels=True)


# No IPEX provider: intel-extension-for-pytorch 2.8.0 (the newest on PyPI) requires torch 2.8.*, and xkernels does
# not build against torch 2.8 (csrc/registration.cpp uses at::Tag::out, which torch 2.8 lacks). What was tried, and
# pip's exact answers: docs/performance.md, "Intel Extension for PyTorch (IPEX)".


def all_providers(names: list[str] | None) -> list[Provider]:
    """The named providers (default: all but xkernels[reference], the plain-loop C++ oracle: one ResNet-50 batch-8
    call there takes minutes; `--providers ... reference` adds it)."""
    st = xkernels.backends()
    provs = [_torch_provider(), _compile_provider(), _freezing_provider()]
    provs += [_xkernels_provider(b, st[b]) for b in ("sycl", "cuda", "reference") if b in st]
    if "sycl" in st:
        provs.append(_xkernels_provider("sycl", st["sycl"], memory_format="preserve"))

    def named(p, names):
        return p.name in names or p.name.split("[")[-1].rstrip("]") in names or p.name.split()[0] in names

    if names:
        return [p for p in provs if named(p, names)]
    for p in provs:
        if p.name == "xkernels[reference]" and p.available:
            p.available, p.reason = (
                False,
                "not run by default: the plain-loop C++ oracle, not a contender "
                "(minutes per ResNet-50 call); --providers ... reference adds it",
            )
    return provs


# ------------------------------------------------------------------------------------------ running


class CompileTimeout(Exception):
    pass


def _with_timeout(fn, seconds: float):
    """fn() with a SIGALRM deadline (the warm-up call, which compiles): raises CompileTimeout."""

    def alarm(signum, frame):
        raise CompileTimeout(f"warm-up (compilation) exceeded {seconds:.0f} s")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return fn()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _oracle(model: nn.Module, x, target, infer: bool):
    """float64 copy of the torch model: output (and parameter gradients of the loss, training)."""
    m64 = copy.deepcopy(model).double()
    x64 = x.double()
    if infer:
        with torch.no_grad():
            return m64(x64), {}
    out = m64(x64)
    F.mse_loss(out, target.double()).backward()
    return out.detach(), {n: p.grad for n, p in m64.named_parameters() if p.grad is not None}


def _parity(checks, dtype) -> tuple[bool, float, str]:
    """checks: [(name, got, float64 oracle, torch's same-dtype result)]. Worst share of `dtype`'s budget, what
    failed."""
    worst, failed = 0.0, []
    for name, got, ref, base in checks:
        if got is None:
            failed.append(f"{name}: missing")
            continue
        e = tensor_error(name, got, ref, dtype, base)
        worst = max(worst, e.budget_used)
        if not e.passed:
            failed.append(
                f"{name}: max abs err {e.max_abs:.3g} > budget {e.budget:.3g} "
                f"(torch {str(dtype).replace('torch.', '')} err {e.torch_max_abs:.3g})"
            )
    return not failed, worst, "; ".join(failed[:3]) + (f" (+{len(failed) - 3} more)" if len(failed) > 3 else "")


def run_case(case: ModelCase, providers: list[Provider], args, log=print) -> tuple[list[dict], list[str]]:
    model, x, target = case.build()
    dtype = getattr(torch, getattr(args, "dtype", "float32"))
    if dtype != torch.float32:  # the model and its inputs in `dtype` (the oracle stays float64 of those values)
        model, x = model.to(dtype), x.to(dtype)
        target = target.to(dtype) if target is not None else None
    infer = case.mode == "infer"
    ref_out, ref_grads = _oracle(model, x, target, infer)
    rows, failures = [], []
    live: list[tuple[Provider, Runner]] = []
    base_out, base_grads = None, {}  # torch eager's float32 output and float64 gradients (budget baselines)
    info: dict[str, dict] = {}

    def status_row(p, note):
        rows.append({"provider": p.name, "note": note})

    for p in providers:
        if not p.available:
            log(f"    {p.name:24s} skipped: unavailable ({p.reason})")
            continue
        try:
            runner = p.prepare(case, copy.deepcopy(model), target)
        except Skip as e:
            log(f"    {p.name:24s} skipped: {e}")
            continue
        except Exception as e:  # noqa: BLE001
            msg = f"setup failed: {type(e).__name__}: {str(e).strip().splitlines()[0][:200] if str(e).strip() else ''}"
            log(f"    {p.name:24s} {msg}")
            status_row(p, msg)
            continue
        t0 = time.perf_counter()
        try:
            out, grads = _with_timeout(lambda: runner.first(x), args.compile_timeout)
        except Exception as e:  # noqa: BLE001 - a provider that cannot run is reported, not timed
            msg = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:200] if str(e).strip() else ''}"
            log(f"    {p.name:24s} ERROR after {time.perf_counter() - t0:.0f}s: {msg}")
            status_row(p, f"not timed: {msg}")
            continue
        warm = time.perf_counter() - t0
        if p.name == "torch":
            base_out = out
        ok, used, why = _parity([("output", out, ref_out, base_out)], dtype)
        if ok and not infer and (p.xkernels or p.name == "torch"):
            # (torch's float64 gradients are the budget's baseline; the compiled peers are not re-run in float64:
            # their output parity is checked above, and a float64 recompilation costs minutes here.)
            # Gradients are checked in float64: in float32 a pre-activation within rounding distance of 0 flips
            # a ReLU in one run and not in another (torch's own float32 run included), and one flipped unit in a
            # late layer changes every earlier layer's gradients by 1e-4..1e-3 relative, far beyond any
            # rounding budget (seen on the encoder: 1-2 flips among 6.3 M units, in torch and xkernels alike).
            # The same provider setup on a float64 copy has no flips and still catches wrong gradients.
            try:
                r64 = p.prepare(case, copy.deepcopy(model).double(), target.double())
                _, g64 = _with_timeout(lambda: r64.first(x.double()), args.compile_timeout)
                del r64
            except Exception as e:  # noqa: BLE001
                ok, why = False, f"float64 gradient check failed to run: {type(e).__name__}: {str(e)[:200]}"
            else:
                if p.name == "torch":
                    base_grads = g64
                ok, used64, why = _parity(
                    [(f"grad {n} (float64)", g64.get(n), g, base_grads.get(n)) for n, g in ref_grads.items()],
                    torch.float64,
                )
                used = max(used, used64)
        if not ok:
            msg = f"PARITY FAILED, not timed: {why}"
            log(f"    {p.name:24s} !!!!!!!! {msg}")
            status_row(p, msg)
            failures.append(f"{case.model} {case.mode} {case.shape} {p.name}: {why}")
            continue
        info[p.name] = {"warmup_s": warm, "parity": used}
        log(f"    {p.name:24s} warm-up {warm:6.1f}s, parity ok ({used:.0%} of the {str(dtype)[6:]} budget)")
        live.append((p, runner))
    if not live:
        return rows, failures

    # Inner-loop length: each sample >= min_time / rounds. The first round runs one call per provider, and its
    # time sets the loop length of the later rounds (it is a sample too: one call of a slow case is its loop).
    inner = {p.name: 1 for p, _ in live}
    samples = {p.name: [] for p, _ in live}
    for rnd in range(args.rounds):
        for p, r in live:
            n = inner[p.name]
            t0 = time.perf_counter()
            for _ in range(n):
                r(x)
            dt = (time.perf_counter() - t0) / n
            samples[p.name].append(dt)
            if rnd == 0:
                inner[p.name] = max(1, math.ceil(args.min_time / args.rounds / max(dt, 1e-6)))
    xk = XK_REFERENCE if XK_REFERENCE in samples else next((p.name for p, _ in live if p.xkernels), None)
    for p, _ in live:
        s = samples[p.name]
        med = statistics.median(s)
        srt = sorted(s)
        q1, q3 = (srt[len(s) // 4], srt[(3 * len(s)) // 4]) if len(s) >= 4 else (srt[0], srt[-1])
        ratio = statistics.median(a / b for a, b in zip(s, samples[xk])) if xk else None
        rows.append(
            {
                "provider": p.name,
                "metric": "samples_per_s",
                "unit": "samples/s",
                "median": f"{case.batch / med:.3f}",
                "spread": f"{(q3 - q1) / med:.3f}",
                "median_ms": f"{med * 1e3:.3f}",
                "samples": len(s),
                "warmup_s": f"{info[p.name]['warmup_s']:.2f}",
                "parity_budget_used": f"{info[p.name]['parity']:.4f}",
                "peer_over_xkernels": f"{ratio:.3f}" if ratio is not None else "",
                "note": f"ratio vs {xk}" if xk else "",
            }
        )
    return rows, failures


def print_rows(rows):
    for r in rows:
        if not r.get("median_ms"):
            continue
        ratio = f"  {float(r['peer_over_xkernels']):5.2f}x" if r.get("peer_over_xkernels") else ""
        print(
            f"    {r['provider']:24s} {float(r['median_ms']):10.2f} ms ±{float(r['spread']) * 100:3.0f}%  "
            f"{float(r['median']):9.1f} samples/s{ratio}",
            flush=True,
        )


def append_rows(rows: list[dict], case: ModelCase, path: Path, prov: dict, dtype: str = "float32") -> None:
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    f, w = open_for_append(path, MODEL_CSV_FIELDS)
    with f:
        for r in rows:
            w.writerow(
                {
                    "timestamp": stamp,
                    **prov,
                    "op": case.model,
                    "mode": case.mode,
                    "dtype": dtype,
                    "shape": case.shape,
                    **r,
                }
            )


def plot(rows: list[dict], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    timed = [r for r in rows if r.get("median_ms")]
    cases = list(dict.fromkeys((r["op"], r["mode"], r["shape"]) for r in timed))
    fig, axes = plt.subplots(len(cases), 1, figsize=(10, 1.0 + 0.42 * 6 * len(cases)), squeeze=False)
    for ax, (op, mode, shape) in zip(axes[:, 0], cases):
        sel = [r for r in timed if (r["op"], r["mode"], r["shape"]) == (op, mode, shape)]
        names = [r["provider"] for r in sel]
        ms = [float(r["median_ms"]) for r in sel]
        colors = ["tab:blue" if n.startswith("xkernels") else "tab:gray" for n in names]
        ax.barh(range(len(sel)), ms, color=colors)
        ax.set_yticks(range(len(sel)))
        ax.set_yticklabels(names, fontsize=8)
        ax.invert_yaxis()
        for i, r in enumerate(sel):
            label = f" {ms[i]:.1f} ms"
            if r.get("peer_over_xkernels") and not r["provider"].startswith("xkernels[sycl"):
                label += f"  ({float(r['peer_over_xkernels']):.2f}x xkernels' time)"
            ax.text(ms[i], i, label, va="center", fontsize=7)
        ax.set_xlim(0, max(ms) * 1.6)
        ax.set_title(f"{op} {mode} — {shape} (ms per call, lower is better)", fontsize=9)
        ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def markdown_table(path: Path) -> str:
    """The latest result per (model, mode, shape, provider) among the rows of the CSV's last commit and torch
    version, as a markdown table: xkernels' time, then each peer's time and peer/xkernels ratio."""
    with path.open() as f:
        rows = [r for r in csv.DictReader(f) if r.get("median_ms")]
    if not rows:
        return ""
    last = (rows[-1]["commit"], rows[-1]["torch"])
    latest: dict = {}
    for r in rows:
        if (r["commit"], r["torch"]) == last:
            latest[(r["op"], r["mode"], r["shape"], r["provider"])] = r
    cases = list(dict.fromkeys(k[:3] for k in latest))
    provs = list(dict.fromkeys(k[3] for k in latest))
    xk = [p for p in provs if p.startswith("xkernels")]
    peers = [p for p in provs if not p.startswith("xkernels")]
    head = ["model", "mode", "shape"] + [f"{p} ms" for p in xk] + [f"{p}: ms (peer/xk)" for p in peers]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for c in cases:
        cells = list(c)
        for p in xk:
            r = latest.get(c + (p,))
            cells.append(f"{float(r['median_ms']):.1f}" if r else "–")
        for p in peers:
            r = latest.get(c + (p,))
            cells.append(
                f"{float(r['median_ms']):.1f} ({float(r['peer_over_xkernels']):.2f}x)"
                if r and r.get("peer_over_xkernels")
                else "–"
            )
        lines.append("| " + " | ".join(cells) + " |")
    return (
        "\n".join(lines)
        + f"\n\n(commit {last[0]}, torch {last[1]}, {rows[-1]['device']}, {rows[-1]['threads']} threads)"
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--quick",
        action="store_true",
        help="small shapes (ResNet-50 at 112x112, inference batch 1, encoder "
        "2 layers x 128 tokens), 3 rounds: a smoke test of the whole pipeline",
    )
    ap.add_argument(
        "--models", nargs="+", default=["resnet50", "encoder", "mlp"], choices=["resnet50", "encoder", "mlp"]
    )
    ap.add_argument("--batches", nargs="+", type=int, default=None, help="ResNet-50 batch sizes (default 1 8)")
    ap.add_argument(
        "--train-batch", type=int, default=TRAIN_BATCH, help=f"ResNet-50 training step batch (default {TRAIN_BATCH})"
    )
    ap.add_argument(
        "--modes", nargs="+", default=["infer", "train"], choices=["infer", "train"], help="cases to run (default both)"
    )
    ap.add_argument(
        "--providers",
        nargs="+",
        default=None,
        help="e.g. torch torch.compile torch.compile+freezing sycl reference (default: all but reference)",
    )
    ap.add_argument(
        "--dtype",
        default="float32",
        choices=["float32", "bfloat16"],
        help="the models' and inputs' dtype (bfloat16: inference only; every provider runs the same bf16 model)",
    )
    ap.add_argument("--rounds", type=int, default=None, help="interleaved timing rounds (default 5, --quick 3)")
    ap.add_argument(
        "--min-time",
        type=float,
        default=None,
        help="seconds of timed work per provider and case (default 3, --quick 0.6)",
    )
    ap.add_argument(
        "--compile-timeout",
        type=float,
        default=300.0,
        help="seconds allowed for one provider's warm-up call (torch.compile's compilation)",
    )
    ap.add_argument("--csv", type=Path, default=RESULTS_DIR / "models.csv")
    ap.add_argument("--plot", type=Path, default=RESULTS_DIR / "models.png")
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument(
        "--table", action="store_true", help="print the latest results in --csv as a markdown table, run nothing"
    )
    args = ap.parse_args(argv)
    if args.table:
        print(markdown_table(args.csv))
        return 0
    if args.dtype != "float32" and "train" in args.modes:
        ap.error("--dtype bfloat16 times inference only: add --modes infer")
    args.batches = args.batches or ([1] if args.quick else [1, 8])
    args.rounds = args.rounds or (3 if args.quick else 5)
    args.min_time = args.min_time or (0.6 if args.quick else 3.0)

    prov = provenance()
    providers = all_providers(args.providers)
    print(
        f"xkernels {prov['xkernels']} @ {prov['commit']} | torch {prov['torch']} | SYCL {prov['sycl_runtime']} | "
        f"{prov['device']} | torch threads {prov['threads']} | env {env_summary()}"
    )
    for p in providers:
        print(f"  provider {p.name:24s} {'available' if p.available else 'unavailable: ' + p.reason}")
    t_start = time.perf_counter()
    all_rows, failures = [], []
    for i, case in enumerate(build_cases(args), 1):
        print(f"[{i}] {case.model} {case.mode} {case.shape} {args.dtype}", flush=True)
        t0 = time.perf_counter()
        rows, fails = run_case(case, providers, args)
        print_rows(rows)
        print(f"    ({time.perf_counter() - t0:.0f}s)", flush=True)
        append_rows(rows, case, args.csv, prov, args.dtype)
        all_rows += [{"op": case.model, "mode": case.mode, "shape": case.shape, **r} for r in rows]
        failures += fails
    print(
        f"done: {sum(1 for r in all_rows if r.get('median_ms'))} timed rows in {time.perf_counter() - t_start:.0f}s "
        f"-> {args.csv}"
    )
    if not args.no_plot and any(r.get("median_ms") for r in all_rows):
        print(f"plot: {plot(all_rows, args.plot)}")
    if failures:
        print("\nPARITY FAILURES (these providers were not timed):", file=sys.stderr)
        for f in failures:
            print(f"  {f}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
