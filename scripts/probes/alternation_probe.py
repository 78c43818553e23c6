"""Cost of alternating torch ops and xkernels SYCL ops, per OpenCL-runtime thread setting.

    PYTHONPATH=python python scripts/probes/alternation_probe.py [--rounds 3] [--only NAME ...]

The OpenCL CPU runtime runs SYCL kernels on TBB worker threads; torch's CPU ops run on its OpenMP
threads. Both pools spin after their work, so alternating the two can cost more than the two alone
(docs/performance.md, "Threads"). Each setting (environment variables for the OpenCL runtime) runs
in its own child process, `import xkernels` first (so xkernels' own GOMP_SPINCOUNT default applies
unless the setting names it); the settings run round-robin, `--rounds` times, in a rotated order, so
machine noise hits all of them alike.

Per child (fp32, `xkernels.use_backend("sycl")`, median over blocks of calls, microseconds per call):
  t_lin   torch relu(linear) 64x1024x1024         s_ln   xkernels.layer_norm 2048x1024 (out=)
  t_ln    torch layer_norm 2048x1024              s_lin  xkernels.fused_linear_relu 64x1024x1024
  A       t_lin then s_ln, alternating            B      t_ln then s_lin, alternating
and the ratios A / (t_lin + s_ln), B / (t_ln + s_lin) (1.00 = alternating costs nothing extra); and
  spin_t / spin_s: CPU time (us, all threads) the process burns during a 20 ms sleep right after one
  t_lin / s_ln call, i.e. how long the idle OpenMP / TBB workers keep spinning (median of 15).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent

# name -> environment changes (None removes the variable). The OpenCL CPU runtime reads these
# (strings of libintelocl.so; DPCPP_* also as SYCL_CPU_*), documented in its cl.cfg and in Intel's
# "Control Binary Execution on Multiple CPU Cores".
SETTINGS: dict[str, dict[str, str | None]] = {
    "default": {},
    "DPCPP_CPU_SCHEDULE=static": {"DPCPP_CPU_SCHEDULE": "static"},
    "DPCPP_CPU_SCHEDULE=affinity": {"DPCPP_CPU_SCHEDULE": "affinity"},
    "DPCPP_CPU_CU_AFFINITY=close": {"DPCPP_CPU_CU_AFFINITY": "close"},
    "DPCPP_CPU_CU_AFFINITY=spread": {"DPCPP_CPU_CU_AFFINITY": "spread"},
    "CL_CONFIG_CPU_TBB_NUM_WORKERS=1": {"CL_CONFIG_CPU_TBB_NUM_WORKERS": "1"},
    "DPCPP_CPU_NUM_CUS=1": {"DPCPP_CPU_NUM_CUS": "1"},
}
KEYS = ("t_lin", "s_ln", "A", "t_ln", "s_lin", "B")


def _child(blocks: int, calls: int) -> None:
    import xkernels  # noqa: I001  (first: its GOMP_SPINCOUNT default applies unless the setting names it)
    import torch
    import torch.nn.functional as F

    torch.manual_seed(0)
    x64 = torch.randn(64, 1024)
    w = torch.randn(1024, 1024) / 32
    b = torch.randn(1024)
    x2k = torch.randn(2048, 1024)
    g, beta = torch.randn(1024), torch.randn(1024)
    out_ln = torch.empty_like(x2k)

    def t_lin():
        torch.relu(F.linear(x64, w, b))

    def s_ln():
        xkernels.layer_norm(x2k, (1024,), g, beta, 1e-5, out=out_ln)

    def t_ln():
        F.layer_norm(x2k, (1024,), g, beta, 1e-5)

    def s_lin():
        xkernels.fused_linear_relu(x64, w, b)

    def pair_a():
        t_lin()
        s_ln()

    def pair_b():
        t_ln()
        s_lin()

    fns = {"t_lin": t_lin, "s_ln": s_ln, "A": pair_a, "t_ln": t_ln, "s_lin": s_lin, "B": pair_b}
    with xkernels.use_backend("sycl"):
        for f in fns.values():  # compile / warm up
            for _ in range(3):
                f()
        res: dict[str, list[float]] = {k: [] for k in fns}
        for _ in range(blocks):  # interleave the measurements, block by block
            for k, f in fns.items():
                t0 = time.perf_counter()
                for _ in range(calls):
                    f()
                res[k].append((time.perf_counter() - t0) / calls * 1e6)
        # The spin itself: CPU time the whole process burns during a 20 ms sleep right after one op
        # (its worker threads spinning; ~0 when they sleep at once). Less load-sensitive than wall time.
        spin: dict[str, list[float]] = {"spin_t": [], "spin_s": []}
        for _ in range(15):
            for k, f in (("spin_t", t_lin), ("spin_s", s_ln)):
                f()
                c0 = time.process_time()
                time.sleep(0.02)
                spin[k].append((time.process_time() - c0) * 1e6)
    out = {k: statistics.median(v) for k, v in res.items()}
    out.update({k: statistics.median(v) for k, v in spin.items()})
    out["omp"] = xkernels._env.openmp_spin_status()
    print("CHILD " + json.dumps(out), flush=True)


def run_setting(name: str, blocks: int, calls: int) -> dict | None:
    env = dict(os.environ)
    for k, v in SETTINGS[name].items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH", ""), str(ROOT / "python")) if p)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", "--blocks", str(blocks), "--calls", str(calls)]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    for line in r.stdout.splitlines():
        if line.startswith("CHILD "):
            return json.loads(line[6:])
    print(f"  {name}: child failed (exit {r.returncode}): {r.stderr.strip()[-500:]}", file=sys.stderr)
    return None


def _rng(vals: list[float], fmt: str = "{:.0f}") -> str:
    lo, hi = min(vals), max(vals)
    return fmt.format(lo) if fmt.format(lo) == fmt.format(hi) else f"{fmt.format(lo)}-{fmt.format(hi)}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--blocks", type=int, default=7)
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--only", nargs="*", choices=list(SETTINGS), help="settings to run (default: all)")
    ap.add_argument("--json", type=Path, help="also write every child's result here")
    args = ap.parse_args()
    if args.child:
        _child(args.blocks, args.calls)
        return 0
    names = args.only or list(SETTINGS)
    results: dict[str, list[dict]] = {n: [] for n in names}
    for rnd in range(args.rounds):
        order = names[rnd % len(names) :] + names[: rnd % len(names)]
        for n in order:
            r = run_setting(n, args.blocks, args.calls)
            if r is not None:
                r["round"] = rnd
                results[n].append(r)
                print(
                    f"round {rnd} {n:34s} "
                    + " ".join(f"{k}={r[k]:.0f}" for k in KEYS)
                    + f"  A/sum={r['A'] / (r['t_lin'] + r['s_ln']):.2f} B/sum={r['B'] / (r['t_ln'] + r['s_lin']):.2f}"
                    + f"  spin_t={r['spin_t']:.0f} spin_s={r['spin_s']:.0f}",
                    flush=True,
                )
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    print(f"\n{args.rounds} rounds, median of {args.blocks} blocks x {args.calls} calls each; us per call (min-max)")
    print("| setting | t_lin | s_ln | A (A/sum) | t_ln | s_lin | B (B/sum) | spin after torch / SYCL op |")
    print("|---|---|---|---|---|---|---|---|")
    for n in names:
        rs = results[n]
        if not rs:
            print(f"| {n} | failed |")
            continue

        def col(k: str, rs: list[dict] = rs) -> str:
            return _rng([r[k] for r in rs])

        ra = [r["A"] / (r["t_lin"] + r["s_ln"]) for r in rs]
        rb = [r["B"] / (r["t_ln"] + r["s_lin"]) for r in rs]
        print(
            f"| `{n}` | {col('t_lin')} | {col('s_ln')} | {col('A')} ({_rng(ra, '{:.2f}')}x) | {col('t_ln')} | "
            f"{col('s_lin')} | {col('B')} ({_rng(rb, '{:.2f}')}x) | {col('spin_t')} / {col('spin_s')} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
