"""collect_p2p's measurement code (shimgen/probe/p2p.py) against a fake driver module that
copies real bytes and insists on the context rules (a stream's work is issued in the
stream's context, an event is recorded in its own context's stream), so the calls, the
data check and the clean-up are exercised without a GPU.
"""

from __future__ import annotations

import ctypes
import enum
import struct

import pytest

from shimgen.probe import p2p


class P2PAttr(enum.IntEnum):  # cuda-bindings 13.x spells attribute 4 like this
    CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK = 1
    CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED = 2
    CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED = 3
    CU_DEVICE_P2P_ATTRIBUTE_ACCESS_ACCESS_SUPPORTED = 4


class FakeCu:
    """Just enough of cuda.bindings.driver. Work on a stream runs at once; a fake clock
    advances by bytes / link speed, so event times give known bandwidths. Host memory is
    real (ctypes), device memory is bytearrays. Breaking a rule returns an error code."""

    CUdevice_P2PAttribute = P2PAttr
    INVALID_VALUE, INVALID_CONTEXT, INVALID_HANDLE, NOT_READY = 1, 201, 400, 600

    def __init__(self, ndev=2, can_peer=True, drop_peer_copy=False, fail=None):
        self.ndev, self.can_peer, self.drop = ndev, can_peer, drop_peer_copy
        self.fail = dict(fail or {})  # function name -> fail on the Nth call (1-based)
        self.calls: dict[str, int] = {}
        self.current = None
        self.ctx_refs = [0] * ndev
        self.mem: dict[int, tuple[int, bytearray]] = {}  # base -> (device, bytes)
        self.next_base = 0x10000000
        self.host: dict[int, ctypes.Array] = {}
        self.streams: set = set()
        self.events: set = set()
        self.peer: set[tuple[int, int]] = set()
        self.clock = 0.0  # seconds

    # helpers
    def __getattribute__(self, name):
        attr = object.__getattribute__(self, name)
        if name.startswith("cu") and callable(attr):
            def call(*a):
                calls = object.__getattribute__(self, "calls")
                calls[name] = calls.get(name, 0) + 1
                if object.__getattribute__(self, "fail").get(name) == calls[name]:
                    return (2, None) if name in ("cuMemAlloc", "cuMemHostAlloc") else (2,)
                return attr(*a)
            return call
        return attr

    def _dev_of(self, ptr: int, n: int):
        for base, (dev, buf) in self.mem.items():
            if base <= ptr and ptr + n <= base + len(buf):
                return dev, buf, ptr - base
        raise AssertionError(f"bad device pointer {ptr:#x}+{n}")

    def _on(self, stream) -> bool:
        assert stream in self.streams, "unknown stream"
        return self.current is not None and self.current[1] == stream[1]

    # the driver
    def cuInit(self, flags):
        return (0,)

    def cuDriverGetVersion(self):
        return (0, 13000)

    def cuGetErrorName(self, err):
        return (0, f"FAKE_ERROR_{int(err)}".encode())

    def cuDeviceGetCount(self):
        return (0, self.ndev)

    def cuDeviceGet(self, i):
        return (0, i)

    def cuDeviceGetName(self, n, dev):
        return (0, f"Fake GPU {dev}".encode().ljust(n, b"\0"))

    def cuDeviceCanAccessPeer(self, a, b):
        return (0, int(self.can_peer))

    def cuDeviceGetP2PAttribute(self, attr, a, b):
        assert isinstance(attr, P2PAttr)
        return (0, {1: 0, 2: int(self.can_peer), 3: 1, 4: 1}[int(attr)])

    def cuDevicePrimaryCtxRetain(self, dev):
        self.ctx_refs[dev] += 1
        return (0, ("ctx", dev))

    def cuDevicePrimaryCtxRelease(self, dev):
        assert self.ctx_refs[dev] > 0
        self.ctx_refs[dev] -= 1
        return (0,)

    def cuCtxSetCurrent(self, ctx):
        self.current = ctx
        return (0,)

    def cuCtxSynchronize(self):
        return (0,) if self.current else (self.INVALID_CONTEXT,)

    def cuCtxEnablePeerAccess(self, peer_ctx, flags):
        pair = (self.current[1], peer_ctx[1])
        if pair in self.peer:
            return (704,)
        self.peer.add(pair)
        return (0,)

    def cuCtxDisablePeerAccess(self, peer_ctx):
        self.peer.remove((self.current[1], peer_ctx[1]))
        return (0,)

    def cuStreamCreate(self, flags):
        s = ("stream", self.current[1], len(self.streams) + 100 * self.calls["cuStreamCreate"])
        self.streams.add(s)
        return (0, s)

    def cuStreamDestroy(self, s):
        self.streams.remove(s)
        return (0,)

    def cuStreamSynchronize(self, s):
        return (0,) if self._on(s) else (self.INVALID_CONTEXT,)

    def cuStreamWaitEvent(self, s, ev, flags):
        assert ev in self.events
        return (0,) if self._on(s) else (self.INVALID_CONTEXT,)

    def cuEventCreate(self, flags):
        ev = Event(self.current[1], not flags & 2)
        self.events.add(ev)
        return (0, ev)

    def cuEventDestroy(self, ev):
        self.events.remove(ev)
        return (0,)

    def cuEventRecord(self, ev, s):
        if not self._on(s) or ev.dev != s[1]:
            return (self.INVALID_HANDLE,)
        ev.t = self.clock
        return (0,)

    def cuEventSynchronize(self, ev):
        return (0,)

    def cuEventElapsedTime(self, a, b):
        if not (a.timing and b.timing) or a.dev != b.dev or a.t is None or b.t is None:
            return (self.INVALID_HANDLE, None)
        return (0, (b.t - a.t) * 1e3)

    def cuMemAlloc(self, n):
        base = self.next_base
        self.next_base += 0x10000000
        self.mem[base] = (self.current[1], bytearray(n))
        return (0, base)

    def cuMemFree(self, ptr):
        del self.mem[ptr]
        return (0,)

    def cuMemHostAlloc(self, n, flags):
        buf = (ctypes.c_char * n)()
        self.host[ctypes.addressof(buf)] = buf
        return (0, ctypes.addressof(buf))

    def cuMemFreeHost(self, ptr):
        del self.host[ptr]
        return (0,)

    def cuMemsetD32(self, ptr, value, words):
        dev, buf, off = self._dev_of(int(ptr), words * 4)
        if dev != self.current[1]:
            return (self.INVALID_CONTEXT,)
        buf[off:off + words * 4] = struct.pack("<I", value) * words
        return (0,)

    def cuMemcpyDtoH(self, host, ptr, n):
        dev, buf, off = self._dev_of(int(ptr), n)
        ctypes.memmove(host, bytes(buf[off:off + n]), n)
        return (0,)

    def cuMemcpyDtoHAsync(self, host, ptr, n, s):
        if not self._on(s):
            return (self.INVALID_CONTEXT,)
        dev, buf, off = self._dev_of(int(ptr), n)
        assert dev == s[1], "download issued on another device's stream"
        ctypes.memmove(host, bytes(buf[off:off + n]), n)
        self.clock += n / 50e9
        return (0,)

    def cuMemcpyHtoDAsync(self, ptr, host, n, s):
        if not self._on(s):
            return (self.INVALID_CONTEXT,)
        dev, buf, off = self._dev_of(int(ptr), n)
        assert dev == s[1], "upload issued on another device's stream"
        buf[off:off + n] = ctypes.string_at(host, n)
        self.clock += n / 50e9
        return (0,)

    def cuMemcpyPeerAsync(self, dst, dctx, src, sctx, n, s):
        if not self._on(s):
            return (self.INVALID_CONTEXT,)
        ddev, dbuf, doff = self._dev_of(int(dst), n)
        sdev, sbuf, soff = self._dev_of(int(src), n)
        assert (ddev, sdev) == (dctx[1], sctx[1])
        if not self.drop:
            dbuf[doff:doff + n] = sbuf[soff:soff + n]
        self.clock += n / (400e9 if (sdev, ddev) in self.peer else 25e9)
        return (0,)

    def leaks(self) -> dict:
        return {k: v for k, v in {"contexts": sum(self.ctx_refs), "device memory": len(self.mem),
                                  "host memory": len(self.host), "streams": len(self.streams),
                                  "events": len(self.events), "peer": len(self.peer)}.items()
                if v}


