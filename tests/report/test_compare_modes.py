"""`shimgen report A B` of a time run against a counts run: the header says each run's
command (`command A`, `command B`) and mode
(counts: calls only, no times, no errors), and what B cannot know is `-` (its times, its
error counts, the change), never an error "gone" from B. A real driver without a GPU: cuInit
returns CUDA_ERROR_NO_DEVICE."""

from __future__ import annotations

import json
import sys

from shimgen import cli
from tests.run.test_run import shimgen_run

CALLS = "import ctypes; ctypes.CDLL('libcuda.so.1').cuInit(0)"


def test_a_time_run_against_a_counts_run(drivers, tmp_path, capsys):
    driver = drivers[0].libdir / "libcuda.so.1"
    runs = {}
    for mode in ("time", "counts"):
        runs[mode] = tmp_path / mode
        proc = shimgen_run(driver, tmp_path / "xdg", "--trace", mode, "-o", str(runs[mode]),
                           "--", sys.executable, "-c", CALLS)
        assert proc.returncode == 0, proc.stderr
        # one word for it in the run's line and in its report
        assert f"; mode {mode}; run directory" in proc.stderr, proc.stderr
        assert f"\nmode       {mode}" in proc.stderr, proc.stderr
    assert cli.main(["report", str(runs["time"]), str(runs["counts"])]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(ln.startswith("A  ") and ln.endswith(", mode time") for ln in lines), lines
    commands = [ln for ln in lines if ln.startswith("command")]
    assert [c[:11] for c in commands] == ["command A  ", "command B  "], commands
    assert any(ln.startswith("B  ") and ln.endswith(
        ", mode counts (calls only: no times, no errors)") for ln in lines), lines
    row = next(ln.split() for ln in lines if ln.endswith("  cuInit"))
    assert row[:3] == ["1", "1", "+0"] and row[4:7] == ["-", "1", "-"], row
    err = next(ln.split() for ln in lines if ln.startswith("cuInit "))
    assert err == ["cuInit", "100", "CUDA_ERROR_NO_DEVICE", "1", "-", "-"], err
    assert "gone" not in "\n".join(lines)
    assert cli.main(["report", "--json", str(runs["time"]), str(runs["counts"])]) == 0
    doc = json.loads(capsys.readouterr().out)
    (e,) = [r for r in doc["errors"] if r["function"] == "cuInit"]
    assert (e["count_a"], e["count_b"], e["status"]) == (1, None, "")
