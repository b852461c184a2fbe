"""`shimgen run` against a real Debian libcuda (no GPU): what the shim said (notices.log)
is in the report printed at the end, and in `shimgen report` of the run directory; when the
report cannot be made, the line that says so points at the notices."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WARNING = ("shimgen: SHIMGEN_ATTR_OVERRIDE: 'foo' is not ATTRIBUTE=VALUE (an attribute number "
           "from 0 to 100000, a value from -2147483648 to 2147483647); ignored")


@pytest.fixture(scope="module")
def driver(drivers) -> Path:
    return drivers[0].libdir / "libcuda.so.1"


def test_the_shims_warning_is_in_the_report_at_the_end(driver, tmp_path):
    env = {k: v for k, v in os.environ.items()
           if k != "LD_PRELOAD" and not k.startswith("SHIMGEN_")}
    env.update(XDG_CACHE_HOME=str(tmp_path / "xdg"), SHIMGEN_ATTR_OVERRIDE="foo")
    run_dir = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "shimgen", "run", "--driver", str(driver),
                           "-o", str(run_dir), "--", "true"], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert (run_dir / "notices.log").read_text() != ""
    log = run_dir / "notices.log"
    said = f"notices    1 from the shim in {log}:\n               1 x {WARNING}\n"
    assert said in proc.stderr, proc.stderr
    report = subprocess.run([sys.executable, "-m", "shimgen", "report", str(run_dir)],
                            env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert report.returncode == 0 and said in report.stdout, report.stdout + report.stderr


def test_when_there_is_no_report_the_notices_are_pointed_at(monkeypatch, tmp_path):
    from shimgen.errors import ShimgenError
    from shimgen.report import main as report
    from shimgen.run import summary as runreport

    def refuse(d):
        raise ShimgenError("report: cuInit: its total time is too large to add up")

    monkeypatch.setattr(report, "summary_for_run", refuse)
    (tmp_path / "notices.log").write_text("")
    assert runreport.run_report(tmp_path) == (
        f"report: report: cuInit: its total time is too large to add up; "
        f"shimgen report {tmp_path}")
    (tmp_path / "notices.log").write_text(f"[pid 5] {WARNING}\n")
    assert runreport.run_report(tmp_path) == (
        f"report: report: cuInit: its total time is too large to add up; "
        f"shimgen report {tmp_path}; the shim wrote notices: {tmp_path / 'notices.log'}")
