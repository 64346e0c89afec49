"""A token bucket over bytes, shared by compaction's reads and writes."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

# Seconds of budget the bucket holds (335 KiB at the default 16 MiB/s).
BURST_S = 0.02


class ByteRateLimiter:
    """``acquire(n)`` blocks until ``n`` more bytes fit ``rate_bytes_per_s``.

    The bucket holds at most ``burst_s`` of budget, so an idle period (between
    runs, or before the first) does not turn into a burst.  Compaction is a
    steady consumer, so a large bucket buys it nothing, while a burst is CPU
    work the compaction thread does without waiting, holding the GIL against
    the add path's threads for Python's whole switch interval at a time (and
    reads and writes on the journal's disk at full speed): a bucket of one
    second was a 16 MiB sprint at the start of every run.  ``rate_bytes_per_s
    == 0`` means unlimited.  Waits end early when ``stop`` is set.
    """

    def __init__(self, rate_bytes_per_s: int, *, stop: threading.Event,
                 clock: Callable[[], float] = time.monotonic,
                 burst_s: float = BURST_S) -> None:
        self.rate_bytes_per_s = rate_bytes_per_s
        self._stop = stop
        self._clock = clock
        self._capacity = rate_bytes_per_s * burst_s
        self._tokens = self._capacity
        self._last = clock()
        self.waited_s = 0.0

    def acquire(self, nbytes: int) -> None:
        if self.rate_bytes_per_s <= 0:
            return
        now = self._clock()
        self._tokens = min(self._capacity,
                           self._tokens + (now - self._last) * self.rate_bytes_per_s)
        self._last = now
        self._tokens -= nbytes
        if self._tokens < 0:
            wait_s = -self._tokens / self.rate_bytes_per_s
            self.waited_s += wait_s
            self._stop.wait(wait_s)
