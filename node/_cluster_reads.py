"""Reads in cluster mode (docs/cluster.md §8): how far, and from where.

The readable end of a ledger is its writer's LAC: this node's own writer, else the
writer node asked (one hop), else — the writer gone or silent — the LAC read
from a covering set of the last fragment's bookies (``LacQuorum``); a CLOSED
ledger ends at ``last_entry_id``.  No read goes past it.  An entry is read from
its write set, this node's replica first; a replica that fails, lacks it or holds
it at an epoch below its fragment's is skipped, and a replica slower than
``HEDGE_S`` gets company from the next.  An offloaded ledger whose replicas are
gone is read from S3.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass

import crc32c

from cluster import (
    EntryFound,
    LacIs,
    LacQuorum,
    LedgerMetadata,
    LedgerState,
    LedgerWriter,
    ReadEntry,
    ReadLac,
    counts_as_replica,
    read_candidates,
)
from common.errors import (
    BookieUnreachable,
    LedgerdError,
    MetadataUnavailable,
    NoSuchEntry,
    NotReady,
)
from ledger import Entry, OffloadInfo, OffloadState
from offload import RemoteLedgerReader

from ._bridge import blocking
from ._cluster_driver import BookieCalls
from ._cluster_forward import ForwardClient
from ._cluster_membership import Membership
from ._cluster_metadata import LedgerMetadataView

log = logging.getLogger("ledgerd.cluster")

HEDGE_S = 0.3
LAC_TIMEOUT_S = 5.0


@dataclass(frozen=True, slots=True)
class LedgerView:
    """What a node may say about a ledger now: its metadata, readable end, length."""

    metadata: LedgerMetadata
    revision: int
    lac: int
    length: int | None  # None: not known without reading the LAC entry


@dataclass(frozen=True, slots=True)
class FoundEntry:
    payload: bytes
    length_after: int | None  # None when read from S3


def offload_info(md: LedgerMetadata) -> OffloadInfo:
    raw = md.offload
    if not raw:
        return OffloadInfo()
    return OffloadInfo(
        state=OffloadState(raw.get("state", "NONE")), bucket=raw.get("bucket"),
        key_prefix=raw.get("key_prefix"), segment_bytes=int(raw.get("segment_bytes") or 0),
        offloaded_at=raw.get("offloaded_at"), local_deleted=bool(raw.get("local_deleted")),
        error=raw.get("error"))


class ClusterReads:
    def __init__(self, *, me: str, metadata: LedgerMetadataView, membership: Membership,
                 bookies: BookieCalls, forward: ForwardClient,
                 writer_of: Callable[[int], LedgerWriter | None],
                 remote: RemoteLedgerReader | None) -> None:
        self._me = me
        self._metadata = metadata
        self._membership = membership
        self._bookies = bookies
        self._forward = forward
        self._writer_of = writer_of
        self._remote = remote

    async def view(self, ledger_id: int, *, forwarded: bool = False,
                   need_length: bool = False) -> LedgerView:
        writer = self._writer_of(ledger_id)
        if writer is not None:
            return LedgerView(writer.metadata, writer.revision, writer.lac, writer.lac_length)
        md, revision = await self._metadata.read(ledger_id)
        if md.state is LedgerState.CLOSED:
            assert md.last_entry_id is not None
            return LedgerView(md, revision, md.last_entry_id, md.length)
        node = md.writer.node
        url = self._membership.url_of(node)
        if node != self._me and self._membership.is_live(node) and not forwarded and url:
            try:
                info = await self._forward.ledger_call(url, ledger_id, "ledger")
            except (BookieUnreachable, NotReady) as exc:
                log.info("the writer of ledger %d did not answer (%s): LAC from a quorum",
                         ledger_id, exc)
            else:
                assert info is not None
                if info.state.value == "CLOSED":
                    return await self.view(ledger_id, forwarded=True, need_length=need_length)
                return LedgerView(md, revision, info.last_add_confirmed, info.length)
        lac = await self.lac_quorum(md)
        length = await self._length_at(md, lac) if need_length else None
        return LedgerView(md, revision, lac, length)

    async def lac_quorum(self, md: LedgerMetadata) -> int:
        """The LAC from ``ReadLac`` answers covering the last fragment (§8)."""
        quorum = LacQuorum(md)
        done = quorum.result()
        if done is not None:
            return done
        calls = [asyncio.ensure_future(self._lac_of(b, md.ledger_id))
                 for b in md.last_fragment.bookies]
        try:
            for next_done in asyncio.as_completed(calls, timeout=LAC_TIMEOUT_S):
                with contextlib.suppress(LedgerdError):
                    bookie, lac = await next_done
                    quorum.add(bookie, lac)
                    result = quorum.result()
                    if result is not None:
                        return result
        except TimeoutError:
            pass
        finally:
            for call in calls:
                call.cancel()
        raise NotReady(f"ledger {md.ledger_id}: too few bookies of its last fragment "
                       "answered to tell its last-add-confirmed; retry")

    async def _lac_of(self, bookie: str, ledger_id: int) -> tuple[str, int]:
        reply = await self._bookies.call(bookie, ReadLac(ledger_id))
        if not isinstance(reply, LacIs):
            raise BookieUnreachable(f"bookie {bookie}: {reply}")
        return bookie, reply.lac

    async def _length_at(self, md: LedgerMetadata, lac: int) -> int:
        if lac < 0:
            return 0
        found = await self.fetch(md, lac)
        return found.length_after or 0

    async def read_entry(self, ledger_id: int, entry_id: int) -> tuple[Entry, int]:
        view = await self.view(ledger_id)
        if entry_id > view.lac:
            raise NoSuchEntry(ledger_id, entry_id)
        found = await self.fetch(view.metadata, entry_id)
        return Entry(ledger_id=ledger_id, entry_id=entry_id, payload=found.payload,
                     crc32c=crc32c.crc32c(found.payload)), view.lac

    async def fetch(self, md: LedgerMetadata, entry_id: int) -> FoundEntry:
        """Entry ``entry_id`` (at or below the readable end) from a valid replica, or
        from S3 once the ledger is offloaded and its replicas are gone."""
        found = await self._from_replicas(md, entry_id)
        if found is None:
            # The metadata may be older than an ensemble change or re-replication.
            with contextlib.suppress(MetadataUnavailable):
                fresh, _ = await self._metadata.read(md.ledger_id, fresh=True)
                if fresh != md:
                    found = await self._from_replicas(fresh, entry_id)
                md = fresh
        if found is None and self._remote is not None:
            info = offload_info(md)
            if info.state is OffloadState.OFFLOADED:
                payload, _crc = await blocking(self._remote.read_entry, md.ledger_id,
                                               entry_id, info)
                return FoundEntry(payload, None)
        if found is None:
            raise BookieUnreachable(f"ledger {md.ledger_id} entry {entry_id}: no replica of "
                                    "its write set answered with it; retry")
        return found

    async def _from_replicas(self, md: LedgerMetadata, entry_id: int) -> FoundEntry | None:
        candidates = list(read_candidates(md, entry_id, local=self._me))
        running: set[asyncio.Task[FoundEntry | None]] = set()
        try:
            while candidates or running:
                if candidates:
                    running.add(asyncio.ensure_future(
                        self._read_one(md, candidates.pop(0), entry_id)))
                done, running = await asyncio.wait(
                    running, timeout=HEDGE_S if candidates else None,
                    return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    found = task.result()
                    if found is not None:
                        return found
            return None
        finally:
            for task in running:
                task.cancel()

    async def _read_one(self, md: LedgerMetadata, bookie: str,
                        entry_id: int) -> FoundEntry | None:
        try:
            reply = await self._bookies.call(bookie, ReadEntry(md.ledger_id, entry_id))
        except BookieUnreachable:
            return None
        if isinstance(reply, EntryFound) and counts_as_replica(md, entry_id, reply.epoch):
            return FoundEntry(reply.payload, reply.length_after)
        return None

