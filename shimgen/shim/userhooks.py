"""User hooks: the user's own C functions around driver functions, compiled into the shim
(`shimgen build --hook FILE.c`, `shimgen run --hook FILE.c`; docs/hooks.md).

Each hook file is read once (`load`): its bytes are what the cache digests, what is checked
and what is built. `attach` compiles each file alone first (the C compiler, with the build's
shimgen/hook.h and shimgen/exports.h), so that a file that does not compile, or that names an
export the driver lacks or one shimgen keeps for itself (the exports header makes those the
compiler's errors too), is refused with the compiler's own message naming the user's file and
line; then it reads the object's symbols (defined `shimgen_user_hook_<name>`, undefined
`shimgen_real_<name>`) and puts the hooks into the model. Nothing is built or installed
before all of that passed.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
import stat
import subprocess
import tempfile
from pathlib import Path

from ..cudaversions import newer_than_driver
from ..driver import check_path_text, known_version
from ..errors import ShimgenError
from .model import ShimModel, UserHookFile, UserHooks

HOOK_PREFIX = "shimgen_user_hook_"  # shimgen/hook.h: SHIMGEN_HOOK_SYMBOL
REAL_PREFIX = "shimgen_real_"  # shimgen/hook.h: SHIMGEN_REAL_SYMBOL
MAX_BYTES = 1 << 20  # a hook file larger than this is refused
# What the compiler is given besides the file: the shim's own build flags that matter to C.
CFLAGS = ("-std=gnu11", "-O2", "-fPIC", "-Wall", "-Wextra", "-fvisibility=hidden",
          "-DSHIMGEN_CHECK_EXPORTS")


def _sha256(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


def load(paths: list[str] | tuple[str, ...]) -> tuple[UserHookFile, ...]:
    """The hook files named by --hook, read once each: a regular file of at most MAX_BYTES,
    its path plain text, and trusted as code (owned.distrust_code: it runs as the user)."""
    files = []
    for given in paths:
        if not str(given).strip():
            raise ShimgenError("--hook: empty path")
        path = Path(given).absolute()
        check_path_text(path, "hook file")
        check_path_text(os.path.realpath(path), "hook file")
        if path.suffix != ".c":
            raise ShimgenError(f"hook file {path}: not a C file (FILE.c)")
        data, mode = _read_trusted(path)
        if any(f.path == path for f in files):
            raise ShimgenError(f"hook file {path} is given twice")
        files.append(UserHookFile(path, data, _sha256(data), mode=mode))
    return tuple(files)


def _read_trusted(path: Path) -> tuple[bytes, int]:
    """The bytes of the hook file at `path` and its permission bits, read from one
    descriptor that was checked: a regular file, not over MAX_BYTES, that only this user (or
    root) can change, in directories that only they can change (a sticky one aside)."""
    from ..files import distrust_code, open_regular

    try:
        fd = open_regular(path)
    except OSError as e:
        raise ShimgenError(f"hook file {path}: {e.strerror or e}") from None
    with os.fdopen(fd, "rb") as f:
        why = distrust_code(fd, path)
        if why:
            raise ShimgenError(f"hook file {path}: {why}; a hook file runs as you, so only "
                               "you (or root) may be able to change it")
        data = f.read(MAX_BYTES + 1)
        mode = stat.S_IMODE(os.fstat(fd).st_mode)
    if len(data) > MAX_BYTES:
        raise ShimgenError(f"hook file {path}: larger than {MAX_BYTES} bytes")
    return data, mode


def digest(files: tuple[UserHookFile, ...]) -> str:
    """One digest of the hook files' contents, in their order (the shim cache's key)."""
    return _sha256("\n".join(f.sha256 for f in files).encode())


def file_digest(paths: list[str] | tuple[str, ...]) -> str:
    """digest() of the files at `paths`, read now."""
    return digest(load(paths))


def _compiler(model: ShimModel) -> list[str]:
    """$CC or cc for a shim of this machine's architecture; the cross compiler the build
    uses (shim/build.py cross_triplet) for another."""
    from ..arches import ARCHES, host

    if model.driver.arch != host():
        return [ARCHES[model.driver.arch].cc]
    return shlex.split(os.environ.get("CC", "cc")) or ["cc"]


def _compile(model: ShimModel, hook: UserHookFile, work: Path, index: int) -> tuple[Path, str]:
    """The hook file compiled alone, and the compiler's warnings; its errors are the
    ShimgenError (at the user's file and line)."""
    from .render import user_source_text

    source = work / f"{index}.c"
    source.write_bytes(user_source_text(hook.path, hook.data))
    obj = work / f"{index}.o"
    cmd = [*_compiler(model), *CFLAGS, "-I", str(work / "include"), "-c", str(source), "-o",
           str(obj)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, errors="replace",
                              stdin=subprocess.DEVNULL, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ShimgenError(f"hook file {hook.path}: cannot run the C compiler {cmd[0]} "
                           f"({getattr(e, 'strerror', None) or e})") from None
    messages = proc.stderr.strip()
    if proc.returncode != 0 or not obj.is_file():
        first = _first_error(messages, hook.path)
        raise ShimgenError(_unexported(model, hook.path, first, messages)
                           or f"hook file {hook.path} does not compile: {first}")
    return obj, messages


def _first_error(messages: str, path: Path) -> str:
    """The compiler's first error, at the user's file and line: an error inside shimgen/hook.h's
    macros is said at the line of the hook file that used the macro (the compiler's "in
    expansion of macro" note, or the line "required from" it names). Then how many more."""
    lines = [ln.strip() for ln in messages.splitlines() if ln.strip()]
    errors = [i for i, ln in enumerate(lines) if re.search(r"\berror\b", ln)]
    if not errors:
        return lines[0] if lines else "the compiler failed without a message"
    first = lines[errors[0]]
    where = re.match(r"(.*?):(\d+):(?:(\d+):)? (?:fatal )?error: (.*)", first)
    mine = f"{path}:"
    if where and not first.startswith(mine):
        at = next((m for ln in lines[errors[0]:] + lines[:errors[0]]
                   if (m := re.match(rf"({re.escape(str(path))}:\d+(?::\d+)?):", ln))), None)
        if at:
            first = f"{at.group(1)}: error: {where.group(4)}"
    first = re.sub(r"; did you mean \W?shimgen_\w+\W?\?", "", first)  # a name of exports.h
    more = len(errors) - 1
    return first + (f" (and {more} more error{'s' if more > 1 else ''})" if more else "")


def _unexported(model: ShimModel, path: Path, first: str, messages: str) -> str | None:
    """The exports header's error (a hook or a declaration names a function the driver does
    not export) said in the user's terms, where and what first: `FILE.c:LINE: NAME is not
    exported by driver VERSION`; None for any other error."""
    missing = re.search(r"shimgen_driver_exports_(\w+)\W{0,3} undeclared", messages)
    if not missing:
        return None
    name = missing.group(1)
    line = re.match(rf"{re.escape(str(path))}:(\d+):", first)
    where = f"{path}:{line.group(1)}" if line else f"hook file {path}"
    return (f"{where}: {name} is not exported by driver {model.driver.version}"
            f"{newer_than_driver(name, known_version(model.driver))} "
            "(`shimgen exports` lists them)")


def _symbols(obj: Path) -> tuple[list[str], list[str]]:
    """(defined shimgen_user_hook_* functions, undefined shimgen_real_*) of an object file."""
    from elftools.elf.elffile import ELFFile
    from elftools.elf.sections import SymbolTableSection

    hooks, calls = [], []
    with open(obj, "rb") as fh:
        elf = ELFFile(fh)
        for section in elf.iter_sections():
            if not isinstance(section, SymbolTableSection):
                continue
            for sym in section.iter_symbols():
                undefined = sym["st_shndx"] == "SHN_UNDEF"
                if sym.name.startswith(HOOK_PREFIX) and not undefined and \
                        sym["st_info"]["type"] == "STT_FUNC":
                    hooks.append(sym.name[len(HOOK_PREFIX):])
                elif sym.name.startswith(REAL_PREFIX) and undefined:
                    calls.append(sym.name[len(REAL_PREFIX):])
    return sorted(hooks), sorted(calls)


def _checked(model: ShimModel, hook: UserHookFile, hooks: list[str], calls: list[str],
             taken: dict[str, Path]) -> UserHookFile:
    """The file's hooks and calls, each an export the driver has and a user may hook."""
    known = {f.name for f in model.functions}
    for name in hooks + calls:
        if name not in known:
            raise ShimgenError(f"hook file {hook.path}: {name} is not a function driver "
                               f"{model.driver.path} exports"
                               f"{newer_than_driver(name, known_version(model.driver))} "
                               "(`shimgen exports` lists them)")
    for name in hooks:
        if name in model.unwrappable:
            raise ShimgenError(f"hook file {hook.path}: {name} is hooked by shimgen itself "
                               "(every address it hands out goes through the shim); hook "
                               "the functions it hands out instead")
        if name in taken:
            raise ShimgenError(f"hook file {hook.path}: {name} is hooked in {taken[name]} "
                               "too; one hook per function")
        taken[name] = hook.path
    if not hooks:
        raise ShimgenError(f"hook file {hook.path} defines no hook (SHIMGEN_HOOK)")
    return dataclasses.replace(hook, hooks=tuple(hooks), calls=tuple(calls))


def _write_headers(model: ShimModel, include: Path) -> None:
    from .render import environment, render_context

    env = environment()
    context = render_context(model)
    for template, name in (("hook.h.j2", "hook.h"), ("hook_exports.h.j2", "exports.h")):
        (include / "shimgen").mkdir(parents=True, exist_ok=True)
        (include / "shimgen" / name).write_text(env.get_template(template).render(**context))


def attach(model: ShimModel, files: tuple[UserHookFile, ...]) -> ShimModel:
    """`model` with the user's hook files checked and in it: each compiled alone first, its
    symbols read; a ShimgenError (nothing built) for any file that fails."""
    if not files:
        return model
    checked: list[UserHookFile] = []
    taken: dict[str, Path] = {}
    with tempfile.TemporaryDirectory(prefix="shimgen-hooks-") as tmp:
        work = Path(tmp)
        _write_headers(model, work / "include")
        warnings = []
        for i, hook in enumerate(files):
            obj, said = _compile(model, hook, work, i)
            hooks, calls = _symbols(obj)
            checked.append(_checked(model, hook, hooks, calls, taken))
            warnings += [said] if said else []
    if warnings:  # the compiler's own words, once every file has passed
        import sys

        print("\n".join(warnings), file=sys.stderr, flush=True)
    owner = {name: i for i, f in enumerate(checked) for name in f.hooks}
    functions = tuple(dataclasses.replace(f, user_hook=owner.get(f.name))
                      for f in model.functions)
    return dataclasses.replace(model, functions=functions, user=UserHooks(tuple(checked)))


def variants(model: ShimModel, name: str) -> list[str]:
    """The driver's other exports of the same function as `name` (its ABI variants)."""
    from ..cudaversions import variants as same_function

    return same_function(name, [f.name for f in model.functions])


def summary(model: ShimModel) -> list[str]:
    """The build summary's lines for the user's hooks: each hooked function, and the other
    variants the driver exports, which the hook does not reach."""
    from ..report import shown

    if model.user is None:
        return []
    lines = []
    for f in model.user_hooked:
        assert f.user_hook is not None
        others = variants(model, f.name)
        also = (f"; not hooked: {', '.join(others)} (other exports; hook each one you need)"
                if others else "")
        lines.append(f"user hook  {f.name} from {shown(str(model.user.files[f.user_hook].path))}"
                     f"{also}")
    return lines


def header_command(_args) -> int:
    """`shimgen hook-header`: shimgen/hook.h on stdout, as every build with --hook has it."""
    import sys

    from .render import hook_header

    sys.stdout.write(hook_header())
    return 0
