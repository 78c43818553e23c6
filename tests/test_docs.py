"""The docs cite what exists: every repository path in README.md and docs/*.md (in backticks, fenced code or
links), every XK_ macro and every xk::/xkernels:: name; and docs/performance.md's generated tables are what
scripts/perf_tables.py makes of benchmarks/results/*.csv. Fast: reads files, starts nothing."""

from __future__ import annotations

import importlib.util
import itertools
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

# A bare file name with one of these endings is a source file of the repository when cited.
SOURCE_EXT = (".py", ".cpp", ".h", ".hpp", ".cu", ".cuh", ".cmake", ".md", ".sh", ".toml", ".csv", ".png", ".in")
# Files the build or the tools write (cited as such), not tracked sources.
GENERATED = {
    "build_config.h",  # cmake/build_config.h.in, configured into the build directory
    "oneapi_aot_plan.cmake",  # written by buildtools/oneapi.py at build time
    "rtc_N.cpp",  # the SYCL runtime's name for a run-time compiled source, quoted from its messages
}
# Files of other projects the docs cite by name (oneAPI, AdaptiveCpp, torch).
EXTERNAL = {"setvars.sh", "oneapi-vars.sh", "group.hpp", "Caffe2Config.cmake", "cuda.h", "nvml.h", "ur_ddi.h"}
# Cited before they land: written on another branch of the same issue. Each entry must be removed once the file
# exists (test_pending_docs_still_pending fails then), so a missing file cannot hide here for long.
PENDING: dict[str, str] = {}


def _tracked() -> list[str]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    if out.returncode == 0 and out.stdout.strip():
        return out.stdout.split()
    return [p.relative_to(ROOT).as_posix() for p in ROOT.rglob("*") if p.is_file() and ".git" not in p.parts]


TRACKED = _tracked()
TOP = {p.split("/", 1)[0] for p in TRACKED} - {".gitignore"}
DIRS = {"/".join(p.split("/")[:i]) for p in TRACKED for i in range(1, p.count("/") + 1)}
BASENAMES = {p.rsplit("/", 1)[-1] for p in TRACKED}


def _expand(token: str) -> list[str]:
    """`a.{h,cpp}` -> a.h, a.cpp."""
    m = re.search(r"\{([^{}]*,[^{}]*)\}", token)
    if not m:
        return [token]
    return [x for alt in m.group(1).split(",") for x in _expand(token[: m.start()] + alt + token[m.end() :])]


def _exists(path: str) -> bool:
    """A repository path (a <placeholder> matches any one name part) exists as a tracked file or directory."""
    path = path.rstrip("/")
    if "<" in path:
        pat = re.compile("^" + re.sub(r"<[^<>/]*>", "[^/]+", re.escape(path)) + "$")
        return any(pat.match(p) for p in itertools.chain(TRACKED, DIRS))
    return path in TRACKED or path in DIRS or (ROOT / path).exists()


_INLINE = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
_FENCE = re.compile(r"^```.*?$(.*?)^```", re.S | re.M)
_LINK = re.compile(r"\]\(([^()\s]+)\)")
_WORD = re.compile(r"[A-Za-z0-9_.<>{},/+-]+")


def _candidates(token: str, fenced: bool):
    """The path-like words of a code span (or fenced line) that claim to be repository paths."""
    for word in _WORD.findall(token):
        word = word.strip(".,:;")
        if not word or word.startswith(("-", "/", "..", "~", "$")) or "://" in word:
            continue
        first = word.split("/", 1)[0]
        if "/" in word and first in TOP:
            yield word, "path"
        elif not fenced and "/" not in word and word.endswith(SOURCE_EXT) and not set(word) & set("<>*"):
            yield word, "name"


