"""`shimgen top RUN`: a live view of a running job, refreshed every second: per process
its state, its calls per second, and its longest call in progress (trace/job.py reads the
trace files; it never writes one). main.py is the command, view.py the screen and JSON.
"""

from .. import face

__getattr__, __all__ = face(__name__, {
    "command": "main",
})
