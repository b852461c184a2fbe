"""The command line at its start: an interrupt while shimgen imports its command line and
starts a build ends in one line and exit status 130, never a traceback; and an output path
that meson cannot take is refused in one line.

What is not shimgen's: a SIGINT that arrives while the Python interpreter itself is still
starting (its `site` import, the console script's own imports) ends the way Python ends it.
The probe below therefore signals only once `shimgen.__main__` is imported, and from then on
at random moments over the next 60 ms: the import of the command line (about 25 ms) and the
start of the build."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import pytest

# Python is up and shimgen's entry module is imported: say so on stdout, then run the entry.
# An interrupt that lands in these lines before the entry runs (a busy machine can hold the
# process there for milliseconds) is the probe's, not shimgen's: it exits 99 and the run is
# not counted.
START = """import os, sys, shimgen.__main__ as m
try:
    os.write(1, b'R')
    entry = m.entry
except KeyboardInterrupt:
    sys.exit(99)
sys.exit(entry())"""


def _sigint_default() -> None:
    """SIGINT as a terminal gives it, even when the test runner was started with it ignored
    (a background job of a non-interactive shell); an ignored SIGINT stays ignored in
    shimgen by design (tests/cli/test_bad_cli.py)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


INTERRUPTED = ("shimgen: error: interrupted by SIGINT; nothing was installed, any earlier "
               "build is as it was")


