"""`python -m devtools.driverfetch`, the README's one command for a real driver file without
a GPU: --help prints help and fetches nothing; --path VERSION prints one usable path (what
`shimgen run --driver "$(...)"` takes) and fetches only that driver, saying so on stderr
before it starts; an arm64 build is printed as PACKAGE:arm64; a version it does not have is
a usage error, before any download. The README's cache path is where the cache is, with
XDG_CACHE_HOME set or not. The fetches here use a fake apt-get and dpkg-deb."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from devtools.driverfetch import DRIVERS

ROOT = Path(__file__).resolve().parents[2]


def fetch(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "devtools.driverfetch", *args], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("args", [["--help"], ["--path", "9"]])
def test_help_and_a_bad_version_fetch_nothing(args, tmp_path):
    """With an empty cache and no apt-get on PATH, a fetch would fail: these never try."""
    cache = tmp_path / "drivers"
    env = dict(os.environ, SHIMGEN_DRIVER_CACHE=str(cache), PATH=str(tmp_path))
    proc = fetch(*args, env=env)
    assert not cache.exists(), proc.stderr
    if args == ["--help"]:
        assert proc.returncode == 0 and proc.stdout.startswith("usage: "), proc
        assert "--path VERSION" in proc.stdout and proc.stderr == ""
    else:
        assert proc.returncode == 2 and "not one of" in proc.stderr, proc


def test_path_prints_one_real_driver(drivers):
    version = DRIVERS[1].version
    proc = fetch("--path", version.split(".")[0])
    assert proc.returncode == 0, proc.stderr
    (line,) = proc.stdout.splitlines()
    path = Path(line)
    assert path.is_file() and path.name == f"libcuda.so.{version}"
    assert path.read_bytes()[:4] == b"\x7fELF"


FAKE_APT = r"""#!/bin/sh
# apt-get as driverfetch calls it: `update` does nothing, `download SPEC...` records the
# specs and leaves PACKAGE_VERSION_ARCH.deb for each
for a in "$@"; do last="$a"; done
case " $* " in
*" download "*)
    seen=0
    for a in "$@"; do
        if [ "$seen" = 1 ]; then
            echo "$a" >> "$FAKE_LOG"
            pkg="${a%%:*}"; rest="${a#*:}"; arch="${rest%%=*}"; ver="${rest#*=}"
            : > "${pkg}_${ver}_${arch}.deb"
        fi
        [ "$a" = download ] && seen=1
    done ;;
esac
exit 0
"""
FAKE_DPKG_DEB = r"""#!/bin/sh
# dpkg-deb -x DEB DIR: DIR/usr/lib/libcuda.so.<the upstream version in DEB's name>
name=$(basename "$2" .deb); ver="${name#*_}"; ver="${ver%%_*}"; ver="${ver%%-*}"
mkdir -p "$3/usr/lib" && printf '\177ELF' > "$3/usr/lib/libcuda.so.$ver"
"""


@pytest.fixture
def fake_apt(tmp_path) -> dict:
    """An environment whose apt-get and dpkg-deb are the fakes above, with an empty cache."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("apt-get", FAKE_APT), ("dpkg-deb", FAKE_DPKG_DEB)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return dict(os.environ, SHIMGEN_DRIVER_CACHE=str(tmp_path / "drivers"),
                FAKE_LOG=str(tmp_path / "asked"), PATH=f"{bin_dir}{os.pathsep}/usr/bin:/bin")


def test_path_fetches_only_the_driver_it_names_and_says_so_first(fake_apt, tmp_path):
    proc = fetch("--path", "550", env=fake_apt)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "asked").read_text().split() == ["libcuda1:amd64=550.163.01-2"]
    assert Path(proc.stdout.strip()).name == "libcuda.so.550.163.01"
    (said,) = proc.stderr.splitlines()  # a pipe: the one line, no steps
    assert said.startswith("driverfetch: fetching libcuda1=550.163.01 from Debian's archive, "
                           "once (kept in "), said
    again = fetch("--path", "550", env=fake_apt)  # cached: nothing fetched, nothing said
    assert again.returncode == 0 and again.stderr == "" and again.stdout == proc.stdout


def test_an_arm64_fetch_says_arm64(fake_apt, tmp_path):
    proc = fetch("libcuda1:arm64=550.163.01", env=fake_apt)
    assert proc.returncode == 0, proc.stderr
    (line,) = proc.stdout.splitlines()
    name, version, path = line.split(" ", 2)
    assert (name, version) == ("libcuda1:arm64", "550.163.01"), line
    assert "_arm64" in path and proc.stderr.startswith("driverfetch: fetching "
                                                       "libcuda1:arm64=550.163.01 ")


def test_the_readme_names_the_cache_as_xdg_places_it(monkeypatch, tmp_path):
    """The README's driver cache is `${XDG_CACHE_HOME:-~/.cache}/shimgen/drivers`, as
    driverfetch.cache_dir finds it with XDG_CACHE_HOME set or not."""
    import re

    from devtools.driverfetch import cache_dir

    readme = (ROOT / "README.md").read_text()
    (said,) = set(re.findall(r"kept in `([^`]*)/shimgen/drivers`", readme))
    monkeypatch.delenv("SHIMGEN_DRIVER_CACHE", raising=False)
    for xdg in (str(tmp_path / "xdg"), None):
        if xdg is None:
            monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
        else:
            monkeypatch.setenv("XDG_CACHE_HOME", xdg)
        env = {"HOME": str(Path.home()), **({"XDG_CACHE_HOME": xdg} if xdg else {})}
        shell = subprocess.run(["bash", "-c", f'printf %s {said}'], env=env, text=True,
                               capture_output=True, check=True).stdout
        assert Path(shell) / "shimgen" / "drivers" == cache_dir(), (said, shell)
