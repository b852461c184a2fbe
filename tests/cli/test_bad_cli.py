"""The command line's own edge cases (paths with control characters, empty arguments, usage
errors, a closed stdout, internal errors, signal handlers) and bad gate profiles given to
`shimgen build --gate-profile`. Every error is one line `shimgen: error: ...`, a non-zero exit, no
traceback. docs/reliability.md lists each case with its test.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from shimgen import cli
from shimgen.driver.library import read_driver
from shimgen.errors import ShimgenError, raise_interrupted
from tests.badinput import ROOT, assert_one_line_error, copy_of, entries, shimgen

# --------------------------------------------------------------------------------------------
# The command line itself


def test_paths_with_control_characters(drivers, tmp_path):
    """A newline in a path would end a comment line in the generated sources."""
    link = tmp_path / "bad\nname.so"
    link.symlink_to(drivers[0].path)
    assert_one_line_error(shimgen("exports", "--driver", str(link)),
                          "the path contains a control character")
    assert_one_line_error(shimgen("build", "--driver", str(drivers[0].path), "--out",
                                  str(tmp_path / "o\nut")),
                          "the path contains a control character")
    target = tmp_path / "real\tdir"
    target.mkdir()
    copy_of(drivers[0].path, target / "libcuda.so.1")
    (tmp_path / "ok.so").symlink_to(target / "libcuda.so.1")
    assert_one_line_error(shimgen("exports", "--driver", str(tmp_path / "ok.so")),
                          "the path contains a control character")


def test_empty_arguments():
    assert_one_line_error(shimgen("build", "--driver", ""), "--driver: empty path")
    assert_one_line_error(shimgen("exports", "--driver", ""), "--driver: empty path")
    assert_one_line_error(shimgen("build", "--driver", "/x", "--out", ""), "--out: empty path")


def test_usage_errors_are_one_line():
    assert_one_line_error(shimgen("build", "--no-such-option"),
                          "unrecognized arguments: --no-such-option", code=2)
    assert_one_line_error(shimgen(), "the following arguments are required", code=2)
    assert_one_line_error(shimgen("frobnicate"), "invalid choice", code=2)


@pytest.mark.parametrize("args", [["run"], ["run", "--"], ["run", "--trace", "counts", "--"]])
def test_run_without_a_command_is_a_usage_error(args):
    """Exit 2 as every other command's usage error, with the way to the help."""
    said = assert_one_line_error(shimgen(*args), "run: no command given", code=2)
    assert said.endswith("(see `shimgen run --help`)"), said
    assert_one_line_error(shimgen("run", "--gate-profile", "auto", "--", "true"),
                          "run --gate-profile goes with --gates", code=2)


def test_closed_stdout_is_not_a_traceback(drivers):
    """`shimgen exports | head -1`: the reader goes away, shimgen exits quietly. The list
    fits in a pipe's buffer, so whether head has gone before shimgen writes is a race: the
    broken pipe itself is made certain with a pipe whose reader is closed from the start."""
    proc = subprocess.run(f"{sys.executable} -m shimgen exports --driver {drivers[0].path} "
                          "| head -1; echo \"rc=${PIPESTATUS[0]}\"", shell=True,
                          executable="/bin/bash", capture_output=True, text=True, cwd=ROOT)
    assert proc.stdout.splitlines() in (["cuArray3DCreate", "rc=141"],
                                        ["cuArray3DCreate", "rc=0"])
    assert proc.stderr == ""
    r, w = os.pipe()
    os.close(r)
    try:
        closed = subprocess.run([sys.executable, "-m", "shimgen", "exports", "--driver",
                                 str(drivers[0].path)], stdout=w, stderr=subprocess.PIPE,
                                text=True, cwd=ROOT)
    finally:
        os.close(w)
    assert (closed.returncode, closed.stderr) == (141, "")


