"""Does the SYCL CPU device reach AMX / AVX512-BF16 from run-time-compiled kernels? A short report.

    PYTHONPATH=python python scripts/probes/bf16_matrix_probe.py [--keep DIR]

Safe on AMX and non-AMX machines: every kernel build and run happens in a child process with a
timeout (building a joint_matrix kernel for the wrong target aborts the process with SIGABRT, and
AMX/AVX-512 code on a CPU without them dies with SIGILL), and the parent only reports exit codes,
the last lines of stderr and what the generated assembly contains.

What it gathers:
1. the CPU flags that matter (/proc/cpuinfo): avx2, fma, avx512f, avx512_bf16, amx_tile, amx_bf16;
2. what the SYCL runtime says about the CPU device (architecture, aspects, ext_intel_matrix,
   matrix_combinations), from scripts/probes/sycl_device_query.cpp compiled with plain g++ against
   the intel-sycl-rt headers (host code only; skipped when g++ is missing);
3. children, each with its own fresh kernel cache and CL_CONFIG_DUMP_ASM on:
   - fma:      a bf16 x bf16 -> fp32 multiply-add kernel without joint_matrix (xkernels.sycl.load_inline),
               default target: which instructions does it become (vfmadd*ps, vdpbf16ps)?
   - fma-spr:  the same with CL_CONFIG_CPU_TARGET_ARCH=sapphirerapids, build only (asm), and run
               only where the CPU has avx512_bf16;
   - jm-auto:  a bf16 joint_matrix GEMM (16x16x32 tiles, B in the ext_intel_packed layout), default
               target (CL_CONFIG_CPU_TARGET_ARCH=auto): build and run, result checked against float64;
   - jm-spr:   the same with CL_CONFIG_CPU_TARGET_ARCH=sapphirerapids: build (asm: tdpbf16ps?), and run
               only where /proc/cpuinfo has amx_bf16 (elsewhere --run-everything runs it anyway, to
               record the failure).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8")
# Instructions worth counting in the generated code.
INSNS = ("tdpbf16ps", "tileloadd", "tilestored", "ldtilecfg", "vdpbf16ps", "vcvtneps2bf16", "vfmadd", "vgather")

FMA_SRC = r"""
// out[i] = sum_k a[i*K + k] * b[k], bf16 inputs, fp32 accumulation: the shape of a bf16 matmul's inner loop.
void bf16_dot(xk::item_arg<1> ia, const xk::bf16* a, const xk::bf16* b, float* out, int64_t rows, int64_t K) {
  const int64_t i = xk::item(ia).get_global_id(0);
  if (i >= rows) return;
  float acc = 0.0f;
  for (int64_t k = 0; k < K; ++k) acc = sycl::fma(xk::load(a, i * K + k), xk::load(b, k), acc);
  out[i] = acc;
}
"""

JM_SRC = r"""
// C[M,N] (fp32) = A[M,K] (bf16, row-major) x B (bf16, VNNI-packed [K/2][2N]); one sub-group of 16 per 16x16 C tile.
namespace jm = sycl::ext::oneapi::experimental::matrix;
using bfx = sycl::ext::oneapi::bfloat16;
void jm_gemm(xk::item_arg<2> ia, const xk::bf16* A, const xk::bf16* Bp, float* C, int64_t M, int64_t N, int64_t K) {
  const auto it = xk::item(ia);
  const auto sg = it.get_sub_group();
  const int64_t tm = it.get_group(0), tn = it.get_group(1);
  const bfx* a_ptr = reinterpret_cast<const bfx*>(A);
  const bfx* b_ptr = reinterpret_cast<const bfx*>(Bp);
  jm::joint_matrix<sycl::sub_group, float, jm::use::accumulator, 16, 16> c;
  jm::joint_matrix<sycl::sub_group, bfx, jm::use::a, 16, 32, jm::layout::row_major> a;
  jm::joint_matrix<sycl::sub_group, bfx, jm::use::b, 32, 16, jm::layout::ext_intel_packed> b;
  jm::joint_matrix_fill(sg, c, 0.0f);
  for (int64_t k0 = 0; k0 < K; k0 += 32) {
    jm::joint_matrix_load(sg, a,
        sycl::address_space_cast<sycl::access::address_space::global_space, sycl::access::decorated::no>(
            a_ptr + tm * 16 * K + k0), K);
    jm::joint_matrix_load(sg, b,
        sycl::address_space_cast<sycl::access::address_space::global_space, sycl::access::decorated::no>(
            b_ptr + (k0 / 2) * (2 * N) + tn * 32), 2 * N);
    jm::joint_matrix_mad(sg, c, a, b, c);
  }
  jm::joint_matrix_store(sg, c,
      sycl::address_space_cast<sycl::access::address_space::global_space, sycl::access::decorated::no>(
          C + tm * 16 * N + tn * 16), N, jm::layout::row_major);
}
"""


def cpu_flags() -> dict[str, bool]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return {}
    m = re.search(r"^flags\s*:\s*(.*)$", text, re.M)
    have = set(m.group(1).split()) if m else set()
    model = re.search(r"^model name\s*:\s*(.*)$", text, re.M)
    out = {f: f in have for f in FLAGS}
    out["model name"] = model.group(1).strip() if model else "?"  # type: ignore[assignment]
    return out


def device_query(work: Path) -> str:
    """The SYCL runtime's own answers (architecture, aspects, matrix_combinations) via a tiny host program."""
    gxx = shutil.which("g++")
    if gxx is None:
        return "(skipped: no g++)"
    prefix = Path(sys.prefix)
    exe = work / "sycl_device_query"
    cmd = [gxx, "-std=c++17", "-O1", "-w", f"-I{prefix / 'include'}", str(HERE / "sycl_device_query.cpp"), "-o"]
    cmd += [str(exe), f"-L{prefix / 'lib'}", "-lsycl", f"-Wl,-rpath,{prefix / 'lib'}"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        return "(g++ failed: " + r.stderr.strip().splitlines()[-1][:300] + ")"
    env = dict(os.environ)
    ocl = prefix / "lib" / "libintelocl.so"
    env.setdefault("OCL_ICD_FILENAMES", str(ocl))
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120, env=env)
    return (r.stdout + r.stderr).strip() + ("" if r.returncode == 0 else f"\n(exit {r.returncode})")


