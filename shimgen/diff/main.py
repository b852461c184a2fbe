"""`shimgen diff`'s command and its text: the comparison (diff/compare.py) printed as JSON or as a
short summary first (one line per comparison), then a section per comparison (docs/diff.md
says what each means); the exit status as diff(1)'s."""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING

from ..cuda import result_name
from ..cudaversions import FUNCTION_SINCE, cuda_text
from ..errors import ShimgenError, say
from ..report import shown as shown_text
from .compare import TROUBLE, Diff, compare, driver_file
from .query import APIS, FAR_VERSION, FLAGS, Answer, Span

if TYPE_CHECKING:
    from .gates import GateSide, GatesOf

KINDS = (("fails", "now fail"), ("moved", "give another export"), ("new", "newly found"),
         ("changed", "fail another way"))


def _names(spans: list[Span], kind: str) -> set[str]:
    return {s.name for s in spans if s.kind == kind}


def shown(spans: list[Span]) -> list[Span]:
    """The spans the text lists: a name's other failure at low versions ("not found" ->
    "version not sufficient") is left out when the name is listed for a bigger change (the
    JSON has every span)."""
    big = {s.name for s in spans if s.kind != "changed"}
    return [s for s in spans if s.kind != "changed" or s.name not in big]


def _where(combos: set[tuple[int, int]]) -> str:
    """Which (api, flags) a change was seen with, unless it was all of them."""
    apis = sorted({a for a, _ in combos})
    flags = sorted({f for _, f in combos})
    if len(combos) != len(apis) * len(flags):  # not a product: list every pair
        return " [" + ", ".join(f"{APIS[a]} flags {f}" for a, f in sorted(combos)) + "]"
    parts = []
    if len(apis) < len(APIS):
        parts.append(" and ".join(APIS[a] for a in apis) + " only")
    if len(flags) < len(FLAGS):
        parts.append("flags " + ",".join(map(str, flags)))
    return f" [{'; '.join(parts)}]" if parts else ""


#: A change this many names share, found or failing alike, is one line with their count
#: (`-v` lists the names under it; the JSON has every span).
GROUP_AT = 5


def _shared(a: Answer) -> str:
    """An answer as the names that share a change share it: a found export is each name's
    own; a failure is the same for all, with its code's name."""
    if a.found:
        return "its export"
    text = a.text()
    return f"{text} ({result_name(a.rc)})" if text.startswith("error ") else text


def procaddr_lines(spans: list[Span], indent: str = "  ",
                   names: bool = True) -> dict[str, list[str]]:
    """One line per name and change, by kind; a change seen with several APIs and flags is
    one line that says which. Without `names`, a change that GROUP_AT or more names share (a
    failure that begins or ends, or another failure, at the same versions) is one line of
    their count; with it, that line is followed by each name's own."""
    groups: dict[tuple, set[tuple[int, int]]] = defaultdict(set)
    answers: dict[tuple, tuple[Answer, Answer]] = {}
    for s in spans:
        key = (s.kind, s.name, s.low, s.high, s.old.text(), s.new.text())
        groups[key].add((s.api, s.flags))
        answers.setdefault(key, (s.old, s.new))
    # per name, the change as the names share it, over every (api, flags) it was seen with
    # (a name whose per-thread variant is another export fails alike at every flag)
    per_name: dict[tuple, tuple[set, list[str]]] = {}
    for g, combos in sorted(groups.items()):
        kind, name, low, high, old, new = g
        when = f"{low} and up" if high is None else (
            str(low) if high == low else f"{low}-{high}")
        key = (kind, when, _shared(answers[g][0]), _shared(answers[g][1]),
               name if kind == "moved" else "", name)
        union, lines = per_name.setdefault(key, (set(), []))
        union |= combos
        lines.append(f"{name}  {when}: {old} -> {new}{_where(combos)}")
    shared: dict[tuple, list[str]] = defaultdict(list)
    for (kind, when, old, new, moved, _name), (union, lines) in per_name.items():
        shared[(kind, when, old, new, _where(union), moved)] += lines
    out: dict[str, list[str]] = defaultdict(list)
    for key, lines in sorted(shared.items(), key=lambda g: (g[0][0], -len(g[1]), g[0][1:])):
        kind, when, old, new, where = key[:5]
        count = len({ln.split()[0] for ln in lines})
        if count < GROUP_AT:
            out[kind] += [indent + ln for ln in lines]
            continue
        out[kind].append(f"{indent}{count} names  {when}: {old} -> {new}{where}"
                         + ("" if names else "  (-v lists them)"))
        if names:
            out[kind] += [f"{indent}    {ln}" for ln in lines]
    return out


