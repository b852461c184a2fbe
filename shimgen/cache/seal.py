"""The seal of a shim cache entry (cache/store.py): what a new entry's shim.json records of its
library right after the build, so that each later use knows the library unchanged.

The seal. The library's SHA-256 is verified before each use, except when its stat (device,
inode, size, mtime, ctime) is what was recorded right after the build: the kernel sets the
ctime to its own clock at every change of the file (a write, a truncate, utime, chmod, a
rename), and no unprivileged process can set it back, so a file whose ctime is the recorded
one has not changed since, provided the file system's clock had moved past that ctime
before the library was read for the digest (otherwise a write in the same clock tick would
leave the ctime as it was): seal waits for that. Restoring the mtime (touch -d) does not
restore the ctime. What it cannot see: a clock set back by root, or raw writes to the disk,
which need privileges the cache does not defend against. So the cached path (cache._check)
reads a few descriptors' stat and imports no hashlib; a library whose stat differs
(touched, copied, changed) is hashed: the same bytes, the entry is used; others, it is
rebuilt.
"""

from __future__ import annotations

import json
import os
import struct

from ..driver import ARCHES, EHDR, NT_GNU_BUILD_ID, PHDR, PT_NOTE
from ..errors import ShimgenError
from ..files import replacing
from ..runenv import SHIM_LIBRARY, SHIM_MANIFEST
from .trust import SHIMS, Unusable, cache_root, open_dir, open_file, read_all

SHIM_NOTE = b"shimgen"  # the mark every shim carries (runtime/load/selfcheck.c)
SEAL_WAIT_S = 2.0  # at most, for the file system's clock to pass the library's ctime


def sha256(data: bytes) -> str:
    import hashlib  # not on the cached path: loading it costs milliseconds

    return hashlib.sha256(data).hexdigest()


def stat_seal(st: os.stat_result) -> list[int]:
    """What the seal records of the library: a change of the file changes at least its ctime."""
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def _shim_identity(data: bytes) -> tuple[str, bool]:
    """(GNU build-id, carries the shim's mark) of the ELF image `data` (x86-64 or aarch64),
    from the notes its program headers point to (as elfnotes.read_notes reads a file's)."""
    build_id, marked = "", False
    try:
        fields = EHDR.unpack_from(data)
        phoff, phentsize, phnum = fields[5], fields[9], fields[10]
        if fields[0][:6] != b"\x7fELF\x02\x01" or fields[2] not in ARCHES or \
                phentsize != PHDR.size:
            return "", False
        for i in range(phnum):
            typ, _, off, _, _, size, _, _ = PHDR.unpack_from(data, phoff + i * PHDR.size)
            if typ != PT_NOTE:
                continue
            notes, at = data[off:off + size], 0
            while at + 12 <= len(notes):
                namesz, descsz, ntype = struct.unpack_from("<III", notes, at)
                name = notes[at + 12:at + 12 + namesz].rstrip(b"\0")
                desc_at = at + 12 + (namesz + 3 & ~3)
                if name == b"GNU" and ntype == NT_GNU_BUILD_ID:
                    build_id = notes[desc_at:desc_at + descsz].hex()
                marked = marked or name == SHIM_NOTE
                at = desc_at + (descsz + 3 & ~3)
    except struct.error:
        return "", False
    return build_id, marked


def _clock_past(fd: int, ns: int) -> bool:
    """Whether the file system's clock has passed `ns`, read as the ctime that the file open
    at `fd` (a new file of ours, beside the library) gets when touched; waited for."""
    import time

    deadline = time.monotonic() + SEAL_WAIT_S
    while os.fstat(fd).st_ctime_ns <= ns:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)
        os.utime(fd)
    return True


def seal(shims_fd: int, name: str, library: str = SHIM_LIBRARY) -> None:
    """Record in the new entry `name`'s shim.json the SHA-256 of its library and the
    library's stat, read from one descriptor, once the file system's clock has passed the
    library's ctime (so that any later change of the library changes its ctime). Checks
    that those bytes are the shim that was built (its build-id and mark)."""
    directory = cache_root() / SHIMS / name
    fd, why = open_dir(name, shims_fd)
    if why:
        raise ShimgenError(f"the shim built into {directory}: {why}")
    try:
        mfd, _ = open_file(fd, SHIM_MANIFEST)
        with os.fdopen(mfd, "rb") as fh:
            manifest = json.loads(fh.read(1 << 20))
        lfd, before = open_file(fd, library)
        try:
            with replacing(SHIM_MANIFEST, dir_fd=fd) as out:
                past = _clock_past(out.fileno(), before.st_ctime_ns)
                data = read_all(lfd, before.st_size)
                if stat_seal(os.fstat(lfd)) != stat_seal(before) or \
                        len(data) != before.st_size:
                    raise ShimgenError(f"{directory / library} changed while "
                                       "shimgen read it; run again")
                if _shim_identity(data) != (manifest.get("library_build_id"), True):
                    raise ShimgenError(f"{directory / library} is not the shim "
                                       "that was built")
                manifest["library_sha256"] = sha256(data)
                # without a clock past its ctime, no seal: each use hashes the library
                manifest["library_seal"] = stat_seal(before) if past else None
                out.write(json.dumps(manifest, indent=2) + "\n")
        finally:
            os.close(lfd)
    except (Unusable, OSError, ValueError) as e:
        raise ShimgenError(f"the shim built into {directory} cannot be sealed: "
                           f"{e}") from None
    finally:
        os.close(fd)
