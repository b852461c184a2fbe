"""A program's bad pointers never turn a call the driver answers into a crash under the
shim (docs/security.md, "What a program passes"): every function whose arguments the shim
reads (each function with a capture in the calls capture table, generated from
shimgen/calls/model.py for the driver's exports, and every hooked function), each of its
pointer arguments in turn NULL, 0x10 and an unmapped page, the others zeroed buffers, is
called in a forked child of tests/c/badpointers.c without the shim, then under `--trace
calls` without and with `SHIMGEN_LIMIT_MEMORY` (and the attribute hook's `--trace attrs`);
each child's exit status (its result, or the signal that ended it) must be the same. No
trace directory: the records are kept in memory, read as they are in a file, and a
thousand children make no thousand files. The real Debian driver answers without a GPU
(before cuInit); the memory routes, which need a device, run on the FAKE ledger driver
(tests/c/fake_ledger_libcuda.c) with a context current."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from shimgen.calls.model import description, prototype
from shimgen.driver.library import read_driver
from shimgen.shim.hooks import HOOKS
from shimgen.shim.memroutes import ROUTES
from tests.faultkit import run, shim_for

POINTERS = ("string", "outstr", "struct", "out", "ptr")
KINDS = (0, 1, 2)  # NULL, 0x10, an unmapped page (badpointers.c)
LIMIT = "1073741824"
DRIVER = "550.163.01"  # the real driver the cases run on


def cases(names: list[str], every: set[str]) -> str:
    """The case file: for each function of `names` that has a capture or is in `every`,
    each pointer argument (by the model of its prototype) made bad in turn."""
    desc = description()
    lines = []
    for name in names:
        p = prototype(desc, name)
        if p is None or not (p.captures or name in every) or any(
                a.kind == "float" for a in p.args):
            continue
        slots = [a.slot for a in p.args if a.kind in POINTERS and a.slot is not None]
        mask = sum(1 << s for s in slots)
        lines += [f"{name} {mask:x} {s} {k}" for s in slots for k in KINDS]
    return "\n".join(lines) + "\n"


def statuses(probes, env, case_file: Path, *setup: str) -> dict[str, str]:
    proc = run([probes / "badpointers", case_file, *setup], env, timeout=300)
    out = {}
    for ln in proc.stdout.splitlines():
        name, slot, kind, *status = ln.split()
        out[f"{name} arg {slot} {('NULL', '0x10', 'unmapped')[int(kind)]}"] = " ".join(status)
    return out


def differ(base: dict, got: dict) -> list[str]:
    return [f"{k}: {base[k]} without the shim, {got.get(k)} with it" for k in base
            if base[k] != "absent" and got.get(k) != base[k]]


# calls mode, with a limit, and the attribute hook's trace (the hooks of its feature)
MODES = {"calls": {"SHIMGEN_TRACE": "calls"},
         "calls_limit": {"SHIMGEN_TRACE": "calls", "SHIMGEN_LIMIT_MEMORY": LIMIT},
         "attrs": {"SHIMGEN_TRACE": "attrs"}}


@pytest.mark.parametrize("mode", MODES)
def test_bad_pointers_to_the_real_driver_end_as_without_the_shim(shims, probes, tmp_path, mode):
    shim = shim_for(shims, DRIVER)
    names = read_driver(shim.driver.path).function_names()
    hooked = {h.name for h in HOOKS}
    case_file = tmp_path / "cases"
    case_file.write_text(cases(sorted(names), hooked))
    assert case_file.read_text().count("cuModuleLoad ") == 6  # module and name: 2 x 3
    base = statuses(probes, shim.env_without_shim(), case_file)
    assert len(base) > 1000 and base["cuModuleLoad arg 1 0x10"] == "exit 3"
    env = shim.env(SHIMGEN_QUIET="1", SHIMGEN_CALLS_RING="1024", **MODES[mode])
    assert differ(base, statuses(probes, env, case_file)) == []


@pytest.mark.parametrize("mode", MODES)
def test_bad_pointers_to_the_memory_routes_end_as_without_the_shim(probes, tmp_path, mode):
    from tests.shimcache import fake_driver_shim

    fake = probes / "libfake_ledger_libcuda.so"
    shim = fake_driver_shim(fake)
    case_file = tmp_path / "cases"
    case_file.write_text(cases([r.name for r in ROUTES], {r.name for r in ROUTES}))
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SHIMGEN_")}
    base = statuses(probes, clean | {"LD_PRELOAD": str(fake)}, case_file, "ctx")
    assert base["cuMemCreate arg 2 0x10"] == "exit 1"
    env = clean | {"LD_PRELOAD": str(shim), "SHIMGEN_DRIVER": str(fake),
                   "SHIMGEN_QUIET": "1", "SHIMGEN_CALLS_RING": "1024", **MODES[mode]}
    assert differ(base, statuses(probes, env, case_file, "ctx")) == []
