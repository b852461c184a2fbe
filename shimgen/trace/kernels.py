"""The kernels of one process, read from its binary trace file (format version 7;
runtime/kernels/ writes them, docs/traceformat.md "Kernels" says what they hold): per handle
(a CUfunction or CUkernel) its name, how the name was learned, its launches, the host time
of its launch calls, its last grid and block and the launches whose shape changed; per
stream its launches, its last kernel and that launch's start. A name is read from the
names' arena where its slot says; one the trace file cut (longer than KERN_NAME_MAX, or past
the arena's end) is marked `cut`. A file before version 7 has none (None). Version 8 adds
GPU time (SHIMGEN_GPU_TIME): per handle its timed launches' GPU ns, count, longest and
histogram, and the launches not timed by reason; `gpu` None where it was not on."""

from __future__ import annotations

from ..runenv import (
    KERN_FROM,
    KERN_NAME_BYTES,
    KERN_NAME_CUT,
    KERN_NAME_MAX,
    KERN_SLOTS,
    KERN_STREAM_LEGACY,
    KERN_STREAM_PER_THREAD,
    KERN_STREAMS,
    KGPU_BUCKETS,
    KGPU_NOT,
    KGPU_TRACK,
    KGPU_TRACK_WORDS,
)


class Kernel:
    __slots__ = ("handle", "name", "cut", "source", "launches", "ticks", "shapes", "grid",
                 "block", "gpu")

    def __init__(self, handle: int, name: str, source: str, launches: int, ticks: int,
                 shapes: int, grid: tuple, block: tuple, cut: bool = False) -> None:
        self.handle, self.name, self.source, self.cut = handle, name, source, cut
        self.launches, self.ticks, self.shapes = launches, ticks, shapes
        self.grid, self.block = grid, block  # the last launch's (x, y, z)
        self.gpu: GpuTimes | None = None  # with GPU time on


class GpuTimes:
    """A handle's timed launches: their GPU ns in all, how many, the longest, and the
    histogram's counts by bucket (runenv.KGPU_BUCKETS)."""

    __slots__ = ("ns", "timed", "max_ns", "hist")

    def __init__(self, ns: int, timed: int, max_ns: int, hist: tuple) -> None:
        self.ns, self.timed, self.max_ns, self.hist = ns, timed, max_ns, hist


class StreamLast:
    """A stream's launches and its last kernel (its name, "" when unnamed; None when the
    launch's handle had no slot; `cut`: the name was cut) with that launch's start in
    ticks."""

    __slots__ = ("stream", "launches", "kernel", "handle", "start_ticks", "cut")

    def __init__(self, stream: int, launches: int, kernel: str | None, handle: int,
                 start_ticks: int, cut: bool = False) -> None:
        self.stream, self.launches, self.kernel = stream, launches, kernel
        self.handle, self.start_ticks, self.cut = handle, start_ticks, cut


class KernelTable:
    __slots__ = ("kernels", "streams", "lost", "lost_launches", "streams_lost", "asks",
                 "gpu_every", "gpu_pending", "gpu_not", "gpu_track")

    def __init__(self) -> None:
        self.kernels: list[Kernel] = []
        self.streams: list[StreamLast] = []
        self.lost = self.lost_launches = self.streams_lost = 0
        self.asks = False  # the driver could be asked names (it exports cuFuncGetName)
        # GPU time: 1 in gpu_every launches timed (0: not on), pairs never resolved (a
        # process killed), launches not timed by reason (runenv.KGPU_NOT)
        self.gpu_every = self.gpu_pending = 0
        self.gpu_not: dict[str, int] = {}
        # the GPU track's launches, oldest first: (stream, kernel handle, its context's
        # reference ticks, GPU ns from that reference to its start, its GPU ns)
        self.gpu_track: list[tuple[int, int, int, int, int]] = []


class KernelsError(Exception):
    """What is wrong with a file's kernels (trace/binary.py says it with the file's name)."""


def _name(names: bytes, at: int, slot: int) -> tuple[str, bool]:
    """A slot's name and whether it was cut, from its kern_name_at word."""
    off, n, cut = at >> 32, at & (KERN_NAME_CUT - 1), bool(at & KERN_NAME_CUT)
    if n > KERN_NAME_MAX or off + n > len(names):
        raise KernelsError(f"its kernel slot {slot} has a name of {n} bytes at {off}, outside "
                           f"the {len(names)} bytes of names")
    return names[off:off + n].decode("utf-8", "replace"), cut


