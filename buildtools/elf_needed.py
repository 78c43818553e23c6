"""The shared libraries an ELF shared object names as DT_NEEDED, and whether it carries its own copy of
libstdc++ (a static libstdc++ inside a torch extension: a second runtime whose locale state is never set up,
so the first integer formatted into an error message crashes the process; see docs/reliability.md).

    python -m buildtools.elf_needed LIB.so        exit 1 when LIB.so does not use the shared libstdc++

Plain ELF64 little-endian parsing (the Linux x86-64 / aarch64 case); no binutils needed.
"""

from __future__ import annotations

import struct
import sys
from pathlib import Path

DT_NEEDED, DT_STRTAB, SHT_DYNAMIC, SHT_DYNSYM = 1, 5, 6, 11


def _sections(data: bytes):
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    for i in range(shnum):
        name, stype, _flags, addr, off, size, link, _info, _align, entsize = struct.unpack_from(
            "<IIQQQQIIQQ", data, shoff + i * shentsize
        )
        yield {"type": stype, "addr": addr, "off": off, "size": size, "link": link, "entsize": entsize}


def _cstr(data: bytes, off: int) -> str:
    return data[off : data.index(b"\0", off)].decode()


def needed(path: str | Path) -> list[str]:
    """DT_NEEDED entries of the ELF64 shared object at `path`."""
    data = Path(path).read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError(f"{path}: not a little-endian ELF64 file")
    secs = list(_sections(data))
    out = []
    for s in secs:
        if s["type"] != SHT_DYNAMIC:
            continue
        strtab = secs[s["link"]]["off"]
        for off in range(s["off"], s["off"] + s["size"], 16):
            tag, val = struct.unpack_from("<qQ", data, off)
            if tag == 0:
                break
            if tag == DT_NEEDED:
                out.append(_cstr(data, strtab + val))
    return out


def defines_libstdcxx(path: str | Path) -> bool:
    """True when the object exports libstdc++'s own locale machinery (std::locale::classic), i.e. carries a
    static copy of the runtime."""
    data = Path(path).read_bytes()
    secs = list(_sections(data))
    for s in secs:
        if s["type"] != SHT_DYNSYM:
            continue
        strtab = secs[s["link"]]["off"]
        for off in range(s["off"], s["off"] + s["size"], s["entsize"] or 24):
            name, _info, _other, shndx, _value, _size = struct.unpack_from("<IBBHQQ", data, off)
            if shndx != 0 and _cstr(data, strtab + name) == "_ZNSt6locale7classicEv":
                return True
    return False


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    bad = 0
    for lib in args:
        deps = needed(lib)
        static = defines_libstdcxx(lib)
        ok = any(d.startswith("libstdc++.so") for d in deps) and not static
        print(f"{lib}: NEEDED {', '.join(deps)}; {'static libstdc++ copy inside' if static else 'no libstdc++ copy'}")
        if not ok:
            print(
                f"{lib}: does not use the shared libstdc++ (the compiler linked libstdc++ statically); a torch "
                "extension must share the process's libstdc++.so.6",
                file=sys.stderr,
            )
            bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
