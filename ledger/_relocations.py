"""What compaction may do to the engine's storage, and the state it persists.

Compaction copies live entries of a sparse entry log into the current one and
then points the index at the copies.  Two facts must survive a crash (both in
the index's default family):

``relocating_from``  the current log's id when a batch of copies began: copies
                     nothing points at yet may sit in that log or a later one.
``suspect_logs``     what a restart turns that mark into: the logs that existed
                     from that id on, whose ledgers maps overstate their live
                     data, so GC compacts them whatever their usage.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Container, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from common.errors import NoSuchEntry
from entrylog import EntryLogStore, Location

from ._index import LocationIndex
from ._replica_table import is_replica_storage_id
from ._table import ChangedIds

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Relocation:
    """One entry compaction copied: the index moves from ``old`` to ``new``."""

    ledger_id: int
    entry_id: int
    old: Location
    new: Location


class _LocallyStored:
    """``ledger_id in view``: whether the ledger table still needs its entries."""

    __slots__ = ("_check",)

    def __init__(self, check: Callable[[int], bool]) -> None:
        self._check = check

    def __contains__(self, ledger_id: object) -> bool:
        return isinstance(ledger_id, int) and self._check(ledger_id)


class Relocations:
    """The engine seam compaction uses (``compaction`` conforms to nothing else)."""

    def __init__(self, *, index: LocationIndex, entry_log: EntryLogStore,
                 checkpoint_lock: AbstractContextManager[Any],
                 is_locally_stored: Callable[[int], bool],
                 local_first_entry_id: Callable[[int], int] = lambda _lid: 0,
                 watch_liveness: Callable[[], ChangedIds] = ChangedIds,
                 unindexed_from: Callable[[], int | None] = lambda: None) -> None:
        self._index = index
        self.entry_log = entry_log
        # The checkpointer's lock: a ledger deleted meanwhile (whose locations a
        # checkpoint removes with delete_range) is never given new ones.
        self._lock = checkpoint_lock
        self._is_locally_stored = is_locally_stored
        self._local_first_entry_id = local_first_entry_id
        self._watch_liveness = watch_liveness
        self._unindexed_from = unindexed_from

    def locally_stored(self) -> Container[int]:
        """Ledgers whose entries in the entry logs are still needed, as a view
        (``ledger_id in view`` asks the ledger table then): never a copy of
        every ledger id held, which cost each GC run and compaction work that
        grew with the ledgers."""
        return _LocallyStored(self._is_locally_stored)

    def local_first_entry_id(self, ledger_id: int) -> int:
        """For a locally stored ledger whose entries below an id were dropped once
        tiered, that id (0: none dropped): an entry log's ledgers map overstates
        its live bytes, which :meth:`located_entry_counts` tells exactly."""
        return self._local_first_entry_id(ledger_id)

    def watch_liveness(self) -> ChangedIds:
        """From now on, the storage ids that turn needed or garbage (or whose
        located entries a checkpoint changed): see ``ChangedIds``."""
        return self._watch_liveness()

    def indexed_log_ids(self, log_ids: list[int]) -> list[int]:
        """Those of ``log_ids`` whose every record the index already describes:
        a checkpoint writing now may have sealed logs before committing their
        locations (``Checkpointer.unindexed_from``).  Read the ids first, then
        call this, then read the index: a checkpoint that ends in between
        committed before it stopped holding its logs back."""
        start = self._unindexed_from()
        return log_ids if start is None else [i for i in log_ids if i < start]

    def located_entry_counts(self, ledger_id: int) -> Counter[int]:
        """How many of the ledger's entries the index points into each entry log."""
        return Counter(log_id for _entry, log_id, _offset in self._index.locations_of(ledger_id))

    def location_of(self, ledger_id: int, entry_id: int) -> Location:
        """Where the index points; NoSuchEntry when nowhere."""
        return self._index.location(ledger_id, entry_id)

    def set_relocating_from(self, log_id: int) -> None:
        """Persist (synced) the log compaction is about to copy into; cleared by
        :meth:`commit`."""
        batch = self._index.batch()
        batch.set_relocating_from(log_id)
        self._index.commit(batch)

    def commit(self, moves: Sequence[Relocation]) -> int:
        """Point the index at compacted copies (already fsynced by the caller) and
        clear the ``relocating_from`` mark in the same batch; returns how many."""
        with self._lock:
            live = self.locally_stored()
            batch = self._index.batch()
            for move in moves:
                if move.ledger_id in live and self._still_at(move):
                    batch.put_location(move.ledger_id, move.entry_id, move.new)
            batch.set_relocating_from(None)
            self._index.commit(batch)
        return batch.location_count

    def _still_at(self, move: Relocation) -> bool:
        """A replica's entry may have been replaced (a higher epoch) since it was
        copied: the copy then holds stale bytes and must not be pointed at.  The
        entries of standalone ledgers never change, so they skip the lookup."""
        if not is_replica_storage_id(move.ledger_id):
            return True
        try:
            return self._index.location(move.ledger_id, move.entry_id) == move.old
        except NoSuchEntry:
            return False

    def suspect_logs(self) -> list[int]:
        return self._index.suspect_logs()

    def roll_entry_log(self, log_id: int) -> bool:
        """Seal the current entry log if it is still ``log_id`` (GC measured it
        mostly garbage), so GC can remove or compact it.  Under the checkpoint
        lock: no checkpoint is then writing into it, so every record it holds
        is indexed and GC may judge it by the index at once."""
        with self._lock:
            if self.entry_log.current_log_id != log_id:
                return False
            return self.entry_log.roll() == log_id

    def index_deletes_uncompacted(self) -> bool:
        """Whether the index holds deleted ranges not compacted yet."""
        return bool(self._index.uncompacted_spans())

    def compact_deleted_index(self) -> int | None:
        """Compact the index ranges deleted since the last call (no lock held:
        see ``LocationIndex.compact_deleted``); returns how many bytes the index
        directory shrank by, None when nothing was deleted."""
        before = self._index.size_bytes()
        if not self._index.compact_deleted():
            return None
        return max(0, before - self._index.size_bytes())

    def clear_suspect_log(self, log_id: int) -> None:
        with self._lock:
            batch = self._index.batch()
            batch.set_suspect_logs([i for i in self.suspect_logs() if i != log_id])
            self._index.commit(batch)

    def adopt_interrupted(self) -> None:
        """At open: turn a ``relocating_from`` mark left by a crash into the list
        of logs that existed from that id on (logs created later cannot hold the
        lost copies, so the list is bounded)."""
        start = self._index.relocating_from()
        if start is None:
            return
        suspects = set(self._index.suspect_logs())
        suspects.update(i for i in self.entry_log.flushed_log_ids() if i >= start)
        batch = self._index.batch()
        batch.set_suspect_logs(sorted(suspects))
        batch.set_relocating_from(None)
        self._index.commit(batch)
        log.warning("interrupted compaction: entry logs %s may hold unindexed copies",
                    sorted(suspects), extra={"suspect_logs": sorted(suspects)})
