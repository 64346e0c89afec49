"""Copy the live entries of one entry log into the current log, then remove it.

Steps, each safe to be killed after (the crash test kills at every one):

1. ``copied``   live records appended to the current log (not yet durable);
2. ``synced``   the current log fsynced: the copies are durable;
3. ``indexed``  one synced index batch points at the copies;
   (1-3 repeat every ``commit_bytes`` copied, so adds and checkpoints are never
   locked out for a whole log)
4. ``removed``  the old log deleted.

A kill before 3 leaves unindexed copies, which the map of their log counts as
live.  So before copying, the current log id is persisted (``relocating_from``,
cleared by the index batch of step 3); a bookie opened with it set lists the
logs from that id on as suspects, which GC compacts whatever their usage.  A kill
between 3 and 4 leaves a log nothing points at; the next run copies nothing
from it and removes it.  An entry is "live" when its ledger's local entries are
needed and the index still points at this very record, so stale copies are
never copied again.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable, Container
from dataclasses import dataclass, field

from common.errors import NoSuchEntry
from entrylog import RECORD_HEADER_SIZE_BYTES, EntryLogStore, ScannedRecord, ScanStop
from ledger import Relocation, Relocations

from ._throttle import ByteRateLimiter

log = logging.getLogger("ledgerd.compaction")



class CompactionStep(enum.StrEnum):
    """What the step hook is told, after each step (the module docstring's
    order; the index steps are GC's own, around an index compaction).  A StrEnum
    so that a hook comparing names (the crash tests' drivers) sees the same
    strings as before."""

    COPIED = "copied"
    SYNCED = "synced"
    INDEXED = "indexed"
    REMOVED = "removed"
    INDEX_COMPACTING = "index_compacting"
    INDEX_COMPACTED = "index_compacted"


# Called after each step with the entry log's id (0 for the index steps); tests
# kill the process there.
StepHook = Callable[[CompactionStep, int], None]


@dataclass
class CompactionProgress:
    """What one log's compaction did so far; ``finished`` once it was removed."""

    log_id: int
    size_bytes: int
    scanned_bytes: int = 0
    copied_bytes: int = 0
    copied_entries: int = 0
    finished: bool = False
    error: str | None = None
    relocations: list[Relocation] = field(default_factory=list)


def is_live(relocations: Relocations, record: ScannedRecord, live: Container[int]) -> bool:
    """A record is live when its ledger's local entries are needed (``live``) and
    the index still points at this very record (not at a later copy)."""
    if record.ledger_id not in live:
        return False
    try:
        return relocations.location_of(record.ledger_id, record.entry_id) == record.location
    except NoSuchEntry:
        return False


class EntryLogCompactor:
    def __init__(self, relocations: Relocations, *, limiter: ByteRateLimiter,
                 commit_bytes: int, stop: threading.Event,
                 on_step: StepHook | None = None) -> None:
        self._relocations = relocations
        self._store: EntryLogStore = relocations.entry_log
        self._limiter = limiter
        self._commit_bytes = commit_bytes
        self._stop = stop
        self._on_step = on_step or (lambda step, log_id: None)

    def compact(self, log_id: int, *, deadline: float) -> CompactionProgress:
        """Move ``log_id``'s live entries; remove it unless stopped, past the
        deadline or its scan hit corruption (then it stays, with ``error``)."""
        progress = CompactionProgress(log_id, self._store.log_size_bytes(log_id))
        # A view asking the ledger table per record (no copy of every ledger id);
        # Relocations.commit checks again under the checkpoint lock.
        live = self._relocations.locally_stored()
        scan = self._store.scan(log_id)
        pending = 0
        for record in scan:
            record_bytes = RECORD_HEADER_SIZE_BYTES + len(record.payload)
            progress.scanned_bytes += record_bytes
            self._limiter.acquire(record_bytes)
            if self._is_live(record, live):
                self._copy(record, progress)
                pending += record_bytes
            if pending >= self._commit_bytes:
                self._commit(progress)
                pending = 0
            if self._stop.is_set() or time.monotonic() >= deadline:
                self._commit(progress)
                return progress
        self._commit(progress)
        end = scan.end
        if end is not None and end.stop == ScanStop.CORRUPT:
            # Records past the damage cannot be read, so they cannot be moved.
            progress.error = f"{end.path} at offset {end.offset}: {end.reason}"
            log.error("compaction left a damaged entry log in place log_id=%d: %s",
                      log_id, progress.error, extra={"log_id": log_id})
            return progress
        self._store.remove(log_id)
        self._on_step(CompactionStep.REMOVED, log_id)
        progress.finished = True
        return progress

    def _is_live(self, record: ScannedRecord, live: Container[int]) -> bool:
        return is_live(self._relocations, record, live)

    def _copy(self, record: ScannedRecord, progress: CompactionProgress) -> None:
        if not progress.relocations:
            # Persisted before the first copy of a batch, so after a crash GC
            # knows which logs may hold copies that nothing points at.
            self._relocations.set_relocating_from(self._store.current_log_id)
        new = self._store.append(record.ledger_id, record.entry_id, record.payload,
                                 record.crc32c)
        self._limiter.acquire(RECORD_HEADER_SIZE_BYTES + len(record.payload))
        progress.relocations.append(
            Relocation(record.ledger_id, record.entry_id, record.location, new))
        progress.copied_bytes += RECORD_HEADER_SIZE_BYTES + len(record.payload)
        progress.copied_entries += 1

    def _commit(self, progress: CompactionProgress) -> None:
        moves = progress.relocations
        if not moves:
            return
        self._on_step(CompactionStep.COPIED, progress.log_id)
        self._store.sync()  # copies durable before the index points at them
        self._on_step(CompactionStep.SYNCED, progress.log_id)
        self._relocations.commit(moves)
        self._on_step(CompactionStep.INDEXED, progress.log_id)
        progress.relocations = []
