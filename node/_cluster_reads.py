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
import dataclasses
import logging
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import crc32c

from cluster import (
    BookieClient,
    EntryFound,
    IdleWriter,
    LacIs,
    LacQuorum,
    LedgerMetadata,
    LedgerState,
    LedgerWriter,
    NoEntry,
    ReadEntry,
    ReadLac,
    counts_as_replica,
    read_candidates,
    write_set,
)
from common.errors import (
    BookieUnreachable,
    LedgerdError,
    MetadataUnavailable,
    NoSuchEntry,
    NotReady,
)
from ledger import Entry, OffloadInfo, OffloadState, TierPosition
from offload import RemoteLedgerReader

from ._bridge import blocking
from ._cluster_forward import ForwardClient
from ._cluster_membership import Membership
from ._cluster_metadata import LedgerMetadataView

log = logging.getLogger("ledgerd.cluster")

HEDGE_S = 0.3
LAC_TIMEOUT_S = 5.0
REPORTED_ENDS_MAX = 65_536


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


def _closed(md: LedgerMetadata, revision: int) -> LedgerView:
    assert md.last_entry_id is not None
    return LedgerView(md, revision, md.last_entry_id, md.length)


class ReportedEnds:
    """The highest end this node reported per ledger, for the most recent
    ``capacity`` ledgers read: an answer never goes below one given before."""

    def __init__(self, capacity: int = REPORTED_ENDS_MAX) -> None:
        self._capacity = capacity
        self._ends: OrderedDict[int, int] = OrderedDict()

    def get(self, ledger_id: int, default: int) -> int:
        return self._ends.get(ledger_id, default)

    def raise_to(self, ledger_id: int, end: int) -> None:
        if end > self._ends.get(ledger_id, -1):
            self._ends[ledger_id] = end
        if ledger_id in self._ends:
            self._ends.move_to_end(ledger_id)
        while len(self._ends) > self._capacity:
            self._ends.popitem(last=False)


def offload_info(md: LedgerMetadata) -> OffloadInfo:
    return OffloadInfo() if not md.offload else OffloadInfo.from_doc(md.offload)


_NO_TIER = TierPosition()
_TIER_FIELDS = tuple(f.name for f in dataclasses.fields(TierPosition))


def tier_of(md: LedgerMetadata) -> TierPosition:
    """How far the ledger was tiered while open (TIER_OPEN_LEDGERS)."""
    if md.tier is None:
        return _NO_TIER
    return TierPosition(**dict(zip(_TIER_FIELDS, md.tier["position"], strict=True)))


def tier_owner(md: LedgerMetadata) -> str | None:
    """The node whose key prefix holds the ledger's tiered chunks, if any."""
    return None if md.tier is None else str(md.tier["bookie_id"])


def tier_doc(bookie_id: str, position: TierPosition) -> dict[str, object]:
    return {"bookie_id": bookie_id, "position": list(dataclasses.astuple(position))}


