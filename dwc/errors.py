"""User-facing errors: the CLI prints their message as one line and exits non-zero."""


def interrupt_on_sigterm() -> None:
    """A polite kill (SIGTERM) stops like Ctrl-C: KeyboardInterrupt, so work in progress checkpoints."""
    import signal
    import threading

    def interrupt(signum, frame):
        raise KeyboardInterrupt
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, interrupt)


class UserError(Exception):
    """Bad input or an unusable environment: a message for the user, never a traceback."""
