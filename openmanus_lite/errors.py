"""`UserError`: the one exception type for a mistake in what the user gave (a path, a file, a setting, a
reward function). `python -m openmanus_lite` prints its message as one line and exits with code 2; any other
exception is a bug in the kit and keeps its traceback."""


class UserError(ValueError):
    """A ValueError, so code that catches ValueError keeps working."""
