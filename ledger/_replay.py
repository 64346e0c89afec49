"""Journal replay at start-up: rebuild what the index had not yet persisted.

Records whose end offset is at or below the index's checkpoint mark are
already reflected in RocksDB and are skipped, so a ledger deleted before the
last checkpoint is never resurrected by its older CREATE record.  Every state
change goes through the same code as a live operation: the ledger table's
``apply`` for metadata events, the appender's ``stage`` and the table's
``apply_add`` for adds.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from common.errors import NoSuchLedger
from journal import JournalRecord

from . import _events as events
from ._appender import Appender
from ._table import LedgerTable
from ._write_cache import WriteCache

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReplayReport:
    records: int
    skipped: int
    entries_applied: int
    entries_duplicate: int
    entries_dropped: int
    bytes: int
    duration_s: float


class Replayer:
    def __init__(self, *, table: LedgerTable, appender: Appender, cache: WriteCache,
                 flush: Callable[[int], object],
                 replicas: Callable[[events.ReplicaEvent], None]) -> None:
        self._table = table
        self._replicas = replicas  # Replicas.apply: the live code path of replica events
        self._appender = appender
        self._cache = cache
        self._flush = flush  # checkpoint of what was replayed so far, up to an offset
        self._counts = {"records": 0, "skipped": 0, "applied": 0, "duplicate": 0,
                        "dropped": 0, "bytes": 0}

    def replay(self, records: Iterable[JournalRecord], mark: int) -> ReplayReport:
        started = time.monotonic()
        counts = self._counts
        for record in records:
            counts["records"] += 1
            counts["bytes"] += record.body_length
            if record.end_offset <= mark:
                counts["skipped"] += 1
                continue
            event = events.decode(record.parts, record.crcs)
            if isinstance(event, events.AddEvent):
                self._add(event, record.offset)
            elif isinstance(event, events.ReplicaAddEvent | events.ReplicaFenceEvent
                            | events.ReplicaDeleteEvent):
                self._replica(event, record.offset)
            else:
                self._table.apply(event)
        return ReplayReport(
            records=counts["records"], skipped=counts["skipped"],
            entries_applied=counts["applied"], entries_duplicate=counts["duplicate"],
            entries_dropped=counts["dropped"], bytes=counts["bytes"],
            duration_s=time.monotonic() - started)

    def _replica(self, event: events.ReplicaEvent, record_offset: int) -> None:
        """Replica records hold only what the live call decided to store, so replay
        applies each as it is (later records win, as they did live)."""
        if isinstance(event, events.ReplicaAddEvent):
            nbytes = sum(len(s) for s in event.stored)
            if not self._cache.fits(nbytes):
                self._flush(record_offset)
            self._counts["applied"] += len(event.stored)
        self._replicas(event)

    def _add(self, event: events.AddEvent, record_offset: int) -> None:
        count = len(event.payloads)
        try:
            ledger = self._table.get(event.ledger_id)
        except NoSuchLedger:
            ledger = None
        outcome = "dropped"
        if ledger is not None:
            if event.first_entry_id + count <= ledger.next_entry_id:
                outcome = "duplicate"
            elif event.first_entry_id == ledger.next_entry_id:
                outcome = "applied"
        # Otherwise a hole swallowed earlier entries of this ledger: they were
        # never acknowledged, and keeping later ones would break dense ids.
        self._counts[outcome] += count
        if outcome == "dropped":
            log.warning("replay dropped entries ledger=%d first_entry=%d count=%d offset=%d "
                        "(gap or deleted ledger)", event.ledger_id, event.first_entry_id,
                        count, record_offset)
        if outcome != "applied" or ledger is None:
            return
        nbytes = sum(len(p) for p in event.payloads)
        if not self._cache.fits(nbytes):
            self._flush(record_offset)
        self._appender.stage(ledger, event.first_entry_id, event.payloads, event.crcs, nbytes)
        self._table.apply_add(ledger, count, nbytes)
        ledger.last_add_confirmed = ledger.next_entry_id - 1
        ledger.length = ledger.assigned_length
