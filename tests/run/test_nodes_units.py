"""A node's joining of a run directory (run/nodes.py) without a shim: the name it joins
under, the top's run.json it waits for and reads, each run it refuses to join with its one
line, and its part made owner-only and opened as a directory of its own."""

from __future__ import annotations

import fcntl
import json
import os
import stat
import threading

import pytest

from shimgen.errors import ShimgenError
from shimgen.run import nodes
from shimgen.runenv import NOTICES, RUN_JSON, TEST_HOST, TIMELINE, TRACES

REFUSED = "exists and is not empty ({}); name a new or empty directory (nothing is overwritten)"
ME = {"host": "n2", "command": ["python", "train.py"], "build_id": "b1"}
TOP = {"host": "n1", "command": ["python", "train.py"], "driver": {"build_id": "b1"},
       "end": None}


@pytest.fixture
def run(tmp_path):
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    yield tmp_path, fd
    os.close(fd)


def _refused(out, why: str) -> str:
    return f"run directory {out}: " + REFUSED.format(why)


def test_a_nodes_name_is_the_test_host_when_set_else_the_machines(monkeypatch):
    monkeypatch.setenv(TEST_HOST, "sim7")
    assert nodes.host_name() == "sim7"
    for unset in ("", None):
        if unset is None:
            monkeypatch.delenv(TEST_HOST)
        else:
            monkeypatch.setenv(TEST_HOST, unset)
        assert nodes.host_name() == os.uname().nodename


@pytest.mark.parametrize("host, name", [
    ("n1", "n1"),
    ("node-3.cluster.example.org", "node-3.cluster.example.org"),
    ("gpu7." + "d" * 70, "gpu7"),
    ("a" * 63, "a" * 63),
    ("gpu_9.x", "gpu_9.x"),
])
def test_a_node_joins_under_its_host_name_or_its_first_label_when_too_long(host, name):
    assert nodes._part_name(host, "D") == name


@pytest.mark.parametrize("host", ["", "-n1", ".n1", "a" * 64, "n 1", "n/1", "n1\n", TRACES,
                                  TIMELINE, RUN_JSON, NOTICES, "-x." + "d" * 70])
def test_a_host_name_that_cannot_name_a_part_is_refused_in_one_line(host):
    with pytest.raises(ShimgenError) as e:
        nodes._part_name(host, "D")
    assert str(e.value) == (f"run directory D: the host name {host!r} cannot name this node's "
                            "part of the run; set the host name, or give each node its own "
                            "directory")


def test_check_join_takes_a_running_run_of_the_same_command_and_build_from_another_host():
    assert nodes.check_join(dict(TOP), ME, "D") is None
    assert nodes.check_join({**TOP, "host": None}, ME, "D") is None
    del_end = {k: v for k, v in TOP.items() if k != "end"}
    assert nodes.check_join(del_end, ME, "D") is None


@pytest.mark.parametrize("change, why", [
    ({"host": "n2"}, "it is a run of this host already"),
    ({"host": "n2", "end": "2026-01-01T00:00:00.000Z"}, "it is a run of this host already"),
    ({"end": "2026-01-01T00:00:00.000Z"}, "its run has ended"),
    ({"end": ""}, "its run has ended"),
    ({"command": ["python", "other.py"]}, "it is a run of another command"),
    ({"command": None}, "it is a run of another command"),
    ({"command": ["python", "other.py"], "driver": {"build_id": "b2"}},
     "it is a run of another command"),
    ({"driver": {"build_id": "b2"}}, "it is a run with another driver build"),
    ({"driver": {}}, "it is a run with another driver build"),
    ({"driver": "b1"}, "it is a run with another driver build"),
    ({"driver": None}, "it is a run with another driver build"),
])
def test_check_join_refuses_each_other_run_in_one_line(change, why):
    with pytest.raises(ShimgenError) as e:
        nodes.check_join({**TOP, **change}, ME, "D")
    assert str(e.value) == _refused("D", why)


def test_join_makes_the_nodes_part_owner_only_and_opens_it_as_a_directory(run):
    out, fd = run
    (out / RUN_JSON).write_text(json.dumps(TOP))
    old = os.umask(0)
    try:
        pfd, name = nodes.join(fd, out, dict(ME))
    finally:
        os.umask(old)
    try:
        assert name == "n2"
        assert stat.S_IMODE(os.stat(out / "n2").st_mode) == 0o700
        assert os.path.samestat(os.fstat(pfd), os.stat(out / "n2"))
        flags = fcntl.fcntl(pfd, fcntl.F_GETFL)
        assert flags & os.O_DIRECTORY and flags & os.O_NOFOLLOW
        assert fcntl.fcntl(pfd, fcntl.F_GETFD) & fcntl.FD_CLOEXEC
    finally:
        os.close(pfd)
    with pytest.raises(ShimgenError) as e:
        nodes.join(fd, out, dict(ME))
    assert str(e.value) == (f"run directory {out}: node n2 has joined this run already; "
                            "name a new or empty directory (nothing is overwritten)")


