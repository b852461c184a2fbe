"""Write the shim's source tree: the generated files, rendered from the model with Jinja2
(templates/ emits data only: tables, lists, build facts), beside a copy of the hand-written
C runtime and assembly (runtime/), so that a build directory is complete on its own."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import jinja2

from .. import __version__, calls, runenv
from ..arches import ARCHES
from ..cuda import (
    ARRAY_FORMAT_BYTES,
    ATTRIBUTES,
    C_RESULTS,
    CODES,
    FEATURES,
    GRAPH_MEM_ATTRS,
    GRAPH_NODE_CONDITIONAL,
    GRAPH_NODE_GRAPH,
    GRAPH_NODE_KERNEL,
    HOOK_TYPES,
    LAUNCH_CONFIG_STREAM_OFFSET,
    LIBCUDA_DIRS,
    MEM_LOCATION_TYPE_DEVICE,
    MEM_PROP_LOCATION_OFFSET,
    MEMPOOL_ATTRS,
    PITCH_ALIGNMENT_ATTRIBUTES,
    RESULTS,
    STREAM_CAPTURE_ACTIVE,
)
from ..errors import ShimgenError
from . import inject
from .memroutes import POOL_KINDS, ROUTES
from .model import SONAME, ShimModel
from .sources import runtime_dir, templates_dir

# (template, generated file), for every shim.
GENERATED: tuple[tuple[str, str], ...] = (
    ("shim.h.j2", "shim.h"),
    ("facts.h.j2", "facts.h"),
    ("tracefields.h.j2", "tracefields.h"),
    ("functions.inc.j2", "functions.inc"),
    ("timedfns.inc.j2", "timedfns.inc"),
    ("table.c.j2", "table.c"),
    ("gateplan.c.j2", "gateplan.c"),
    ("calls_table.c.j2", "calls_table.c"),
    ("userreal.S.j2", "userreal.S"),
    ("hook.h.j2", "include/shimgen/hook.h"),
    ("hook_exports.h.j2", "include/shimgen/exports.h"),
    ("libcudashim.map.j2", f"lib{runenv.SHIM_TARGET}.map"),
    ("meson.build.j2", "meson.build"),  # BUILD_FILE
    ("memroutes.inc.j2", "memroutes.inc"),
)
# runtime/ files named so are hooks, in whatever folder: a shim gets those of its hooks
# (model.hook_sources names them by file name).
HOOK_PREFIX = "hooks_"
# the init-site method's code writer: only in a shim whose gate plan has init-site bytes
INIT_SOURCE = "gates_init.c"
RUNTIME_SUFFIXES = (".c", ".h", ".S")
# The NVML shim's own runtime (shim/nvml.py), which no libcuda shim takes.
NVML_FOLDER = "nvml/"
NVML_ENTRY = "nvml_"
# runtime/arch/<arch>/ (arches.Arch.runtime): one architecture's entry code, taken whole by
# a shim for a driver of that architecture and by no other; every other runtime/ file is C
# that builds for all.
# The user's hook files (--hook): copied under user/, compiled apart (no -Werror), each
# starting with a #line that names the user's file, so the compiler's messages name it.
USER_SOURCE = "user:"
USER_DIR = "user"
INCLUDE_DIR = "include"


def c_string(value: object) -> str:
    """A C string literal (JSON's escaping is a subset of C's for these inputs)."""
    return json.dumps(str(value), ensure_ascii=True)


def comment_safe(value: object) -> str:
    """Text for a banner line inside /* */ or after #: no comment terminator, one line.
    (Paths with control characters are refused earlier, in elf.check_path_text.)"""
    return str(value).replace("*/", "*\\/").replace("\n", " ")


# The kernels' table (runtime/kernels/): its sizes, how a name was learned, CUlaunchConfig.
KERN_FACTS = {"slots": runenv.KERN_SLOTS, "name_max": runenv.KERN_NAME_MAX,
              "name_bytes": runenv.KERN_NAME_BYTES, "name_cut": runenv.KERN_NAME_CUT,
              "streams": runenv.KERN_STREAMS, "sources": runenv.KERN_FROM,
              "config_stream": LAUNCH_CONFIG_STREAM_OFFSET,
              "host_unknown": runenv.KERN_HOST_UNKNOWN,
              "gpu_pairs": runenv.KGPU_PAIRS, "gpu_sub_shift": runenv.KGPU_SUB_SHIFT,
              "gpu_buckets": runenv.KGPU_BUCKETS, "gpu_every": runenv.KGPU_EVERY,
              "gpu_not": runenv.KGPU_NOT, "gpu_track": runenv.KGPU_TRACK,
              "gpu_track_words": runenv.KGPU_TRACK_WORDS, "graph_key": runenv.KERN_GRAPH_KEY,
              "graph_prefix": runenv.KERN_GRAPH_PREFIX, "per_thread": runenv.KERN_STREAM_PER_THREAD,
              "graph_nodes": (GRAPH_NODE_KERNEL, GRAPH_NODE_GRAPH, GRAPH_NODE_CONDITIONAL)}


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


def runtime_files(arch: str) -> list[str]:
    """Every runtime/ file a shim for `arch` may take, as paths under runtime/ (folders
    kept): all of runtime/ less the other architectures' folders."""
    root = runtime_dir()
    others = tuple(f"{a.runtime}/" for a in ARCHES.values() if a.name != arch)
    names = (p.relative_to(root).as_posix() for p in root.rglob("*")
             if p.is_file() and p.suffix in RUNTIME_SUFFIXES)
    return sorted(n for n in names if not n.startswith(others) and not nvml_only(n))


def nvml_only(name: str) -> bool:
    """A runtime/ file of the NVML shim alone (shim/nvml.py): runtime/nvml/, and each
    architecture's nvml_stubs.S."""
    return name.startswith(NVML_FOLDER) or name.rsplit("/", 1)[-1].startswith(NVML_ENTRY)


def copied(model: ShimModel) -> list[str]:
    """The runtime/ files this shim is built from (paths under runtime/): every one but the
    hooks it does not use and the other architectures' entry code."""
    hooks = set(model.hook_sources)
    names = runtime_files(model.driver.arch)
    missing = hooks - {n.rsplit("/", 1)[-1] for n in names}
    if missing:
        raise ShimgenError(f"hook table names {sorted(missing)[0]}, which runtime/ lacks")
    init = model.gates is not None and model.gates.has_init_bytes

    def wanted(n: str) -> bool:
        base = n.rsplit("/", 1)[-1]
        return (not base.startswith(HOOK_PREFIX) or base in hooks) and (base != INIT_SOURCE or init)
    return [n for n in names if wanted(n)]


def include_dirs(model: ShimModel) -> list[str]:
    """The folders of the source tree that the compiler searches besides its top: the
    architecture's own folder, whose asm.h and cpu_arch.h the shared files name."""
    return [ARCHES[model.driver.arch].runtime]


def user_file_name(index: int, path: Path) -> str:
    """Where the user's hook file `index` goes in the source tree (its name kept readable)."""
    stem = "".join(c if c.isalnum() or c in "_-" else "_" for c in path.stem)[:40] or "hook"
    return f"{USER_DIR}/{index}-{stem}.c"


def outputs(model: ShimModel) -> list[tuple[str, str]]:
    """(source, output file) pairs: the whole source tree of a shim. A source is a template
    (rendered), runtime/<file> (copied as it is) or user:<index> (the user's hook file)."""
    user = [(f"{USER_SOURCE}{i}", user_file_name(i, f.path))
            for i, f in enumerate(model.user.files if model.user else ())]
    return list(GENERATED) + [(f"runtime/{n}", n) for n in copied(model)] + user


