"""`python -m shimgen` and the `shimgen` command.

Everything shimgen does runs inside one guard, from this module's first statement to the
exit: an interrupt at any moment of the start (Ctrl-C while Python imports the command line)
or of the end ends in one line and exit status 130, never a traceback. Outside it is what is
Python's own: the interpreter's start before this module runs, and the first instruction of
the code of shimgen/__init__.py, of this module and of entry() (called by the `shimgen`
script), where Python looks for a pending signal before any statement runs
(docs/reliability.md, "Ctrl-C at any moment of shimgen's own start"). Inside the guard, before
anything else, the standard descriptors are made sure of: with stderr closed, shimgen's lines
must not go to stdout."""

try:
    # The handler below uses _interrupted: it is made first, and nothing up to _began looks
    # for a pending signal (a definition does not, nor an import of a module that Python's
    # start has imported already, as os and sys are).
    def _interrupted(e: BaseException | None = None) -> int:
        """Say that SIGINT (or the signal an Interrupted names: SIGTERM, SIGHUP) came outside
        the command line's own guard (cli.main): before it began (the usual line), or as it
        ended, when what it did stands. Exit status 128 + the signal."""
        import sys

        from .errors import ERROR_PREFIX, Interrupted, quiet_unraisable

        sys.unraisablehook = quiet_unraisable  # the line below is the last one
        first = e
        while isinstance(getattr(first, "__context__", None), KeyboardInterrupt) and \
                not first.__suppress_context__:
            first = first.__context__  # it came while an earlier one was being said
        cause = first if isinstance(first, Interrupted) else Interrupted(2)
        if first is not e:
            message = cause.message(sys.argv[1] if len(sys.argv) > 1 else None)
        elif _began:
            message = (f"interrupted by {cause.name} as shimgen ended; what it had finished "
                       "stands (a build installed, a report printed)")
        else:
            message = cause.message(sys.argv[1] if len(sys.argv) > 1 else None)
        try:
            sys.stderr.write(f"{ERROR_PREFIX}{message}\n")
            sys.stderr.flush()
        except (AttributeError, OSError, ValueError):
            pass
        return 128 + cause.signum

    _began = []  # cli.main was called
    import os
    import sys

    _kept = []  # interrupts that Python would have printed as "Exception ignored" and lost

    def _keep_interrupts(previous):
        """sys.unraisablehook for the start, until errors.redeliver_swallowed is in place: an
        interrupt raised where Python ignores exceptions (a weakref callback of the import
        system, as the import of a module ends) is kept, and raised inside the guard."""

        def hook(unraisable) -> None:
            if isinstance(unraisable.exc_value, KeyboardInterrupt):
                _kept.append(unraisable.exc_value)
            else:
                previous(unraisable)

        return hook

    sys.unraisablehook = _keep_interrupts(sys.unraisablehook)

    def _standard_descriptors() -> None:
        """Descriptors 0, 1 and 2 open from here on. One that was closed is /dev/null for
        shimgen, close-on-exec: the command that `shimgen run` starts still gets it closed,
        and no file shimgen opens takes its number. Python gives a closed stderr as
        sys.stderr None, and print(file=None) writes to stdout: shimgen's lines would be
        mixed into the command's output. They go to the /dev/null standing in instead."""
        for fd in (0, 1, 2):
            try:
                os.fstat(fd)
            except OSError:
                null = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
                if null != fd:
                    os.dup2(null, fd, inheritable=False)
                    os.close(null)
        if sys.stdout is None:
            sys.stdout = open(1, "w", encoding="utf-8", closefd=False)
        if sys.stderr is None:
            sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace",
                              closefd=False, buffering=1)

    def _flush_stdout() -> None:
        """sys.stdout flushed now: an interrupt in the flush Python's exit makes would lose
        what is still buffered (the help `--help` printed) in silence, exit status 0; here it
        is said."""
        try:
            sys.stdout.flush()
        except (AttributeError, OSError, ValueError):
            pass

    def _caused_by_interrupt(e: BaseException | None) -> BaseException | None:
        """The interrupt that caused `e`, if one did: Python wraps one that lands in some
        places of an import (RuntimeError: Error calling __set_name__, while a class is
        made)."""
        seen = set()
        while e is not None and id(e) not in seen:
            seen.add(id(e))
            if isinstance(e, KeyboardInterrupt):
                return e
            e = e.__cause__ or e.__context__
        return None

    def entry() -> int:
        try:
            _began.clear()
            _standard_descriptors()
            from .errors import redeliver_swallowed

            sys.unraisablehook = redeliver_swallowed(sys.unraisablehook)
            if _kept:  # lost while shimgen was imported: it is raised now
                _kept.clear()
                raise KeyboardInterrupt
            from .cli import main

            _began.append(True)
            try:
                return main()
            finally:  # what the command wrote (argparse's --help too), out inside the guard
                _flush_stdout()
                from .errors import end_redelivery

                end_redelivery()
        except KeyboardInterrupt as e:
            return _interrupted(e)
        except Exception as e:  # cli.main says its own errors: this one is from an import
            cause = _caused_by_interrupt(e)
            if cause is not None:
                return _interrupted(cause)
            raise

    if __name__ == "__main__":
        sys.exit(entry())
except KeyboardInterrupt:  # entry()'s first instruction, or as `python -m shimgen` ends
    _status = _interrupted()

    def entry() -> int:  # what the `shimgen` script calls: the line is said already
        return _status

    if __name__ == "__main__":
        raise SystemExit(_status) from None
