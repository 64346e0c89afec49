"""The node's ledger API in cluster mode: ``node.ledgers`` backed by replication.

The same coroutines as standalone ``Ledgers`` (the routes cannot tell), on the
protocol of docs/cluster.md:

- a call about a ledger this node writes runs on its ``LedgerWriter``;
- a call about a ledger written by another live node is forwarded to it (one
  hop; a forwarded call never hops again);
- a call about a ledger whose writer is gone (not a member: dead, partitioned
  past its lease, or this node before a restart) takes it over first
  (``LedgerRecovery``: epoch + 1, fence, recover, resume) — §7;
- ``fence`` and ``close`` recover and close, and answer the ledger CLOSED;
- reads go through :class:`ClusterReads`, never past the LAC.

Where a write goes, and this node's writers, are :class:`Writers`' business.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import logging
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from typing import TypeVar

import anyio
import anyio.to_thread
import crc32c

from cluster import (
    PASSWORD_SCHEME_KEYED,
    DeleteReplica,
    Driver,
    Fragment,
    IdleWriter,
    LedgerClosedDone,
    LedgerMetadata,
    LedgerState,
    LedgerWriter,
    WriterRef,
    with_shared_parts,
)
from common.errors import (
    BadRequest,
    BookieUnreachable,
    InvariantViolation,
    LedgerClosed,
    LedgerdError,
    MetadataConflict,
    MetadataUnavailable,
    NoSuchLedger,
    NotConfigured,
    NotEnoughBookies,
    NotHandedOver,
    NotReady,
)
from ledger import (
    Batch,
    BatchAddResult,
    Entry,
    LedgerFilter,
    LedgerInfo,
    LedgerLimits,
    OffloadInfo,
    Pending,
)
from ledger import (
    LedgerState as InfoState,
)

from ._cluster_forward import ForwardedAdds
from ._cluster_reads import ClusterReads, LedgerView, offload_info, tier_of
from ._cluster_runtime import ClusterRuntime
from ._cluster_writers import Remote, Writers

log = logging.getLogger("ledgerd.cluster")

ROUTE_ATTEMPTS_MAX = 4
R = TypeVar("R")
# A client add not acknowledged in this long is answered 503: its outcome is
# unknown, and a retry with ?entry_id=N settles it exactly once.
ADD_WAIT_S_MAX = 30.0
LIST_CONCURRENCY = 16
# Ledgers a filtered listing looks at per page at most (see list_ledgers).
FILTERED_SCAN_MAX = 20_000
FETCH_WINDOW = 16


class ClusterLedgers:
    def __init__(self, rt: ClusterRuntime, *, limits: LedgerLimits) -> None:
        self._rt = rt
        self._limits = limits
        self.writers = Writers(rt)
        self.reads = ClusterReads(me=rt.me, metadata=rt.metadata, membership=rt.membership,
                                  bookies=rt.bookies, forward=rt.forward,
                                  writer_of=self.writers.held, remote=rt.remote)
        self.writers.reads = self.reads
        self._forwarded = ForwardedAdds(rt.forward, limits, rt.spawn)
        # Append streams: the last run submitted per ledger (see submit).
        self._submitted: dict[int, asyncio.Future[None]] = {}

    def writer_of(self, ledger_id: int) -> LedgerWriter | IdleWriter | None:
        """This node's writer of the ledger (or its idle state, not woken)."""
        return self.writers.held(ledger_id)

    async def resume_abandoned(self, ledger_id: int) -> None:
        await self.writers.resume_abandoned(ledger_id)

    # --- ledgers ------------------------------------------------------------------

    async def create(self, *, password: str, metadata: Mapping[str, str],
                     ensemble_size: int | None = None, write_quorum: int | None = None,
                     ack_quorum: int | None = None,
                     limiter: anyio.CapacityLimiter | None = None) -> LedgerInfo:
        """A new OPEN ledger in etcd.  Its password digest is keyed with the
        cluster's password key, a microsecond on the event loop (``limiter``,
        which bounded the threads of scrypt hashes, is no longer needed)."""
        settings = self._rt.settings
        e = settings.ensemble_size if ensemble_size is None else ensemble_size
        qw = settings.write_quorum if write_quorum is None else write_quorum
        qa = settings.ack_quorum if ack_quorum is None else ack_quorum
        if not e >= qw >= qa >= 1:
            raise BadRequest(f"need ensemble_size >= write_quorum >= ack_quorum >= 1, got "
                             f"{e}, {qw}, {qa}")
        self._limits.check_create(password, metadata)
        self.writers.check_lease()
        membership = self._rt.membership
        lease = membership.lease_id
        writable = membership.writable_bookies()
        if len(writable) < e:
            raise NotEnoughBookies(f"an ensemble of {e} needs {e} writable bookies; "
                                   f"{len(writable)} are registered")
        ensemble = tuple(writable[:e])
        hashed = self.writers.hash_password(password)
        ledger_id = await self._rt.store.allocate_ledger_id()
        md = with_shared_parts(LedgerMetadata(
            ledger_id=ledger_id, state=LedgerState.OPEN, ensemble_size=e, write_quorum=qw,
            ack_quorum=qa, ensembles=(Fragment(0, ensemble, 1),),
            writer=WriterRef(self._rt.me, 1), password_salt=hashed.salt,
            password_hash=hashed.digest, password_scheme=PASSWORD_SCHEME_KEYED,
            metadata=dict(metadata),
            created_at=time.time()))
        revision = await self._rt.store.create(md)
        if revision is None:
            raise InvariantViolation(f"ledger id {ledger_id} from etcd was taken already")
        self._rt.metadata.remember(md, revision)
        membership.note_chosen(list(ensemble))
        if membership.lease_id != lease or not membership.lease_ok:
            # The lease lapsed while etcd created it (§6.6): a writer made now would
            # outlive the lease it was made under.  The ledger exists; its first add
            # takes it over at epoch 2 under the current lease.
            log.warning("ledger created as the lease lapsed: no writer kept",
                        extra={"ledger_id": ledger_id})
            return info_of(LedgerView(md, revision, -1, 0))
        writer = LedgerWriter(node_id=self._rt.me, metadata=md, revision=revision,
                              clock=self._rt.clock, membership=membership, next_entry_id=0,
                              lac=-1, length=0, add_timeout_s=settings.add_timeout_s,
                              wall_clock=self._rt.wall_clock)
        self.writers.add_new(writer, password)
        log.debug("ledger created", extra={"ledger_id": ledger_id, "ensemble": ensemble,
                                          "quorums": (e, qw, qa)})
        return info_of(LedgerView(md, revision, -1, 0))

    async def get(self, ledger_id: int, *, forwarded: bool = False) -> LedgerInfo:
        return info_of(await self.reads.view(ledger_id, forwarded=forwarded,
                                             need_length=True, need_state=True))

    async def readable_end(self, ledger_id: int) -> int:
        """The last entry id a read may return now (§8.1): known where the state is
        not, when neither etcd nor the writer answers."""
        return (await self.reads.view(ledger_id)).lac

    async def list_ledgers(self, *, state: InfoState | None, after: int | None,
                           limit: int, where: LedgerFilter | None = None,
                           ) -> tuple[list[LedgerInfo], int | None]:
        """A page in id order; like the engine's (``Bookie.list_ledgers``), a
        filter narrower than the state looks at ``FILTERED_SCAN_MAX`` ledgers at
        most and may answer a short page that is not the last."""
        if limit <= 0:
            raise BadRequest("limit must be positive")
        if where is None:
            where = LedgerFilter(state=state)
        elif state is not None:
            where = dataclasses.replace(where, state=state)
        scan_max = FILTERED_SCAN_MAX if where.narrows else None
        found: list[LedgerMetadata] = []
        scanned = 0
        cursor = after
        try:
            async for md, _revision in self._rt.store.list_ledgers(after=after):
                if scan_max is not None and scanned >= scan_max:
                    break  # more to look at, maybe nothing more to find
                scanned += 1
                cursor = md.ledger_id
                if _listed(md, where):
                    found.append(md)
                    if len(found) > limit:
                        break
        except MetadataUnavailable:
            # etcd is away: the watched cache is what etcd held (nothing changes).
            found = [md for md, _ in self._rt.metadata.cached()
                     if (after is None or md.ledger_id > after) and _listed(md, where)]
            found = found[:limit + 1]
        if scan_max is not None and scanned >= scan_max and len(found) <= limit:
            return await self._infos(found), cursor
        page = found[:limit]
        return await self._infos(page), (page[-1].ledger_id if len(found) > limit else None)

    async def _infos(self, page: list[LedgerMetadata]) -> list[LedgerInfo]:
        """Each listed ledger's info, a few at a time (a deleted one is left out)."""
        gate = asyncio.Semaphore(LIST_CONCURRENCY)

        async def info(md: LedgerMetadata) -> LedgerInfo | None:
            async with gate:
                try:
                    return await self.get(md.ledger_id)
                except NoSuchLedger:
                    return None  # deleted since the listing
        return [i for i in await asyncio.gather(*(info(md) for md in page)) if i is not None]

    async def fence(self, ledger_id: int, *, password: str,
                    forwarded: bool = False) -> LedgerInfo:
        """Recovery and close (BookKeeper's recovery open): answers the ledger CLOSED."""
        return await self.close(ledger_id, password=password, forwarded=forwarded)

    async def close(self, ledger_id: int, *, password: str,
                    forwarded: bool = False) -> LedgerInfo:
        for _ in range(ROUTE_ATTEMPTS_MAX):
            target = await self.writers.route(ledger_id, password, forwarded, takeover=False)
            if isinstance(target, Remote):
                info = await self._rt.forward.ledger_call(target.url, ledger_id, "close",
                                                          password=password)
                assert info is not None
                return info
            if isinstance(target, LedgerMetadata):
                if target.state is LedgerState.CLOSED:
                    return info_of_closed(target)
                done = await self.writers.recover(target, close=True)
                if isinstance(done, LedgerClosedDone):
                    return info_of_closed(done.metadata)
                continue
            md = await self.writers.close_writer(ledger_id, target)
            if md is not None:
                return info_of_closed(md)
        raise MetadataConflict(f"ledger {ledger_id}: its writer kept changing; retry")

    async def delete(self, ledger_id: int, *, password: str, forwarded: bool = False) -> None:
        """Delete the metadata first (404 from then on), then every replica and the S3
        objects in the background (docs/cluster.md §10)."""
        writer = self.writer_of(ledger_id)
        if writer is None:
            md, _ = await self._rt.metadata.read(ledger_id, fresh=True)
            await self.writers.check_password(md, password)
            node = md.writer.node
            url = self._rt.membership.url_of(node)
            if (node != self._rt.me and self._rt.membership.is_live(node) and url
                    and not forwarded and md.state is not LedgerState.CLOSED):
                await self._rt.forward.ledger_call(url, ledger_id, "delete", password=password)
                return
        else:
            await self.writers.check_password(writer.metadata, password)
        for _ in range(ROUTE_ATTEMPTS_MAX):
            md, revision = await self._rt.metadata.read(ledger_id, fresh=True)
            if await self._rt.store.delete(ledger_id, revision):
                break
        else:
            raise MetadataConflict(f"ledger {ledger_id} kept changing while being deleted")
        self.writers.stop(ledger_id, NoSuchLedger(ledger_id))
        self._rt.spawn(self._delete_everywhere(md))
        log.info("ledger deleted", extra={"ledger_id": ledger_id})

    async def _delete_everywhere(self, md: LedgerMetadata) -> None:
        bookies = {b for fragment in md.ensembles for b in fragment.bookies}
        for bookie in sorted(bookies):
            # A bookie that is away drops the replica in its orphan sweep (§10).
            with contextlib.suppress(BookieUnreachable):
                await self._rt.bookies.call(bookie, DeleteReplica(md.ledger_id))
        if self._rt.offload is not None:
            await self._rt.offload.ledger_deleted(md)

    # --- entries --------------------------------------------------------------------

    async def append(self, ledger_id: int, payloads: Sequence[bytes], *, password: str,
                     expected_first_entry_id: int | None = None, forwarded: bool = False,
                     on_assigned: Callable[[], None] | None = None) -> BatchAddResult:
        """One batch (a single add is a batch of one): every entry is acknowledged,
        or the call fails (its writer failing meanwhile, a prefix of it may be in
        the ledger: a retry with ``expected_first_entry_id`` completes it exactly
        once).  Single adds forwarded to another writer are coalesced there
        (``ForwardedAdds``)."""
        self._limits.check_batch(payloads)
        return await self._routed_add(
            ledger_id, password, forwarded,
            remote=lambda url: self._forward_batch(url, ledger_id, payloads, password,
                                                   expected_first_entry_id),
            local=lambda writer: self._append_batch(writer, payloads, expected_first_entry_id,
                                                    on_assigned))

    async def _forward_batch(self, url: str, ledger_id: int, payloads: Sequence[bytes],
                             password: str, expected_first: int | None) -> BatchAddResult:
        if expected_first is None and len(payloads) == 1:
            return await self._forwarded.add(url, ledger_id, payloads[0], password=password)
        return await self._rt.forward.append(url, ledger_id, payloads, password=password,
                                             expected_first_entry_id=expected_first)

    async def _append_batch(self, writer: Driver, payloads: Sequence[bytes],
                            expected_first: int | None,
                            on_assigned: Callable[[], None] | None) -> BatchAddResult:
        """One batch through the writers' one entry point (``Writers.append``)."""
        results: list[BatchAddResult] = []
        await self.writers.append(writer, [(expected_first, payloads)],
                                  answer=lambda _index, result: results.append(result),
                                  on_assigned=on_assigned)
        return results[0]

    async def _routed_add(self, ledger_id: int, password: str, forwarded: bool, *,
                          remote: Callable[[str], Awaitable[R]],
                          local: Callable[[Driver], Awaitable[R]]) -> R:
        """An add at the ledger's writer: forwarded to it, or made here (taking the
        ledger over if its writer is gone); routed again if it changed meanwhile."""
        for _ in range(ROUTE_ATTEMPTS_MAX):
            target = await self.writers.route(ledger_id, password, forwarded, takeover=True)
            if isinstance(target, Remote):
                return await remote(target.url)
            if isinstance(target, LedgerMetadata):
                raise LedgerClosed(f"ledger {ledger_id} is closed")
            try:
                return await local(target)
            except NotHandedOver:
                if self.writer_of(ledger_id) is not None:
                    raise
                continue  # taken over before the add reached the writer: route again
        raise MetadataConflict(f"ledger {ledger_id}: its writer kept changing; retry")

    # --- append streams -----------------------------------------------------------

    async def authorize(self, ledger_id: int, *, password: str,
                        limiter: anyio.CapacityLimiter | None = None) -> LedgerInfo:
        """The ledger once ``password`` is known to be its password (scrypt, if
        it is needed, on a worker thread of ``limiter``)."""
        writer = self.writer_of(ledger_id)
        md = writer.metadata if writer is not None else (
            await self._rt.metadata.read(ledger_id))[0]
        await self.writers.check_password(md, password, limiter=limiter)
        return info_of(LedgerView(md, 0, -1, 0))

    def password_verified(self, ledger_id: int, *, password: str) -> bool:
        """Whether ``password`` was verified for the ledger before (no scrypt);
        False: only :meth:`authorize` can tell."""
        return self.writers.password_verified(ledger_id, password)

    def check_writable(self) -> None:
        """NotReady while this node holds no membership lease (it acknowledges no add)."""
        self.writers.check_lease()

    def submit(self, ledger_id: int, batches: Sequence[Batch], *, password: str,
               block: bool) -> list[Pending[BatchAddResult]]:
        """Queue a stream's consecutive batches ``(expected_first_entry_id,
        payloads)`` as one run: a task of this node, started once the previous run
        of the ledger has its ids (so runs land in the order submitted; through a
        node that forwards, one batch at a time), that fails if that one failed.
        On this node's writer the run's batches leave together, one call per
        bookie.  Each batch is answered as it lands; a batch that fails fails
        the ones after it."""
        batches = batches[:self._within_limits(batches)]
        previous = self._submitted.get(ledger_id)
        loop = asyncio.get_running_loop()
        assigned: asyncio.Future[None] = loop.create_future()
        self._submitted[ledger_id] = assigned
        outcomes: list[concurrent.futures.Future[BatchAddResult]] = [
            concurrent.futures.Future() for _ in batches]

        def answer(index: int, result: BatchAddResult) -> None:
            outcomes[index].set_result(result)

        def mark_assigned() -> None:
            if not assigned.done():
                assigned.set_result(None)

        async def run() -> None:
            try:
                if previous is not None:
                    await asyncio.shield(previous)
                await self._routed_add(
                    ledger_id, password, False,
                    remote=lambda url: self._forward_run(url, ledger_id, batches, password,
                                                         answer),
                    local=lambda writer: self.writers.append(
                        writer, batches, answer=answer, on_assigned=mark_assigned))
            except BaseException as exc:
                if not assigned.done():
                    assigned.set_exception(exc if isinstance(exc, Exception)
                                           else NotReady("stopped"))
                    assigned.exception()  # retrieved: the next run fails with it
                for outcome in outcomes:
                    if not outcome.done():
                        outcome.set_exception(exc)
                raise
            else:
                mark_assigned()
            finally:
                if self._submitted.get(ledger_id) is assigned:
                    del self._submitted[ledger_id]
        self._rt.spawn(run())
        return [Pending(outcome, outcome.result) for outcome in outcomes]

    def _within_limits(self, batches: Sequence[Batch]) -> int:
        """How many batches lead ``batches`` within the limits, at least one: the
        first one's error is raised (as the engine's ``append`` does, so a
        stream refuses the very message that is over them)."""
        for count, (_expected, payloads) in enumerate(batches):
            try:
                self._limits.check_batch(payloads)
            except LedgerdError:
                if count == 0:
                    raise
                return count
        return len(batches)

    async def _forward_run(self, url: str, ledger_id: int,
                           batches: Sequence[Batch],
                           password: str, answer: Callable[[int, BatchAddResult], None],
                           ) -> None:
        for index, (expected, payloads) in enumerate(batches):
            answer(index, await self._rt.forward.append(
                url, ledger_id, payloads, password=password,
                expected_first_entry_id=expected))

    async def read_entry(self, ledger_id: int, entry_id: int) -> tuple[Entry, int]:
        return await self.reads.read_entry(ledger_id, entry_id)

    async def read_range(self, ledger_id: int, start: int, last: int, *,
                         count_max: int | None, bytes_max: int,
                         batch_count_max: int = 64) -> AsyncGenerator[list[Entry], None]:
        view = await self.reads.view(ledger_id)
        last = min(last, view.lac)
        if count_max is not None:
            last = min(last, start + count_max - 1)
        entry_id = start
        while entry_id <= last:
            batch: list[Entry] = []
            size = 0
            while entry_id <= last and len(batch) < batch_count_max and size < bytes_max:
                window = min(FETCH_WINDOW, batch_count_max - len(batch), last - entry_id + 1)
                ids = range(entry_id, entry_id + window)
                found = await asyncio.gather(*(self.reads.fetch(view.metadata, i)
                                               for i in ids))
                for i, entry in zip(ids, found, strict=True):
                    batch.append(Entry(ledger_id=ledger_id, entry_id=i,
                                       payload=entry.payload,
                                       crc32c=crc32c.crc32c(entry.payload)))
                    size += len(entry.payload)
                    entry_id = i + 1
                    if size >= bytes_max:
                        break
            yield batch

    # --- offload ----------------------------------------------------------------------

    async def request_offload(self, ledger_id: int) -> OffloadInfo:
        offload = self._rt.offload
        md, _ = await self._rt.metadata.read(ledger_id)
        if offload is None:
            raise NotConfigured("offload is not configured (set S3_BUCKET)")
        return await offload.request(md)

    async def offload_status(self, ledger_id: int,
                             ) -> tuple[LedgerInfo, tuple[int, int] | None]:
        """The ledger (its offload state; cluster mode tiers no open ledger) and,
        while this node runs its offload, (bytes done, bytes total)."""
        md, _ = await self._rt.metadata.read(ledger_id)
        progress = None if self._rt.offload is None else self._rt.offload.progress(ledger_id)
        return info_of(LedgerView(md, 0, -1, 0)), progress


def _listed(md: LedgerMetadata, where: LedgerFilter) -> bool:
    named = InfoState.CLOSED if md.state is LedgerState.CLOSED else InfoState.OPEN
    return where.matches(named, offload_info(md).state, md.metadata)


def info_of(view: LedgerView) -> LedgerInfo:
    md = view.metadata
    state = InfoState.CLOSED if md.state is LedgerState.CLOSED else InfoState.OPEN
    return LedgerInfo(ledger_id=md.ledger_id, state=state, last_add_confirmed=view.lac,
                      length=view.length or 0, entries=view.lac + 1, created_at=md.created_at,
                      closed_at=md.closed_at, metadata=dict(md.metadata),
                      offload=offload_info(md), tier=tier_of(md))


def info_of_closed(md: LedgerMetadata) -> LedgerInfo:
    assert md.last_entry_id is not None
    return info_of(LedgerView(md, 0, md.last_entry_id, md.length))

