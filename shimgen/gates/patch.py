"""`shimgen patch`: a patched copy of the driver, for users who prefer `LD_LIBRARY_PATH=DIR`
to a shim. The copy differs from the original only in the init-site bytes that discovery
chose and the emulation proved (initsite.py); DIR also gets the `libcuda.so.1` and
`libcuda.so` links and a manifest of every changed byte with both files' sha256.

The original is only read (through the one ELF reader). Nothing is written unless the file
is the profiled build (build-id, every recorded instruction byte) and every byte to change
still holds its shipped value; a copy made earlier is recognised and refused. DIR is created
owner-only; each file is written to a temporary name and linked into place, so an existing
file is never replaced and an interrupted run leaves no half-written file under a real name.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from ..driver import DriverImage
from ..errors import ShimgenError
from .initsite import MASK, SET
from .p2p_profile import FOUND, P2P_GATE
from .profile import ByteChange, Profile, load_profile

MANIFEST = "shimgen-patch.json"
MANIFEST_SCHEMA = "shimgen.patch/1"
LINKS = ("libcuda.so.1", "libcuda.so")  # the names programs open, each a link to the copy


@dataclass(frozen=True)
class Change:
    gate: str
    insn_vaddr: int  # the instruction the byte belongs to
    insn: str  # its text as shipped
    byte: ByteChange


def _profile(image: DriverImage, profile_path: Path | None) -> Profile:
    """The profile to patch by: the one given, or discovery now; build-id checked."""
    from .discover import discover

    profile = load_profile(profile_path) if profile_path else discover(image)
    if profile.build_id != image.build_id:
        raise ShimgenError(
            f"{image.real_path} is not the profiled build (build-id {image.build_id or 'none'}, "
            f"the profile is for {profile.build_id}); nothing written")
    return profile


def _instead(name: str, mask: bool, driver_option: str) -> str:
    """The way that works for a gate `patch` cannot change: the shim's struct method."""
    d = f" {driver_option}" if driver_option else ""
    return (f"the shim {'masks' if mask else 'sets'} it instead (the struct method): shimgen "
            f"run{d} --gates {'-' if mask else ''}{name} -- COMMAND")


def already_patched(image: DriverImage) -> str | None:
    """Why `image` is a copy `shimgen patch` wrote, from the manifest beside it (the copy's
    digest recorded there), or None. Said before any analysis: discovery on a patched copy
    finds the changed bytes, not the init sites."""
    from ..files import read_regular

    manifest = image.real_path.parent / MANIFEST
    try:
        m = json.loads(read_regular(manifest, 1 << 20))
        if m.get("schema") != MANIFEST_SCHEMA or m["copy"]["sha256"] != _sha256(image.contents):
            return None
        original = m["original"]["path"]
        what = f"{m['direction']} {','.join(m['gates'])}"
    except (OSError, ValueError, KeyError, TypeError, AttributeError, ShimgenError):
        return None
    return (f"{image.real_path} is already patched ({what}: the copy `shimgen patch` wrote, "
            f"{manifest}); nothing written; patch the original, {original}")


