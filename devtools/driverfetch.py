"""Fetch real libcuda binaries from Debian's non-free archive, for the tests and benchmarks
that need no GPU (`python -m devtools.driverfetch` fetches them and prints their paths).

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

# (package, Debian version, suite): each is a different libcuda build.
DRIVERS: tuple[tuple[str, str, str], ...] = (
    ("libcuda1", "535.261.03-1", "bookworm"),
    ("libcuda1", "550.163.01-2", "trixie"),
    ("libcuda1", "555.58.02-4", "experimental"),
)
SUITES = ("bookworm", "bookworm-backports", "trixie", "experimental")
DEFAULT_MIRROR = "http://deb.debian.org/debian"


class DriverFetchError(RuntimeError):
    pass


@dataclass(frozen=True)
class FetchedDriver:
    version: str  # upstream version, e.g. 535.261.03
    path: Path  # the real file, libcuda.so.<version>
    libdir: Path  # directory holding libcuda.so, libcuda.so.1 and the real file


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
        "-o", "Debug::NoDropPrivs=1",
        "-o", "APT::Sandbox::User=root",
    ]


def _run(cmd: list[str], cwd: Path | None = None) -> None:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise DriverFetchError(
            f"{' '.join(cmd[:2])} failed ({proc.returncode}): {proc.stderr.strip()[-500:]}"
        )


def _unpacked(root: Path, upstream: str) -> FetchedDriver | None:
    for real in root.rglob(f"libcuda.so.{upstream}"):
        if real.is_file() and not real.is_symlink():
            return FetchedDriver(upstream, real, real.parent)
    return None


def fetch_all() -> list[FetchedDriver]:
    """Return every driver in DRIVERS, downloading the ones not yet cached."""
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    result: list[FetchedDriver] = []
    missing: list[tuple[str, str, str]] = []
    for pkg, debver, suite in DRIVERS:
        upstream = debver.split("-")[0]
        got = _unpacked(cache / f"{pkg}_{debver}", upstream)
        if got is None:
            missing.append((pkg, debver, suite))
        else:
            result.append(got)
    if missing:
        if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
            raise DriverFetchError("apt-get and dpkg-deb are needed to fetch Debian's libcuda")
        state = cache / ".apt"
        (state / "lists" / "partial").mkdir(parents=True, exist_ok=True)
        (state / "cache" / "archives" / "partial").mkdir(parents=True, exist_ok=True)
        mirror = configured_mirror()
        (state / "sources.list").write_text(
            "".join(f"deb [arch=amd64] {mirror} {s} non-free\n" for s in SUITES)
        )
        _run(["apt-get", *_apt_opts(state), "update"])
        with tempfile.TemporaryDirectory(dir=cache) as tmp:
            _run(
                ["apt-get", *_apt_opts(state), "download"]
                + [f"{pkg}={debver}" for pkg, debver, _ in missing],
                cwd=Path(tmp),
            )
            for pkg, debver, _suite in missing:
                debs = list(Path(tmp).glob(f"{pkg}_*.deb"))
                deb = next((d for d in debs if debver.split("-")[0] in d.name), None)
                if deb is None:
                    raise DriverFetchError(f"apt-get did not download {pkg}={debver}")
                dest = cache / f"{pkg}_{debver}"
                staging = Path(tmp) / f"x-{pkg}-{debver}"
                _run(["dpkg-deb", "-x", str(deb), str(staging)])
                if dest.exists():
                    shutil.rmtree(dest)
                staging.rename(dest)
                got = _unpacked(dest, debver.split("-")[0])
                if got is None:
                    raise DriverFetchError(f"{deb.name} holds no libcuda.so.{debver}")
                result.append(got)
    order = {d[1].split("-")[0]: i for i, d in enumerate(DRIVERS)}
    return sorted(result, key=lambda d: order[d.version])


def main(argv: list[str] | None = None) -> int:
    """`python -m devtools.driverfetch`: fetch (once) and print the drivers, or one's path."""
    import argparse
    import sys

    ap = argparse.ArgumentParser(
        prog="python -m devtools.driverfetch",
        description="Fetch real libcuda builds from Debian's non-free archive (once: they are "
                    f"kept in {cache_dir()}, or $SHIMGEN_DRIVER_CACHE) for trying shimgen and "
                    "for its tests, on a machine without a GPU. Prints each one's version and "
                    "path; with --path, only the path of one.",
        epilog="example: shimgen run --driver \"$(python -m devtools.driverfetch --path 550)\" "
               "-- python train.py")
    ap.add_argument("--path", metavar="VERSION",
                    help="print only the path of the driver whose version starts with VERSION "
                         f"(one of: {', '.join(v.split('-')[0] for _, v, _ in DRIVERS)})")
    args = ap.parse_args(argv)
    versions = [v.split("-")[0] for _, v, _ in DRIVERS]
    if args.path is not None:
        chosen = [v for v in versions
                  if v == args.path or v.startswith(args.path.rstrip(".") + ".")]
        if len(chosen) != 1:
            ap.error(f"--path {args.path}: not one of {', '.join(versions)}")
    try:
        drivers = fetch_all()
    except DriverFetchError as e:
        print(f"driverfetch: error: {e}", file=sys.stderr)
        return 1
    for d in drivers:
        if args.path is None:
            print(d.version, d.path)
        elif d.version == chosen[0]:
            print(d.path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
