"""`shimgen probe`: GPU diagnostics with cuda-python, run in child processes without and with
the shim. `gated` asks about the gated capabilities, `p2p` (with `p2p_format`) about GPU
pairs, and `child` builds the environment of every probe and benchmark child process.

Nothing here is imported by the generator; cuda-python is imported only inside a probe.
"""

from .. import face

__getattr__, __all__ = face(__name__, {
    "child_env": "child",
    "command": "main:command",
})
