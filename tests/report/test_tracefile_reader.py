"""shimgen/trace/binary.py, the reader of the binary trace file: real files written by a shim
on a real Debian driver, then cut short, changed byte by byte or swapped for foreign files.
Every one is refused with one line naming the file and what is wrong; the error slots and
histograms (which the time paths fill) are summed over blocks, written here into a real
file's blocks; a thousand files load, each with its own counts. How fast the reader is, is
measured by `python -m benchmarks.tracefile_load`, not asserted here."""

from __future__ import annotations

import os
import signal
import struct
import sys
from pathlib import Path

import pytest

from shimgen.errors import ShimgenError
from shimgen.runenv import TRACE_VERSIONS_READ, trace_header_layout
from shimgen.trace import binary as tracefile
from shimgen.trace import blocks
from shimgen.trace.binary import HEADER_SIZE, load
from shimgen.trace.model import fine_octave
from tests.faultkit import run

V = "cuDriverGetVersion"
FIELD_OFFSETS = {name: (offset, code) for name, _, _, offset, code in trace_header_layout()}


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
    return tracefile._header(data, struct.unpack_from("<I", data, 8)[0])


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
    words = {"empty": "empty: the process died", "magic": "not a shimgen trace",
             "mid-block": "not a whole number", "last-byte": "not a whole number",
             "whole-block": "it holds"}.get(cut, "truncated")
    refused(p, "truncated" if "shimgen" not in words and "empty" not in words else words, words)


