"""What a caller's write goes through before the appender, outside any lock.

Adds: the limits (``LedgerLimits``, the one place they are checked), the
password (a keyed digest compare, a microsecond; scrypt only for a ledger
hashed before keyed hashes, once: its hash is then replaced by a keyed one),
one CRC32C per payload, and the exactly-once check: an expected first id below
the ledger's next id is an idempotent retry, answered from what is stored (byte
for byte, or EntryConflict) without appending.  Everything else goes to the appender: the
add lock, ids, the write cache and the journal record.  An append stream's
queued messages are admitted here as one run of batches (``append``).

Creates and the metadata changes (fence, close, delete) are checked here too,
then decided and journaled under the add lock by ``Appender.commit_event``.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Mapping, Sequence

import crc32c

from common.errors import LedgerdError

from . import _events as events
from ._appender import Appender, BatchParts
from ._health import Health
from ._model import Batch, BatchAddResult, LedgerInfo, LedgerState, Pending
from ._password import PasswordScheme, PasswordVerifier
from ._reader import EntryReader
from ._settings import LedgerLimits
from ._table import LedgerTable, LiveLedger

log = logging.getLogger(__name__)


class Writes:
    def __init__(self, *, table: LedgerTable, appender: Appender, reader: EntryReader,
                 health: Health, limits: LedgerLimits, passwords: PasswordVerifier) -> None:
        self._table = table
        self._appender = appender
        self._reader = reader
        self._health = health
        self._limits = limits
        self._verifier = passwords

    def authorized(self, ledger_id: int, password: str, *, block: bool = True) -> LiveLedger:
        """The ledger, once ``password`` is its password (NoSuchLedger, Unauthorized)."""
        ledger = self._table.get(ledger_id)
        if self._verifier.check(ledger_id, ledger.password, password, block=block):
            self._rehash(ledger, password)
        return ledger

    def _rehash(self, ledger: LiveLedger, password: str) -> None:
        """A scrypt hash (a ledger created before keyed hashes) was just verified:
        journal a keyed hash in its place, so no later check of the ledger, after
        a restart either, runs scrypt.  Best effort, and not waited for: until
        the REHASH is durable the scrypt hash still holds the same password, so
        a crash loses nothing but the saving; a read-only or broken bookie, or
        a journal without room, skips it (the next verification tries again)."""
        if not self._verifier.keyed:
            return
        hashed = self._verifier.hash(password)

        def decide() -> events.RehashEvent | None:
            self._table.get(ledger.ledger_id)  # deleted meanwhile: NoSuchLedger
            if ledger.password.scheme != PasswordScheme.SCRYPT:
                return None  # a concurrent check replaced it first
            return events.RehashEvent(ledger.ledger_id, hashed)

        try:
            self._appender.commit_event(decide, writable=True, block=False)
        except LedgerdError as exc:
            log.info("ledger %d keeps its scrypt password hash for now: %s",
                     ledger.ledger_id, exc)
            return
        self._verifier.forget(ledger.ledger_id)

    def password_verified(self, ledger_id: int, password: str) -> bool:
        ledger = self._table.get(ledger_id)
        return self._verifier.verify_fast(ledger_id, ledger.password, password)

    # --- ledgers -----------------------------------------------------------

    def create(self, password: str, metadata: Mapping[str, str],
               block: bool) -> Pending[LedgerInfo]:
        self._limits.check_create(password, metadata)
        self._health.check_writable()
        hashed = self._verifier.hash(password)
        now = time.time()

        def decide() -> events.CreateEvent:
            self._table.check_room()
            return events.CreateEvent(self._table.next_ledger_id, now, hashed, dict(metadata))

        append, ledger = self._appender.commit_event(decide, writable=True, block=block)
        assert append is not None and ledger is not None
        self._verifier.remember(ledger.ledger_id, hashed, password)
        return Pending(append.future, ledger.info)

    def delete(self, ledger_id: int, password: str) -> Pending[None]:
        pending = self.metadata_event(ledger_id, password, events.DeleteEvent(ledger_id))
        self._verifier.forget(ledger_id)
        return Pending(pending.future, lambda: None)

    def metadata_event(self, ledger_id: int, password: str,
               event: events.FenceEvent | events.CloseEvent | events.DeleteEvent,
               ) -> Pending[LedgerInfo]:
        """Journal a fence, close or delete of the ledger; closing a closed one is
        answered at once (its CLOSE is durable already)."""
        ledger = self.authorized(ledger_id, password)

        def decide() -> events.MetadataEvent | None:
            self._health.check_not_broken()
            self._table.get(ledger_id)  # deleted meanwhile: NoSuchLedger
            if isinstance(event, events.CloseEvent) and ledger.state == LedgerState.CLOSED:
                return None
            return event

        append, _ = self._appender.commit_event(decide, writable=False)
        return Pending.ready(ledger.info()) if append is None else \
            Pending(append.future, ledger.info)

    # --- entries -----------------------------------------------------------

    def append(self, ledger_id: int, batches: Sequence[Batch], password: str,
               block: bool) -> list[Pending[BatchAddResult]]:
        """See ``Bookie.append``: the run is the batches up to the first one over
        the limits (raised if it is the first), and the appender may end it
        sooner."""
        expected, payloads = batches[0]
        # One batch, or a retry of the first: that batch alone.
        if len(batches) == 1 or (expected is not None
                                 and expected < self._table.get(ledger_id).next_entry_id):
            return [self._append_batch(ledger_id, payloads, password, expected, block)]
        ledger = self.authorized(ledger_id, password, block=block)
        run: list[BatchParts] = []
        for expected, payloads in batches:
            try:
                nbytes, crcs = self._checked(payloads)
            except LedgerdError:
                if not run:
                    raise
                break
            run.append((payloads, crcs, nbytes, expected))
        append, first, kept = self._appender.append_many(ledger, run, block=block)
        pendings: list[Pending[BatchAddResult]] = []
        for payloads, _crcs, _size, _expected in run[:kept]:
            last = first + len(payloads) - 1
            pendings.append(Pending(append.future, functools.partial(
                _batch_result, ledger, first, last), append.end_offset,
                self._appender.journal))
            first = last + 1
        return pendings

    def _append_batch(self, ledger_id: int, payloads: Sequence[bytes], password: str,
                      expected: int | None, block: bool) -> Pending[BatchAddResult]:
        """One batch, one journal record (the path of every single add: kept short)."""
        nbytes, crcs = self._checked(payloads)
        # authorized(), inlined: it pays for the call it would add to every add.
        ledger = self._table.get(ledger_id)
        if self._verifier.check(ledger_id, ledger.password, password, block=block):
            self._rehash(ledger, password)
        last_offset = len(payloads) - 1
        if expected is not None and expected < ledger.next_entry_id:
            lac = self._reader.check_stored(ledger, expected, payloads, block=block)
            return Pending.ready(BatchAddResult(expected, expected + last_offset, lac, True))
        append, first = self._appender.append(ledger, payloads, crcs, nbytes, expected,
                                              block=block)
        return Pending(append.future, functools.partial(
            _batch_result, ledger, first, first + last_offset), append.end_offset,
            self._appender.journal)

    def _checked(self, payloads: Sequence[bytes]) -> tuple[int, Sequence[int]]:
        """A batch's payload bytes and CRC32Cs, once it is within the limits; one
        entry (every single add, most stream messages) without the batch's loops."""
        if len(payloads) == 1:
            nbytes = len(payloads[0])
            if nbytes > self._limits.entry_size_bytes_max:
                self._limits.check_entry(nbytes)
            return nbytes, (crc32c.crc32c(payloads[0]),)
        return self._limits.check_batch(payloads), list(map(crc32c.crc32c, payloads))


def _batch_result(ledger: LiveLedger, first: int, last: int) -> BatchAddResult:
    # Positional: built once per batch, when its Pending is asked for its result.
    return BatchAddResult(first, last, ledger.last_add_confirmed)