def cited_paths(doc: Path):
    """(line, kind, text) for every repository path `doc` cites."""
    text = doc.read_text()
    fences = [(m.start(), m.end()) for m in _FENCE.finditer(text)]

    def line(pos):
        return text.count("\n", 0, pos) + 1

    for m in _FENCE.finditer(text):
        for word, kind in _candidates(m.group(1), fenced=True):
            yield line(m.start()), kind, word
    for m in _INLINE.finditer(text):
        if any(a <= m.start() < b for a, b in fences):
            continue
        for word, kind in _candidates(m.group(1), fenced=False):
            yield line(m.start()), kind, word
    code = fences + [(m.start(), m.end()) for m in _INLINE.finditer(text)]
    for m in _LINK.finditer(text):
        if any(a <= m.start() < b for a, b in code):
            continue
        target = m.group(1).split("#", 1)[0]
        if target and not re.match(r"^[a-z]+:", target):
            yield line(m.start()), "link", target


def _name(doc: Path) -> str:
    return doc.relative_to(ROOT).as_posix() if doc.is_relative_to(ROOT) else str(doc)


def missing_paths(doc: Path) -> list[str]:
    bad = []
    for line, kind, word in cited_paths(doc):
        for w in _expand(word):
            if kind == "link":
                target = (doc.parent / w).resolve()
                ok = target.exists() or (target.is_relative_to(ROOT) and target.relative_to(ROOT).as_posix() in PENDING)
            elif kind == "path":
                ok = _exists(w) or w in PENDING
            else:
                ok = w in BASENAMES or w in GENERATED or w in EXTERNAL
            if not ok:
                bad.append(f"{_name(doc)}:{line}: {kind} `{w}` does not exist")
    return bad


def _csrc_words() -> set[str]:
    words: set[str] = set()
    for p in TRACKED:
        if p.startswith(("csrc/", "cmake/", "buildtools/")) or p in ("CMakeLists.txt", "setup.py"):
            words |= set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", (ROOT / p).read_text(errors="replace")))
    return words


def missing_identifiers(doc: Path, words: set[str]) -> list[str]:
    """XK_ macros and xk:: / xkernels:: names (their last component) that csrc/ and the build never define."""
    bad = []
    text = doc.read_text()
    for m in re.finditer(r"\bXK_[A-Z0-9_]+\b", text):
        if m.group(0) not in words:
            line = text.count("\n", 0, m.start()) + 1
            bad.append(f"{_name(doc)}:{line}: `{m.group(0)}` is not in csrc/")
    for span in _INLINE.findall(text):
        for m in re.finditer(r"\b(?:xk|xkernels)(?:::[A-Za-z_][A-Za-z0-9_]*)+", span):
            name = m.group(0).rsplit("::", 1)[-1]
            if name not in words:
                bad.append(f"{_name(doc)}: `{m.group(0)}`: `{name}` is not in csrc/")
    return bad


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_cited_paths_exist(doc):
    bad = missing_paths(doc)
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_cited_identifiers_exist(doc):
    bad = missing_identifiers(doc, _csrc_words())
    assert not bad, "\n".join(bad)


def test_pending_docs_still_pending():
    landed = [p for p in PENDING if (ROOT / p).exists()]
    assert not landed, f"{landed} exist now: remove them from PENDING in tests/test_docs.py"


def test_the_checks_catch_what_is_missing(tmp_path):
    """The two checks above fail on a doc citing a missing path, link, file name or macro."""
    doc = tmp_path / "doc.md"
    doc.write_text(
        "See `csrc/sycl/runtime.cpp`, `csrc/cpu/<op>.cpp`, `csrc/sycl/provider_choice.{h,cpp}`,\n"
        "`no_such_file.hpp`, [this](no_such.md), [ok](doc.md) and `XK_DECLARE_BACKEND_OPS`.\n"
        "```\ncsrc/nope/<op>.cu   text\n```\n"
    )
    bad = missing_paths(doc)
    assert any("csrc/sycl/runtime.cpp" in b for b in bad)
    assert any("no_such_file.hpp" in b for b in bad)
    assert any("no_such.md" in b for b in bad)
    assert any("csrc/nope/<op>.cu" in b for b in bad)
    assert not any("csrc/cpu/<op>.cpp" in b or "provider_choice" in b or "`doc.md`" in b for b in bad), bad
    assert len(bad) == 4, bad
    assert any("XK_DECLARE_BACKEND_OPS" in b for b in missing_identifiers(doc, _csrc_words()))


