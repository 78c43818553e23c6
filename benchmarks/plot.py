"""PNG plots of benchmark rows: one figure per op, throughput per shape, one bar per provider."""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def plot_rows(rows: list[dict], out_dir: Path) -> list[Path]:
    paths = []
    for op in sorted({r["op"] for r in rows}):
        op_rows = [r for r in rows if r["op"] == op]
        panels = sorted({(r["mode"], r["dtype"]) for r in op_rows})
        fig, axes = plt.subplots(len(panels), 1, figsize=(13, 3.8 * len(panels)), squeeze=False)
        for ax, (mode, dtype) in zip(axes[:, 0], panels):
            sel = [r for r in op_rows if r["mode"] == mode and r["dtype"] == dtype]
            shapes = list(dict.fromkeys(r["shape"] for r in sel))
            provs = list(dict.fromkeys(r["provider"] for r in sel))
            width = 0.8 / max(len(provs), 1)
            for j, p in enumerate(provs):
                vals = {r["shape"]: float(r["median"]) for r in sel if r["provider"] == p}
                xs = [i + j * width for i, s in enumerate(shapes) if s in vals]
                ax.bar(xs, [vals[s] for s in shapes if s in vals], width, label=p)
            ax.set_xticks([i + 0.4 - width / 2 for i in range(len(shapes))])
            ax.set_xticklabels(shapes, rotation=20, ha="right", fontsize=7)
            ax.set_ylabel(sel[0]["unit"])
            ax.set_title(f"{op} — {mode} — {dtype}")
            ax.legend(fontsize=7)
            ax.grid(axis="y", alpha=0.3)
        fig.tight_layout()
        path = out_dir / f"{op}.png"
        fig.savefig(path, dpi=90)
        plt.close(fig)
        paths.append(path)
    return paths


if __name__ == "__main__":
    src = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent / "results" / "results.csv"
    with src.open() as f:
        rows = list(csv.DictReader(f))
    commit = rows[-1]["commit"] if rows else None
    rows = [r for r in rows if r["commit"] == commit]  # latest run's commit only
    for p in plot_rows(rows, src.parent):
        print(p)
