"""What every command does with what it is given at its start: a bad `--driver` is refused in
the same words by every command (one opening and check of the driver file, elfnotes.
open_library), and a FIFO never makes one wait; with stderr closed nothing of shimgen's
reaches stdout, which is the command's; and SIGINT at any moment of shimgen's own start is
never a traceback through shimgen's code. docs/reliability.md lists each case with its test.
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import shimgen.__main__ as start
import shimgen.cli
from shimgen.driver.notes import check_driver, read_build_id

ROOT = Path(__file__).resolve().parents[2]
SHIMGEN = [sys.executable, "-m", "shimgen"]
PREFIX = "shimgen: error: "


def _env(tmp: Path) -> dict[str, str]:
    """The environment of a command under test: its own shim cache, nothing inherited that
    would change what `run` does."""
    env = {k: v for k, v in os.environ.items()
           if k != "LD_PRELOAD" and not k.startswith("SHIMGEN_")}
    env["XDG_CACHE_HOME"] = str(tmp / "xdg")
    return env


# --------------------------------------------------------------------------------------------
# One check of the driver, the same words in every command

def _driver_argv(command: str, driver: str, tmp: Path) -> list[str]:
    """Each command that reads a driver, with `driver` as its --driver and its outputs in
    `tmp`."""
    return {
        "build": ["build", "--driver", driver, "--out", str(tmp / "build")],
        "gates": ["gates", "--driver", driver],
        "patch": ["patch", "--driver", driver, "--gates", "gdr", "-o", str(tmp / "patched")],
        "exports": ["exports", "--driver", driver],
        "run": ["run", "--driver", driver, "-o", str(tmp / "run"), "--", "true"],
    }[command]


COMMANDS = ("build", "gates", "patch", "exports", "run")


def _bad_driver(case: str, tmp: Path) -> tuple[str, str]:
    """(the --driver argument, the words after `driver <absolute path>: `)."""
    if case == "directory":
        return "/tmp", "is a directory, not a library"
    if case == "not-elf":
        return "/etc/passwd", "not an ELF file"
    if case == "device":
        return "/dev/null", "not a regular file (a character device)"
    if case == "fifo":
        os.mkfifo(tmp / "libcuda.so.1")
        return str(tmp / "libcuda.so.1"), "not a regular file (a FIFO)"
    if case == "missing":
        return str(tmp / "libcuda.so.1"), "no such file"
    if case == "symlink-to-directory":  # the words name the path given, not where it leads
        (tmp / "libcuda.so.1").symlink_to("/tmp")
        return str(tmp / "libcuda.so.1"), "is a directory, not a library"
    if case == "dangling-symlink":
        (tmp / "libcuda.so.1").symlink_to(tmp / "libcuda.so.580.1")
        return str(tmp / "libcuda.so.1"), "dangling symlink"
    if case == "relative-not-elf":
        (tmp / "notes.txt").write_text("not a library\n")
        return os.path.relpath(tmp / "notes.txt", ROOT), "not an ELF file"
    raise AssertionError(case)


@pytest.mark.parametrize("case", ["directory", "not-elf", "device", "fifo", "missing",
                                  "symlink-to-directory", "dangling-symlink",
                                  "relative-not-elf"])
def test_a_bad_driver_is_the_same_line_in_every_command(tmp_path, case):
    """build, gates, patch, exports and run: one line, exit 1, word for word the same, and
    nothing made. Before, `run --driver /tmp` said `Is a directory: 3`, and `run` worded
    /etc/passwd, /dev/null and a FIFO its own way (and opened /dev/null). A FIFO must never
    make a command wait: each has 15 s."""
    driver, words = _bad_driver(case, tmp_path)
    expected = f"{PREFIX}driver {os.path.abspath(os.path.join(ROOT, driver))}: {words}"

    def one(command: str) -> tuple[str, int, str, str]:
        try:
            proc = subprocess.run(SHIMGEN + _driver_argv(command, driver, tmp_path), cwd=ROOT,
                                  env=_env(tmp_path), capture_output=True, text=True,
                                  timeout=15)
        except subprocess.TimeoutExpired:
            return command, -1, "", f"still running after 15 s (it waits on {driver})"
        return command, proc.returncode, proc.stdout, proc.stderr

    with ThreadPoolExecutor(len(COMMANDS)) as pool:
        results = list(pool.map(one, COMMANDS))
    for command, code, out, err in results:
        assert (code, out, err) == (1, "", expected + "\n"), (command, code, out, err)
    for made in ("build", "patched", "run"):
        assert not (tmp_path / made).exists() or not any((tmp_path / made).iterdir()), made


def _sparse_copy(driver: Path, tmp: Path, size: int) -> Path:
    """A copy of a real driver (a valid ELF) made `size` bytes long by a hole at its end: a
    few MiB on disk, whatever its size."""
    copy = tmp / f"libcuda.so.{size}"
    copy.write_bytes(driver.read_bytes())
    os.truncate(copy, size)
    return copy


def test_a_driver_larger_than_any_libcuda_is_one_line_in_every_command(drivers, tmp_path):
    """A valid ELF with a hole to 64 GiB (a few MiB on disk): build, gates, patch, exports,
    run and diff refuse it in one line, before anything reads it. Before, each read it whole
    and ended with MemoryError (exit 70)."""
    big = _sparse_copy(drivers[0].path, tmp_path, 64 << 30)
    words = f"driver {big}: {64 << 30} bytes, larger than any libcuda could be"

    def one(argv: list[str]) -> tuple[list[str], int, str, str]:
        proc = subprocess.run(SHIMGEN + argv, cwd=ROOT, env=_env(tmp_path),
                              capture_output=True, text=True, timeout=60)
        return argv, proc.returncode, proc.stdout, proc.stderr

    argvs = [_driver_argv(c, str(big), tmp_path) for c in COMMANDS]
    argvs.append(["diff", str(drivers[0].path), str(big)])
    with ThreadPoolExecutor(3) as pool:
        results = list(pool.map(one, argvs))
    for argv, code, out, err in results:
        assert code == (2 if argv[0] == "diff" else 1) and out == "", (argv, code, out, err)
        assert err.startswith(PREFIX + words) and err.count("\n") == 1, (argv, err)


def test_a_driver_is_read_by_what_is_looked_at_not_by_its_size(drivers, tmp_path):
    """A driver with a hole to 900 MiB after its data, under the size limit: `exports` gives
    what it gives for the driver itself, and its memory is that of the data read (its peak
    resident set under 200 MiB, from its own /proc/self/status: the file mapped, not read
    whole; before, 927 MiB)."""
    big = _sparse_copy(drivers[0].path, tmp_path, 900 << 20)
    # VmHWM is the peak of this image's memory (a peak taken by wait4 would count the test's
    # own process, whose memory a child of vfork shares until its exec)
    measured = ("import sys\nfrom shimgen.cli import main\ntry:\n    rc = main(sys.argv[1:])\n"
                "finally:\n    sys.stdout.flush()\n"
                "    hwm = [x for x in open('/proc/self/status') if x.startswith('VmHWM:')]\n"
                "    print(hwm[0].split()[1], file=sys.stderr)\nsys.exit(rc)\n")

    def exports(driver: Path) -> tuple[str, int]:
        proc = subprocess.run([sys.executable, "-c", measured, "exports", "--driver",
                               str(driver)], cwd=ROOT, env=_env(tmp_path), capture_output=True,
                              text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout, int(proc.stderr.split()[-1]) << 10

    plain, _ = exports(drivers[0].path)
    out, peak = exports(big)
    assert out == plain
    assert peak < 200 << 20, f"{peak >> 20} MiB"


def test_a_driver_given_by_its_symlink_is_read_through_it(drivers, tmp_path):
    """libcuda.so.1 is a symlink on every system: followed by the check that every command
    makes (run's cached path included: its build-id is read from the file it leads to), and
    named as given."""
    link = drivers[0].libdir / "libcuda.so.1"
    assert link.is_symlink()
    real = link.resolve()
    assert check_driver(link) == real
    assert read_build_id(check_driver(link)) == read_build_id(real) != ""
    by_link = subprocess.run(SHIMGEN + ["exports", "--driver", str(link)], cwd=ROOT,
                             capture_output=True, text=True, timeout=120)
    by_file = subprocess.run(SHIMGEN + ["exports", "--driver", str(real)], cwd=ROOT,
                             capture_output=True, text=True, timeout=120)
    assert by_link.returncode == 0 and by_link.stderr == "", by_link.stderr
    assert by_link.stdout == by_file.stdout and "cuInit\n" in by_link.stdout


# --------------------------------------------------------------------------------------------
# Standard error closed: nothing of shimgen's on stdout

def _closed(fd: int, argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    """`argv` with descriptor `fd` (1 or 2) closed, as a shell's `N>&-` gives it."""
    return subprocess.run(["sh", "-c", f'exec "$@" {fd}>&-', "sh", *argv], cwd=ROOT, env=env,
                          stdout=None if fd == 1 else subprocess.PIPE,
                          stderr=None if fd == 2 else subprocess.PIPE, text=True,
                          timeout=300)


@pytest.fixture(scope="module")
def cached(drivers, tmp_path_factory) -> tuple[Path, Path]:
    """(the driver, a directory whose shim cache has its shim): `run` with its cached shim."""
    home = tmp_path_factory.mktemp("cached")
    driver = drivers[0].libdir / "libcuda.so.1"
    proc = subprocess.run(SHIMGEN + ["run", "--driver", str(driver), "-o", str(home / "warm"),
                                     "--", "true"], cwd=ROOT, env=_env(home),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return driver, home


# the command tells whether its own stderr, or stdout, is open
FD_STATE = "[ -e /dev/fd/{fd} ] && echo fd{fd}-open{to} || echo fd{fd}-closed{to}"


def test_with_stderr_closed_run_leaves_stdout_to_the_command(cached, tmp_path):
    """`shimgen run -- COMMAND 2>&-`: stdout holds the command's output and nothing else (the
    banner and the report went nowhere, as stderr did; before, they were printed on stdout),
    the command gets stderr closed, as it was given, and the run is recorded as usual."""
    driver, home = cached
    script = "echo out; " + FD_STATE.format(fd=2, to="")
    proc = _closed(2, SHIMGEN + ["run", "--driver", str(driver), "-o", str(tmp_path / "r"),
                                 "--", "sh", "-c", script], _env(home))
    assert (proc.returncode, proc.stdout) == (0, "out\nfd2-closed\n")
    assert (tmp_path / "r" / "run.json").is_file()


@pytest.mark.parametrize("argv, code", [
    (["run", "--driver", "/tmp", "--", "echo", "hi"], 1),
    (["exports", "--driver", "/tmp"], 1),
    (["build", "--driver", "/etc/passwd"], 1),
    (["report", "/nonexistent/run"], 1),
    (["frobnicate"], 2),
], ids=["run", "exports", "build", "report", "usage"])
def test_with_stderr_closed_an_error_line_never_reaches_stdout(tmp_path, argv, code):
    """The error line of each command goes where stderr went (nowhere), never to stdout,
    and the exit status is the error's."""
    proc = _closed(2, SHIMGEN + argv, _env(tmp_path))
    assert (proc.returncode, proc.stdout) == (code, "")


def test_with_stdout_closed_run_reports_and_the_command_gets_it_closed(cached, tmp_path):
    """`shimgen run -- COMMAND >&-`: the banner and the report on stderr as always, the
    command gets stdout closed as it was given, and the exit status is the command's
    (before: `internal error` and exit 70, from flushing a stdout Python had not made)."""
    driver, home = cached
    script = FD_STATE.format(fd=1, to=" >&2") + "; exit 3"
    proc = _closed(1, SHIMGEN + ["run", "--driver", str(driver), "-o", str(tmp_path / "r"),
                                 "--", "sh", "-c", script], _env(home))
    lines = proc.stderr.splitlines()
    assert proc.returncode == 3, proc.stderr
    assert "fd1-closed" in lines, lines  # the banner is said once the command runs: either first
    assert any(line.startswith("shimgen: run: shim ") for line in lines), lines
    assert any(line.startswith("shimgen report: ") for line in lines), lines


# --------------------------------------------------------------------------------------------
# SIGINT at any moment of shimgen's own start

# The interpreter is up: say so on stdout, then start shimgen as the `shimgen` script does
# (script) or as `python -m shimgen` does (module). An interrupt that lands in these lines
# themselves is the starter's, not shimgen's.
STARTERS = {
    "script": "import os, sys; os.write(1, b'R'); from shimgen.__main__ import entry; "
              "sys.exit(entry())",
    "module": "import os, runpy; os.write(1, b'R'); "
              "runpy.run_module('shimgen', run_name='__main__', alter_sys=True)",
}
INTERRUPTED = (f"{PREFIX}interrupted by SIGINT; nothing was installed, any earlier build is "
               "as it was")
INTERRUPTED_RUN = INTERRUPTED + "; the command did not run"  # `run` before its own code
INTERRUPTED_AT_THE_END = (f"{PREFIX}interrupted by SIGINT as shimgen ended; what it had "
                          "finished stands (a build installed, a report printed)")
FRAME = re.compile(r'^  File "([^"]+)", line (\d+), in (\S+)', re.M)


def _shimgens_frames(text: str) -> list[tuple[str, int, str]]:
    """The frames in shimgen's own code of the last traceback in `text` (the way of the
    exception that ended the process; one it was raised in the handling of, such as
    argparse's SystemExit after --help, is printed before it), less one that is Python's:
    an innermost frame stopped at its code's first instruction, where Python looks for a
    pending signal before any statement runs (a module's, at line 0, or entry()'s, called by
    the `shimgen` script, at its `def` line)."""
    own = ROOT / "shimgen"
    last = text.rpartition("Traceback (most recent call last):")[2]
    every = [(f, int(n), fn) for f, n, fn in FRAME.findall(last)]
    frames = [frame for frame in every if Path(frame[0]).resolve().is_relative_to(own)]
    firsts = {("<module>", 0), ("entry", start.entry.__code__.co_firstlineno)}
    if frames == every[-1:] and (frames[0][2], frames[0][1]) in firsts:
        return []
    return frames


def _interrupt_once(i: int, tmp: Path) -> tuple[float, str, int, str, str]:
    rng = random.Random(f"{os.getpid()}-{i}")
    starter = ("script", "module")[i % 2]
    argv = (["exports", "--help"], ["run", "--driver", str(tmp / "missing.so"), "--", "true"],
            ["report", "--help"])[i // 2 % 3]
    # -S: no site, so shimgen's own start imports what site would have (enum, re, ...): its
    # start is longer, every window in it wider, and the interpreter's own start shorter.
    proc = subprocess.Popen([sys.executable, "-S", "-c", STARTERS[starter], *argv], cwd=ROOT,
                            env=_env(tmp), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    delay = rng.uniform(0, 0.08)
    try:
        assert os.read(proc.stdout.fileno(), 1) == b"R"  # not the rest with it
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
    finally:
        out, err = proc.communicate(timeout=60)
    return delay, f"{starter} {' '.join(argv)}", proc.returncode, out.decode(), err.decode()


def test_sigint_at_any_moment_of_shimgens_start_is_never_its_traceback(tmp_path):
    """120 starts (the `shimgen` script's way and `python -m shimgen`'s; `exports --help`,
    `run` with a missing driver, `report --help`), each sent SIGINT once, at a random moment
    0 to 80 ms after the interpreter is up: from shimgen's first module to its exit. No
    traceback goes through shimgen's code: every interrupt from shimgen's first statement on
    is one line and exit status 130, or comes after the work (the usual output, its status).
    A traceback of the starter's own lines, of Python's import system before shimgen's first
    statement, or of a first instruction (_shimgens_frames) is Python's, not shimgen's.
    Before, an interrupt in the import at the top of shimgen/__main__.py, outside its guard,
    was a traceback."""
    with ThreadPoolExecutor(6) as pool:  # mostly waiting: 6 at a time on 2 cores
        results = list(pool.map(lambda i: _interrupt_once(i, tmp_path), range(120)))
    guarded = 0
    for delay, what, code, out, err in results:
        where = (round(delay * 1000, 1), what, code, err)
        if "Traceback" in err:
            assert _shimgens_frames(err) == [], where
            continue
        lines = err.splitlines()
        if code == 130:
            guarded += 1
            said = INTERRUPTED_RUN if " run " in what else INTERRUPTED
            assert lines in ([said], [INTERRUPTED_AT_THE_END]), where
            continue
        # The work was done: its status, or killed by the signal itself once Python's exit
        # had set SIGINT back to its default action.
        if what.endswith("--help"):
            assert code in (0, -signal.SIGINT) and err == "", where
            assert code != 0 or out.startswith("usage: shimgen "), where
        else:
            assert code in (1, -signal.SIGINT), where
            assert lines == [f"{PREFIX}driver {tmp_path}/missing.so: no such file"], where
    assert guarded >= 40, f"only {guarded} of 120 interrupts landed in shimgen's start"


class _FailingImport:
    """A finder that makes `import shimgen.cli` fail with `error`."""

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def find_spec(self, name, path=None, target=None):
        if name == "shimgen.cli":
            raise self.error
        return None


def _wrapped_interrupt() -> RuntimeError:
    try:
        raise KeyboardInterrupt
    except KeyboardInterrupt as e:
        try:
            raise RuntimeError("Error calling __set_name__ on 'cached_property' instance "
                               "'hostmask' in 'IPv4Interface'") from e
        except RuntimeError as wrapped:
            return wrapped


@pytest.mark.parametrize("error", ["wrapped-interrupt", "other-error"])
def test_an_interrupt_that_python_wraps_in_an_import_is_one_line(monkeypatch, capsys, error):
    """Python turns an interrupt that lands while a class is made into `RuntimeError: Error
    calling __set_name__` (about once in 200 of the starts above, in pathlib's import of
    ipaddress): the start's guard knows it by its cause, one line and 130. An error that no
    interrupt caused is not taken for one."""
    failure = _wrapped_interrupt() if error == "wrapped-interrupt" else RuntimeError("a bug")
    monkeypatch.delitem(sys.modules, "shimgen.cli")
    monkeypatch.setattr(sys, "meta_path", [_FailingImport(failure), *sys.meta_path])
    monkeypatch.setattr(sys, "unraisablehook", sys.unraisablehook)
    if error == "other-error":
        with pytest.raises(RuntimeError, match="a bug"):
            start.entry()
        return
    try:
        status = start.entry()
    except BaseException as e:  # an interrupt is not let through to pytest
        pytest.fail(f"entry() let {type(e).__name__} through")
    assert status == 130
    assert capsys.readouterr().err == INTERRUPTED + "\n"


def test_an_interrupt_that_python_would_ignore_in_the_start_is_not_lost(tmp_path):
    """An interrupt raised where Python ignores exceptions (the import system's weakref
    callbacks as a module's import ends; here a __del__) while shimgen starts, before the
    command line's redelivery is in place, is raised inside the start's guard: one line and
    130. Before, Python printed `Exception ignored ... KeyboardInterrupt` and the command
    went on as if no Ctrl-C had come."""
    starter = ("import sys, shimgen.__main__ as start\n"
               "class Lost:\n"
               "    def __del__(self):\n"
               "        raise KeyboardInterrupt\n"
               "Lost()\n"
               "sys.exit(start.entry())\n")
    proc = subprocess.run([sys.executable, "-c", starter, "exports", "--help"], cwd=ROOT,
                          env=_env(tmp_path), capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stdout, proc.stderr) == (130, "", INTERRUPTED + "\n")


def test_an_interrupt_after_the_command_lines_own_guard_is_one_line(monkeypatch, capsys):
    """cli.main restores the signal handlers it had when it ends: SIGINT after that (as it
    returns, or while argparse's SystemExit after --help leaves it) is Python's KeyboardInterrupt
    again, outside main's guard. The start's guard holds main() too: one line, 130, saying
    that what was finished stands. Before, main() was called outside the guard: a traceback."""
    def interrupted_as_it_ends(argv=None) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(shimgen.cli, "main", interrupted_as_it_ends)
    monkeypatch.setattr(sys, "unraisablehook", sys.unraisablehook)
    try:
        status = start.entry()
    except KeyboardInterrupt:  # not let through to pytest, which would stop the run
        pytest.fail("the interrupt went through entry()")
    assert status == 130
    assert capsys.readouterr().err == INTERRUPTED_AT_THE_END + "\n"


def test_an_interrupt_python_ignores_after_the_guard_ended_is_dropped(tmp_path):
    """An interrupt raised where Python ignores exceptions (a __del__, as Python frees the
    last objects) after the start's guard has ended is dropped: the work is done, nothing of
    shimgen's is left to raise it in. Before, it set the one-millisecond timer that redelivers
    such an interrupt; its SIGALRM then came outside every guard: a traceback, or, once Python
    had put the default actions back, death by signal 14 after `--help` had printed."""
    starter = ("import sys, time, shimgen.__main__ as start\n"
               "class Lost:\n"
               "    def __del__(self):\n"
               "        raise KeyboardInterrupt\n"
               "try:\n"
               "    status = start.entry()\n"
               "except SystemExit as e:  # argparse's, after --help\n"
               "    status = e.code\n"
               "Lost()\n"
               "time.sleep(0.1)\n"
               "sys.exit(status)\n")
    proc = subprocess.run([sys.executable, "-c", starter, "exports", "--help"], cwd=ROOT,
                          env=_env(tmp_path), capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stderr) == (0, ""), proc.stderr
    assert proc.stdout.startswith("usage: shimgen exports"), proc.stdout[:200]
