"""Command line: ``python -m xkernels [command]`` (also installed as ``xkernels``).

  check (default)        environment, backends and devices, then every op forward and backward on
                         every available backend for a standard set of shapes and dtypes against
                         the float64 oracle; exit status 1 if anything is outside its error budget
  info [--json]          versions, build configuration, backends, devices, kernel provider, cache,
                         and the device XKERNELS_DEVICE=auto|cpu|cuda|xpu gives (and why)
  parity MODULE:FACTORY  model-level parity for a user factory returning (model, inputs): across
                         xkernels backends, or across configurations with --configs A,B
                         (devices, dtypes / autocast, eager / compile, backends, optimize)
  warmup                 compile every SYCL kernel for every usable device now
  cache info|clear       the on-disk kernel cache

Exit status: 0 success, 1 a parity failure, 2 a usage error (bad arguments, a factory that
cannot be loaded, an invalid XKERNELS_DEVICE), 3 nothing could run (no backend available for the
device, or the device XKERNELS_DEVICE names is absent).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import platform
import shutil
import sys
import time
import zlib
from pathlib import Path

EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_UNAVAILABLE = 0, 1, 2, 3

DTYPE_NAMES = ("float32", "float64", "float16", "bfloat16")
OP_NAMES = ("fused_linear_relu", "conv2d", "layer_norm")


# ----------------------------------------------------------------------------------- helpers


def _console():
    from .parity import make_console

    return make_console()


def _human_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def _interactive(console) -> bool:
    """Progress bars only on a terminal, and not in CI (whose logs keep every redraw)."""
    return console.is_terminal and not os.environ.get("CI")


class _Progress:
    """A rich progress bar on a terminal; plain lines (one per group) in logs and CI."""

    def __init__(self, console, total: int, what: str):
        self.console, self.total, self.what = console, total, what
        self.done = 0
        self.bar = None
        self.group = None
        self.group_t0 = 0.0
        self.group_n = 0
        if _interactive(console):
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self.bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=console,
                transient=True,
            )
            self.task = self.bar.add_task(what, total=total)

    def __enter__(self):
        if self.bar:
            self.bar.__enter__()
        return self

    def __exit__(self, *exc):
        self._close_group()
        if self.bar:
            self.bar.__exit__(*exc)

    def _close_group(self):
        if self.group is not None and not self.bar:
            self.console.print(
                f"  {self.group}: {self.group_n} done in {time.perf_counter() - self.group_t0:.1f} s "
                f"[{self.done}/{self.total}]"
            )
        self.group = None

    def step(self, group: str, label: str):
        """Announce the next unit of work (`group` is printed once in plain mode)."""
        if self.bar:
            self.bar.update(self.task, description=f"{self.what}: {label}")
        elif group != self.group:
            self._close_group()
            self.group, self.group_t0, self.group_n = group, time.perf_counter(), 0

    def advance(self):
        self.done += 1
        self.group_n += 1
        if self.bar:
            self.bar.advance(self.task)


# ----------------------------------------------------------------------------------- environment


def _environment() -> dict:
    import torch

    import xkernels

    env = xkernels.info()
    env["python"] = platform.python_version()
    env["platform"] = platform.platform()
    env["machine"] = platform.machine()
    env["best_device"] = env["device"]["device"]  # None when XKERNELS_DEVICE cannot be honoured
    env["env"] = {
        k: os.environ[k]
        for k in (
            "XKERNELS_BACKEND",
            "XKERNELS_DEVICE",
            "XKERNELS_CACHE_DIR",
            "XKERNELS_DISPATCH_RECORD",
            "SYCL_CACHE_DIR",
            "OCL_ICD_FILENAMES",
        )
        if k in os.environ
    }
    env["torch_cuda"] = torch.version.cuda
    env["torch_xpu"] = getattr(torch.version, "xpu", None)
    return env


def _device_names(devices: list) -> str:
    names = []
    for d in devices:
        if isinstance(d, dict):
            label = str(d.get("name", d))
            extra = [str(d[k]) for k in ("type", "backend", "capability") if k in d]
            if d.get("usable") is False:
                extra.append("unusable")
            names.append(label + (f" ({', '.join(extra)})" if extra else ""))
        else:
            names.append(str(d))
    return "; ".join(names) or "-"


def _device_line(dev: dict) -> str:
    """The info/check line for XKERNELS_DEVICE: requested, chosen and why (or the error)."""
    from rich.markup import escape

    if dev["status"] != "ok":
        return f"requested: {escape(dev['requested'])}   [red]{escape(dev['error'])}[/]"
    return f"requested: {escape(dev['requested'])}   chosen: {dev['device']}   ({escape(dev['reason'])})"


# XKERNELS_DEVICE's status -> exit status of the commands that need a device.
_DEVICE_EXIT = {"invalid": EXIT_USAGE, "unavailable": EXIT_UNAVAILABLE}


def _print_environment(console, env: dict) -> None:
    from rich.table import Table

    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold")
    head.add_column()
    head.add_row("xkernels", f"{env['xkernels']}   torch {env['torch']}   python {env['python']}   {env['platform']}")
    head.add_row("build", " ".join(f"{k}={v}" for k, v in env["build_config"].items()))
    if "sycl" in env:
        s = env["sycl"]
        head.add_row(
            "SYCL runtime",
            f"{s.get('runtime', '?')}   kernel provider: {s.get('provider', '?')}   "
            f"{len(s.get('kernels', []))} kernels",
        )
    else:
        head.add_row("SYCL runtime", "not built into this installation")
    sc = env.get("sycl_cuda")
    if sc is not None:
        head.add_row("SYCL on CUDA", ", ".join(sc["devices"]) if sc["devices"] else f"no CUDA device: {sc['reason']}")
    head.add_row("cache", f"{env['cache']['dir']} ({_human_bytes(env['cache']['bytes'])})")
    head.add_row("backend", f"requested: {env['requested_backend']}")
    head.add_row("device", _device_line(env["device"]))
    console.print(head)

    t = Table(title="backends", title_justify="left")
    for col in ("backend", "built", "available", "devices", "note"):
        t.add_column(col)
    for name, st in env["backends"].items():
        t.add_row(
            name,
            "yes" if st["built"] else "no",
            "[green]yes[/]" if st["available"] else "[yellow]no[/]",
            _device_names(st["devices"]),
            st["reason"] or "-",
        )
    console.print(t)

    providers = env.get("sycl", {}).get("provider_devices", [])
    if providers:
        t = Table(title="SYCL kernel provider (per device)", title_justify="left")
        for col in ("device", "kernels from", "groups built"):
            t.add_column(col)
        for p in providers:
            groups = "; ".join(f"{f}: {what}" for f, what in p["groups"].items()) or "-"
            t.add_row(f"{p['device']} ({p['backend']})", p["choice"], groups)
        console.print(t)
        for line in env["sycl"].get("runtime_compile_env", []):
            console.print(f"run-time compiler environment: {line}")


# ----------------------------------------------------------------------------------- check


def standard_cases(quick: bool = False):
    """(op, case label, builder(dtype, device, gen) -> (args, kwargs)) for `check`: small
    shapes covering bias/no bias, 1-D and batched inputs, groups, stride, dilation, asymmetric
    and string padding, channels_last, unbatched conv, multi-dim and affine-free layer norm."""
    import torch

    def rnd(shape, dtype, device, gen, memory_format=None):
        t = torch.randn(shape, generator=gen, dtype=torch.float64).to(dtype=dtype, device=device)
        return t.contiguous(memory_format=memory_format) if memory_format is not None else t

    cases = [
        (
            "fused_linear_relu",
            "7x33 -> 20, bias",
            lambda dt, dev, g: ((rnd((7, 33), dt, dev, g), rnd((20, 33), dt, dev, g), rnd((20,), dt, dev, g)), {}),
        ),
        (
            "fused_linear_relu",
            "2x5x64 -> 48, no bias",
            lambda dt, dev, g: ((rnd((2, 5, 64), dt, dev, g), rnd((48, 64), dt, dev, g), None), {}),
        ),
        (
            "fused_linear_relu",
            "1-D 17 -> 9, bias",
            lambda dt, dev, g: ((rnd((17,), dt, dev, g), rnd((9, 17), dt, dev, g), rnd((9,), dt, dev, g)), {}),
        ),
        (
            "conv2d",
            "2x3x9x9 k3 p=1, bias",
            lambda dt, dev, g: (
                (rnd((2, 3, 9, 9), dt, dev, g), rnd((8, 3, 3, 3), dt, dev, g), rnd((8,), dt, dev, g)),
                {"padding": 1},
            ),
        ),
        (
            "conv2d",
            "1x4x10x7 k3 g2 s2 d(1,2) p(2,1)",
            lambda dt, dev, g: (
                (rnd((1, 4, 10, 7), dt, dev, g), rnd((6, 2, 3, 3), dt, dev, g), None),
                {"stride": 2, "padding": (2, 1), "dilation": (1, 2), "groups": 2},
            ),
        ),
        (
            "conv2d",
            "channels_last 2x8x6x6 k1, bias",
            lambda dt, dev, g: (
                (
                    rnd((2, 8, 6, 6), dt, dev, g, torch.channels_last),
                    rnd((4, 8, 1, 1), dt, dev, g, torch.channels_last),
                    rnd((4,), dt, dev, g),
                ),
                {},
            ),
        ),
        (
            "conv2d",
            "unbatched 3x7x7 k4 p='same'",
            lambda dt, dev, g: (
                (rnd((3, 7, 7), dt, dev, g), rnd((5, 3, 4, 4), dt, dev, g), rnd((5,), dt, dev, g)),
                {"padding": "same"},
            ),
        ),
        (
            "layer_norm",
            "6x40, affine",
            lambda dt, dev, g: ((rnd((6, 40), dt, dev, g), 40, rnd((40,), dt, dev, g), rnd((40,), dt, dev, g)), {}),
        ),
        (
            "layer_norm",
            "2x3x16 over [3,16], no affine",
            lambda dt, dev, g: ((rnd((2, 3, 16), dt, dev, g), [3, 16], None, None), {}),
        ),
        (
            "layer_norm",
            "3x200, weight only, eps 1e-3",
            lambda dt, dev, g: ((rnd((3, 200), dt, dev, g) * 3 + 1, 200, rnd((200,), dt, dev, g), None), {"eps": 1e-3}),
        ),
    ]
    if quick:
        seen, out = set(), []
        for c in cases:
            if c[0] not in seen:
                seen.add(c[0])
                out.append(c)
        return out
    return cases


def run_check(args) -> int:
    import torch

    from . import parity

    console = _console()
    env = _environment()
    _print_environment(console, env)

    device = torch.device(args.device) if args.device else None
    if device is None:
        if env["device"]["status"] != "ok":
            console.print(f"[red]xkernels check: {env['device']['error']}[/]")
            return _DEVICE_EXIT[env["device"]["status"]]
        device = torch.device(env["device"]["device"])
    backends = args.backends.split(",") if args.backends else parity.backends_for_device(device)
    if not backends:
        console.print(f"[red]no xkernels backend is available for device {device}[/]")
        return EXIT_UNAVAILABLE
    dtypes = (
        [getattr(torch, d) for d in args.dtypes.split(",")] if args.dtypes else [getattr(torch, d) for d in DTYPE_NAMES]
    )
    ops = set(args.ops.split(",")) if args.ops else set(OP_NAMES)
    cases = [c for c in standard_cases(args.quick) if c[0] in ops]

    console.print(
        f"\nchecking {len(cases)} cases x {len(dtypes)} dtypes on {device} with backends "
        f"{', '.join(backends)} (forward{'' if args.no_backward else ' and backward'}) "
        f"against the float64 oracle"
    )
    t0 = time.perf_counter()
    reports = []
    with _Progress(console, len(cases) * len(dtypes), "check") as prog:
        for op, label, build in cases:
            case_seed = zlib.crc32(f"{op}:{label}".encode())  # the same inputs with any selection of cases
            for dtype in dtypes:
                gen = torch.Generator().manual_seed(case_seed)
                prog.step(op, f"{op} {label} {str(dtype)[6:]}")
                a, kw = build(dtype, device, gen)
                reports.append(
                    parity.check_op(
                        op,
                        *a,
                        backends=backends,
                        grads=not args.no_backward,
                        seed=case_seed,
                        budget_factor=args.budget_scale,
                        case=label,
                        **kw,
                    )
                )
                prog.advance()
    elapsed = time.perf_counter() - t0
    console.print(
        parity.summary_table(
            reports, title=f"op parity on {device} vs float64 oracle (budget scale {args.budget_scale:g})"
        )
    )
    failed = [r for r in reports if not r.passed]
    for r in failed:
        r.print(console)
    # The dispatch record of every run: which backend really ran the ops, and any fallback.
    ran: dict[str, dict[str, int]] = {}
    for r in reports:
        for b in r.results:
            for e in b.dispatch:
                per = ran.setdefault(b.backend, {})
                per[e["backend"]] = per.get(e["backend"], 0) + e["calls"]
    if ran:
        console.print(
            "dispatch record: "
            + "; ".join(
                f"under {req}: " + ", ".join(f"{n} op calls ran on {b}" for b, n in sorted(per.items()))
                for req, per in ran.items()
            )
        )
    fallbacks = sorted(
        {
            f"{e['op']} -> {e['backend']}: {e['fallback_reason']}"
            for r in reports
            for b in r.results
            for e in b.dispatch
            if e["fallback_reason"]
        }
    )
    console.print("fallbacks: " + ("\n  " + "\n  ".join(fallbacks) if fallbacks else "none"))
    n_checks = sum(len(r.results) for r in reports)
    n_fail = sum(1 for r in reports for b in r.results if not b.passed)
    if args.json:
        doc = {
            "environment": env,
            "passed": not failed,
            "seconds": elapsed,
            "budgets": {str(k)[6:]: vars(v) for k, v in parity.BUDGETS.items()},
            "budget_scale": args.budget_scale,
            "reports": [r.as_dict() for r in reports],
        }
        Path(args.json).write_text(json.dumps(doc, indent=1))
        console.print(f"report written to {args.json}")
    if failed:
        console.print(
            f"[bold red]FAILED[/]: {n_fail} of {n_checks} backend checks outside the error budget ({elapsed:.1f} s)"
        )
        return EXIT_FAIL
    console.print(f"[bold green]OK[/]: {n_checks} backend checks within the error budget ({elapsed:.1f} s)")
    return EXIT_OK


# ----------------------------------------------------------------------------------- info


def run_info(args) -> int:
    env = _environment()
    status = _DEVICE_EXIT.get(env["device"]["status"], EXIT_OK)  # XKERNELS_DEVICE cannot be honoured: 2 or 3
    if args.json:
        print(json.dumps(env, indent=2, default=str))
        return status
    console = _console()
    _print_environment(console, env)
    if "sycl" in env and env["sycl"].get("kernels"):
        groups: dict[str, int] = {}
        for k in env["sycl"]["kernels"]:
            base = k.split("<", 1)[0].split("::")[-1]
            groups[base] = groups.get(base, 0) + 1
        console.print(
            f"SYCL kernels ({len(env['sycl']['kernels'])} instantiations; --json lists them): "
            + ", ".join(f"{k} x{n}" for k, n in groups.items())
        )
    if status != EXIT_OK:
        console.print(f"[red]xkernels info: {env['device']['error']}[/]")
    return status


# ----------------------------------------------------------------------------------- parity


class UsageError(Exception):
    pass


def load_factory(spec: str):
    """'package.module:factory' or 'path/to/file.py:factory' -> the callable."""
    mod_name, sep, attr = spec.rpartition(":")
    if not sep or not mod_name or not attr:
        raise UsageError(f"expected MODULE:FACTORY (e.g. mypkg.models:make or path/to/file.py:make), got '{spec}'")
    try:
        if mod_name.endswith(".py") or os.sep in mod_name:
            path = Path(mod_name)
            if not path.exists():
                raise UsageError(f"factory file not found: {path}")
            mspec = importlib.util.spec_from_file_location(path.stem, path)
            module = importlib.util.module_from_spec(mspec)
            sys.modules[path.stem] = module
            mspec.loader.exec_module(module)
        else:
            if "" not in sys.path and os.getcwd() not in sys.path:
                sys.path.insert(0, os.getcwd())
            module = importlib.import_module(mod_name)
    except UsageError:
        raise
    except Exception as e:  # noqa: BLE001 - the user's module failed to import
        raise UsageError(f"could not import '{mod_name}': {type(e).__name__}: {e}") from e
    fn = getattr(module, attr, None)
    if fn is None or not callable(fn):
        raise UsageError(f"'{mod_name}' has no callable '{attr}'")
    return fn


def run_parity(args) -> int:
    import torch

    import xkernels

    from . import parity

    console = _console()
    try:
        factory = load_factory(args.factory)
        made = factory()
        if not (isinstance(made, tuple) and len(made) == 2 and isinstance(made[0], torch.nn.Module)):
            raise UsageError(f"{args.factory} must return (model, inputs), got {type(made).__name__}")
    except UsageError as e:
        console.print(f"xkernels parity: error: {e}")
        return EXIT_USAGE
    model, inputs = made
    if args.optimize:
        replaced = []
        model = xkernels.optimize(model, report=replaced)
        console.print(
            f"optimize(): {len(replaced)} replacement(s)"
            + "".join(f"\n  {n or '<model>'}: {a} -> {b}" for n, a, b in replaced)
        )
    if args.configs:
        return _run_compare(args, model, inputs, console)
    if args.no_repeat or args.train:
        console.print("xkernels parity: error: --no-repeat and --train go with --configs")
        return EXIT_USAGE
    backends = args.backends.split(",") if args.backends else None
    rep = parity.check_model(
        model,
        inputs,
        backends=backends,
        backward=not args.no_backward,
        budget_factor=args.budget_scale,
        name=args.factory,
    )
    if not any(r.backend != "torch" for r in rep.results):
        console.print(f"[red]no xkernels backend is available for device {rep.device}[/]")
        return EXIT_UNAVAILABLE
    rep.print(console, details=args.details)
    for r in rep.results:
        if r.backend != "torch" and r.dispatch and args.details == "all":
            console.print(parity.dispatch_table(r.dispatch, title=f"dispatch record: {r.backend}"))
    if args.json:
        Path(args.json).write_text(rep.to_json(indent=1))
        console.print(f"report written to {args.json}")
    if args.plot:
        parity.plot(rep, args.plot)
        console.print(f"plot written to {args.plot}")
    if not rep.passed:
        console.print(
            "[bold red]FAILED[/]: "
            + "; ".join(
                f"{r.backend}: first divergence at "
                + (
                    f"{r.first_forward_divergence.label} (forward)"
                    if r.first_forward_divergence
                    else f"{r.first_backward_divergence.label} ({r.first_backward_divergence.kind})"
                    if r.first_backward_divergence
                    else (r.error or "?")
                )
                for r in rep.results
                if r.backend != "torch" and not r.passed
            )
        )
        return EXIT_FAIL
    console.print("[bold green]OK[/]: every module output and gradient within the error budget")
    return EXIT_OK


def _run_compare(args, model, inputs, console) -> int:
    """parity FACTORY --configs A,B: the model under each configuration against one float64 oracle."""
    from . import parity

    if args.backends:
        console.print(
            "xkernels parity: error: give either --backends or --configs (an xkernels backend is a "
            "configuration: --configs backend=reference,backend=sycl)"
        )
        return EXIT_USAGE
    specs = [c for c in args.configs.split(",") if c.strip()]
    try:
        configs = [parity.parse_config(c) for c in specs]
        rep = parity.compare(
            model,
            inputs,
            configs,
            backward=not args.no_backward,
            budget_factor=args.budget_scale,
            repeat=not args.no_repeat,
            train=args.train,
            name=args.factory,
        )
    except parity.ConfigError as e:
        console.print(f"xkernels parity: error: {e}")
        return EXIT_UNAVAILABLE if "not available here" in str(e) else EXIT_USAGE
    rep.print(console, details=args.details)
    if args.json:
        Path(args.json).write_text(rep.to_json(indent=1))
        console.print(f"report written to {args.json}")
    if args.plot:
        rep.plot(args.plot)
        console.print(f"plot written to {args.plot}")
    if all(s.error for s in rep.sides):
        console.print("[red]no configuration could run[/]")
        return EXIT_UNAVAILABLE
    if not rep.passed:
        console.print(
            "[bold red]FAILED[/]: "
            + "; ".join(
                f"{s.backend}: "
                + (
                    f"first divergence at {s.first_forward_divergence.label} (forward)"
                    if s.first_forward_divergence
                    else f"first divergence at {s.first_backward_divergence.label} "
                    f"({s.first_backward_divergence.kind} {s.first_backward_divergence.tensor})"
                    if s.first_backward_divergence
                    else (s.error or s.note or "?")
                )
                for s in rep.sides
                if not s.passed
            )
        )
        return EXIT_FAIL
    console.print("[bold green]OK[/]: every side's module outputs and gradients within the error budget")
    return EXIT_OK


# ----------------------------------------------------------------------------------- warmup / cache


def run_warmup(args) -> int:
    import xkernels

    console = _console()
    st = xkernels.backends()["sycl"]
    if not st.built:
        console.print(f"nothing to compile: the SYCL backend is not built ({st.reason})")
        return EXIT_OK
    if not st.available:
        console.print(f"nothing to compile: no usable SYCL device ({st.reason})")
        return EXIT_OK
    t0 = time.perf_counter()
    bar = None
    state = {"total": None, "task": None, "last": -1}
    from rich.markup import escape

    if _interactive(console):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        )

    def progress(done, total, label):
        if bar is not None:
            if state["task"] is None:
                state["task"] = bar.add_task("compiling", total=total)
            bar.update(state["task"], completed=done, description=f"compiling {escape(label)}")
        elif done != state["last"] and done < total:  # called before each build, and once at the end
            state["last"] = done
            console.print(f"  \\[{done + 1}/{total}] compiling {escape(label)}")

    if bar is not None:
        with bar:
            times = xkernels.warmup(progress)
    else:
        times = xkernels.warmup(progress)
    from rich.table import Table

    t = Table(title="compiled kernels", title_justify="left")
    t.add_column("device / kernel group")
    t.add_column("seconds", justify="right")
    for k, v in times.items():
        t.add_row(escape(str(k)), f"{v:.2f}")  # labels hold "[float]": not rich markup
    console.print(t)
    cache = xkernels.info()["cache"]
    console.print(f"done in {time.perf_counter() - t0:.1f} s; cache {cache['dir']} ({_human_bytes(cache['bytes'])})")
    return EXIT_OK


def run_cache(args) -> int:
    from . import _env
    from .backends import _dir_size

    console = _console()
    d = _env.cache_dir()
    size = _dir_size(d) if d.exists() else 0
    if args.action == "info":
        n = sum(len(f) for _, _, f in os.walk(d)) if d.exists() else 0
        console.print(
            f"cache directory: {d}\n{n} files, {_human_bytes(size)}" + ("" if d.exists() else " (does not exist yet)")
        )
        return EXIT_OK
    if not d.exists():
        console.print(f"cache {d} is already empty (does not exist)")
        return EXIT_OK
    n = 0
    for entry in list(d.iterdir()):
        if entry.is_dir() and not entry.is_symlink():
            n += sum(len(f) for _, _, f in os.walk(entry))
            shutil.rmtree(entry)
        else:
            n += 1
            entry.unlink()
    console.print(f"removed {n} files ({_human_bytes(size)}) from {d}")
    return EXIT_OK


# ----------------------------------------------------------------------------------- main


def _positive_float(s: str) -> float:
    v = float(s)
    if not v >= 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {s}")
    return v


def build_parser() -> argparse.ArgumentParser:
    paragraphs = __doc__.strip().split("\n\n")
    p = argparse.ArgumentParser(
        prog="python -m xkernels",
        description="\n\n".join(paragraphs[:2]),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=paragraphs[2] + " Without a command, 'check' runs.",
    )
    sub = p.add_subparsers(dest="command")

    def add_check_args(c):
        c.add_argument("--device", help="torch device to check on (default: xkernels.best_device(): XKERNELS_DEVICE)")
        c.add_argument("--backends", help="comma-separated backends (default: every available one for the device)")
        c.add_argument("--dtypes", help=f"comma-separated subset of {','.join(DTYPE_NAMES)}")
        c.add_argument("--ops", help=f"comma-separated subset of {','.join(OP_NAMES)}")
        c.add_argument("--quick", action="store_true", help="one case per op")
        c.add_argument("--no-backward", action="store_true", help="forward only")
        c.add_argument(
            "--budget-scale",
            type=_positive_float,
            default=1.0,
            help="multiply every error budget (e.g. 0.5 to tighten; 0 demands exact agreement)",
        )
        c.add_argument("--json", metavar="PATH", help="also write the full report as JSON")

    add_check_args(sub.add_parser("check", help="check every op on every available backend (default)"))
    add_check_args(p)
    i = sub.add_parser("info", help="versions, backends, devices, kernel provider, cache")
    i.add_argument("--json", action="store_true", help="machine-readable output")
    pa = sub.add_parser("parity", help="model-level parity for a factory returning (model, inputs)")
    pa.add_argument("factory", metavar="MODULE:FACTORY", help="e.g. mypkg.models:make or examples/model_parity.py:make")
    pa.add_argument("--backends", help="comma-separated backends (default: every available one for the device)")
    pa.add_argument("--optimize", action="store_true", help="apply xkernels.optimize() to the model first")
    pa.add_argument("--no-backward", action="store_true", help="forward only")
    pa.add_argument(
        "--details",
        choices=("none", "failing", "all"),
        default="failing",
        help="module-by-module tables: none, only failing backends (default), or all",
    )
    pa.add_argument("--budget-scale", type=_positive_float, default=1.0, help="multiply every error budget")
    pa.add_argument("--json", metavar="PATH", help="also write the full report as JSON")
    pa.add_argument(
        "--configs",
        metavar="A,B,...",
        help="compare configurations instead of xkernels backends: each a '+'-joined list of a device (cpu, "
        "cuda, cuda:1, xpu, mps), fp32/fp64/fp16/bf16, bf16-autocast/fp16-autocast, eager or "
        "compile[:OPT=VAL...], backend=NAME, torch-ops, optimize; e.g. cpu,cuda or eager,compile or "
        "fp32,bf16-autocast",
    )
    pa.add_argument("--plot", metavar="FILE", help="plot error against module index for every side (matplotlib)")
    pa.add_argument("--no-repeat", action="store_true", help="with --configs: run each side once (no run-to-run check)")
    pa.add_argument("--train", action="store_true", help="with --configs: train mode, same seed (default: eval())")
    sub.add_parser("warmup", help="compile every SYCL kernel for every usable device now")
    ca = sub.add_parser("cache", help="the on-disk kernel cache")
    ca.add_argument("action", choices=("info", "clear"))
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    command = args.command or "check"
    try:
        return {"check": run_check, "info": run_info, "parity": run_parity, "warmup": run_warmup, "cache": run_cache}[
            command
        ](args)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
