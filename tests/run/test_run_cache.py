"""The per-user shim cache of `shimgen run` (shimgen/cache/store.py), against a real Debian libcuda:
a second run builds nothing; first runs at once build once and never use a half-built
entry; a damaged entry is rebuilt, never used; gated and plain shims live side by side; the
gate selection is checked. And `shimgen build` keeps gated and plain builds apart."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from shimgen.cache.store import Key, key_for
from shimgen.cache.trust import cache_root
from shimgen.driver.elf import read_build_id
from shimgen.runenv import SHIM_LIBRARY, SHIM_MANIFEST
from tests.run.test_run import _record, base_env, run_argv, shimgen_run

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def driver(drivers) -> Path:
    return drivers[0].libdir / "libcuda.so.1"


def _entries(cache: Path) -> list[str]:
    shims = cache / "shimgen" / "shims"
    return sorted(e for e in os.listdir(shims) if not e.startswith("."))


def _state(lib: Path) -> tuple[int, int]:
    st = lib.stat()
    return st.st_ino, st.st_mtime_ns


def test_the_second_run_builds_nothing(driver, tmp_path):
    cache = tmp_path / "xdg"
    first = shimgen_run(driver, cache, "-o", str(tmp_path / "r1"), "--", "true")
    assert first.returncode == 0, first.stderr
    rec = _record(tmp_path / "r1")
    assert rec["shim"]["how"] == "built"
    lib = Path(rec["shim"]["path"])
    before = _state(lib)
    second = shimgen_run(driver, cache, "-o", str(tmp_path / "r2"), "--", "true")
    assert second.returncode == 0, second.stderr
    assert _record(tmp_path / "r2")["shim"] == dict(rec["shim"], how="cached")
    assert _state(lib) == before
    assert " (cached); " in second.stderr.splitlines()[0]
    assert _entries(cache) == [lib.parent.name]
    key = rec["shim"]["key"]
    assert key["driver_build_id"] == read_build_id(driver) and key["gates"] == ""
    for p in (cache / "shimgen", cache / "shimgen" / "shims", lib.parent):
        assert p.stat().st_mode & 0o777 == 0o700, p
    assert lib.stat().st_mode & 0o077 == 0


def test_cache_root_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_root() == tmp_path / "shimgen"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/ignored")
    assert cache_root() == Path.home() / ".cache" / "shimgen"


def test_first_runs_at_once_build_once(driver, tmp_path):
    """Three first runs started together, three times over with random delays: one builds,
    the others wait for it and use its entry; none runs with a shim that is not whole."""
    rng = random.Random(os.getpid())
    for rnd in range(3):
        cache = tmp_path / f"xdg{rnd}"
        procs = []
        for i in range(3):
            time.sleep(rng.uniform(0, 0.3))
            procs.append(subprocess.Popen(
                run_argv(driver, "-o", str(tmp_path / f"r{rnd}-{i}"), "--", "true"),
                env=base_env(cache), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE))
        for p in procs:
            _, err = p.communicate(timeout=300)
            assert p.returncode == 0, err.decode()
        hows = sorted(_record(tmp_path / f"r{rnd}-{i}")["shim"]["how"] for i in range(3))
        assert hows == ["built", "cached", "cached"], hows
        assert len(_entries(cache)) == 1
        assert not [e for e in os.listdir(cache / "shimgen" / "shims")
                    if e.startswith(".shimgen-staging-")]


def _truncate(d: Path) -> None:
    lib = d / SHIM_LIBRARY
    lib.write_bytes(lib.read_bytes()[: lib.stat().st_size // 2])


def _other_key(d: Path) -> None:
    m = json.loads((d / SHIM_MANIFEST).read_text())
    m["cache_key"]["shimgen_version"] = "0.0.0"
    (d / SHIM_MANIFEST).write_text(json.dumps(m))


def _other_library(d: Path) -> None:  # a whole ELF library, of the same size, not the shim
    lib = d / SHIM_LIBRARY
    size = lib.stat().st_size
    other = Path("/usr/lib/x86_64-linux-gnu/libc.so.6").read_bytes()
    lib.write_bytes((other * (size // len(other) + 1))[:size])


def _into_symlink(d: Path) -> None:
    shutil.rmtree(d)
    d.symlink_to("/tmp")


DAMAGE = {
    "library-missing": lambda d: (d / SHIM_LIBRARY).unlink(),
    "library-cut-short": _truncate,
    "library-another-file": _other_library,
    "manifest-missing": lambda d: (d / SHIM_MANIFEST).unlink(),
    "manifest-not-json": lambda d: (d / SHIM_MANIFEST).write_text("{"),
    "manifest-another-key": _other_key,
    "entry-a-symlink": _into_symlink,
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_entry_is_rebuilt_never_used(driver, tmp_path, damage):
    cache = tmp_path / "xdg"
    assert shimgen_run(driver, cache, "-o", str(tmp_path / "r1"), "--", "true").returncode == 0
    entry = Path(_record(tmp_path / "r1")["shim"]["path"]).parent
    DAMAGE[damage](entry)
    proc = shimgen_run(driver, cache, "-o", str(tmp_path / "r2"), "--", "env")
    assert proc.returncode == 0, proc.stderr
    rec = _record(tmp_path / "r2")
    assert rec["shim"]["how"].startswith("rebuilt (the cached one was unusable: "), rec
    assert not entry.is_symlink() and (entry / SHIM_LIBRARY).is_file()
    assert read_build_id(entry / SHIM_LIBRARY) == json.loads(
        (entry / SHIM_MANIFEST).read_text())["library_build_id"]
    third = shimgen_run(driver, cache, "-o", str(tmp_path / "r3"), "--", "true")
    assert _record(tmp_path / "r3")["shim"]["how"] == "cached", third.stderr
    assert Path("/tmp").is_dir() and os.path.isdir("/tmp")  # a symlink's target left alone


def test_gated_and_plain_shims_live_side_by_side(driver, tmp_path):
    """A run with --gates uses a shim with the gates baked in, under a key of its own: the
    plain shim is neither used for it nor replaced by it."""
    cache = tmp_path / "xdg"
    assert shimgen_run(driver, cache, "-o", str(tmp_path / "p1"), "--", "true").returncode == 0
    plain = _record(tmp_path / "p1")["shim"]
    proc = shimgen_run(driver, cache, "--gates", "-gdr,-dmabuf", "-o", str(tmp_path / "g1"),
                       "--", "env")
    assert proc.returncode == 0, proc.stderr
    gated = _record(tmp_path / "g1")["shim"]
    assert gated["how"] == "built" and gated["path"] != plain["path"]
    assert gated["key"]["gates"] == "auto" and set(gated["gates"]) == {"gdr", "dmabuf", "p2p-mixed"}
    assert "SHIMGEN_GATES=-gdr,-dmabuf" in proc.stdout.splitlines()
    assert _record(tmp_path / "g1")["gates"] == "-gdr,-dmabuf"
    assert shimgen_run(driver, cache, "-o", str(tmp_path / "p2"), "--", "true").returncode == 0
    assert _record(tmp_path / "p2")["shim"] == dict(plain, how="cached")
    proc = shimgen_run(driver, cache, "--gates", "gdr", "-o", str(tmp_path / "g2"), "--", "true")
    assert _record(tmp_path / "g2")["shim"] == dict(gated, how="cached"), proc.stderr
    assert len(_entries(cache)) == 2


@pytest.mark.parametrize("selection,says", [
    ("gdr,,dmabuf", "'' is not a gate name, +name or -name (e.g. gdr,dmabuf or -gdr,-dmabuf)"),
    ("gdr;x", "'gdr;x' is not a gate name, +name or -name (e.g. gdr,dmabuf or -gdr,-dmabuf)"),
])
def test_a_malformed_gate_selection_is_refused_before_anything(driver, tmp_path, selection,
                                                               says):
    cache = tmp_path / "xdg"
    proc = shimgen_run(driver, cache, "--gates", selection, "--", "true", cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [f"shimgen: error: --gates {selection!r}: {says}"]
    assert not cache.exists() and not (tmp_path / "shimgen-runs").exists()


def test_keys_differ_in_each_part():
    base = Key("ab" * 20, "1.0", "")
    names = {base.name, Key("cd" * 20, "1.0", "").name, Key("ab" * 20, "1.1", "").name,
             Key("ab" * 20, "1.0", "auto").name, Key("ab" * 20, "1.0", "profile-00").name}
    assert len(names) == 5


def test_build_keeps_gated_and_plain_builds_apart(drivers, tmp_path):
    """`shimgen build --gate-profile auto` and a plain build into one output root: two
    directories, each its own."""
    d = drivers[0]
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "shimgen", "build", "--driver", str(d.path), "--out", str(out)]
    assert subprocess.run(cmd, capture_output=True, cwd=ROOT).returncode == 0
    gated = subprocess.run(cmd + ["--gate-profile", "auto"], capture_output=True, text=True,
                           cwd=ROOT)
    assert gated.returncode == 0, gated.stderr
    names = sorted(os.listdir(out))
    plain_dir = next(n for n in names if not n.endswith("-gates"))
    assert names == [plain_dir, plain_dir + "-gates"]
    assert json.loads((out / plain_dir / SHIM_MANIFEST).read_text())["gates"] == []
    assert json.loads((out / names[1] / SHIM_MANIFEST).read_text())["gates"] == [
        "gdr", "dmabuf", "p2p-mixed"]
    assert f"shim       {out / names[1] / SHIM_LIBRARY}" in gated.stdout


def test_a_cache_path_that_ld_preload_cannot_carry_is_refused_before_building(driver,
                                                                              tmp_path):
    cache = tmp_path / "with space"
    proc = shimgen_run(driver, cache, "--", "true", cwd=tmp_path)
    assert proc.returncode == 1
    [line] = proc.stderr.splitlines()
    assert line.startswith(f"shimgen: error: shim cache {cache}/shimgen/shims/")
    assert line.endswith(": LD_PRELOAD cannot carry a path with a space or a colon; set "
                         "XDG_CACHE_HOME to a path without one")
    assert not cache.exists() and not (tmp_path / "shimgen-runs").exists()


@pytest.mark.parametrize("kind", ["symlink", "file"])
def test_a_cache_directory_that_is_not_a_directory_is_refused(driver, tmp_path, kind):
    cache = tmp_path / "xdg"
    (cache / "shimgen").mkdir(parents=True)
    shims = cache / "shimgen" / "shims"
    if kind == "symlink":
        (tmp_path / "elsewhere").mkdir()
        shims.symlink_to(tmp_path / "elsewhere")
    else:
        shims.write_text("mine")
    proc = shimgen_run(driver, cache, "--", "true", cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [
        f"shimgen: error: shim cache {shims}: not a directory (a symbolic link or a file); "
        "remove it"]
    assert kind == "file" and shims.read_text() == "mine" or \
        os.listdir(tmp_path / "elsewhere") == []


HEAVY = ("jinja2", "elftools", "mesonbuild", "capstone", "unicorn", "shimgen.driver.elf",
         "shimgen.shim.build", "shimgen.shim.install", "shimgen.shim.render", "dataclasses",
         "hashlib", "subprocess", "typing", "argparse", "shutil", "calendar", "_strptime")
# The `shimgen` console script, and at its exit the heavy modules the process had loaded.
SCRIPT = ("import atexit, sys\n"
          "atexit.register(lambda: sys.stderr.write('loaded: ' + ' '.join(sorted(\n"
          f"    m for m in {HEAVY!r} if m in sys.modules)) + '\\n'))\n"
          "from shimgen.__main__ import entry\n"
          "sys.exit(entry())\n")


def test_the_cached_path_imports_nothing_heavy(driver, tmp_path):
    """With its shim cached, `run` loads no jinja2, pyelftools, meson, capstone or unicorn,
    nor the parts of shimgen that use them, nor dataclasses, hashlib, subprocess, typing,
    argparse, shutil, calendar or time.strptime's module (each costs milliseconds at every
    start)."""
    cache = tmp_path / "xdg"
    assert shimgen_run(driver, cache, "-o", str(tmp_path / "r0"), "--", "true").returncode == 0
    proc = subprocess.run([sys.executable, "-c", SCRIPT, "run", "--driver", str(driver), "-o",
                           str(tmp_path / "r1"), "--", "true"], env=base_env(cache), cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines()[-1] == "loaded: ", proc.stderr
    assert _record(tmp_path / "r1")["shim"]["how"] == "cached"


def test_run_json_stamps_read_as_the_calendar_reads_them():
    """The run's own stamps (run/main.py _stamp) read back to the nanosecond the calendar
    gives, leap days and centuries included; anything else is None."""
    import calendar
    import random
    import time

    from shimgen.run.main import _stamp
    from shimgen.trace.live import stamp_ns

    rng = random.Random(5)
    for t in [951868799.999, 4107542400.0, 0.0, -1.5] + [rng.uniform(-3e9, 9e9)
                                                          for _ in range(20000)]:
        s = _stamp(t)
        main, _, frac = s[:-1].partition(".")
        want = calendar.timegm(time.strptime(main, "%Y-%m-%dT%H:%M:%S")) * 10**9
        assert stamp_ns(s) == want + int(frac) * 10**6, s
    for bad in ("2023-02-29T00:00:00.000Z", "1900-02-29T00:00:00Z", "2024-02-30T00:00:00Z",
                "2024-01-32T00:00:00Z", "2024-13-01T00:00:00Z", "2024-01-01T00:60:00Z",
                "2024-01-01T00:00:62Z",
                "2024-01-01T24:00:00Z", "2024-01-01T00:00:00", "2024-01-01 00:00:00Z",
                "2024-01-01T00:00:00.1a3Z", "2024-01-01T00:00:00.5", "2024-01-01T00:0a:00Z",
                "x", None, 5):
        assert stamp_ns(bad) is None, bad
    for y in (2023, 2024):  # each month's last day read, the day after it not
        for mo in range(1, 13):
            last = calendar.monthrange(y, mo)[1]
            day = f"{y}-{mo:02d}-{last:02d}T00:00:00"
            assert stamp_ns(day + "Z") == calendar.timegm(
                time.strptime(day, "%Y-%m-%dT%H:%M:%S")) * 10**9, day
            assert stamp_ns(f"{y}-{mo:02d}-{last + 1:02d}T00:00:00Z") is None, (y, mo)
    base = calendar.timegm(time.strptime("2024-01-01T00:00:00", "%Y-%m-%dT%H:%M:%S")) * 10**9
    assert stamp_ns("2024-01-01T00:00:00.1234567891Z") == base + 123456789  # to the ns
    # the shortest stamp: whole seconds, no fraction
    assert stamp_ns("2024-02-29T12:34:56Z") == calendar.timegm(
        time.strptime("2024-02-29T12:34:56", "%Y-%m-%dT%H:%M:%S")) * 10**9


def test_elf_imports_pyelftools_only_when_it_parses(drivers):
    code = ("import sys, shimgen.driver.elf as e\n"
            "assert 'elftools' not in sys.modules\n"
            "print(e.read_build_id(sys.argv[1]), 'elftools' in sys.modules)\n"
            "print(e.read_image(sys.argv[1]).build_id, 'elftools' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code, str(drivers[0].path)], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout.split()
    assert out[1:] == ["False", out[0], "True"] and len(out[0]) == 40


def test_the_default_driver_is_remembered_until_the_loader_cache_changes(driver, tmp_path):
    """Without --driver, the first run asks `ldconfig -p` (here a stand-in that counts its
    calls); later runs reuse the answer while /etc/ld.so.cache is unchanged and the file is
    there, and ask again when it is gone."""
    fake = tmp_path / "bin"
    fake.mkdir()
    calls = tmp_path / "calls"
    (fake / "ldconfig").write_text(
        f"#!/bin/sh\necho x >> {calls}\n"
        f"printf '\\tlibcuda.so.1 (libc6,x86-64) => {driver}\\n'\n")
    (fake / "ldconfig").chmod(0o755)
    cache = tmp_path / "xdg"
    env = base_env(cache, PATH=f"{fake}:{os.environ['PATH']}")

    def run(n: int) -> dict:
        proc = subprocess.run([sys.executable, "-m", "shimgen", "run", "-o",
                               str(tmp_path / f"r{n}"), "--", "true"], env=env, cwd=ROOT,
                              capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        return _record(tmp_path / f"r{n}")

    assert run(1)["driver"]["path"] == str(driver)
    assert run(2)["driver"]["path"] == str(driver)
    assert calls.read_text() == "x\n"
    memo = cache / "shimgen" / "shims" / "default-driver.json"
    assert memo.stat().st_mode & 0o777 == 0o600
    saved = json.loads(memo.read_text())
    memo.write_text(json.dumps(dict(saved, driver=str(tmp_path / "gone" / "libcuda.so.1"))))
    assert run(3)["driver"]["path"] == str(driver)
    assert calls.read_text() == "x\nx\n"
    memo.write_text(json.dumps(dict(saved, ld_so_cache=[0, 0, 0, 0])))
    assert run(4)["driver"]["path"] == str(driver)
    assert calls.read_text() == "x\nx\nx\n"


def test_an_entry_copied_under_another_drivers_key_is_rebuilt_not_used(drivers, tmp_path):
    """An entry's directory name holds its key, but only its manifest is checked: the shim
    of one driver (535) copied whole under the name of another's key (550), as a moved or
    planted entry would be, is rebuilt for the driver asked, never used for it."""
    cache = tmp_path / "xdg"
    d0, d1 = (d.libdir / "libcuda.so.1" for d in drivers[:2])
    assert shimgen_run(d0, cache, "-o", str(tmp_path / "r0"), "--", "true").returncode == 0
    entry0 = Path(_record(tmp_path / "r0")["shim"]["path"]).parent
    entry1 = entry0.parent / key_for(d1, None).name
    assert entry1 != entry0 and not entry1.exists()
    shutil.copytree(entry0, entry1, symlinks=True)
    proc = shimgen_run(d1, cache, "-o", str(tmp_path / "r1"), "--", "true")
    assert proc.returncode == 0, proc.stderr
    rec = _record(tmp_path / "r1")
    assert rec["shim"]["how"].startswith("rebuilt (the cached one was unusable: "), rec
    manifest = json.loads((entry1 / SHIM_MANIFEST).read_text())
    assert manifest["cache_key"]["driver_build_id"] == read_build_id(d1)
    assert read_build_id(entry1 / SHIM_LIBRARY) == manifest["library_build_id"]


def test_an_interrupt_while_the_build_is_put_in_place_leaves_it_sealed_and_said(
        driver, shims, tmp_path, monkeypatch):
    """An interrupt held back while a first build is put in place (shim/build.py's install)
    is raised once the build is there: the entry is sealed before it goes on, so the cache
    holds a usable shim and `run`'s line says that the shim was built and is in the cache."""
    import signal

    from shimgen.cache import store
    from shimgen.errors import Interrupted
    from shimgen.run.main import _in_cache_now

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    key = key_for(driver, None)
    built = shims[0].out_dir

    def installed_then_interrupted(_driver, key, _gates, root, _hooks=()):
        shutil.copytree(built, root / key.name, ignore=shutil.ignore_patterns("src"))
        manifest = json.loads((root / key.name / SHIM_MANIFEST).read_text())
        manifest["cache_key"] = key.as_dict()
        (root / key.name / SHIM_MANIFEST).write_text(json.dumps(manifest))
        raise Interrupted(signal.SIGTERM, installed=True)

    monkeypatch.setattr(store, "_build", installed_then_interrupted)
    with pytest.raises(Interrupted):
        store.ensure(driver, key, None)
    assert store.lookup(key) is not None
    assert _in_cache_now(store.lookup, key) == "the shim was built and is in the cache"