def test_join_refuses_before_it_makes_anything(run):
    out, fd = run
    (out / RUN_JSON).write_text(json.dumps({**TOP, "end": "2026-01-01T00:00:00.000Z"}))
    with pytest.raises(ShimgenError, match=r"\(its run has ended\)"):
        nodes.join(fd, out, dict(ME))
    (out / RUN_JSON).write_text(json.dumps(TOP))
    with pytest.raises(ShimgenError, match="the host name 'traces' cannot"):
        nodes.join(fd, out, {**ME, "host": "traces"})
    assert sorted(os.listdir(out)) == [RUN_JSON]


def test_the_tops_run_json_is_waited_for_while_empty_then_read(run, monkeypatch):
    out, fd = run
    monkeypatch.setattr(nodes, "WAIT_FOR_TOP_S", 5.0)
    (out / RUN_JSON).write_text("")
    timer = threading.Timer(0.3, lambda: (out / RUN_JSON).write_text(json.dumps(TOP)))
    timer.start()
    try:
        assert nodes._top_record(fd, out) == TOP
    finally:
        timer.join()


@pytest.mark.parametrize("content", ["", "[1, 2]", '"top"', "{", "null"])
def test_a_run_json_that_stays_no_run_s_is_refused_after_the_wait(run, monkeypatch, content):
    out, fd = run
    monkeypatch.setattr(nodes, "WAIT_FOR_TOP_S", 0.1)
    (out / RUN_JSON).write_text(content)
    with pytest.raises(ShimgenError) as e:
        nodes._top_record(fd, out)
    assert str(e.value) == (f"run directory {out}: exists and is not empty ({RUN_JSON} is no "
                            "run's); name a new or empty directory (nothing is overwritten)")


def test_a_run_json_is_read_to_its_first_mebibyte(run, monkeypatch):
    out, fd = run
    monkeypatch.setattr(nodes, "WAIT_FOR_TOP_S", 0.1)
    pad = (1 << 20) - len(json.dumps({**TOP, "pad": ""}))
    (out / RUN_JSON).write_text(json.dumps({**TOP, "pad": "x" * pad}))
    assert nodes._top_record(fd, out)["host"] == "n1"
    (out / RUN_JSON).write_text(json.dumps({**TOP, "pad": "x" * (pad + 1)}))
    with pytest.raises(ShimgenError, match=r"\(run.json is no run's\)"):
        nodes._top_record(fd, out)


def test_a_run_json_through_a_link_or_of_another_user_is_refused(run, tmp_path_factory):
    out, fd = run
    real = tmp_path_factory.mktemp("elsewhere") / RUN_JSON
    real.write_text(json.dumps(TOP))
    (out / RUN_JSON).symlink_to(real)
    with pytest.raises(ShimgenError) as e:
        nodes._top_record(fd, out)
    assert str(e.value) == (f"run directory {out}: its {RUN_JSON} cannot be read (Too many "
                            "levels of symbolic links)")
    if os.geteuid() != 0:
        pytest.skip("a file of another user is made by root only")
    (out / RUN_JSON).unlink()
    (out / RUN_JSON).write_text(json.dumps(TOP))
    os.chown(out / RUN_JSON, 4321, 4321)
    with pytest.raises(ShimgenError) as e:
        nodes._top_record(fd, out)
    assert str(e.value) == f"run directory {out}: a run of another user"


def test_a_run_json_that_is_a_fifo_is_never_waited_on_to_open(run, monkeypatch):
    out, fd = run
    monkeypatch.setattr(nodes, "WAIT_FOR_TOP_S", 0.1)
    os.mkfifo(out / RUN_JSON, 0o600)
    said: list = []
    reader = threading.Thread(target=lambda: said.append(_refusal(nodes._top_record, fd, out)))
    reader.start()
    reader.join(3.0)
    opened_for_it = 0
    while reader.is_alive():  # the open waits for a writer: give it one until it gives up
        try:
            os.close(os.open(out / RUN_JSON, os.O_WRONLY | os.O_NONBLOCK))
            opened_for_it += 1
        except OSError:
            pass
        reader.join(0.01)
    assert opened_for_it == 0
    assert said == [f"run directory {out}: exists and is not empty ({RUN_JSON} is no run's); "
                    "name a new or empty directory (nothing is overwritten)"]


def _refusal(f, *args) -> str:
    try:
        f(*args)
    except ShimgenError as e:
        return str(e)
    return "no refusal"
