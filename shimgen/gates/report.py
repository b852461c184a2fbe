"""What `shimgen gates` prints and writes: the profile as a table, the proof's summary, and
the profile file (written when the proof passes, or with its status 'not run' under
`--no-proof`; never when it fails)."""

from __future__ import annotations

import json
from pathlib import Path

from ..cuda import ATTRIBUTE_SINCE, GATE_ATTRIBUTES, attribute_name, cuda_of_driver, cuda_text
from ..elf import DriverImage
from ..errors import ShimgenError
from ..outfile import write_whole
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


def is_profile(path: Path) -> bool:
    """Whether `path` holds a gate profile (what `--json` may replace)."""
    from ..infile import read_regular

    try:
        raw = json.loads(read_regular(path, MAX_PROFILE_BYTES))
    except (OSError, ValueError):
        return False
    return isinstance(raw, dict) and raw.get("schema") == SCHEMA


#: `gates --json` without a FILE: the profile on stdout, in place of the table.
STDOUT = "-"


def run(image: DriverImage, json_out: Path | str | None, proof: bool = True) -> int:
    """Discover the gates of a parsed driver, prove them (unless `proof` is False), print the
    table and, when the proof passes or was not asked for, write the profile to `json_out`
    with its proof status (STDOUT: print it instead of the table). A layout not understood
    or a failed proof raises ShimgenError: one line naming the proof's problems; nothing is
    printed or written then."""
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
    print(format_table(profile))
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
    from ..driver import refuse_older
    from ..elf import read_image
    from ..options import driver_path, path_option
    from ..outfile import check_target

    path = driver_path(args.driver)
    json_out = args.json
    if json_out not in (None, STDOUT):
        json_out = path_option(args.json, "--json", "profile")
        check_target(json_out, "--json", is_profile)
    image = read_image(path)
    refuse_older(image)
    return run(image, json_out, proof=not args.no_proof)
