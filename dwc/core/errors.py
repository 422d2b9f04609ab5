"""User-facing errors: the CLI prints their message as one line and exits non-zero; and how interrupts stop work."""
import contextlib
import signal
import threading


def interrupt_on_sigterm() -> None:
    """A polite kill (SIGTERM) stops like Ctrl-C: KeyboardInterrupt, so work in progress checkpoints."""
    def interrupt(signum, frame):
        raise KeyboardInterrupt
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, interrupt)


@contextlib.contextmanager
def interrupts_held():
    """Ctrl-C or SIGTERM arriving inside the block is delivered when the block ends, so state that changes
    together (a replay buffer and its step counter) is never caught, and checkpointed, half-changed.
    Only the main thread receives signals, so elsewhere this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held = []
    # A handler set from C (getsignal is None) cannot be restored from Python: leave that signal alone.
    old = {s: h for s in (signal.SIGINT, signal.SIGTERM) if (h := signal.getsignal(s)) is not None}
    for s in old:
        signal.signal(s, lambda signum, frame: held.append(signum))
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    for s in dict.fromkeys(held):  # now to the handler it was meant for (KeyboardInterrupt, exit or ignore)
        h = old[s]
        if callable(h):  # called directly, not re-raised: a Ray worker blocks SIGINT at the OS, and its
            h(s, None)   # cancel (interrupt_main) would be lost in the pending signal mask
        elif h == signal.SIG_DFL:
            signal.raise_signal(s)


class TimeLimit(KeyboardInterrupt):
    """Work stopped at the time it was given (dwc sweep --stop-after): it checkpoints as Ctrl-C does,
    and is told apart from Ctrl-C where that matters (the exit status)."""


class UserError(Exception):
    """Bad input or an unusable environment: a message for the user, never a traceback; the command
    exits with ``status`` (2: refused, nothing done that was asked)."""
    status = 2


class NotAsAsked(UserError):
    """The work ran but did not give what was asked (a clock missed, a design that does not fit, a
    verification short of its episodes or with a mismatch): exit status 1, as a check that failed."""
    status = 1


class OptionError(UserError):
    """A bad value of one option, named as the library calls it (``obs_width``, a parameter or a config
    field) followed by what is wrong (``detail``). The CLI says the same with the option's flag
    (``--obs-width``), so a Python caller and a shell user each read their own name for it."""

    def __init__(self, option: str, detail: str):
        self.option, self.detail = option, detail
        super().__init__(f"{option}{detail}")
