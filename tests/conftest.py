"""Fixtures shared by the tests: the real Debian libcuda builds (devtools/driverfetch.py),
the C probe programs of the top-level meson.build, and one shim built per driver.

Two sets of drivers: `drivers`, `shims` and the parameter `shim` are the three builds every
test runs on (driverfetch.EVERY_TEST); `matrix_drivers` and the parameter `matrix_shim` are
every build Debian ships that shimgen supports (driverfetch.DRIVERS), for the pipeline
tests. A shim is built the first time a test of a worker asks for its driver."""

from __future__ import annotations

import fcntl
import os
import shlex
import shutil
import subprocess
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from devtools.driverfetch import (
    DRIVERS,
    EVERY_TEST,
    NVML_DRIVERS,
    PREDATES_PROC_ADDRESS,
    DriverFetchError,
    FetchedDriver,
    fetch,
)
from shimgen.probe.child import child_env
from shimgen.runenv import SHIM_LIBRARY
from tests import shimcache
from tests.skippolicy import pytest_sessionfinish, pytest_terminal_summary  # noqa: F401 (CI's skips)
from tests.tiers import SLOW, SLOW_MODULES

ROOT = Path(__file__).resolve().parent.parent
# Every `python -m shimgen` a test starts, from whatever working directory, imports this
# tree's shimgen: otherwise one installed elsewhere (another checkout installed for editing)
# would be what runs, with its own sources' stamp in its cache keys.
if os.environ.get("PYTHONPATH", "").split(os.pathsep)[0] != str(ROOT):
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])


@contextmanager
def _held(lock: Path):
    """An exclusive lock of `lock` (made if missing): pytest workers that run at once
    (pytest-xdist) fetch the drivers and build the probes one at a time."""
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _fetched(builds) -> list[FetchedDriver]:
    """Real Debian libcuda builds. A failure to fetch them fails the run: no silent skip."""
    try:
        with _held(ROOT / "build" / "drivers.lock"):
            return fetch(builds)
    except DriverFetchError as e:
        pytest.fail(f"cannot fetch Debian's libcuda packages: {e}", pytrace=False)


@pytest.fixture(scope="session")
def drivers() -> list[FetchedDriver]:
    """The three builds every test runs on."""
    return _fetched(EVERY_TEST)


@pytest.fixture(scope="session")
def matrix_drivers() -> list[FetchedDriver]:
    """Every build of the test matrix: the pipeline tests run on each."""
    return _fetched(DRIVERS)


@pytest.fixture(scope="session")
def nvml_libraries() -> list[FetchedDriver]:
    """Debian's real libnvidia-ml (libnvidia-ml1) of the three drivers every test runs on:
    the NVML shim's exports and build."""
    return _fetched(NVML_DRIVERS)


@pytest.fixture(scope="session")
def refused_driver() -> FetchedDriver:
    """418.226.00 (CUDA 10.1): a driver older than cuGetProcAddress, which shimgen refuses."""
    return _fetched((PREDATES_PROC_ADDRESS,))[0]


@pytest.fixture(scope="session")
def probes() -> Path:
    """The C probe programs of the top-level meson.build, built once per run."""
    bdir = ROOT / "build" / "tests"
    meson = [sys.executable, "-m", "mesonbuild.mesonmain"]
    with _held(ROOT / "build" / "tests.lock"):
        if not (bdir / "build.ninja").exists():
            shutil.rmtree(bdir, ignore_errors=True)
            subprocess.run(meson + ["setup", str(bdir), str(ROOT)], check=True,
                           capture_output=True)
        proc = subprocess.run(meson + ["compile", "-C", str(bdir)], capture_output=True,
                              text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return bdir


@dataclass(frozen=True)
class BuiltShim:
    driver: FetchedDriver
    library: Path
    out_dir: Path
    build_output: str
    cuda_version: int  # what the real driver's cuDriverGetVersion reports

    def env(self, **extra: str) -> dict[str, str]:
        """Environment of a program run under the shim, the driver's directory on the
        loader path as on an installed system."""
        return child_env(self.library, libdir=self.driver.libdir, **extra)

    def env_without_shim(self) -> dict[str, str]:
        return child_env(libdir=self.driver.libdir)


def driver_cuda_version(path: Path) -> int:
    code = (
        "import ctypes,sys; l=ctypes.CDLL(sys.argv[1]); v=ctypes.c_int(0); "
        "assert l.cuDriverGetVersion(ctypes.byref(v))==0; print(v.value)"
    )
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                         text=True, check=True)
    return int(out.stdout)


