"""The exception types that the command line turns into one line on stderr."""

from __future__ import annotations

import signal


class ShimgenError(Exception):
    """A problem with the user's input or environment, stated in one line."""


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


def one_line(text: str) -> str:
    """`text` as one line: inner line breaks become '; ', control characters are escaped."""
    parts = [p.strip() for p in str(text).splitlines() if p.strip()]
    line = "; ".join(parts)
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in line)
