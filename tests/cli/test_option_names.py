"""One meaning for each option name across the commands: `--gates` is a gate selection (run,
patch), `--gate-profile` the gates baked in (run, build, patch). build's `--gates` (the first
name of --gate-profile) and diff's `--gates` (a switch for the default) are kept hidden and
say what they became; a selection given to build is refused with the way that works."""

from __future__ import annotations

import re
import subprocess

from shimgen import cli
from shimgen.diff import main as diff_format
from tests.badinput import ROOT, assert_one_line_error, shimgen


def _help(command: str) -> str:
    proc = shimgen(command, "--help", env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_gates_is_a_selection_wherever_it_is_shown():
    for command in ("run", "patch"):
        assert re.search(r"--gates SEL\s+.*(selection|the gates to set)", _help(command))
    assert "--gates" not in _help("build") and "--gate-profile auto|PROFILE" in _help("build")
    assert "--gates" not in _help("diff") and "--no-gates" in _help("diff")
    args = cli.parser("run").parse_args(["run", "--gates", "gdr", "--", "true"])
    assert args.gates == "gdr"


def test_build_refuses_a_selection_and_names_the_way_that_works():
    said = assert_one_line_error(shimgen("build", "--driver", "/x", "--gates", "gdr,-dmabuf"),
                                 "build --gates gdr,-dmabuf: build takes no gate selection",
                                 code=2)
    assert "--gate-profile auto" in said and "shimgen run --gates gdr,-dmabuf" in said, said


def test_builds_old_spelling_says_what_it_became(tmp_path):
    proc = shimgen("build", "--driver", str(tmp_path / "none"), "--gates", "auto")
    lines = proc.stderr.splitlines()
    assert proc.returncode == 1 and len(lines) == 2, proc.stderr
    assert lines[0] == ("shimgen: build: --gates is now --gate-profile (--gates selects gates "
                        "in run and patch); read as --gate-profile auto"), lines
    assert lines[1].startswith("shimgen: error: "), lines


def test_diffs_old_switch_says_it_is_the_default(monkeypatch, capsys):
    asked = []
    monkeypatch.setattr(diff_format, "run", lambda *a, **k: asked.append(k["gates"]) or 0)
    assert cli.main(["diff", "a", "b", "--gates"]) == 0
    assert capsys.readouterr().err.startswith("shimgen: diff: --gates is not needed: the "
                                              "gates are compared unless --no-gates")
    assert cli.main(["diff", "a", "b", "--no-gates"]) == 0 and asked == ["default", "no"]


def test_no_text_still_gives_build_a_gates_option():
    """The shim's own hints, the help, the docs: `shimgen build --gates` is said nowhere as a
    way (docs/validation.md and docs/bench/ record runs as they were made)."""
    proc = subprocess.run(["grep", "-rnE", r"shimgen build( --driver \S+)? --gates ",
                           "--exclude=validation.md", "--exclude-dir=bench", "shimgen",
                           "runtime", "templates", "README.md", "docs", "examples"],
                          cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 1 and proc.stdout == "", proc.stdout


def test_pid_is_one_process_wherever_it_is_shown():
    """`--pid N` keeps one meaning: the one process of that pid (report --calls, top)."""
    for command in ("report", "top"):
        assert re.search(r"--pid N\s+.*this process only", _help(command)), command