class ShimBuilder:
    """The shims of one test worker, one per driver, each built with the real command line
    the first time a test asks for it, and kept for later runs of the same sources
    (tests/shimcache.py)."""

    def __init__(self) -> None:
        self.stamp = shimcache.sources_stamp()
        self.built: dict[str, BuiltShim] = {}

    def __call__(self, d: FetchedDriver) -> BuiltShim:
        if d.version not in self.built:
            def build(out: Path) -> str:
                proc = subprocess.run(
                    [sys.executable, "-m", "shimgen", "build", "--driver",
                     str(d.libdir / "libcuda.so.1"), "--out", str(out)],
                    capture_output=True, text=True, cwd=ROOT,
                )
                assert proc.returncode == 0, proc.stderr
                return proc.stdout

            entry, stdout = shimcache.cached(
                shimcache.key(self.stamp, "driver", str(d.path), d.version), build)
            lib = next(entry.glob(f"cudashim-{d.version}-*/{SHIM_LIBRARY}"))
            self.built[d.version] = BuiltShim(d, lib, lib.parent, stdout,
                                              driver_cuda_version(d.path))
        return self.built[d.version]


@pytest.fixture(scope="session")
def shim_builder() -> ShimBuilder:
    return ShimBuilder()


@pytest.fixture(scope="session")
def shims(drivers, shim_builder) -> list[BuiltShim]:
    """One shim per driver every test runs on."""
    return [shim_builder(d) for d in drivers]


def pytest_generate_tests(metafunc):
    if "shim" in metafunc.fixturenames:
        metafunc.parametrize("shim", [d.version for d in EVERY_TEST], indirect=True)
    if "matrix_shim" in metafunc.fixturenames:
        metafunc.parametrize("matrix_shim", [d.version for d in DRIVERS], indirect=True)


@pytest.fixture
def shim(request, shims) -> BuiltShim:
    return next(s for s in shims if s.driver.version == request.param)


@pytest.fixture
def matrix_shim(request, matrix_drivers, shim_builder) -> BuiltShim:
    """The shim of one build of the test matrix (the pipeline tests)."""
    return shim_builder(next(d for d in matrix_drivers if d.version == request.param))


# ---- shims the run-time fault tests need besides `shims` ----

@pytest.fixture(scope="module")
def fake_shim(probes, tmp_path_factory) -> Path:
    """A shim for the fake driver (tests/c/fake_libcuda.c), built through the Python API as in
    tests/runtime/test_timing.py: `shimgen build` refuses the fake, a stub by design."""
    return shimcache.fake_driver_shim(probes / "libfake_libcuda_for_tests.so")


@pytest.fixture(scope="session")
def nvml_fake_shim(probes, tmp_path_factory) -> Path:
    """The NVML shim built from the FAKE libnvidia-ml (tests/c/fake_nvml_libnvidia_ml.c),
    its stub rule skipped: once per test worker."""
    from shimgen.shim.nvml import make_nvml_shim

    return make_nvml_shim(probes / "libfake_nvml_libnvidia_ml.so",
                          tmp_path_factory.mktemp("nvml"), require_real=False).library


@pytest.fixture(scope="module")
def second_shim(drivers, tmp_path_factory) -> Path:
    """Another shim for the first driver, in another place (as a second tool would ship it)."""
    out = tmp_path_factory.mktemp("second")
    proc = subprocess.run([sys.executable, "-m", "shimgen", "build", "--driver",
                           str(drivers[0].libdir / "libcuda.so.1"), "--out", str(out)],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    return next(out.glob(f"cudashim-*/{SHIM_LIBRARY}"))


@pytest.fixture(scope="module")
def interposer(tmp_path_factory) -> Path:
    """tests/c/faults_interposer.c as a shared library, built with the C compiler."""
    out = tmp_path_factory.mktemp("interposer") / "libfaults_interposer.so"
    cc = shlex.split(os.environ.get("CC", "cc"))
    proc = subprocess.run([*cc, "-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror", "-o",
                           str(out), str(ROOT / "tests/c/faults_interposer.c"), "-ldl"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.fixture(scope="session")
def other() -> list[str]:
    """The command prefix that runs as the second user (faultkit.OTHER)."""
    from tests.faultkit import OTHER

    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv to act as a second user")
    return ["setpriv", f"--reuid={OTHER}", f"--regid={OTHER}", "--clear-groups"]


def pytest_collection_modifyitems(config, items):
    """The second tier (tests/tiers.py): each test it names, and every test of a module it
    names, is marked `slow`. A name there that no test has is an error when the whole suite
    is collected."""
    seen = set()
    for item in items:
        module = item.nodeid.split("::")[0]
        if item.nodeid in SLOW or module in SLOW_MODULES:
            item.add_marker(pytest.mark.slow)
            seen.update((item.nodeid, module))
    if not config.args or config.args == ["tests"]:
        missing = sorted((SLOW | SLOW_MODULES) - seen)
        if missing and not config.getoption("keyword"):
            raise pytest.UsageError(f"tests/tiers.py names tests that do not exist: {missing}")
