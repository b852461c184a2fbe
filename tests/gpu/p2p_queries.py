"""What the driver answers to peer queries, and what its code holds at the P2P gate's branch
bytes, in this process: the JSON line tests/gpu/p2p_validation.sh compares between the
driver as installed, the `shimgen patch --gates p2p-mixed` copy and the shim's in-memory
change. Usage: python3 p2p_queries.py VADDR... (the changed bytes, hex, from the profile).

For every ordered pair of devices (i, j), i == j included: cuDeviceCanAccessPeer and
cuDeviceGetP2PAttribute for attributes 1..4 (PERFORMANCE_RANK, ACCESS_SUPPORTED,
NATIVE_ATOMIC_SUPPORTED, CUDA_ARRAY_ACCESS_SUPPORTED), each as (result code, value); and
cuCtxEnablePeerAccess of device 0's primary context to itself. Also: which libcuda file is
mapped, and the byte at each VADDR of it as loaded."""

from __future__ import annotations

import ctypes
import json
import os
import re
import sys


def main() -> int:
    vaddrs = [int(v, 16) for v in sys.argv[1:]]
    lib = ctypes.CDLL("libcuda.so.1")
    out: dict = {"cuInit": lib.cuInit(0)}
    n = ctypes.c_int(0)
    out["cuDeviceGetCount"] = lib.cuDeviceGetCount(ctypes.byref(n))
    devs = []
    for i in range(n.value):
        d = ctypes.c_int(0)
        lib.cuDeviceGet(ctypes.byref(d), i)
        devs.append(d.value)
    pairs = []
    for i, a in enumerate(devs):
        for j, b in enumerate(devs):
            v = ctypes.c_int(-1)
            rc = lib.cuDeviceCanAccessPeer(ctypes.byref(v), a, b)
            attrs = {}
            for attr in (1, 2, 3, 4):
                w = ctypes.c_int(-1)
                attrs[attr] = [lib.cuDeviceGetP2PAttribute(ctypes.byref(w), attr, a, b), w.value]
            pairs.append({"pair": [i, j], "can_access": [rc, v.value], "attributes": attrs})
    out["pairs"] = pairs
    if devs:
        ctx = ctypes.c_void_p()
        lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), devs[0])
        lib.cuCtxSetCurrent(ctx)
        out["enable_peer_self"] = lib.cuCtxEnablePeerAccess(ctx, 0)
    maps = [ln.rstrip("\n").split(None, 5) for ln in open("/proc/self/maps")]
    files = sorted({m[5] for m in maps if len(m) == 6
                    and re.fullmatch(r"libcuda\.so(\.[0-9]+)*", os.path.basename(m[5]))})
    out["libcuda"] = files
    if len(files) == 1 and vaddrs:
        base = min(int(m[0].split("-")[0], 16) for m in maps if len(m) == 6 and m[5] == files[0]
                   and int(m[2], 16) == 0)
        with open("/proc/self/mem", "rb") as mem:
            got = {}
            for v in vaddrs:
                mem.seek(base + v)
                got[hex(v)] = mem.read(1)[0]
        out["bytes"] = got
    print(json.dumps(out, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
