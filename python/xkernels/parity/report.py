"""Printing: number formats, the console, the op summary table and the dispatch table. Report
objects (OpReport, ModelReport, CompareReport) build their own tables from these helpers."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .ops import OpReport

__all__ = ["make_console", "summary_table", "print_reports", "dispatch_table"]


def _fmt(x: float | None, digits: int = 2) -> str:
    if x is None:
        return "-"
    if not math.isfinite(x):
        return str(x)
    if x == 0:
        return "0"
    if digits == 1:
        return f"{x:.2f}" if x < 1 else (f"{x:.1f}" if x < 1e5 else f"{x:.1e}")
    return f"{x:.{digits}e}"


def _fmt_ratio(x: float | None) -> str:
    if x is None:
        return "-"
    if math.isinf(x):
        return "inf"
    return f"{x:.2f}" if x < 1000 else f"{x:.1e}"


def _verdict(ok: bool, note: str = "") -> str:
    s = "[green]ok[/]" if ok else "[bold red]FAIL[/]"
    return f"{s} [dim]{note}[/]" if note else s


def _console(console=None):
    if console is not None:
        return console
    return make_console()


def make_console(file=None):
    """A rich console that also reads well in CI logs: no highlighting, and when the output
    is not a terminal, no colour codes and a fixed width ($COLUMNS, default 160) instead of 80."""
    import os

    from rich.console import Console

    c = Console(highlight=False, file=file)
    if not c.is_terminal:
        width = int(os.environ.get("COLUMNS", "160") or 160)
        c = Console(highlight=False, file=file, width=width, no_color=True)
    return c


def dispatch_table(events: list[dict], title: str = "dispatch record"):
    """Which backend ran each xkernels op (calls), with fallback reasons."""
    from rich.table import Table

    t = Table(title=title, title_justify="left")
    for col in ("op", "ran on", "device", "calls", "fallback reason"):
        t.add_column(col, justify="right" if col == "calls" else "left")
    for e in sorted(events, key=lambda e: (e["op"], e["backend"])):
        t.add_row(e["op"], e["backend"], e["device"], str(e["calls"]), e["fallback_reason"] or "-")
    return t


def summary_table(reports: Sequence[OpReport], title: str = "op parity vs float64 oracle"):
    """One row per (case, dtype, backend): forward error and the worst gradient error (both
    with their ratio to PyTorch's), the share of the budget used by the worst tensor, and the
    verdict (naming the failing tensors). Rows are grouped by op (a section per op)."""
    from rich.table import Table

    t = Table(title=title, title_justify="left")
    for col, just in (
        ("op / case", "left"),
        ("dtype", "left"),
        ("backend", "left"),
        ("fwd err", "right"),
        ("x torch", "right"),
        ("bwd err", "right"),
        ("x torch", "right"),
        ("used", "right"),
        ("result", "left"),
    ):
        t.add_column(col, justify=just)
    current_op = None
    for rep in reports:
        if rep.op != current_op:
            if current_op is not None:
                t.add_section()
            t.add_row(f"[bold]{rep.op}[/]", "", "", "", "", "", "", "", "")
            current_op = rep.op
        case = f"  {rep.case}"
        if not rep.results:
            t.add_row(case, rep.dtype, "-", "", "", "", "", "", "[yellow]no backend[/]")
        for r in rep.results:
            if r.error:
                t.add_row(case, rep.dtype, r.backend, "", "", "", "", "", f"[red]ERROR[/] {r.error}")
                continue
            fwd = next((e for e in r.tensors if e.name == "output"), None)
            bwd = max((e for e in r.tensors if e.name != "output"), key=lambda e: e.budget_used, default=None)
            worst = r.worst()
            fails = [e.name for e in r.tensors if not e.passed] + ([] if r.dispatch_ok else ["ran elsewhere"])
            used = worst.budget_used if worst else 0.0
            t.add_row(
                case,
                rep.dtype,
                r.backend,
                _fmt(fwd.max_abs) if fwd else "",
                _fmt_ratio(fwd.ratio_to_torch) if fwd else "",
                _fmt(bwd.max_abs) if bwd else "-",
                _fmt_ratio(bwd.ratio_to_torch) if bwd else "",
                f"{used:.0%}" if math.isfinite(used) and used < 100 else ">100x",
                _verdict(r.passed, ",".join(fails)),
            )
    return t


def print_reports(reports: Sequence[OpReport], console=None) -> None:
    _console(console).print(summary_table(reports))
