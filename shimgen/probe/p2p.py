"""`shimgen probe --p2p`: what the driver says about every GPU pair, and what a copy measures.

For every ordered pair of GPUs (i -> j, i != j):

- `cuDeviceCanAccessPeer(i, j)`;
- `cuDeviceGetP2PAttribute` for PERFORMANCE_RANK, ACCESS_SUPPORTED, NATIVE_ATOMIC_SUPPORTED
  and CUDA_ARRAY_ACCESS_SUPPORTED;
- a measured peer copy: `cuMemcpyPeerAsync` of 128 MiB, 10 times, from device i's memory
  to device j's memory on a stream of device i's primary context, with peer access enabled
  (`cuCtxEnablePeerAccess` from i's primary context to j's) where the driver allows it;
- next to it, the host-bounce copy of the same data: device i -> pinned host -> device j,
  128 MiB, 10 times, double-buffered (two pinned buffers, so the download of copy k+1 can
  overlap the upload of copy k).

Both are timed with CUDA events after one untimed warm-up copy; GB/s is 10^9 bytes per
second of data delivered to device j. After each measurement the first and last 4 KiB of
the destination are read back and compared with the pattern written on the source, so a
copy that reports success but moves nothing is caught. A self-reported "OK" proves nothing;
the bandwidth next to the host bounce shows whether the pair really copies peer to peer.

`collect_p2p()` runs in the probed process (cuda-python); `shimgen probe --p2p --child`
prints its result as one JSON line. `report_p2p(shim)` runs that child without, and
optionally with, `LD_PRELOAD` of the shim (SHIMGEN_* variables pass through to the shimmed
child only) and shows the answers side by side (the tables are in p2p_format.py).
"""

from __future__ import annotations

import ctypes
import json
from pathlib import Path

from ..cuda import CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, CUDA_SUCCESS
from ..errors import ShimgenError, one_line
from .bindings import driver_bindings
from .child import mapped_libraries, run_probe
from .p2p_format import format_p2p, side_by_side

SIZE = 128 << 20  # bytes per copy
COUNT = 10  # timed copies per measurement
CHECK_BYTES = 4096  # read back this much at each end of the destination

# (key, names the binding may use, value in the CUDA headers)
P2P_ATTRIBUTES = (
    ("performance_rank", ("CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK",), 1),
    ("access_supported", ("CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED",), 2),
    ("native_atomic_supported", ("CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED",), 3),
    ("cuda_array_access_supported", ("CU_DEVICE_P2P_ATTRIBUTE_CUDA_ARRAY_ACCESS_SUPPORTED",
                                     "CU_DEVICE_P2P_ATTRIBUTE_ACCESS_ACCESS_SUPPORTED"), 4),
)

MEMHOSTALLOC_PORTABLE = 1  # CU_MEMHOSTALLOC_PORTABLE
STREAM_NON_BLOCKING = 1  # CU_STREAM_NON_BLOCKING
EVENT_DISABLE_TIMING = 2  # CU_EVENT_DISABLE_TIMING
PEER_PATTERN = 0xA1000000
BOUNCE_PATTERN = 0xB2000000


class _CudaFail(Exception):
    """One driver call failed; the message names the call and the error."""


def _err_name(cu, err) -> str:
    code = int(err)
    try:
        e, name = cu.cuGetErrorName(err)
        if int(e) == CUDA_SUCCESS and name:
            return f"{name.decode() if isinstance(name, bytes) else name} ({code})"
    except Exception:  # noqa: BLE001 - a name is a nicety; the code is what matters
        pass
    return f"error {code}"


def _ck(cu, ret, what: str):
    """The value of a cuda-python call (err, value...) or raise _CudaFail naming `what`."""
    if not isinstance(ret, tuple):
        ret = (ret,)
    if int(ret[0]) != CUDA_SUCCESS:
        raise _CudaFail(f"{what} returned {_err_name(cu, ret[0])}")
    if len(ret) == 1:
        return None
    return ret[1] if len(ret) == 2 else ret[1:]


def _p2p_attribute(cu, names: tuple[str, ...], value: int):
    enum = cu.CUdevice_P2PAttribute
    for n in names:
        if hasattr(enum, n):
            return getattr(enum, n)
    try:
        return enum(value)
    except ValueError:
        return None


