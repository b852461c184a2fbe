"""shimgen/tracefile.py, the reader of the binary trace file: real files written by a shim
on a real Debian driver, then cut short, changed byte by byte or swapped for foreign files.
Every one is refused with one line naming the file and what is wrong; the error slots and
histograms (which the time paths fill) are summed over blocks, written here into a real
file's blocks; a thousand files load in well under two seconds."""

from __future__ import annotations

import os
import struct
import sys
import time
from pathlib import Path

import pytest
from faultkit import run

from shimgen import tracefile
from shimgen.errors import ShimgenError
from shimgen.tracefile import HEADER_SIZE, load

FIELD_OFFSETS = {}
_at = 0
for _name, _code in zip(tracefile._FIELDS, [
        "8s", "I", "I", "Q", "I", "I", "Q", "Q", "Q", "Q", "Q", "I", "I", "I", "I", "I", "I", "I",
        "I", "I", "I", "I", "I", "Q", "Q", "q", "q", "16s", "I", "I", "Q", "Q", "Q", "Q", "Q", "Q",
        "Q", "Q", "32s", "32s", "136s", f"{tracefile.PATH_MAX}s"], strict=True):
    FIELD_OFFSETS[_name] = (_at, _code)
    _at += struct.calcsize("<" + _code)
assert _at == HEADER_SIZE


@pytest.fixture(scope="module")
def real_file(shims, probes, tmp_path_factory) -> Path:
    """A complete trace file of a timed process with several blocks (threads that stay),
    alive 100 ms after its calls so that its tick calibration gives times."""
    d = tmp_path_factory.mktemp("reader") / "traces"
    run(["sh", "-c", '(sleep 0.1; echo) | "$0" libcuda.so.1 rounds 2 3 11', probes / "tracekill"],
        shims[0].env(SHIMGEN_TRACE="time", SHIMGEN_TRACE_DIR=str(d)))
    (f,) = d.glob("*.shimtrace")
    return f


def header(data: bytes) -> dict:
    return dict(zip(tracefile._FIELDS, tracefile._HEADER.unpack_from(data, 0), strict=True))


def put(data: bytearray, field: str, value) -> None:
    at, code = FIELD_OFFSETS[field]
    struct.pack_into("<" + code, data, at, value)


def refused(path: Path, *words: str) -> str:
    with pytest.raises(ShimgenError) as e:
        load(path)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"{path}: "), msg
    for w in words:
        assert w in msg, msg
    return msg


def test_real_file_reads(real_file):
    t = load(real_file)
    assert t.source == "shimtrace" and t.complete and t.mode == "time"
    assert t.functions["cuDriverGetVersion"].calls > 0
    assert t.functions["cuDriverGetVersion"].total_ns > 0
    h = header(real_file.read_bytes())
    assert (real_file.stat().st_size - h["blocks_off"]) // h["block_stride"] >= 3


@pytest.mark.parametrize("cut", ["empty", "magic", "half-header", "names", "mid-block",
                                 "last-byte", "whole-block"])
def test_truncated_file_is_refused(real_file, tmp_path, cut):
    data = real_file.read_bytes()
    h = header(data)
    end = {"empty": 0, "magic": 5, "half-header": HEADER_SIZE // 2,
           "names": h["names_off"] + 10, "mid-block": h["blocks_off"] + 100,
           "last-byte": len(data) - 1, "whole-block": len(data) - h["block_stride"]}[cut]
    p = tmp_path / "cut.shimtrace"
    p.write_bytes(data[:end])
    words = {"empty": "not a shimgen trace", "magic": "not a shimgen trace",
             "mid-block": "not a whole number", "last-byte": "not a whole number",
             "whole-block": "it holds"}.get(cut, "truncated")
    refused(p, "truncated" if "shimgen" not in words else words, words)


@pytest.mark.parametrize("field,value,words", [
    ("magic", b"SHIMTRC\0", ["wrong magic"]),
    ("version", 2, ["format version 2", "reads version 1"]),
    ("header_size", HEADER_SIZE + 8, ["header"]),
    ("byte_order", 0x0807060504030201, ["byte order"]),
    ("nfuncs", 0, ["0 functions"]),
    ("nfuncs", 599, ["names table"]),
    ("page_size", 4095, ["page size"]),
    ("block_stride", 4096, ["stride"]),
    ("blocks_off", 4096, ["blocks start"]),
    ("names_off", 0, ["names table"]),
    ("off_hist", 1 << 30, ["hist"]),
    ("off_fn", 8 << 20, ["fn"]),
    ("err_slots", 1 << 24, ["err"]),
    ("hist_buckets", 32, ["histogram buckets"]),
    ("mode", 7, ["trace mode 7"]),
    ("state", 9, ["state 9"]),
    ("blocks_reserved", 1, ["holds"]),
    ("blocks_mapped", 99, ["holds"]),
    ("end_ns", 0, ["complete without an end"]),
])
def test_corrupt_header_is_refused(real_file, tmp_path, field, value, words):
    data = bytearray(real_file.read_bytes())
    put(data, field, value)
    p = tmp_path / "bad.shimtrace"
    p.write_bytes(bytes(data))
    refused(p, *words)


