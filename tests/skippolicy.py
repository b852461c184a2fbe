"""The skip policy of CI: with SHIMGEN_STRICT_SKIPS=1 (set by .ci/run), a run in which a test
was skipped for a reason not in ALLOWED fails, listing each such skip. CI installs
everything the tests need (.ci/run) and runs as root on the CPU, so a skip there means a
test did not run for a reason that should not hold: a missing tool, a mount option, a
lost option. Without the variable (a developer's machine), skips are reported as usual.
The hooks are imported by tests/conftest.py."""

from __future__ import annotations

import os
import re

import pytest

ENV = "SHIMGEN_STRICT_SKIPS"

#: (pattern on the skip reason, why that skip may happen in CI). Each entry is a reason
#: that may hold on a CI machine by design; add one only with that argument. In CI (root, no
#: GPU, no libcuda installed, valgrind, setpriv, objcopy and a C compiler present) no other
#: test of this suite has a reason to skip.
ALLOWED: tuple[tuple[str, str], ...] = (
    (r"^this machine refuses a tmpfs mount in a mount namespace",
     "the disk-full tests need a small tmpfs, mounted in a mount namespace of their own "
     "(unshare -m as root, -rm otherwise); a container without CAP_SYS_ADMIN and without "
     "user namespaces refuses both, and nothing else can fill a disk without touching the "
     "machine's own. Where the mount is allowed (this project's machines) they run"),
)


def _reason(report) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def disallowed_skips(reports, allowed=None) -> list[tuple[str, str]]:
    """(test id, reason) of each skip whose reason matches no allowed pattern."""
    allowed = ALLOWED if allowed is None else allowed
    out = []
    for r in reports:
        reason = _reason(r)
        if not any(re.search(p, reason) for p, _ in allowed):
            out.append((r.nodeid, reason))
    return out


def _strict_failures(config) -> list[tuple[str, str]]:
    if os.environ.get(ENV) != "1":
        return []
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    return disallowed_skips(reporter.stats.get("skipped", []) if reporter else [])


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    bad = _strict_failures(config)
    if bad:
        terminalreporter.section(f"skips not allowed in CI ({ENV}=1, tests/skippolicy.py)")
        for nodeid, reason in bad:
            terminalreporter.line(f"SKIPPED-IN-CI {nodeid}: {reason}")


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    if _strict_failures(session.config) and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
