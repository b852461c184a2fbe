"""What `shimgen gates` prints and writes: the profile as a table, the proof's summary, and
the profile file (written when the proof passes, or with its status 'not run' under
`--no-proof`; never when it fails)."""

from __future__ import annotations

import json
from pathlib import Path

from ..cuda import GATE_ATTRIBUTES, attribute_name
from ..cudaversions import ATTRIBUTE_SINCE, cuda_of_driver, cuda_text
from ..driver import DriverImage
from ..errors import ShimgenError
from ..files import write_whole
from . import ALLOW_UNPROVEN
from . import prove as proving
from .discover import discover
from .facts import GATE_RULES
from .profile import MAX_PROFILE_BYTES, PROOF_NOT_RUN, SCHEMA, Profile


def lacking_line(profile: Profile) -> list[str]:
    """The table's line of the gated attributes this driver's reader has no case for (470:
    no DMA-BUF attribute 124, which CUDA 11.7 added), and the gates it therefore lacks."""
    r = profile.reader
    assert r is not None
    lacking = [a for a in GATE_ATTRIBUTES if a > r.last_attribute]
    if not lacking:
        return []
    said = ", ".join(f"{a} ({attribute_name(a)}"
                     + (f", CUDA {cuda_text(ATTRIBUTE_SINCE[a])}" if a in ATTRIBUTE_SINCE else "")
                     + ")" for a in lacking)
    cuda = cuda_of_driver(profile.driver_version or "")
    which = f" (CUDA {cuda_text(cuda)})" if cuda is not None else ""
    names = {g.name for g in profile.gates}
    gone = [rule.name for rule in GATE_RULES if rule.attribute in lacking
            and rule.name not in names]
    return [f"lacks       attribute {said}: this driver{which} reads attributes up to "
            f"{r.last_attribute}" + (f"; no {', '.join(gone)} gate" if gone else "")]


def format_table(profile: Profile) -> str:
    r, t = profile.reader, profile.device_table
    assert r is not None and t is not None
    lines = [
        f"driver      {profile.driver_file} (version {profile.driver_version or 'unknown'})",
        f"build-id    {profile.build_id}",
        f"reader      {r.vaddr:#x}, jump table {r.table_vaddr:#x} ({r.table_kind}), "
        f"attributes {r.first_attribute}..{r.last_attribute}",
        *lacking_line(profile),
        f"device      *(base + {t.vaddr:#x} + {t.offset:#x} + ordinal*{t.stride})"
        + (f", count at base+{t.count_vaddr:#x}" if t.count_vaddr is not None else ""),
        "",
        "gate     attributes        fields                    globals",
    ]
    for g in profile.gates:
        fields = ", ".join(f"[{f.offset:#x}]&{f.mask:#x}" for f in g.fields)
        globs = ", ".join(f"base+{x.vaddr:#x}/{x.size}" for x in g.globals) or "-"
        lines.append(f"{g.name:<8} {','.join(map(str, g.attributes)):<17} {fields:<25} {globs}")
        for s in g.init_sites:
            extra = f" (after {s.or_insn.text} at {s.or_insn.vaddr:#x})" if s.or_insn else ""
            lines.append(f"         init {s.kind:<7} {s.insn.vaddr:#x} file {s.insn.file_offset:#x}"
                         f" {s.insn.hex:<16} {s.insn.text}{extra}"
                         f"{'  sets the bit' if s.sets_bit else ''}")
        for p in g.init_patches:
            change = ", ".join(f"{c.vaddr:#x} (file {c.file_offset:#x}) {c.old:#04x} -> "
                               f"{c.new:#04x}" for c in p.changes)
            lines.append(f"         {p.direction:<4} [{p.offset:#x}]&{p.mask:#x}: {p.status}"
                         f"{': ' + change if change else ''}")
            lines.append(f"              why: {p.why}")
    lines += p2p_lines(profile)
    lines += ["", "attr  kind          what the case reads (* = must be set / non-zero for a "
              "non-zero value)"]
    for c in profile.cases:
        if c.kind == "constant":
            what = f"= {c.constant}"
        else:
            parts = [f"[{f.offset:#x}]" + (f"&{f.mask:#x}" if f.mask is not None else "")
                     + ("*" if f.gating else "") + ("" if f.op == "test" else f" {f.op}")
                     for f in c.fields]
            parts += [f"g{g.vaddr:#x}/{g.size}" + ("*" if g.gating else "")
                      + ("" if g.op in ("cmp", "test") else f" {g.op}") for g in c.globals]
            parts += [f"call {x:#x}" for x in c.calls]
            what = " ".join(parts)
        name = f"  ({c.name})" if c.name else ""
        lines.append(f"{c.attribute:<5} {c.kind:<13} {what}{name}")
    if profile.proof is not None:
        lines.append("")
    return "\n".join(lines)


