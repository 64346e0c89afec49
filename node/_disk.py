"""Automatic read-only mode when the data disk fills up (a thread of the node).

Every ``check_interval_s`` the used fraction of the data directory's file system
is compared with ``readonly_threshold``: at or above it the bookie turns
read-only (adds answer 507 ``EREADONLY``, reads keep working); once usage drops
below it again, read-only mode entered this way is left.  With offload running,
the same check queues the oldest closed ledgers for offload while usage is at or
above ``OFFLOAD_DISK_USAGE_THRESHOLD``.  Read-only mode set by an operator is
never undone here.
"""

from __future__ import annotations

import logging
import shutil
import threading
from collections.abc import Callable
from pathlib import Path

from ledger import Bookie
from offload import OffloadService

from ._settings import DiskWatchSettings

log = logging.getLogger("ledgerd.disk")


def used_fraction(path: Path) -> float:
    usage = shutil.disk_usage(path)
    return usage.used / usage.total if usage.total else 0.0


class DiskWatcher:
    def __init__(self, bookie: Bookie, settings: DiskWatchSettings, *,
                 offload: OffloadService | None,
                 usage: Callable[[], float]) -> None:
        self._bookie = bookie
        self._settings = settings
        self._offload = offload
        self._usage = usage
        self._lock = threading.Lock()
        # True while read-only mode was entered by this check (not by an operator).
        self._auto_read_only = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="ledgerd-disk-watch",
                                        daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def set_read_only(self, read_only: bool) -> None:
        """An operator's decision: it overrides this check until usage changes side."""
        with self._lock:
            self._bookie.set_read_only(read_only)
            self._auto_read_only = False

    def check_once(self) -> float:
        """One comparison of disk usage with the threshold; returns the usage seen."""
        fraction = self._usage()
        if self._offload is not None:
            # Offload is how a tiered bookie makes room before it has to refuse adds.
            self._offload.offload_by_disk_usage(fraction)
        threshold = self._settings.readonly_threshold
        with self._lock:
            if fraction >= threshold and not self._bookie.read_only:
                log.warning("data disk %.1f%% full (threshold %.1f%%): entering read-only mode",
                            fraction * 100, threshold * 100, extra={"disk_usage": fraction})
                self._bookie.set_read_only(True)
                self._auto_read_only = True
            elif fraction < threshold and self._auto_read_only:
                log.warning("data disk %.1f%% full: leaving read-only mode", fraction * 100,
                            extra={"disk_usage": fraction})
                self._bookie.set_read_only(False)
                self._auto_read_only = False
        return fraction

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.check_once()
            except Exception:
                log.exception("disk usage check failed")
            self._stop.wait(self._settings.check_interval_s)
