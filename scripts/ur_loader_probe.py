#!/usr/bin/env python3
"""Ask a Unified Runtime loader (the pip wheel's libur_loader.so.0) which adapters it loaded, with their platforms
and devices: what the SYCL runtime will see, without the SYCL runtime. Plain ctypes against the UR 0.12 C API.

Run it in a fresh process with the environment under test (UR_ADAPTERS_SEARCH_PATH, LD_LIBRARY_PATH, ...);
``--log`` turns on the loader's own log (UR_LOG_LOADER), which says which adapter paths it tried and why a
``dlopen`` failed.

``--no-devices`` stops at adapters and platforms: with an adapter built for another UR ABI than the loader's, the
adapter and platform tables (the first in the loader's dispatch table) still line up, while a device query calls
the wrong function and crashes the process (docs/oneapi.md, "NVIDIA GPUs").

Usage: ur_loader_probe.py [--loader PATH] [--log] [--no-devices] [--json]
Exit status: 0 when the loader initialised (whatever it found), 1 when it could not be loaded or initialised.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys
from pathlib import Path

# ur_api.h (UR 0.12) values used here
UR_RESULT_SUCCESS = 0
UR_RESULT_ERROR_DEVICE_NOT_FOUND = 18
UR_RESULT_ERROR_UNINITIALIZED = 37
UR_ADAPTER_INFO_BACKEND = 0
UR_PLATFORM_INFO_NAME = 1
UR_DEVICE_TYPE_ALL = 2
UR_DEVICE_INFO_NAME = 66
BACKENDS = {0: "unknown", 1: "level_zero", 2: "opencl", 3: "cuda", 4: "hip", 5: "native_cpu"}


def _string_info(fn, handle, prop: int) -> str:
    size = ctypes.c_size_t(0)
    if fn(handle, prop, 0, None, ctypes.byref(size)) != UR_RESULT_SUCCESS or size.value == 0:
        return "?"
    buf = ctypes.create_string_buffer(size.value)
    if fn(handle, prop, size, buf, None) != UR_RESULT_SUCCESS:
        return "?"
    return buf.value.decode(errors="replace")


def probe(loader: Path, devices: bool = True) -> dict:
    ur = ctypes.CDLL(str(loader))
    vp = ctypes.c_void_p
    u32 = ctypes.c_uint32
    ur.urLoaderInit.argtypes = [u32, vp]
    ur.urAdapterGet.argtypes = [u32, ctypes.POINTER(vp), ctypes.POINTER(u32)]
    ur.urAdapterGetInfo.argtypes = [vp, ctypes.c_int, ctypes.c_size_t, vp, ctypes.POINTER(ctypes.c_size_t)]
    ur.urPlatformGet.argtypes = [vp, u32, ctypes.POINTER(vp), ctypes.POINTER(u32)]
    ur.urPlatformGetInfo.argtypes = [vp, ctypes.c_int, ctypes.c_size_t, vp, ctypes.POINTER(ctypes.c_size_t)]
    ur.urDeviceGet.argtypes = [vp, ctypes.c_int, u32, ctypes.POINTER(vp), ctypes.POINTER(u32)]
    ur.urDeviceGetInfo.argtypes = [vp, ctypes.c_int, ctypes.c_size_t, vp, ctypes.POINTER(ctypes.c_size_t)]

    rc = ur.urLoaderInit(0, None)
    if rc != UR_RESULT_SUCCESS:
        raise RuntimeError(f"urLoaderInit failed: ur_result_t {rc}")
    n = u32(0)
    rc = ur.urAdapterGet(0, None, ctypes.byref(n))
    if rc == UR_RESULT_ERROR_UNINITIALIZED:  # the loader opened no adapter at all (--log says why)
        return {"loader": str(loader), "adapters": [], "adapter_get": rc}
    if rc != UR_RESULT_SUCCESS:
        raise RuntimeError(f"urAdapterGet failed: ur_result_t {rc}")
    adapters = (vp * max(n.value, 1))()
    ur.urAdapterGet(n.value, adapters, ctypes.byref(n))
    out = []
    for i in range(n.value):
        a = adapters[i]
        backend = ctypes.c_int(0)
        ur.urAdapterGetInfo(a, UR_ADAPTER_INFO_BACKEND, ctypes.sizeof(backend), ctypes.byref(backend), None)
        entry = {"backend": BACKENDS.get(backend.value, str(backend.value)), "platforms": []}
        np_ = u32(0)
        rc = ur.urPlatformGet(a, 0, None, ctypes.byref(np_))
        entry["platform_get"] = rc
        plats = (vp * max(np_.value, 1))()
        if rc == UR_RESULT_SUCCESS and np_.value:
            ur.urPlatformGet(a, np_.value, plats, ctypes.byref(np_))
        for j in range(np_.value if rc == UR_RESULT_SUCCESS else 0):
            p = plats[j]
            nd = u32(0)
            drc = ur.urDeviceGet(p, UR_DEVICE_TYPE_ALL, 0, None, ctypes.byref(nd)) if devices else -1
            names = []
            if drc == UR_RESULT_SUCCESS and nd.value:
                devs = (vp * nd.value)()
                ur.urDeviceGet(p, UR_DEVICE_TYPE_ALL, nd.value, devs, ctypes.byref(nd))
                names = [_string_info(ur.urDeviceGetInfo, devs[k], UR_DEVICE_INFO_NAME) for k in range(nd.value)]
            entry["platforms"].append(
                {
                    "name": _string_info(ur.urPlatformGetInfo, p, UR_PLATFORM_INFO_NAME),
                    "device_get": drc,
                    "devices": names,
                }
            )
        out.append(entry)
    return {"loader": str(loader), "adapters": out, "adapter_get": UR_RESULT_SUCCESS}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--loader", type=Path, default=Path(sys.prefix) / "lib" / "libur_loader.so.0")
    ap.add_argument("--log", action="store_true", help="the loader's own log on stderr (UR_LOG_LOADER)")
    ap.add_argument("--no-devices", action="store_true", help="list adapters and platforms only")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.log:
        os.environ["UR_LOG_LOADER"] = "level:debug;output:stderr;flush:debug"
    try:
        result = probe(args.loader, devices=not args.no_devices)
    except (OSError, RuntimeError) as e:
        print(f"ur_loader_probe: {e}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(result))
    else:
        print(f"UR loader {result['loader']}: {len(result['adapters'])} adapter(s)")
        for a in result["adapters"]:
            print(f"  {a['backend']}: {len(a['platforms'])} platform(s)")
            for p in a["platforms"]:
                what = "not queried" if p["device_get"] == -1 else f"{len(p['devices'])} device(s) {p['devices']}"
                print(f"    {p['name']}: {what} (urDeviceGet {p['device_get']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
