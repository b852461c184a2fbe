"""The CI skip policy (tests/skippolicy.py) on a tiny test directory made here: with
SHIMGEN_STRICT_SKIPS=1 a skip whose reason is not allowed fails the run and is named; an
allowed reason, or the variable unset, leaves a skip a skip."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]

CONFTEST = f'''import sys
sys.path.insert(0, {str(TESTS.parent)!r})  # the repository root: the tests package
import tests.skippolicy as skippolicy
skippolicy.ALLOWED = ((r"^allowed here", "the test of the policy"),)
from tests.skippolicy import pytest_sessionfinish, pytest_terminal_summary  # noqa
'''

CASES = '''import pytest


def test_runs():
    pass


def test_skips_for_no_reason_ci_accepts():
    pytest.skip("no valgrind")


def test_skips_for_an_allowed_reason():
    pytest.skip("allowed here: by design")
'''


def run(where: Path, strict: bool, *select: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "SHIMGEN_STRICT_SKIPS"}
    if strict:
        env["SHIMGEN_STRICT_SKIPS"] = "1"
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           *select], cwd=where, env=env, capture_output=True, text=True,
                          timeout=120)


def test_strict_skips(tmp_path):
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_cases.py").write_text(CASES)
    proc = run(tmp_path, True)
    assert proc.returncode == 1, proc.stdout
    bad = [ln for ln in proc.stdout.splitlines() if ln.startswith("SKIPPED-IN-CI")]
    assert bad == ["SKIPPED-IN-CI test_cases.py::test_skips_for_no_reason_ci_accepts: "
                   "no valgrind"]
    assert run(tmp_path, False).returncode == 0
    allowed = run(tmp_path, True, "test_cases.py::test_runs",
                  "test_cases.py::test_skips_for_an_allowed_reason")
    assert allowed.returncode == 0, allowed.stdout
    assert "SKIPPED-IN-CI" not in allowed.stdout