def _summary(d: Diff) -> list[str]:
    ex = (f"+{len(d.added())} -{len(d.removed())} functions, +{len(d.added('data'))} "
          f"-{len(d.removed('data'))} objects")
    names, spans = {s.name for s in d.spans}, shown(d.spans)
    pa = "no differences" if not names else (
        f"{len(names)} names answer differently: "
        + ", ".join(f"{len(_names(spans, k))} {w}" for k, w in KINDS))
    for label, drv, cuda, api in d.apis_lacking():
        pa += (f"; {label} {drv.version} (CUDA {cuda_text(cuda)}) has no {api} "
               f"(CUDA {cuda_text(FUNCTION_SINCE[api])}): its answers not compared")
    hooks = "not asked (--hook FILE.c)"
    if d.hooks:
        changed = sum(bool(h.what) for hs in d.hooks.values() for h in hs)
        total = sum(len(hs) for hs in d.hooks.values())
        hooks = f"{changed} of {total} hooked or declared names change"
    return [
        f"shimgen diff: {d.old.version} -> {d.new.version}: "
        + ("differences" if d.differs() else "no differences"),
        f"  exports   {ex}",
        f"  procaddr  {pa}",
        f"  gates     {_gates_summary(d)}",
        f"  hooks     {hooks}",
        *(f"{label}  {shown_text(str(side.real_path))}  (version {side.version}, CUDA {cuda}, "
          f"build-id {side.build_id or 'none'})"
          for label, side, cuda in (("OLD", d.old, d.cuda[0]), ("NEW", d.new, d.cuda[1]))),
    ]


def _gates_summary(d: Diff) -> str:
    if not d.gates_compared:
        return "not compared (--no-gates)"
    o, n = d.old_gates, d.new_gates
    if o.error and n.error:
        return "not found on either driver (see the Gates section)"
    if o.error or n.error:
        return f"found only on {'NEW' if o.error else 'OLD'} (see the Gates section)"
    parts = [f"{g.name}: {', '.join(g.what) or 'same'}{_why_only(d, g)}"
             for g in d.gate_diffs()]
    return "; ".join(parts) + f"; proof on NEW {'passed' if _all_proven(n) else 'FAILED'}"


def _why_only(d: Diff, g) -> str:
    """Why a gate is on one driver only, when the other is too old for its attribute."""
    from ..gates import why_no_gate

    lacking = d.old if g.old is None else d.new if g.new is None else None
    why = why_no_gate(g.name, lacking.version) if lacking is not None else ""
    return f" ({why[2:]})" if why else ""


def _all_proven(g: GatesOf) -> bool:
    return not g.error and all(s.proven for s in g.gates.values())


def _side(label: str, g: GateSide | None) -> list[str]:
    if g is None:
        return [f"  {label}  no such gate"]
    fields = ", ".join(f"[{o:#x}]" + (f"&{m:#x}" if m else " of both devices, compared")
                       for o, m in g.fields)
    globs = ", ".join(f"base+{v:#x}/{s}" for v, s in g.globals)
    lines = [f"  {label}  struct {fields}" + (f", globals {globs}" if globs else "")
             + f"; proof {'passed' if g.proven else 'FAILED'}"]
    for i in g.init:
        bytes_ = ", ".join(f"file {o:#x} {a:02x}->{b:02x}" for o, a, b in i.changes)
        lines.append(f"       {i.direction:<4} {i.status}{', proven' if i.proven else ''}"
                     + (f": {bytes_}" if bytes_ else f" ({i.why})"))
        lines += [f"              at file {o:#x}: {h} {t}" for o, h, t in i.insns]
    return lines


def _gates_section(d: Diff) -> list[str]:
    lines = ["", "Gates (struct offset and bit, proof, the init-site bytes `shimgen patch` "
             "changes)"]
    if not d.gates_compared:
        return lines + ["  not compared (--no-gates): `shimgen diff OLD NEW` compares them"]
    for label, g in (("OLD", d.old_gates), ("NEW", d.new_gates)):
        took = f" ({g.seconds:.1f} s)"
        lines.append(f"  {label}: {g.error}{took}" if g.error
                     else f"  {label}: {len(g.found)} gates found and proven: {', '.join(g.found)}"
                     f"{took}")
    for g in d.gate_diffs():
        lines.append(f"{g.name}: " + (", ".join(g.what) + " differ" if g.what else "same")
                     + _why_only(d, g))
        lines += _side("OLD", g.old) + _side("NEW", g.new)
    return lines


