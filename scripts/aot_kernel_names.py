"""The `// xkernels-aot: <name>` lines of csrc/sycl/kernels/*.hpp, derived from the built module.

Each kernel file lists the registered names its host file (csrc/sycl/<op>.cpp) asks the kernel provider
for, so that the oneAPI build (buildtools/oneapi.py, docs/oneapi.md) compiles exactly those ahead of time.
The names depend on the device (dtypes, sub-group sizes), so the list is the union over every dtype and
the sub-group profiles below; a device asking for a name the library lacks gets that group compiled at
run time (the provider records why). This script asks the built module (_C.sycl.group_kernel_names) and
  --check   exits 1, printing the difference, when a file's lines differ (tests/test_oneapi_build.py runs it);
  --write   rewrites the block at the end of each kernel file.

Usage: PYTHONPATH=python python scripts/aot_kernel_names.py --check|--write
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KERNELS = ROOT / "csrc" / "sycl" / "kernels"
PREFIX = "// xkernels-aot: "
HEADER = [
    "// Ahead-of-time kernel names (docs/oneapi.md): every registered name the host code asks for, for every",
    "// dtype and the sub-group profiles of scripts/aot_kernel_names.py, which writes and checks this list.",
]

# Sub-group sizes of the device families the AOT library serves (the kernels' names depend on them):
# Intel CPUs (OpenCL) and Intel Arc GPUs offer 8/16/32 (CPUs also 4, 64), Intel Data Center GPU Max 16/32,
# NVIDIA GPUs 32. Every profile supports fp16 and fp64, so every dtype's names are included.
PROFILES = ((8, 16, 32), (16, 32), (32,))


def expected(sycl) -> dict[str, list[str]]:
    """{kernel file: names} from the module's kernel groups, in first-seen order."""
    out: dict[str, list[str]] = {}
    for file in sycl.kernel_groups():
        names: list[str] = []
        for sg in PROFILES:
            for n in sycl.group_kernel_names(file, True, True, list(sg)):
                if n not in names:
                    names.append(n)
        out[file] = names
    return out


def listed(path: Path) -> list[str]:
    return [line[len(PREFIX) :].strip() for line in path.read_text().splitlines() if line.startswith(PREFIX)]


def rewrite(path: Path, names: list[str]) -> None:
    lines = [line for line in path.read_text().splitlines() if not line.startswith(PREFIX) and line not in HEADER]
    while lines and not lines[-1].strip():
        lines.pop()
    path.write_text("\n".join(lines + [""] + HEADER + [PREFIX + n for n in names]) + "\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true")
    mode.add_argument("--write", action="store_true")
    args = ap.parse_args(argv)
    from xkernels import _C

    if not _C.with_sycl:
        print("xkernels was built without SYCL: no kernel groups to compare", file=sys.stderr)
        return 2
    bad = 0
    for file, names in expected(_C.sycl).items():
        path = KERNELS / file
        have = listed(path)
        if have == names:
            continue
        if args.write:
            rewrite(path, names)
            print(f"{path.relative_to(ROOT)}: wrote {len(names)} names")
            continue
        bad += 1
        missing = [n for n in names if n not in have]
        extra = [n for n in have if n not in names]
        print(
            f"{path.relative_to(ROOT)}: its '{PREFIX.strip()}' lines differ from the names "
            f"csrc/sycl/{Path(file).stem}.cpp registers (run scripts/aot_kernel_names.py --write)"
        )
        for n in missing:
            print(f"  missing: {n}")
        for n in extra:
            print(f"  not registered: {n}")
        if not missing and not extra:
            print("  same names, different order")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