class Event:
    def __init__(self, dev: int, timing: bool):
        self.dev, self.timing, self.t = dev, timing, None


SMALL = 64 << 10


def test_collect_measures_every_ordered_pair_with_fake_driver():
    cu = FakeCu(ndev=3)
    d = p2p.collect_p2p(SMALL, 4, cu=cu)
    assert d["error"] is None and cu.leaks() == {}
    assert [(p["src"], p["dst"]) for p in d["pairs"]] == [
        (0, 1), (0, 2), (1, 0), (1, 2), (2, 0), (2, 1)]
    for p in d["pairs"]:
        assert p["can_access_peer"] == 1 and p["peer_access"] is True
        assert p["attributes"] == {"performance_rank": 0, "access_supported": 1,
                                   "native_atomic_supported": 1,
                                   "cuda_array_access_supported": 1}
        assert p["peer"]["check"] == "ok" and p["bounce"]["check"] == "ok"
        assert p["peer"]["gbps"] == pytest.approx(400, rel=1e-6)
        assert p["bounce"]["gbps"] == pytest.approx(25, rel=1e-6)  # two 50 GB/s legs
    assert cu.calls["cuMemcpyPeerAsync"] == 6 * (4 + 1)  # one warm-up each
    assert cu.calls["cuMemcpyDtoHAsync"] == cu.calls["cuMemcpyHtoDAsync"] == 6 * (4 + 1)
    table = p2p.format_p2p(d)
    assert "0 -> 2" in table and "16.00x" in table


