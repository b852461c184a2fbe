"""`shimgen diff OLD NEW`: what a driver upgrade changes for a shim. compare.py makes the
comparison (exports, hooks, gates through gates.py, cuGetProcAddress answers through
procaddr.py, which compiles query.c, and query.py, which runs it and compares the answers),
main.py is the command and its text.
"""

from .. import face

__getattr__, __all__ = face(__name__, {
    "command": "main:command",
})
