"""`shimgen run --limit job-memory=SIZE` and `--limit-group` (run/group.py, docs/memory.md "One
budget for many processes"), with a real Debian driver (no GPU needed: what is checked is
what `run` does before the command and what it gives the shim): the run's own books in its
run directory; a group's directory made owner-only under $XDG_RUNTIME_DIR, its size fixed by
its first run, another size refused in one line naming both, SHIMGEN_LIMIT_GROUP taken for
the option and the group's size for the run's; a group directory others can write, or a bad
name, refused before anything runs. (The budget itself: tests/run/test_budget.py.)"""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.run import test_run
from tests.run.test_run import base_env, shimgen_run

cache, driver = test_run.cache, test_run.driver  # the fixtures, by their names


def _record(run_dir: Path) -> dict:
    return json.loads((run_dir / "run.json").read_text())


def test_job_memory_gives_the_shim_the_run_directorys_books(driver, cache, tmp_path):
    run = tmp_path / "r"
    proc = shimgen_run(driver, cache, "--limit", "job-memory=1MiB", "-o", str(run), "--", "env")
    assert proc.returncode == 0, proc.stderr
    assert f"SHIMGEN_BUDGET_FILE={run / 'budget.books'}\n" in proc.stdout
    assert "SHIMGEN_LIMIT_JOB_MEMORY=1048576\n" in proc.stdout
    rec = _record(run)
    assert rec["limit"] == {"job-memory": 1 << 20}
    assert rec["budget"] == {"books": str(run / "budget.books"), "group": None}


def test_a_group_is_fixed_by_its_first_run(driver, cache, tmp_path):
    xdg = tmp_path / "xdg"
    xdg.mkdir(mode=0o700)
    env = {**base_env(cache), "XDG_RUNTIME_DIR": str(xdg)}
    group = xdg / "shimgen" / "groups" / "train"
    first = shimgen_run(driver, cache, "--limit", "job-memory=1GiB", "--limit-group", "train",
                        "-o", str(tmp_path / "a"), "--", "env", env=env)
    assert first.returncode == 0, first.stderr
    assert f"SHIMGEN_BUDGET_FILE={group / 'budget.books'}\n" in first.stdout
    assert (group / "budget.size").read_text() == f"{1 << 30}\n"
    for d in (xdg / "shimgen", xdg / "shimgen" / "groups", group):
        assert d.stat().st_mode & 0o777 == 0o700, d
    other = shimgen_run(driver, cache, "--limit", "job-memory=2GiB", "--limit-group", "train",
                        "-o", str(tmp_path / "b"), "--", "true", env=env)
    assert (other.returncode, other.stderr) == (1, (
        f"shimgen: error: --limit job-memory={2 << 30} bytes: group train's budget is "
        f"{1 << 30} bytes per device, fixed by its first run\n"))
    assert not (tmp_path / "b").exists()
    joined = shimgen_run(driver, cache, "-o", str(tmp_path / "c"), "--", "env",
                         env={**env, "SHIMGEN_LIMIT_GROUP": "train"})
    assert joined.returncode == 0, joined.stderr
    assert f"SHIMGEN_LIMIT_JOB_MEMORY={1 << 30}\n" in joined.stdout
    assert _record(tmp_path / "c")["budget"] == {"books": str(group / "budget.books"),
                                                 "group": "train"}


def test_a_group_nobody_else_may_write_or_a_bad_name(driver, cache, tmp_path):
    open_dir = tmp_path / "shared"
    open_dir.mkdir()
    os.chmod(open_dir, 0o777)
    proc = shimgen_run(driver, cache, "--limit", "job-memory=1GiB", "--limit-group",
                       str(open_dir), "--", "true")
    assert (proc.returncode, proc.stderr) == (1, (
        f"shimgen: error: --limit-group: {open_dir}: group or others can write it\n"))
    proc = shimgen_run(driver, cache, "--limit-group", "../x y", "--", "true")
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
    proc = shimgen_run(driver, cache, "--limit-group", str(tmp_path / "new"), "--", "true")
    assert proc.stderr == (f"shimgen: error: --limit-group {tmp_path / 'new'}: the group has "
                           "no size yet; its first run gives it with --limit job-memory=SIZE\n")