def _exports_section(d: Diff) -> list[str]:
    lines = ["", "Exports (.dynsym)"]
    for what, label in (("functions", "functions"), ("data", "objects")):
        for verb, names in (("added", d.added(what)), ("removed", d.removed(what))):
            if names or what == "functions":
                lines.append(f"{verb} {label} ({len(names)})" + (":" if names else ""))
                lines += [f"  {n}" for n in names]
    return lines


def _procaddr_section(d: Diff, names: bool = False) -> list[str]:
    lines = ["", f"cuGetProcAddress answers (versions 0 to {FAR_VERSION}, flags 0 default, "
             "1 legacy stream, 2 per-thread stream; OLD -> NEW)"]
    if not d.spans:
        return lines + ["  no differences"]
    spans = shown(d.spans)
    by = procaddr_lines(spans, names=names)
    for kind, label in KINDS:
        if by.get(kind):
            lines.append(f"{label} ({len(_names(spans, kind))} names):")
            lines += by[kind]
    return lines


def _hooks_section(d: Diff) -> list[str]:
    lines = []
    for path, hooked in d.hooks.items():
        lines += ["", f"Hooks of {shown_text(path)} ({len(hooked)} names)"]
        for h in hooked:
            where = ("" if h.in_old and h.in_new else " (exported by neither)"
                     if not (h.in_old or h.in_new) else "")
            lines.append(f"  {h.name} ({h.kind}){where}: {'; '.join(h.what) or 'same'}")
            gone = procaddr_lines(list(h.bypassed), "      ")
            lines += [ln for kind, _ in KINDS for ln in gone.get(kind, [])]
    return lines


def format_text(d: Diff, names: bool = False) -> str:
    """The text of `shimgen diff`; `names` (-v): every name of a change many share."""
    return "\n".join(_summary(d) + _exports_section(d) + _procaddr_section(d, names)
                     + _gates_section(d) + _hooks_section(d))


def same_build(old: Path, new: Path) -> str | None:
    """The line that answers `diff A A` at once, when OLD and NEW are one build (the same
    GNU build-id): nothing a shim sees can differ. None otherwise."""
    from ..driver import check_driver, read_build_id, version_from_name

    a, b = check_driver(old), check_driver(new)
    ida, idb = read_build_id(a), read_build_id(b)
    if not ida or ida != idb:
        return None
    from ..driver import read_driver
    from .compare import check_runnable

    for path in (old, new):  # refused as the whole comparison would refuse them
        check_runnable(read_driver(path))
    return (f"shimgen diff: {version_from_name(a)} -> {version_from_name(b)}: no differences "
            f"(one build: build-id {ida})")


def run(old: str, new: str, *, json_out: bool, gates: str,
        hook_files: list[str], names: bool = False) -> int:
    """The command: the comparison printed (text or JSON); the exit status. Two files of one
    build are one line, at once (the JSON is always the whole comparison)."""
    import json

    from . import nvml

    status = nvml.run(old, new, json_out)
    if status is not None:
        if hook_files:
            raise ShimgenError("diff --hook compares libcuda hooks; these are NVML libraries")
        return status
    if not json_out and not hook_files:
        line = same_build(driver_file(old), driver_file(new))
        if line is not None:
            print(line)
            return 0
    result = compare(driver_file(old), driver_file(new), gates,
                     [Path(h) for h in hook_files])
    if json_out:
        print(json.dumps(result.to_json(), indent=2))
    else:
        print(format_text(result, names))
    return result.status()


def command(args) -> int:
    """`shimgen diff`. Exit status as diff(1): 0 no differences, 1 differences, 2 trouble
    (any failure: one line, as every command says it)."""
    if args.gates:
        print("shimgen: diff: --gates is not needed: the gates are compared unless --no-gates "
              "(--gates selects gates in run and patch)", file=sys.stderr, flush=True)
    gates = "no" if args.no_gates else "default"
    try:
        return run(args.old, args.new, json_out=args.json, gates=gates,
                   hook_files=args.hook or [], names=args.verbose)
    except BrokenPipeError:
        raise  # the command line's: whoever read the output went away
    except (ShimgenError, OSError) as e:
        say(f"{e.strerror or e}: {e.filename}" if isinstance(e, OSError) and e.filename
            else str(e))
        return TROUBLE