def test_sigint_at_any_moment_of_the_start_is_one_line_and_130(drivers, tmp_path):
    rng = random.Random(os.getpid())
    counted = tries = 0
    # 100 interrupts that reached shimgen, however many the probe's own lines took first (a
    # busy machine holds the process there longer): the count is of what was seen
    while counted < 100:
        tries += 1
        assert tries <= 1000, f"only {counted} of {tries} interrupts reached shimgen"
        out = tmp_path / f"out{tries % 4}"
        proc = subprocess.Popen([sys.executable, "-c", START, "build", "--driver",
                                 str(drivers[0].path), "--out", str(out)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                preexec_fn=_sigint_default)
        assert os.read(proc.stdout.fileno(), 1) == b"R"  # not the rest with it
        delay = rng.uniform(0, 0.06)
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        if proc.returncode == 99:
            continue
        counted += 1
        text = err.decode(errors="replace")
        lines = [ln for ln in text.strip().splitlines()  # (a build announced is no end)
                 if not ln.startswith("shimgen: build: building the shim ")]
        assert "Traceback" not in text and "Fatal Python error" not in text, (delay, text)
        assert proc.returncode == 130, (delay, proc.returncode, text)
        assert lines == [INTERRUPTED], (delay, text)


@pytest.mark.parametrize("where", ["out", "cwd"])
def test_backslash_in_the_output_path_is_refused(drivers, tmp_path, where):
    odd = tmp_path / "a\\b"
    odd.mkdir()
    args = ["build", "--driver", str(drivers[0].path)]
    cwd = tmp_path
    if where == "out":
        args += ["--out", str(odd / "o")]
    else:
        cwd = odd  # the default output directory, build/, is under it
    proc = subprocess.run([sys.executable, "-m", "shimgen", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "backslash" in lines[0] and str(odd) in lines[0], proc.stderr
    assert not any(odd.iterdir()), "nothing is written"


# `shimgen run`'s command lines: the fast parser (cliargs.fast_run) must give what argparse
# gives, or leave the line to argparse (None). The first group is what users type and must
# take the fast path.
USUAL_RUN_LINES = [
    ["run", "--", "python", "train.py"],
    ["run", "python", "train.py", "--epochs", "3"],
    ["run", "--trace", "time", "--gates=-gdr,-dmabuf", "-o", "runs/masked", "--", "p", "-x"],
    ["run", "--driver", "/lib/libcuda.so.1", "--out=runs/a", "--trace=timeline", "--", "t"],
    ["run", "--gates", "gdr", "--gate-profile", "auto", "--", "a", "--", "b"],
    ["run", "-o", "d", "--driver=x", "cmd"],
    ["run", "-o", "runs/first", "--force", "--", "python3", "x.py"],
]
OTHER_RUN_LINES = [
    ["run"], ["run", "--"], ["run", "-h"], ["run", "--dri", "x", "--", "t"],
    ["run", "--trace", "bogus", "--", "t"], ["run", "-o", "a", "-o", "b", "--", "t"],
    ["run", "-oDIR", "--", "t"], ["run", "-o=DIR", "--", "t"], ["run", "--driver"],
    ["run", "--trace", "--", "t"], ["run", "--unknown", "--", "t"], ["run", "-o", "d"],
    ["build", "--driver", "x"], ["run", "--gates", "-gdr", "--", "t"],
    ["run", "--force=1", "--", "t"], ["run", "--force", "--force", "--", "t"],
]


@pytest.mark.parametrize("argv", USUAL_RUN_LINES + OTHER_RUN_LINES,
                         ids=lambda a: " ".join(a) or "empty")
def test_the_fast_run_parser_gives_what_argparse_gives(argv):
    from shimgen import cli, cliargs

    fast = cliargs.fast_run(list(argv))
    if argv in USUAL_RUN_LINES:
        assert fast is not None, "a usual `run` line must not need argparse"
    if fast is None:
        return
    slow = cli.parser("run").parse_args(list(argv))
    assert vars(fast) == vars(slow)


@pytest.mark.parametrize("command", sorted(__import__("shimgen.cliargs").cliargs.COMMANDS))
def test_every_command_has_a_description_and_an_example(command):
    """`shimgen COMMAND --help`: a paragraph that says what the command does and an example
    that starts with `shimgen COMMAND`; no option of the probe's own plumbing."""
    proc = subprocess.run([sys.executable, "-m", "shimgen", command, "--help"],
                          capture_output=True, text=True, env={**os.environ, "COLUMNS": "100"})
    assert proc.returncode == 0, proc.stderr
    usage, description, *rest = proc.stdout.split("\n\n")
    assert usage.startswith(f"usage: shimgen {command}")
    assert len(description.split()) >= 20, description
    example = proc.stdout.split("\nexample:\n", 1)[1]
    assert example.lstrip().startswith(f"shimgen {command} "), example
    assert "--child" not in proc.stdout and "--table" not in proc.stdout


# An object whose __init__ an interrupt cut short, freed later: its __del__ fails (capstone's
# Cs, interrupted before it set `csh`, does so when a build or `run`'s first build is
# interrupted in the driver's check), run through the `shimgen` script's entry.
HALF_MADE = """import signal, sys
import shimgen.shim.exports as exports
from shimgen.errors import Interrupted

class HalfMade:
    def __init__(self):
        raise Interrupted(signal.SIGTERM)  # as the signal lands in its __init__

    def __del__(self):
        self.handle  # never set: AttributeError

def command(args):
    return HalfMade()

exports.command = command
from shimgen.__main__ import entry
sys.exit(entry())"""


def test_an_interrupt_is_the_last_word_not_a_half_made_objects_del():
    """What an interrupt cut short says nothing after the interrupt's line: no "Exception
    ignored" and traceback of a __del__ that fails because its __init__ never ended (seen
    as a SIGTERM landed in capstone's Cs() during `run`'s first build)."""
    proc = subprocess.run([sys.executable, "-c", HALF_MADE, "exports"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, proc.stderr
    assert proc.stderr == ("shimgen: error: interrupted by SIGTERM; nothing was installed, "
                           "any earlier build is as it was\n"), proc.stderr


# A second SIGTERM (timeout(1) sends one to the command and then one to its group) landing
# while the command line is saying the first: at the first instruction of the function that
# says it (Python looks for a pending signal there), before that function holds the signals
# back.
SECOND_AT_THE_SAYING = """import signal, sys
import shimgen.cli as cli
import shimgen.shim.exports as exports
from shimgen.errors import Interrupted

def command(args):
    raise Interrupted(signal.SIGTERM)

said, seen = cli._said_interrupted, []

def second_lands_first(e, command):
    if not seen:
        seen.append(e)
        raise Interrupted(signal.SIGTERM)
    return said(e, command)

exports.command = command
cli._said_interrupted = second_lands_first
from shimgen.__main__ import entry
sys.exit(entry())"""

FIRST_SAID = ("shimgen: error: interrupted by SIGTERM; nothing was installed, any earlier build "
              "is as it was\n")


def test_a_second_interrupt_as_the_first_is_said_leaves_the_first_said():
    """The line is the first interrupt's, once: never "as shimgen ended" (what the second
    one's line said when it came before the first was said), never two lines."""
    proc = subprocess.run([sys.executable, "-c", SECOND_AT_THE_SAYING, "exports"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, proc.stderr
    assert proc.stderr == FIRST_SAID, proc.stderr


def test_a_second_interrupt_while_the_line_is_written_is_dropped(monkeypatch, capsys):
    """A second interrupt inside the saying of the first (here raised by the first write),
    and a third once the line is being said again (through the handler): the first's line
    is said, once; the third is dropped, not raised."""
    from shimgen import cli, errors
    from shimgen.errors import Interrupted
    from shimgen.shim import exports

    def command(args):
        raise Interrupted(signal.SIGTERM)

    real_say, seen = cli.say, []

    def say(message: str) -> None:
        seen.append(message)
        if len(seen) == 1:
            raise Interrupted(signal.SIGINT)
        if len(seen) == 2:
            errors.raise_interrupted(signal.SIGHUP, None)
        real_say(message)

    monkeypatch.setattr(exports, "command", command)
    monkeypatch.setattr(cli, "say", say)
    monkeypatch.setattr(sys, "unraisablehook", sys.unraisablehook)
    try:
        status = cli.main(["exports"])
    except KeyboardInterrupt as e:
        pytest.fail(f"an interrupt escaped the command line: {e!r}")
    assert status == 128 + signal.SIGTERM and capsys.readouterr().err == FIRST_SAID
    assert len(seen) == 2, seen


# An interrupt in the flush of what the command wrote (a SIGINT as `--help` ends), simulated
# by a stdout whose first flush is interrupted.
INTERRUPTED_FLUSH = """import io, sys

class Interrupted(io.TextIOWrapper):
    flushed = 0

    def flush(self):
        Interrupted.flushed += 1
        if Interrupted.flushed == 1:
            raise KeyboardInterrupt
        super().flush()

sys.stdout = Interrupted(io.BufferedWriter(io.FileIO(1, "w", closefd=False)), encoding="utf-8")
from shimgen.__main__ import entry
sys.exit(entry())"""


def test_an_interrupt_in_the_last_flush_is_said_never_lost():
    """The help printed, then SIGINT as its text is flushed: said (130, one line), never
    exit status 0 with the text lost in silence in Python's own flush at exit."""
    proc = subprocess.run([sys.executable, "-c", INTERRUPTED_FLUSH, "exports", "--help"],
                          capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stderr) == (
        130, "shimgen: error: interrupted by SIGINT as shimgen ended; what it had finished "
        "stands (a build installed, a report printed)\n"), (proc.returncode, proc.stderr)
