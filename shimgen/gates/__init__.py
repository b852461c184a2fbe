"""Attribute gates: find them in a driver build, prove them, and plan what the shim bakes in.

The modules, in the order the data flows: profile.py (the records and their JSON), facts.py
(what the others share: the gate rules, the change directions, the emulator's base), x86.py
(decoding), flow.py (control flow), cases.py (one jump-table case), discover.py (the whole
analysis), initsite.py (each gate bit's init site), emulator.py and prove.py (emulation),
plan.py (what the shim needs), report.py (`shimgen gates`), patch.py (`shimgen patch`).
"""

#: The `shimgen build` option that bakes a profile whose proof was not run or failed.
ALLOW_UNPROVEN = "--allow-unproven-gates"
