"""Whether the bookie takes writes, and why not.

Four conditions refuse adds, in this order of precedence (the first one that
holds is the error an add gets):

1. broken — a checkpoint or the flusher failed for a reason other than a full
   disk; latched until restart (reads go on, a restart replays the journal);
2. shut down — :meth:`Bookie.close` ran;
3. disk full — the last checkpoint found no room (``DiskFull``); cleared by the
   next checkpoint that succeeds (GC and deletes free space);
4. read-only — set by the operator or by the node's disk watch.

Each change rewrites the :class:`WriteGate` the appender reads, so an add pays
one attribute read to learn all of this.  A broken journal refuses writes too;
it is asked on each check rather than latched here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from common.errors import DeviceBroken, DiskFull, ReadOnly
from journal import Journal

from ._appender import WriteGate
from ._checkpoint import CheckpointResult

log = logging.getLogger(__name__)


class Health:
    def __init__(self, *, journal: Journal) -> None:
        self._journal = journal
        self.gate = WriteGate()  # the appender's: it reads ``refusal`` on each add
        self._broken: BaseException | None = None
        self._closed = False
        self._disk_full = False
        self._read_only = False

    @property
    def broken(self) -> BaseException | None:
        return self._broken

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def disk_full(self) -> bool:
        return self._disk_full

    @property
    def read_only(self) -> bool:
        return self._read_only

    def mark_broken(self, exc: BaseException) -> None:
        if self._broken is None:
            log.error("bookie broken, refusing writes: %r", exc)
            self._broken = exc
            self._update_gate()

    def mark_closed(self) -> None:
        self._closed = True
        self._update_gate()

    def set_disk_full(self, full: bool) -> None:
        if self._disk_full != full:
            log.warning("data disk %s: adds %s", "full" if full else "has room again",
                        "refused (507)" if full else "accepted again")
            self._disk_full = full
            self._update_gate()

    def set_read_only(self, read_only: bool) -> None:
        if self._read_only != read_only:
            log.warning("bookie read_only=%s", read_only)
        self._read_only = read_only
        self._update_gate()

    def checkpoint(self, run: Callable[[], CheckpointResult]) -> CheckpointResult:
        """Run a checkpoint on a bookie that is not broken, and take its outcome:
        ``DiskFull`` sets disk full, any other failure latches broken, success
        clears disk full."""
        self.check_not_broken()
        try:
            result = run()
        except DiskFull:
            self.set_disk_full(True)
            raise
        except BaseException as exc:
            self.mark_broken(exc)
            raise
        self.set_disk_full(False)
        return result

    def check_not_broken(self) -> None:
        if self._broken is not None:
            raise DeviceBroken(f"bookie is broken: {self._broken}")
        if self._journal.broken:
            raise DeviceBroken(f"journal {self._journal.path} is broken")

    def check_writable(self) -> None:
        self.check_not_broken()
        self.gate.check()

    def _update_gate(self) -> None:
        """Tell the add path (one attribute read per add) why writes are refused."""
        broken = self._broken
        if broken is not None:
            self.gate.refusal = lambda: DeviceBroken(f"bookie is broken: {broken}")
        elif self._closed:
            self.gate.refusal = lambda: DeviceBroken("bookie is shut down")
        elif self._disk_full:
            self.gate.refusal = lambda: DiskFull(
                "the data disk is full: adds are refused until garbage collection or "
                "deletes free space (reads go on)")
        elif self._read_only:
            self.gate.refusal = lambda: ReadOnly("bookie is read-only")
        else:
            self.gate.refusal = None