class _Devices:
    """Primary contexts, one stream, two buffers and two sync events per device, two pinned
    host buffers; everything released by close(), whatever failed before."""

    def __init__(self, cu, devs: list, size: int) -> None:
        self.cu, self.devs, self.size = cu, devs, size
        self.ctx: list = [None] * len(devs)
        self.stream: list = [None] * len(devs)
        self.src: list = [None] * len(devs)
        self.dst: list = [None] * len(devs)
        self.done: list = [[] for _ in devs]  # two DISABLE_TIMING events per device
        self.timing: list = [[] for _ in devs]  # start and stop events per device
        self.host: list = []
        self.peer_enabled: list[tuple[int, int]] = []

    def use(self, d: int) -> None:
        _ck(self.cu, self.cu.cuCtxSetCurrent(self.ctx[d]), f"cuCtxSetCurrent(dev {d})")

    def open(self) -> None:
        cu = self.cu
        for d, dev in enumerate(self.devs):
            self.ctx[d] = _ck(cu, cu.cuDevicePrimaryCtxRetain(dev),
                              f"cuDevicePrimaryCtxRetain(dev {d})")
            self.use(d)
            self.stream[d] = _ck(cu, cu.cuStreamCreate(STREAM_NON_BLOCKING),
                                 f"cuStreamCreate(dev {d})")
            self.src[d] = _ck(cu, cu.cuMemAlloc(self.size), f"cuMemAlloc(dev {d})")
            self.dst[d] = _ck(cu, cu.cuMemAlloc(self.size), f"cuMemAlloc(dev {d})")
            for _ in range(2):
                self.done[d].append(_ck(cu, cu.cuEventCreate(EVENT_DISABLE_TIMING),
                                        f"cuEventCreate(dev {d})"))
                self.timing[d].append(_ck(cu, cu.cuEventCreate(0), f"cuEventCreate(dev {d})"))
        for _ in range(2):
            self.host.append(_ck(cu, cu.cuMemHostAlloc(self.size, MEMHOSTALLOC_PORTABLE),
                                 "cuMemHostAlloc"))

    def enable_peer(self, i: int, j: int) -> int:
        """Let device i's primary context access device j's memory. The driver's code."""
        self.use(i)
        (err,) = self.cu.cuCtxEnablePeerAccess(self.ctx[j], 0)
        if int(err) == CUDA_SUCCESS:
            self.peer_enabled.append((i, j))
        return int(err)

    def close(self) -> None:
        """Release everything open() and enable_peer() made; errors here are ignored."""
        q = self._quiet
        for p in self.host:
            q("cuMemFreeHost", p)
        self.host = []
        for i, j in self.peer_enabled:
            q("cuCtxSetCurrent", self.ctx[i])
            q("cuCtxDisablePeerAccess", self.ctx[j])
        self.peer_enabled = []
        for d, dev in enumerate(self.devs):
            if self.ctx[d] is None:
                continue
            q("cuCtxSetCurrent", self.ctx[d])
            if self.stream[d] is not None:
                q("cuStreamSynchronize", self.stream[d])
            for ev in self.done[d] + self.timing[d]:
                q("cuEventDestroy", ev)
            for buf in (self.src[d], self.dst[d]):
                if buf is not None:
                    q("cuMemFree", buf)
            if self.stream[d] is not None:
                q("cuStreamDestroy", self.stream[d])
            q("cuDevicePrimaryCtxRelease", dev)
            self.ctx[d] = self.stream[d] = self.src[d] = self.dst[d] = None
        self.done = [[] for _ in self.devs]
        self.timing = [[] for _ in self.devs]

    def _quiet(self, name: str, *args) -> None:
        try:
            getattr(self.cu, name)(*args)
        except Exception:  # noqa: BLE001 - clean-up must not hide the measurements
            pass

    # ---- one measurement ------------------------------------------------------------

    def _prepare(self, i: int, j: int, pattern: int) -> None:
        """Pattern on device i's source, zeros on device j's destination, both finished."""
        cu, words = self.cu, self.size // 4
        self.use(i)
        _ck(cu, cu.cuMemsetD32(self.src[i], pattern, words), "cuMemsetD32")
        _ck(cu, cu.cuCtxSynchronize(), "cuCtxSynchronize")
        self.use(j)
        _ck(cu, cu.cuMemsetD32(self.dst[j], 0, words), "cuMemsetD32")
        _ck(cu, cu.cuCtxSynchronize(), "cuCtxSynchronize")

    def _check(self, j: int, pattern: int) -> str:
        """'ok', or what the destination holds instead of the pattern."""
        cu = self.cu
        n = min(CHECK_BYTES, self.size) // 4
        buf = (ctypes.c_uint32 * n)()
        self.use(j)
        base = int(self.dst[j])
        for off in (0, self.size - n * 4):
            _ck(cu, cu.cuMemcpyDtoH(ctypes.addressof(buf), base + off, n * 4), "cuMemcpyDtoH")
            bad = next((k for k in range(n) if buf[k] != pattern), None)
            if bad is not None:
                return (f"MISMATCH at byte {off + bad * 4}: {buf[bad]:#010x}, "
                        f"want {pattern:#010x}")
        return "ok"

    def _elapsed_ms(self, d: int) -> float:
        cu = self.cu
        start, stop = self.timing[d]
        _ck(cu, cu.cuEventSynchronize(stop), "cuEventSynchronize")
        return float(_ck(cu, cu.cuEventElapsedTime(start, stop), "cuEventElapsedTime"))

    def peer_copy(self, i: int, j: int, count: int) -> dict:
        cu, size = self.cu, self.size
        pattern = PEER_PATTERN | (i << 8) | j
        self._prepare(i, j, pattern)
        self.use(i)
        s = self.stream[i]

        def copy() -> None:
            _ck(cu, cu.cuMemcpyPeerAsync(self.dst[j], self.ctx[j], self.src[i], self.ctx[i],
                                         size, s), "cuMemcpyPeerAsync")

        copy()  # warm-up
        _ck(cu, cu.cuStreamSynchronize(s), "cuStreamSynchronize")
        start, stop = self.timing[i]
        _ck(cu, cu.cuEventRecord(start, s), "cuEventRecord")
        for _ in range(count):
            copy()
        _ck(cu, cu.cuEventRecord(stop, s), "cuEventRecord")
        ms = self._elapsed_ms(i)
        return _bandwidth(size, count, ms) | {"check": self._check(j, pattern)}

    def host_bounce(self, i: int, j: int, count: int) -> dict:
        cu, size = self.cu, self.size
        pattern = BOUNCE_PATTERN | (i << 8) | j
        self._prepare(i, j, pattern)
        si, sj = self.stream[i], self.stream[j]

        def bounce(k: int) -> None:
            b = k % 2
            self.use(i)
            if k >= 2:  # the upload that last read this host buffer has finished
                _ck(cu, cu.cuStreamWaitEvent(si, self.done[j][b], 0), "cuStreamWaitEvent")
            _ck(cu, cu.cuMemcpyDtoHAsync(self.host[b], self.src[i], size, si),
                "cuMemcpyDtoHAsync")
            _ck(cu, cu.cuEventRecord(self.done[i][b], si), "cuEventRecord")
            self.use(j)
            _ck(cu, cu.cuStreamWaitEvent(sj, self.done[i][b], 0), "cuStreamWaitEvent")
            _ck(cu, cu.cuMemcpyHtoDAsync(self.dst[j], self.host[b], size, sj),
                "cuMemcpyHtoDAsync")
            _ck(cu, cu.cuEventRecord(self.done[j][b], sj), "cuEventRecord")

        bounce(0)  # warm-up
        for d, s in ((i, si), (j, sj)):
            self.use(d)
            _ck(cu, cu.cuStreamSynchronize(s), "cuStreamSynchronize")
        start, stop = self.timing[i]
        self.use(i)
        _ck(cu, cu.cuEventRecord(start, si), "cuEventRecord")
        for k in range(count):
            bounce(k)
        self.use(i)  # stop after the last upload to device j has finished
        _ck(cu, cu.cuStreamWaitEvent(si, self.done[j][(count - 1) % 2], 0),
            "cuStreamWaitEvent")
        _ck(cu, cu.cuEventRecord(stop, si), "cuEventRecord")
        ms = self._elapsed_ms(i)
        return _bandwidth(size, count, ms) | {"check": self._check(j, pattern)}


