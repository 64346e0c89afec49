"""The read path: acknowledged entries, from local storage or from S3.

An entry is readable up to the ledger's LAC (invariant 1).  Local entries come
from :class:`EntryStorage` (write caches, read cache, index, entry log); an
entry whose local copy was dropped — the whole ledger once offloaded, or the
entries below ``local_first_entry_id`` of a ledger tiered while open — comes
from the :class:`RemoteEntryReader` offload/ provides.  GC may drop a local
copy between the decision to read it locally and the read; it marks the ledger
before it removes the locations, so a local miss that the ledger now calls
remote is read from S3, and any other miss is an error.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence

from common.errors import (
    BadRequest,
    CorruptRecord,
    EntryConflict,
    NoSuchEntry,
    NoSuchLedger,
    StorageUnavailable,
    WouldBlock,
)
from journal import Journal

from ._model import Entry, ReadHook, RemoteEntryReader
from ._storage import EntryStorage
from ._table import LedgerTable, LiveLedger


class EntryReader:
    def __init__(self, *, table: LedgerTable, storage: EntryStorage, journal: Journal,
                 remote: RemoteEntryReader | None, read_hook: ReadHook | None) -> None:
        self._table = table
        self._storage = storage
        self._journal = journal
        self._remote = remote
        self._read_hook = read_hook
        self._read_count = 0
        self._read_count_lock = threading.Lock()  # reads run on many threads

    @property
    def read_count(self) -> int:
        """Entries read one by one (``read_entry``); scans are not counted."""
        return self._read_count

    @property
    def remote_readable(self) -> bool:
        """Whether entries whose local copy is gone can be read (from S3)."""
        return self._remote is not None

    def read_entry(self, ledger_id: int, entry_id: int) -> Entry:
        # A view: reading leaves a dormant ledger dormant (LedgerTable).
        ledger = self._table.view(ledger_id)
        if entry_id < 0 or entry_id > ledger.last_add_confirmed:
            raise NoSuchEntry(ledger_id, entry_id)
        if _is_remote(ledger, entry_id):
            payload, crc = self._read_remote(ledger, entry_id)
        else:
            if self._read_hook is not None:
                self._read_hook(ledger_id, entry_id)
            try:
                payload, crc = self._storage.get(ledger_id, entry_id)
            except NoSuchEntry:
                # GC dropped the local copy between the check above and the read
                # (it marks the ledger before it removes the locations): the
                # entry is acknowledged, so it is in S3 now.  The ledger as it
                # is now, not the view taken before.
                ledger = self._table.get(ledger_id)
                if not _is_remote(ledger, entry_id):
                    raise
                payload, crc = self._read_remote(ledger, entry_id)
        with self._read_count_lock:
            self._read_count += 1
        return Entry(ledger_id=ledger_id, entry_id=entry_id, payload=payload, crc32c=crc)

    def read_entries(self, ledger_id: int, start: int, end: int | None,
                     limit: int | None) -> Iterator[Entry]:
        """Entries ``start..end`` (inclusive, ``end`` defaults to and is capped at
        the LAC seen when called), read lazily one at a time."""
        lac = self._table.view(ledger_id).last_add_confirmed
        if start < 0:
            raise BadRequest("start must not be negative")
        last = lac if end is None else min(end, lac)
        if limit is not None:
            last = min(last, start + limit - 1)
        return (self.read_entry(ledger_id, eid) for eid in range(start, last + 1))

    def scan_entries(self, ledger_id: int, start: int, end: int | None) -> Iterator[Entry]:
        """Entries ``start..end`` (capped at the LAC seen when called) for bulk
        readers such as offload: CRC-verified like reads, read a window of
        records at a time, and neither served from nor put into the read
        cache, so a bulk read neither evicts hot entries nor pays for caching
        what it reads once.  Entries whose local copy is gone come from S3."""
        ledger = self._table.get(ledger_id)
        if start < 0:
            raise BadRequest("start must not be negative")
        last = ledger.last_add_confirmed if end is None else min(end, ledger.last_add_confirmed)
        return self._scan(ledger, start, last)

    def _scan(self, ledger: LiveLedger, start: int, last: int) -> Iterator[Entry]:
        ledger_id = ledger.ledger_id
        entry_id = start
        while entry_id <= last:
            if _is_remote(ledger, entry_id):
                payload, crc = self._read_remote(ledger, entry_id)
                yield Entry(ledger_id=ledger_id, entry_id=entry_id, payload=payload, crc32c=crc)
                entry_id += 1
                continue
            try:
                for found_id, payload, crc in self._storage.scan(ledger_id, entry_id, last):
                    yield Entry(ledger_id=ledger_id, entry_id=found_id, payload=payload,
                                crc32c=crc)
                    entry_id = found_id + 1
            except NoSuchEntry:
                # As in read_entry: GC dropped the rest of the local copy
                # meanwhile, so the loop goes on from S3.
                if not _is_remote(ledger, entry_id):
                    raise

    def check_stored(self, ledger: LiveLedger, first: int, payloads: Sequence[bytes], *,
                     block: bool = True) -> int:
        """An idempotent retry: every payload is stored from ``first`` on, byte for
        byte (EntryConflict otherwise); returns the LAC once they are durable.
        With ``block=False`` it raises WouldBlock, as it may wait and read the disk."""
        if not block:
            raise WouldBlock("an idempotent retry reads the stored entries back")
        last = first + len(payloads) - 1
        if last >= ledger.next_entry_id:
            raise EntryConflict(f"entries {first}..{last} of ledger {ledger.ledger_id} are "
                                f"not all there (the next entry is {ledger.next_entry_id})")
        if ledger.last_add_confirmed < last:
            # Still in flight: everything appended so far is synced after this.
            self._journal.wait_synced(self._journal.appended_offset)
        for entry_id, payload in enumerate(payloads, start=first):
            try:
                stored, _crc = self._storage.get(ledger.ledger_id, entry_id)
            except NoSuchEntry as exc:
                raise EntryConflict(f"entry {entry_id} of ledger {ledger.ledger_id} was not "
                                    "acknowledged") from exc
            if stored != payload:
                raise EntryConflict(f"entry {entry_id} of ledger {ledger.ledger_id} holds "
                                    "a different payload")
        return ledger.last_add_confirmed

    def _read_remote(self, ledger: LiveLedger, entry_id: int) -> tuple[bytes, int]:
        if self._remote is None:
            raise StorageUnavailable(f"ledger {ledger.ledger_id} is offloaded and its local "
                                     "copy deleted, but no S3 reader is configured")
        try:
            return self._remote.read_entry(ledger.ledger_id, entry_id, ledger.offload)
        except CorruptRecord:
            # A DELETE that became durable after this read found the ledger
            # removes its objects: a segment gone then means the ledger is
            # gone, not that S3 lost data.
            if ledger.deleted or not self._table.holds(ledger.ledger_id):
                raise NoSuchLedger(ledger.ledger_id) from None
            raise


def _is_remote(ledger: LiveLedger, entry_id: int) -> bool:
    """Whether the entry's local copy was dropped (it is read from S3)."""
    return ledger.offload.local_deleted or entry_id < ledger.local_first_entry_id
