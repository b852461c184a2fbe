"""What a long piece of work says while it runs, on stderr: one line before it starts,
always (`announce`), and on a terminal only, the step it is at with the seconds so far,
rewritten in place and cleared when the work ends (`step`, `clear`). When stderr is not a
terminal nothing but the first line is written: a log or a pipe gets no carriage returns.
Used by the builds of `shimgen build` and `shimgen run` (a first build takes seconds)."""

from __future__ import annotations

import sys
import threading
import time

# What a first build takes, as its announcement says (and the README, which shows it): on 2
# busy cores 12 to 15 s were measured; a quiet or larger machine takes less.
BUILD_TAKES = "up to 15 s"

_lock = threading.Lock()
_state: dict = {"start": None, "text": None, "ticker": None}


def _tty() -> bool:
    try:
        return sys.stderr is not None and sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def _write(text: str) -> None:
    try:
        sys.stderr.write(text)
        sys.stderr.flush()
    except (AttributeError, OSError, ValueError):
        pass


def _show() -> None:
    """The step line as it is now (under _lock)."""
    if _state["start"] is not None and _state["text"] is not None:
        seconds = time.monotonic() - _state["start"]
        _write(f"\r\x1b[K  {_state['text']} ({seconds:.0f} s)")


def _tick(stop: threading.Event) -> None:
    """The seconds of the step line counted up while one step lasts (a compile: seconds)."""
    while not stop.wait(1.0):
        with _lock:
            _show()


def announce(line: str) -> None:
    """Say what is about to happen, on a line of its own; the steps count from here."""
    clear()
    _write(line + "\n")
    _state["start"] = time.monotonic()


def step(text: str) -> None:
    """On a terminal, after announce(): the step now running and the seconds so far, in
    place of the previous step. Elsewhere, nothing."""
    if _state["start"] is None or not _tty():
        return
    with _lock:
        _state["text"] = text
        _show()
    if _state["ticker"] is None:
        stop = threading.Event()
        thread = threading.Thread(target=_tick, args=(stop,), daemon=True,
                                  name="shimgen-progress")
        _state["ticker"] = (stop, thread)
        thread.start()


def clear() -> None:
    """The step line erased (a terminal's); the announced work is over."""
    ticker = _state["ticker"]
    if ticker is not None:
        ticker[0].set()
        ticker[1].join()
    with _lock:
        if _state["text"] is not None:
            _write("\r\x1b[K")
        _state.update(start=None, text=None, ticker=None)
        _state.pop("pending", None)


def expect(command: str, where: str) -> None:
    """A build is coming: begin() will announce it, once its inputs are checked (an input
    refused stays the command's one line), as `shimgen COMMAND: building the shim for driver
    VERSION, WHERE`."""
    _state["pending"] = (command, where)


def begin(version: str) -> None:
    """The inputs are good and the build starts: the line expect() prepared, said now."""
    pending = _state.pop("pending", None)
    if pending is not None:
        command, where = pending
        announce(f"shimgen: {command}: building the shim for driver {version}, {where}")