def _bandwidth(size: int, count: int, ms: float) -> dict:
    return {"ms": ms, "gbps": size * count / (ms * 1e-3) / 1e9 if ms > 0 else None}


def collect_p2p(size: int = SIZE, count: int = COUNT, cu=None) -> dict:
    """Run in the probed process: query and measure every ordered GPU pair, return plain
    data. `cu` is cuda.bindings.driver (the tests pass a fake)."""
    if size < 8 or size % 4 or count < 1:
        raise ShimgenError(f"p2p: size must be a positive multiple of 4 bytes and count >= 1 "
                           f"(got {size}, {count})")
    if cu is None:
        cu = driver_bindings()
    data: dict = {"size_bytes": size, "count": count, "cuInit": None, "driver_version": None,
                  "devices": [], "pairs": [], "error": None} | mapped_libraries()
    try:
        (err,) = cu.cuInit(0)
    except Exception as e:  # noqa: BLE001 - cuda-python could not load libcuda at all
        data["error"] = f"cannot load the CUDA driver: {one_line(str(e))}"
        return data
    data["cuInit"] = int(err)
    data["cuInit_name"] = _err_name(cu, err)
    data |= mapped_libraries()
    e, version = cu.cuDriverGetVersion()
    data["driver_version"] = int(version) if int(e) == CUDA_SUCCESS else None
    if int(err) != CUDA_SUCCESS:
        return data
    try:
        devs = _list_devices(cu, data["devices"])
    except _CudaFail as e:
        data["error"] = str(e)
        return data
    if len(devs) < 2:
        return data
    data["pairs"] = [_pair_attributes(cu, devs, i, j)
                     for i in range(len(devs)) for j in range(len(devs)) if i != j]
    data["error"] = _measure_pairs(cu, devs, size, count, data["pairs"])
    return data


