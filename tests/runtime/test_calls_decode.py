"""The decoding of calls records (shimgen/calls/decode.py) on records made here, no shim
needed: each kind of argument and output by its width (8-bit to 64-bit integers, signed and
not, addresses, enums and flags, handles numbered per type, strings, structs, pointers the
driver wrote), the result by name, a call that has not returned, a failed call's outputs
left out, captures not read, a function the headers do not know; and the text of the fast
path (Decoder.text, one compiled function per prototype) against the text made from the
per-record decode (Decoder.decode, Decoder.result) for random records of every function."""

from __future__ import annotations

import random
import struct

import pytest

from shimgen.calls import Decoder, description
from shimgen.calls.decode import NAMED
from shimgen.calls.records import ENTERED, IDX, RETURNED
from shimgen.runenv import (
    CALLS_CAPTURE_OFF,
    CALLS_RECORD_SIZE,
    CALLS_UNREAD_TAKING,
    CALLS_UNREAD_WORD,
)

CAP = CALLS_RECORD_SIZE - CALLS_CAPTURE_OFF
UNKNOWN = "cuNoSuchFunctionInAnyHeader"
NAMES = ["cuMemAlloc_v2", "cuMemGetInfo_v2", "cuDeviceGetAttribute", "cuMemsetD8_v2",
         "cuDeviceGet", "cuStreamQuery", "cuModuleGetFunction", "cuMemcpy2D_v2",
         "cuGetErrorName", "cuGetProcAddress", "cuDeviceGetName", "cuLaunchKernel",
         "cuEventCreate", "cuMemHostAlloc", "cuFuncGetAttribute", "cuTexRefSetMipmapLevelBias",
         "cuDeviceGetProperties", UNKNOWN]


@pytest.fixture(scope="module")
def dec() -> Decoder:
    return Decoder(description(), NAMES)


def rec(dec: Decoder, name: str, args=(), *, result=0, state=RETURNED, capture=b"",
        unread=0) -> tuple:
    words = [*args, *[0] * (11 - len(args))]
    if unread:
        words[CALLS_UNREAD_WORD] = unread
    return (1, dec.names.index(name), state, 7, 0, 0, result, *words, capture.ljust(CAP, b"\0"))


def plain(dec: Decoder, r: tuple, handles: dict) -> str:
    """The text the per-record decode gives, as the fast path must."""
    args, outs = dec.decode(r, handles)
    _, rname = dec.result(r)
    known = dec.protos[r[IDX]] is not None
    text = (f"{dec.names[r[IDX]]}("
            + ", ".join(f"{n}={t}" if known else t for n, _, t, _ in args) + f") = {rname}")
    return text + (" {" + ", ".join(f"{n}={t}" for n, _, t, _ in outs) + "}" if outs else "")


def both(dec: Decoder, r: tuple, handles: dict | None = None) -> tuple[str, dict, dict]:
    """(text, JSON arguments, JSON outputs); the text the same by both paths."""
    h1, h2 = dict(handles or {}), dict(handles or {})
    text = dec.text(r, h1)
    assert text == plain(dec, r, h2)
    args, outs = dec.decode(r, dict(handles or {}))
    return text, {n: v for n, v, _, _ in args}, {n: v for n, v, _, _ in outs}


def q(n: int) -> bytes:
    return struct.pack("<Q", n)


