"""A token bucket over bytes, shared by compaction's reads and writes."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class ByteRateLimiter:
    """``acquire(n)`` blocks until ``n`` more bytes fit ``rate_bytes_per_s``.

    The bucket holds at most one second of budget, so an idle period does not
    turn into a burst that starves the journal.  ``rate_bytes_per_s == 0``
    means unlimited.  Waits end early when ``stop`` is set.
    """

    def __init__(self, rate_bytes_per_s: int, *, stop: threading.Event,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.rate_bytes_per_s = rate_bytes_per_s
        self._stop = stop
        self._clock = clock
        self._tokens = float(rate_bytes_per_s)
        self._last = clock()
        self.waited_s = 0.0

    def acquire(self, nbytes: int) -> None:
        if self.rate_bytes_per_s <= 0:
            return
        now = self._clock()
        self._tokens = min(float(self.rate_bytes_per_s),
                           self._tokens + (now - self._last) * self.rate_bytes_per_s)
        self._last = now
        self._tokens -= nbytes
        if self._tokens < 0:
            wait_s = -self._tokens / self.rate_bytes_per_s
            self.waited_s += wait_s
            self._stop.wait(wait_s)
