"""Faults at run time, the files and the security side: hostile trace paths (symlinks, a
directory the user cannot write, a FIFO, an existing file), the size of a trace, files on
disk never modified, the shim's imports, and set-user-ID programs (docs/security.md). The
gate-writing rules are tested in tests/gates/test_gate_runtime.py."""


import json
import os
import re
import shutil
import stat
import tempfile
from pathlib import Path

import pytest

from shimgen.cuda import CUDA_ERROR_SHARED_OBJECT_INIT_FAILED as NO_DRIVER
from shimgen.cuda import returns_result
from shimgen.driver.library import read_driver
from shimgen.shim.build import build
from shimgen.shim.model import build_model
from shimgen.shim.pipeline import build_command
from tests.faultkit import (
    ROOT,
    clean_env,
    no_dac_prefix,
    run,
    sha256,
    shim_lines,
    trace_tables,
)

# ---- trace files ----

@pytest.mark.parametrize("target", ["existing", "dangling"])
def test_trace_file_symlink_is_not_followed(shims, probes, tmp_path, target):
    """SHIMGEN_TRACE_FILE names a symlink: it is not followed (O_NOFOLLOW). The file it
    points to is not touched (or not created), and one line says why there is no trace."""
    s = shims[0]
    victim = tmp_path / "victim.txt"
    if target == "existing":
        victim.write_text("not a trace\n")
        before = victim.stat()
    link = tmp_path / "trace.json"
    link.symlink_to(victim)
    proc = run([probes / "faults_calls", "calls", "3"],
               s.env(SHIMGEN_TRACE="1", SHIMGEN_TRACE_FILE=str(link)))
    assert shim_lines(proc.stderr) == [
        f"shimgen: cannot write trace file {link}: Too many levels of symbolic links"]
    assert link.is_symlink()
    if target == "existing":
        assert victim.read_text() == "not a trace\n"
        assert victim.stat().st_mtime_ns == before.st_mtime_ns
    else:
        assert not victim.exists()


def test_trace_file_in_a_directory_the_user_cannot_write(shims, probes, tmp_path):
    """A directory the user cannot write (root without CAP_DAC_OVERRIDE, as a user is): one
    line per process, the calls work, nothing is created."""
    prefix = no_dac_prefix()
    if prefix is None:
        pytest.skip("cannot drop CAP_DAC_OVERRIDE here (no setpriv, or not allowed)")
    s = shims[0]
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    trace = ro / "trace.json"
    proc = run([*prefix, probes / "faults_calls", "forkexec", "2", "3"],
               s.env(SHIMGEN_TRACE="1", SHIMGEN_TRACE_FILE=str(trace)))
    lines = shim_lines(proc.stderr)
    assert len(lines) == 3, proc.stderr  # the parent and its two children
    for ln in lines:
        assert re.fullmatch(rf"shimgen: cannot write trace file {re.escape(str(trace))}"
                            r"(\.\d+)?: Permission denied", ln), ln
    assert list(ro.iterdir()) == []


def test_trace_file_is_created_0600_by_the_user(shims, probes, tmp_path):
    """Created with mode 0600 (also under umask 0: the user's alone, as every file the shim
    makes), as a regular file owned by the process's user."""
    s = shims[0]
    trace = tmp_path / "trace.json"
    run([probes / "faults_calls", "calls", "3"],
        s.env(SHIMGEN_TRACE="1", SHIMGEN_TRACE_FILE=str(trace)), umask=0)
    st = trace.lstat()
    assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600
    assert st.st_uid == os.geteuid()


def test_child_trace_does_not_clobber_an_existing_file(shims, probes, tmp_path):
    """The plain name is already this job's (a file stamped with the job's time, as the
    shim stamps its own: output/claim.c), so both processes write <name>.<pid>; the child finds a
    file there, which it never replaces: one line, and the file is untouched."""
    s = shims[0]
    trace = tmp_path / "trace.json"
    trace.write_text("an earlier process of this job\n")
    os.utime(trace, ns=(1_700_000_000_123_456_789, 1_700_000_000_123_456_789))
    proc = run([probes / "faults_calls", "pidfile", "3"],
               s.env(SHIMGEN_TRACE="1", SHIMGEN_TRACE_FILE=str(trace),
                     SHIMGEN_TRACE_JOB="1700000000.123456789"))
    child = re.search(r"^child (\d+) precious$", proc.stdout, re.M).group(1)
    parent = re.search(r"^pid parent (\d+) ", proc.stdout, re.M).group(1)
    assert trace.read_text() == "an earlier process of this job\n"
    assert json.loads(Path(f"{trace}.{parent}").read_text())["calls"] == {
        "cuDriverGetVersion": 3}
    assert Path(f"{trace}.{child}").read_text() == "precious\n"
    lines = shim_lines(proc.stderr)
    assert len(lines) == 1 and f"{trace}.{child}" in lines[0], proc.stderr


