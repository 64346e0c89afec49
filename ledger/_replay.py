"""Journal replay at start-up: rebuild what the index had not yet persisted.

Records whose end offset is at or below the index's checkpoint mark are
already reflected in RocksDB and are skipped, so a ledger deleted before the
last checkpoint is never resurrected by its older CREATE record.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from journal import JournalRecord

from . import _events as events

if TYPE_CHECKING:
    from ._bookie import Bookie

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


def replay_journal(bookie: Bookie, records: Iterable[JournalRecord], mark: int) -> ReplayReport:
    started = time.monotonic()
    counts = {"records": 0, "skipped": 0, "applied": 0, "duplicate": 0, "dropped": 0,
              "bytes": 0}
    for record in records:
        counts["records"] += 1
        counts["bytes"] += len(record.body)
        if record.end_offset <= mark:
            counts["skipped"] += 1
            continue
        event = events.decode(record.body)
        if isinstance(event, events.AddEvent):
            outcome = bookie.apply_add(event, record.offset)
            counts[outcome] += len(event.entries)
            if outcome == "dropped":
                log.warning("replay dropped entries ledger=%d first_entry=%d count=%d "
                            "offset=%d (gap or deleted ledger)", event.ledger_id,
                            event.first_entry_id, len(event.entries), record.offset)
        elif isinstance(event, events.CreateEvent):
            bookie.apply_create(event)
        elif isinstance(event, events.FenceEvent):
            bookie.apply_fence(event.ledger_id)
        elif isinstance(event, events.CloseEvent):
            bookie.apply_close(event.ledger_id, event.closed_at)
        else:
            bookie.apply_delete(event.ledger_id)
    return ReplayReport(
        records=counts["records"], skipped=counts["skipped"],
        entries_applied=counts["applied"], entries_duplicate=counts["duplicate"],
        entries_dropped=counts["dropped"], bytes=counts["bytes"],
        duration_s=time.monotonic() - started,
    )
