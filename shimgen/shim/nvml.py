"""The NVML shim (libnvidia-ml.so.1): its model, its sources rendered and its build, by the
libcuda shim's pipeline (driver/ reads the library, templates/ renders the tables, build.py
runs meson and installs the result whole) with NVML's own facts (shimgen/driver/nvml.py), its own
templates (templates/nvml_*.j2) and its own runtime (runtime/nvml/, base/saferead.c, the
architecture's nvml_stubs.S). `shimgen build --nvml`, and `shimgen run`'s cache."""

from __future__ import annotations

import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path

from .. import __version__, runenv
from ..arches import ARCHES
from ..driver import nvml
from ..errors import ShimgenError
from .sources import runtime_dir

# (template, generated file) of every NVML shim.
GENERATED = (
    ("nvml_facts.h.j2", "nvml_facts.h"),
    ("nvml_functions.inc.j2", "nvml_functions.inc"),
    ("nvml_answers.inc.j2", "nvml_answers.inc"),
    ("nvml_table.c.j2", "nvml_table.c"),
    ("nvmlshim.map.j2", f"lib{runenv.NVML_SHIM_TARGET}.map"),
    ("nvml_meson.build.j2", "meson.build"),
)
# The runtime/ files an NVML shim is built from (the architecture's entry code besides).
RUNTIME = ("nvml/nvml.h", "nvml/load.c", "nvml/resolve.c", "nvml/answers.c", "nvml/view.c",
           "nvml/dlopen.c", "budget/view.h", "base/saferead.c", "base/saferead.h")
STUBS = ("nvml_stubs.S", "asm.h")  # in runtime/arch/<arch>/
NVML_PREFIX = "nvmlshim"


@dataclass(frozen=True)
class Function:
    index: int
    name: str
    answer: nvml.Answer | None  # answered when a limit is set, else forwarded


@dataclass(frozen=True)
class NvmlModel:
    """What is generated for one libnvidia-ml: every export forwarded, in its dynamic
    symbol table's order, those of nvml.ANSWERS answered when a limit is set."""

    driver: object  # a DriverImage
    functions: tuple[Function, ...]
    command: str
    # exported besides the library's functions: the dlopen wrapper (runtime/nvml/dlopen.c)
    extra_exports: tuple[str, ...] = ("dlopen",)
    # what install.check_output and the banners ask of a model
    gates: None = None
    user: None = None
    library_file: str = runenv.NVML_SHIM_LIBRARY  # what build.py installs

    # build.py's steps, rendered by this module's own parts
    def render_layout(self, _model, dest: Path) -> list[Path]:
        return render_layout(self, dest)

    def render(self, _model, dest: Path, generated_only: bool = False) -> list[Path]:
        return render(self, dest, generated_only)

    def manifest(self) -> dict:
        return manifest(self)

    @property
    def hooked(self) -> list[Function]:
        return [f for f in self.functions if f.answer is not None]

    def index(self, name: str) -> int:
        return next((f.index for f in self.functions if f.name == name), -1)


def build_model(image, argv: list[str]) -> NvmlModel:
    if not (runtime_dir() / ARCHES[image.arch].runtime / STUBS[0]).is_file():
        raise ShimgenError(f"NVML library {image.path} is built for {image.arch}: the NVML "
                           "shim is built for x86-64 libraries only, for now")
    answers = {a.name: a for a in nvml.ANSWERS}
    functions = tuple(Function(i, n, answers.get(n))
                      for i, n in enumerate(image.function_names()))
    return NvmlModel(image, functions, shlex.join(argv))


def output_name(image) -> str:
    return f"{NVML_PREFIX}-{image.version}-{image.build_id[:12] or 'nobuildid'}"


def sources(model: NvmlModel) -> list[tuple[str, str]]:
    """(runtime/ file, file in the source tree) of everything copied."""
    arch = ARCHES[model.driver.arch].runtime
    return [(n, n) for n in RUNTIME] + [(f"{arch}/{n}", f"{arch}/{n}") for n in STUBS]


