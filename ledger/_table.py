"""The ledger table: every ledger's state, and the one place it changes.

Live operations and journal replay change state through the same ``apply_*``
methods, so a state change has one code path whether it happens now or is
replayed after a crash.  The caller serialises them: the bookie's add lock while
running, the single replaying thread at start-up.

Each ledger has two sets of counters: *assigned* (every entry given an id and
appended to the journal) and *acknowledged* (covered by an fdatasync; reads stop
at the LAC).  Checkpoints persist the assigned counters, because a checkpoint
first waits until the journal is synced past everything it snapshots.
"""

from __future__ import annotations

import bisect
import itertools
import threading
import weakref
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from common.errors import LedgerClosed, LedgerFenced, NoSuchLedger, TooManyLedgers

from ._events import (
    CloseEvent,
    CreateEvent,
    DeleteEvent,
    FenceEvent,
    MetadataEvent,
    RehashEvent,
    ReplicaAddEvent,
    ReplicaDeleteEvent,
    ReplicaFenceEvent,
    TierEvent,
)
from ._ledger_record import (
    NO_OFFLOAD,
    NO_TIER,
    LedgerRecord,
    dormant_info,
    dormant_is_local,
    is_dormant,
    password_scheme_of,
)
from ._model import LedgerFilter, LedgerInfo, LedgerState, OffloadInfo, OffloadState, TierPosition
from ._password import PasswordHash, PasswordScheme
from ._replica_table import (
    REPLICA_BIT,
    LiveReplica,
    ReplicaRecord,
    ReplicaTable,
    replica_storage_id,
)

MAX_ID = 2**63 - 1
# Ids looked at per step of a listing; each step copies this many ids at most.
_LISTING_STEP = 1024
# Ids a filtered listing looks at per page at most (see LedgerTable.page).
_FILTERED_SCAN_MAX = 20_000


@dataclass(slots=True)
class LiveLedger:
    ledger_id: int
    state: LedgerState
    password: PasswordHash
    created_at: float
    closed_at: float | None
    metadata: dict[str, str]
    offload: OffloadInfo = NO_OFFLOAD
    tier: TierPosition = NO_TIER
    local_first_entry_id: int = 0
    next_entry_id: int = 0
    assigned_length: int = 0
    last_add_confirmed: int = -1
    length: int = 0
    deleted: bool = False

    @classmethod
    def from_record(cls, record: LedgerRecord) -> LiveLedger:
        return cls(
            ledger_id=record.ledger_id, state=record.state, password=record.password,
            created_at=record.created_at, closed_at=record.closed_at,
            metadata=dict(record.metadata), offload=record.offload, tier=record.tier,
            local_first_entry_id=record.local_first_entry_id,
            next_entry_id=record.last_entry_id + 1, assigned_length=record.length,
            last_add_confirmed=record.last_entry_id, length=record.length,
        )

    def snapshot_record(self) -> LedgerRecord:
        """The record a checkpoint persists (assigned counters; see module doc)."""
        return LedgerRecord(
            ledger_id=self.ledger_id, state=self.state, password=self.password,
            last_entry_id=self.next_entry_id - 1, length=self.assigned_length,
            created_at=self.created_at, closed_at=self.closed_at,
            metadata=dict(self.metadata), offload=self.offload, tier=self.tier,
            local_first_entry_id=self.local_first_entry_id,
        )

    def info(self) -> LedgerInfo:
        return LedgerInfo(
            ledger_id=self.ledger_id, state=self.state,
            last_add_confirmed=self.last_add_confirmed, length=self.length,
            entries=self.last_add_confirmed + 1, created_at=self.created_at,
            closed_at=self.closed_at, metadata=dict(self.metadata), offload=self.offload,
            tier=self.tier, local_first_entry_id=self.local_first_entry_id,
        )

    @property
    def can_sleep(self) -> bool:
        """Whether its record holds all of it and nothing will change it but a
        deletion (or a move in S3): closed, every entry acknowledged, never
        tiered, not offloaded or offloaded with its local copy gone (what
        ``is_dormant`` reads from a record)."""
        return (self.state == LedgerState.CLOSED and not self.deleted
                and self.last_add_confirmed == self.next_entry_id - 1
                and self.length == self.assigned_length
                and (self.offload == NO_OFFLOAD or self.offload.local_deleted)
                and self.tier == NO_TIER
                and self.local_first_entry_id == 0)

    def check_appendable(self) -> None:
        if self.deleted:
            raise NoSuchLedger(self.ledger_id)
        if self.state == LedgerState.FENCED:
            raise LedgerFenced(f"ledger {self.ledger_id} is fenced")
        if self.state == LedgerState.CLOSED:
            raise LedgerClosed(f"ledger {self.ledger_id} is closed")


