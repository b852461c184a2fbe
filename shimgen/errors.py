"""The one exception type that the command line turns into a one-line error."""


class ShimgenError(Exception):
    """A problem with the user's input or environment, stated in one line."""
