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

Passwords are checked against the salted scrypt hash in the ledger's metadata
(a verified one is remembered in memory, as standalone does).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, Mapping, Sequence
from typing import Any

import crc32c

from cluster import (
    AddDone,
    AddOutcome,
    DeleteReplica,
    Effect,
    Fragment,
    LedgerClosedDone,
    LedgerMetadata,
    LedgerRecovery,
    LedgerState,
    LedgerWriter,
    Resumed,
    Stopped,
    WriterRef,
)
from common.errors import (
    BadRequest,
    BookieUnreachable,
    EntryConflict,
    InvariantViolation,
    LedgerClosed,
    LedgerdError,
    MetadataConflict,
    MetadataUnavailable,
    NoSuchLedger,
    NotConfigured,
    NotEnoughBookies,
    NotReady,
    Unauthorized,
    WriterSuperseded,
)
from ledger import (
    AddResult,
    BatchAddResult,
    Entry,
    LedgerInfo,
    LedgerLimits,
    OffloadInfo,
    PasswordHash,
    PasswordVerifier,
)
from ledger import (
    LedgerState as InfoState,
)

from ._bridge import blocking
from ._cluster_driver import Driver
from ._cluster_reads import ClusterReads, LedgerView, offload_info
from ._cluster_runtime import ClusterRuntime

log = logging.getLogger("ledgerd.cluster")

ROUTE_ATTEMPTS_MAX = 4
# A client add not acknowledged in this long is answered 503: its outcome is
# unknown, and a retry with ?entry_id=N settles it exactly once.
ADD_WAIT_S_MAX = 30.0
LIST_CONCURRENCY = 16
FETCH_WINDOW = 16


class _Remote:
    def __init__(self, url: str) -> None:
        self.url = url