def test_corrupt_names_and_error_slots_are_refused(real_file, tmp_path):
    data = bytearray(real_file.read_bytes())
    h = header(data)
    bad = bytearray(data)
    bad[h["names_off"] + 3] = 0  # one name becomes two: one name too many
    p = tmp_path / "names.shimtrace"
    p.write_bytes(bytes(bad))
    refused(p, "names table")
    bad = bytearray(data)
    struct.pack_into("<QQ", bad, h["blocks_off"] + h["off_err"], (h["nfuncs"] + 1) << 32 | 1, 1)
    p = tmp_path / "err.shimtrace"
    p.write_bytes(bytes(bad))
    refused(p, "error slot")


@pytest.mark.parametrize("what", ["driver", "json", "directory", "missing", "zeros"])
def test_foreign_file_is_refused(shims, tmp_path, what):
    p = tmp_path / "x.shimtrace"
    if what == "driver":
        p = shims[0].driver.path
    elif what == "json":
        p.write_text('{"calls": {}}\n' * 400)
    elif what == "directory":
        p.mkdir()
    elif what == "zeros":
        p.write_bytes(bytes(HEADER_SIZE + 4096))
    refused(p)


def test_error_slots_and_histograms_are_summed_over_blocks(real_file, tmp_path):
    """The time paths' error returns and histograms, cleared in every block of a real file
    (whatever its calls put there) and then written into two blocks: the reader sums them
    per function and code, and adds the slots' overflow."""
    data = bytearray(real_file.read_bytes())
    h = header(data)
    names = bytes(data[h["names_off"]:h["names_off"] + h["names_size"]]).split(b"\0")
    idx = names.index(b"cuDriverGetVersion")
    other = names.index(b"cuInit")
    for b in range((len(data) - h["blocks_off"]) // h["block_stride"]):
        base = h["blocks_off"] + b * h["block_stride"]
        data[base + h["off_err"]:base + h["off_err"] + 16 * 256] = bytes(16 * 256)
        struct.pack_into("<Q", data, base + h["off_err_overflow"], 0)
        for fn in (idx, other):
            row = base + h["off_hist"] + fn * 64 * 8
            data[row:row + 64 * 8] = bytes(64 * 8)
    for b, (n100, n2) in enumerate([(3, 0), (4, 5)]):
        base = h["blocks_off"] + b * h["block_stride"]
        slots = [((idx + 1) << 32 | 100, n100), ((other + 1) << 32 | 2, n2)]
        for k, (key, cnt) in enumerate(slots):
            struct.pack_into("<QQ", data, base + h["off_err"] + 16 * (k + 3 * b), key, cnt)
        struct.pack_into("<Q", data, base + h["off_err_overflow"], 7)
        hist = base + h["off_hist"] + idx * 64 * 8
        struct.pack_into("<QQ", data, hist + 8 * 5, 10 + b, 1)
    p = tmp_path / "filled.shimtrace"
    p.write_bytes(bytes(data))
    t = load(p)
    f = t.functions["cuDriverGetVersion"]
    assert f.errors == {100: 7}
    assert t.functions["cuInit"].errors == {2: 5}
    assert f.hist[5] == 21 and f.hist[6] == 2 and sum(f.hist) == 23
    assert t.errors_overflow == 14


def test_short_calibration_gives_no_times_and_says_so(real_file, tmp_path):
    data = bytearray(real_file.read_bytes())
    h = header(data)
    put(data, "calib_ns1", h["calib_ns0"] + 1000)
    p = tmp_path / "short.shimtrace"
    p.write_bytes(bytes(data))
    t = load(p)
    assert t.ns_per_tick is None and t.functions["cuDriverGetVersion"].total_ns is None
    assert any("calibration spans" in n for n in t.notes)


def test_a_thousand_files_load_in_under_two_seconds(real_file, tmp_path):
    paths = []
    for i in range(1000):
        q = tmp_path / f"{i}.shimtrace"
        os.link(real_file, q)
        paths.append(q)
    t0 = time.perf_counter()
    total = sum(load(q).functions["cuDriverGetVersion"].calls for q in paths)
    took = time.perf_counter() - t0
    assert total == 1000 * load(real_file).functions["cuDriverGetVersion"].calls
    assert took < 2.0, took


def test_import_is_cheap():
    code = "import sys, shimgen.tracefile; print('elftools' in sys.modules)"
    proc = run([sys.executable, "-c", code], dict(os.environ))
    assert proc.stdout.strip() == "False"