@pytest.mark.parametrize("field,value,words", [
    ("magic", b"SHIMTRC\0", ["wrong magic"]),
    # (the cases made of the format's own numbers named apart: the mutation list names
    # them, whatever those numbers become)
    pytest.param("version", tracefile.VERSION + 1,
                 [f"format version {tracefile.VERSION + 1}",
                  f"reads versions {', '.join(map(str, TRACE_VERSIONS_READ))}"], id="version-next"),
    ("fine_sub_shift", 5, ["fine histogram"]),
    ("off_fine", 1 << 30, ["fine histogram"]),
    ("fine_slots", 3000, ["fine histogram"]),
    ("fine_probes", 0, ["fine histogram"]),
    pytest.param("header_size", HEADER_SIZE + 8, ["header"], id="header_size-longer"),
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
    # version 2 had no injected failures in its error slots: refused, never misread
    ("version", 2, ["format version 2"]),
    # a version 5 file that says 3 has a longer header than version 3's: refused
    ("version", 3, [f"{tracefile.HEADER_SIZE} bytes, version 3 has 4656"]),
    # version 6 kept a kernel's name in 256 bytes of its slot (version 7: in an arena): refused
    ("version", 6, ["format version 6",
                    f"reads versions {', '.join(map(str, TRACE_VERSIONS_READ))}"]),
    # version 8's keys are steps of fine_hash: one below a fine bucket's bound is refused
    ("fine_hash", 4095, ["fine histogram"]),
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
    """The time paths' error returns and histograms (the log2 rows and the fine tables, whose
    calls a version 8 row leaves out), cleared in every block of a real file (whatever its
    calls put there) and then written into two blocks: the reader sums them per function and
    code, and adds the slots' overflow."""
    data = bytearray(real_file.read_bytes())
    h = header(data)
    names = bytes(data[h["names_off"]:h["names_off"] + h["names_size"]]).split(b"\0")
    idx = names.index(b"cuDriverGetVersion")
    other = names.index(b"cuInit")
    for b in range((len(data) - h["blocks_off"]) // h["block_stride"]):
        base = h["blocks_off"] + b * h["block_stride"]
        data[base + h["off_err"]:base + h["off_err"] + 16 * 256] = bytes(16 * 256)
        struct.pack_into("<Q", data, base + h["off_err_overflow"], 0)
        data[base + h["off_fine"]:base + h["off_fine"] + 8 * h["fine_slots"]] = \
            bytes(8 * h["fine_slots"])
        for fn in (idx, other):
            row = base + h["off_hist"] + fn * 64 * 8
            data[row:row + 64 * 8] = bytes(64 * 8)
    # cuInit's calls (tracekill makes none): no function fails more often than it is called
    struct.pack_into("<Q", data, h["blocks_off"] + h["off_fn"] + other * 32, 5)
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


def rate(h: dict, end: str) -> float:
    return (h["calib_ns" + end] - h["calib_ns0"]) / (h["calib_ticks" + end] - h["calib_ticks0"])


def test_the_calibration_made_with_the_file_stands_in_for_a_torn_or_bad_last_one(
        real_file, tmp_path):
    """Pair a (made with the file) is exact on its own; pair 1 (the longest span) is used
    unless it was being rewritten when the process died (calib_seq odd) or is no pair."""
    data = bytearray(real_file.read_bytes())
    h = header(data)
    assert h["calib_seq"] % 2 == 0 and h["calib_ns_a"] > h["calib_ns0"]
    assert load(real_file).ns_per_tick == pytest.approx(rate(h, "1"), rel=1e-12)
    assert (h["calib_width0"] + h["calib_width_a"]) * 4000 <= h["calib_ticks_a"] - h["calib_ticks0"]
    for field, value in (("calib_seq", h["calib_seq"] + 1), ("calib_ns1", h["calib_ns0"]),
                         ("calib_ticks1", h["calib_ticks0"] + 1)):
        bad = bytearray(data)
        put(bad, field, value)
        p = tmp_path / f"{field}.shimtrace"
        p.write_bytes(bytes(bad))
        t = load(p)
        assert t.ns_per_tick == pytest.approx(rate(h, "_a"), rel=1e-12), field
        assert t.functions["cuDriverGetVersion"].total_ns > 0 and not t.notes, t.notes
    put(data, "calib_ns1", h["calib_ns0"])
    put(data, "calib_ns_a", h["calib_ns0"])
    p = tmp_path / "both.shimtrace"
    p.write_bytes(bytes(data))
    t = load(p)
    assert t.ns_per_tick is None and t.functions["cuDriverGetVersion"].total_ns is None
    assert any("clock readings are corrupt" in n for n in t.notes)


def test_a_wide_calibration_still_gives_times_and_says_how_exact(real_file, tmp_path):
    data = bytearray(real_file.read_bytes())
    h = header(data)
    span = h["calib_ticks1"] - h["calib_ticks0"]
    put(data, "calib_width1", span // 50)  # 2% of the span
    put(data, "calib_width_a", h["calib_ticks_a"] - h["calib_ticks0"])
    p = tmp_path / "wide.shimtrace"
    p.write_bytes(bytes(data))
    t = load(p)
    assert t.ns_per_tick == pytest.approx(rate(h, "1"), rel=1e-12)
    assert any("exact to 2" in n for n in t.notes), t.notes


def test_a_thousand_files_load(real_file, tmp_path):
    paths = []
    for i in range(1000):
        q = tmp_path / f"{i}.shimtrace"
        os.link(real_file, q)
        paths.append(q)
    total = sum(load(q).functions["cuDriverGetVersion"].calls for q in paths)
    assert total == 1000 * load(real_file).functions["cuDriverGetVersion"].calls


def test_import_is_cheap():
    code = "import sys, shimgen.trace.binary; print('elftools' in sys.modules)"
    proc = run([sys.executable, "-c", code], dict(os.environ))
    assert proc.stdout.strip() == "False"


def _blocked(_signum, _frame):
    raise AssertionError("the reader blocked (no answer in 60 s)")


def test_a_fifo_or_a_device_is_refused_at_once(tmp_path):
    """Opened without blocking and checked to be a regular file: a FIFO with no writer, a
    device or a directory is one line, never a reader blocked for ever (an alarm turns a
    reader that blocks into a failure: no time is measured)."""
    fifo = tmp_path / "x.shimtrace"
    os.mkfifo(fifo)
    old = signal.signal(signal.SIGALRM, _blocked)
    signal.alarm(60)
    try:
        refused(fifo, "not a regular file")
        refused(Path("/dev/zero"), "not a regular file")
        refused(tmp_path, "a directory")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def test_a_symbolic_link_is_not_followed_when_asked_not_to(real_file, tmp_path):
    link = tmp_path / "l.shimtrace"
    link.symlink_to(real_file)
    assert load(link).functions  # named by the user: followed
    with pytest.raises(ShimgenError, match="symbolic link"):
        load(link, follow=False)


def test_a_sparse_file_of_16_gib_is_read_in_the_time_of_its_data(real_file, tmp_path,
                                                                 monkeypatch):
    """The header says blocks up to the end of a 16 GiB file that is a hole past its real
    blocks (a few hundred KiB on disk): the reader skips the holes (SEEK_DATA), so it visits
    the blocks that hold data and no other (its time, that of the data, is measured by
    `python -m benchmarks.tracefile_load`), and the counts are the real blocks' own."""
    data = bytearray(real_file.read_bytes())
    h = header(data)
    size = 16 << 30
    size -= (size - h["blocks_off"]) % h["block_stride"]
    put(data, "blocks_reserved", (size - h["blocks_off"]) // h["block_stride"])
    p = tmp_path / "sparse.shimtrace"
    with open(p, "wb") as f:
        f.write(data)
        f.truncate(size)
    assert p.stat().st_blocks * 512 < 64 << 20
    real_blocks = -(-(real_file.stat().st_size - h["blocks_off"]) // h["block_stride"])
    visited = []
    walk = blocks.blocks_with_data

    def counted(*args):
        for b in walk(*args):
            visited.append(b)
            assert len(visited) <= real_blocks, f"a hole read as a block: block {b}"
            yield b

    calls = load(real_file).functions["cuDriverGetVersion"].calls
    monkeypatch.setattr(blocks, "blocks_with_data", counted)
    assert load(p).functions["cuDriverGetVersion"].calls == calls
    assert 0 < len(visited) <= real_blocks


def test_a_names_table_larger_than_its_names_can_be_is_refused(real_file, tmp_path):
    data = bytearray(real_file.read_bytes())
    put(data, "names_size", 1 << 30)
    put(data, "blocks_off", HEADER_SIZE + (1 << 30) + 4096 - (HEADER_SIZE % 4096))
    p = tmp_path / "names.shimtrace"
    with open(p, "wb") as f:
        f.write(data)
        f.truncate(2 << 30)
    refused(p, "names table")


def test_the_documented_header_is_the_format_s_own():
    """docs/traceformat.md's header table lists every field of runenv.TRACE_HEADER, in order,
    at its offset and with its type (the C struct is checked against the same list when the
    shim compiles)."""
    import re

    doc = (Path(__file__).resolve().parents[2] / "docs" / "traceformat.md").read_text()
    rows = re.findall(r"^\| (\d+) \| (\w+(?:\[\d+\])?) \| `(\w+)` \|", doc, re.M)
    kinds = {"uint32_t": "u32", "uint64_t": "u64", "int64_t": "i64"}
    want = [(str(off), f"char[{n}]" if ctype == "char" else
             kinds[ctype] + (f"[{n}]" if n > 1 else ""), name)
            for name, ctype, n, off, _ in trace_header_layout()]
    assert rows == want


def with_error_slots(real_file: Path, tmp_path: Path, slots: list[tuple[str, int, int, bool]],
                     state: int | None = None) -> Path:
    """The real file with every block's error slots cleared, then block 0's holding `slots`:
    (function, code, count, injected)."""
    data = bytearray(real_file.read_bytes())
    h = header(data)
    names = bytes(data[h["names_off"]:h["names_off"] + h["names_size"]]).split(b"\0")
    for b in range((len(data) - h["blocks_off"]) // h["block_stride"]):
        base = h["blocks_off"] + b * h["block_stride"]
        data[base + h["off_err"]:base + h["off_err"] + 16 * h["err_slots"]] = bytes(
            16 * h["err_slots"])
    for k, (name, code, count, injected) in enumerate(slots):
        key = (names.index(name.encode()) + 1) << 32 | code | (blocks.ERR_INJECTED
                                                             if injected else 0)
        struct.pack_into("<QQ", data, h["blocks_off"] + h["off_err"] + 16 * k, key, count)
    if state is not None:
        put(data, "state", state)
    p = tmp_path / "slots.shimtrace"
    p.write_bytes(bytes(data))
    return p


@pytest.mark.parametrize("case", ["injected-of-uncalled", "injected-2**64-1", "injected-above",
                                  "errors-above", "injected-success", "error-success"])
def test_impossible_numbers_are_refused(real_file, tmp_path, case):
    """More failures (the driver's errors and the injected ones) of a function than its
    calls, or CUDA_SUCCESS as a failure: the file is refused, one line naming it, as a
    corrupt file is."""
    calls = load(real_file).functions[V].calls
    slots, words = {
        "injected-of-uncalled": ([("cuInit", 2, 1, True)], ("1 failures of cuInit", "0 calls")),
        "injected-2**64-1": ([(V, 2, 2**64 - 1, True)], (f"{2**64 - 1} failures of {V}",)),
        "injected-above": ([(V, 2, calls + 1, True)], (f"{calls + 1} failures of {V}",)),
        "errors-above": ([(V, 100, calls, False), (V, 2, 1, True)],
                         (f"{calls + 1} failures of {V}",)),
        "injected-success": ([(V, 0, 1, True)], ("CUDA_SUCCESS (0) as an injected failure",)),
        "error-success": ([(V, 0, 1, False)], ("CUDA_SUCCESS (0) as an error",)),
    }[case]
    refused(with_error_slots(real_file, tmp_path, slots), *words)


def test_failures_as_many_as_calls_are_read(real_file, tmp_path):
    """The bound is the calls: every call failed is possible. A file whose process did not
    finish it may hold a failure of a call in progress, not yet counted: one per block."""
    t = load(real_file)
    calls = t.functions[V].calls
    f = load(with_error_slots(real_file, tmp_path, [(V, 2, calls, True)])).functions[V]
    assert f.injected == {2: calls}
    h = header(real_file.read_bytes())
    blocks = (real_file.stat().st_size - h["blocks_off"]) // h["block_stride"]
    running = with_error_slots(real_file, tmp_path, [(V, 2, calls + blocks, True)], state=1)
    assert load(running).functions[V].injected == {2: calls + blocks}
    refused(with_error_slots(real_file, tmp_path, [(V, 2, calls + blocks + 1, True)], state=1),
            "failures of")


def as_version_3(data: bytes) -> bytes:
    """A current file made into the version 3 file the same process would have written:
    the header without the frame fields, the names right after it, the blocks where they
    were."""
    h = header(data)
    v3 = tracefile.HEADER_SIZES[3]
    head = bytearray(data[:v3])
    struct.pack_into("<I", head, FIELD_OFFSETS["version"][0], 3)
    struct.pack_into("<I", head, FIELD_OFFSETS["header_size"][0], v3)
    struct.pack_into("<Q", head, FIELD_OFFSETS["names_off"][0], v3)
    names = data[h["names_off"]:h["names_off"] + h["names_size"]]
    pad = bytes(h["blocks_off"] - v3 - len(names))
    return bytes(head) + names + pad + data[h["blocks_off"]:]


def test_a_version_3_file_still_reads_the_same(real_file, tmp_path):
    old = tmp_path / "v3.shimtrace"
    old.write_bytes(as_version_3(real_file.read_bytes()))
    a, b = load(real_file), load(old)
    assert header(real_file.read_bytes())["version"] == 9 and tracefile.VERSION == 9
    assert {k: v.calls for k, v in a.functions.items()} == \
        {k: v.calls for k, v in b.functions.items()} and b.functions
    assert (b.pid, b.complete, b.mode, b.ns_per_tick) == (a.pid, a.complete, a.mode,
                                                          a.ns_per_tick)


def test_calls_in_progress_of_a_version_3_file_are_not_known(real_file, tmp_path):
    from shimgen.trace import inflight

    old = tmp_path / "v3.shimtrace"
    old.write_bytes(as_version_3(real_file.read_bytes()))
    got = inflight.read(old, counts=True)
    assert got.calls == [] and got.why_unknown == inflight.NOT_IN_VERSION_3
    assert got.counts == sum(f.calls for f in load(real_file).functions.values())
    new = inflight.read(real_file)
    assert new.why_unknown == "" and new.complete


@pytest.mark.parametrize("field,value,words", [
    ("frame_slots", 0, "shadow frames"), ("frame_size", 12, "shadow frames"),
    ("frame_off_idx", 40, "frame field"), ("off_frames", 1 << 30, "outside a block"),
])
def test_frame_fields_that_do_not_fit_are_refused(real_file, tmp_path, field, value, words):
    from shimgen.trace import inflight

    data = bytearray(real_file.read_bytes())
    put(data, field, value)
    p = tmp_path / "bad.shimtrace"
    p.write_bytes(bytes(data))
    with pytest.raises(ShimgenError) as e:
        inflight.read(p)
    assert str(e.value).startswith(f"{p}: ") and words in str(e.value), e.value


def as_version_7(data: bytes) -> bytes:
    """A version 8 file as version 7 had it: the same blocks with each fine key (i + 1) <<
    fine_bits | bucket, placed from its function's hashed home (the next free slot on), and
    its calls in the log2 histogram too."""
    h = header(data)
    out = bytearray(data)
    put(out, "version", 7)
    put(out, "fine_hash", 0x9E3779B1)
    # version 7's header ends before the GPU times; its names table follows it there
    end = tracefile.HEADER_SIZES[7]
    out[end:end + h["names_size"]] = data[h["names_off"]:h["names_off"] + h["names_size"]]
    put(out, "header_size", end)
    put(out, "names_off", end)
    slots, step, bits = h["fine_slots"], h["fine_hash"], h["fine_bits"]
    shift = slots.bit_length() - 1
    for b in range((len(data) - h["blocks_off"]) // h["block_stride"]):
        off = h["blocks_off"] + b * h["block_stride"] + h["off_fine"]
        keys = [struct.unpack_from("<II", data, off + 8 * k) for k in range(slots)]
        out[off:off + 8 * slots] = bytes(8 * slots)
        for key, n in keys:
            if not key:
                continue
            fn, f = divmod(key, step)
            s = ((((fn * 0x9E3779B1) & 0xFFFFFFFF) >> (32 - shift)) + f) % slots
            while struct.unpack_from("<I", out, off + 8 * s)[0]:
                s = (s + 1) % slots
            struct.pack_into("<II", out, off + 8 * s, fn << bits | f, n)
            row = off - h["off_fine"] + h["off_hist"] + (fn - 1) * 64 * 8
            at = row + 8 * fine_octave(f)
            struct.pack_into("<Q", out, at, struct.unpack_from("<Q", out, at)[0] + n)
    return bytes(out)


def test_a_version_7_file_still_reads_its_fine_buckets(real_file, tmp_path):
    """Version 7's fine keys, (i + 1) << fine_bits | bucket from a hashed home, are read as
    such: the same fine buckets as the version 8 file they were made from."""
    old = tmp_path / "v7.shimtrace"
    old.write_bytes(as_version_7(real_file.read_bytes()))
    a, b = load(real_file), load(old)
    fines = {k: v.fine for k, v in a.functions.items() if v.fine}
    assert fines and fines == {k: v.fine for k, v in b.functions.items() if v.fine}
    assert {k: v.hist for k, v in a.functions.items()} == \
        {k: v.hist for k, v in b.functions.items()}
