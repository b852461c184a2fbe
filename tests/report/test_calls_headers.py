"""A calls trace records the digest of the capture table its shim was built with (format
version 9, `calls_table_digest`): `report --calls` decodes a process's calls with the
headers it finds only when their table is that one; a trace whose shim was built from other
CUDA headers is shown raw, and the report says so (text and JSON); a version 8 file, which
recorded none, is decoded as before."""

from __future__ import annotations

import json

from shimgen.calls import capture_table, load_run
from shimgen.trace import binary as tracefile
from tests.report.test_tracefile_reader import header, put
from tests.runtime.test_calls import cli, traced

OTHER = "other CUDA headers"


def as_version_8(data: bytes) -> bytes:
    """A current file made into the version 8 file the same process would have written: the
    header without its last field, the names right after it, the blocks where they were."""
    h = header(data)
    v8 = tracefile.HEADER_SIZES[8]
    head = bytearray(data[:v8])
    put(head, "version", 8)
    put(head, "header_size", v8)
    put(head, "names_off", v8)
    names = data[h["names_off"]:h["names_off"] + h["names_size"]]
    return bytes(head) + names + bytes(h["blocks_off"] - v8 - len(names)) + \
        data[h["blocks_off"]:]


def _init_args(report: dict) -> dict:
    return next(c for c in report["calls"] if c["function"] == "cuInit")["args"]


def test_a_trace_of_other_headers_is_shown_raw_and_said_so(shims, probes, tmp_path):
    d = traced(shims[0], probes, tmp_path, "routes")
    (f,) = d.iterdir()
    (pc,) = load_run(d)
    assert pc.table_digest == capture_table(pc.names)["digest"] != 0
    ours = json.loads(cli("--calls", "--json", d).stdout)
    assert _init_args(ours) == {"Flags": 0} and OTHER not in (ours["note"] or "")

    data = f.read_bytes()
    other = bytearray(data)
    put(other, "calls_table_digest", pc.table_digest ^ 1)
    f.write_bytes(bytes(other))
    raw = cli("--calls", "--json", d)
    assert raw.returncode == 0, raw.stderr
    got = json.loads(raw.stdout)
    assert "Flags" not in _init_args(got) and OTHER in got["note"], got["note"]
    assert [c["function"] for c in got["calls"]] == [c["function"] for c in ours["calls"]]
    text = cli("--calls", d)
    assert text.returncode == 0 and any(
        ln.startswith("note") and OTHER in ln and str(pc.pid) in ln
        for ln in text.stdout.splitlines()), text.stdout

    f.write_bytes(as_version_8(data))  # recorded no digest: decoded with these headers
    old = json.loads(cli("--calls", "--json", d).stdout)
    assert old["calls"] == ours["calls"] and OTHER not in (old["note"] or "")
