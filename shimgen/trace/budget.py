"""The books of a shared memory budget (runtime/budget/view.h, docs/memory.md "One budget for
many processes"), read: the limit, each device's peak and what its processes hold, each
process's slot (its pid, its bytes and peak per device, its refusals), and the last
refusals with the process each hit. The layout is view.h's for x86-64 and aarch64 (glibc:
a pthread_mutex_t in 64 bytes); tests/run/test_budget.py checks it against the C compiler's
offsets. Slots are as the processes left them: a process gone keeps its slot until a
process of the budget needs the room (its bytes are then its holdings at death)."""

from __future__ import annotations

import os
import stat
import struct
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ShimgenError

MAGIC = 0x3153444745554253
VERSION = 1
DEVICES, SLOTS, REFUSALS = 16, 256, 64
HEADER = struct.Struct("<QIIQQQ64x")  # magic, version, bytes, limit, seq, refused; the lock
DEVICE = struct.Struct("<16sII QQ")  # key, in_use, unused, used, peak
SLOT = struct.Struct(f"<iIQQ{DEVICES}Q{DEVICES}Q")  # pid, refused, pidns, start, bytes, peak
REFUSAL = struct.Struct("<iIQQ")  # pid, device, size, used
SIZE = HEADER.size + DEVICES * DEVICE.size + SLOTS * SLOT.size + REFUSALS * REFUSAL.size


@dataclass
class Device:
    key: str  # the UUID as NVIDIA writes it (GPU-xxxxxxxx-...), or "ordinal N"
    used: int
    peak: int


@dataclass
class Slot:
    pid: int
    refused: int
    bytes: dict[int, int] = field(default_factory=dict)  # device index -> bytes held
    peak: dict[int, int] = field(default_factory=dict)


@dataclass
class Refusal:
    pid: int
    device: int
    size: int
    used: int


@dataclass
class Books:
    limit: int
    refused: int
    devices: list[Device]
    slots: list[Slot]
    refusals: list[Refusal]  # the last REFUSALS, oldest first


def device_key(raw: bytes) -> str:
    if raw.startswith(b"ordinal\0"):
        return f"ordinal {int.from_bytes(raw[8:12], 'little', signed=True)}"
    h = raw.hex()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def parse(data: bytes) -> Books:
    """The books of a file's bytes; ValueError when they are not books of this version."""
    if len(data) != SIZE:
        raise ValueError(f"{len(data)} bytes, not the {SIZE} of books of version {VERSION}")
    magic, version, size, limit, _seq, refused = HEADER.unpack_from(data, 0)
    if magic != MAGIC or version != VERSION or size != SIZE:
        raise ValueError(f"not books of version {VERSION}")
    at = HEADER.size
    devices = []
    for _ in range(DEVICES):
        key, in_use, _u, used, peak = DEVICE.unpack_from(data, at)
        at += DEVICE.size
        if in_use:
            devices.append(Device(device_key(key), used, peak))
    slots = []
    for _ in range(SLOTS):
        v = SLOT.unpack_from(data, at)
        at += SLOT.size
        if v[0]:
            b, p = v[4:4 + DEVICES], v[4 + DEVICES:]
            slots.append(Slot(v[0], v[1], {d: n for d, n in enumerate(b) if n or p[d]},
                              {d: n for d, n in enumerate(p) if n}))
    ring = [REFUSAL.unpack_from(data, at + i * REFUSAL.size) for i in range(REFUSALS)]
    kept = min(refused, REFUSALS)
    order = [(refused - kept + i) % REFUSALS for i in range(kept)]
    return Books(limit, refused, devices, slots, [Refusal(*ring[i]) for i in order])


def load(path: Path) -> Books:
    """The books at `path` (ours alone, a regular file); ShimgenError in one line else."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        raise ShimgenError(f"{path}: {e.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            raise ShimgenError(f"{path}: not a regular file of this user's")
        data = os.read(fd, SIZE + 1)
    finally:
        os.close(fd)
    try:
        return parse(data)
    except ValueError as e:
        raise ShimgenError(f"{path}: {e}") from None