def test_a_directory_locked_past_the_wait_gives_the_pid_name(shims, probes, tmp_path):
    """Another writer of the job holds the directory's lock longer than the shim waits for
    it: the shim cannot check the plain name under the lock, so it never takes it; it
    writes <name>.<pid>, every call in it."""
    import fcntl

    s = shims[0]
    d = tmp_path / "d"
    d.mkdir()
    trace = d / "trace.json"
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        run([probes / "faults_calls", "calls", "3"],
            s.env(SHIMGEN_TRACE="1", SHIMGEN_TRACE_FILE=str(trace),
                  SHIMGEN_TRACE_JOB="1700000000.5"))
    finally:
        os.close(fd)
    (written,) = d.iterdir()
    assert re.fullmatch(r"trace\.json\.\d+", written.name), written
    assert json.loads(written.read_text())["calls"] == {"cuDriverGetVersion": 3}


def test_trace_file_fifo_without_reader_does_not_hang(shims, probes, tmp_path):
    s = shims[0]
    fifo = tmp_path / "trace.json"
    os.mkfifo(fifo)
    proc = run([probes / "faults_calls", "calls", "3"],
               s.env(SHIMGEN_TRACE="1", SHIMGEN_TRACE_FILE=str(fifo)), timeout=10)
    lines = shim_lines(proc.stderr)
    assert len(lines) == 1 and lines[0].startswith(f"shimgen: cannot write trace file {fifo}")


@pytest.mark.parametrize("mode", ["1", "time"])
def test_trace_size_is_bounded_by_the_number_of_functions(shim, probes, tmp_path, mode):
    """Every exported function called, 1 and 1000 times each (the driver is missing, so each
    is the shim's failure stub). The JSON trace has one line per called function (two with
    time) plus a fixed frame of at most 20 lines: N + 12 lines with SHIMGEN_TRACE=1 and
    2N + 17 with time today (N = exported functions, 600 to 643 here). More calls only make
    the numbers longer. The stderr table has N + 2 lines. The failing driver is reported
    once, not per call. With time, each function that returned an error has one more line,
    under "errors" (at most 256 here: one thread's error slots)."""
    names = read_driver(shim.driver.path).function_names()
    n = len(names)
    gone = str(tmp_path / "gone" / "libcuda.so.1")
    size = {}
    for reps in (1, 1000):
        trace = tmp_path / f"trace{reps}.json"
        proc = run([probes / "faults_calls", "all", reps, str(NO_DRIVER)],
                   shim.env(SHIMGEN_DRIVER=gone, SHIMGEN_TRACE=mode,
                            SHIMGEN_TRACE_FILE=str(trace)), input="\n".join(names) + "\n")
        assert f"all functions {n} calls {n * reps} expected {n * reps}" in proc.stdout
        assert len(shim_lines(proc.stderr)) == 1  # cannot load the real CUDA driver
        text = trace.read_text()
        data = json.loads(text)
        assert data["calls"] == dict.fromkeys(names, reps)
        lines = text.splitlines()
        per_function = [ln for ln in lines if re.match(r'    "cu\w+": (\d|\{"calls")', ln)]
        assert len(per_function) == (n if mode == "1" else 2 * n)  # calls (and time) blocks
        # with time, every call is an error return (the failure stub's): one line per function
        # kept, at most the thread's 256 slots, the rest counted in error_overflow
        errors = [ln for ln in lines if re.match(r'    "cu\w+": \{"\d', ln)]
        counted = sum(map(returns_result, names))  # the rest return no CUresult (cudbg*)
        assert len(errors) == (0 if mode == "1" else min(counted, 256))
        if mode == "time":
            assert (sum(sum(c.values()) for c in data["errors"].values())
                    + data["error_overflow"]) == counted * reps
        # the fixed frame: 14 lines with counts, 21 with times (keys, braces, the errors' names)
        assert len(lines) - len(per_function) - len(errors) <= 24
        size[reps] = len(text)
    if mode == "1":
        assert size[1000] - size[1] == 3 * n  # "1" became "1000" on each line
        proc = run([probes / "faults_calls", "all", "1", str(NO_DRIVER)],
                   shim.env(SHIMGEN_DRIVER=gone, SHIMGEN_TRACE=mode),
                   input="\n".join(names) + "\n")
        assert len(proc.stderr.splitlines()) == 1 + n + 2
        assert trace_tables(proc.stderr) == [dict.fromkeys(names, 1)]


