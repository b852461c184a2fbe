"""A hook file is code that runs as the user (shimgen/shim/userhooks.py, docs/security.md): one
that another user could change (theirs, writable by group or others, or in a directory
they could write without the sticky bit, or own) is refused in one line, as OpenSSH's
StrictModes refuses such a file, by `build`, `run` and `diff` alike; a path with a control
character is refused in one line that shows it escaped; a file over the size limit is
refused, never cut; a build's copy of a hook file is never more readable than the file;
and shimgen_hook_say writes one notice line, where the shim writes its notices, from a
hook's constructor too. The driver is FAKE (tests/c/fake_evil_libcuda.c), built here; the
other user is uid 65534 (faultkit.OTHER)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from shimgen.errors import ShimgenError
from shimgen.shim import userhooks
from shimgen.shim.pipeline import make_shim
from tests.badinput import shimgen
from tests.fakeevil import build_fake_evil
from tests.faultkit import OTHER

HOOK = """#include <shimgen/hook.h>

SHIMGEN_HOOK(CUresult, cuDriverGetVersion, (int *version))
{
    return SHIMGEN_REAL(cuDriverGetVersion)(version);
}
"""


@pytest.fixture(scope="module")
def evil(tmp_path_factory) -> Path:
    return build_fake_evil(tmp_path_factory.mktemp("fake-evil"))


def _as_root():
    if os.geteuid() != 0:
        pytest.skip("needs root to make another user's files")


def _refused_in_one_line(proc: subprocess.CompletedProcess, needle: str, code: int) -> str:
    assert proc.returncode == code, (proc.returncode, proc.stderr)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("shimgen: error: hook file "), proc.stderr
    assert needle in lines[0], lines[0]
    assert not any(ord(c) < 0x20 or ord(c) == 0x7F for c in lines[0]), lines[0]
    assert proc.stdout == ""
    return lines[0]


def _hook_in(directory: Path, name: str = "hook.c") -> Path:
    directory.mkdir(exist_ok=True)
    hook = directory / name
    hook.write_text(HOOK)
    return hook


# ---- another user's hook file --------------------------------------------------------------

CASES = {
    # case: (why, directory mode, file mode, file theirs, directory theirs)
    "file-of-another-user": ("owned by another user (uid 65534)", 0o755, 0o644, True, False),
    "file-others-can-write": ("group or others can write it", 0o755, 0o666, False, False),
    "file-group-can-write": ("group or others can write it", 0o755, 0o664, False, False),
    "directory-others-can-write": ("can be written by group or others (and is not sticky)",
                                   0o777, 0o644, False, False),
    "directory-of-another-user": ("is owned by another user (uid 65534)", 0o755, 0o644, False,
                                  True),
}


def _shared_hook(tmp_path: Path, case: str) -> Path:
    _, dir_mode, file_mode, file_theirs, dir_theirs = CASES[case]
    hook = _hook_in(tmp_path / "shared")
    hook.chmod(file_mode)
    hook.parent.chmod(dir_mode)
    if file_theirs:
        os.chown(hook, OTHER, OTHER)
    if dir_theirs:
        os.chown(hook.parent, OTHER, OTHER)
    return hook


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_hook_file_another_user_could_change_is_refused(evil, tmp_path, case):
    """build and run (exit 1) and diff (exit 2): one line that says why, nothing built or
    run."""
    _as_root()
    hook = _shared_hook(tmp_path, case)
    out = tmp_path / "out"
    proc = shimgen("build", "--driver", str(evil), "-o", str(out), "--hook", str(hook))
    line = _refused_in_one_line(proc, CASES[case][0], 1)
    assert "a hook file runs as you" in line
    assert not out.exists() or list(out.iterdir()) == []
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "xdg"))
    ran = tmp_path / "ran"
    proc = shimgen("run", "--driver", str(evil), "--hook", str(hook), "-o", str(tmp_path / "r"),
                   "--", "touch", str(ran), env=env)
    _refused_in_one_line(proc, CASES[case][0], 1)
    assert not ran.exists() and not (tmp_path / "xdg" / "shimgen" / "shims").exists()
    proc = shimgen("diff", "--no-gates", "--hook", str(hook), str(evil), str(evil), env=env)
    _refused_in_one_line(proc, CASES[case][0], 2)


def test_a_link_to_a_hook_file_in_a_shared_directory_is_refused(tmp_path):
    """The link is in a directory of the user's; what it names is not theirs to trust."""
    _as_root()
    hook = _shared_hook(tmp_path, "directory-others-can-write")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "hook.c").symlink_to(hook)
    with pytest.raises(ShimgenError, match=r"its directory .*shared can be written by group or "
                       r"others \(and is not sticky\)"):
        userhooks.load([str(mine / "hook.c")])


def test_a_hook_file_of_the_users_own_in_a_sticky_directory_is_used(tmp_path):
    """/tmp's kind of directory: others may add files, never rename or remove the user's."""
    _as_root()
    hook = _hook_in(tmp_path / "sticky")
    hook.parent.chmod(0o1777)
    (loaded,) = userhooks.load([str(hook)])
    assert loaded.data == HOOK.encode()


# ---- control characters in a hook's path ---------------------------------------------------

NAMES = {"cr": "a\rb.c", "lf": "a\nuser hook  cuInit from x.c", "esc": "e\x1b[2Jx.c",
         "bel-in-directory": "d\x07/h.c"}