def render_context(model: NvmlModel) -> dict:
    layouts = []
    for layout in nvml.LAYOUTS:
        kind = next(a.kind for a in nvml.ANSWERS if a.layout is layout)
        layouts.append((layout.key, layout.size,
                        [(f, layout.fields.get(f)) for f in nvml.KIND_FIELDS[kind]]))
    compiled = [t for _, t in sources(model) if t.endswith((".c", ".S"))] + ["nvml_table.c"]
    return {
        "model": model, "shimgen_version": __version__, "results": nvml.RESULTS.items(),
        "uuid_buffer": nvml.UUID_BUFFER, "layouts": layouts,
        "layout_keys": {layout.name: layout.key for layout in nvml.LAYOUTS},
        "uuid_index": model.index("nvmlDeviceGetUUID"),
        "index_index": model.index("nvmlDeviceGetIndex"),
        "string_index": model.index(nvml.STRING_RESULT),
        "probe_export": nvml.REQUIRED_FUNCTIONS[0], "name_prefix": nvml.NAME_PREFIX,
        "search_paths": nvml.SEARCH_PATHS, "env": runenv.ENV, "size_units": runenv.SIZE_UNITS,
        "shim_target": runenv.NVML_SHIM_TARGET, "soname": nvml.SONAME, "sources": compiled,
        "include_dirs": [ARCHES[model.driver.arch].runtime, "base"],
    }


def render_layout(model: NvmlModel, dest: Path) -> list[Path]:
    """The source tree as meson setup needs it: meson.build rendered, the runtime copied,
    the other generated files empty (render writes them)."""
    from .render import environment

    written = []
    for source, name in sources(model):
        path = dest / name
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(runtime_dir() / source, path)
        written.append(path)
    for template, name in GENERATED:
        path = dest / name
        text = environment().get_template(template).render(**render_context(model)) \
            if name == "meson.build" else ""
        path.write_text(text)
        written.append(path)
    return written


def render(model: NvmlModel, dest: Path, generated_only: bool = False) -> list[Path]:
    """Every file of the source tree (with `generated_only`, the generated ones)."""
    from .render import environment

    written = [] if generated_only else render_layout(model, dest)
    context = render_context(model)
    for template, name in GENERATED:
        path = dest / name
        path.write_text(environment().get_template(template).render(**context))
        written.append(path)
    return list(dict.fromkeys(written))


def manifest(model: NvmlModel) -> dict:
    """shim.json of an NVML shim."""
    return {"shimgen_command": model.command, "driver": str(model.driver.real_path),
            "driver_given": str(model.driver.path), "driver_version": model.driver.version,
            "build_id": model.driver.build_id, "soname": nvml.SONAME,
            "functions": len(model.functions),
            "exports": [f.name for f in model.functions],
            "hooks": [f.name for f in model.hooked],
            "extra_exports": list(model.extra_exports)}


def make_nvml_shim(path: Path | str, out_root: Path, *, out_option: str | None = None,
                   require_real: bool = True, name: str | None = None,
                   identity: dict | None = None):
    """Read the NVML file `path`, check it, and build its shim into `out_root/name`
    (default: output_name). Returns build.BuildResult."""
    from ..driver import read_nvml
    from . import build as _build
    from .install import check_output

    image = read_nvml(path, require_real=require_real)
    argv = ["shimgen", "build", "--nvml", str(image.path)]
    if out_option is not None:
        argv += ["--out", out_option]
    model = build_model(image, argv)
    check_output(model, out_root, name or output_name(image))
    return _build.build(model, out_root, name=name or output_name(image), identity=identity)


def summary(result) -> str:
    model = result.model
    return "\n".join([
        f"nvml       {model.driver.real_path}",
        f"version    {model.driver.version}   build-id {model.driver.build_id or 'none'}",
        f"forwarded  {len(model.functions)} functions ({len(model.hooked)} answered when a "
        f"limit is set: {', '.join(f.name for f in model.hooked) or 'none'})",
        f"shim       {result.library}",
        f"time       {result.seconds:.2f} s",
    ])
