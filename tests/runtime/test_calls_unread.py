"""Calls mode and a program's unreadable arguments (runtime/stats/calls.c, arch/x86_64/calls.S,
shimgen/calls): an address the shim could not read is recorded as such and shown as
`<unreadable 0x10>` in the text, `{"unreadable": 16}` in the JSON; a process that dies while its
arguments are read (a seccomp filter that kills it at the shim's process_vm_readv) or
inside the driver keeps that call as entered, with its name, and no earlier call counted
dropped in a ring that never wrapped; a record left half written is no dropped call; a
record holds its own function's captures, all of them, those after a NULL argument too. The
probe is tests/c/calldeath.c, on the real Debian driver (and on the FAKE
tests/c/fake_mem_libcuda.c for a call that succeeds)."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from shimgen.calls import load_run
from shimgen.calls.decode import UNREAD
from shimgen.calls.records import CAPTURE
from shimgen.report import calls as report_calls
from shimgen.trace import binary
from tests.faultkit import clean_env, run, shim_for
from tests.shimcache import fake_driver_shim

DRIVER = "550.163.01"


def traced(shims, probes, tmp_path, mode: str):
    d = tmp_path / "traces"
    env = shim_for(shims, DRIVER).env(SHIMGEN_TRACE="calls", SHIMGEN_TRACE_DIR=str(d))
    proc = run([probes / "calldeath", mode], env, ok=False, timeout=60)
    got = json.loads(report_calls.render([d], report_calls.Filters(), "json"))
    return proc, d, got


def test_an_unreadable_name_is_recorded_as_such(shims, probes, tmp_path):
    proc, d, got = traced(shims, probes, tmp_path, "unreadable")
    assert proc.returncode == 0, proc.stderr
    names = [c["args"]["fname"] for c in got["calls"]]
    assert names == [{"unreadable": 0x10}, "kept.cubin"]
    text = report_calls.render([d], report_calls.Filters(), "text")
    assert "fname=<unreadable 0x10>) = CUDA_ERROR_NOT_INITIALIZED" in text
    assert 'fname="kept.cubin"' in text


def test_an_unreadable_captures_bytes_are_zeros(shims, probes, tmp_path):
    """docs/traceformat.md: a capture that could not be read has its bytes zeros (the
    first call's whole capture area: cuModuleLoad failed, so its output was not read)."""
    _, d, got = traced(shims, probes, tmp_path, "unreadable")
    assert got["calls"][0]["args"]["fname"] == {"unreadable": 0x10}
    [p] = load_run(d)
    r = p.calls[0]
    assert r[CAPTURE] == bytes(len(r[CAPTURE])) and r[UNREAD]


def test_a_functions_captures_end_where_the_next_functions_begin(shims, probes, tmp_path):
    """cuLibraryLoadFromFile's file name is its own capture alone: the table's next capture
    (cuLinkAddData's name, after cuLibraryUnload, which has none) is at the same offset of
    the capture area and reads argument word 4, here numJitOptions 0; read as well, its
    NULL would zero the name's bytes."""
    proc, _, got = traced(shims, probes, tmp_path, "library")
    assert proc.returncode == 0, proc.stderr
    [call] = got["calls"]
    assert (call["function"], call["args"]["fileName"], call["args"]["numJitOptions"]) == (
        "cuLibraryLoadFromFile", "kept.cubin", 0)


@pytest.fixture(scope="module")
def mem_fake(probes) -> tuple[Path, Path]:
    """The FAKE driver of the user hooks, and its shim."""
    fake = probes / "libfake_mem_libcuda.so"
    return fake, fake_driver_shim(fake)


def test_an_output_after_a_null_one_is_captured(probes, mem_fake, tmp_path):
    """cuMemGetAddressRange_v2(NULL, &size, dptr) on the fake, which answers it: the NULL
    base is left, and the size after it still read when the call returns."""
    fake, shim = mem_fake
    d = tmp_path / "traces"
    env = {**clean_env(), "LD_PRELOAD": str(shim), "SHIMGEN_DRIVER": str(fake),
           "SHIMGEN_TRACE": "calls", "SHIMGEN_TRACE_DIR": str(d)}
    proc = run([probes / "calldeath", "nullfirst"], env, ok=False, timeout=60)
    assert proc.returncode == 0, proc.stderr
    [call] = json.loads(report_calls.render([d], report_calls.Filters(), "json"))["calls"]
    assert (call["function"], call["state"], call["outputs"]) == (
        "cuMemGetAddressRange_v2", "returned", {"psize": 0x123000})


def test_where_the_kernel_refuses_process_vm_readv_a_mapped_page_is_still_read(
        shims, probes, tmp_path):
    """qemu-user does not emulate process_vm_readv and a seccomp filter may refuse it: the
    safe read then reads a page mincore says is mapped, and still never faults on one that is
    not."""
    proc, _, got = traced(shims, probes, tmp_path, "refused")
    assert proc.returncode == 0, proc.stderr
    names = [c["args"]["fname"] for c in got["calls"]]
    assert names == ["refused.cubin", {"unreadable": 0x10}]
    assert [c["state"] for c in got["calls"]] == ["returned", "returned"]


def test_reads_refused_by_the_kernel_are_recorded_unread_and_the_program_goes_on(
        shims, probes, tmp_path):
    proc, _, got = traced(shims, probes, tmp_path, "refusedall")
    assert proc.returncode == 0, proc.stderr
    assert [list(c["args"]["fname"]) for c in got["calls"]] == [["unreadable"]] * 2
    assert [c["state"] for c in got["calls"]] == ["returned", "returned"]


def test_a_process_killed_while_its_arguments_are_read_keeps_the_call_in_flight(
        shims, probes, tmp_path):
    proc, _, got = traced(shims, probes, tmp_path, "capture")
    assert proc.returncode == -signal.SIGSYS, proc.stderr
    [call] = got["calls"]
    assert (call["function"], call["state"], list(call["args"]["fname"])) == (
        "cuModuleLoad", "entered", ["not_read"])
    assert got["processes"][0]["dropped"] == {}


def test_a_process_that_faults_inside_the_driver_keeps_the_call_in_flight(
        shims, probes, tmp_path):
    proc, d, got = traced(shims, probes, tmp_path, "inside")
    assert proc.returncode == -signal.SIGSEGV, proc.stderr
    [call] = got["calls"]
    assert (call["function"], call["state"]) == ("cuDriverGetVersion", "entered")
    assert got["processes"][0]["dropped"] == {}


def test_a_half_written_record_is_no_dropped_call(shims, probes, tmp_path):
    _, d, got = traced(shims, probes, tmp_path, "unreadable")
    assert len(got["calls"]) == 2 and got["processes"][0]["dropped"] == {}
    # the second record half written (its seq 0, as while being written when the process
    # died): not shown, and not an earlier call dropped
    [path] = list(d.iterdir())
    h = binary.header(path)
    with open(path, "r+b") as f:
        f.seek(h["blocks_off"] + h["calls_ring_off"] + h["calls_record_size"])
        f.write(bytes(8))
    [p] = load_run(d)
    assert (len(p.order), p.dropped) == (1, {})
    assert "dropped" not in report_calls.render([d], report_calls.Filters(), "text")