@pytest.mark.parametrize("case", sorted(NAMES))
def test_a_hook_path_with_a_control_character_is_refused(evil, tmp_path, case):
    """One line, the path escaped (no control character reaches the terminal), nothing
    built; diff the same."""
    name = NAMES[case]
    if not name.endswith(".c"):
        name += ".c"
    hook = tmp_path / name
    hook.parent.mkdir(exist_ok=True)
    hook.write_text(HOOK)
    out = tmp_path / "out"
    proc = shimgen("build", "--driver", str(evil), "-o", str(out), "--hook", str(hook))
    _refused_in_one_line(proc, "the path contains a control character", 1)
    assert not out.exists() or list(out.iterdir()) == []
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "xdg"))
    proc = shimgen("diff", "--no-gates", "--hook", str(hook), str(evil), str(evil), env=env)
    _refused_in_one_line(proc, "the path contains a control character", 2)


def test_a_link_with_a_control_character_to_a_plain_hook_path_is_refused(tmp_path):
    """The path as given is what the build writes (the copy's #line, the summary, shim.json),
    so a control character there is refused, wherever the link leads."""
    target = tmp_path / "plain.c"
    target.write_text(HOOK)
    (tmp_path / "l\rnk.c").symlink_to(target)
    with pytest.raises(ShimgenError, match="the path contains a control character"):
        userhooks.load([str(tmp_path / "l\rnk.c")])


def test_a_link_to_a_hook_path_with_a_control_character_is_refused(tmp_path):
    target = tmp_path / "a\rb.c"
    target.write_text(HOOK)
    (tmp_path / "plain.c").symlink_to(target)
    with pytest.raises(ShimgenError, match="the path contains a control character"):
        userhooks.load([str(tmp_path / "plain.c")])


# ---- the size limit ------------------------------------------------------------------------

def test_a_hook_file_over_its_limit_is_refused_never_cut(tmp_path):
    """A file one byte over MAX_BYTES is refused; so two such files that share their first
    MAX_BYTES bytes never share a digest (the cached shim's key). At the limit it is read
    whole."""
    body = HOOK.encode() + b"/*"
    pad = userhooks.MAX_BYTES - len(body) - 2
    at_limit = tmp_path / "at.c"
    at_limit.write_bytes(body + b"x" * pad + b"*/")
    (loaded,) = userhooks.load([str(at_limit)])
    assert len(loaded.data) == userhooks.MAX_BYTES
    for tail in (b"*/\n", b"*/ "):
        over = tmp_path / f"over{len(tail)}{tail[-1]}.c"
        over.write_bytes(body + b"x" * pad + tail)
        with pytest.raises(ShimgenError, match=f"larger than {userhooks.MAX_BYTES} bytes"):
            userhooks.file_digest([str(over)])


# ---- the build's copy ----------------------------------------------------------------------

@pytest.mark.parametrize("mode", [0o600, 0o640])
def test_a_builds_copy_of_a_hook_file_is_never_more_readable(evil, tmp_path, mode):
    """Built under umask 000: the copy in src/user/ has the file's read bits, no more."""
    hook = _hook_in(tmp_path / "mine")
    hook.chmod(mode)
    out = tmp_path / "out"
    proc = shimgen("build", "--driver", str(evil), "-o", str(out), "--hook", str(hook),
                   prefix=["sh", "-c", 'umask 000; exec "$@"', "sh"])
    assert proc.returncode == 0, proc.stderr
    (copy,) = out.glob("cudashim-*-hooks/src/user/*.c")
    assert os.stat(copy).st_mode & 0o777 == mode
    assert copy.read_bytes().endswith(HOOK.encode())


# ---- shimgen_hook_say ----------------------------------------------------------------------

SAY_HOOK = """#include <shimgen/hook.h>

__attribute__((constructor(101))) static void early(void)
{
    shimgen_hook_say("from the constructor");
}

SHIMGEN_HOOK(CUresult, cuDriverGetVersion, (int *version))
{
    shimgen_hook_say("two\\nshimgen: a forged line\\rthree\\n");
    return SHIMGEN_REAL(cuDriverGetVersion)(version);
}
"""

VERSION_CMD = ("import ctypes; v = ctypes.c_int(); "
               "print(ctypes.CDLL('libcuda.so.1').cuDriverGetVersion(ctypes.byref(v)), v.value)")


@pytest.fixture(scope="module")
def say_shim(evil, tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("say")
    hook = work / "say.c"
    hook.write_text(SAY_HOOK)
    return make_shim(evil, work / "out", require_real=False, user_hooks=(str(hook),)).library


def _run(evil: Path, shim: Path, **extra: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHIMGEN_")}
    env.update(LD_PRELOAD=str(shim), SHIMGEN_DRIVER=str(evil), **extra)
    proc = subprocess.run([sys.executable, "-c", VERSION_CMD], env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.stdout.split() == ["0", "12040"], proc.stderr
    return proc


def test_hook_say_writes_one_line_in_the_notice_file_from_a_constructor_too(evil, say_shim,
                                                                            tmp_path):
    """The constructor's line (before the shim's own constructor ran) goes to the notice
    file as `shimgen run` sets it, not to stderr; an LF or CR in a line is a space, so no
    line is forged."""
    notices = tmp_path / "notices.log"
    proc = _run(evil, say_shim, SHIMGEN_NOTICE_FILE=str(notices))
    assert "hook" not in proc.stderr, proc.stderr
    lines = [re.sub(r"^\[pid \d+\] ", "", ln) for ln in notices.read_text().split("\n")]
    assert lines == ["shimgen: hook: from the constructor",
                     "shimgen: hook: two shimgen: a forged line three", ""], lines


def test_hook_say_is_silent_under_shimgen_quiet(evil, say_shim, tmp_path):
    notices = tmp_path / "notices.log"
    proc = _run(evil, say_shim, SHIMGEN_NOTICE_FILE=str(notices), SHIMGEN_QUIET="1")
    assert "hook" not in proc.stderr, proc.stderr
    assert not notices.exists() or notices.read_text() == ""
