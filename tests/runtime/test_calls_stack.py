"""Calls mode reads a name on the calling thread's own stack directly (runtime/base/saferead.c,
docs/security.md "What a program passes"), and nothing else: the probe (tests/c/stackcapture.c)
refuses both of the safe read's system calls (process_vm_readv and mincore) with a seccomp
filter, so a name is read only where the direct read applies: in the calling thread's own
stack (the first thread's, or one the C library made), at or above its stack pointer,
whole. Under the stack pointer, past the stack's end, on a coroutine's stack of its own
(in a thread or in the first thread, whether the thread's first read is made there or
after one on its own stack): unread, and the program goes on."""

from __future__ import annotations

import json

import pytest

from shimgen.report import calls as report_calls
from tests.faultkit import run, shim_for

DRIVER = "550.163.01"
UNREAD = {"unreadable": None}


def names(shims, probes, tmp_path, mode: str) -> list:
    d = tmp_path / "traces"
    env = shim_for(shims, DRIVER).env(SHIMGEN_TRACE="calls", SHIMGEN_TRACE_DIR=str(d))
    proc = run([probes / "stackcapture", mode], env, ok=False, timeout=60)
    assert proc.returncode == 0, (proc.returncode, proc.stderr)
    got = json.loads(report_calls.render([d], report_calls.Filters(), "json"))
    out = []
    for c in got["calls"]:
        assert c["function"] == "cuModuleLoad" and c["state"] == "returned"
        name = c["args"]["fname"]
        out.append(name if isinstance(name, str) else {k: None for k in name})
    return out


CASES = [
    ("main", ["main.cubin"]),
    ("thread", ["thread.cubin"]),
    ("below", ["main.cubin", UNREAD]),
    ("top", ["main.cubin", UNREAD]),
    ("coroutine", [UNREAD]),
    ("maincoro", [UNREAD]),
    ("switched", ["main.cubin", UNREAD]),
]


@pytest.mark.parametrize("mode, want", CASES, ids=[mode for mode, _ in CASES])
def test_only_the_threads_own_stack_is_read_directly(shims, probes, tmp_path, mode, want):
    assert names(shims, probes, tmp_path, mode) == want