# ---------------------------------------------------------------- docs/performance.md's generated tables
def _perf_tables():
    spec = importlib.util.spec_from_file_location("perf_tables", ROOT / "scripts" / "perf_tables.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_performance_tables_up_to_date():
    pt = _perf_tables()
    doc = (ROOT / "docs" / "performance.md").read_text()
    assert pt.BEGIN in doc and pt.END in doc, "docs/performance.md has no generated part"
    assert pt.splice(doc, pt.generate()) == doc, (
        "docs/performance.md is out of date with benchmarks/results/*.csv: run python scripts/perf_tables.py"
    )


def test_performance_tables_one_machine_and_commit_per_table(tmp_path):
    pt = _perf_tables()
    head = "timestamp,commit,op,mode,provider,dtype,shape,metric,unit,median,spread,device,torch,threads\n"
    row = "2026-01-0{d}T10:00:00Z,{c},layer_norm,fwd,{p},float32,8x8,gb_per_s,GB/s,{m},0.01,{dev},2.13.0,2\n"
    (tmp_path / "a.csv").write_text(
        head
        + row.format(d=1, c="aaaa", p="xkernels[sycl]", m=2.0, dev="CPU One")
        + row.format(d=1, c="aaaa", p="torch", m=1.0, dev="CPU One")
        + row.format(d=2, c="aaaa", p="torch", m=1.5, dev="CPU Two")  # another machine: another run
        + row.format(d=3, c="bbbb", p="torch", m=1.5, dev="CPU Two")  # another commit: another run
        + row.format(d=3, c="bbbb", p="torch", m=1.6, dev="CPU Two")  # the same case again: another run
    )
    runs = pt.read_runs(tmp_path / "a.csv")
    assert [len(r) for r in runs] == [2, 1, 1, 1]
    out = pt.generate(tmp_path)
    titles = [ln for ln in out.splitlines() if ln.startswith("#### ")]
    assert len(titles) == 4
    assert "#### a.csv: CPU One, ISA not recorded, 2026-01-01 10:00 UTC, commit aaaa" in titles
    assert all("ISA not recorded" in t for t in titles)
    assert "| layer_norm | fwd | float32 | 8x8 | GB/s | 2.00 ±1% | 1.00 ±1% | 2.00x |" in out


def test_readme_fits_a_five_minute_read():
    """The README stays a newcomer's page (issue #22: under 10 KB); numbers and details live in docs/."""
    size = (ROOT / "README.md").stat().st_size
    assert size < 10_000, f"README.md is {size} bytes: move detail to docs/ to keep it under 10,000"


# ---------------------------------------------------------------- every figure names its machine and commit
# Issue #22: "every figure in the docs names its machine and commit". A figure here is a markdown table or an
# output block (a fenced block without a source-language tag) holding a measured quantity: a time, a rate, a
# measured size, a speed ratio like 1.23x, or (output blocks) an error magnitude like 3.79e-06. Its attribution is
# the text before it since the nearest heading or the previous figure, whichever is nearer, plus the paragraph
# right after it (a caption) unless that paragraph leads in the next block. It must hold a commit ("commit" then a
# 7-40 hex hash with a digit, maybe -dirty) and a machine (Xeon, EPYC, an NVIDIA GPU) or "machine not recorded".
# The generated tables of docs/performance.md are covered too: perf_tables.py titles each one so.
_UNIT = r"(?:ms|us|µs|s|min|GFLOP/s|TFLOP/s|GB/s|MB/s|MB|GB|KB|KiB|MiB|GiB)"
_MEASURED = re.compile(rf"(?<![\w.])\d+(?:\.\d+)?(?:-\d+(?:\.\d+)?)? ?{_UNIT}(?![\w/])|(?<![\w.])\d+\.\d+x(?!\w)")
_ERROR = re.compile(r"(?<![\w.])\d\.\d+e[-+]\d\d(?!\w)")
_COMMIT = re.compile(r"\bcommits?\b[^\n]{0,40}?(?<![\w-])(?=[0-9a-f]*\d)[0-9a-f]{7,40}(?:-dirty)?(?![\w])")
_MACHINE = re.compile(r"Xeon|EPYC|H200|H100|A100|NVIDIA|machine not recorded", re.I)
# Fenced blocks in these languages are source to type, not output (a number in them is an argument).
_SOURCE_LANGS = {"python", "py", "bash", "sh", "cpp", "c++", "c", "cmake", "toml", "yaml", "dockerfile", "ini"}
_HEADING = re.compile(r"^#{1,6} ")


def _blocks(lines: list[str]):
    """(first line, last line, holds a figure) of every fenced block and table (line numbers 0-based)."""
    i = 0
    while i < len(lines):
        ln = lines[i]
        if ln.startswith("```"):
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            lang = ln[3:].strip().split()[0].lower() if ln[3:].strip() else ""
            body = "\n".join(lines[i + 1 : j])
            yield i, j, lang not in _SOURCE_LANGS and bool(_MEASURED.search(body) or _ERROR.search(body))
            i = j + 1
        elif ln.lstrip().startswith("|"):
            j = i
            while j + 1 < len(lines) and lines[j + 1].lstrip().startswith("|"):
                j += 1
            # code spans are commands and names, not figures
            rows = [re.sub(r"`[^`]*`", "", r) for r in lines[i : j + 1]]
            yield i, j, any(_MEASURED.search(r) for r in rows)
            i = j + 1
        else:
            i += 1


def _attributions(lines: list[str]):
    """(first line, kind, attribution text) of every figure: the text before it since the nearest heading or the
    previous figure, whichever is nearer, the figure itself, and the paragraph right after it unless that
    paragraph leads in the next block (then it is that block's caption)."""
    blocks = list(_blocks(lines))
    starts = {b[0] for b in blocks}
    prev_end = -1
    for first, last, figure in blocks:
        if not figure:
            continue
        start = first
        while start > prev_end + 1 and not _HEADING.match(lines[start]):
            start -= 1
        end = last + 1
        while end < len(lines) and not lines[end].strip():
            end += 1
        after = end
        while after < len(lines) and lines[after].strip() and not _HEADING.match(lines[after]) and after not in starts:
            after += 1
        nxt = after
        while nxt < len(lines) and not lines[nxt].strip():
            nxt += 1
        if nxt in starts or after in starts:
            after = end
        kind = "output block" if lines[first].startswith("```") else "table"
        yield first, kind, "\n".join(lines[start:after]) if after > end else "\n".join(lines[start : last + 1])
        prev_end = last


def unattributed_figures(doc: Path) -> list[str]:
    bad = []
    for first, kind, ctx in _attributions(doc.read_text().split("\n")):
        missing = [what for what, rx in (("commit", _COMMIT), ("machine", _MACHINE)) if not rx.search(ctx)]
        if missing:
            bad.append(f"{_name(doc)}:{first + 1}: {kind} with measured figures names no {' and no '.join(missing)}")
    return bad


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_figures_name_machine_and_commit(doc):
    bad = unattributed_figures(doc)
    assert not bad, "\n".join(bad)


def test_the_figure_check_catches_an_unattributed_figure(tmp_path):
    """A table or output block with measured figures and no commit or machine before it in its section (or in the
    paragraph after it) fails; one with both passes; a figure in a code span or a python block is no figure."""
    doc = tmp_path / "doc.md"
    doc.write_text(
        "# Doc\n\nOn the Intel Xeon, commit abc1234:\n\n| case | time |\n|---|---|\n| a | 1.5 ms |\n\n"
        "## Next\n\n| case | ratio |\n|---|---|\n| b | 1.25x |\n\n"
        "## Output\n\n```\nOK: 80 checks (9.3 s)\n```\n\n(Output at commit 0123abcd-dirty; machine not recorded.)\n\n"
        "## Caption after, machine only\n\n```\nerr 3.79e-06\n```\n\nOn the AMD EPYC.\n\n"
        "## Not figures\n\n| flag | default |\n|---|---|\n| `--timeout 5s` | 8 minutes |\n\n"
        "```python\nx = 1.5  # 2 s\n```\n"
    )
    bad = [b.rsplit("/", 1)[-1] for b in unattributed_figures(doc)]
    assert bad == [
        "doc.md:11: table with measured figures names no commit and no machine",
        "doc.md:25: output block with measured figures names no commit",
    ], bad