def compiled(model: ShimModel) -> list[str]:
    """The files meson compiles into the shim with -Werror (the rest are headers, the
    included function list and the user's hook files): the generated tables first (quick to
    compile however long; their data first in the link, as the runtime's assembly expects),
    then the runtime's, largest first, so that ninja starts the longest compiles early and
    no core waits alone on one at the end."""
    runtime = runtime_dir()
    names = [(source, name) for source, name in outputs(model)
             if name.endswith((".c", ".S")) and not name.startswith(USER_DIR + "/")]
    return [name for source, name in sorted(names, key=lambda sn: -(
        (runtime / sn[1]).stat().st_size if sn[0].startswith("runtime/") else 1 << 40))]


def user_compiled(model: ShimModel) -> list[str]:
    """The user's hook files in the source tree, compiled apart (warnings, no -Werror)."""
    return [name for source, name in outputs(model) if source.startswith(USER_SOURCE)]


def user_source_text(path: Path, data: bytes) -> bytes:
    """A user's hook file as the build compiles it: a #line naming the user's file first."""
    return f"#line 1 {c_string(path)}\n".encode() + data


def write_private(path: Path, data: bytes, mode: int) -> None:
    """A copy of a user's file: never more readable than the file (`mode`, its permission
    bits), whatever the umask; the owner may always read and write it."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600)
    with os.fdopen(fd, "wb") as f:
        os.fchmod(fd, 0o600 | (mode & 0o044))
        f.write(data)


def hook_header() -> str:
    """shimgen/hook.h: the same for every driver (`shimgen hook-header` prints it)."""
    return environment().get_template("hook.h.j2").render(
        shimgen_version=__version__, result_names=sorted(RESULTS.items()),
        hook_types=HOOK_TYPES)


def tracefields_context() -> dict:
    """What tracefields.h.j2 is rendered with: runenv's one list of struct fstats' words, each
    with its fold, unit and offset, and the words the exit JSON writes, with their keys."""
    def upper(value: str | None) -> str:
        return (value or "none").upper()

    how = {word: (upper(fold), upper(unit)) for word, fold, unit in runenv.TRACE_FSTATS_WORDS}
    return {
        "fstats_words": [(word, *how[word], runenv.TRACE_FSTATS[word])
                         for word, _, _ in runenv.TRACE_FSTATS_WORDS],
        "fstats_json": [(word, *how[word], key)
                        for _, key, word in runenv.TRACE_FUNCTION_FIELDS if word and key],
        "fstats_size": runenv.TRACE_FSTATS_SIZE,
        "fstats_shift": runenv.TRACE_FSTATS_SHIFT,
    }


def render_context(model: ShimModel, captures: bool = True) -> dict:
    """What every template of a shim is rendered with (without `captures`, all but the
    decoded calls' capture table, the one part that takes time to make)."""
    return {
        "model": model, "shimgen_version": __version__,
        "sources": compiled(model),
        "user_sources": user_compiled(model),
        "include_dir": INCLUDE_DIR,
        "include_dirs": include_dirs(model),
        **tracefields_context(),
        "arch": ARCHES[model.driver.arch],
        "hook_types": HOOK_TYPES,
        "reserved": model.unwrappable,
        "soname": SONAME,
        "features": FEATURES,
        "c_results": [(name, CODES[name]) for name in C_RESULTS],
        "libcuda_paths": [f"{d}/{SONAME}" for d in LIBCUDA_DIRS],
        "attribute_names": sorted(ATTRIBUTES.items()),
        "result_names": sorted(RESULTS.items()),
        "env": runenv.ENV,
        "gate_methods": runenv.GATE_METHODS,
        "rank_vars": runenv.RANK_VARS,
        "trace_magic": runenv.TRACE_MAGIC.decode(),
        "trace_version": runenv.TRACE_VERSION,
        "trace_suffix": runenv.TRACE_SUFFIX,
        "trace_nospace_suffix": runenv.TRACE_NOSPACE_SUFFIX,
        "trace_byte_order": runenv.TRACE_BYTE_ORDER,
        "trace_states": runenv.TRACE_STATES,
        "trace_modes": runenv.TRACE_MODES,
        "shim_target": runenv.SHIM_TARGET,
        "trace_header": runenv.trace_header_layout(),
        "trace_header_size": runenv.trace_header_size(),
        "trace_err_injected": runenv.TRACE_ERR_INJECTED,
        "mem": {"devices": runenv.MEM_DEVICES, "host": runenv.MEM_HOST_COLUMN,
                "columns": runenv.MEM_COLUMNS, "routes": runenv.MEM_ROUTES,
                "location_offset": MEM_PROP_LOCATION_OFFSET,
                "location_device": MEM_LOCATION_TYPE_DEVICE,
                "array_formats": ARRAY_FORMAT_BYTES, "size_units": runenv.SIZE_UNITS,
                "size_max": runenv.SIZE_MAX,
                "pitch_attrs": PITCH_ALIGNMENT_ATTRIBUTES, "size_hint": runenv.SIZE_HINT,
                "pool_attrs": MEMPOOL_ATTRS, "graph_attrs": GRAPH_MEM_ATTRS,
                "capture_active": STREAM_CAPTURE_ACTIVE,
                "pool_routes": sum(1 << i for i, r in enumerate(ROUTES)
                                   if r.kind in POOL_KINDS)},
        "calls_facts": {"record_size": runenv.CALLS_RECORD_SIZE,
                        "capture_off": runenv.CALLS_CAPTURE_OFF,
                        "stack_args": runenv.CALLS_STACK_ARGS,
                        "string_max": runenv.CALLS_STRING_MAX,
                        "unread_word": runenv.CALLS_UNREAD_WORD,
                        "ring_default": runenv.CALLS_RING_DEFAULT,
                        "ring_min": runenv.CALLS_RING_MIN, "ring_max": runenv.CALLS_RING_MAX,
                        "kinds": runenv.CALLS_CAPTURE_KINDS, "flags": runenv.CALLS_CAPTURE_FLAGS,
                        "kind_mask": runenv.CALLS_CAPTURE_KIND_MASK},
        "calls_table": (calls.capture_table([f.name for f in model.functions])
                        if captures else None),
        "timed_kinds": calls.timing_kinds([f.name for f in model.functions]) if captures else None,
        "inject_keys": inject.KEYS, "kern": KERN_FACTS,
        "inject_limits": {"MAX_RULES": inject.MAX_RULES, "MAX_LEN": inject.MAX_LEN,
                          "NUMBER_MAX": inject.NUMBER_MAX, "RESULT_MAX": inject.RESULT_MAX},
    }


BUILD_FILE = "meson.build"


def render_layout(model: ShimModel, dest: Path) -> list[Path]:
    """The shim's source tree as meson setup needs it: meson.build rendered, the runtime and
    the user's hook files copied, and every other generated file made empty (render with
    `generated_only` writes them). Returns the paths written."""
    written = []
    runtime = runtime_dir()
    for source, name in outputs(model):
        path = dest / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if source.startswith(USER_SOURCE):
            assert model.user is not None
            hook = model.user.files[int(source[len(USER_SOURCE):])]
            write_private(path, user_source_text(hook.path, hook.data), hook.mode)
        elif source.startswith("runtime/"):
            shutil.copyfile(runtime / name, path)
        elif name == BUILD_FILE:
            template = environment().get_template(source)
            path.write_text(template.render(**render_context(model, captures=False)))
        else:
            path.write_bytes(b"")
        written.append(path)
    return written


def render(model: ShimModel, dest: Path, generated_only: bool = False) -> list[Path]:
    """Write every file of the shim's source tree into `dest` (with `generated_only`, the
    generated files but meson.build, into a tree render_layout laid out); returns the paths
    written."""
    written = [] if generated_only else render_layout(model, dest)
    env = environment()
    context = render_context(model)
    for source, name in GENERATED:
        if name != BUILD_FILE:
            path = dest / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(env.get_template(source).render(**context))
            written.append(path)
    return list(dict.fromkeys(written))  # each path once: the layout wrote them too