def _woken(raw: bytes) -> LiveLedger:
    """A live ledger from its stored record."""
    return LiveLedger.from_record(LedgerRecord.decode(raw))


@dataclass(frozen=True, slots=True)
class TableChanges:
    """What changed since the last checkpoint: its records and deletions, and
    the ledgers whose local entries below an id are dropped (tiered)."""

    records: list[LedgerRecord]
    deleted: set[int]
    next_ledger_id: int
    dropped_below: dict[int, int] = field(default_factory=dict)
    replica_records: list[ReplicaRecord] = field(default_factory=list)
    replica_deleted: set[int] = field(default_factory=set)


class ChangedIds:
    """Storage ids whose entries may have changed between needed and garbage
    (or whose located entries changed) since the holder last took them: how GC
    keeps each entry log's usage between runs and measures again only the logs
    holding such a ledger.  Collects only once taken from (a holder that never
    looks costs nothing); thread-safe (noted under the add lock, taken without)."""

    __slots__ = ("__weakref__", "_ids", "_lock")

    def __init__(self) -> None:
        self._ids: set[int] | None = None
        self._lock = threading.Lock()

    def note(self, ids: Iterable[int]) -> None:
        with self._lock:
            if self._ids is not None:
                self._ids.update(ids)

    def take(self) -> set[int] | None:
        """The ids noted since the last take; None the first time (nothing was
        collected before: the holder must look at everything once)."""
        with self._lock:
            taken, self._ids = self._ids, set()
            return taken


