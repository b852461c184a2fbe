"""`shimgen run`: a command run under a shim, its traces kept in a run directory.

main.py orchestrates, top-down: the options (options.py), the shim (from the cache), the run
directory (directory.py), the child (child.py), and what is said at the end (summary.py).
"""

from .. import face

__getattr__, __all__ = face(__name__, {
    "command": "main:command",
})
