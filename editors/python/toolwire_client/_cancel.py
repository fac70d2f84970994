"""Cancelling a call that is in flight."""

from __future__ import annotations

import threading
from collections.abc import Callable


class CancelToken:
    """Pass one to a call; ``cancel()`` sends ``$/cancelRequest`` for it.

    Work that had not committed then raises ``CancelledError`` (-32800) and
    leaves nothing behind; work that had completed returns normally.
    Thread-safe: cancel from any thread (the sync client) or task.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cancelled = False
        self._callbacks: list[Callable[[], None]] = []

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def cancel(self) -> None:
        with self._lock:
            if self._cancelled:
                return
            self._cancelled = True
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()

    def _on_cancel(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Run ``callback`` on cancel (now, if already cancelled); returns an unsubscribe."""
        with self._lock:
            if not self._cancelled:
                self._callbacks.append(callback)

                def remove() -> None:
                    with self._lock:
                        if callback in self._callbacks:
                            self._callbacks.remove(callback)

                return remove
        callback()
        return lambda: None
