"""Ctrl-C and SIGTERM held off while a block runs: processes started inside it inherit the ignored
disposition (it survives exec), so only the caller gets the signal and can stop them in order."""
from __future__ import annotations

import contextlib
import signal
import threading


@contextlib.contextmanager
def stops_ignored():
    """SIGINT and SIGTERM ignored inside the block (main thread only: only it receives signals)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
