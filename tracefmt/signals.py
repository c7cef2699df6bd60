"""SIGTERM ends a run the way Ctrl-C does, so half-written outputs are removed."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

__all__ = ["sigterm_as_interrupt"]


def _interrupt(signum: int, frame: FrameType | None) -> None:
    # Further SIGTERMs must not cut the clean-up short.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise KeyboardInterrupt


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Inside the block, SIGTERM raises ``KeyboardInterrupt``, so the ``with`` and
    ``try`` blocks that write through temporary ``.partial`` files remove them, as on
    Ctrl-C; later SIGTERMs are ignored until the block ends.

    Only where it is safe to take over: in the main thread, and only if SIGTERM still
    has its default action (a handler the program installed is left alone). The
    default action is restored on exit.

    Examples
    --------
    >>> with sigterm_as_interrupt():
    ...     signal.getsignal(signal.SIGTERM) is _interrupt
    True
    >>> signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    True
    """
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
    ):
        yield
        return
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
