"""The progress indicator of run-time kernel compiles (xkernels.sycl): 'compiling <label>' on stderr when a
compile takes longer than a second (``XKERNELS_SYCL_PROGRESS=0`` turns it off)."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time

_progress_lock = threading.Lock()


@contextlib.contextmanager
def compile_progress(label: str, delay: float = 1.0):
    """Shows 'compiling <label>' on stderr (a rich spinner on a terminal, one line otherwise) when the
    body takes longer than `delay` seconds."""
    if os.environ.get("XKERNELS_SYCL_PROGRESS", "1") in ("0", "off", "false"):
        yield
        return
    done = threading.Event()
    shown = threading.Event()

    def show() -> None:
        if done.wait(delay):
            return
        with _progress_lock:
            from rich.console import Console
            from rich.markup import escape

            console = Console(stderr=True, highlight=False)
            shown.set()
            if console.is_terminal:
                from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

                with Progress(
                    SpinnerColumn(),
                    TextColumn("xkernels.sycl: compiling {task.description}"),
                    TimeElapsedColumn(),
                    console=console,
                    transient=True,
                ) as prog:
                    prog.add_task(escape(label), total=None)
                    done.wait()
            else:
                console.print(
                    f"xkernels.sycl: compiling {label} (first use; cached on disk afterwards) ...",
                    markup=False,
                    soft_wrap=True,
                )
                done.wait()

    t = threading.Thread(target=show, name="xkernels-sycl-progress", daemon=True)
    t0 = time.perf_counter()
    t.start()
    failed = True
    try:
        yield
        failed = False
    finally:
        done.set()
        t.join()
        if shown.is_set():
            what = "compiling {} failed after" if failed else "compiled {} in"
            print(f"xkernels.sycl: {what.format(label)} {time.perf_counter() - t0:.1f} s", file=sys.stderr)
