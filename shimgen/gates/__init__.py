"""Attribute gates: find them in a driver build, prove them, and plan what the shim bakes in.

The modules, in the order the data flows: profile.py (the records and their JSON), facts.py
(what the others share: the gate rules, the change directions, the emulator's base), x86.py
(decoding), flow.py (control flow), cases.py (one jump-table case), discover.py (the whole
analysis), initsite.py (each gate bit's init site), emulator.py and prove.py (emulation),
plan.py (what the shim needs), report.py (`shimgen gates`), patch.py (`shimgen patch`).
"""

from .. import face

#: The `shimgen build` option that bakes a profile whose proof was not run or failed.
ALLOW_UNPROVEN = "--allow-unproven-gates"

__getattr__, __all__ = face(__name__, {
    "GatePlan": "plan",
    "command": "report:command",
    "find_gates": "discover:discover",
    "load_plan": "plan",
    "patch_command": "patch:command",
    "prove_gates": "prove:prove",
    "why_no_gate": "facts",
})