# ----------------------------------------------------------------------------------- children


def _child(case: str, run: bool) -> None:
    import xkernels  # noqa: F401, I001  (first: sets the OpenCL ICD and cache variables)
    import torch
    from xkernels import sycl

    torch.manual_seed(0)
    report: dict[str, object] = {"case": case}
    if case.startswith("fma"):
        lib = sycl.load_inline("bf16_probe_dot", FMA_SRC)
        rows, K = 64, 256
        a = torch.randn(rows, K).to(torch.bfloat16)
        b = torch.randn(K).to(torch.bfloat16)
        out = torch.empty(rows)
        lib.build("cpu", [torch.bfloat16])
        report["built"] = True
        if run:
            lib.bf16_dot[rows, 16](a, b, out, rows, K)
            ref = a.double() @ b.double()
            report["max_rel_err"] = float(((out.double() - ref).abs().max() / ref.abs().max()).item())
    else:
        lib = sycl.load_inline("bf16_probe_jm", JM_SRC, sub_group_size=16)
        M = N = K = 64
        A = torch.randn(M, K).to(torch.bfloat16)
        B = torch.randn(K, N).to(torch.bfloat16)
        # VNNI packing: element (k, n) at [k // 2][2 * n + k % 2].
        Bp = B.reshape(K // 2, 2, N).permute(0, 2, 1).contiguous().reshape(K // 2, 2 * N)
        C = torch.empty(M, N)
        lib.build("cpu", [torch.bfloat16])
        report["built"] = True
        if run:
            lib.jm_gemm[(M // 16, N), (1, 16)](A, Bp, C, M, N, K)
            ref = A.double() @ B.double()
            report["max_rel_err"] = float(((C.double() - ref).abs().max() / ref.abs().max()).item())
    print("CHILD-REPORT " + json.dumps(report), flush=True)


def _count_insns(asm_dir: Path) -> dict[str, int]:
    counts = dict.fromkeys(INSNS, 0)
    for f in asm_dir.rglob("*"):
        if not f.is_file():
            continue
        text = f.read_text(errors="replace")
        for insn in INSNS:
            counts[insn] += len(re.findall(r"\b" + insn + r"\w*", text))
    return counts


def run_case(case: str, target: str | None, run: bool, work: Path, timeout: int) -> dict[str, object]:
    d = work / case
    asm = d / "asm"
    asm.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.update(
        XKERNELS_CACHE_DIR=str(d / "cache"),  # fresh cache: the kernel really is compiled (and dumped)
        CL_CONFIG_DUMP_ASM="True",
        CL_CONFIG_DUMP_FILE_NAME_PREFIX=str(asm) + "/",
        XKERNELS_SYCL_PROGRESS="0",
    )
    # The caller's PYTHONPATH first (the xkernels to probe), this checkout's python/ as the fallback.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH", ""), str(ROOT / "python")) if p)
    if target:
        env["CL_CONFIG_CPU_TARGET_ARCH"] = target
    else:
        env.pop("CL_CONFIG_CPU_TARGET_ARCH", None)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", case] + ([] if run else ["--build-only"])
    res: dict[str, object] = {"case": case, "target": target or "auto", "ran": run}
    try:
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        res["exit"] = f"timeout after {timeout} s"
        return res
    rc = r.returncode
    res["exit"] = rc if rc >= 0 else f"{rc} ({signal.Signals(-rc).name})"
    for line in r.stdout.splitlines():
        if line.startswith("CHILD-REPORT "):
            res.update(json.loads(line[len("CHILD-REPORT ") :]))
    if rc != 0:
        lines = [ln for ln in (r.stderr + r.stdout).splitlines() if ln.strip()]
        keep = [ln for ln in lines if re.search(r"error|Error|abort|Abort|Cannot|LLVM|Illegal|what\(\)", ln)]
        res["stderr"] = [ln[:240] for ln in (keep[-6:] or lines[-6:])]
    res["asm_files"] = sorted(p.name for p in asm.rglob("*") if p.is_file())
    res["insns"] = _count_insns(asm)
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--build-only", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--keep", type=Path, help="keep the work directory (asm dumps) here")
    ap.add_argument(
        "--run-everything",
        action="store_true",
        help="also run kernels built for a target this CPU lacks (expect SIGILL; children only)",
    )
    ap.add_argument("--timeout", type=int, default=300, help="seconds per child (default 300)")
    args = ap.parse_args()
    if args.child:
        _child(args.child, run=not args.build_only)
        return 0

    flags = cpu_flags()
    amx = bool(flags.get("amx_bf16"))
    avx512bf16 = bool(flags.get("avx512_bf16"))
    work = args.keep or Path(tempfile.mkdtemp(prefix="bf16-probe-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"CPU: {flags.pop('model name', '?')}")
    print("flags: " + ", ".join(f"{k}={'yes' if v else 'no'}" for k, v in flags.items()))
    print("\n-- SYCL runtime's answers (scripts/probes/sycl_device_query.cpp) --")
    print(device_query(work))
    cases = [
        ("fma", None, True),
        ("fma-spr", "sapphirerapids", avx512bf16 or args.run_everything),
        ("jm-auto", None, True),
        ("jm-spr", "sapphirerapids", amx or args.run_everything),
    ]
    print("\n-- kernels (each in a child process; asm counts from CL_CONFIG_DUMP_ASM) --")
    for case, target, run in cases:
        res = run_case(case, target, run, work, args.timeout)
        insns = {k: v for k, v in res.pop("insns").items() if v}  # type: ignore[union-attr]
        files = res.pop("asm_files")
        err = res.pop("stderr", None)
        print(f"{case:8s} target={res['target']:14s} ran={res['ran']!s:5s} exit={res['exit']}", end="")
        if "max_rel_err" in res:
            print(f"  max_rel_err={res['max_rel_err']:.2e}", end="")
        print(f"  asm files={len(files)}  instructions={insns or '{}'}")  # type: ignore[arg-type]
        for ln in err or []:
            print(f"    | {ln}")
    print(f"\nwork directory (asm dumps): {work}" + ("" if args.keep else " (temporary; --keep DIR to choose)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
