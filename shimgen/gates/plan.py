"""What the shim needs at run time to set or mask gates: the part of a gate profile that is
baked into the generated C, plus the instruction bytes the shim compares with the loaded
driver image before it writes anything.

A plan comes from a proven profile (`shimgen build --gate-profile auto` runs discovery and the
emulation proof; `--gate-profile FILE` loads a profile written by `shimgen gates --json`); one whose
proof was not run or failed only with `--allow-unproven-gates`. Before baking, the plan is
checked against the driver file being built for: same build-id, same bytes at every recorded
instruction.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ..driver import DriverImage
from ..errors import ShimgenError
from . import ALLOW_UNPROVEN
from .profile import PROOF_FAILED, PROOF_PASSED, InsnRef, Profile, load_profile

GATE_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,15}$")
MAX_CHECK_BYTES = 16
MAX_INIT_BYTES = 8  # per gate and direction (runtime/gates/gateplan.h: GATE_MAX_PATCHES)


@dataclass(frozen=True)
class PlanField:
    offset: int  # byte offset in the per-device struct
    mask: int  # bit(s) within that byte


@dataclass(frozen=True)
class PlanGlobal:
    vaddr: int  # relative to the driver's load base
    size: int  # 1, 2, 4 or 8 bytes; "set" writes 1, "mask" writes 0


@dataclass(frozen=True)
class PlanByte:
    """One byte of the driver's code that SHIMGEN_GATE_METHOD=init changes before cuInit."""

    vaddr: int
    old: int
    new: int


@dataclass(frozen=True)
class PlanGate:
    name: str
    attributes: tuple[int, ...]
    fields: tuple[PlanField, ...]
    globals: tuple[PlanGlobal, ...]
    # the proven init-site changes that set / mask the gate (empty: no init method for it)
    init_set: tuple[PlanByte, ...] = ()
    init_mask: tuple[PlanByte, ...] = ()


@dataclass(frozen=True)
class PlanCheck:
    vaddr: int
    file_offset: int
    data: bytes


@dataclass(frozen=True)
class GatePlan:
    build_id: str
    driver_version: str
    table_vaddr: int
    table_offset: int
    table_stride: int
    count_vaddr: int | None
    count_size: int | None
    gates: tuple[PlanGate, ...]
    checks: tuple[PlanCheck, ...]
    proof: str = PROOF_PASSED  # the profile's proof status (profile.PROOF_STATUSES)

    max_init_bytes = MAX_INIT_BYTES

    @property
    def has_init_bytes(self) -> bool:
        """Whether any gate can be applied at its init site (SHIMGEN_GATE_METHOD=init)."""
        return any(g.init_set or g.init_mask for g in self.gates)

    def validate(self) -> None:
        if not re.fullmatch(r"[0-9a-f]{16,80}", self.build_id):
            raise ShimgenError("gate plan: build-id is not hex")
        if self.table_stride != 8:
            raise ShimgenError("gate plan: device table stride must be 8")
        if self.count_size not in (None, 1, 2, 4, 8):
            raise ShimgenError("gate plan: device count size must be 1, 2, 4 or 8")
        if not self.gates:
            raise ShimgenError("gate plan: no gates")
        names = [g.name for g in self.gates]
        if len(set(names)) != len(names):
            raise ShimgenError("gate plan: a gate name appears twice")
        for g in self.gates:
            if not GATE_NAME.match(g.name):
                raise ShimgenError(f"gate plan: gate name {g.name!r} is not a short identifier")
            if not g.fields and not g.globals and not g.init_set:
                raise ShimgenError(f"gate plan: gate {g.name} changes nothing")
            for f in g.fields:
                if not (0 <= f.offset < 1 << 20) or not (0 < f.mask < 256):
                    raise ShimgenError(f"gate plan: gate {g.name} has a bad field {f}")
            for gl in g.globals:
                if gl.size not in (1, 2, 4, 8) or gl.vaddr <= 0:
                    raise ShimgenError(f"gate plan: gate {g.name} has a bad global {gl}")
            for bs in (g.init_set, g.init_mask):
                if len(bs) > MAX_INIT_BYTES or any(
                        b.vaddr <= 0 or not (0 <= b.old < 256 and 0 <= b.new < 256)
                        or b.old == b.new or not self._checked(b) for b in bs):
                    raise ShimgenError(f"gate plan: gate {g.name} has a bad init-site change")
        if not self.checks:
            raise ShimgenError("gate plan: no instruction bytes to verify the driver with")

    def _checked(self, b: PlanByte) -> bool:
        """Whether the shim compares the byte that `b` changes, as `b.old`, before writing."""
        for c in self.checks:
            if c.vaddr <= b.vaddr < c.vaddr + len(c.data):
                return c.data[b.vaddr - c.vaddr] == b.old
        return False


