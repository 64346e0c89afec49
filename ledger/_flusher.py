"""The background thread that runs checkpoints: when asked (active write cache
full, journal short of space) or every ``flush_interval``."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)


class Flusher:
    def __init__(self, checkpoint: Callable[[], object], *, interval_s: float,
                 on_failure: Callable[[BaseException], None]) -> None:
        self._checkpoint = checkpoint
        self._interval_s = interval_s
        self._on_failure = on_failure
        self._wake = threading.Condition()
        self._requested = False
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="ledgerd-flusher", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def request(self) -> None:
        with self._wake:
            self._requested = True
            self._wake.notify()

    def stop(self) -> None:
        with self._wake:
            self._stopping = True
            self._wake.notify()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        while True:
            deadline = time.monotonic() + self._interval_s
            with self._wake:
                while not (self._requested or self._stopping):
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        break
                    self._wake.wait(remaining)
                if self._stopping:
                    return
                self._requested = False
            try:
                self._checkpoint()
            except BaseException as exc:  # a failed checkpoint must not kill the thread silently
                log.exception("checkpoint failed")
                self._on_failure(exc)
                return
