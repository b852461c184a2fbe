"""The exception types that the command line turns into one line on stderr."""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

#: How every line of the command line's failures starts (cli.py writes them).
ERROR_PREFIX = "shimgen: error: "


class ShimgenError(Exception):
    """A problem with the user's input or environment, stated in one line."""


class UsageError(ShimgenError):
    """A command line that asks for nothing a command can do (no command for `run`, an
    option without the one it goes with): one line naming the command's --help, exit 2 as
    argparse's own usage errors."""


class Interrupted(KeyboardInterrupt):
    """SIGINT, SIGTERM or SIGHUP arrived. `installed` says whether a new build had already
    been put in place when it did (the signal is held back while a build is installed)."""

    def __init__(self, signum: int, installed: bool = False) -> None:
        super().__init__(signum)
        self.signum = signum
        self.installed = installed

    @property
    def name(self) -> str:
        try:
            return signal.Signals(self.signum).name
        except ValueError:
            return f"signal {self.signum}"

    def message(self, command: str | None = None) -> str:
        """What was interrupted. `run` says itself what it interrupted once it has begun
        (run/main.py); one that reaches the command line's guard came before: the command did
        not run."""
        not_run = "; the command did not run" if command == "run" else ""
        if self.installed:
            return f"interrupted by {self.name}, after the new build was installed{not_run}"
        return (f"interrupted by {self.name}; nothing was installed, any earlier build is as "
                f"it was{not_run}")


def left_out_why(e: Exception, path) -> str:
    """Why one file of a run could not be read, as the reports say it beside its path: a
    ShimgenError's line without the path it starts with; any other exception a reader's
    mistake, named so that it is reported."""
    if not isinstance(e, ShimgenError):
        return f"internal error reading it, please report it: {type(e).__name__}: {e}"
    msg = str(e)
    return msg[len(f"{path}: "):] if msg.startswith(f"{path}: ") else msg


def printable_line(text: str) -> str:
    """`text` (from a file, a file's name, a program) as one printable line: every character
    that is not printable (a control character, a line break, an undecodable byte of a file's
    name) escaped as Python writes it in a string. The one rule of every view's escaping
    (report/output.py shown)."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def one_line(text: str) -> str:
    """`text` as one line: inner line breaks become '; ', control characters are escaped."""
    parts = [p.strip() for p in str(text).splitlines() if p.strip()]
    return printable_line("; ".join(parts))


#: The interrupt redeliver_swallowed is about to raise again, while its timer runs.
_swallowed: list[KeyboardInterrupt] = []
#: Set once the command's guard has ended (end_redelivery): no code of shimgen's is left to
#: raise an interrupt in, and a timer would outlive the handlers.
_ended: list[bool] = []


def redeliver_swallowed(old_hook):
    """A sys.unraisablehook. An interrupt raised where Python ignores exceptions (a weakref
    callback of the import system, a __del__) would be printed as "Exception ignored" and
    lost. Raise it again a millisecond later instead (SIGALRM), in the code that runs then;
    should that be such a place again, the same happens again. One that lands as the
    interpreter shuts down is dropped: the work is done, and a timer firing after Python has
    put the default actions back would kill the process by SIGALRM; so is one after the
    command's guard ended (end_redelivery), as Python frees the last objects. The code that
    ends a command raises a pending one at once (raise_swallowed)."""

    def hook(unraisable) -> None:
        exc = unraisable.exc_value
        if not isinstance(exc, KeyboardInterrupt):
            old_hook(unraisable)
            return
        if sys.is_finalizing() or _ended:
            return
        again = exc if isinstance(exc, Interrupted) else KeyboardInterrupt()

        def raise_again(_signum: int, _frame: object) -> None:
            _swallowed.clear()
            raise again

        _swallowed[:] = [again]
        signal.signal(signal.SIGALRM, raise_again)
        signal.setitimer(signal.ITIMER_REAL, 0.001)

    return hook


def raise_swallowed(drop: bool = False) -> None:
    """The interrupt redeliver_swallowed holds, raised now and its timer stopped (or, with
    `drop`, only stopped): called where a command ends, before the handlers it installed
    are put back, so that no SIGALRM outlives them."""
    if not _swallowed:
        return
    signal.setitimer(signal.ITIMER_REAL, 0)
    again = _swallowed.pop()
    if not drop:
        raise again


def end_redelivery() -> None:
    """The last statement of the outermost guard (__main__.entry): from here on an interrupt
    that lands where Python ignores one is dropped, the work being done, and one still held is
    raised now, inside the guard. Before, one that landed as Python freed the last objects set
    the timer, whose SIGALRM then came after Python had put the default actions back and
    killed the process (exit by signal 14 after `--help` had printed)."""
    _ended.append(True)
    raise_swallowed()


def quiet_unraisable(_unraisable) -> None:
    """sys.unraisablehook once an interrupt has been said: the rest of the process says
    nothing more. An object whose __init__ the interrupt cut short can fail in its __del__
    as it is freed (capstone's Cs, interrupted before it set `csh`: AttributeError), which
    Python would print as "Exception ignored" and a traceback after the one line."""


#: The signals the command line turns into Interrupted (cli.py installs raise_interrupted).
INTERRUPTS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_held = 0  # depth of signals_held blocks on the main thread
_pending: list[int] = []  # interrupts that arrived inside one
#: The interrupt whose line the command line is saying (cli.main): the process is ending, and
#: an interrupt after it is dropped, so that it neither takes the line's place nor adds one.
said: list[int] = []


def raise_interrupted(signum: int, _frame: object) -> None:
    """The Python handler of INTERRUPTS: raise Interrupted now or, inside signals_held, at
    the end of the outermost block. The mask alone does not hold a signal back when the
    process has another thread (the kernel gives it to a thread that has it unblocked, and
    Python runs the handler on the main thread all the same)."""
    if said:
        return
    if _held:
        _pending.append(signum)
        return
    raise Interrupted(signum)


@contextmanager
def signals_held() -> Iterator[None]:
    """Hold back INTERRUPTS: one that arrives inside is raised when the outermost block
    ends. Only on the main thread, where Python runs signal handlers."""
    global _held
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, INTERRUPTS)
    _held += 1
    try:
        yield
    finally:
        _held -= 1
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
        if not _held and _pending:
            signum = _pending[0]
            _pending.clear()
            raise Interrupted(signum)


def say(message: str) -> None:
    """One line `shimgen: error: ...` on stderr. A closed or broken stderr is no reason for
    a traceback."""
    try:
        print(f"{ERROR_PREFIX}{one_line(message)}", file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass
