"""The README is CI's script: its "Try it" commands (the ```sh blocks of that section) run as
they are written, in order, in one `bash -e`, from a fresh shim cache and a scratch working
directory (the repository's examples/ beside it), and every line of the outputs it shows
that does not depend on the machine (the calls, the codes, the errors, the gates, the bytes
changed; not times, pids or paths) is printed by them. The first run's command, run once
more without --force, is refused in the line the README shows. docs/testing.md says how CI follows
the README."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
# what a machine, a moment or a working directory changes (times, pids, paths, ~), and a
# line the README shortens (...)
VARIES = re.compile(r"~|/|, into |\.\.\.|\(built in |pid \d|^time |^ +\d+\.\d+ +\d|^version |"
                    r"^driver +\S+ \(")


def try_section() -> str:
    start = README.index("## Try it")
    return README[start:README.index("\n## ", start + 1)]


def blocks(text: str, lang: str) -> list[str]:
    """The fenced blocks of `text` whose fence names `lang` ('' for none), in order."""
    out: list[str] = []
    inside: str | None = None
    for line in text.splitlines():
        if line.startswith("```"):
            if inside is None:
                inside, body = line[3:].strip(), []
            else:
                if inside == lang:
                    out.append("\n".join(body) + "\n")
                inside = None
        elif inside is not None:
            body.append(line)
    return out


def test_the_try_it_commands_run_as_written_and_print_what_the_readme_shows(drivers,
                                                                             tmp_path):
    from devtools.driverfetch import cache_dir

    section = try_section()
    script = "\n".join(blocks(section, "sh"))
    assert "shimgen run" in script and "shimgen gates" in script and "LD_PRELOAD" in script
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"),
               SHIMGEN_DRIVER_CACHE=str(cache_dir()), PYTHONPATH=str(ROOT),
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    env.pop("SHIMGEN_TRACE", None)
    proc = subprocess.run(["bash", "-e", "-c", script], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    said = set((proc.stdout + proc.stderr).splitlines())
    shown = [ln for b in blocks(section, "") for ln in b.splitlines()
             if ln.strip() and not VARIES.search(ln)]
    assert len(shown) > 20, shown
    missing = [ln for ln in shown if ln not in said]
    assert not missing, "\n".join(missing)
    # the first run's command once more, without --force: refused in the line shown
    setup, first = script.splitlines()[0], next(
        ln for ln in script.splitlines() if ln.startswith("shimgen run ") and "--force" not in ln)
    again = subprocess.run(["bash", "-e", "-c", f"{setup}\n{first}"], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=300)
    refused = next(ln for b in blocks(section, "") for ln in b.splitlines() if "--force" in ln)
    assert again.returncode == 1 and again.stdout == "", again
    assert again.stderr.replace(f"{tmp_path.resolve()}/", "") == refused + "\n", again.stderr


def test_the_aarch64_paragraph_fetches_an_arm64_driver_and_names_every_package():
    """The Install section's aarch64 paragraph: the packages the aarch64 shims and tests
    need (the cross compilers, g++ included, the C library, qemu-user), and its first
    command, which prints the path of Debian's arm64 libcuda (an aarch64 ELF file)."""
    from devtools.driverfetch import cache_dir
    from shimgen.arches import ARCHES
    from shimgen.driver import library_arch

    install = README[README.index("## Install"):README.index("## Try it")]
    said = " ".join(install.split())
    for package in [*ARCHES["aarch64"].packages.split(), "g++-aarch64-linux-gnu", "qemu-user"]:
        assert f" {package}" in said, package
    (fetch,) = [ln for b in blocks(install, "sh") for ln in b.splitlines()
                if ln.startswith("arm64=")]
    env = dict(os.environ, SHIMGEN_DRIVER_CACHE=str(cache_dir()), PYTHONPATH=str(ROOT),
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    proc = subprocess.run(["bash", "-e", "-c", f'{fetch}\nprintf %s "$arm64"'], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert Path(proc.stdout).is_file() and library_arch(proc.stdout) == "aarch64", proc.stdout


def test_the_preload_line_names_the_shim_by_an_absolute_path(tmp_path):
    """The README's LD_PRELOAD value, evaluated as its shell would, is the shim's absolute
    path: it still names the shim for a program that something started from elsewhere."""
    line = next(ln for b in blocks(try_section(), "sh") for ln in b.splitlines()
                if "LD_PRELOAD=" in ln)
    value = re.search(r"LD_PRELOAD=(\$\([^)]*\)|\S+)", line).group(1)
    shim = tmp_path / "build" / "cudashim-550.163.01-d47d5faef020" / "libcudashim.so"
    shim.parent.mkdir(parents=True)
    shim.write_bytes(b"")
    proc = subprocess.run(["bash", "-e", "-c", f"v={value}; cd /; printf %s \"$v\""],
                          cwd=tmp_path, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert os.path.isabs(proc.stdout) and Path(proc.stdout).samefile(shim), proc.stdout


def test_the_readme_shows_the_build_time_and_the_cache_key_a_user_sees(drivers):
    """The build lines the README shows say what a build says of its time (and the prose
    next to them the same), and its cache key has the shape a user finds in the cache:
    the version with the stamp of the sources (whose digits vary)."""
    from shimgen.cache.store import key_for
    from shimgen.progress import BUILD_TAKES

    section = try_section()
    said = [ln for b in blocks(section, "") for ln in b.splitlines()
            if ": building the shim for driver" in ln]
    assert len(said) == 2 and all(f"({BUILD_TAKES}" in ln for ln in said), said
    assert f"({BUILD_TAKES}:" in " ".join(section.split())
    driver = next(d for d in drivers if d.version == "550.163.01")
    stamp = re.compile(r"\+src\.[0-9a-f]+-")
    keys = {stamp.sub("+src.S-", k) for k in re.findall(r"shims/([0-9a-f]{40}-[^/)\s]+)",
                                                          section)}
    assert keys == {stamp.sub("+src.S-", key_for(driver.path, None).name)}, keys


def test_the_tiers_times_say_the_machine_they_were_measured_on():
    """The README's times of the test tiers are docs/testing.md's measured ones, and say
    that they are a quiet machine's: a loaded one is slower, never red."""
    develop = README[README.index("## Develop"):]
    text = " ".join(develop.split())
    times = re.findall(r"\d+ min \d\d s", text)
    measured = (ROOT / "docs" / "testing.md").read_text()
    assert len(times) >= 2 and all(t in measured for t in times), times
    assert re.search(r"On a quiet 2-core machine [^.]*the default tier takes", text), text
    assert "under 5 minutes" in text