def test_outputs_and_arguments_by_their_width(dec):
    text, args, outs = both(dec, rec(dec, "cuMemAlloc_v2", (0x7FFD1000, (1 << 40) + 5),
                                     capture=q(0x7F0000200000)))
    assert text == ("cuMemAlloc_v2(dptr=0x7ffd1000, bytesize=1099511627781) = CUDA_SUCCESS "
                    "{dptr=0x7f0000200000}")
    assert args == {"dptr": 0x7FFD1000, "bytesize": (1 << 40) + 5}
    assert outs == {"dptr": 0x7F0000200000}
    text, _, outs = both(dec, rec(dec, "cuMemGetInfo_v2", (0x10, 0x18),
                                  capture=q(80 << 30) + q((1 << 64) - 1)))
    assert text.endswith(f"= CUDA_SUCCESS {{free={80 << 30}, total={(1 << 64) - 1}}}")
    assert outs == {"free": 80 << 30, "total": (1 << 64) - 1}
    # a signed 4-byte output and argument: -1, whatever the register's upper half holds
    text, args, outs = both(dec, rec(dec, "cuDeviceGetAttribute", (0x20, 2, 0xABCD_FFFF_FFFF),
                                     capture=struct.pack("<i", -1) + b"\x55" * 4))
    assert text == ("cuDeviceGetAttribute(pi=0x20, attrib=CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X, "
                    "dev=-1) = CUDA_SUCCESS {pi=-1}")
    assert (args["attrib"], args["dev"], outs) == ("CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X", -1,
                                                   {"pi": -1})
    text, args, outs = both(dec, rec(dec, "cuDeviceGet", (0x30, 0x1_8000_0000),
                                     capture=struct.pack("<i", 2**31 - 1)))
    assert (args["ordinal"], outs) == (-(2**31), {"device": 2**31 - 1})
    assert text.endswith(f"ordinal={-(2**31)}) = CUDA_SUCCESS {{device={2**31 - 1}}}")
    # unsigned: an unsigned int is its low 4 bytes, never negative
    text, args, _ = both(dec, rec(dec, "cuMemsetD8_v2", (0, 0x1_FFFF_FFAB, 1 << 63)))
    assert args == {"dstDevice": 0, "uc": 0xFFFF_FFAB, "N": 1 << 63}
    assert text == f"cuMemsetD8_v2(dstDevice=0x0, uc={0xFFFF_FFAB}, N={1 << 63}) = CUDA_SUCCESS"


def test_the_result_by_name_and_outputs_of_successful_calls_only(dec):
    for result, name in ((2, "CUDA_ERROR_OUT_OF_MEMORY"), (1 << 32, "CUDA_SUCCESS"),
                         ((1 << 32) + 2, "CUDA_ERROR_OUT_OF_MEMORY")):
        r = rec(dec, "cuMemAlloc_v2", (0x10, 1), result=result, capture=q(0x7F0000200000))
        text, _, outs = both(dec, r)
        assert dec.ok(r) == (name == "CUDA_SUCCESS") and dec.failed(r) == (not dec.ok(r))
        assert text == f"cuMemAlloc_v2(dptr=0x10, bytesize=1) = {name}" + (
            " {dptr=0x7f0000200000}" if dec.ok(r) else ""), text
        assert dec.result(r) == (result & 0xFFFFFFFF, name)
        assert outs == ({"dptr": 0x7F0000200000} if dec.ok(r) else {})
    r = rec(dec, "cuMemAlloc_v2", (0x10, 1), state=ENTERED, capture=q(0x7F0000200000))
    text, _, outs = both(dec, r)
    assert (text, outs, dec.result(r)) == ("cuMemAlloc_v2(dptr=0x10, bytesize=1) = ?", {},
                                           (None, "?"))
    assert not dec.ok(r) and not dec.failed(r)
    # a NULL output pointer: nothing written, nothing shown
    text, args, outs = both(dec, rec(dec, "cuMemAlloc_v2", (0, 1), capture=q(5)))
    assert (text, args["dptr"], outs) == (
        "cuMemAlloc_v2(dptr=NULL, bytesize=1) = CUDA_SUCCESS", 0, {})


