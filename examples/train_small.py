"""Train a small CNN + MLP + LayerNorm classifier on synthetic data, with plain PyTorch and with
xkernels on every available backend, from the same initial weights and the same batches.
Prints the final losses, writes a PNG of the loss curves, then runs a model-level parity check
of the trained model.

    python examples/train_small.py [--steps 40] [--out train_small.png]
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from model_parity import SmallNet  # noqa: E402

import xkernels  # noqa: E402


def synthetic_data(n: int, classes: int, device, seed: int = 0):
    """Images whose class is the best-matching of `classes` fixed random templates, plus noise:
    learnable by a small CNN in a few dozen steps."""
    g = torch.Generator().manual_seed(seed)
    templates = torch.randn(classes, 3, 16, 16, generator=g)
    labels = torch.randint(0, classes, (n,), generator=g)
    x = 0.15 * templates[labels] + torch.randn(n, 3, 16, 16, generator=g)
    return x.to(device), labels.to(device)


def train(model, x, y, steps: int, batch: int, lr: float, context) -> tuple[list[float], float]:
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    losses = []
    g = torch.Generator().manual_seed(123)  # the same batches for every run
    t0 = time.perf_counter()
    with context:
        for _ in range(steps):
            idx = torch.randint(0, x.shape[0], (batch,), generator=g).to(x.device)
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(x[idx]), y[idx])
            loss.backward()
            opt.step()
            losses.append(loss.item())
    return losses, time.perf_counter() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--out", default="train_small.png", help="PNG file for the loss curves")
    args = ap.parse_args(argv)

    device = xkernels.best_device()
    backends = xkernels.parity.backends_for_device(device)
    print(f"device {device}; xkernels backends: {', '.join(backends) or 'none'}")
    x, y = synthetic_data(1024, 4, device)
    torch.manual_seed(0)
    initial = SmallNet().to(device)

    curves: dict[str, list[float]] = {}
    seconds: dict[str, float] = {}
    runs = [("torch", copy.deepcopy(initial), contextlib.nullcontext())]
    for name in backends:
        runs.append((f"xkernels/{name}", xkernels.optimize(copy.deepcopy(initial)), xkernels.use_backend(name)))
    trained = {}
    for label, model, ctx in runs:
        with xkernels.dispatch_record() as rec:
            curves[label], seconds[label] = train(model, x, y, args.steps, args.batch, args.lr, ctx)
        ran = sorted({b for (_op, b, _dev) in rec.counts()})
        trained[label] = model
        print(
            f"{label:22s} first loss {curves[label][0]:.4f}  final loss {curves[label][-1]:.4f}  "
            f"({seconds[label]:.1f} s, {args.steps} steps; xkernels ops ran on: {', '.join(ran) or 'none'})"
        )

    base = curves["torch"]
    for label, c in curves.items():
        if label != "torch":
            diff = max(abs(a - b) for a, b in zip(c, base))
            print(f"max |loss({label}) - loss(torch)| over {args.steps} steps: {diff:.2e}")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4), dpi=110, gridspec_kw={"width_ratios": [3, 2]})
    styles = ["-", "--", ":", "-."]
    for i, (label, c) in enumerate(curves.items()):
        ax.plot(
            range(1, len(c) + 1),
            c,
            styles[i % len(styles)],
            color=f"C{i}",
            label=f"{label} (final {c[-1]:.3f})",
            linewidth=2 if i == 0 else 1.5,
        )
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy loss")
    ax.set_title(f"SmallNet on synthetic data, {device}, float32")
    ax.grid(alpha=0.3)
    ax.legend()
    # The curves overlap: show how far each xkernels run is from the torch run, step by step.
    for i, (label, c) in enumerate(curves.items()):
        if label == "torch":
            continue
        diff = [max(abs(a - b), 1e-10) for a, b in zip(c, base)]
        ax2.semilogy(range(1, len(c) + 1), diff, styles[i % len(styles)], color=f"C{i}", label=label)
    ax2.set_xlabel("step")
    ax2.set_ylabel("|loss - torch loss| (floored at 1e-10)")
    ax2.set_title("difference from the torch run")
    ax2.grid(alpha=0.3, which="both")
    if len(curves) > 1:
        ax2.legend()
    fig.tight_layout()
    fig.savefig(args.out)
    print(f"loss curves written to {args.out}")

    # Model-level parity of the trained xkernels model, on a batch of training data.
    label = next((k for k in trained if k != "torch"), None)
    if label is None:
        print("no xkernels backend available: skipping the model-parity run")
        return 0
    model = trained[label].eval()
    rep = xkernels.parity.check_model(model, x[:16], name=f"SmallNet after training with {label}")
    rep.print(details="failing")
    return 0 if rep.passed else 1


if __name__ == "__main__":
    sys.exit(main())
