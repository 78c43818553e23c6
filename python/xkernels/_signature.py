"""The kernel signatures of user SYCL source (xkernels.sycl.load_inline): which functions are kernel bodies
(first parameter ``xk::item_arg<D>``, optionally a template over one element type) and what each parameter
after the item argument takes (``Param``: a tensor for a pointer, a Python number for a scalar). A small
parser of the C++ declarations, with the error messages that name the kernel and the parameter."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Param:
    """One kernel parameter after the item argument: ``base`` is normalised ('T', 'acc_t', 'float',
    'int64_t', ...); ``pointer`` parameters take tensors, the others Python numbers."""

    name: str
    base: str
    pointer: bool
    is_const: bool
    text: str  # as written

    @property
    def is_int(self) -> bool:
        return self.base in ("int8_t", "uint8_t", "int16_t", "int32_t", "int64_t", "uint32_t", "uint64_t")


_BASES = {
    "T": "T",
    "acc_t<T>": "acc_t",
    "xk::acc_t<T>": "acc_t",
    "float": "float",
    "double": "double",
    "half": "half",
    "xk::half": "half",
    "sycl::half": "half",
    "bf16": "bf16",
    "xk::bf16": "bf16",
    "int8_t": "int8_t",
    "std::int8_t": "int8_t",
    "signed char": "int8_t",
    "uint8_t": "uint8_t",
    "std::uint8_t": "uint8_t",
    "unsigned char": "uint8_t",
    "int16_t": "int16_t",
    "std::int16_t": "int16_t",
    "short": "int16_t",
    "int": "int32_t",
    "int32_t": "int32_t",
    "std::int32_t": "int32_t",
    "long": "int64_t",
    "long int": "int64_t",
    "long long": "int64_t",
    "int64_t": "int64_t",
    "std::int64_t": "int64_t",
    "ptrdiff_t": "int64_t",
    "std::ptrdiff_t": "int64_t",
    "unsigned": "uint32_t",
    "unsigned int": "uint32_t",
    "uint32_t": "uint32_t",
    "std::uint32_t": "uint32_t",
    "unsigned long": "uint64_t",
    "uint64_t": "uint64_t",
    "std::uint64_t": "uint64_t",
    "size_t": "uint64_t",
    "std::size_t": "uint64_t",
    "bool": "bool",
}

_KERNEL_HEAD = re.compile(
    r"(?P<tmpl>template\s*<\s*(?:typename|class)\s+(?P<tp>\w+)\s*>\s*)?"
    r"(?:(?:static|inline)\s+)*void\s+(?P<name>[A-Za-z_]\w*)\s*\("
)
_ITEM_ARG = re.compile(r"^(?:xk::)?item_arg\s*<\s*(\d+)\s*>(\s+\w+)?$")


def _strip_comments(src: str) -> str:
    """Comments and string literals blanked out (newlines kept), for parsing only."""

    def blank(m: re.Match) -> str:
        return re.sub(r"[^\n]", " ", m.group(0))

    return re.sub(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"', blank, src, flags=re.S)


def _split_params(text: str) -> list[str]:
    out, depth, cur = [], 0, []
    for ch in text:
        if ch in "(<[{":
            depth += 1
        elif ch in ")>]}":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    last = "".join(cur).strip()
    if last:
        out.append(last)
    return out


def _parse_param(kernel: str, text: str, tp: str | None) -> Param:
    t = " ".join(text.split())
    t = re.sub(r"\b(__restrict__|__restrict|restrict)\b", " ", t)
    if tp and tp != "T":
        t = re.sub(rf"\b{re.escape(tp)}\b", "T", t)
    t = re.sub(r"\s*<\s*", "<", re.sub(r"\s*>", ">", t))
    t = " ".join(t.split())
    bad = "&" in t or "[" in t or t.count("*") > 1 or "=" in t
    m = re.fullmatch(r"(const\s+)?(.+?)\s*(\bconst\b)?\s*(\*)?\s*(?:const\s+)?([A-Za-z_]\w*)", t)
    if bad or not m:
        raise ValueError(
            f"xkernels.sycl: kernel '{kernel}': parameter '{text}' is not supported: parameters after "
            "the item argument must be pointers (tensors) or scalars (numbers), e.g. 'const T* x', "
            "'float alpha', 'int64_t n'"
        )
    const1, base, const2, star, name = m.groups()
    norm = _BASES.get(base.strip())
    if norm is None:
        raise ValueError(
            f"xkernels.sycl: kernel '{kernel}': parameter '{text}': type '{base}' is not supported "
            f"(element type T, xk::acc_t<T>, float, double, xk::half, xk::bf16, int8_t .. uint64_t, "
            "int, long, size_t, bool)"
        )
    if norm == "T" and not tp:
        raise ValueError(
            f"xkernels.sycl: kernel '{kernel}': parameter '{text}' uses T, but '{kernel}' is not a "
            "template (write 'template <typename T> void ...')"
        )
    pointer = star is not None
    if not pointer and norm in ("half", "bf16", "bool"):
        raise ValueError(
            f"xkernels.sycl: kernel '{kernel}': scalar parameter '{text}': pass {base} scalars as float "
            "(or xk::acc_t<T>) and convert in the kernel"
        )
    return Param(name, norm, pointer, bool(const1 or const2), text.strip())


@dataclass(frozen=True)
class _Signature:
    name: str
    dims: int
    templated: bool
    params: tuple[Param, ...]


def parse_kernels(source: str, functions: Sequence[str] | None = None) -> list[_Signature]:
    """The kernel bodies of `source`: functions (or templates over one type) whose first parameter is
    ``xk::item_arg<D>``; with `functions`, exactly those (in that order)."""
    clean = _strip_comments(source)
    found: dict[str, _Signature] = {}
    for m in _KERNEL_HEAD.finditer(clean):
        start = m.end()
        depth, i = 1, start
        while i < len(clean) and depth:
            depth += {"(": 1, ")": -1}.get(clean[i], 0)
            i += 1
        params = _split_params(clean[start : i - 1])
        if not params:
            continue
        im = _ITEM_ARG.match(" ".join(params[0].split()))
        if not im:
            continue
        # a declaration followed by ';' is a forward declaration: the definition is found too
        rest = clean[i:].lstrip()
        if rest.startswith(";"):
            continue
        name = m.group("name")
        if functions is not None and name not in functions:
            continue
        tp = m.group("tp")
        found[name] = _Signature(
            name, int(im.group(1)), tp is not None, tuple(_parse_param(name, p, tp) for p in params[1:])
        )
    if functions is None:
        sigs = list(found.values())
        if not sigs:
            raise ValueError(
                "xkernels.sycl: the source has no kernel body: a kernel is a function (or a function "
                "template over one element type) whose first parameter is 'xk::item_arg<D>', e.g. "
                "'template <typename T> void my_kernel(xk::item_arg<1> ia, const T* x, ...)'"
            )
    else:
        missing = [f for f in functions if f not in found]
        if missing:
            raise ValueError(
                f"xkernels.sycl: no kernel body named {', '.join(map(repr, missing))} in the source "
                f"(kernel bodies found: {', '.join(found) or 'none'}; a kernel's first parameter must "
                "be 'xk::item_arg<D>')"
            )
        sigs = [found[f] for f in functions]
    kinds = {s.templated for s in sigs}
    if len(kinds) > 1:
        raise ValueError(
            "xkernels.sycl: the kernels of one source must be all templates over T or all plain "
            f"functions; got templates {[s.name for s in sigs if s.templated]} and plain functions "
            f"{[s.name for s in sigs if not s.templated]}"
        )
    for s in sigs:
        if s.templated and not any(p.pointer and p.base == "T" for p in s.params):
            raise ValueError(
                f"xkernels.sycl: kernel '{s.name}' is a template over T but has no T* parameter, so T "
                "cannot be inferred from its tensors"
            )
    return sigs