def test_handles_are_numbered_per_type_in_order_of_first_appearance(dec):
    h: dict = {}
    seen = []
    for name, args, cap in (("cuStreamQuery", (0x1234,), b""), ("cuStreamQuery", (0x5678,), b""),
                            ("cuStreamQuery", (0x1234,), b""), ("cuStreamQuery", (0,), b""),
                            ("cuEventCreate", (0x40, 0), q(0x1234)),
                            ("cuModuleGetFunction", (0x50, 0x1234, 0), q(0x9999))):
        r = rec(dec, name, args, capture=cap)
        assert dec.text(r, dict(h)) == plain(dec, r, dict(h))
        seen.append(dec.text(r, h))
    assert seen[:4] == ["cuStreamQuery(hStream=stream#1) = CUDA_SUCCESS",
                        "cuStreamQuery(hStream=stream#2) = CUDA_SUCCESS",
                        "cuStreamQuery(hStream=stream#1) = CUDA_SUCCESS",
                        "cuStreamQuery(hStream=NULL) = CUDA_SUCCESS"]
    assert seen[4] == "cuEventCreate(phEvent=0x40, Flags=0) = CUDA_SUCCESS {phEvent=event#1}"
    assert seen[5] == ("cuModuleGetFunction(hfunc=0x50, hmod=module#1, name=NULL) = "
                       "CUDA_SUCCESS {hfunc=func#1}")
    args, outs = dec.decode(rec(dec, "cuStreamQuery", (0x5678,)), h)
    assert args == [("hStream", "stream#2", "stream#2", False)] and outs == []
    # a function handle of a known kernel is shown by its name in the text, numbered in JSON
    h2 = {NAMED: {0x77: "my_kernel"}}
    r = rec(dec, "cuLaunchKernel", (0x77, 1, 2, 3, 4, 5, 6, 7, 0, 0x1110, 0x2220))
    text, args, _ = both(dec, r, h2)
    assert text.startswith("cuLaunchKernel(f=my_kernel, gridDimX=1, ") and args["f"] == "func#1"
    assert text.endswith("hStream=NULL, kernelParams=0x1110, extra=0x2220) = CUDA_SUCCESS")
    assert dec.kernel_handle(r) == 0x77
    assert dec.kernel_handle(rec(dec, "cuStreamQuery", (0x77,))) is None
    assert dec.kernel_handle(rec(dec, "cuFuncGetAttribute", (0x20, 0, 0x77))) == 0x77
    # the functions whose records number handles (report/calls.py decodes them all first)
    assert [dec.handled[NAMES.index(n)] for n in ("cuStreamQuery", "cuEventCreate",
                                                  "cuMemAlloc_v2", "cuMemsetD8_v2", UNKNOWN)] == [
        True, True, False, False, False]


def test_strings_structs_and_pointers_the_driver_wrote(dec):
    name = b"my_kernel\0junk"
    r = rec(dec, "cuModuleGetFunction", (0x50, 0, 0x60), capture=q(0x8888) + name)
    text, args, outs = both(dec, r)
    assert text == ('cuModuleGetFunction(hfunc=0x50, hmod=NULL, name="my_kernel") = '
                    "CUDA_SUCCESS {hfunc=func#1}")
    assert args["name"] == "my_kernel" and outs == {"hfunc": "func#1"}
    r = rec(dec, "cuGetErrorName", (2, 0x70), capture=q(0x1000) + b'say "no"\n\0')
    text, args, outs = both(dec, r)
    assert text == ('cuGetErrorName(error=CUDA_ERROR_OUT_OF_MEMORY, pStr=0x70) = CUDA_SUCCESS '
                    '{pStr="say \\"no\\"\\n"}')
    assert outs == {"pStr": 'say "no"\n'}
    _, _, outs = both(dec, rec(dec, "cuGetErrorName", (2, 0x70), capture=q(0) + b"x"))
    assert outs == {"pStr": None}
    # cuGetProcAddress's pfn: the export it is (its slot + 1), else the pointer
    pfn = q(0xDEAD) + struct.pack("<I", NAMES.index("cuMemAlloc_v2") + 1)
    r = rec(dec, "cuGetProcAddress", (0x80, 0x90, 12000, 0), capture=b"cuMemAlloc\0".ljust(64,
                                                                                     b"\0") + pfn)
    text, args, outs = both(dec, r)
    assert text == ('cuGetProcAddress(symbol="cuMemAlloc", pfn=0x90, cudaVersion=12000, '
                    "flags=0) = CUDA_SUCCESS {pfn=cuMemAlloc_v2}")
    # the slot is 4 bytes, whatever follows it
    r = rec(dec, "cuGetProcAddress", (0x80, 0x90, 12000, 0),
            capture=b"x\0".ljust(64, b"\0") + pfn + b"\xff\xff\xff\xff")
    assert both(dec, r)[2] == {"pfn": "cuMemAlloc_v2"}
    for slot in (0, len(NAMES) + 1):
        cap = b"x\0".ljust(64, b"\0") + q(0xDEAD) + struct.pack("<I", slot)
        text, _, outs = both(dec, rec(dec, "cuGetProcAddress", (0x80, 0x90, 1, 0), capture=cap))
        assert outs == {"pfn": 0xDEAD} and text.endswith("{pfn=0xdead}"), slot
    assert dec.pointed("function", q(0) + struct.pack("<I", 0)) == (0, "NULL")
    assert dec.pointed("function", q(0) + struct.pack("<I", len(NAMES))) == (UNKNOWN, UNKNOWN)
    r = rec(dec, "cuDeviceGetName", (0xA0, 64, 0), capture=b"Fake GPU\0rest")
    text, _, outs = both(dec, r)
    assert text.endswith('= CUDA_SUCCESS {name="Fake GPU"}') and outs == {"name": "Fake GPU"}
    copy = bytearray(128)
    copy[0:8], copy[8:16] = q(1), q(2)  # srcXInBytes, srcY
    r = rec(dec, "cuMemcpy2D_v2", (0xB0,), capture=bytes(copy))
    text, args, _ = both(dec, r)
    assert args["pCopy"]["srcXInBytes"] == 1 and args["pCopy"]["srcY"] == 2
    assert text.startswith("cuMemcpy2D_v2(pCopy={srcXInBytes=1, srcY=2, ")


