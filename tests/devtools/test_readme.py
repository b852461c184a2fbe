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