def p2p_lines(profile: Profile) -> list[str]:
    """The P2P gate: its field, and per check the compare, the branch and its change."""
    g = profile.p2p
    if g is None:
        return []
    if g.status != "found":
        return [f"{g.name:<8} none: {g.why}"]
    out = [f"{g.name:<8} field [{g.offset:#x}] ({g.size} bytes) of the two devices, found "
           f"from {'; '.join(g.found_from)}"]
    for k in g.checks:
        change = ", ".join(f"{c.vaddr:#x} (file {c.file_offset:#x}) {c.old:#04x} -> "
                           f"{c.new:#04x}" for c in k.changes)
        out.append(f"         check {k.compare.vaddr:#x} {k.compare.text}; branch "
                   f"{k.branch.vaddr:#x} {k.branch.hex} {k.branch.text}: {change}"
                   + (f"  (reached from {', '.join(k.reached_from)})" if k.reached_from else ""))
    return out


def _wrap(items: list[str], indent: int, width: int = 96) -> list[str]:
    """`items` joined with ', ' in lines of at most `width`, each after the first indented."""
    lines = [""]
    for i, item in enumerate(items):
        piece = item + ("," if i < len(items) - 1 else "")
        if lines[-1] and indent + len(lines[-1]) + 1 + len(piece) > width:
            lines.append("")
        lines[-1] = f"{lines[-1]} {piece}" if lines[-1] else piece
    return [lines[0]] + [" " * indent + ln for ln in lines[1:]]


def _init_site(g, proven: bool) -> str:
    """What `shimgen patch` can do with the gate's init site."""
    can = [d for d in ("set", "mask") if g.init_patch(d)]
    if can:
        return f"{' and '.join(can)}, proven: `shimgen patch` can change it"
    if not proven:
        return "not proven (--no-proof): `shimgen patch` proves it itself"
    return f"none: the shim sets it instead (`shimgen run --gates {g.name}`)"


def _checks(p2p, proof_ran: bool) -> str:
    """What `shimgen patch` can do with the P2P gate's branches: its own proof decides."""
    if p2p.proven:
        return "the branches, proven: `shimgen patch` can change them"
    if not proof_ran:
        return "not proven (--no-proof): `shimgen patch` proves them itself"
    return "not proven: a check failed its emulation proof; `shimgen patch` refuses them"


def format_verdict(profile: Profile, result, driver_option: str = "") -> str:
    """What `shimgen gates` says first: the driver, whether the proof passed, each gate with
    the attributes it controls and what its init site allows, and the commands to run next.
    `driver_option` is the `--driver PATH` the next commands need ('' for the default)."""
    from ..cuda import attribute_name

    build_id = (profile.build_id or "none")[:12]
    lines = [f"driver {profile.driver_version or 'unknown'} ({profile.driver_file}, build-id "
             f"{build_id})"]
    if result is None:
        lines.append(f"proof NOT RUN (--no-proof): found, not proven; `shimgen build "
                     f"--gate-profile` refuses the profile without {ALLOW_UNPROVEN}")
    else:
        checks = [f"{len(result.attributes)} attribute checks"]
        if result.device_table is not None:
            checks.append("the device table")
        if result.init_sites:
            checks.append(f"{len(result.init_sites)} init sites")
        lines.append(f"proof {'PASS' if result.ok else 'FAIL'}: the driver's own code run in "
                     f"an emulator ({', '.join(checks)})")
    lines += lacking_line(profile)
    if not profile.gates:
        lines.append("gates none found")
        return "\n".join(lines)
    p2p = profile.p2p if profile.p2p is not None and profile.p2p.status == "found" else None
    listed = [g.name for g in profile.gates] + ([p2p.name] if p2p is not None else [])
    w = max(9, 2 + max(map(len, listed)))  # the names' column: the longest name, 2 spaces
    lines += ["", f"{len(listed)} gate{'s' if len(listed) != 1 else ''}:"]
    for g in profile.gates:
        attrs = [f"{a} {attribute_name(a)}" for a in g.attributes]
        lines.append(f"  {g.name:<{w}}controls   " + "\n".join(_wrap(attrs, w + 13)))
        lines.append(f"  {'':<{w}}init site  {_init_site(g, result is not None)}")
    if p2p is not None:
        lines.append(f"  {p2p.name:<{w}}allows     peer access between two GPU generations "
                     f"({len(p2p.checks)} checks of field [{p2p.offset:#x}])")
        lines.append(f"  {'':<{w}}checks     " + _checks(p2p, result is not None))
    names = [g.name for g in profile.gates]
    patchable = [g.name for g in profile.gates if g.init_patch("set")]
    d = f" {driver_option}" if driver_option else ""
    lines += ["", "next:",
              "  the program sees the gates set, through the shim (--gates "
              f"{','.join('-' + n for n in names)} masks them):",
              f"    shimgen run{d} --gates {','.join(names)} -- COMMAND"]
    if patchable:
        lines += [f"  a copy of the driver that sets {', '.join(patchable)} itself, for "
                  "LD_LIBRARY_PATH=DIR, no shim (--mask: never sets):",
                  f"    shimgen patch{d} --gates {','.join(patchable)} -o DIR"]
    if p2p is not None:
        lines += [f"  a copy of the driver whose checks accept two GPU generations ({p2p.name}), "
                  "for LD_LIBRARY_PATH=DIR:",
                  f"    shimgen patch{d} --gates {p2p.name} -o DIR"]
    lines += ["  everything found: the instructions, the init sites' bytes, every attribute's "
              "case, each check:", f"    shimgen gates{d} --detail"]
    return "\n".join(lines)