class ClusterLedgers:
    def __init__(self, rt: ClusterRuntime, *, limits: LedgerLimits) -> None:
        self._rt = rt
        self._limits = limits
        self._writers: dict[int, Driver] = {}
        self._recoveries: dict[int, asyncio.Future[Effect]] = {}
        self._closing: dict[int, asyncio.Future[LedgerMetadata]] = {}
        self._verifier = PasswordVerifier()
        self.reads = ClusterReads(me=rt.me, metadata=rt.metadata, membership=rt.membership,
                                  bookies=rt.bookies, forward=rt.forward,
                                  writer_of=self.writer_of, remote=rt.remote)
        # The offload policy after a close, set by the node (OFFLOAD_AFTER_CLOSE).
        self.on_closed: list[Any] = []

    # --- what this node writes ----------------------------------------------------

    def writer_of(self, ledger_id: int) -> LedgerWriter | None:
        driver = self._writers.get(ledger_id)
        machine = None if driver is None else driver.machine
        if isinstance(machine, LedgerWriter) and not machine.done and not machine.recovering:
            return machine
        return None

    def writing(self) -> list[int]:
        return sorted(i for i in self._writers if self.writer_of(i) is not None)

    def drop_all(self, error: LedgerdError) -> None:
        """Stop every writer and recovery (the lease is lost, or the node stops)."""
        for driver in list(self._writers.values()):
            machine = driver.machine
            if isinstance(machine, LedgerWriter):
                machine.stop(error)
                driver.drain()
            else:
                # A recovery has no stop of its own: it is abandoned where it stands
                # (the next takeover starts at a higher epoch and fences it).
                if isinstance(machine, LedgerRecovery) and machine.writer is not None:
                    machine.writer.stop(error)
                    driver.drain()
                driver.abandon()
        for ledger_id, waiter in list(self._recoveries.items()):
            if not waiter.done():
                waiter.set_result(Stopped(error))
            self._recoveries.pop(ledger_id, None)
        self._writers.clear()

    # --- ledgers ------------------------------------------------------------------

    async def create(self, *, password: str, metadata: Mapping[str, str],
                     ensemble_size: int | None = None, write_quorum: int | None = None,
                     ack_quorum: int | None = None) -> LedgerInfo:
        settings = self._rt.settings
        e = settings.ensemble_size if ensemble_size is None else ensemble_size
        qw = settings.write_quorum if write_quorum is None else write_quorum
        qa = settings.ack_quorum if ack_quorum is None else ack_quorum
        if not e >= qw >= qa >= 1:
            raise BadRequest(f"need ensemble_size >= write_quorum >= ack_quorum >= 1, got "
                             f"{e}, {qw}, {qa}")
        self._limits.check_create(password, metadata)
        self._check_lease()
        membership = self._rt.membership
        writable = membership.writable_bookies()
        if len(writable) < e:
            raise NotEnoughBookies(f"an ensemble of {e} needs {e} writable bookies; "
                                   f"{len(writable)} are registered")
        ensemble = tuple(writable[:e])
        hashed = await blocking(PasswordHash.create, password)
        ledger_id = await self._rt.store.allocate_ledger_id()
        md = LedgerMetadata(
            ledger_id=ledger_id, state=LedgerState.OPEN, ensemble_size=e, write_quorum=qw,
            ack_quorum=qa, ensembles=(Fragment(0, ensemble, 1),),
            writer=WriterRef(self._rt.me, 1), password_salt=hashed.salt.hex(),
            password_hash=hashed.digest.hex(), metadata=dict(metadata),
            created_at=time.time())
        revision = await self._rt.store.create(md)
        if revision is None:
            raise InvariantViolation(f"ledger id {ledger_id} from etcd was taken already")
        membership.note_chosen(list(ensemble))
        self._verifier.remember(ledger_id, password)
        writer = LedgerWriter(node_id=self._rt.me, metadata=md, revision=revision,
                              clock=self._rt.clock, membership=membership, next_entry_id=0,
                              lac=-1, length=0, add_timeout_s=settings.add_timeout_s,
                              wall_clock=self._rt.wall_clock)
        self._writers[ledger_id] = self._rt.driver(writer, self._on_effect)
        log.info("ledger created", extra={"ledger_id": ledger_id, "ensemble": ensemble,
                                          "quorums": (e, qw, qa)})
        return info_of(LedgerView(md, revision, -1, 0))

    async def get(self, ledger_id: int, *, forwarded: bool = False) -> LedgerInfo:
        return info_of(await self.reads.view(ledger_id, forwarded=forwarded,
                                             need_length=True))

    async def list_ledgers(self, *, state: InfoState | None, after: int | None,
                           limit: int) -> tuple[list[LedgerInfo], int | None]:
        if limit <= 0:
            raise BadRequest("limit must be positive")
        found: list[LedgerMetadata] = []
        try:
            async for md, _revision in self._rt.store.list_ledgers(after=after):
                if _listed(md, state):
                    found.append(md)
                    if len(found) > limit:
                        break
        except MetadataUnavailable:
            # etcd is away: the watched cache is what etcd held (nothing changes).
            found = [md for md, _ in self._rt.metadata.cached()
                     if (after is None or md.ledger_id > after) and _listed(md, state)]
            found = found[:limit + 1]
        page = found[:limit]
        gate = asyncio.Semaphore(LIST_CONCURRENCY)

        async def info(md: LedgerMetadata) -> LedgerInfo | None:
            async with gate:
                try:
                    return await self.get(md.ledger_id)
                except NoSuchLedger:
                    return None  # deleted since the listing
        infos = [i for i in await asyncio.gather(*(info(md) for md in page)) if i is not None]
        return infos, (page[-1].ledger_id if len(found) > limit else None)

    async def fence(self, ledger_id: int, *, password: str,
                    forwarded: bool = False) -> LedgerInfo:
        """Recovery and close (BookKeeper's recovery open): answers the ledger CLOSED."""
        return await self.close(ledger_id, password=password, forwarded=forwarded)

    async def close(self, ledger_id: int, *, password: str,
                    forwarded: bool = False) -> LedgerInfo:
        for _ in range(ROUTE_ATTEMPTS_MAX):
            target = await self._route(ledger_id, password, forwarded, takeover=False)
            if isinstance(target, _Remote):
                info = await self._rt.forward.ledger_call(target.url, ledger_id, "close",
                                                          password=password)
                assert info is not None
                return info
            if isinstance(target, LedgerMetadata):
                if target.state is LedgerState.CLOSED:
                    return info_of_closed(target)
                done = await self._recover(target, close=True)
                if isinstance(done, LedgerClosedDone):
                    return info_of_closed(done.metadata)
                continue
            md = await self._close_writer(ledger_id, target)
            if md is not None:
                return info_of_closed(md)
        raise MetadataConflict(f"ledger {ledger_id}: its writer kept changing; retry")

    async def delete(self, ledger_id: int, *, password: str, forwarded: bool = False) -> None:
        """Delete the metadata first (404 from then on), then every replica and the S3
        objects in the background (docs/cluster.md §10)."""
        writer = self.writer_of(ledger_id)
        if writer is None:
            md, _ = await self._rt.metadata.read(ledger_id, fresh=True)
            await self._check_password(md, password)
            node = md.writer.node
            url = self._rt.membership.url_of(node)
            if (node != self._rt.me and self._rt.membership.is_live(node) and url
                    and not forwarded and md.state is not LedgerState.CLOSED):
                await self._rt.forward.ledger_call(url, ledger_id, "delete", password=password)
                return
        else:
            await self._check_password(writer.metadata, password)
        for _ in range(ROUTE_ATTEMPTS_MAX):
            md, revision = await self._rt.metadata.read(ledger_id, fresh=True)
            if await self._rt.store.delete(ledger_id, revision):
                break
        else:
            raise MetadataConflict(f"ledger {ledger_id} kept changing while being deleted")
        driver = self._writers.pop(ledger_id, None)
        if driver is not None and isinstance(driver.machine, LedgerWriter):
            driver.machine.stop(NoSuchLedger(ledger_id))
            driver.drain()
        self._verifier.forget(ledger_id)
        self._rt.spawn(self._delete_everywhere(md))
        log.info("ledger deleted", extra={"ledger_id": ledger_id})

    async def _delete_everywhere(self, md: LedgerMetadata) -> None:
        bookies = {b for fragment in md.ensembles for b in fragment.bookies}
        for bookie in sorted(bookies):
            # A bookie that is away drops the replica in its orphan sweep (§10).
            with contextlib.suppress(BookieUnreachable):
                await self._rt.bookies.call(bookie, DeleteReplica(md.ledger_id))
        offload = self._rt.offload
        if offload is not None and md.offload:
            await offload.delete_objects(md.ledger_id, offload_info(md).key_prefix)

    # --- entries --------------------------------------------------------------------

    async def add_entry(self, ledger_id: int, payload: bytes, *, password: str,
                        expected_entry_id: int | None = None,
                        forwarded: bool = False) -> AddResult:
        self._limits.check_entry(len(payload))
        for _ in range(ROUTE_ATTEMPTS_MAX):
            target = await self._route(ledger_id, password, forwarded, takeover=True)
            if isinstance(target, _Remote):
                return await self._rt.forward.add_entry(
                    target.url, ledger_id, payload, password=password,
                    expected_entry_id=expected_entry_id)
            if isinstance(target, LedgerMetadata):
                raise LedgerClosed(f"ledger {ledger_id} is closed")
            try:
                return await self._add_local(ledger_id, target, payload, expected_entry_id)
            except WriterSuperseded:
                if self.writer_of(ledger_id) is not None:
                    raise
                continue  # taken over meanwhile: route again
        raise MetadataConflict(f"ledger {ledger_id}: its writer kept changing; retry")

    async def add_entries(self, ledger_id: int, payloads: Sequence[bytes], *, password: str,
                          forwarded: bool = False) -> BatchAddResult:
        """A batch: every entry is acknowledged, or the call fails (and, its writer
        failing meanwhile, a prefix of the batch may be in the ledger)."""
        self._limits.check_batch(payloads)
        for _ in range(ROUTE_ATTEMPTS_MAX):
            target = await self._route(ledger_id, password, forwarded, takeover=True)
            if isinstance(target, _Remote):
                return await self._rt.forward.add_entries(target.url, ledger_id, payloads,
                                                          password=password)
            if isinstance(target, LedgerMetadata):
                raise LedgerClosed(f"ledger {ledger_id} is closed")
            try:
                return await self._add_batch_local(target, payloads)
            except WriterSuperseded:
                if self.writer_of(ledger_id) is not None:
                    raise
                continue
        raise MetadataConflict(f"ledger {ledger_id}: its writer kept changing; retry")

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
                             ) -> tuple[OffloadInfo, tuple[int, int] | None]:
        md, _ = await self._rt.metadata.read(ledger_id)
        progress = None if self._rt.offload is None else self._rt.offload.progress(ledger_id)
        return offload_info(md), progress

    async def resume_abandoned(self, ledger_id: int) -> None:
        """The auditor's takeover of an OPEN ledger whose writer is gone (§7)."""
        if self.writer_of(ledger_id) is not None or ledger_id in self._recoveries:
            return
        md, revision = await self._rt.metadata.read(ledger_id, fresh=True)
        node = md.writer.node
        if md.state is LedgerState.CLOSED or (node != self._rt.me
                                              and self._rt.membership.is_live(node)):
            return
        await self._recover(md, close=False, revision=revision)

    # --- routing ------------------------------------------------------------------------

    async def _route(self, ledger_id: int, password: str, forwarded: bool, *,
                     takeover: bool) -> Driver | _Remote | LedgerMetadata:
        """Where a write-path call goes: this node's writer (after a takeover when
        ``takeover`` and the writer is gone), the live writer's URL, or the metadata
        (CLOSED, or a writer gone when not taking over)."""
        for _ in range(ROUTE_ATTEMPTS_MAX):
            writer = self.writer_of(ledger_id)
            if writer is not None:
                await self._check_password(writer.metadata, password)
                return self._writers[ledger_id]
            waiting = self._recoveries.get(ledger_id)
            if waiting is not None:
                await asyncio.shield(waiting)
                continue
            md, revision = await self._rt.metadata.read(ledger_id)
            await self._check_password(md, password)
            if md.state is LedgerState.CLOSED:
                return md
            node = md.writer.node
            membership = self._rt.membership
            url = membership.url_of(node)
            if node != self._rt.me and membership.is_live(node) and url:
                if forwarded:
                    raise NotReady(f"ledger {ledger_id} is written by {node}, not here; retry")
                return _Remote(url)
            if not takeover:
                return md
            # Decide a takeover on the metadata etcd holds now, not the cache's.
            md, revision = await self._rt.metadata.read(ledger_id, fresh=True)
            if md.state is LedgerState.CLOSED or md.writer.node != node:
                continue
            done = await self._recover(md, close=False, revision=revision)
            if isinstance(done, LedgerClosedDone):
                return done.metadata
        raise MetadataConflict(f"ledger {ledger_id}: its writer kept changing; retry")

    async def _recover(self, md: LedgerMetadata, *, close: bool,
                       revision: int | None = None) -> Effect:
        """Take the ledger over (§7): resume as its writer, or close it."""
        ledger_id = md.ledger_id
        waiting = self._recoveries.get(ledger_id)
        if waiting is not None:
            return await asyncio.shield(waiting)
        self._check_lease()
        if revision is None:
            md, revision = await self._rt.metadata.read(ledger_id, fresh=True)
        loop = asyncio.get_running_loop()
        token: asyncio.Future[Effect] = loop.create_future()
        settings = self._rt.settings
        recovery = LedgerRecovery(node_id=self._rt.me, metadata=md, revision=revision,
                                  clock=self._rt.clock, membership=self._rt.membership,
                                  close=close, token=token,
                                  add_timeout_s=settings.add_timeout_s,
                                  wall_clock=self._rt.wall_clock)
        waiter: asyncio.Future[Effect] = loop.create_future()
        self._recoveries[ledger_id] = waiter
        driver = self._rt.driver(recovery, self._on_effect)
        self._writers[ledger_id] = driver
        log.info("taking ledger over", extra={"ledger_id": ledger_id, "close": close,
                                              "epoch": md.epoch + 1,
                                              "previous_writer": md.writer.node})
        recovery.start()
        driver.drain()
        return await asyncio.shield(waiter)

    def _on_effect(self, driver: Driver, effect: Effect) -> None:
        machine = driver.machine
        ledger_id = machine.ledger_id
        if isinstance(effect, Resumed):
            assert isinstance(machine, LedgerRecovery) and machine.writer is not None
            driver.machine = machine.writer
            log.info("ledger resumed", extra={"ledger_id": ledger_id,
                                              "epoch": machine.writer.epoch,
                                              "lac": machine.writer.lac})
        elif isinstance(effect, LedgerClosedDone | Stopped):
            if self._writers.get(ledger_id) is driver:
                del self._writers[ledger_id]
            if isinstance(effect, LedgerClosedDone):
                self._closed(effect.metadata)
            else:
                log.info("stopped writing ledger", extra={"ledger_id": ledger_id,
                                                          "reason": str(effect.error)})
        else:
            return
        waiter = self._recoveries.get(ledger_id)
        if waiter is not None and isinstance(machine, LedgerRecovery):
            self._recoveries.pop(ledger_id, None)
            if not waiter.done():
                waiter.set_result(effect)

    def _closed(self, md: LedgerMetadata) -> None:
        for policy in self.on_closed:
            policy(md)

    # --- adds on this node's writer --------------------------------------------------

    async def _add_local(self, ledger_id: int, driver: Driver, payload: bytes,
                         expected_entry_id: int | None) -> AddResult:
        self._check_lease()
        writer = driver.machine
        assert isinstance(writer, LedgerWriter)
        crc = crc32c.crc32c(payload)
        token: asyncio.Future[AddDone] = asyncio.get_running_loop().create_future()
        outcome = writer.add(payload, token, entry_id=expected_entry_id)
        if outcome is AddOutcome.NEEDS_COMPARE:
            assert expected_entry_id is not None
            token.cancel()
            entry, lac = await self.reads.read_entry(ledger_id, expected_entry_id)
            if entry.payload != payload:
                raise EntryConflict(f"entry {expected_entry_id} of ledger {ledger_id} holds "
                                    "a different payload")
            return AddResult(entry_id=expected_entry_id, last_add_confirmed=lac, crc32c=crc,
                             already_present=True)
        driver.schedule_drain()
        done = await self._acknowledged(ledger_id, token)
        return AddResult(entry_id=done.entry_id, last_add_confirmed=done.lac, crc32c=crc,
                         already_present=outcome is AddOutcome.JOINED)

    async def _add_batch_local(self, driver: Driver,
                               payloads: Sequence[bytes]) -> BatchAddResult:
        self._check_lease()
        writer = driver.machine
        assert isinstance(writer, LedgerWriter)
        loop = asyncio.get_running_loop()
        tokens: list[asyncio.Future[AddDone]] = []
        for payload in payloads:
            token: asyncio.Future[AddDone] = loop.create_future()
            writer.add(payload, token)
            tokens.append(token)
        driver.schedule_drain()
        done = [await self._acknowledged(writer.ledger_id, t) for t in tokens]
        return BatchAddResult(first_entry_id=done[0].entry_id, last_entry_id=done[-1].entry_id,
                              last_add_confirmed=max(d.lac for d in done))

    @staticmethod
    async def _acknowledged(ledger_id: int, token: asyncio.Future[AddDone]) -> AddDone:
        try:
            return await asyncio.wait_for(asyncio.shield(token), ADD_WAIT_S_MAX)
        except TimeoutError:
            raise BookieUnreachable(f"ledger {ledger_id}: the add was not acknowledged within "
                                    f"{ADD_WAIT_S_MAX:.0f}s; its outcome is unknown, retry "
                                    "with ?entry_id") from None

    async def _close_writer(self, ledger_id: int, driver: Driver) -> LedgerMetadata | None:
        """Close this node's writer of the ledger; None when it was taken over meanwhile."""
        closing = self._closing.get(ledger_id)
        if closing is None:
            writer = driver.machine
            assert isinstance(writer, LedgerWriter)
            loop = asyncio.get_running_loop()
            token: asyncio.Future[LedgerClosedDone] = loop.create_future()
            try:
                writer.close(token)
            except (WriterSuperseded, LedgerClosed):
                return None
            closing = loop.create_future()
            self._closing[ledger_id] = closing
            driver.drain()
            try:
                done = await token
                closing.set_result(done.metadata)
            except LedgerdError as exc:
                closing.set_exception(exc)
                closing.exception()  # retrieved: the waiters below get it too
                return None
            finally:
                self._closing.pop(ledger_id, None)
        return await asyncio.shield(closing)

    # --- checks ----------------------------------------------------------------------------

    def _check_lease(self) -> None:
        if not self._rt.membership.lease_ok:
            raise NotReady("this node's membership lease is not held (etcd unreachable or "
                           "the lease expired); retry")

    async def _check_password(self, md: LedgerMetadata, password: str) -> None:
        if self._verifier.verify_cached(md.ledger_id, password):
            return
        stored = PasswordHash(bytes.fromhex(md.password_salt), bytes.fromhex(md.password_hash))
        if not await blocking(self._verifier.verify, md.ledger_id, stored, password):
            raise Unauthorized(f"wrong password for ledger {md.ledger_id}")


def _listed(md: LedgerMetadata, state: InfoState | None) -> bool:
    named = InfoState.CLOSED if md.state is LedgerState.CLOSED else InfoState.OPEN
    return state is None or state is named


def info_of(view: LedgerView) -> LedgerInfo:
    md = view.metadata
    state = InfoState.CLOSED if md.state is LedgerState.CLOSED else InfoState.OPEN
    return LedgerInfo(ledger_id=md.ledger_id, state=state, last_add_confirmed=view.lac,
                      length=view.length or 0, entries=view.lac + 1, created_at=md.created_at,
                      closed_at=md.closed_at, metadata=dict(md.metadata),
                      offload=offload_info(md))


def info_of_closed(md: LedgerMetadata) -> LedgerInfo:
    assert md.last_entry_id is not None
    return info_of(LedgerView(md, 0, md.last_entry_id, md.length))

