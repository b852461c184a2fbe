"""What `report --calls` decodes a process's calls with: a Decoder per function table, made
from the CUDA headers this machine has, used only for a trace whose shim recorded with the
same capture table (calls/model.py table_digest); the note that says when it is not."""

from __future__ import annotations


def decoders():
    """(get, note): get(names, digest) is the Decoder of a process's function table, whose
    shim recorded with the capture table of that digest (0: not recorded, a file of an older
    format); one made from these headers decodes its calls only when this table is that
    one, else they are shown raw (get's second value: True). `note`: why every call is
    shown raw (no headers), or None."""
    from ..calls import Decoder, capture_table, description

    try:
        desc, note = description(), None
    except Exception as e:  # noqa: BLE001 - without headers the calls are shown raw
        desc, note = None, f"no prototypes ({str(e).splitlines()[0] if str(e) else e}): " \
                           "arguments are shown as raw registers"
    cache: dict[tuple, object] = {}

    def get(names: list[str], digest: int = 0):
        key = tuple(names)
        if key not in cache:
            cache[key] = (Decoder(desc, names), Decoder(None, names),
                          capture_table(names)["digest"] if desc else 0)
        dec, raw, ours = cache[key]
        other = bool(desc) and digest != 0 and digest != ours
        return (raw if other else dec), other
    return get, note


def other_headers_note(pids: list[int]) -> str:
    from ..calls import description

    n = len(pids)
    return (f"{'process' if n == 1 else f'{n} processes'} "
            f"{', '.join(map(str, pids[:8]))}{' ...' if n > 8 else ''}: "
            f"recorded by a shim built from other CUDA headers than {description()['include']} "
            "(its capture table differs): arguments are shown as raw registers")
