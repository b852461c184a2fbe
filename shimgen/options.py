"""The values of options that name a path, checked as the commands take them: not empty,
text a path can hold (elfnotes.check_path_text), and the default when none is given. A bad
one is a ShimgenError: one line, exit 1."""

from __future__ import annotations

from pathlib import Path

from .errors import ShimgenError


def path_option(value: str | None, option: str, what: str, default=lambda: None):
    """A path given with `option`, checked as text; `default()` when it is not given."""
    from .driver import check_path_text  # not driver/elf.py: nothing heavy on `run`'s path

    if value is None:
        return default()
    if not value.strip():
        raise ShimgenError(f"{option}: empty path")
    check_path_text(value, what)
    return Path(value)


def driver_path(value: str | None) -> Path:
    """--driver, or the driver `ldconfig -p` would pick."""
    def default() -> Path:
        from .driver import default_driver

        return default_driver()

    return path_option(value, "--driver", "driver", default)


def nvml_path(value: str | None) -> Path:
    """build's --nvml PATH, or the installed libnvidia-ml."""
    def default() -> Path:
        from .driver import default_nvml

        return default_nvml()

    return path_option(value, "--nvml", "NVML library", default)