# ---- security properties (docs/security.md) ----

def test_files_on_disk_are_never_modified(shims, probes, tmp_path):
    """The driver and the shim files are byte for byte the same, with the same mtime and
    mode, after runs that write gate bytes in the driver's memory (fake driver, SHIMGEN_GATES)
    and that trace every route of a real driver."""
    from tests.gates.test_gate_runtime import fake_plan

    fake = probes / "libfake_libcuda_for_tests.so"
    img = read_driver(fake, require_real=False)
    gate_lib = build(build_model(img, build_command(fake, gates="PLAN"), gates=fake_plan(fake)),
                     tmp_path).library
    s = shims[0]
    files = [fake, gate_lib, s.driver.path, s.library]

    def state():
        return {f: (sha256(f), f.stat().st_mtime_ns, f.stat().st_mode) for f in files}

    before = state()
    proc = run([probes / "gateprobe"], dict(clean_env(), LD_PRELOAD=str(gate_lib),
                                             SHIMGEN_GATES="gdr,dmabuf", SHIMGEN_TRACE="time"))
    assert "SHIMGEN_GATES=gdr,dmabuf armed" in proc.stderr
    assert re.search(r"^dev 0 .* byte40 0x78 byte44 0x0c$", proc.stdout, re.M)  # written
    run([probes / "routes", s.driver.path], s.env(SHIMGEN_TRACE="time"))
    assert state() == before


# Library calls that could change a file, memory protection, another process, or start a
# program. The shim imports none of them; open() and openat() are its only ways to open a file
# (the output's directory, then the output in it, with O_NOFOLLOW or O_EXCL), so those are all
# there is to review. The output files are written whole (runtime/output/output.c): linkat,
# renameat, renameat2 and unlinkat, relative to that directory, give a name to the complete
# temporary file, put it over the target, or remove it after a failed write; the path forms
# stay out. unlinkat also removes a binary trace file the shim made itself (O_EXCL) and could
# not grow on a full disk (runtime/tracefile/tracefile.c, and fork.c for a forked child's
# file); no other file of the runtime names any of them.
NAME_CALLS_WHERE = {"output/output.c": {"linkat", "renameat", "renameat2", "unlinkat"},
                    "tracefile/tracefile.c": {"unlinkat"}, "tracefile/fork.c": {"unlinkat"}}
# futimens: only on the shim's own complete temporary file (the job's stamp, output/claim.c);
# flock: only of the directory the trace is written into, while it takes a shared name.
OUTPUT_FILE_CALLS = {"linkat", "renameat", "renameat2", "unlinkat", "futimens", "flock"}
# The binary trace file of SHIMGEN_TRACE_DIR (runtime/tracefile/tracefile.c and, for a forked
# child, tracefile/fork.c, and only there): its directory made when missing (mkdir), the file
# grown (fallocate, or a one-byte pwrite where the file system has no fallocate) and a forked
# child's block bookkeeping written (pwrite) into the process's own new file, made
# O_EXCL|O_NOFOLLOW.
TRACE_FILE_CALLS = {"mkdir", "pwrite", "pwrite64", "fallocate", "fallocate64"}
TRACE_FILE_SOURCES = {"tracefile/tracefile.c", "tracefile/fork.c", "tracefile/space.c"}
# The shared memory budget's books (runtime/budget/budget.c, and only there): made whole
# under a name of their own (ftruncate), linked into place (link), that name removed
# (unlink); mapped shared from that file.
BOOKS_CALLS = {"link", "unlink", "ftruncate", "ftruncate64"}
BOOKS_SOURCE = "budget/budget.c"
FORBIDDEN_IMPORTS = {
    "unlink", "rename", "remove", "truncate",
    "truncate64", "ftruncate", "ftruncate64", "chmod", "fchmod", "fchmodat", "chown", "fchown",
    "lchown", "fchownat", "link", "symlink", "symlinkat", "mkdir", "mkdirat",
    "rmdir", "pwrite", "pwrite64", "pwritev", "pwritev2", "mprotect", "pkey_mprotect",
    "mremap", "ptrace", "process_vm_writev", "system", "popen", "execve", "execv",
    "execvp", "execvpe", "execl", "execlp", "execle", "fexecve", "fork", "vfork",
    "posix_spawn", "posix_spawnp", "clone", "dlmopen", "syscall", "socket", "connect",
}


