"""`python -m shimgen` and the `shimgen` command. The command line is imported inside a guard,
so that an interrupt while Python is still importing it (Ctrl-C right after the start) ends
in one line and exit status 130 instead of a traceback."""

import signal
import sys


def entry() -> int:
    try:
        from .errors import redeliver_swallowed

        sys.unraisablehook = redeliver_swallowed(sys.unraisablehook)
        from .cli import main
    except KeyboardInterrupt:
        from .errors import Interrupted

        sys.stderr.write(f"shimgen: error: {Interrupted(signal.SIGINT).message()}\n")
        return 128 + signal.SIGINT
    return main()


if __name__ == "__main__":
    sys.exit(entry())
