"""Where the driver's functions begin and end, from its unwind table: `.eh_frame_hdr`
(found through the PT_GNU_EH_FRAME program header) holds a sorted table of every function's
start and its FDE, and each FDE gives the function's length. A stripped libcuda keeps this
table (the C++ runtime needs it to unwind), so the analysis can read a whole function where
it would otherwise have to guess where one begins (initsite.py, stored.py).

Only the encodings that x86-64 toolchains emit are read: the table as `datarel|sdata4`
pairs, the FDE's start as `pcrel|sdata4`; anything else gives no bounds, never wrong ones.
"""

from __future__ import annotations

import bisect
import struct
from dataclasses import dataclass

from ..driver import DriverImage

DW_EH_PE_PCREL_SDATA4 = 0x1B
DW_EH_PE_UDATA4 = 0x03
DW_EH_PE_DATAREL_SDATA4 = 0x3B
MAX_FUNCTION = 1 << 20  # bytes: a length above this is not believed


@dataclass(frozen=True)
class Unwind:
    """The table of one image: function starts, sorted, and their FDEs' addresses."""

    image: DriverImage
    starts: list[int]
    fdes: list[int]

    def bounds(self, va: int) -> tuple[int, int] | None:
        """[start, end) of the function whose code holds `va`, or None when the table does
        not cover it."""
        i = bisect.bisect_right(self.starts, va) - 1
        if i < 0:
            return None
        start, fde = self.starts[i], self.fdes[i]
        raw = self.image.read(fde, 16)
        if len(raw) < 16:
            return None
        length, cie, begin, size = struct.unpack("<IIiI", raw)
        if length in (0, 0xFFFFFFFF) or cie == 0 or fde + 8 + begin != start \
                or not 0 < size <= MAX_FUNCTION or not start <= va < start + size:
            return None
        return start, start + size


def read_unwind(image: DriverImage) -> Unwind:
    """The image's table (empty when it has none, or one this module does not read)."""
    starts, fdes = _table(image)
    return Unwind(image, starts, fdes)


def function_bounds(image: DriverImage, va: int) -> tuple[int, int] | None:
    """[start, end) of the function holding `va` (reads the table each time: for one
    question; Code keeps one Unwind per image)."""
    return read_unwind(image).bounds(va)


def _table(image: DriverImage) -> tuple[list[int], list[int]]:
    """(function starts, their FDEs' addresses), sorted by start; empty when unreadable."""
    hdr = image.eh_frame_hdr
    if hdr is None:
        return [], []
    head = image.read(hdr, 12)
    if len(head) < 12:
        return [], []
    version, ptr_enc, count_enc, table_enc = head[:4]
    if (version, ptr_enc, count_enc, table_enc) != (1, DW_EH_PE_PCREL_SDATA4, DW_EH_PE_UDATA4,
                                                    DW_EH_PE_DATAREL_SDATA4):
        return [], []
    (count,) = struct.unpack_from("<I", head, 8)
    raw = image.read(hdr + 12, count * 8)
    if len(raw) != count * 8:
        return [], []
    starts, fdes = [], []
    for loc, fde in struct.iter_unpack("<ii", raw):
        starts.append(hdr + loc)
        fdes.append(hdr + fde)
    return starts, fdes