def imported_functions(lib: Path) -> set[str]:
    from elftools.elf.elffile import ELFFile

    with open(lib, "rb") as fh:
        dynsym = ELFFile(fh).get_section_by_name(".dynsym")
        return {sym.name.split("@")[0] for sym in dynsym.iter_symbols()
                if sym.name and sym["st_shndx"] == "SHN_UNDEF"}


def test_shim_imports_nothing_that_changes_files_or_memory_protection(shims, probes, tmp_path):
    from tests.gates.test_gate_runtime import fake_plan

    fake = probes / "libfake_libcuda_for_tests.so"
    img = read_driver(fake, require_real=False)
    gate_lib = build(build_model(img, ["shimgen"], gates=fake_plan(fake)), tmp_path).library
    for lib in [s.library for s in shims] + [gate_lib]:
        imports = imported_functions(lib)
        assert "write" in imports and "open64" in imports | {"open"}  # the check sees imports
        assert imports & (FORBIDDEN_IMPORTS - TRACE_FILE_CALLS - BOOKS_CALLS) == set(), lib
        assert OUTPUT_FILE_CALLS <= imports, lib  # the list above is what it uses
        opens = {name for name in imports if "open" in name}
        assert opens <= {"open", "open64", "openat", "openat64", "dlopen"}, (lib, opens)
    # mmap is imported for per-thread memory that a signal handler's first call may need
    # (no malloc there): every call in the runtime maps anonymous, private, read-write
    # memory, never executable; only tracefile/ maps a file (tracefile.c, and fork.c for a
    # forked child): the trace file it made (fd).
    runtime = ROOT / "runtime"
    sources = {f.relative_to(runtime).as_posix(): f.read_text()
               for f in sorted(runtime.rglob("*.c"))}
    for name, text in sources.items():
        calls = re.findall(r"\bmmap\(([^;]*)\);", text)
        for args in calls:
            flat = " ".join(args.split())
            assert "PROT_READ | PROT_WRITE," in flat and "PROT_EXEC" not in flat, flat
            assert ("MAP_PRIVATE | MAP_ANONYMOUS" in flat and "-1, 0" in flat) or (
                name in TRACE_FILE_SOURCES | {BOOKS_SOURCE} and "MAP_SHARED" in flat
                and ", fd, " in flat), (name, flat)
        uses = {c for c in TRACE_FILE_CALLS if re.search(rf"\b{c}\(", text)}
        assert name in TRACE_FILE_SOURCES or not uses, (name, uses)
        books = {c for c in BOOKS_CALLS if re.search(rf"(?<![\w.>]){c}\(", text)}
        assert name == BOOKS_SOURCE or not books, (name, books)
        names = {c for c in ("linkat", "renameat", "renameat2", "unlinkat")
                 if re.search(rf"\b{c}\(", text)}
        assert names <= NAME_CALLS_WHERE.get(name, set()), (name, names)
    assert sum("mmap(" in t for t in sources.values()) >= 3, "the check sees the mmap calls"


