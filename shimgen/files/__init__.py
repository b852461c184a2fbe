"""Files named by the user or made for the user: reading.py opens one without blocking
and only when it is a regular file, writing.py writes one whole or not at all, owned.py
says whether a file or directory is the user's alone (and whether code may be trusted).
"""

from .. import face

__getattr__, __all__ = face(__name__, {
    "ANOTHER_USER": "owned",
    "NOT_A_DIRECTORY": "owned",
    "NOT_A_FILE": "owned",
    "OPEN_TO_OTHERS": "owned",
    "check_target": "writing",
    "distrust": "owned",
    "distrust_code": "owned",
    "open_regular": "reading",
    "read_regular": "reading",
    "replacing": "writing",
    "write_whole": "writing",
})
