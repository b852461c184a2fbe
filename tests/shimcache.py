"""Shims the tests' shared fixtures build, kept between test runs under build/test-shims/.

A shim is built by the real command line (or the Python API, for the fake driver) into a
directory named by a key: a checksum of the name, size and modification time of every file
a build reads (shimgen/, templates/, runtime/), the interpreter, and what the shim is for
(the driver's path and version, or the fake driver's file). Another pytest run of the same
sources (the second tier after the first, or the mutation check's run of a mistake in
shimgen/report/) takes that directory as it is; a changed source, a mutated runtime file
among them, gives a new key and a new build. Workers take a key's lock, so a shim is built
once; an entry is complete when its `done` file exists (written last), and one that is not
(a build killed half-way) is built again. The newest entries are kept, the others removed.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import sys
import time
import zlib
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

from shimgen.shim.pipeline import make_shim

ROOT = Path(__file__).resolve().parent.parent
STORE = ROOT / "build" / "test-shims"
KEEP = 24  # entries kept; older ones than these go, once they are unused for PRUNE_AFTER
PRUNE_AFTER = 900.0  # seconds
DONE = "done"


def sources_stamp(root: Path = ROOT) -> str:
    """16 hex digits that change when any file a shim build reads changes (name, size or
    modification time)."""
    parts = [sys.executable]
    for top in ("shimgen", "templates", "runtime"):
        for dirpath, dirnames, files in os.walk(root / top):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            for f in sorted(files):
                st = os.stat(os.path.join(dirpath, f))
                parts.append(f"{os.path.relpath(dirpath, root)}/{f}\0{st.st_size}\0"
                             f"{st.st_mtime_ns}")
    data = "\n".join(parts).encode()
    return f"{zlib.crc32(data):08x}{zlib.adler32(data):08x}"


def key(stamp: str, *what: str) -> str:
    data = "\0".join(what).encode()
    return f"{stamp}-{zlib.crc32(data):08x}"


@contextmanager
def _locked(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def cached(name: str, build: Callable[[Path], str]) -> tuple[Path, str]:
    """(the entry's directory, what `build` returned when it made it): `build(dir)` builds
    into an empty `dir` and returns text kept beside the shim (the build's output)."""
    entry = STORE / name
    with _locked(STORE / f"{name}.lock"):
        done = entry / DONE
        if done.is_file():
            os.utime(entry)
            return entry, done.read_text()
        shutil.rmtree(entry, ignore_errors=True)
        entry.mkdir(parents=True)
        text = build(entry)
        done.write_text(text)
    _prune(keep=name)
    return entry, text


def _prune(keep: str) -> None:
    """Remove the entries past the KEEP newest that nobody used for PRUNE_AFTER seconds."""
    try:
        entries = sorted((p for p in STORE.iterdir() if p.is_dir()),
                         key=lambda p: p.stat().st_mtime, reverse=True)
    except OSError:
        return
    now = time.time()
    for p in entries[KEEP:]:
        try:
            if p.name != keep and now - p.stat().st_mtime > PRUNE_AFTER:
                shutil.rmtree(p, ignore_errors=True)
                (STORE / f"{p.name}.lock").unlink(missing_ok=True)
        except OSError:
            pass


def fake_driver_shim(fake: Path) -> Path:
    """The shim of a fake driver built by the probes' meson.build: `shimgen build` refuses a
    fake (a stub by design), so it is built through the Python API with the stub rule off;
    kept for later runs of the same sources and the same fake (tests/shimcache.py)."""
    st = fake.stat()

    def build(out: Path) -> str:
        lib = make_shim(fake, out, require_real=False).library
        return str(lib.relative_to(out))

    entry, rel = cached(key(sources_stamp(), "fake", str(fake), str(st.st_size),
                            str(st.st_mtime_ns)), build)
    return entry / rel
