"""Which driver functions get hand-written hooks: the one table, as data.

Every other exported function is forwarded untouched by its assembly trampoline. A hook is a
C function `shimgen_hook_<name>` defined in the named template under templates/hooks/; it
reaches the real driver through `shimgen_real[SHIMGEN_IDX_<name>]`, never through the
trampolines, so a hook can never recurse into itself.

Generation fails when this table names a function the driver does not export.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Hook:
    name: str  # exported driver function
    template: str  # file under templates/hooks/
    why: str


HOOKS: tuple[Hook, ...] = (
    Hook(
        "cuGetProcAddress",
        "proc_address.c.j2",
        "answer with the shim's forwarder of the variant the real driver picked",
    ),
    Hook(
        "cuGetProcAddress_v2",
        "proc_address.c.j2",
        "same, keeping the driver's query-result out-parameter",
    ),
)

# Not hooked on purpose (documented in docs/design.md): cuGetExportTable returns tables of
# private entry points whose layout is not public; it is forwarded untouched.

