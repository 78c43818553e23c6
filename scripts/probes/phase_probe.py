"""Slow phases of SYCL kernels on a virtual machine, and where the OpenCL runtime's threads sit.

    PYTHONPATH=python python scripts/probes/phase_probe.py [--rounds 20] [--sleep 3]

On the 2-vCPU AMD EPYC VM the same SYCL kernels sometimes ran 1.3-3x slower for a while (docs/performance.md,
"Slow phases on the AMD EPYC VM"). This probe separates what such a phase depends on. Every `--sleep` seconds, one
round, in one process (fp32, `xkernels.use_backend("sycl")`, milliseconds per call, mean of 5 calls after one warm-up
call):

  xk_conv     xkernels.conv2d_packed, 3x3 64 -> 64, 56x56, batch 8, channels_last (Winograd: GEMM + memory-bound
              input / output transforms)
  torch_conv  torch's F.conv2d on the same tensors (oneDNN)
  torch_add   torch.add of two 32 MiB tensors into a third (memory bound, torch's OpenMP threads)
  flt         minor page faults per xkernels call; cpu0, cpu1, ...: CPU time (ms) of the process's threads on that
              CPU during the xkernels calls (from /proc/self/task/*/stat: the CPU a thread last ran on)

Before the rounds it prints each thread's CPU affinity after the first SYCL kernel: the runtime pins its worker,
and with SYCL_CPU_CU_AFFINITY set it also pins the calling thread, which torch's OpenMP workers created later
inherit (`--matmul` times a 1024 x 1024 torch matmul after that, with torch's thread count).
"""

from __future__ import annotations

import argparse
import os
import resource
import time

import xkernels  # isort: skip  (first: its OpenMP default applies before torch loads)
import torch
import torch.nn.functional as F


def _threads() -> dict[int, tuple[int, int]]:
    """thread id -> (CPU time in clock ticks, CPU it last ran on)."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[int(tid)] = (int(fields[11]) + int(fields[12]), int(fields[36]))
    return out


CALLS = 5  # timed calls per measurement, after one warm-up call


def _mean_ms(fn, calls: int = CALLS) -> float:
    fn()
    t = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t) / calls * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--sleep", type=float, default=3.0, help="seconds between rounds")
    ap.add_argument("--matmul", action="store_true", help="time a torch matmul after the first SYCL kernel")
    args = ap.parse_args()

    tick_ms = 1e3 / os.sysconf("SC_CLK_TCK")
    with xkernels.use_backend("sycl"), torch.no_grad():
        # The first SYCL kernel before any parallel torch op: the runtime starts (and places its threads) first.
        xkernels.layer_norm(torch.ones(4, 8), [8])
        for tid in sorted(_threads()):
            print(f"thread {tid}: affinity {sorted(os.sched_getaffinity(tid))}")
        env = {k: v for k, v in os.environ.items() if k.startswith(("SYCL_CPU_", "DPCPP_CPU_"))}
        print(f"runtime settings: {env or 'none'}; torch threads: {torch.get_num_threads()}")
        if args.matmul:  # torch's OpenMP workers start here, inheriting the calling thread's affinity
            m = torch.ones(1024, 1024)
            print(f"torch matmul 1024^3: {min(_mean_ms(lambda: m @ m) for _ in range(3)):.2f} ms")
        cl = torch.channels_last
        x = torch.randn(8, 64, 56, 56).contiguous(memory_format=cl)
        w = torch.randn(64, 64, 3, 3) * 0.05
        w_cl = w.contiguous(memory_format=cl)
        a, b, c = torch.randn(8 << 20), torch.randn(8 << 20), torch.empty(8 << 20)
        packed = xkernels.pack_conv2d_weight(w)
        cpus = os.cpu_count() or 1
        print("time      xk_conv torch_conv torch_add  flt" + "".join(f"  cpu{i}" for i in range(cpus)))
        for _ in range(args.rounds):
            t0, f0 = _threads(), resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            xk = _mean_ms(lambda: xkernels.conv2d_packed(x, packed, w.shape, None, padding=1))
            t1, f1 = _threads(), resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            per_cpu = [0.0] * cpus
            for tid, (ticks, cpu) in t1.items():
                if cpu < cpus:
                    per_cpu[cpu] += (ticks - t0.get(tid, (0, 0))[0]) * tick_ms
            tc = _mean_ms(lambda: F.conv2d(x, w_cl, None, padding=1))
            ta = _mean_ms(lambda: torch.add(a, b, out=c))
            print(
                f"{time.strftime('%H:%M:%S')} {xk:8.2f} {tc:10.2f} {ta:9.2f} {(f1 - f0) // (CALLS + 1):4d}"
                + "".join(f" {t:5.0f}" for t in per_cpu),
                flush=True,
            )
            time.sleep(args.sleep)


if __name__ == "__main__":
    main()
