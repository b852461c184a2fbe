"""Render the shim's sources from the model with Jinja2 (templates/ holds every file)."""

from __future__ import annotations

import json
from pathlib import Path

import jinja2

from . import __version__
from .cuda import ATTRIBUTES as ATTRIBUTE_NAMES
from .errors import ShimgenError
from .hooks import FEATURES
from .model import ShimModel


def templates_dir() -> Path:
    """templates/ of a source checkout, or the copy installed as shimgen.templates."""
    here = Path(__file__).resolve().parent
    for candidate in (here.parent / "templates", here / "templates"):
        if (candidate / "stubs.S.j2").is_file():
            return candidate
    raise ShimgenError(f"shimgen's templates are missing (looked in {here.parent}/templates)")


def c_string(value: object) -> str:
    """A C string literal (JSON's escaping is a subset of C's for these inputs)."""
    return json.dumps(str(value), ensure_ascii=True)


def comment_safe(value: object) -> str:
    """Text for a banner line inside /* */ or after #: no comment terminator, one line.
    (Paths with control characters are refused earlier, in elf.check_path_text.)"""
    return str(value).replace("*/", "*\\/").replace("\n", " ")


def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
        autoescape=False,
    )
    env.filters["c_string"] = c_string
    env.filters["comment_safe"] = comment_safe
    return env


def hook_source_name(template: str) -> str:
    return "hook_" + template.removesuffix(".j2")


def outputs(model: ShimModel) -> list[tuple[str, str]]:
    """(template, output file) pairs: the whole generated source tree."""
    pairs = [
        ("shim.h.j2", "shim.h"),
        ("stubs.S.j2", "stubs.S"),
        ("table.c.j2", "table.c"),
        ("runtime.c.j2", "runtime.c"),
        ("libcudashim.map.j2", "libcudashim.map"),
        ("meson.build.j2", "meson.build"),
    ]
    pairs += [(f"hooks/{t}", hook_source_name(t)) for t in model.hook_templates]
    return pairs


def render(model: ShimModel, dest: Path) -> list[Path]:
    """Write every generated file into `dest`; returns the paths written."""
    env = environment()
    context = {
        "model": model,
        "shimgen_version": __version__,
        "hooked_names": {f.name for f in model.hooked},
        "hook_sources": [hook_source_name(t) for t in model.hook_templates],
        "features": FEATURES,
        "attribute_names": sorted(ATTRIBUTE_NAMES.items()),
    }
    written = []
    for template, name in outputs(model):
        text = env.get_template(template).render(**context)
        path = dest / name
        path.write_text(text)
        written.append(path)
    return written
