"""The bookie side of cluster mode: protocol requests served by this node's engine.

``ReplicaServer.serve(request)`` turns one ``cluster`` message (docs/cluster.md
§5) into the engine's replica call (``Bookie.replicas``, §12.1) and its outcome
into the protocol's reply; it answers a durable call only once the engine's
journal record is synced.  The ``/internal/v1/`` routes call it for other
nodes, and :class:`LocalBookieClient` calls it for this node's own machines
without HTTP.  Refusals the protocol has no word for (read-only, full,
broken) become ``Unavailable``; the writer replaces such a bookie.
"""

from __future__ import annotations

import logging

from cluster import (
    AddEntries,
    AddsOk,
    BookieReply,
    BookieRequest,
    CopiesOk,
    CopyEntries,
    CopyEntry,
    CopyOk,
    Deleted,
    DeleteReplica,
    EntriesHeld,
    EntriesRead,
    EntryFound,
    Fence,
    Fenced,
    FenceOk,
    LacIs,
    ListEntries,
    NoEntry,
    ReadEntries,
    ReadEntry,
    ReadLac,
    RecoveryRead,
    Unavailable,
    WriteLac,
)
from common.errors import InvariantViolation, LedgerdError, NoSuchEntry, ReplicaFenced
from ledger import Bookie, ReplicaEntry

from ._bridge import blocking, settle, settle_now

log = logging.getLogger("ledgerd.node")

LIST_LIMIT_MAX = 100_000


class ReplicaServer:
    def __init__(self, bookie: Bookie) -> None:
        self._replicas = bookie.replicas

    async def serve(self, request: BookieRequest) -> BookieReply:
        lid = request.ledger_id
        try:
            return await self._serve(request)
        except ReplicaFenced as exc:
            return Fenced(lid, exc.fenced_epoch, exc.lac)
        except InvariantViolation:
            log.exception("replica request %s failed", type(request).__name__)
            return Unavailable(lid, "internal error")
        except LedgerdError as exc:
            return Unavailable(lid, f"{type(exc).__name__}: {exc}")

    async def _add(self, request: AddEntries) -> BookieReply:
        """A writer's entries, stored as one journal record."""
        epoch = request.epoch
        entries = [ReplicaEntry(e.entry_id, epoch, e.payload, e.length_after)
                   for e in request.entries]
        # On the event loop, as a standalone add: a worker-thread hop per call
        # cost more than the store itself (anyio's queue and a thread wake-up).
        state = await settle_now(lambda block: self._replicas.add(
            request.ledger_id, entries, epoch=epoch, lac=request.lac, block=block))
        return AddsOk(request.ledger_id, epoch, state.lac,
                      tuple(e.entry_id for e in request.entries))

    def lac(self, ledger_id: int) -> tuple[int, int]:
        """The replica's LAC and the epoch it is fenced at."""
        state = self._replicas.state(ledger_id)
        return state.lac, state.fenced_epoch

    async def entries(self, ledger_id: int, first: int, last: int, limit: int,
                      ) -> list[tuple[int, int]]:
        return await blocking(self._replicas.entries, ledger_id, first, last,
                              limit=min(limit, LIST_LIMIT_MAX))

    async def _serve(self, request: BookieRequest) -> BookieReply:
        lid = request.ledger_id
        replicas = self._replicas
        if isinstance(request, AddEntries):
            return await self._add(request)
        if isinstance(request, ReadEntry):
            return await self._read(lid, request.entry_id)
        if isinstance(request, ReadLac):
            state = replicas.state(lid)
            return LacIs(lid, state.lac, state.fenced_epoch)
        if isinstance(request, WriteLac):
            return LacIs(lid, replicas.note_lac(lid, request.lac))
        if isinstance(request, Fence):
            state = await settle(replicas.fence, lid, request.epoch)
            return FenceOk(lid, request.epoch, state.lac)
        if isinstance(request, RecoveryRead):
            # Recovery reads fence, durably, before they answer (§7.2).
            await settle(replicas.fence, lid, request.epoch)
            return await self._read(lid, request.entry_id)
        if isinstance(request, CopyEntry):
            await settle(replicas.copy, lid, [ReplicaEntry(
                request.entry_id, request.epoch, request.payload, request.length_after)])
            return CopyOk(lid, request.entry_id)
        if isinstance(request, CopyEntries):
            # One journal record for the whole range (rule 4 for each entry).
            await settle(replicas.copy, lid, [ReplicaEntry(
                c.entry_id, c.epoch, c.payload, c.length_after) for c in request.entries])
            return CopiesOk(lid, tuple(c.entry_id for c in request.entries))
        if isinstance(request, ReadEntries):
            return await blocking(self._read_many, request)
        if isinstance(request, ListEntries):
            held = await self.entries(lid, request.first, request.last, LIST_LIMIT_MAX)
            return EntriesHeld(lid, tuple(held))
        if isinstance(request, DeleteReplica):
            await settle(replicas.delete, lid)
            return Deleted(lid)
        raise InvariantViolation(f"unknown request {request!r}")

    def _read_many(self, request: ReadEntries) -> EntriesRead:
        """Re-replication's range read, on one worker thread: each id held is read
        until ``bytes_max`` bytes of payload (at least one entry) are in hand."""
        lid = request.ledger_id
        found: list[EntryFound] = []
        absent: list[int] = []
        size = 0
        for entry_id in request.entry_ids:
            if found and size >= request.bytes_max:
                break  # the caller asks for the rest
            try:
                stored = self._replicas.read(lid, entry_id)
            except NoSuchEntry:
                absent.append(entry_id)
                continue
            size += len(stored.payload)
            found.append(EntryFound(lid, entry_id, stored.epoch, stored.payload,
                                    stored.length_after, stored.lac))
        return EntriesRead(lid, tuple(found), tuple(absent), self._replicas.state(lid).lac)

    async def _read(self, ledger_id: int, entry_id: int) -> BookieReply:
        try:
            stored = await blocking(self._replicas.read, ledger_id, entry_id)
        except NoSuchEntry:
            return NoEntry(ledger_id, entry_id, self._replicas.state(ledger_id).lac)
        return EntryFound(ledger_id, entry_id, stored.epoch, stored.payload,
                          stored.length_after, stored.lac)


class LocalBookieClient:
    """``BookieClient`` for this node's own bookie: no HTTP, the same rules."""

    def __init__(self, server: ReplicaServer) -> None:
        self._server = server

    async def call(self, bookie_id: str, request: BookieRequest) -> BookieReply:
        return await self._server.serve(request)