def test_without_peer_access_the_driver_stages_and_nothing_is_enabled():
    cu = FakeCu(can_peer=False)
    d = p2p.collect_p2p(SMALL, 2, cu=cu)
    assert cu.leaks() == {} and "cuCtxEnablePeerAccess" not in cu.calls
    for p in d["pairs"]:
        assert p["peer_access"] is False and p["peer"]["gbps"] == pytest.approx(25)


def test_a_copy_that_moves_nothing_is_caught():
    cu = FakeCu(drop_peer_copy=True)
    d = p2p.collect_p2p(SMALL, 2, cu=cu)
    for p in d["pairs"]:
        pat = p2p.PEER_PATTERN | (p["src"] << 8) | p["dst"]
        assert p["peer"]["check"] == f"MISMATCH at byte 0: 0x00000000, want {pat:#010x}"
        assert p["bounce"]["check"] == "ok"
    assert "peer: MISMATCH" in p2p.format_p2p(d)


@pytest.mark.parametrize("fail", [{"cuMemAlloc": 3}, {"cuMemHostAlloc": 2},
                                  {"cuEventCreate": 5}])
def test_setup_failure_is_reported_and_everything_released(fail):
    cu = FakeCu(fail=fail)
    d = p2p.collect_p2p(SMALL, 2, cu=cu)
    name = next(iter(fail))
    assert d["error"].startswith(name) and "FAKE_ERROR_2 (2)" in d["error"]
    assert cu.leaks() == {}
    assert f"error: {name}" in p2p.format_p2p(d)


def test_a_failed_measurement_leaves_the_others():
    cu = FakeCu(fail={"cuMemcpyHtoDAsync": 1})  # the first bounce's warm-up
    d = p2p.collect_p2p(SMALL, 2, cu=cu)
    assert d["error"] is None and cu.leaks() == {}
    first, second = d["pairs"]
    assert first["bounce"] == {"error": "cuMemcpyHtoDAsync returned FAKE_ERROR_2 (2)"}
    assert first["peer"]["check"] == "ok" and second["bounce"]["check"] == "ok"


def test_one_gpu_measures_nothing():
    cu = FakeCu(ndev=1)
    d = p2p.collect_p2p(SMALL, 2, cu=cu)
    assert d["pairs"] == [] and "cuMemAlloc" not in cu.calls
    assert p2p.format_p2p(d) == "1 GPU (0: Fake GPU 0): no GPU pairs to query or measure"


def test_bad_size_is_refused():
    with pytest.raises(p2p.ShimgenError):
        p2p.collect_p2p(6, 1, cu=FakeCu())
