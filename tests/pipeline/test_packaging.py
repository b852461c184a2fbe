"""pyproject.toml: a regular (non-editable) install builds without a setuptools warning, and
its wheel carries every template and runtime file the generator renders and copies."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _tracked_copy(dest: Path) -> Path:
    """The repository's tracked files (a build writes build/ and *.egg-info into its tree)."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                           check=True).stdout.decode().split("\0")
    for name in filter(None, files):
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest


def test_wheel_builds_without_warnings_and_carries_templates_and_runtime(tmp_path):
    src = _tracked_copy(tmp_path / "src")
    out = tmp_path / "wheel"
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "-w",
                           str(out), str(src)], capture_output=True, text=True, timeout=600)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    # setuptools' own warnings (deprecations, data packages not listed); not the note that
    # byte-compiling is off, which follows PYTHONDONTWRITEBYTECODE in the environment
    warnings = [ln for ln in log.splitlines()
                if re.search(r"SetuptoolsDeprecationWarning|SetuptoolsWarning|_Warning|"
                             r"would be ignored|is deprecated", ln)]
    assert warnings == [], warnings
    (wheel,) = out.glob("shimgen-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    want = {f"shimgen/templates/{p.name}" for p in (ROOT / "templates").glob("*.j2")}
    want |= {f"shimgen/runtime/{p.relative_to(ROOT / 'runtime').as_posix()}"
             for p in (ROOT / "runtime").rglob("*") if p.is_file()}
    assert len(want) > 25 and want <= names, sorted(want - names)