def is_profile(path: Path) -> bool:
    """Whether `path` holds a gate profile (what `--json` may replace)."""
    from ..files import read_regular

    try:
        raw = json.loads(read_regular(path, MAX_PROFILE_BYTES))
    except (OSError, ValueError):
        return False
    return isinstance(raw, dict) and raw.get("schema") == SCHEMA


#: `gates --json` without a FILE: the profile on stdout, in place of the table.
STDOUT = "-"


def run(image: DriverImage, json_out: Path | str | None, proof: bool = True,
        detail: bool = False, driver_option: str = "") -> int:
    """Discover the gates of a parsed driver, prove them (unless `proof` is False), print the
    verdict (with `detail`, then the table and the proof's every check) and, when the proof
    passes or was not asked for, write the profile to `json_out` with its proof status
    (STDOUT: print it instead). A layout not understood or a failed proof raises
    ShimgenError: one line naming the proof's problems; nothing is printed or written then."""
    profile = discover(image)
    result = None
    if proof:
        result = proving.prove(image, profile)
        profile.proof = result.to_json()
        if not result.ok:
            raise ShimgenError(f"gates of {image.real_path}: the emulation proof failed ("
                               + ("; ".join(result.problems) or "no gate proven")
                               + "); no profile written")
    else:
        profile.proof = {"status": PROOF_NOT_RUN, "ok": False,
                         "note": "written by `shimgen gates --no-proof`: found, not proven"}
    text = json.dumps(profile.to_json(), indent=2) + "\n"
    if json_out == STDOUT:
        print(text, end="")
        return 0
    print(format_verdict(profile, result, driver_option))
    if detail:
        print("\n" + format_table(profile))
        if result is not None:
            print(result.summary())
    if json_out is not None:
        write_whole(json_out, text)
        print(f"wrote {json_out}" + ("" if proof else
              f" (proof status '{PROOF_NOT_RUN}': `shimgen build --gate-profile` refuses it "
              f"without {ALLOW_UNPROVEN})"))
    return 0


def command(args) -> int:
    """`shimgen gates`. Exit 0: the profile found (proven unless --no-proof), and written
    with --json FILE; a failure is one line and exit 1 like every other command: a driver
    refused or its layout not understood, a failed proof (nothing written), an output path
    that cannot be written (checked before the analysis)."""
    from ..driver import read_image, refuse_older
    from ..files import check_target
    from ..options import driver_path, path_option

    path = driver_path(args.driver)
    json_out = args.json
    if json_out not in (None, STDOUT):
        json_out = path_option(args.json, "--json", "profile")
        check_target(json_out, "--json", is_profile)
    image = read_image(path)
    refuse_older(image)
    driver_option = ""
    if args.driver is not None:
        import shlex

        driver_option = f"--driver {shlex.quote(args.driver)}"
    return run(image, json_out, proof=not args.no_proof, detail=args.detail,
               driver_option=driver_option)
