"""The ledger operations a node offers, with the node's policies around the engine.

Routes (and programs that embed a node) call these coroutines, never the engine:
in standalone mode they run on the local bookie, blocking engine calls on
worker threads and adds that wait for nothing on the event loop itself; closing
queues the offload (``OFFLOAD_AFTER_CLOSE``) and deleting removes the ledger's
S3 objects in the background once the operation is durable.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Callable, Iterator, Mapping, Sequence
from concurrent.futures import Executor, Future
from typing import Any

import anyio
import anyio.to_thread

from common.errors import DiskFull, NotConfigured, ReadOnly, WouldBlock
from ledger import (
    Batch,
    BatchAddResult,
    Bookie,
    Entry,
    LedgerFilter,
    LedgerInfo,
    LedgerState,
    OffloadInfo,
    OffloadState,
    Pending,
    TierPosition,
)
from offload import OffloadService

from ._bridge import blocking, settle, settle_now

log = logging.getLogger("ledgerd.node")


class Ledgers:
    def __init__(self, bookie: Bookie, *, offload: OffloadService | None,
                 background: Executor) -> None:
        self._bookie = bookie
        self._offload = offload
        self._background = background

    # --- ledgers ---------------------------------------------------------

    async def create(self, *, password: str, metadata: Mapping[str, str],
                     ensemble_size: int | None = None, write_quorum: int | None = None,
                     ack_quorum: int | None = None,
                     limiter: anyio.CapacityLimiter | None = None) -> LedgerInfo:
        """A new OPEN ledger, answered once its CREATE is durable.  Its password
        hash is keyed (a microsecond, ledger/_password.py), so a create is run as
        an add is: on the event loop unless it must wait for room (then on
        anyio's pool, never on ``limiter``'s few threads, which cluster mode's
        scrypt needs), and its journal sync is awaited without a thread, so
        concurrent creates share syncs as adds do."""
        if (ensemble_size, write_quorum, ack_quorum) != (None, None, None):
            raise NotConfigured("ensemble_size, write_quorum and ack_quorum need cluster "
                                "mode (METADATA_URL)")
        return await settle_now(lambda block: self._bookie.create_ledger(
            password=password, metadata=metadata, block=block))

    async def authorize(self, ledger_id: int, *, password: str,
                        limiter: anyio.CapacityLimiter | None = None) -> LedgerInfo:
        """The ledger once ``password`` is known to be its password (else
        NoSuchLedger, Unauthorized), adding nothing: routes check before they read
        a body, a stream checks once and then adds many times.  A password
        verified before is checked on the event loop; scrypt, if it is needed,
        runs on a worker thread of ``limiter`` (default: anyio's pool)."""
        try:
            return self._bookie.authorize(ledger_id, password=password, block=False)
        except WouldBlock:
            return await anyio.to_thread.run_sync(
                lambda: self._bookie.authorize(ledger_id, password=password), limiter=limiter)

    def password_verified(self, ledger_id: int, *, password: str) -> bool:
        """Whether ``password`` is the ledger's, known without a KDF: microseconds
        (NoSuchLedger for an unknown ledger); False: wrong, or only
        :meth:`authorize` can tell, so a caller can choose its thread."""
        return self._bookie.password_verified(ledger_id, password)

    async def get(self, ledger_id: int) -> LedgerInfo:
        return self._bookie.get_ledger(ledger_id)  # an in-memory lookup

    async def readable_end(self, ledger_id: int) -> int:
        """The last entry id a read may return now (the LAC)."""
        return self._bookie.get_ledger(ledger_id).last_add_confirmed

    async def list_ledgers(self, *, state: LedgerState | None, after: int | None,
                   limit: int, where: LedgerFilter | None = None,
                   ) -> tuple[list[LedgerInfo], int | None]:
        return await blocking(self._bookie.list_ledgers, state=state, after=after, limit=limit,
                              where=where)

    async def fence(self, ledger_id: int, *, password: str) -> LedgerInfo:
        return await settle(self._bookie.fence, ledger_id, password=password)

    async def close(self, ledger_id: int, *, password: str) -> LedgerInfo:
        """Seal the ledger; once that is durable, offload it if OFFLOAD_AFTER_CLOSE."""

        def close() -> Pending[LedgerInfo]:
            closed = self._bookie.close_ledger(ledger_id, password=password)
            if self._offload is not None:
                self._once_durable(closed, self._offload.on_ledger_closed, ledger_id)
            return closed

        return await settle(close)

    async def delete(self, ledger_id: int, *, password: str) -> None:
        """Delete the ledger: 404 from now on; its S3 objects go in the background
        (S3 being slow or down must not fail a delete: what this misses, the
        orphan sweep at the next start deletes)."""

        def delete() -> Pending[None]:
            info = self._bookie.get_ledger(ledger_id)
            deleted = self._bookie.delete_ledger(ledger_id, password=password)
            in_s3 = info.offload.state != OffloadState.NONE or info.tier != TierPosition()
            if self._offload is not None and in_s3:
                self._once_durable(deleted, _delete_objects, self._offload, ledger_id,
                                   info.offload)
            return deleted

        await settle(delete)

    # --- entries ---------------------------------------------------------

    async def append(self, ledger_id: int, payloads: Sequence[bytes], *, password: str,
                     expected_first_entry_id: int | None = None) -> BatchAddResult:
        """One batch (a single add is a batch of one), answered once durable: the
        engine's one entry point, on the event loop unless it must wait."""
        batch = ((expected_first_entry_id, payloads),)
        return await settle_now(lambda block: self._bookie.append(
            ledger_id, batch, password=password, block=block)[0])

    # --- append streams: many batches in flight on one connection --------------

    def submit(self, ledger_id: int, batches: Sequence[Batch], *, password: str,
               block: bool) -> list[Pending[BatchAddResult]]:
        """Queue consecutive batches ``(expected_first_entry_id, payloads)`` without
        waiting for them (one lock, one completion, as few journal records as
        the batch limits allow);
        returns the Pendings of a prefix of them, at least the first (its error
        is raised): the caller submits the rest again (``Bookie.append``).
        ``block`` as for the engine: False raises WouldBlock instead of waiting."""
        return self._bookie.append(ledger_id, batches, password=password, block=block)

    def check_writable(self) -> None:
        """ReadOnly (or DiskFull) when adds would be refused right now."""
        if self._bookie.disk_full:
            raise DiskFull("the data disk is full")
        if self._bookie.read_only:
            raise ReadOnly("bookie is read-only")

    async def read_entry(self, ledger_id: int, entry_id: int) -> tuple[Entry, int]:
        """The entry and the ledger's LAC as of the read."""

        def read() -> tuple[Entry, int]:
            entry = self._bookie.read_entry(ledger_id, entry_id)
            return entry, self._bookie.get_ledger(ledger_id).last_add_confirmed

        return await blocking(read)

    async def read_range(self, ledger_id: int, start: int, last: int, *,
                         count_max: int | None, bytes_max: int,
                         batch_count_max: int = 64) -> AsyncGenerator[list[Entry], None]:
        """Entries ``start..last`` (at most ``count_max``) in batches of at most
        ``batch_count_max`` entries or ``bytes_max`` bytes, each read on a worker
        thread; the engine's iterator is released however the caller stops."""
        if start > last:
            return
        entries = await blocking(self._bookie.read_entries, ledger_id, start, last, count_max)
        try:
            while batch := await blocking(_pull, entries, batch_count_max, bytes_max):
                yield batch
        finally:
            # On normal end, on error and on a client disconnect (cancellation).
            with anyio.CancelScope(shield=True):
                await blocking(_close, entries)

    # --- offload ---------------------------------------------------------

    async def request_offload(self, ledger_id: int) -> OffloadInfo:
        """Queue a CLOSED ledger for offload; NotConfigured without S3."""
        if self._offload is None:
            self._bookie.get_ledger(ledger_id)  # an unknown ledger is 404 first
            raise NotConfigured("offload is not configured (set S3_BUCKET)")
        return await blocking(self._offload.request_offload, ledger_id)

    async def offload_status(self, ledger_id: int,
                             ) -> tuple[LedgerInfo, tuple[int, int] | None]:
        """The ledger (its offload and tier state) and, while its offload runs,
        (bytes done, bytes total)."""
        ledger = self._bookie.get_ledger(ledger_id)
        progress = None if self._offload is None else self._offload.progress(ledger_id)
        return ledger, progress

    # --- policies ----------------------------------------------------------

    def _once_durable(self, pending: Pending[Any], action: Callable[..., object],
                      *args: Any) -> None:
        """Run ``action(*args)`` on the node's background thread once ``pending``
        is durable (whether or not anyone waits for it); never on the journal's
        threads, which must not wait for S3 or a checkpoint."""

        def submit(future: Future[Any]) -> None:
            if future.exception() is not None:
                return
            try:
                self._background.submit(_logged, action, *args)
            except RuntimeError:  # the node is shutting down
                log.warning("node stopping: %s skipped", getattr(action, "__name__", action),
                            extra={"args": repr(args)})

        pending.future.add_done_callback(submit)


def _pull(entries: Iterator[Entry], count_max: int, bytes_max: int) -> list[Entry]:
    out: list[Entry] = []
    size = 0
    for entry in entries:
        out.append(entry)
        size += len(entry.payload)
        if len(out) >= count_max or size >= bytes_max:
            break
    return out


def _close(entries: Iterator[Entry]) -> None:
    close = getattr(entries, "close", None)
    if close is not None:
        close()


def _logged(action: Callable[..., object], *args: Any) -> None:
    try:
        action(*args)
    except Exception:
        log.exception("background action %s%r failed", getattr(action, "__name__", action),
                      args)


def _delete_objects(offload: OffloadService, ledger_id: int, info: OffloadInfo) -> None:
    try:
        count = offload.delete_objects(ledger_id, info)
    except Exception:
        log.exception("deleting the S3 objects of deleted ledger %d failed; the orphan "
                      "sweep at the next start retries", ledger_id,
                      extra={"ledger_id": ledger_id})
    else:
        log.info("S3 objects of deleted ledger deleted",
                 extra={"ledger_id": ledger_id, "objects": count})
