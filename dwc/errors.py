"""User-facing errors: the CLI prints their message as one line and exits non-zero."""


class UserError(Exception):
    """Bad input or an unusable environment: a message for the user, never a traceback."""