@pytest.fixture(scope="module")
def setuid_probe(probes):
    """faults_setuid copied set-user-ID root, run as uid 65534 through setpriv: ruid 65534,
    euid 0, AT_SECURE set by the kernel. The copy and its directory belong to a group no
    one has (mode 4750 and 0750), so no other user of the machine can run it while it
    exists; the test's process gets that group from setpriv."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv to make and run a set-user-ID program")
    import grp

    def unused(gid: int) -> bool:
        try:
            grp.getgrgid(gid)
        except KeyError:
            return True
        return False

    gid = next(g for g in range(64900, 65500) if unused(g))
    # set-user-ID takes effect only on a file system mounted without nosuid
    places = [Path(tempfile.gettempdir()), Path("/var/tmp"), ROOT / "build"]
    suid_ok = [d for d in places if d.is_dir() and not os.statvfs(d).f_flag & os.ST_NOSUID]
    if not suid_ok:
        pytest.fail(f"no directory among {', '.join(map(str, places))} allows set-user-ID")
    where = Path(tempfile.mkdtemp(prefix="shimgen-setuid-", dir=suid_ok[0]))
    try:
        os.chown(where, 0, gid)
        where.chmod(0o750)
        exe = where / "faults_setuid"
        shutil.copyfile(probes / "faults_setuid", exe)
        os.chown(exe, 0, gid)
        exe.chmod(0o4750)
        yield ["setpriv", "--reuid=65534", f"--regid={gid}", "--clear-groups", str(exe)]
    finally:
        shutil.rmtree(where, ignore_errors=True)


def as_nobody(setuid_cmd: list[str], lib: Path, env: dict[str, str]) -> dict[str, int]:
    proc = run([*setuid_cmd, lib], env, timeout=60)
    m = re.search(r"^ruid (\d+) euid (\d+) secure (\d+) preloaded (\d) rc (-?\d+) version (\d+)$",
                  proc.stdout, re.M)
    assert m, proc.stdout + proc.stderr
    got = dict(zip(["ruid", "euid", "secure", "preloaded", "rc", "version"],
                   map(int, m.groups()), strict=True))
    if (got["ruid"], got["euid"], got["secure"]) != (65534, 0, 1):
        pytest.skip(f"set-user-ID does not take effect here (nosuid, no_new_privs?): {got}")
    return got


def test_setuid_program_does_not_load_a_preloaded_shim(shims, probes, setuid_probe, tmp_path):
    """glibc ignores LD_PRELOAD entries with a '/' in a set-user-ID program (AT_SECURE), and
    loads a bare name only from the system directories, and only if that file is set-user-ID
    itself: a user's LD_PRELOAD cannot bring the shim into a privileged program. The same
    environment does preload it into an ordinary copy of the program (the control)."""
    s = shims[0]
    trace = tmp_path / "trace.json"
    env = s.env(SHIMGEN_TRACE="1", SHIMGEN_TRACE_FILE=str(trace))
    got = as_nobody(setuid_probe, s.driver.path, env)
    assert (got["preloaded"], got["rc"], got["version"]) == (0, 0, s.cuda_version)
    assert not trace.exists()
    control = run([probes / "faults_setuid", s.driver.path], env).stdout
    assert " preloaded 1 rc 0 " in control
    assert json.loads(trace.read_text())["calls"] == {"cuDriverGetVersion": 1}



def test_setuid_program_ignores_shimgen_trace_file(shims, setuid_probe, tmp_path):
    """A set-user-ID root program that loads the shim itself (dlopen by path, which glibc
    allows): SHIMGEN_TRACE_FILE from the user must not make it write a file as root in a
    directory only root may write."""
    s = shims[0]
    root_only = tmp_path / "root-only"
    root_only.mkdir(mode=0o700)
    trace = root_only / "trace.json"
    got = as_nobody(setuid_probe, s.library,
                    dict(clean_env(), SHIMGEN_TRACE="1", SHIMGEN_TRACE_FILE=str(trace)))
    assert (got["rc"], got["version"]) == (0, s.cuda_version)
    assert not trace.exists()


def test_setuid_program_ignores_shimgen_driver(shims, probes, setuid_probe):
    """The same program: SHIMGEN_DRIVER from the user must not choose the library that is
    loaded (and run) as root. Here it names the fake driver, whose cuDriverGetVersion says
    12345; the shim must load the driver it was built for."""
    s = shims[0]
    got = as_nobody(setuid_probe, s.library,
                    dict(clean_env(),
                         SHIMGEN_DRIVER=str(probes / "libfake_libcuda_for_tests.so")))
    assert (got["rc"], got["version"]) == (0, s.cuda_version)