def _gate_changes(image: DriverImage, profile: Profile, name: str, mask: bool,
                  driver_option: str) -> list[Change]:
    """The changes of one attribute gate's init patches in the direction asked; a gate the
    driver lacks, or one without a chosen init site that way, is refused saying why."""
    direction = MASK if mask else SET
    gate = profile.gate(name)
    if gate is None:
        from .facts import why_no_gate

        raise ShimgenError(f"unknown gate '{name}' (this driver has: "
                           f"{' '.join(g.name for g in profile.gates)}"
                           f"{' ' + P2P_GATE if profile.p2p is not None else ''}"
                           f"{why_no_gate(name, image.version)})")
    patches = [p for p in gate.init_patches if p.direction == direction]
    for p in patches:
        if p.status != "chosen":
            raise ShimgenError(f"gate {name} has no init site to {direction} on this driver: "
                               f"{p.status}, {p.why}; nothing written; "
                               + _instead(name, mask, driver_option))
    if not patches:
        raise ShimgenError(f"gate {name} has no init site to {direction} in this profile; "
                           "nothing written; " + _instead(name, mask, driver_option))
    return [Change(name, r.vaddr, r.text, c) for p in patches for c in p.changes
            for r in [next(r for r in p.insns if r.vaddr <= c.vaddr < r.vaddr + len(r.hex) // 2)]]


def select_changes(image: DriverImage, profile: Profile, gates: list[str], mask: bool,
                   sites: list[int], driver_option: str = "") -> list[Change]:
    """The bytes to change for these gates: every one chosen and proven, each still holding
    its shipped value in `image`. A gate without a chosen init site is refused with the way
    that works (`driver_option`: the --driver the user gave, for that command line)."""
    from .plan import verify_profile_against_image
    from .prove import prove

    direction = MASK if mask else SET
    wanted: list[Change] = []
    for name in gates:
        if name == P2P_GATE:
            wanted += _p2p_changes(profile, mask)
            continue
        wanted += _gate_changes(image, profile, name, mask, driver_option)
    if sites:
        known = sorted({c.insn_vaddr for c in wanted})
        unknown = [s for s in sites if s not in known]
        if unknown:
            raise ShimgenError(f"--site {unknown[0]:#x} is not an instruction the chosen "
                               f"changes touch ({', '.join(map(hex, known))})")
        wanted = [c for c in wanted if c.insn_vaddr in sites]
    data = image.contents
    have = [data[c.byte.file_offset] for c in wanted]
    if wanted and all(h == c.byte.new for h, c in zip(have, wanted, strict=True)):
        raise ShimgenError(f"{image.real_path} is already patched (the bytes at "
                           f"{', '.join(hex(c.byte.vaddr) for c in wanted)} are the patched "
                           "ones); nothing written")
    for h, c in zip(have, wanted, strict=True):
        if h != c.byte.old:
            raise ShimgenError(f"{image.real_path} is not the profiled build: the byte at "
                               f"{c.byte.vaddr:#x} is {h:#04x}, not {c.byte.old:#04x}; "
                               "nothing written")
    verify_profile_against_image(profile, image)
    result = prove(image, profile)
    if P2P_GATE in gates and not profile.p2p.proven:
        raise ShimgenError(f"gate {P2P_GATE}: a check failed its emulation proof "
                           f"({'; '.join(result.problems) or 'not proven'}); nothing written")
    for name in (g for g in gates if g != P2P_GATE):
        for p in profile.gate(name).init_patches:  # type: ignore[union-attr]
            if p.direction == direction and not p.proven:
                raise ShimgenError(f"gate {name}: the init-site change failed its emulation "
                                   f"proof ({'; '.join(result.problems) or 'not proven'}); "
                                   "nothing written")
    return wanted


def _p2p_changes(profile: Profile, mask: bool) -> list[Change]:
    """The P2P gate's branch bytes (gates/p2p.py): every check's, or a refusal."""
    g = profile.p2p
    if g is None:
        raise ShimgenError(f"unknown gate '{P2P_GATE}' (this profile has no P2P gate: "
                           "written by an older shimgen); nothing written")
    if mask:
        raise ShimgenError(f"gate {P2P_GATE} has nothing to mask: the driver's own checks are "
                           "the masked state; nothing written")
    if g.status != FOUND:
        raise ShimgenError(f"gate {P2P_GATE} was not found on this driver: {g.why}; "
                           "nothing written")
    return [Change(P2P_GATE, k.branch.vaddr, k.branch.text, c) for k in g.checks
            for c in k.changes]


def _out_dir(out: Path) -> int:
    """DIR, created owner-only when missing; an existing one must be a real directory of
    this user. Returns an fd of it (O_NOFOLLOW: a symlink is refused)."""
    try:
        os.mkdir(out, 0o700)
    except FileExistsError:
        pass
    try:
        fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as e:
        raise ShimgenError(f"{out}: not a directory this command can write into "
                           f"({e.strerror})") from None
    st = os.fstat(fd)
    if st.st_uid != os.getuid() or st.st_mode & 0o022:
        os.close(fd)
        raise ShimgenError(f"{out}: not owned by you, or writable by others; choose another -o")
    return fd


def _put(dfd: int, name: str, data: bytes) -> None:
    """`data` as DIR/name (0600), through a temporary name; an existing name is an error."""
    tmp = f".{name}.tmp{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=dfd)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.link(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd, follow_symlinks=False)
    except FileExistsError:
        raise ShimgenError(f"{name} already exists in the output directory; nothing replaced "
                           "(choose an empty -o)") from None
    finally:
        try:
            os.unlink(tmp, dir_fd=dfd)
        except OSError:
            pass


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write_copy(image: DriverImage, changes: list[Change], out: Path, mask: bool,
               gates: list[str]) -> dict:
    """The patched copy, its links and its manifest in `out`; returns the manifest."""
    name = image.real_path.name
    if name in LINKS or name == MANIFEST:
        name = f"{name}.patched"
    copy = bytearray(image.contents)
    for c in changes:
        copy[c.byte.file_offset] = c.byte.new
    manifest = {
        "schema": MANIFEST_SCHEMA,
        "direction": MASK if mask else SET,
        "gates": gates,
        "original": {"path": str(image.real_path), "version": image.version,
                     "build_id": image.build_id, "sha256": _sha256(image.contents)},
        "copy": {"file": name, "sha256": _sha256(bytes(copy)), "links": list(LINKS)},
        "changes": [{"gate": c.gate, "vaddr": hex(c.byte.vaddr),
                     "file_offset": hex(c.byte.file_offset), "old": f"{c.byte.old:#04x}",
                     "new": f"{c.byte.new:#04x}", "insn_vaddr": hex(c.insn_vaddr),
                     "insn": c.insn} for c in changes],
    }
    dfd = _out_dir(out)
    try:
        for n in (name, *LINKS, MANIFEST):
            try:
                os.lstat(n, dir_fd=dfd)
            except FileNotFoundError:
                continue
            raise ShimgenError(f"{out / n} already exists; nothing replaced (choose an empty -o)")
        _put(dfd, name, bytes(copy))
        os.symlink(name, LINKS[0], dir_fd=dfd)
        os.symlink(LINKS[0], LINKS[1], dir_fd=dfd)
        _put(dfd, MANIFEST, (json.dumps(manifest, indent=2) + "\n").encode())
    finally:
        os.close(dfd)
    return manifest


def run(driver: Path, gates: list[str], out: Path, mask: bool, profile_path: Path | None,
        sites: list[int], driver_option: str = "") -> int:
    """`shimgen patch`: check, prove, write; one summary on stdout."""
    from ..driver import read_driver

    image = read_driver(driver)
    patched = already_patched(image)
    if patched is not None:
        raise ShimgenError(patched)
    profile = _profile(image, profile_path)
    changes = select_changes(image, profile, gates, mask, sites, driver_option)
    m = write_copy(image, changes, out, mask, gates)
    print(f"driver     {image.real_path} (build-id {image.build_id})")
    print(f"copy       {out / m['copy']['file']} ({m['direction']} {','.join(gates)}), "
          f"links {', '.join(LINKS)}")
    for c in m["changes"]:
        print(f"changed    {c['gate']:<7} {c['vaddr']} file {c['file_offset']} "
              f"{c['old']} -> {c['new']}  ({c['insn']})")
    print(f"manifest   {out / MANIFEST}")
    print(f"use        LD_LIBRARY_PATH={out} <program>   (roll back: unset LD_LIBRARY_PATH)")
    return 0


def command(args) -> int:
    """`shimgen patch`: a patched copy of the driver in -o DIR, the init sites changed,
    nothing else."""
    from ..errors import ShimgenError
    from ..options import driver_path, path_option

    gates = [g for g in args.gates.split(",") if g]
    if not gates or len(set(gates)) != len(gates):
        raise ShimgenError(f"--gates {args.gates!r}: name each gate once, comma-separated")
    out = path_option(args.out, "-o", "output directory")
    profile = path_option(args.profile, "--gate-profile", "profile")
    driver_option = ""
    if args.driver is not None:
        import shlex

        driver_option = f"--driver {shlex.quote(args.driver)}"
    return run(driver_path(args.driver), gates, out, args.mask, profile, args.site or [],
               driver_option)
