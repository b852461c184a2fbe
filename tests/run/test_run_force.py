"""`shimgen run -o DIR --force` (run/replace.py): DIR replaced only when it holds a finished
run of the user's that `shimgen run` made, and nothing is removed otherwise; without
--force, a finished run is refused in a line that names --force. The run directory's own
code (open_run_dir) on directories made here; the README's "Try it" runs the command twice
(tests/devtools/test_readme.py)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from shimgen.errors import ShimgenError
from shimgen.run import replace
from shimgen.run.directory import open_run_dir

ME = {"host": "here", "command": ["true"], "build_id": "ab"}
RECORD = {"command": ["true"], "start": "2026-01-01T00:00:00.000Z", "shimgen_version": "0.1.0",
          "host": "here", "end": "2026-01-01T00:00:01.000Z", "pid": 7,
          "exit": {"status": 0, "code": 0, "signal": None, "signal_name": None}}


def finished(out: Path, **changed) -> Path:
    """A run directory as `shimgen run` leaves it (its record changed by `changed`)."""
    out.mkdir(mode=0o700)
    (out / "traces").mkdir(mode=0o700)
    (out / "timeline").mkdir(mode=0o700)
    (out / "traces" / "7.shimtrace").write_bytes(b"SHIM")
    (out / "timeline" / "7.json").write_text("[]")
    (out / "notices.log").write_text("")
    (out / "heartbeat").write_text("1")
    (out / "run.json").write_text(json.dumps({**RECORD, **changed}))
    return out


def listing(d: Path) -> dict[str, bytes | None]:
    """Every entry under `d` with its bytes (None: a directory or a link)."""
    out: dict[str, bytes | None] = {}
    for root, dirs, files in os.walk(d):
        for n in dirs + files:
            p = Path(root) / n
            out[str(p.relative_to(d))] = (None if p.is_symlink() or p.is_dir()
                                          else p.read_bytes())
    return out


def opened(out: Path, force: bool):
    rd = open_run_dir(out, "true", time.time(), ME, force)
    rd.close()
    return rd


def test_a_finished_run_is_refused_naming_force_and_replaced_with_it(tmp_path):
    out = finished(tmp_path / "first")
    before = listing(out)
    with pytest.raises(ShimgenError) as e:
        opened(out, force=False)
    assert str(e.value) == (f"run directory {out}: holds a finished run; name a new or empty "
                            "directory, or add --force to replace that run")
    assert listing(out) == before
    opened(out, force=True)
    assert os.listdir(out) == ["run.json"] and (out / "run.json").read_bytes() == b""


def _bad_top(out: Path) -> None:
    (out / "results.csv").write_text("mine")


def _bad_traces_dir(out: Path) -> None:
    (out / "traces" / "keep").mkdir()


def _bad_traces_link(out: Path) -> None:
    (out.parent / "elsewhere").write_text("mine")
    (out / "traces" / "8.shimtrace").symlink_to(out.parent / "elsewhere")


def _bad_record_link(out: Path) -> None:
    (out.parent / "record.json").write_text(json.dumps(RECORD))
    (out / "run.json").unlink()
    (out / "run.json").symlink_to(out.parent / "record.json")


def _bad_record(out: Path) -> None:
    (out / "run.json").write_text(json.dumps({"what": "my notes"}))


def _not_ended(out: Path) -> None:
    (out / "run.json").write_text(json.dumps({**RECORD, "end": None, "exit": None}))


def _no_record(out: Path) -> None:
    (out / "run.json").unlink()


CASES = {
    "a-file-of-the-user": (_bad_top, "it holds 'results.csv', which `shimgen run` does not make"),
    "a-directory-in-traces": (_bad_traces_dir, "traces/keep is not a file of yours"),
    "a-link-in-traces": (_bad_traces_link, "traces/8.shimtrace is not a file of yours"),
    "run-json-a-link": (_bad_record_link, "run.json is not a file of yours"),
    "run-json-no-record": (_bad_record, "its run.json is not a run's record"),
    "not-ended": (_not_ended, "its run has not ended"),
    "no-run-json": (_no_record, "it has no run.json"),
}


@pytest.mark.parametrize("case", CASES)
def test_force_removes_nothing_that_is_not_a_finished_run(tmp_path, case):
    change, why = CASES[case]
    out = finished(tmp_path / "first")
    change(out)
    before = listing(out)
    outside = listing(tmp_path)
    with pytest.raises(ShimgenError) as e:
        opened(out, force=True)
    assert str(e.value).startswith(f"run directory {out}: not replaced: {why}"), str(e.value)
    assert replace.WHAT_FORCE_DOES in str(e.value)
    assert listing(out) == before and listing(tmp_path) == outside
    with pytest.raises(ShimgenError) as e:
        opened(out, force=False)
    assert "--force" not in str(e.value)  # not a run --force would replace: not offered


def test_an_entry_swapped_after_the_check_is_left(tmp_path, monkeypatch):
    """What is removed is what was checked: an entry replaced between the check and the
    removal stays (and the claim then refuses the directory, which is not empty)."""
    out = finished(tmp_path / "first")
    checked = replace.finished_run

    def swapped(fd):
        got = checked(fd)
        (out / "traces" / "7.new").write_bytes(b"NEW")  # (a new inode: the old one is held)
        os.replace(out / "traces" / "7.new", out / "traces" / "7.shimtrace")
        return got

    monkeypatch.setattr(replace, "finished_run", swapped)
    with pytest.raises(ShimgenError, match="exists and is not empty"):
        opened(out, force=True)
    assert (out / "traces" / "7.shimtrace").read_bytes() == b"NEW"
    assert os.listdir(out) == ["traces"]  # the rest, as checked, removed
