"""Bytes done out of bytes to do, for one offload, readable from any thread."""

from __future__ import annotations

import threading


class Progress:
    def __init__(self, total_bytes: int) -> None:
        self._lock = threading.Lock()
        self._done_bytes = 0
        self.total_bytes = total_bytes

    def advance(self, nbytes: int) -> None:
        with self._lock:
            self._done_bytes += nbytes

    def snapshot(self) -> tuple[int, int]:
        with self._lock:
            return min(self._done_bytes, self.total_bytes), self.total_bytes