def _list_devices(cu, out: list) -> list:
    """The driver's devices; each one's ordinal and name appended to `out` as it is found."""
    devs = []
    count_dev = _ck(cu, cu.cuDeviceGetCount(), "cuDeviceGetCount")
    for ordinal in range(int(count_dev)):
        dev = _ck(cu, cu.cuDeviceGet(ordinal), f"cuDeviceGet({ordinal})")
        name = _ck(cu, cu.cuDeviceGetName(64, dev), f"cuDeviceGetName({ordinal})")
        if isinstance(name, bytes):
            name = name.split(b"\0", 1)[0].decode(errors="replace")
        devs.append(dev)
        out.append({"ordinal": ordinal, "name": name})
    return devs


def _pair_attributes(cu, devs: list, i: int, j: int) -> dict:
    """What the driver says about the pair i -> j: can-access-peer and the P2P attributes."""
    p: dict = {"src": i, "dst": j, "attributes": {}}
    e, can = cu.cuDeviceCanAccessPeer(devs[i], devs[j])
    p["can_access_peer"] = int(can) if int(e) == CUDA_SUCCESS else f"error {int(e)}"
    for key, names, value in P2P_ATTRIBUTES:
        attr = _p2p_attribute(cu, names, value)
        if attr is None:
            p["attributes"][key] = "unknown to cuda-python"
            continue
        e, v = cu.cuDeviceGetP2PAttribute(attr, devs[i], devs[j])
        p["attributes"][key] = int(v) if int(e) == CUDA_SUCCESS else f"error {int(e)}"
    return p


def _measure_pairs(cu, devs: list, size: int, count: int, pairs: list[dict]) -> str | None:
    """Enable peer access where the driver allows it, then measure the peer copy and the
    host bounce of every pair into its dict. None, or the failure that stopped it all."""
    res = _Devices(cu, devs, size)
    try:
        res.open()
        for p in pairs:
            if p["can_access_peer"] == 1:
                rc = res.enable_peer(p["src"], p["dst"])
                p["peer_enable"] = rc
                p["peer_access"] = rc in (CUDA_SUCCESS, CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED)
            else:
                p["peer_enable"] = None
                p["peer_access"] = False
        for p in pairs:
            i, j = p["src"], p["dst"]
            for key, fn in (("peer", res.peer_copy), ("bounce", res.host_bounce)):
                try:
                    p[key] = fn(i, j, count)
                except _CudaFail as e:
                    p[key] = {"error": str(e)}
    except _CudaFail as e:
        return str(e)
    finally:
        res.close()
    return None


# ---- the child processes -----------------------------------------------------------------

def _run_child(shim: Path | None, size: int, count: int) -> dict:
    return run_probe(["--p2p", "--size", str(size), "--count", str(count)], shim, 600,
                     f"p2p probe process ({'with' if shim else 'without'} the shim)")


def report_p2p(shim: Path | None, size: int = SIZE, count: int = COUNT,
               json_out: Path | None = None) -> str:
    """The p2p table of a child process without the shim; with `shim`, a second child with
    LD_PRELOAD=shim, and the two side by side. `json_out` gets both answers as JSON."""
    plain = _run_child(None, size, count)
    shimmed = _run_child(Path(shim), size, count) if shim is not None else None
    if json_out is not None:
        Path(json_out).write_text(json.dumps({"without_shim": plain, "with_shim": shimmed,
                                              "shim": str(shim) if shim else None},
                                             indent=1) + "\n")
    if shimmed is None:
        return format_p2p(plain)
    if not shimmed.get("shim_mapped"):
        raise ShimgenError(f"p2p probe process with LD_PRELOAD={shim} did not map the shim")
    return side_by_side(plain, shimmed, shimmed["stderr"])
