"""Trust in the shim cache of `shimgen run` (shimgen/cache/store.py, with its checks in
cache_trust.py and its seal in cache_seal.py), against a real Debian libcuda, tried as
another local user would try it (uid 65534 through setpriv; the tests run as root):

- every directory level (the cache root, shims/, the entry) is checked by one function, on
  the cached path as when building: a symlink, another user's directory, or one that group
  or others can write is refused (root, shims/) or rebuilt (an entry), never used;
- an entry, or its library or shim.json, that is another user's or that others can write is
  never loaded, even holding the right bytes: it is rebuilt, saying why, and the bad one is
  moved aside with nothing of the other user's removed and no symlink followed;
- a library changed after it was built (in place, same size, same notes; its mtime put
  back) is never loaded: the digest sealed in shim.json is checked whenever the library's
  stat is not the one sealed, which any change of the file alters (its ctime)."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from shimgen.cache import seal as cache_seal
from shimgen.cache import store as cachemod
from shimgen.cache import trust as cache_trust
from shimgen.driver.elf import read_build_id
from shimgen.errors import ShimgenError
from shimgen.runenv import SHIM_LIBRARY, SHIM_MANIFEST
from tests.faultkit import OTHER, as_other
from tests.run.test_run import _record, base_env, shimgen_run

ROOT = Path(__file__).resolve().parents[2]
LIB, MANIFEST = SHIM_LIBRARY, SHIM_MANIFEST  # an entry's files
REBUILT = "rebuilt (the cached one was unusable: "


@pytest.fixture(scope="module")
def driver(drivers) -> Path:
    return drivers[0].libdir / "libcuda.so.1"


@pytest.fixture
def shared():
    """A directory the second user can reach (a test's tmp_path is 0700 all the way up):
    0711, with `drop/` in it where the second user may write (1777, as /tmp is)."""
    d = Path(tempfile.mkdtemp(prefix="shimgen-trust-"))
    d.chmod(0o711)
    (d / "drop").mkdir()
    (d / "drop").chmod(0o1777)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def template(driver, tmp_path_factory) -> Path:
    """A shim cache with the driver's plain shim, built once; tests copy it (a copied
    library is not the sealed file, so it is checked by its digest, and used)."""
    xdg = tmp_path_factory.mktemp("template") / "xdg"
    proc = shimgen_run(driver, xdg, "-o", str(xdg.parent / "r"), "--", "true")
    assert proc.returncode == 0, proc.stderr
    return xdg


class Cache:
    def __init__(self, xdg: Path) -> None:
        self.xdg = xdg
        self.root = xdg / "shimgen"
        self.shims = self.root / "shims"
        [name] = [n for n in os.listdir(self.shims) if not n.startswith(".")]
        self.entry = self.shims / name
        self.lib = self.entry / LIB
        self.manifest = self.entry / MANIFEST

    def discarded(self) -> list[Path]:
        return sorted(p for p in self.shims.iterdir()
                      if p.name.startswith(cache_trust.DISCARDED))


def copy_of(template: Path, where: Path) -> Cache:
    shutil.copytree(template, where / "xdg", symlinks=True)
    return Cache(where / "xdg")


def built(driver: Path, where: Path) -> Cache:
    """A cache whose entry this test built (so its library is the sealed file)."""
    xdg = where / "xdg"
    proc = shimgen_run(driver, xdg, "-o", str(where / "r0"), "--", "true")
    assert proc.returncode == 0, proc.stderr
    assert _record(where / "r0")["shim"]["how"] == "built"
    return Cache(xdg)


def reachable(c: Cache) -> None:
    """Let the second user reach the entry (0711 is still a directory nobody else can
    write, so the cache trusts it)."""
    for d in (c.xdg, c.root, c.shims):
        d.chmod(0o711)


def banner(proc: subprocess.CompletedProcess) -> str:
    """The banner of the run: the line after the one a build is announced with."""
    lines = proc.stderr.splitlines()
    return lines[1] if lines[0].startswith("shimgen: run: building the shim") else lines[0]


def tree(path: Path) -> dict[str, tuple]:
    """Every name under `path` with its owner, mode and contents (a symlink's target)."""
    out = {}
    for p in [path, *sorted(path.rglob("*"))]:
        st = p.lstat()
        body = os.readlink(p) if p.is_symlink() else p.read_bytes() if p.is_file() else None
        out[str(p.relative_to(path))] = (st.st_uid, st.st_mode, body)
    return out


def assert_private(c: Cache) -> None:
    """The entry is this user's alone: directories 0700, files not open to group or others."""
    for p in [c.entry, *c.entry.rglob("*")]:
        st = p.lstat()
        assert st.st_uid == os.geteuid() and not stat.S_ISLNK(st.st_mode), p
        assert stat.S_IMODE(st.st_mode) & 0o077 == 0, (p, oct(st.st_mode))


# ---- 1. the cache root and shims/: one check, on both paths ------------------------------

def _make_others(other: list[str], shared: Path, level: Path) -> None:
    """Replace `level` by a directory the second user made (in a place they may write),
    holding what `level` held: what a copy by an administrator, or a restored backup, gives."""
    theirs = shared / "drop" / "theirs"
    as_other(other, f"mkdir -m 755 {shlex.quote(str(theirs))}")
    for name in os.listdir(level):
        os.rename(level / name, theirs / name)
    level.rmdir()
    os.rename(theirs, level)


KINDS = ["symlink", "another-user", "group-can-write", "others-can-write"]
WHY = {"symlink": "not a directory (a symbolic link or a file); remove it",
       "another-user": "owned by another user; remove it or set XDG_CACHE_HOME",
       "group-can-write": "group or others can write it; chmod go-w it (or remove it)",
       "others-can-write": "group or others can write it; chmod go-w it (or remove it)"}


@pytest.mark.parametrize("path", ["cached", "cold"])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("level", ["root", "shims"])
def test_a_cache_directory_not_to_be_trusted_is_refused_on_both_paths(
        driver, template, other, shared, tmp_path, level, kind, path):
    """With its entry in it (the cached path) or without (a build would follow), the cache
    root or shims/ that is a symlink, another user's, or writable by group or others: one
    line, exit 1, nothing run or built, and what is there left as it was."""
    c = copy_of(template, shared)
    if path == "cold":
        shutil.rmtree(c.entry)
    where = c.root if level == "root" else c.shims
    if kind == "symlink":
        real = where.with_name(where.name + ".real")
        where.rename(real)
        where.symlink_to(real)
    elif kind == "another-user":
        _make_others(other, shared, where)
    else:
        where.chmod(0o770 if kind == "group-can-write" else 0o707)
    before = tree(c.xdg)
    proc = shimgen_run(driver, c.xdg, "-o", str(tmp_path / "r"), "--", "true")
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.splitlines() == [f"shimgen: error: shim cache {where}: {WHY[kind]}"]
    assert tree(c.xdg) == before
    assert not (tmp_path / "r").exists()


def test_a_remembered_driver_that_is_not_the_users_own_is_not_used(driver, template, other,
                                                                   shared, tmp_path):
    """default-driver.json (the answer of `ldconfig -p`, remembered) written by another
    user, naming another library: not read; `ldconfig -p` is asked (a stand-in here)."""
    c = copy_of(template, shared)
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "ldconfig").write_text(
        f"#!/bin/sh\nprintf '\\tlibcuda.so.1 (libc6,x86-64) => {driver}\\n'\n")
    (fake / "ldconfig").chmod(0o755)
    env = base_env(c.xdg, PATH=f"{fake}:{os.environ['PATH']}")
    run = [sys.executable, "-m", "shimgen", "run", "-o"]
    proc = subprocess.run([*run, str(tmp_path / "r1"), "--", "true"], env=env, cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    memo = c.shims / "default-driver.json"
    reachable(c)
    planted = json.loads(memo.read_text())
    planted["driver"] = str(shared / "drop" / "libcuda.so.1")
    (shared / "drop" / "memo").write_text(json.dumps(planted))
    (shared / "drop" / "memo").chmod(0o644)
    shutil.copyfile(driver, shared / "drop" / "libcuda.so.1")
    os.chown(memo, OTHER, OTHER)
    as_other(other, f"cat {shared}/drop/memo > {shlex.quote(str(memo))}")
    proc = subprocess.run([*run, str(tmp_path / "r2"), "--", "true"], env=env, cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert _record(tmp_path / "r2")["driver"]["path"] == str(driver)


# ---- 2. entries: another user's, or open to others, is never loaded ---------------------

PLANTED = r"""
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
/* the shim's mark (runtime/load/selfcheck.c), so that it passes for a shim */
__attribute__((used, section(".note.shimgen"), aligned(4))) static const struct {
    unsigned namesz, descsz, type;
    char name[8];
    unsigned desc;
} mark = {8, 4, 0x5348494du, "shimgen", 1};

__attribute__((constructor)) static void planted(void)
{
    const char *path = getenv("PLANTED_MARKER");
    char line[32];
    int fd = path ? open(path, O_WRONLY | O_CREAT | O_APPEND, 0644) : -1;
    if (fd >= 0) {
        int n = snprintf(line, sizeof line, "uid %d\n", (int)getuid());
        if (write(fd, line, (size_t)n) < 0)
            n = 0;
        close(fd);
    }
}
"""


@pytest.fixture(scope="module")
def planted_library(tmp_path_factory) -> Path:
    """A library whose constructor records the uid it runs as, with a build-id and the
    shim's mark: what a shim's manifest and notes check would take for a shim."""
    d = tmp_path_factory.mktemp("planted")
    (d / "planted.c").write_text(PLANTED)
    cc = shlex.split(os.environ.get("CC", "cc"))
    proc = subprocess.run([*cc, "-shared", "-fPIC", "-O2", "-Wl,--build-id=sha1", "-o",
                           str(d / "planted.so"), str(d / "planted.c")],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return d / "planted.so"


def _plant(other: list[str], shared: Path, c: Cache, lib: bytes | None,
           manifest: bytes | None) -> None:
    """The second user puts these bytes in the entry as the library and shim.json (files of
    their own, renamed over the entry's, as an entry open to others lets them)."""
    cmds = []
    for name, data in ((LIB, lib), (MANIFEST, manifest)):
        if data is None:
            continue
        src = shared / "drop" / f"their-{name}"
        src.write_bytes(data)
        src.chmod(0o644)
        tmp = c.entry / f".their-{name}"
        cmds.append(f"cp {src} {tmp} && mv -f {tmp} {c.entry / name}")
    as_other(other, " && ".join(cmds))


def _their_manifest(c: Cache, lib: bytes, path: Path) -> bytes:
    """shim.json for their library, with everything any check of it reads: the key, the
    size, the build-id, the digest (an attacker can compute each of them)."""
    m = json.loads(c.manifest.read_text())
    m.update(library_size=len(lib), library_build_id=read_build_id(path),
             library_sha256=hashlib.sha256(lib).hexdigest(), library_seal=None)
    return json.dumps(m).encode()


ENTRY_DAMAGE = ["open-to-others", "planted-in-an-open-entry", "another-users-entry",
                "library-another-users-copy", "manifest-another-users-copy",
                "library-open-to-others", "manifest-open-to-others", "library-a-symlink"]
ENTRY_WHY = {
    "open-to-others": "its directory: group or others can write it",
    "planted-in-an-open-entry": "its directory: group or others can write it",
    "another-users-entry": "its directory: owned by another user",
    "library-another-users-copy": f"{LIB}: owned by another user",
    "manifest-another-users-copy": f"{MANIFEST}: owned by another user",
    "library-open-to-others": f"{LIB}: group or others can write it",
    "manifest-open-to-others": f"{MANIFEST}: group or others can write it",
    "library-a-symlink": f"{LIB}: not a regular file (a symbolic link, a directory or a device)",
}


@pytest.mark.parametrize("damage", ENTRY_DAMAGE)
def test_an_entry_that_is_not_the_users_own_is_rebuilt_never_loaded(
        driver, template, other, shared, planted_library, tmp_path, damage):
    """An entry that group or others can write, or whose library or shim.json another user
    owns (even a byte-for-byte copy of the user's own: its owner may change it at any
    moment), or that others can write: rebuilt, the banner says why, the planted library's
    constructor never runs, and nothing of the other user's is removed or changed."""
    c = copy_of(template, shared)
    reachable(c)
    theirs: list[str] = []  # what of the other user's must survive, unchanged
    if damage == "open-to-others":
        c.entry.chmod(0o777)
    elif damage == "planted-in-an-open-entry":
        c.entry.chmod(0o777)
        lib = planted_library.read_bytes()
        _plant(other, shared, c, lib, _their_manifest(c, lib, planted_library))
        theirs = [LIB, MANIFEST]
    elif damage == "another-users-entry":
        lib = planted_library.read_bytes()
        manifest = _their_manifest(c, lib, planted_library)
        mine = c.entry.rename(c.entry.with_name("mine"))
        as_other(other, f"mkdir -m 755 {shared}/drop/entry")
        os.rename(shared / "drop" / "entry", c.entry)
        c.entry.chmod(0o777)
        _plant(other, shared, c, lib, manifest)
        c.entry.chmod(0o755)
        shutil.rmtree(mine)
        theirs = [".", LIB, MANIFEST]
    elif damage.endswith("another-users-copy"):
        name = LIB if damage.startswith("library") else MANIFEST
        c.entry.chmod(0o777)
        data = (c.entry / name).read_bytes()
        _plant(other, shared, c, data if name == LIB else None,
               data if name == MANIFEST else None)
        c.entry.chmod(0o700)  # only the file is not the user's
        theirs = [name]
    elif damage == "library-a-symlink":  # to the same bytes, in a directory anyone can write
        shutil.copyfile(c.lib, shared / "drop" / LIB)
        c.lib.unlink()
        c.lib.symlink_to(shared / "drop" / LIB)
    else:
        name = LIB if damage.startswith("library") else MANIFEST
        (c.entry / name).chmod(0o757 if name == LIB else 0o620)
    kept = {n: tree(c.entry / n) for n in theirs}
    drop = tree(shared / "drop")
    marker = tmp_path / "planted-ran"
    env = base_env(c.xdg, PLANTED_MARKER=str(marker))
    proc = shimgen_run(driver, c.xdg, "-o", str(tmp_path / "r"), "--", "true", env=env)
    assert proc.returncode == 0, proc.stderr
    assert not marker.exists(), marker.read_text()
    how = _record(tmp_path / "r")["shim"]["how"]
    assert how.startswith(REBUILT + ENTRY_WHY[damage]), how
    assert f"({how} in " in banner(proc)
    assert_private(c)
    assert read_build_id(c.lib) == json.loads(c.manifest.read_text())["library_build_id"]
    if theirs:  # moved aside, as it was
        [aside] = c.discarded()
        assert how.endswith(f"; not all of it was yours: left in {aside})"), how
        for n, t in kept.items():
            assert tree(aside / n) == t, n
    else:
        assert c.discarded() == []
    assert tree(shared / "drop") == drop  # nothing followed there
    third = shimgen_run(driver, c.xdg, "-o", str(tmp_path / "r3"), "--", "true", env=env)
    assert _record(tmp_path / "r3")["shim"]["how"] == "cached", third.stderr
    assert not marker.exists()


def test_a_bad_entry_is_replaced_without_following_its_symlinks(driver, template, other,
                                                                shared, tmp_path):
    """An entry open to others, where the second user has put a file of theirs and turned
    src/ and build.log into symlinks (to a directory of theirs and to a file of the user's
    outside the cache): rebuilt; what was the user's in it is removed; the other user's file
    and symlinks are left, moved aside; neither link's target is removed or changed."""
    c = copy_of(template, shared)
    reachable(c)
    c.entry.chmod(0o777)
    outside = shared / "outside"
    outside.write_text("the user's own, outside the cache\n")
    outside.chmod(0o640)
    before_outside = tree(outside)
    theirs = shared / "drop" / "theirs"
    as_other(other, f"mkdir {theirs} && echo theirs > {theirs}/f && chmod 600 {theirs}/f && "
                    f"echo note > {c.entry}/note && "
                    f"mv {c.entry}/src {c.entry}/.old-src && ln -s {theirs} {c.entry}/src && "
                    f"mv {c.entry}/build.log {c.entry}/.old-log && "
                    f"ln -s {outside} {c.entry}/build.log")
    before_theirs = tree(theirs)
    proc = shimgen_run(driver, c.xdg, "-o", str(tmp_path / "r"), "--", "true")
    assert proc.returncode == 0, proc.stderr
    assert _record(tmp_path / "r")["shim"]["how"].startswith(REBUILT)
    assert_private(c)
    [aside] = c.discarded()
    assert sorted(os.listdir(aside)) == ["build.log", "note", "src"]  # the other user's
    assert all(aside.joinpath(n).lstat().st_uid == OTHER for n in os.listdir(aside))
    assert tree(theirs) == before_theirs
    assert tree(outside) == before_outside


# ---- 3. the library: sealed when built, verified before each use -------------------------

def _text_range(lib: Path) -> tuple[int, int]:
    from elftools.elf.elffile import ELFFile

    with open(lib, "rb") as fh:
        sec = ELFFile(fh).get_section_by_name(".text")
        return sec["sh_offset"], sec["sh_size"]


@pytest.mark.parametrize("mtime", ["as-written", "mtime-put-back"])
def test_a_library_changed_in_place_is_rebuilt_never_run(driver, tmp_path, mtime):
    """The library's code overwritten in place with int3 (same size, same notes, so the
    same build-id and mark), its mtime put back or not: rebuilt, and the command runs
    (the changed library would kill it by SIGTRAP)."""
    c = built(driver, tmp_path)
    st = c.lib.stat()
    notes = read_build_id(c.lib)
    off, size = _text_range(c.lib)
    with open(c.lib, "r+b") as fh:
        fh.seek(off)
        fh.write(b"\xcc" * size)
    if mtime == "mtime-put-back":
        os.utime(c.lib, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert c.lib.stat().st_size == st.st_size and read_build_id(c.lib) == notes
    changed = subprocess.run(["true"], env={**base_env(c.xdg), "LD_PRELOAD": str(c.lib)})
    assert changed.returncode == -signal.SIGTRAP  # what loading it would do
    proc = shimgen_run(driver, c.xdg, "-o", str(tmp_path / "r"), "--", "true")
    assert proc.returncode == 0, proc.stderr
    assert _record(tmp_path / "r")["shim"]["how"] == REBUILT + f"{LIB} has changed since " \
        "it was built)"


def test_the_seal_is_the_librarys_digest_and_stat(driver, tmp_path):
    """shim.json records the SHA-256 of the library and its stat (device, inode, size,
    mtime, ctime) as built; the cached path then uses it without reading it."""
    c = built(driver, tmp_path)
    m = json.loads(c.manifest.read_text())
    st = c.lib.stat()
    assert m["library_sha256"] == hashlib.sha256(c.lib.read_bytes()).hexdigest()
    assert m["library_seal"] == [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns,
                                 st.st_ctime_ns]
    assert m["library_size"] == st.st_size


LOADED = ("import atexit, sys\n"
          "atexit.register(lambda: sys.stderr.write('hashlib: %s\\n' % ('hashlib' in "
          "sys.modules)))\n"
          "from shimgen.__main__ import entry\n"
          "sys.exit(entry())\n")


def test_a_library_touched_but_unchanged_is_checked_by_its_digest_and_used(driver, tmp_path):
    """A new mtime (and so ctime) on the same bytes: the stat is not the sealed one, so the
    digest is computed (hashlib loaded), matches, and the entry is used."""
    c = built(driver, tmp_path)

    def run(n: int) -> str:
        proc = subprocess.run([sys.executable, "-c", LOADED, "run", "--driver", str(driver),
                               "-o", str(tmp_path / f"r{n}"), "--", "true"],
                              env=base_env(c.xdg), cwd=ROOT, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        assert _record(tmp_path / f"r{n}")["shim"]["how"] == "cached", proc.stderr
        return proc.stderr.splitlines()[-1]

    assert run(1) == "hashlib: False"  # the seal holds: nothing read
    os.utime(c.lib)
    assert run(2) == "hashlib: True"


def _key_of(c: Cache) -> cachemod.Key:
    k = json.loads(c.manifest.read_text())["cache_key"]
    return cachemod.Key(k["driver_build_id"], k["shimgen_version"], k["gates"])


def _sealed(c: Cache, monkeypatch) -> None:
    """Seal the entry again, in this process, as a build ends."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(c.xdg))
    root_fd, shims_fd = cache_trust.cache_dirs(make=False)
    try:
        cache_seal.seal(shims_fd, _key_of(c).name)
    finally:
        os.close(root_fd)
        os.close(shims_fd)


def test_a_seal_is_taken_once_the_clock_is_past_the_library(driver, tmp_path, monkeypatch):
    """The seal waits until the file system's clock (the ctime a file of its own gets when
    touched) is past the library's ctime, so that a change made at once after it, in the
    same clock tick, still gets another ctime; and gives up after SEAL_WAIT_S. Then, right
    after a write (as a build ends), the seal is the library's stat, and a file made at once
    after it has a later ctime."""
    fd = os.open(tmp_path / "clock", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        ahead = os.fstat(fd).st_ctime_ns + 50_000_000
        assert cache_seal._clock_past(fd, ahead)
        assert os.fstat(fd).st_ctime_ns > ahead
        monkeypatch.setattr(cache_seal, "SEAL_WAIT_S", 0.05)
        assert not cache_seal._clock_past(fd, os.fstat(fd).st_ctime_ns + 10 * 10**9)
    finally:
        os.close(fd)
    c = built(driver, tmp_path)
    data = c.lib.read_bytes()
    for i in range(5):
        with open(c.lib, "r+b") as fh:  # a write: a new ctime
            fh.write(data[:16])
        _sealed(c, monkeypatch)
        probe = c.entry / f"probe{i}"
        probe.write_text("")
        seal = json.loads(c.manifest.read_text())["library_seal"]
        assert seal == cache_seal.stat_seal(c.lib.stat())
        assert probe.stat().st_ctime_ns > seal[4], i
        probe.unlink()


def test_a_library_sealed_without_its_stat_is_hashed_at_each_use(driver, tmp_path,
                                                                 monkeypatch):
    """When the clock never passed the library's ctime, the seal records no stat: every use
    computes the digest (hashlib loaded), and a change is still caught."""
    c = built(driver, tmp_path)
    monkeypatch.setattr(cache_seal, "_clock_past", lambda fd, ns: False)
    _sealed(c, monkeypatch)
    m = json.loads(c.manifest.read_text())
    assert m["library_seal"] is None
    assert m["library_sha256"] == hashlib.sha256(c.lib.read_bytes()).hexdigest()
    proc = subprocess.run([sys.executable, "-c", LOADED, "run", "--driver", str(driver),
                           "-o", str(tmp_path / "r1"), "--", "true"],
                          env=base_env(c.xdg), cwd=ROOT, capture_output=True, text=True)
    assert _record(tmp_path / "r1")["shim"]["how"] == "cached", proc.stderr
    assert proc.stderr.splitlines()[-1] == "hashlib: True"


def test_a_seal_checks_that_the_bytes_are_the_shim_built(driver, template, tmp_path,
                                                        planted_library, monkeypatch):
    """What is sealed is the shim that was built: a library with another build-id (here one
    that carries the shim's mark) is refused, and shim.json is left as it was."""
    c = copy_of(template, tmp_path)
    before = c.manifest.read_bytes()
    shutil.copyfile(planted_library, c.lib)
    with pytest.raises(ShimgenError, match="is not the shim that was built"):
        _sealed(c, monkeypatch)
    assert c.manifest.read_bytes() == before
    assert [n for n in os.listdir(c.entry) if n.startswith(".")] == []


def test_an_entry_without_a_digest_is_rebuilt(driver, template, tmp_path):
    c = copy_of(template, tmp_path)
    m = json.loads(c.manifest.read_text())
    del m["library_sha256"]
    c.manifest.write_text(json.dumps(m))
    proc = shimgen_run(driver, c.xdg, "-o", str(tmp_path / "r"), "--", "true")
    assert proc.returncode == 0, proc.stderr
    assert _record(tmp_path / "r")["shim"]["how"] == REBUILT + f"{MANIFEST} records no " \
        f"digest of {LIB})"


def test_a_library_cut_short_is_rebuilt_before_it_is_read(driver, template, tmp_path):
    c = copy_of(template, tmp_path)
    c.lib.write_bytes(c.lib.read_bytes()[:4096])
    proc = shimgen_run(driver, c.xdg, "-o", str(tmp_path / "r"), "--", "true")
    assert proc.returncode == 0, proc.stderr
    assert _record(tmp_path / "r")["shim"]["how"] == REBUILT + f"{LIB} is not the size it " \
        "was built)"


def test_everything_the_cache_makes_is_private_under_umask_0(driver, tmp_path):
    """Under umask 000: the directories 0700, the files (the library, the sealed shim.json,
    the lock) open to nobody else."""
    xdg = tmp_path / "xdg"
    proc = subprocess.run([sys.executable, "-m", "shimgen", "run", "--driver", str(driver),
                           "-o", str(tmp_path / "r"), "--", "true"], env=base_env(xdg),
                          cwd=ROOT, capture_output=True, text=True, preexec_fn=lambda: os.umask(0))
    assert proc.returncode == 0, proc.stderr
    for p in [xdg / "shimgen", *(xdg / "shimgen").rglob("*")]:
        mode = stat.S_IMODE(p.lstat().st_mode)
        assert mode & 0o077 == 0, (p, oct(mode))
        assert not p.is_dir() or mode == 0o700, (p, oct(mode))
