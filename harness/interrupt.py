"""SIGTERM stops a command the way Ctrl-C does: what it started is stopped by the code that
started it.

Python ends on SIGTERM without running ``finally`` blocks or leaving ``with`` blocks, so the
virtual phones, adb servers and compiles a command started outlived it (a bench stopped by a
time limit left five phone daemons and their apps running). Under ``interruptible()``, SIGTERM
and SIGHUP raise ``KeyboardInterrupt`` in the main thread as SIGINT does, once: the stack
unwinds through every ``finally`` and context manager, which stop the phones, the servers and
the compiles they started. Signals that arrive while it unwinds are noted and ignored, so a
second Ctrl-C cannot cut the clean-up short (SIGKILL still can).
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(KeyboardInterrupt):
    """A stop asked for by a signal; ``signum`` says which (the exit code is 128 + it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextmanager
def interruptible() -> Iterator[None]:
    """Within the block, SIGINT, SIGTERM and SIGHUP raise ``Interrupted`` in the main thread,
    once; later ones only print that the stop is under way. Outside the main thread (where
    Python cannot install handlers) it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    raised: list[int] = []

    def handler(signum: int, _frame: FrameType | None) -> None:
        if raised:
            print(f"{signal.Signals(signum).name}: already stopping, stopping what was "
                  "started", file=sys.stderr, flush=True)
            return
        raised.append(signum)
        raise Interrupted(signum)

    previous = {sig: signal.signal(sig, handler) for sig in SIGNALS}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