def stream_text(stream: int) -> str:
    """A stream as the report names it: its handle, the legacy and per-thread ones by name."""
    return {0: "the null stream", KERN_STREAM_LEGACY: "the legacy stream",
            KERN_STREAM_PER_THREAD: "the per-thread stream"}.get(stream, f"stream {stream:#x}")


def read_kernels(h: dict) -> KernelTable | None:
    """The kernels from a header's fields (trace/binary.py, trace/inflight.py), None for a
    file before version 7 or one whose process never traced into a directory with them."""
    if h.get("kern_slots") is None or not h["kern_slots"]:
        return None
    sizes = (h["kern_slots"], h["kern_name_max"], h["kern_name_bytes"], h["kern_streams"])
    want = (KERN_SLOTS, KERN_NAME_MAX, KERN_NAME_BYTES, KERN_STREAMS)
    if sizes != want:
        raise KernelsError(f"its kernel table's sizes {sizes} are not the format's {want}")
    t = KernelTable()
    t.lost, t.lost_launches = h["kern_lost"], h["kern_lost_launches"]
    t.streams_lost, t.asks = h["kstream_lost"], bool(h["kern_asks"])
    # (the whole arena, not only the bytes kern_name_used says were taken: a live process's
    # header is read in its order, so a name published after that count was read is read)
    names = h["kern_names"]
    slot_name: dict[int, tuple[str, bool]] = {}
    for i, handle in enumerate(h["kern_handle"]):
        if not handle:
            continue
        name, cut = slot_name[i] = _name(names, h["kern_name_at"][i], i)
        t.kernels.append(Kernel(handle, name, KERN_FROM.get(h["kern_from"][i], ""),
                                h["kern_launches"][i], h["kern_ticks"][i], h["kern_shapes"][i],
                                tuple(h["kern_grid"][i * 3:i * 3 + 3]),
                                tuple(h["kern_block"][i * 3:i * 3 + 3]), cut))
    if h.get("kgpu_every"):
        _read_gpu(h, t)
    for j, key in enumerate(h["kstream_key"]):
        if not key or not h["kstream_launches"][j]:
            continue
        slot = h["kstream_slot"][j]
        if slot > KERN_SLOTS:
            raise KernelsError(f"its stream {j} names kernel slot {slot - 1}")
        name, cut = slot_name.get(slot - 1, (None, False)) if slot else (None, False)
        t.streams.append(StreamLast(key - 1, h["kstream_launches"][j], name,
                                    h["kern_handle"][slot - 1] if slot else 0,
                                    h["kstream_start"][j], cut))
    return t


def _read_gpu(h: dict, t: KernelTable) -> None:
    """Version 8's GPU times onto the table's kernels."""
    if h["kgpu_buckets"] != KGPU_BUCKETS:
        raise KernelsError(f"its GPU histograms have {h['kgpu_buckets']} buckets, not the "
                           f"format's {KGPU_BUCKETS}")
    t.gpu_every, t.gpu_pending = h["kgpu_every"], h["kgpu_pending"]
    t.gpu_not = dict(zip(KGPU_NOT, h["kgpu_not"], strict=True))
    at = {k.handle: k for k in t.kernels}
    for i, handle in enumerate(h["kern_handle"]):
        if handle:
            hist = h["kgpu_hist"][i * KGPU_BUCKETS:(i + 1) * KGPU_BUCKETS]
            at[handle].gpu = GpuTimes(h["kgpu_ns"][i], h["kgpu_timed"][i], h["kgpu_max"][i],
                                      tuple(hist))
    words, used = h["kgpu_track"], h["kgpu_track_used"]
    first = max(0, used - KGPU_TRACK)
    for n in range(first, used):  # (the ring's oldest kept first)
        at_ = n % KGPU_TRACK * KGPU_TRACK_WORDS
        slot, stream, ref, start, ns = words[at_:at_ + KGPU_TRACK_WORDS]
        if not slot:  # (being written when the file was read, or the process died)
            continue
        if slot > KERN_SLOTS or not h["kern_handle"][slot - 1]:
            raise KernelsError(f"its GPU track names kernel slot {slot - 1}")
        t.gpu_track.append((stream, h["kern_handle"][slot - 1], ref, start, ns))