def test_internal_error_is_one_line(monkeypatch, capsys, tmp_path):
    """A bug in shimgen still ends in one line (exit 70); SHIMGEN_DEBUG=1 shows it."""
    from shimgen.driver import library as driver

    def boom(_path):
        raise RuntimeError("something shimgen did not expect\nsecond line")

    monkeypatch.setattr(driver, "read_driver", boom)
    monkeypatch.delenv("SHIMGEN_DEBUG", raising=False)
    assert cli.main(["exports", "--driver", str(tmp_path)]) == cli.EXIT_INTERNAL
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("shimgen: error: internal error, please report it: RuntimeError: "
                          "something shimgen did not expect; second line")
    monkeypatch.setenv("SHIMGEN_DEBUG", "1")
    with pytest.raises(RuntimeError):
        cli.main(["exports", "--driver", str(tmp_path)])


def test_signal_handlers_restored_and_ignored_signals_left_alone(monkeypatch):
    """`main` turns SIGINT/SIGTERM/SIGHUP into a clean exit while it runs, restores the
    handlers after, and leaves an ignored signal ignored (`nohup shimgen build` must survive
    a hang-up)."""
    from shimgen.shim import exports

    seen = {}

    def look(_path):
        seen.update({s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGHUP)})
        raise ShimgenError("stop here")

    monkeypatch.setattr(exports, "read_driver", look)
    # SIGINT as a terminal gives it, even if the test runner inherited it ignored
    outer_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    before = signal.getsignal(signal.SIGINT)
    old_hup = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        assert cli.main(["exports", "--driver", "/x"]) == 1
        after = signal.getsignal(signal.SIGINT)
    finally:
        signal.signal(signal.SIGHUP, old_hup)
        signal.signal(signal.SIGINT, outer_int)
    assert seen[signal.SIGHUP] is signal.SIG_IGN
    assert seen[signal.SIGINT] is raise_interrupted
    assert after is before


# --------------------------------------------------------------------------------------------
# Gate profiles given to `shimgen build --gate-profile`


@pytest.fixture(scope="module")
def gates_option() -> None:
    """`shimgen build --gate-profile` is documented (README, docs/gates.md): its loss is a
    failure."""
    proc = shimgen("build", "--help")
    assert "--gate-profile" in proc.stdout, "`shimgen build --help` has no --gate-profile"


def test_malformed_or_foreign_gate_profile(drivers, tmp_path, gates_option):
    """Each bad profile: one line, exit 1, nothing built. A foreign one is a valid profile
    of another driver (another build-id)."""
    out = tmp_path / "out"
    base, other = drivers[0], drivers[1]
    profile = tmp_path / "other.json"
    made = shimgen("gates", "--driver", str(other.path), "--json", str(profile), "--no-proof")
    assert made.returncode == 0, made.stderr
    good = json.loads(profile.read_text())
    cases: list[tuple[str, str]] = []

    def case(name: str, content: str | bytes | None, needle: str) -> None:
        p = tmp_path / name
        if isinstance(content, bytes):
            p.write_bytes(content)
        elif content is not None:
            p.write_text(content)
        cases.append((str(p), needle))

    case("missing.json", None, "cannot read")
    case("empty.json", "", "is not JSON")
    case("binary.json", b"\x00\xff\xfe garbage", "is not JSON")
    case("list.json", "[]", "top level is not an object")
    case("manifest.json", json.dumps({"shimgen_command": "shimgen build", "functions": 600}),
         "top level has no 'schema'")
    case("schema.json", json.dumps({**good, "schema": "shimgen.gates/99"}),
         "schema is 'shimgen.gates/99'")
    case("types.json", json.dumps({**good, "gates": "gdr"}), "gates is not a list")
    cases.append((str(profile), f"gate profile is for build-id {read_driver(other.path).build_id}"))
    dirp = tmp_path / "dir.json"
    dirp.mkdir()
    cases.append((str(dirp), "cannot read"))
    for path, needle in cases:
        proc = shimgen("build", "--driver", str(base.path), "--out", str(out), "--gate-profile",
                       path)
        assert_one_line_error(proc, needle)
        assert entries(out) == []


def test_build_takes_dash_o_as_run_and_patch_do(drivers, tmp_path):
    """`-o DIR` means the output in every command that writes one (build, run, patch)."""
    proc = subprocess.run([sys.executable, "-m", "shimgen", "build", "--driver",
                           str(drivers[0].path), "-o", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert list((tmp_path / "out").glob("cudashim-*/libcudashim.so")), proc.stdout