class ClusterReads:
    def __init__(self, *, me: str, metadata: LedgerMetadataView, membership: Membership,
                 bookies: BookieClient, forward: ForwardClient,
                 writer_of: Callable[[int], LedgerWriter | IdleWriter | None],
                 remote: RemoteLedgerReader | None) -> None:
        self._me = me
        self._metadata = metadata
        self._membership = membership
        self._bookies = bookies
        self._forward = forward
        self._writer_of = writer_of
        self._remote = remote
        self._reported = ReportedEnds()

    async def view(self, ledger_id: int, *, forwarded: bool = False,
                   need_length: bool = False, need_state: bool = False) -> LedgerView:
        """The ledger's readable end now: never below an end any node reported before
        this call began (§8.1); ``NotReady`` when this node cannot establish it.
        With ``need_state`` the caller reports the ledger's state too: ``NotReady``
        unless the metadata was read from etcd now or the writer answered, since a
        cached OPEN may be a ledger closed meanwhile."""
        view = await self._view(ledger_id, forwarded=forwarded, need_length=need_length,
                                need_state=need_state)
        floor = self._reported.get(ledger_id, -1)
        if view.lac < floor:
            # Only a race gets here (an end learnt after we read ours): ours is older.
            log.info("ledger %d: read end %d below the %d this node reported; reporting "
                     "that", ledger_id, view.lac, floor)
            length = await self._length_at(view.metadata, floor) if need_length else None
            view = LedgerView(view.metadata, view.revision, floor, length)
        self._reported.raise_to(ledger_id, view.lac)
        return view

    async def _view(self, ledger_id: int, *, forwarded: bool, need_length: bool,
                    need_state: bool) -> LedgerView:
        writer = self._writer_of(ledger_id)
        if writer is not None and self._membership.lease_ok:
            # Without the lease another node may have taken the ledger over and
            # recovered past this writer's LAC: then only the metadata can say.
            return LedgerView(writer.metadata, writer.revision, writer.lac, writer.lac_length)
        md, revision = await self._metadata.read(ledger_id)
        if md.state is LedgerState.CLOSED:
            return _closed(md, revision)
        node = md.writer.node
        url = self._membership.url_of(node)
        if node != self._me and self._membership.is_live(node) and not forwarded and url:
            try:
                info = await self._forward.ledger_call(url, ledger_id, "ledger")
            except (BookieUnreachable, NotReady) as exc:
                log.info("the writer of ledger %d did not answer (%s): its end from its "
                         "bookies", ledger_id, exc)
            else:
                assert info is not None
                if info.state.value == "CLOSED":
                    # The writer closed it: its end is final, whatever the cache says.
                    closed = dataclasses.replace(md, state=LedgerState.CLOSED,
                                                 last_entry_id=info.last_add_confirmed,
                                                 length=info.length)
                    return _closed(closed, revision)
                return LedgerView(md, revision, info.last_add_confirmed, info.length)
        # The writer is gone, silent or this node: the cached metadata may miss a close
        # or a takeover, so read it fresh.  With etcd away, the cached copy: a close
        # made meanwhile through a node that still reaches etcd ended where the
        # bookies say, or recovery wrote past it, which the probe below finds.
        fresh = False
        with contextlib.suppress(MetadataUnavailable):
            md, revision = await self._metadata.read(ledger_id, fresh=True)
            fresh = True
        if md.state is LedgerState.CLOSED:
            return _closed(md, revision)
        if need_state and not fresh:
            # The writer may have closed it through a node that reaches etcd: the
            # end below would still be right, the state OPEN not (the partition
            # suite's closed-is-final, once etcd calls failed within its patience).
            raise NotReady(f"ledger {ledger_id}: its writer did not answer and this node "
                           "cannot read its metadata now, so whether it is still open is "
                           "not known here; retry")
        lac, fenced_epoch = await self._bookies_end(md)
        if fenced_epoch > md.epoch and not fresh:
            # A takeover (and maybe a close) happened that the cached metadata does
            # not show, and etcd cannot be asked: its state and end are unknown here.
            raise NotReady(f"ledger {ledger_id}: taken over at epoch {fenced_epoch}, and "
                           "this node cannot read its metadata now; retry")
        await self._check_nothing_past(md, lac)
        length = await self._length_at(md, lac) if need_length else None
        return LedgerView(md, revision, lac, length)

    async def _check_nothing_past(self, md: LedgerMetadata, lac: int) -> None:
        """Raise ``NotReady`` unless entry ``lac + 1`` is known not acknowledged: the
        bookies' LAC lags the writer's by the adds in flight, and a writer that is
        alive but out of reach may have acknowledged more (§8.1).  Absent from
        Qw - Qa + 1 of its write set, it cannot have reached Qa."""
        entry_id = lac + 1
        members = write_set(md.fragment_of(entry_id), entry_id, md.write_quorum)
        needed = md.write_quorum - md.ack_quorum + 1
        probes = [asyncio.ensure_future(self._holds(md, b, entry_id)) for b in members]
        absent = 0
        try:
            for next_done in asyncio.as_completed(probes, timeout=LAC_TIMEOUT_S):
                held = await next_done
                if held:
                    break
                if held is False:
                    absent += 1
                    if absent >= needed:
                        return
        except TimeoutError:
            pass
        finally:
            for probe in probes:
                probe.cancel()
        raise NotReady(f"ledger {md.ledger_id}: its writer is out of reach and its "
                       f"bookies cannot tell whether entry {entry_id} is acknowledged; retry")

    async def _holds(self, md: LedgerMetadata, bookie: str, entry_id: int) -> bool | None:
        """Whether ``bookie`` holds a valid copy of ``entry_id``; None: no answer."""
        try:
            reply = await self._bookies.call(bookie, ReadEntry(md.ledger_id, entry_id))
        except LedgerdError:
            return None
        if isinstance(reply, EntryFound):
            return counts_as_replica(md, entry_id, reply.epoch)
        return False if isinstance(reply, NoEntry) else None

    async def _bookies_end(self, md: LedgerMetadata) -> tuple[int, int]:
        """The LAC from ``ReadLac`` answers covering the last fragment (§8), and the
        highest epoch those bookies are fenced at."""
        quorum = LacQuorum(md)
        done = quorum.result()
        if done is not None:
            return done, 0
        fenced = 0
        calls = [asyncio.ensure_future(self._lac_of(b, md.ledger_id))
                 for b in md.last_fragment.bookies]
        try:
            for next_done in asyncio.as_completed(calls, timeout=LAC_TIMEOUT_S):
                with contextlib.suppress(LedgerdError):
                    bookie, answer = await next_done
                    quorum.add(bookie, answer.lac)
                    fenced = max(fenced, answer.fenced_epoch)
                    result = quorum.result()
                    if result is not None:
                        return result, fenced
        except TimeoutError:
            pass
        finally:
            for call in calls:
                call.cancel()
        raise NotReady(f"ledger {md.ledger_id}: too few bookies of its last fragment "
                       "answered to tell its last-add-confirmed; retry")

    async def _lac_of(self, bookie: str, ledger_id: int) -> tuple[str, LacIs]:
        reply = await self._bookies.call(bookie, ReadLac(ledger_id))
        if not isinstance(reply, LacIs):
            raise BookieUnreachable(f"bookie {bookie}: {reply}")
        return bookie, reply

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

