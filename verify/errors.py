"""The one exception type for usage and environment errors: the CLI prints its message and exits 2."""


class UsageError(Exception):
    """Bad input or an unusable environment, reported as one line with exit status 2."""
