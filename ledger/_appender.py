"""The add lock and the little done under it: ids, journal offsets, the write cache.

Everything that can happen outside the lock does: payload CRCs are computed by
the caller, the journal copies payloads into its aligned buffer on its writer
thread, and the acknowledgement (LAC, length) runs on the journal's acker
thread.  Under the lock an add only checks the ledger's state, takes the next
ids, stages the payloads in the active write cache and queues one journal record
(which assigns its offset).  Append order is therefore offset order is id order.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

import crc32c

from common.errors import (
    Backpressure,
    EntryConflict,
    JournalFull,
    LedgerdError,
    WouldBlock,
    WriteCacheFull,
    invariant,
)
from journal import Journal, JournalAppend

from . import _events as events
from ._model import LedgerState
from ._table import LedgerTable, LiveLedger
from ._write_cache import WriteCache

log = logging.getLogger(__name__)
T = TypeVar("T")
# One batch of an add: its payloads, their CRC32C, their total size, and the id
# it must start at (None: wherever the ledger is).
BatchParts = tuple[Sequence[bytes], Sequence[int], int, int | None]
# Journal record overhead and alignment slack reserved when waiting for space.
_RECORD_SLACK_BYTES = 4096 + 64


class _NeedSpace(Exception):
    """Internal: an attempt found no room; ``wait`` blocks until there may be."""

    def __init__(self, error: Backpressure, wait: Callable[[float], bool]) -> None:
        super().__init__(str(error))
        self.error = error
        self.wait = wait


class WriteGate:
    """Why writes are refused right now, if they are (read-only, broken, shut
    down): the bookie sets it when its state changes, and every add reads one
    attribute instead of asking."""

    def __init__(self) -> None:
        self.refusal: Callable[[], LedgerdError] | None = None

    def check(self) -> None:
        if self.refusal is not None:
            raise self.refusal()


class Appender:
    def __init__(self, *, table: LedgerTable, journal: Journal, cache: WriteCache,
                 wait_s_max: float, request_flush: Callable[[], None],
                 gate: WriteGate, record_entries_max: int, record_bytes_max: int) -> None:
        """``record_entries_max``, ``record_bytes_max``: the most entries and payload
        bytes one ADD record of a run may hold (the batch limits, which the
        settings check makes fit the journal)."""
        self.lock = threading.Lock()
        self._record_entries_max = record_entries_max
        self._record_bytes_max = record_bytes_max
        self._table = table
        self._journal = journal
        self._cache = cache
        self._wait_s_max = wait_s_max
        self._request_flush = request_flush
        self._gate = gate
        self.add_count = 0  # changed under the lock
        self.add_bytes = 0

    @property
    def journal(self) -> Journal:
        """Where the adds are journaled (a Pending tells by it whether it is synced)."""
        return self._journal

    def append(self, ledger: LiveLedger, payloads: Sequence[bytes], crcs: Sequence[int],
               nbytes: int, expected_first: int | None, *,
               block: bool) -> tuple[JournalAppend, int]:
        """Give the payloads the ledger's next ids and queue them as one journal
        record; returns it and the first id.  The record's ``on_synced`` moves
        the LAC, so an add is readable only once durable."""
        # No lambda here (nor in _append): a function that makes a closure pays
        # for its cells on every call, and this runs for every add.
        try:
            return self._append(ledger, payloads, crcs, nbytes, expected_first)
        except _NeedSpace as need:
            return self.retrying(
                functools.partial(self._append, ledger, payloads, crcs, nbytes, expected_first),
                block=block, first_need=need)

    def _append(self, ledger: LiveLedger, payloads: Sequence[bytes], crcs: Sequence[int],
                nbytes: int, expected_first: int | None) -> tuple[JournalAppend, int]:
        count = len(payloads)
        lid = ledger.ledger_id
        with self.lock:
            self._check_appendable(ledger)
            first = ledger.next_entry_id
            if expected_first is not None and expected_first != first:
                raise _conflict(lid, expected_first, first)
            # Staged before the journal append: the acker may move the LAC past
            # these ids the moment the record is queued, and a reader allowed up
            # to the LAC must find them.
            if not self._cache.try_stage(lid, first, payloads, crcs, nbytes):
                raise _NeedSpace(WriteCacheFull("both write caches are full"),
                                 functools.partial(self._cache.wait_for_room, nbytes))
            last = first + count - 1
            envelope = events.add_envelope(lid, first, count)
            try:
                append = self._journal_append(
                    [envelope, *payloads], [crc32c.crc32c(envelope), *crcs],
                    functools.partial(_acknowledge, ledger, last, nbytes))
            except _NeedSpace:
                self._cache.discard(lid, first, count, nbytes)
                raise
            self._added(ledger, count, nbytes)
            return append, first

    def append_many(self, ledger: LiveLedger, batches: Sequence[BatchParts], *,
                    block: bool) -> tuple[JournalAppend, int, int]:
        """Append consecutive batches to one ledger, under one lock acquisition and
        with one journal future, as few journal records as the batch limits allow
        (:meth:`_record_cuts`); returns the append, the first id and how many
        batches were appended: a prefix of ``batches``, at least the first.  A
        later batch whose expected first id is not where it would land, or that
        finds no room while the first one does, ends the run, and only the first
        one's error is raised.  Each record's ``on_synced`` moves the LAC over
        its batches."""
        try:
            return self._append_many(ledger, batches)
        except _NeedSpace as need:  # the first batch alone found no room: it waits
            payloads, crcs, nbytes, expected = batches[0]
            append, first = self.retrying(
                lambda: self._append(ledger, payloads, crcs, nbytes, expected),
                block=block, first_need=need)
            return append, first, 1

    def _append_many(self, ledger: LiveLedger,
                     batches: Sequence[BatchParts]) -> tuple[JournalAppend, int, int]:
        lid = ledger.ledger_id
        with self.lock:
            self._check_appendable(ledger)
            first = ledger.next_entry_id
            lasts: list[int] = []  # per batch of the run: its last id,
            ends: list[int] = []  # and the payload bytes up to its end
            next_id, nbytes = first, 0
            for payloads, _crcs, size, expected in batches:
                if expected is not None and expected != next_id:
                    if not lasts:
                        raise _conflict(lid, expected, first)
                    break
                next_id += len(payloads)
                nbytes += size
                lasts.append(next_id - 1)
                ends.append(nbytes)
            if len(lasts) > 1 and not self._cache.fits(nbytes):
                del lasts[1:], ends[1:]  # the first alone may still fit
            run = batches[:len(lasts)]
            if not self._stage_run(lid, first, run, ends[-1]):
                need = batches[0][2]
                raise _NeedSpace(WriteCacheFull("both write caches are full"),
                                 lambda t: self._cache.wait_for_room(need, t))
            # The run goes to the journal as few ADD records as the batch limits
            # allow: consecutive ids of one ledger are one ADD whichever batches
            # they came in, and a record costs its framing, header and envelope
            # whatever it holds.  A record is all or nothing; so is each batch in it.
            cuts = self._record_cuts(run)
            records = []
            start = 0
            for cut in cuts:
                at = first if start == 0 else lasts[start - 1] + 1
                envelope = events.add_envelope(lid, at, lasts[cut - 1] - at + 1)
                parts: list[bytes] = [envelope]
                crcs: list[int] = [crc32c.crc32c(envelope)]
                for payloads, batch_crcs, _size, _expected in run[start:cut]:
                    parts += payloads
                    crcs += batch_crcs
                records.append((parts, crcs))
                start = cut
            try:
                append = self._journal_append_many(
                    records, lambda count: _acknowledge(ledger, lasts[cuts[count - 1] - 1],
                                                        ends[cuts[count - 1] - 1]))
            except _NeedSpace:
                self._cache.discard(lid, first, lasts[-1] - first + 1, ends[-1])
                raise
            kept = cuts[append.record_count - 1]  # batches in the records kept
            if kept < len(run):  # the journal had room for these only
                self._cache.discard(lid, lasts[kept - 1] + 1, lasts[-1] - lasts[kept - 1],
                                    ends[-1] - ends[kept - 1])
            self._added(ledger, lasts[kept - 1] - first + 1, ends[kept - 1])
            return append, first, kept

    def _record_cuts(self, run: Sequence[BatchParts]) -> list[int]:
        """Where the run's records end (batch indexes, exclusive): each record as
        many whole batches as fit the batch limits, which every record fits."""
        cuts: list[int] = []
        count = size = 0
        for index, (payloads, _crcs, nbytes, _expected) in enumerate(run):
            if index and (count + len(payloads) > self._record_entries_max
                          or size + nbytes > self._record_bytes_max):
                cuts.append(index)
                count = size = 0
            count += len(payloads)
            size += nbytes
        cuts.append(len(run))
        return cuts

    def _added(self, ledger: LiveLedger, count: int, nbytes: int) -> None:
        """Under the lock: ``count`` entries of ``nbytes`` were queued."""
        self._table.apply_add(ledger, count, nbytes)
        self.add_count += count
        self.add_bytes += nbytes
        if self._cache.is_full():
            self._request_flush()

    def _check_appendable(self, ledger: LiveLedger) -> None:
        """Under the lock: raise why the ledger takes no add right now, if it does not."""
        if self._gate.refusal is not None or ledger.state is not LedgerState.OPEN \
                or ledger.deleted:
            self._gate.check()
            ledger.check_appendable()

    def _stage_run(self, lid: int, first: int, run: Sequence[BatchParts], nbytes: int) -> bool:
        """Stage a run's entries (consecutive ids from ``first``) in one call."""
        if len(run) == 1:
            return self._cache.try_stage(lid, first, run[0][0], run[0][1], nbytes)
        payloads = [p for batch in run for p in batch[0]]
        crcs = [c for batch in run for c in batch[1]]
        return self._cache.try_stage(lid, first, payloads, crcs, nbytes)

    def stage(self, ledger: LiveLedger, first: int, payloads: Sequence[bytes],
              crcs: Sequence[int], nbytes: int) -> None:
        """Replay: put entries into the active write cache (the caller made room)."""
        staged = self._cache.try_stage(ledger.ledger_id, first, payloads, crcs, nbytes)
        invariant(staged, "replay staged entries into a full write cache")

    def commit_event(self, decide: Callable[[], events.MetadataEvent | None], *,
                     writable: bool, block: bool = True,
                     ) -> tuple[JournalAppend | None, LiveLedger | None]:
        """Under the lock: ``decide()`` checks the ledger and returns the event to
        record (None: nothing to do), which is journaled and applied to the table.
        ``writable`` refuses it on a read-only bookie (creates; fence, close and
        delete stay allowed, so a full disk can be dug out).  ``block=False``:
        WouldBlock, having changed nothing, when the journal has no room."""

        def attempt() -> tuple[JournalAppend | None, LiveLedger | None]:
            with self.lock:
                if writable:
                    self._gate.check()
                event = decide()
                if event is None:
                    return None, None
                body = events.encode(event)
                append = self._journal_append([body], [crc32c.crc32c(body)], None)
                return append, self._table.apply(event)

        return self.retrying(attempt, block=block)

    def commit_replica(self, decide: Callable[[], events.ReplicaEvent],
                       apply: Callable[[events.ReplicaEvent], None], *,
                       writable: bool, block: bool = True) -> JournalAppend:
        """Under the lock: ``decide()`` checks the replica and returns the event to
        record, which is journaled as one record and then applied (``apply``
        stages its entries and changes the table, as replay does).  Unlike a
        standalone add, nothing here gates reads on durability: the node answers
        only once the record is synced."""

        def attempt() -> JournalAppend:
            with self.lock:
                if writable:
                    self._gate.check()
                event = decide()
                parts, crcs = events.replica_parts(event)
                if isinstance(event, events.ReplicaAddEvent):
                    nbytes = sum(len(s) for s in event.stored)
                    if not self._cache.fits(nbytes):
                        raise _NeedSpace(WriteCacheFull("both write caches are full"),
                                         lambda t: self._cache.wait_for_room(nbytes, t))
                    self.add_count += len(event.stored)
                    self.add_bytes += nbytes
                append = self._journal_append(parts, crcs, None)
                apply(event)
                if self._cache.is_full():
                    self._request_flush()
                return append

        return self.retrying(attempt, block=block)

    def _journal_append(self, parts: list[bytes], crcs: list[int],
                        on_synced: Callable[[], None] | None) -> JournalAppend:
        """Append under the lock; no room becomes a wait outside the lock."""
        try:
            return self._journal.append_nowait(parts, crcs=crcs, on_synced=on_synced)
        except JournalFull as exc:
            need = sum(len(p) for p in parts) + _RECORD_SLACK_BYTES
            raise _NeedSpace(exc, lambda t: self._journal.wait_for_space(need, t)) from exc

    def _journal_append_many(self, records: list[tuple[list[bytes], list[int]]],
                             on_synced: Callable[[int], None]) -> JournalAppend:
        """:meth:`_journal_append` for a run of records (the first one needs room)."""
        try:
            return self._journal.append_many_nowait(records, on_synced=on_synced)
        except JournalFull as exc:
            need = sum(len(p) for p in records[0][0]) + _RECORD_SLACK_BYTES
            raise _NeedSpace(exc, lambda t: self._journal.wait_for_space(need, t)) from exc

    def retrying(self, attempt: Callable[[], T], *, block: bool = True,
                 first_need: _NeedSpace | None = None) -> T:
        """``attempt()``, waiting for room and trying again while it finds none
        (each attempt changes nothing until it has room); with ``block=False``
        no room raises WouldBlock instead of waiting.  ``first_need``: the first
        attempt was made already and found no room."""
        deadline = time.monotonic() + self._wait_s_max
        need = first_need
        while True:
            if need is None:
                try:
                    return attempt()
                except _NeedSpace as found:
                    need = found
            self._request_flush()
            if not block:
                raise WouldBlock(str(need.error)) from None
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not need.wait(remaining):
                raise need.error from None
            need = None


def _conflict(ledger_id: int, expected: int, first: int) -> EntryConflict:
    return EntryConflict(f"entry {expected} is not the next entry of ledger {ledger_id} "
                         f"(next is {first})")


def _acknowledge(ledger: LiveLedger, last: int, nbytes: int) -> None:
    # Bound with functools.partial, not a lambda: one Python frame on the acker
    # per add instead of two.  The acker thread alone runs this, in journal
    # offset order, which is id order within a ledger: no lock, and the LAC
    # only grows.
    ledger.last_add_confirmed = last
    ledger.length += nbytes