class LedgerTable:
    """Every ledger, as a :class:`LiveLedger`, except those that were closed and
    idle when the bookie started: those stay as their record was read (one
    ~110-byte ``bytes``, see ``is_dormant``) until something changes them.  A
    million such ledgers then cost a start-up a second and ~250 bytes each; a
    read looks at a decoded copy (``view``), a change turns the ledger live
    (``get``), for good."""

    def __init__(self, records: Iterable[tuple[int, bytes]], *, next_ledger_id: int,
                 ledger_count_max: int, replicas: Iterable[ReplicaRecord] = ()) -> None:
        self._ledgers: dict[int, LiveLedger | bytes] = {}
        for ledger_id, raw in records:
            self._ledgers[ledger_id] = raw if is_dormant(raw) else _woken(raw)
        # Turning a dormant ledger live happens under this lock, so that every
        # thread that asks gets the one object the table keeps.
        self._wake_lock = threading.Lock()
        # Cluster mode: the replicas this bookie holds (ledger/_replica_table.py).
        self.replicas = ReplicaTable(replicas)
        # Ids only grow, so a create appends; the sorted list makes a page of a
        # listing a bisect instead of a sort of every ledger.
        self._ids = sorted(self._ledgers)
        # The same for ledgers not closed (OPEN or FENCED): what the tiering
        # thread lists every round, a few among many closed ones.
        self._unclosed_ids = [i for i, held in self._ledgers.items()
                              if not isinstance(held, bytes) and held.state != LedgerState.CLOSED]
        self._unclosed_ids.sort()
        self._ids_lock = threading.Lock()
        self._next_ledger_id = next_ledger_id
        self._ledger_count_max = ledger_count_max
        self._dirty: set[int] = set()
        self._deleted: set[int] = set()
        self._dropped_below: dict[int, int] = {}
        # What GC looks at each run, kept as it changes so that a run touches
        # these ledgers only, not every ledger held: offloaded ledgers whose
        # local copy is still here, and ledgers tiered past their first local
        # entry (see _classify).
        self._offloaded_local: set[int] = set()
        self._tiered_local: set[int] = set()
        for held in self._ledgers.values():
            if not isinstance(held, bytes):  # a dormant ledger is in neither set
                self._classify(held)
        self._watchers: weakref.WeakSet[ChangedIds] = weakref.WeakSet()

    # --- lookups (any thread) ----------------------------------------------

    def get(self, ledger_id: int) -> LiveLedger:
        """The ledger the table keeps (a dormant one turns live): what a change
        or a caller that must see later changes holds."""
        held = self._held(ledger_id)
        return self._wake(ledger_id) if isinstance(held, bytes) else held

    def view(self, ledger_id: int) -> LiveLedger:
        """The ledger as it is now, for a caller that only reads it: a dormant
        one is decoded for the caller and stays dormant."""
        held = self._held(ledger_id)
        return _woken(held) if isinstance(held, bytes) else held

    def _held(self, ledger_id: int) -> LiveLedger | bytes:
        held = self._ledgers.get(ledger_id) if 0 <= ledger_id <= MAX_ID else None
        if held is None:
            raise NoSuchLedger(ledger_id)
        return held

    def _wake(self, ledger_id: int) -> LiveLedger:
        with self._wake_lock:
            held = self._ledgers.get(ledger_id)  # again: deleted or woken meanwhile?
            if held is None:
                raise NoSuchLedger(ledger_id)
            if isinstance(held, bytes):
                held = _woken(held)
                self._ledgers[ledger_id] = held
            return held

    def holds(self, ledger_id: int) -> bool:
        """Whether the ledger exists (a read that holds a view asks again)."""
        return ledger_id in self._ledgers

    def __len__(self) -> int:
        return len(self._ledgers)

    def dormant_count(self) -> int:
        """Ledgers kept as their record (a scan: for tests and start-up logs)."""
        return sum(1 for held in list(self._ledgers.values()) if isinstance(held, bytes))

    @property
    def next_ledger_id(self) -> int:
        return self._next_ledger_id

    def page(self, *, state: LedgerState | None, after: int | None, limit: int,
             where: LedgerFilter | None = None) -> tuple[list[LedgerInfo], int | None]:
        """Up to ``limit`` ledgers with ids above ``after``, in id order, without
        holding the add lock: ids are read in short slices under the table's own
        lock, and a ledger deleted meanwhile is skipped.

        With a filter narrower than the state (``where.narrows``) a page looks at
        no more than ``_FILTERED_SCAN_MAX`` ids: a filter that matches few of a
        million ledgers answers a short (even empty) page with a ``next_after``,
        in bounded time, rather than scanning them all in one request."""
        if where is None:
            where = LedgerFilter(state=state)
        elif state is not None:
            where = replace(where, state=state)
        scan_max = _FILTERED_SCAN_MAX if where.narrows else None
        found: list[LedgerInfo] = []
        cursor = -1 if after is None else after
        scanned = 0
        # Listing open or fenced ledgers walks only the ledgers not closed.
        listed = self._ids if where.state in (None, LedgerState.CLOSED) \
            else self._unclosed_ids
        while len(found) <= limit:
            step = _LISTING_STEP if scan_max is None else min(_LISTING_STEP, scan_max - scanned)
            if step == 0:
                return found, cursor  # more to look at, maybe nothing more to find
            with self._ids_lock:
                start = bisect.bisect_right(listed, cursor)
                ids = listed[start:start + step]
            if not ids:
                break
            for ledger_id in ids:
                held = self._ledgers.get(ledger_id)
                cursor = ledger_id
                scanned += 1
                if isinstance(held, bytes):
                    info = dormant_info(held, where)
                elif held is not None and where.matches(held.state, held.offload.state,
                                                        held.metadata):
                    info = held.info()
                else:
                    info = None
                if info is not None:
                    found.append(info)
                    if len(found) > limit:
                        break
        page = found[:limit]
        return page, (page[-1].ledger_id if len(found) > limit else None)

    def is_local(self, storage_id: int) -> bool:
        """Whether the entries of this storage id are kept locally: a ledger not
        deleted whose local copy was not dropped, or a replica.  One lookup:
        nothing that runs per checkpoint or per GC run builds the set of every
        ledger held (that cost grew with the ledgers, under the add lock)."""
        if storage_id & REPLICA_BIT:
            return self.replicas.holds(storage_id & ~REPLICA_BIT)
        held = self._ledgers.get(storage_id)
        if isinstance(held, bytes):
            return dormant_is_local(held)
        return held is not None and not held.offload.local_deleted

    def is_locally_stored(self, storage_id: int) -> bool:
        """Whether its entries in the entry logs are still needed: besides the
        local ones, those deleted since the last checkpoint, because until that
        checkpoint commits, a crash could bring them back from the index (if
        their DELETE record never reached the journal's disk)."""
        if self.is_local(storage_id):
            return True
        if storage_id & REPLICA_BIT:
            return self.replicas.deleted_since_checkpoint(storage_id & ~REPLICA_BIT)
        return storage_id in self._deleted

    def keyed_password_count(self) -> int:
        """Ledgers whose password digest needs the node key (a scan: for start-up)."""
        return sum(1 for held in list(self._ledgers.values())
                   if (password_scheme_of(held) if isinstance(held, bytes)
                       else held.password.scheme) != PasswordScheme.SCRYPT)

    def local_first_entry_id(self, storage_id: int) -> int:
        """For a local ledger whose entries below an id were dropped (tiered), that
        id; 0 otherwise."""
        held = self._ledgers.get(storage_id)
        if held is None or isinstance(held, bytes) or held.offload.local_deleted:
            return 0  # a dormant ledger dropped nothing, or its whole local copy
        return held.local_first_entry_id

    def offloaded_with_local_copy(self) -> list[int]:
        """Ledgers offloaded whole whose local copy is still here."""
        return sorted(self._offloaded_local)

    def tiered_beyond_local(self) -> list[int]:
        """Local ledgers tiered past their first local entry."""
        return sorted(self._tiered_local)

    def watch_liveness(self) -> ChangedIds:
        """A new :class:`ChangedIds` the table notes changes in from now on."""
        watcher = ChangedIds()
        self._watchers.add(watcher)
        return watcher

    def note_liveness(self, ids: Iterable[int]) -> None:
        """Tell the watchers these storage ids changed (see :class:`ChangedIds`);
        also what a checkpoint calls once locations it removed are committed."""
        ids = list(ids)
        if ids:
            for watcher in list(self._watchers):
                watcher.note(ids)

    def _classify(self, ledger: LiveLedger) -> None:
        """Keep the ledger's membership of the sets GC runs walk up to date."""
        lid = ledger.ledger_id
        local = not ledger.deleted and not ledger.offload.local_deleted
        if local and ledger.offload.state == OffloadState.OFFLOADED \
                and ledger.offload.offloaded_at is not None:
            self._offloaded_local.add(lid)
        else:
            self._offloaded_local.discard(lid)
        if local and ledger.tier.entry_id > ledger.local_first_entry_id:
            self._tiered_local.add(lid)
        else:
            self._tiered_local.discard(lid)

    # --- state changes (the caller serialises them) ------------------------

    def check_room(self) -> None:
        held = len(self._ledgers) + len(self.replicas)
        if held >= self._ledger_count_max:
            raise TooManyLedgers(f"the bookie holds {held} ledgers and replicas, the most "
                                 "MAX_LEDGERS allows; delete some first")

    def apply_replica(self, event: ReplicaAddEvent | ReplicaFenceEvent | ReplicaDeleteEvent,
                      ) -> LiveReplica | None:
        """Apply one replica event (its entries are staged by the caller)."""
        held = self.replicas.holds(event.ledger_id)
        replica = self.replicas.apply(event)
        if self.replicas.holds(event.ledger_id) != held:
            # Created (perhaps again, over entries of an older incarnation) or deleted.
            self.note_liveness((replica_storage_id(event.ledger_id),))
        return replica

    def apply(self, event: MetadataEvent) -> LiveLedger | None:
        """Apply one metadata event; the ledger it created or changed, if any."""
        if isinstance(event, CreateEvent):
            return self._apply_create(event)
        try:
            ledger = self.get(event.ledger_id)
        except NoSuchLedger:
            return None  # replay of an event of a ledger deleted before the mark
        if isinstance(event, FenceEvent):
            if ledger.state == LedgerState.OPEN:
                ledger.state = LedgerState.FENCED
        elif isinstance(event, CloseEvent):
            if ledger.state != LedgerState.CLOSED:
                ledger.state = LedgerState.CLOSED
                ledger.closed_at = event.closed_at
                self._forget_unclosed(ledger.ledger_id)
        elif isinstance(event, DeleteEvent):
            self._apply_delete(ledger)
            return ledger
        elif isinstance(event, TierEvent) and event.position > ledger.tier:
            # Positions only grow: a replayed older record changes nothing.
            ledger.tier = event.position
        elif isinstance(event, RehashEvent):
            ledger.password = event.password
        self._classify(ledger)
        self._dirty.add(ledger.ledger_id)
        return ledger

    def _apply_create(self, event: CreateEvent) -> LiveLedger | None:
        if event.ledger_id < self._next_ledger_id:
            return None  # already persisted (or created and deleted before the mark)
        ledger = LiveLedger(
            ledger_id=event.ledger_id, state=LedgerState.OPEN, password=event.password,
            created_at=event.created_at, closed_at=None, metadata=dict(event.metadata))
        self._ledgers[event.ledger_id] = ledger
        with self._ids_lock:
            self._ids.append(event.ledger_id)
            self._unclosed_ids.append(event.ledger_id)
        self._next_ledger_id = event.ledger_id + 1
        self._dirty.add(event.ledger_id)
        return ledger

    def _apply_delete(self, ledger: LiveLedger) -> None:
        ledger.deleted = True
        del self._ledgers[ledger.ledger_id]
        with self._ids_lock:
            at = bisect.bisect_left(self._ids, ledger.ledger_id)
            del self._ids[at]
        if ledger.state != LedgerState.CLOSED:
            self._forget_unclosed(ledger.ledger_id)
        self._dirty.discard(ledger.ledger_id)
        self._deleted.add(ledger.ledger_id)
        self._classify(ledger)

    def _forget_unclosed(self, ledger_id: int) -> None:
        with self._ids_lock:
            at = bisect.bisect_left(self._unclosed_ids, ledger_id)
            if at < len(self._unclosed_ids) and self._unclosed_ids[at] == ledger_id:
                del self._unclosed_ids[at]

    def apply_add(self, ledger: LiveLedger, count: int, nbytes: int) -> None:
        """``count`` entries of ``nbytes`` were assigned ids from ``next_entry_id``."""
        ledger.next_entry_id += count
        ledger.assigned_length += nbytes
        self._dirty.add(ledger.ledger_id)

    def set_offload(self, ledger: LiveLedger, info: OffloadInfo) -> None:
        dropped = info.local_deleted and not ledger.offload.local_deleted
        ledger.offload = info
        self._classify(ledger)
        self._dirty.add(ledger.ledger_id)
        if dropped:
            self.note_liveness((ledger.ledger_id,))

    def drop_local_below(self, ledger: LiveLedger, entry_id: int) -> None:
        """Entries below ``entry_id`` are no longer read locally; the next
        checkpoint removes their locations in the batch that persists this."""
        if entry_id > ledger.local_first_entry_id:
            ledger.local_first_entry_id = entry_id
            self._dropped_below[ledger.ledger_id] = entry_id
            self._classify(ledger)
            self._dirty.add(ledger.ledger_id)

    # --- checkpoints -------------------------------------------------------

    def take_changes(self) -> TableChanges:
        """What the next checkpoint persists; the table starts collecting anew."""
        replica_records, replica_deleted = self.replicas.take_changes()
        changes = TableChanges(
            records=[self.get(i).snapshot_record() for i in self._dirty
                     if i in self._ledgers],
            deleted=self._deleted, next_ledger_id=self._next_ledger_id,
            dropped_below={i: below for i, below in self._dropped_below.items()
                           if i in self._ledgers},
            replica_records=replica_records, replica_deleted=replica_deleted)
        self._dirty, self._deleted, self._dropped_below = set(), set(), {}
        # No longer locally stored (see is_locally_stored).
        self.note_liveness(itertools.chain(
            changes.deleted, map(replica_storage_id, changes.replica_deleted)))
        return changes

    def sleepers(self, records: Iterable[LedgerRecord]) -> list[tuple[int, bytes]]:
        """Of the records a checkpoint committed, those of closed, idle ledgers,
        encoded (without any lock) for :meth:`put_to_sleep`."""
        return [(r.ledger_id, r.encode()) for r in records
                if r.state == LedgerState.CLOSED and r.tier == NO_TIER
                and (r.offload == NO_OFFLOAD or r.offload.local_deleted)
                and r.local_first_entry_id == 0]

    def put_to_sleep(self, sleepers: Iterable[tuple[int, bytes]]) -> int:
        """Keep these ledgers as their committed records from now on, as a
        restart would (the caller holds the add lock: no change is under way).
        A ledger changed since its record was taken stays live.  Returns how
        many went dormant."""
        slept = 0
        with self._wake_lock:
            for ledger_id, raw in sleepers:
                held = self._ledgers.get(ledger_id)
                if isinstance(held, LiveLedger) and ledger_id not in self._dirty \
                        and held.can_sleep and is_dormant(raw):
                    self._ledgers[ledger_id] = raw
                    slept += 1
        return slept

    def take_deletions(self) -> set[int]:
        """Ledgers deleted since the last checkpoint, to commit on their own."""
        deleted, self._deleted = self._deleted, set()
        self.note_liveness(deleted)
        return deleted

    def restore_deletions(self, deleted: set[int]) -> None:
        self._deleted |= deleted
        self.note_liveness(deleted)

    def restore_changes(self, changes: TableChanges) -> None:
        """A checkpoint failed before its index batch committed: what it took is
        still to be persisted by the next one."""
        self._dirty.update(r.ledger_id for r in changes.records)
        self._deleted |= changes.deleted
        for ledger_id, below in changes.dropped_below.items():
            self._dropped_below[ledger_id] = max(below, self._dropped_below.get(ledger_id, 0))
        self.replicas.restore_changes(changes.replica_records, changes.replica_deleted)
        self.note_liveness(itertools.chain(
            changes.deleted, map(replica_storage_id, changes.replica_deleted)))
