"""The shim cache of `shimgen run`: one built shim per driver build and options, reused
while it is the user's own and unchanged (docs/run.md, "The cache").

store.py finds an entry or builds it (through the build pipeline, shim/), seal.py records and
checks what an entry's library is, trust.py opens every level without following a symlink
and takes a bad entry away, memo.py remembers the default driver.
"""

from .. import face

__getattr__, __all__ = face(__name__, {
    "Unusable": "trust",
    "cache_root": "trust",
    "default_driver": "memo",
    "ensure": "store",
    "entry_dir": "store",
    "key_for": "store",
    "key_for_nvml": "store",
    "lookup": "store",
    "open_dir": "trust",
    "open_file": "trust",
})