def test_captures_not_read_are_said_so(dec):
    # the name's capture (its bit: the second captured argument) unreadable
    r = rec(dec, "cuModuleGetFunction", (0x50, 0, 0x10), capture=q(0x8888), unread=0b10)
    text, args, outs = both(dec, r)
    assert args["name"] == {"unreadable": 0x10} and outs == {"hfunc": "func#1"}
    assert 'name=<unreadable 0x10>) = CUDA_SUCCESS {hfunc=func#1}' in text
    r = rec(dec, "cuModuleGetFunction", (0x50, 0, 0x10), capture=q(0x8888), unread=0b01)
    text, args, outs = both(dec, r)
    assert args["name"] == "" and outs == {"hfunc": {"unreadable": 0x50}}
    assert text.endswith("{hfunc=<unreadable 0x50>}")
    r = rec(dec, "cuModuleGetFunction", (0x50, 0, 0x10), capture=q(0x8888),
            unread=CALLS_UNREAD_TAKING)
    text, args, outs = both(dec, r)
    assert args["name"] == {"not_read": 0x10} and outs == {"hfunc": {"not_read": 0x50}}
    assert text.endswith('name=<not read 0x10>) = CUDA_SUCCESS {hfunc=<not read 0x50>}')


def test_a_function_the_headers_do_not_know_gives_its_six_registers(dec):
    r = rec(dec, UNKNOWN, (1, 2, 0xFFFF_FFFF, 1 << 32, 0, (1 << 64) - 1), result=0x1_0000_0002)
    text, args, outs = both(dec, r)
    assert text == (f"{UNKNOWN}(0x1, 0x2, 0xffffffff, 0x100000000, 0x0, 0xffffffffffffffff) = "
                    "CUDA_ERROR_OUT_OF_MEMORY")
    assert args == {"arg0": 1, "arg1": 2, "arg2": 0xFFFF_FFFF, "arg3": 1 << 32, "arg4": 0,
                    "arg5": (1 << 64) - 1} and outs == {}
    assert [a for _, _, _, a in dec.decode(r, {})[0]] == [False, False, False, True, False, True]


def test_the_fast_text_is_the_per_record_decode_for_random_records_of_every_function():
    desc = description()
    names = sorted(desc["functions"])
    dec = Decoder(desc, names)
    rng = random.Random(53)
    words = (0, 1, 0x10, 0xFF, 0x7FFF_FFFF, 0x8000_0000, 0xFFFF_FFFF, 1 << 32, (1 << 63),
             (1 << 64) - 1)
    handles1: dict = {NAMED: {0x10: "k"}}
    handles2: dict = {NAMED: {0x10: "k"}}
    for _ in range(4):
        for name in names:
            r = rec(dec, name, [rng.choice(words) if rng.random() < 0.7 else rng.getrandbits(64)
                                for _ in range(10)],
                    result=rng.choice((0, 0, 1, 2, 1 << 32, 999)),
                    state=rng.choice((RETURNED, RETURNED, ENTERED)),
                    capture=rng.randbytes(CAP),
                    unread=rng.choice((0, 0, 1, 2, CALLS_UNREAD_TAKING)))
            assert dec.text(r, handles1) == plain(dec, r, handles2), name


