"""Fetch real libcuda binaries from Debian's non-free archive, for the tests and benchmarks
that need no GPU. `python -m devtools.driverfetch` fetches the test matrix (DRIVERS) and
prints each package, version and path; `python -m devtools.driverfetch PACKAGE=VERSION ...`
fetches the builds named (libnvidia-tesla-470-cuda1=470.256.02).

The machine's own apt mirror is reused (its URI is read from the configured sources); a
private apt state directory adds the non-free component and the suites that carry the
versions we test. Downloaded packages are unpacked into a cache and reused. NVIDIA's
binaries are never stored in the repository.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class DebianDriver:
    """One libcuda build in Debian's non-free archive: which package, which Debian version of
    it, and the suite that carries that version."""

    package: str  # libcuda1, libnvidia-tesla-470-cuda1, ...
    debian_version: str  # 535.261.03-1
    suite: str
    # True: every test that runs on real drivers uses it; False: only the pipeline tests
    # (exports, the cuGetProcAddress grid, gates and their proofs, a build that loads).
    every_test: bool = True
    arch: str = "amd64"  # Debian's name of the architecture: amd64 or arm64
    library: str = "libcuda"  # the real file's name before .so.<version>: libcuda, libnvidia-ml

    @property
    def version(self) -> str:
        """The upstream driver version, e.g. 535.261.03: the name of the libcuda file."""
        return self.debian_version.split("-")[0]

    @property
    def file_name(self) -> str:
        """The real file the package holds: libcuda.so.535.261.03, libnvidia-ml.so.535.261.03."""
        return f"{self.library}.so.{self.version}"

    @property
    def directory(self) -> str:
        """The name of its unpacked copy in the cache (amd64's without a suffix)."""
        tail = "" if self.arch == "amd64" else f"_{self.arch}"
        return f"{self.package}_{self.debian_version}{tail}"

    @property
    def label(self) -> str:
        """How it is named to a user: PACKAGE[:ARCH]=VERSION, the architecture said unless
        amd64 (as the command line takes it)."""
        tail = "" if self.arch == "amd64" else f":{self.arch}"
        return f"{self.package}{tail}={self.version}"

    @property
    def spec(self) -> str:
        """What apt-get download is asked for."""
        return f"{self.package}:{self.arch}={self.debian_version}"


# Every libcuda build Debian ships that shimgen supports: the test matrix. The first three
# are the drivers every test runs on; the pipeline tests run on all of them.
DRIVERS: tuple[DebianDriver, ...] = (
    DebianDriver("libcuda1", "535.261.03-1", "bookworm"),
    DebianDriver("libcuda1", "550.163.01-2", "trixie"),
    DebianDriver("libcuda1", "555.58.02-4", "experimental"),
    DebianDriver("libnvidia-tesla-470-cuda1", "470.256.02-1~deb12u1", "bookworm",
                 every_test=False),
    DebianDriver("libnvidia-tesla-535-cuda1", "535.274.02-1~deb13u1", "trixie",
                 every_test=False),
    DebianDriver("libnvidia-tesla-550-cuda1", "550.54.15-5", "sid", every_test=False),
)
EVERY_TEST: tuple[DebianDriver, ...] = tuple(d for d in DRIVERS if d.every_test)
# A driver older than cuGetProcAddress, which shimgen refuses (CUDA 10.1).
PREDATES_PROC_ADDRESS = DebianDriver("libnvidia-tesla-418-cuda1", "418.226.00-22", "sid",
                                     every_test=False)
# The same drivers built for arm64 (aarch64: Grace Hopper, Grace Blackwell, GB10), that
# shimgen reads and builds for; their tests run the shim under qemu-user.
ARM64_DRIVERS: tuple[DebianDriver, ...] = (
    DebianDriver("libcuda1", "535.261.03-1", "bookworm", arch="arm64"),
    DebianDriver("libcuda1", "550.163.01-2", "trixie", arch="arm64"),
    DebianDriver("libcuda1", "555.58.02-4", "experimental", arch="arm64"),
)
# NVML (libnvidia-ml.so.1) of the same driver releases, from the same source packages: the
# NVML shim's exports, build and forwarding tests.
NVML_DRIVERS: tuple[DebianDriver, ...] = (
    DebianDriver("libnvidia-ml1", "535.261.03-1", "bookworm", library="libnvidia-ml"),
    DebianDriver("libnvidia-ml1", "550.163.01-2", "trixie", library="libnvidia-ml"),
    DebianDriver("libnvidia-ml1", "555.58.02-4", "experimental", library="libnvidia-ml"),
)
DEFAULT_MIRROR = "http://deb.debian.org/debian"


class DriverFetchError(RuntimeError):
    pass


@dataclass(frozen=True)
class FetchedDriver:
    version: str  # upstream version, e.g. 535.261.03
    package: str  # the Debian package it came from
    path: Path  # the real file, libcuda.so.<version> (libnvidia-ml.so.<version>)
    libdir: Path  # directory holding libcuda.so, libcuda.so.1 and the real file
    arch: str = "amd64"  # Debian's name of its architecture

    @property
    def name(self) -> str:
        """PACKAGE[:ARCH], the architecture said unless amd64."""
        return self.package + ("" if self.arch == "amd64" else f":{self.arch}")


def cache_dir() -> Path:
    base = os.environ.get("SHIMGEN_DRIVER_CACHE")
    if base:
        return Path(base)
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "shimgen" / "drivers"


def configured_mirror() -> str:
    """The Debian mirror this machine's apt already uses (deb822 or one-line sources)."""
    candidates = [Path("/etc/apt/sources.list")]
    d = Path("/etc/apt/sources.list.d")
    if d.is_dir():
        candidates += sorted(d.glob("*.sources")) + sorted(d.glob("*.list"))
    for f in candidates:
        try:
            text = f.read_text()
        except OSError:
            continue
        for m in re.finditer(r"(?m)^\s*URIs:\s*(\S+)", text):
            if m.group(1).rstrip("/").endswith("/debian"):
                return m.group(1).rstrip("/")
        for m in re.finditer(r"(?m)^\s*deb\s+(?:\[[^\]]*\]\s+)?(\S+)", text):
            if m.group(1).rstrip("/").endswith("/debian"):
                return m.group(1).rstrip("/")
    return DEFAULT_MIRROR


def _apt_opts(state: Path) -> list[str]:
    return [
        "-o", f"Dir::Etc::SourceList={state / 'sources.list'}",
        "-o", "Dir::Etc::SourceParts=/dev/null",
        "-o", f"Dir::State::Lists={state / 'lists'}",
        "-o", f"Dir::Cache={state / 'cache'}",
        "-o", "APT::Architecture=amd64",
        "-o", "APT::Architectures=amd64,arm64",
        "-o", "Debug::NoDropPrivs=1",
        "-o", "APT::Sandbox::User=root",
    ]


def _run(cmd: list[str], cwd: Path | None = None) -> None:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise DriverFetchError(
            f"{' '.join(cmd[:2])} failed ({proc.returncode}): {proc.stderr.strip()[-500:]}"
        )


def _unpacked(root: Path, build: DebianDriver) -> FetchedDriver | None:
    for real in root.rglob(build.file_name):
        if real.is_file() and not real.is_symlink():
            return FetchedDriver(build.version, build.package, real, real.parent, build.arch)
    return None


def fetch(builds: tuple[DebianDriver, ...] | list[DebianDriver]) -> list[FetchedDriver]:
    """Return each build of `builds`, in that order, downloading the ones not yet cached."""
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    found: dict[DebianDriver, FetchedDriver] = {}
    for b in builds:
        got = _unpacked(cache / b.directory, b)
        if got is not None:
            found[b] = got
    missing = [b for b in builds if b not in found]
    if missing:
        found.update(_download(cache, missing))
    return [found[b] for b in builds]


def fetch_all() -> list[FetchedDriver]:
    """The drivers every test runs on (EVERY_TEST), downloading the ones not yet cached."""
    return fetch(EVERY_TEST)


def fetch_matrix() -> list[FetchedDriver]:
    """Every build of the test matrix (DRIVERS)."""
    return fetch(DRIVERS)


def _download(cache: Path, missing: list[DebianDriver]) -> dict[DebianDriver, FetchedDriver]:
    """The builds fetched and unpacked into the cache: said in one line (on stderr) before
    the seconds it takes, with the step it is at on a terminal (shimgen/progress.py)."""
    from shimgen import progress

    if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
        raise DriverFetchError("apt-get and dpkg-deb are needed to fetch Debian's libcuda")
    progress.announce(f"driverfetch: fetching {', '.join(b.label for b in missing)} from "
                      f"Debian's archive, once (kept in {cache})")
    try:
        return _download_now(cache, missing, progress.step)
    finally:
        progress.clear()


def _download_now(cache: Path, missing: list[DebianDriver],
                  step) -> dict[DebianDriver, FetchedDriver]:
    state = cache / ".apt"
    (state / "lists" / "partial").mkdir(parents=True, exist_ok=True)
    (state / "cache" / "archives" / "partial").mkdir(parents=True, exist_ok=True)
    mirror = configured_mirror()
    suites = sorted({b.suite for b in missing})
    (state / "sources.list").write_text(
        "".join(f"deb [arch=amd64,arm64] {mirror} {s} non-free\n" for s in suites)
    )
    step(f"apt-get update ({mirror})")
    _run(["apt-get", *_apt_opts(state), "update"])
    got: dict[DebianDriver, FetchedDriver] = {}
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        step("apt-get download")
        _run(
            ["apt-get", *_apt_opts(state), "download"]
            + [b.spec for b in missing],
            cwd=Path(tmp),
        )
        for b in missing:
            debs = list(Path(tmp).glob(f"{b.package}_*_{b.arch}.deb"))
            deb = next((d for d in debs if b.version in d.name), None)
            if deb is None:
                raise DriverFetchError(f"apt-get did not download {b.spec}")
            dest = cache / b.directory
            step(f"unpacking {b.label}")
            staging = Path(tmp) / f"x-{b.directory}"
            _run(["dpkg-deb", "-x", str(deb), str(staging)])
            if dest.exists():
                shutil.rmtree(dest)
            staging.rename(dest)
            fetched = _unpacked(dest, b)
            if fetched is None:
                raise DriverFetchError(f"{deb.name} holds no {b.file_name}")
            got[b] = fetched
    return got


KNOWN = DRIVERS + ARM64_DRIVERS + (PREDATES_PROC_ADDRESS,) + NVML_DRIVERS


def _named(specs: list[str]) -> list[DebianDriver]:
    """PACKAGE[:ARCH]=VERSION arguments, each a build this module knows (VERSION: the
    upstream version or the Debian one; ARCH amd64, the default, or arm64)."""
    chosen = []
    for spec in specs:
        pkg, _, ver = spec.partition("=")
        pkg, _, arch = pkg.partition(":")
        match = [b for b in KNOWN if b.package == pkg and b.arch == (arch or "amd64")
                 and ver in (b.version, b.debian_version)]
        if not match:
            raise DriverFetchError(f"{spec}: not a known build; known: " + ", ".join(
                f"{b.package}{'' if b.arch == 'amd64' else ':' + b.arch}={b.version}"
                for b in KNOWN))
        chosen.append(match[0])
    return chosen


def main(argv: list[str] | None = None) -> int:
    """`python -m devtools.driverfetch`: fetch (once) and print the drivers, or one's path."""
    import argparse
    import sys

    ap = argparse.ArgumentParser(
        prog="python -m devtools.driverfetch",
        description="Fetch real libcuda builds from Debian's non-free archive (once: they are "
                    f"kept in {cache_dir()}, or $SHIMGEN_DRIVER_CACHE) for trying shimgen and "
                    "for its tests, on a machine without a GPU. Prints each one's package, "
                    "version and path (an arm64 build's package as PACKAGE:arm64); with "
                    "--path, only the path of one, and only that one fetched. A fetch says "
                    "what it fetches, on stderr, before it starts.",
        epilog="example: shimgen run --driver \"$(python -m devtools.driverfetch --path 550)\" "
               "-- python train.py")
    ap.add_argument("builds", nargs="*", metavar="PACKAGE=VERSION",
                    help="the builds to fetch (default: the drivers every test uses; known: "
                         + ", ".join(f"{b.package}={b.version}"
                                     for b in DRIVERS + (PREDATES_PROC_ADDRESS,))
                         + "; arm64: " + ", ".join(f"{b.package}:arm64={b.version}"
                                                   for b in ARM64_DRIVERS) + "; NVML: "
                         + ", ".join(f"{b.package}={b.version}" for b in NVML_DRIVERS) + ")")
    ap.add_argument("--path", metavar="VERSION",
                    help="print only the path of the driver whose version starts with VERSION "
                         f"(one of: {', '.join(b.version for b in EVERY_TEST)})")
    args = ap.parse_args(argv)
    try:
        wanted = _named(args.builds) if args.builds else list(EVERY_TEST)
    except DriverFetchError as e:
        ap.error(str(e))
    versions = [b.version for b in wanted]
    if args.path is not None:
        chosen = [v for v in versions
                  if v == args.path or v.startswith(args.path.rstrip(".") + ".")]
        if len(chosen) != 1:
            ap.error(f"--path {args.path}: not one of {', '.join(versions)}")
        wanted = [b for b in wanted if b.version == chosen[0]][:1]  # only the one named
    try:
        drivers = fetch(wanted)
    except DriverFetchError as e:
        print(f"driverfetch: error: {e}", file=sys.stderr)
        return 1
    for d in drivers:
        print(d.path if args.path is not None else f"{d.name} {d.version} {d.path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