def plan_from_profile(profile: Profile) -> GatePlan:
    """Reduce a Profile (already proven) to what the shim needs."""
    if profile.device_table is None:
        raise ShimgenError("gate profile has no device table; the shim cannot reach devices")
    gates = []
    for g in profile.gates:
        init = {d: tuple(PlanByte(c.vaddr, c.old, c.new) for p in g.init_patch(d)
                         for c in p.changes) for d in ("set", "mask")}
        gates.append(
            PlanGate(
                name=g.name,
                attributes=tuple(g.attributes),
                fields=tuple(PlanField(f.offset, f.mask) for f in g.fields),
                globals=tuple(PlanGlobal(x.vaddr, x.size) for x in g.globals),
                init_set=init["set"],
                init_mask=init["mask"],
            )
        )
    p2p = profile.p2p
    if p2p is not None and p2p.proven and len(p2p.changes) <= MAX_INIT_BYTES:
        # a branch of the driver's code, not a struct bit: only its bytes, for the init method
        # (more bytes than the shim's writer takes: not baked; `shimgen patch` still writes them)
        gates.append(PlanGate(p2p.name, (), (), (), tuple(PlanByte(c.vaddr, c.old, c.new)
                                                          for c in p2p.changes)))
    checks: dict[int, PlanCheck] = {}
    for r in checked_insns(profile):
        data = bytes.fromhex(r.hex)[:MAX_CHECK_BYTES]
        checks.setdefault(r.vaddr, PlanCheck(r.vaddr, r.file_offset, data))
    dt = profile.device_table
    plan = GatePlan(
        build_id=profile.build_id,
        driver_version=profile.driver_version or "unknown",
        table_vaddr=dt.vaddr,
        table_offset=dt.offset,
        table_stride=dt.stride,
        count_vaddr=dt.count_vaddr,
        count_size=dt.count_size,
        gates=tuple(gates),
        checks=tuple(sorted(checks.values(), key=lambda c: c.vaddr)),
        proof=profile.proof_status,
    )
    plan.validate()
    return plan


def verify_against_image(plan: GatePlan, image: DriverImage) -> None:
    """The plan must describe exactly this driver file: build-id and every checked byte."""
    if plan.build_id != image.build_id:
        raise ShimgenError(
            f"gate profile is for build-id {plan.build_id}, driver {image.real_path} has "
            f"{image.build_id or 'none'}; run `shimgen gates` on this driver"
        )
    for c in plan.checks:
        if image.contents[c.file_offset:c.file_offset + len(c.data)] != c.data:
            raise ShimgenError(
                f"gate profile does not match {image.real_path}: bytes at 0x{c.vaddr:x} differ"
            )


def checked_insns(profile: Profile) -> list[InsnRef]:
    """The instructions the shim checks again at run time: the device table's, the
    attribute reader's, those of every gated case, every init site and the instructions
    the init patches change (whose bytes must be the shipped ones before any write)."""
    refs = list(profile.device_table.insns)
    if profile.reader is not None:
        refs += list(profile.reader.insns)
    for case in profile.cases:
        refs += [f.insn for f in case.fields] + [x.insn for x in case.globals]
    for g in profile.gates:
        for site in g.init_sites:
            refs += [site.insn] + ([site.or_insn] if site.or_insn is not None else [])
        for p in g.init_patches:
            refs += p.insns
    if profile.p2p is not None:
        refs += profile.p2p.insns()
    return refs


def recorded_insns(profile: Profile) -> list[InsnRef]:
    """Every instruction a profile records (all of them are checked at run time too)."""
    return checked_insns(profile)


def verify_profile_against_image(profile: Profile, image: DriverImage) -> None:
    """Every instruction the profile records must be in this file, byte for byte: a profile
    is a statement about one driver, and all of it is checked, not only what is baked in."""
    for r in recorded_insns(profile):
        want = bytes.fromhex(r.hex)
        if image.contents[r.file_offset:r.file_offset + len(want)] != want:
            raise ShimgenError(
                f"gate profile does not match {image.real_path}: bytes at 0x{r.vaddr:x} differ"
            )


def load_plan(image: DriverImage, source: str, allow_unproven: bool = False) -> GatePlan:
    """`--gate-profile auto`: discover and prove now; `--gate-profile FILE`: a profile from
    `shimgen gates`. A profile whose proof did not pass (not run, or failed) is refused unless
    `allow_unproven`."""
    p2p_proof = None
    if source == "auto":
        # discovery and the proof need capstone and unicorn: imported only when used
        from .discover import discover
        from .prove import prove

        profile = discover(image)
        profile.proof = prove(image, profile).to_json()
        what = f"the gates found in {image.real_path} (--gate-profile auto)"
    else:
        profile = load_profile(Path(source))
        what = f"gate profile {source}"
        for p in (p for g in profile.gates for p in g.init_patches):
            p.proven = False  # proven again below, once the file is known to be this driver
        p2p_proof = profile.p2p.proof if profile.p2p is not None else None
        if profile.p2p is not None:
            profile.p2p.proof = None  # the same
    plan = plan_from_profile(profile)
    # the build-id first, then the windows the shim checks, which hold every instruction the
    # profile records (checked_insns; `shimgen patch` checks them without a plan)
    verify_against_image(plan, image)
    if source != "auto" and any(p.status == "chosen" for g in profile.gates
                                for p in g.init_patches):
        from .prove import prove_init_patches

        problems = prove_init_patches(image, profile)
        if problems:
            raise ShimgenError(f"gate profile {source}: an init-site change failed its "
                               f"emulation proof ({problems[0]}); not used")
        plan = plan_from_profile(profile)  # with the init bytes that were proven now
    if source != "auto" and p2p_proof is not None and profile.p2p.status == "found":
        from .p2p_prove import prove_p2p

        got = prove_p2p(image, profile.p2p)
        if not got["ok"]:
            raise ShimgenError(f"gate profile {source}: the p2p-mixed gate failed its "
                               f"emulation proof ({got['problems'][0]}); not used")
        plan = plan_from_profile(profile)  # with the P2P branch bytes proven now
    if plan.proof != PROOF_PASSED and not allow_unproven:
        how = "failed" if plan.proof == PROOF_FAILED else "was not run"
        raise ShimgenError(f"{what}: its emulation proof {how}; not baking unproven gates "
                           f"(give {ALLOW_UNPROVEN} to bake them anyway, at your risk)")
    return plan