def test_which_values_are_addresses(dec):
    """decode()'s fourth item: the addresses (an address argument, a pointer, an address
    the driver wrote), which --first-difference sets apart; no other value is one."""
    def flags(r):
        args, outs = dec.decode(r, {})
        return [a for _, _, _, a in args], [a for _, _, _, a in outs]
    assert flags(rec(dec, "cuModuleGetFunction", (0x50, 0x60, 0x70), capture=q(0x8888) + b"k")) == (
        [True, False, False], [False])
    assert flags(rec(dec, "cuModuleGetFunction", (0x50, 0x60, 0x70), capture=q(1),
                     unread=0b11)) == ([True, False, False], [False])
    assert flags(rec(dec, "cuMemAlloc_v2", (0x10, 1), capture=q(0x7F0000200000))) == (
        [True, False], [True])
    assert flags(rec(dec, "cuDeviceGetAttribute", (0x20, 2, 0), capture=q(1))) == (
        [True, False, False], [False])
    assert flags(rec(dec, "cuMemsetD8_v2", (0x1000, 1, 2))) == ([True, False, False], [])
    assert flags(rec(dec, "cuGetErrorName", (2, 0x70), capture=q(0x1000) + b"E")) == (
        [False, True], [False])
    assert flags(rec(dec, "cuDeviceGetName", (0xA0, 64, 0), capture=b"G")) == (
        [True, False, False], [False])
    assert flags(rec(dec, "cuMemcpy2D_v2", (0xB0,))) == ([False], [])
    r = rec(dec, "cuDeviceGetProperties", (0xC0, 0), capture=struct.pack("<i", 1024))
    assert flags(r) == ([True, False], [False])  # a struct the driver wrote
    assert both(dec, r)[2]["prop"]["maxThreadsPerBlock"] == 1024
    # a float argument has no word in the record: "?"
    r = rec(dec, "cuTexRefSetMipmapLevelBias", (0x10, 0x20))
    text, args, _ = both(dec, r)
    assert text == "cuTexRefSetMipmapLevelBias(hTexRef=texref#1, bias=?) = CUDA_SUCCESS"
    assert args["bias"] is None and flags(r) == ([False, False], [])


def test_a_structs_fields_are_those_captured_whole_and_of_a_scalar(dec):
    # CUmemAccessDesc: a struct field (left out), then the flags; a capture cut short
    assert dec.struct_value("CUmemAccessDesc_st", q(5) + struct.pack("<I", 3), {}) == (
        {"flags": "CU_MEM_ACCESS_FLAGS_PROT_READWRITE"},
        "{flags=CU_MEM_ACCESS_FLAGS_PROT_READWRITE}")
    assert dec.struct_value("CUmemAccessDesc_st", q(5) + b"\3\0\0", {}) == ({}, "{}")
    assert dec.struct_value("CUDA_MEMCPY2D_st", q(1) + q(2) + struct.pack("<I", 1), {}) == (
        {"srcXInBytes": 1, "srcY": 2, "srcMemoryType": "CU_MEMORYTYPE_HOST"},
        "{srcXInBytes=1, srcY=2, srcMemoryType=CU_MEMORYTYPE_HOST}")


def test_an_enum_value_no_name_has_is_its_number_unless_the_enum_is_of_flags(dec):
    assert dec.enum_text("CUdevice_attribute_enum", 0x4000_0003) == str(0x4000_0003)
    assert dec.enum_text("CUevent_flags_enum", 0x4000_0003) == (
        "CU_EVENT_BLOCKING_SYNC|CU_EVENT_DISABLE_TIMING|0x40000000")
