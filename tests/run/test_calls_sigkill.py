"""SHIMGEN_TRACE=calls in a process SIGKILLed while 16 threads wrap their rings (a ring of
1024 records, millions of calls), at random moments from its start on: `report`, `report
--calls` and `report --calls --json` of every such trace end in their output or one line,
never a traceback; each thread's records are its last calls, in order, with no gap, kept
and dropped adding up to the calls it made (the one in flight, whose record may be cut
short, counted as dropped or not); only a thread's last call may be in flight, and the
text shows it so. A file the process was still making when it died is said to be so by
every view. The probe is
tests/c/callsdecoded.c ("threads": each thread calls cuDeviceGetAttribute(&v, its number,
i) for i = -1, 0, 1, ...)."""

from __future__ import annotations

import collections
import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RING = 1024
DIED = "no magic: the process died while it made the file"


def _report(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "shimgen", "report", *map(str, args)],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)


def _checked(d: Path, seed: int) -> int:
    """The three views of the run `d`, checked; the calls in flight."""
    views = {v: _report(*v, d) for v in (("--calls", "--json"), ("--calls",), ())}
    for v, proc in views.items():
        assert proc.returncode in (0, 1), (seed, v, proc.stderr[-2000:])
        assert "Traceback" not in proc.stderr and len(proc.stderr.splitlines()) <= 1 \
            or proc.returncode == 0, (seed, v, proc.stderr[-2000:])
    js = views[("--calls", "--json")]
    if js.returncode:  # killed before its trace was made: every view says so, in one line
        assert all(p.returncode == 1 for p in views.values()), (seed, views)
        if not d.exists():
            return 0
        if not any(d.iterdir()):  # killed between the directory's mkdir and the file's open
            said = [views[("--calls",)].stderr, js.stderr]
            assert all("no trace files in it" in e for e in said), (seed, views)
            assert "no traces in it" in views[()].stderr, (seed, views)
            return 0
        assert DIED in js.stderr and DIED in views[("--calls",)].stderr, (seed, js.stderr)
        return 0
    got = json.loads(js.stdout)
    (proc,) = got["processes"]
    dropped = {int(t): n for t, n in proc["dropped"].items()}
    per = collections.defaultdict(list)
    for c in got["calls"]:
        per[c["tid"]].append(c)
    inflight = 0
    for tid, calls in per.items():
        devs = [c["args"]["dev"] for c in calls]
        assert devs == list(range(devs[0], devs[0] + len(devs))), (seed, tid)
        assert len(devs) <= RING and (devs[0] == -1 or len(devs) >= RING - 1), (seed, tid)
        states = [c["state"] for c in calls]
        assert set(states[:-1]) <= {"returned"}, (seed, tid, collections.Counter(states))
        inflight += states[-1] != "returned"
        made = devs[-1] + 2  # -1, 0, ..., the last kept
        assert len(calls) + dropped.get(tid, 0) in (made, made + 1), (seed, tid)
    assert set(dropped) <= set(per), (seed, dropped)
    text = views[("--calls",)].stdout.splitlines()
    assert sum(ln.endswith(") = ?") for ln in text) == inflight, seed  # in flight: "= ?"
    return inflight


def test_sigkill_while_sixteen_threads_wrap_their_rings(shims, probes, tmp_path):
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    seen_inflight = wrapped = 0
    for k in range(40):
        d = tmp_path / f"r{k}"
        env = shims[k % len(shims)].env(SHIMGEN_TRACE="calls", SHIMGEN_TRACE_DIR=str(d),
                                        SHIMGEN_CALLS_RING=str(RING))
        p = subprocess.Popen([str(probes / "callsdecoded"), "threads", "16", "1000000000"],
                             env=env)
        time.sleep(rng.uniform(0, 0.03) if k % 3 == 0 else rng.uniform(0, 0.5))
        p.send_signal(signal.SIGKILL)
        p.wait()
        seen_inflight += _checked(d, seed) > 0
        wrapped += any(f.stat().st_size for f in d.iterdir()) if d.exists() else 0
    assert seen_inflight and wrapped, seed  # the moments chosen reach the loops


def test_a_calls_trace_the_process_died_making_is_said_so_by_every_view(shims, probes,
                                                                        tmp_path):
    """A calls trace whose magic is still zero (the process died while it made the file):
    `report --calls` says so as `report` does, in one line, not that it is no trace."""
    d = tmp_path / "t"
    env = shims[0].env(SHIMGEN_TRACE="calls", SHIMGEN_TRACE_DIR=str(d),
                       SHIMGEN_CALLS_RING=str(RING))
    subprocess.run([str(probes / "callsdecoded"), "loop", "10"], env=env, check=True,
                   capture_output=True)
    (f,) = d.iterdir()
    data = bytearray(f.read_bytes())
    data[:8] = bytes(8)
    f.write_bytes(data)
    for view in (("--calls",), ("--calls", "--json"), ()):
        proc = _report(*view, d)
        assert proc.returncode == 1 and len(proc.stderr.splitlines()) == 1, proc.stderr
        assert DIED in proc.stderr, (view, proc.stderr)
