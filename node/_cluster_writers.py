"""This node's writers and recoveries in cluster mode, and where a write goes.

:class:`Writers` holds the ``LedgerWriter`` of every ledger this node writes and
the ``LedgerRecovery`` of every takeover it runs, each on a :class:`Driver`, and
decides where a write-path call about a ledger goes (docs/cluster.md §1, §7):

- this node's writer;
- the live writer node (one hop; a forwarded call never hops again);
- a takeover first when the writer is gone (not a member: dead, partitioned past
  its lease, or this node before a restart): epoch + 1, fence, recover, resume.

Passwords are checked against the salted digest in the ledger's metadata: keyed
BLAKE2b under the cluster's password key (node/_cluster_password_key.py) for
ledgers created since keyed digests, checked at once on any node; scrypt for
older ledgers (a verified one is remembered in memory, in a bounded cache, as
standalone does; they are not rehashed: docs/api.md, Security).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Sequence

import anyio
import anyio.to_thread

from cluster import (
    PASSWORD_SCHEME_KEYED,
    AddDone,
    AddOutcome,
    Driver,
    Effect,
    IdleWriter,
    LedgerClosedDone,
    LedgerMetadata,
    LedgerRecovery,
    LedgerState,
    LedgerWriter,
    Resumed,
    Stopped,
)
from common.errors import (
    BookieUnreachable,
    EntryConflict,
    LedgerClosed,
    LedgerdError,
    MetadataConflict,
    NotHandedOver,
    NotReady,
    WouldBlock,
    WriterSuperseded,
)
from ledger import Batch, BatchAddResult, PasswordHash, PasswordScheme, PasswordVerifier

from ._cluster_reads import ClusterReads
from ._cluster_runtime import ClusterRuntime

log = logging.getLogger("ledgerd.cluster")

ROUTE_ATTEMPTS_MAX = 4
# A client add not acknowledged in this long is answered 503: its outcome is
# unknown, and a retry with ?entry_id=N settles it exactly once.
ADD_WAIT_S_MAX = 30.0


class Remote:
    """A call to forward to the live writer at ``url``."""

    def __init__(self, url: str) -> None:
        self.url = url


class Writers:
    def __init__(self, rt: ClusterRuntime) -> None:
        self._rt = rt
        self._writers: dict[int, Driver] = {}
        # The writers of idle open ledgers, retired to their state (a fifth of a
        # writer and its driver): woken when the ledger is next written.
        self._dormant: dict[int, IdleWriter] = {}
        self._recoveries: dict[int, asyncio.Future[Effect]] = {}
        self._closing: dict[int, asyncio.Future[LedgerMetadata]] = {}
        # Keyless until the node agreed the cluster's key (ClusterNode.start, before
        # it serves): it can check old scrypt digests, and creates nothing.
        self._verifier = PasswordVerifier()
        self.reads: ClusterReads | None = None  # set by ClusterLedgers (compares of retries)
        # Policies after a close (the offload of OFFLOAD_AFTER_CLOSE).
        self.on_closed: list[Callable[[LedgerMetadata], None]] = []
        rt.ticking.on_idle = self._retire

    def use_password_key(self, key: bytes) -> None:
        """Hash and check with the cluster's password key from now on."""
        self._verifier = PasswordVerifier(key)

    def add_new(self, writer: LedgerWriter, password: str) -> None:
        """A ledger this node just created, with its first writer."""
        self._writers[writer.ledger_id] = self._rt.driver(writer, self._on_effect)
        self._verifier.remember(writer.ledger_id, stored_password(writer.metadata), password)

    def stop(self, ledger_id: int, error: LedgerdError) -> None:
        """This node no longer writes the ledger (it was deleted)."""
        driver = self._writers.pop(ledger_id, None)
        if driver is not None and isinstance(driver.machine, LedgerWriter):
            driver.machine.stop(error)
            driver.drain()
        self._dormant.pop(ledger_id, None)
        self._verifier.forget(ledger_id)

    # --- what this node writes ----------------------------------------------------

    def writer_of(self, ledger_id: int) -> LedgerWriter | None:
        """This node's writer of the ledger, woken if it was idle: for what writes."""
        self._awake(ledger_id)
        writer = self.held(ledger_id)  # awake now: a writer or None
        return writer if isinstance(writer, LedgerWriter) else None

    def held(self, ledger_id: int) -> LedgerWriter | IdleWriter | None:
        """This node's writer of the ledger, or its idle state, not woken: for what
        only looks (its metadata, LAC and length)."""
        idle = self._dormant.get(ledger_id)
        if idle is not None and ledger_id not in self._writers:
            return idle
        driver = self._writers.get(ledger_id)
        machine = None if driver is None else driver.machine
        if isinstance(machine, LedgerWriter) and not machine.done and not machine.recovering:
            return machine
        return None

    @property
    def idle_count(self) -> int:
        """Writers retired to their idle state (open ledgers this node writes, idle)."""
        return len(self._dormant)

    def adopt(self, md: LedgerMetadata, revision: int, *, base_revision: int) -> None:
        """This node wrote ``md`` at ``revision`` over ``base_revision``, changing only
        what a writer does not own (a tier position): the ledger's writer, awake
        or idle, takes it if it still stood at ``base_revision``
        (``LedgerWriter.adopt``)."""
        ledger_id = md.ledger_id
        idle = self._dormant.get(ledger_id)
        if idle is not None and ledger_id not in self._writers:
            if idle.revision == base_revision:
                self._dormant[ledger_id] = IdleWriter(self._rt.metadata.packed(md, revision),
                                                      idle.lac, idle.length)
            return
        writer = self.held(ledger_id)
        if isinstance(writer, LedgerWriter):
            writer.adopt(md, revision, base_revision=base_revision)

    def writing(self) -> list[int]:
        return sorted(i for i in self._writers.keys() | self._dormant.keys()
                      if self.held(i) is not None)

    def _awake(self, ledger_id: int) -> Driver | None:
        """The ledger's driver, with a writer woken from its idle state if it slept."""
        driver = self._writers.get(ledger_id)
        if driver is not None:
            return driver
        idle = self._dormant.pop(ledger_id, None)
        if idle is None:
            return None
        rt = self._rt
        writer = LedgerWriter.wake(idle, node_id=rt.me, clock=rt.clock,
                                   membership=rt.membership,
                                   add_timeout_s=rt.settings.add_timeout_s,
                                   wall_clock=rt.wall_clock)
        driver = self._writers[ledger_id] = rt.driver(writer, self._on_effect)
        return driver

    def _current(self, driver: Driver) -> Driver:
        """``driver``, or the one woken in its place if its writer was retired while
        a call held it (retired, it takes nothing: its state went to ``_dormant``)."""
        ledger_id = driver.machine.ledger_id
        if driver.machine.done and ledger_id in self._dormant \
                and ledger_id not in self._writers:
            woken = self._awake(ledger_id)
            assert woken is not None
            return woken
        return driver

    def _retire(self, driver: Driver) -> None:
        """The tick loop found ``driver`` with no timer running: an idle writer of an
        open ledger sleeps (``_dormant``) until the ledger is next written."""
        machine = driver.machine
        if not isinstance(machine, LedgerWriter):
            return
        ledger_id = machine.ledger_id
        if self._writers.get(ledger_id) is not driver or ledger_id in self._closing \
                or ledger_id in self._recoveries:
            return
        idle = machine.retire(self._rt.metadata.packed)
        if idle is not None:
            del self._writers[ledger_id]
            self._dormant[ledger_id] = idle

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
        self._dormant.clear()  # nothing in flight: nothing to fail

    async def resume_abandoned(self, ledger_id: int) -> None:
        """The auditor's takeover of an OPEN ledger whose writer is gone (§7)."""
        if self.held(ledger_id) is not None or ledger_id in self._recoveries:
            return
        md, revision = await self._rt.metadata.read(ledger_id, fresh=True)
        node = md.writer.node
        if md.state is LedgerState.CLOSED or await self._writer_alive(node):
            return
        await self.recover(md, close=False, revision=revision)

    async def _writer_alive(self, node: str) -> bool:
        """Whether ``node``, another node named as a ledger's writer, still holds its
        lease: no takeover then (§6.6).  The view first; a node it does not list is
        asked of etcd, since the view lags a registration by a watch event."""
        membership = self._rt.membership
        return node != self._rt.me and (membership.is_live(node)
                                        or await membership.registered(node))

    async def close_idle(self, ledger_id: int, revision: int, *,
                         forwarded: bool = False) -> bool:
        """The auditor's close of an idle OPEN ledger whose last ensemble names a gone
        bookie (docs/cluster.md §9), if its metadata is still at ``revision``: this
        node's writer closes it (§6.7); a live writer elsewhere is asked to (one hop:
        fenced behind its back, it would go on answering OPEN until its next add);
        a writer gone is taken over by a recovery that closes (§7).  True when this
        call closed it."""
        md, fresh = await self._rt.metadata.read(ledger_id, fresh=True)
        if fresh != revision or md.state is not LedgerState.OPEN:
            return False
        if self.writer_of(ledger_id) is not None:
            return await self.close_writer(ledger_id, self._writers[ledger_id]) is not None
        node = md.writer.node
        if node == self._rt.me:
            return False  # a recovery of ours is under way, or our writer not resumed yet
        url = self._rt.membership.url_of(node)
        if self._rt.membership.is_live(node) and url:
            if forwarded:
                return False  # the writer moved meanwhile: the auditor looks again
            return await self._rt.forward.close_idle(url, ledger_id, revision)
        if await self._writer_alive(node):
            return False  # registered, not in the view yet: the auditor looks again
        done = await self.recover(md, close=True, revision=revision)
        return isinstance(done, LedgerClosedDone)

    # --- routing ------------------------------------------------------------------------

    async def route(self, ledger_id: int, password: str, forwarded: bool, *,
                    takeover: bool) -> Driver | Remote | LedgerMetadata:
        """Where a write-path call goes: this node's writer (after a takeover when
        ``takeover`` and the writer is gone), the live writer's URL, or the metadata
        (CLOSED, or a writer gone when not taking over)."""
        for _ in range(ROUTE_ATTEMPTS_MAX):
            writer = self.writer_of(ledger_id)
            if writer is not None:
                await self.check_password(writer.metadata, password)
                return self._writers[ledger_id]
            waiting = self._recoveries.get(ledger_id)
            if waiting is not None:
                await asyncio.shield(waiting)
                continue
            md, revision = await self._rt.metadata.read(ledger_id)
            await self.check_password(md, password)
            if md.state is LedgerState.CLOSED:
                return md
            node = md.writer.node
            membership = self._rt.membership
            url = membership.url_of(node)
            if node != self._rt.me and membership.is_live(node) and url:
                if forwarded:
                    raise NotReady(f"ledger {ledger_id} is written by {node}, not here; retry")
                return Remote(url)
            if not takeover:
                return md
            # Decide a takeover on the metadata etcd holds now, not the cache's.
            md, revision = await self._rt.metadata.read(ledger_id, fresh=True)
            if md.state is LedgerState.CLOSED or md.writer.node != node:
                continue
            if await self._writer_alive(node):
                raise NotReady(f"ledger {ledger_id} is written by {node}, which this node "
                               "does not list yet; retry")
            done = await self.recover(md, close=False, revision=revision)
            if isinstance(done, LedgerClosedDone):
                return done.metadata
        raise MetadataConflict(f"ledger {ledger_id}: its writer kept changing; retry")

    async def recover(self, md: LedgerMetadata, *, close: bool,
                      revision: int | None = None) -> Effect:
        """Take the ledger over (§7): resume as its writer, or close it."""
        ledger_id = md.ledger_id
        waiting = self._recoveries.get(ledger_id)
        if waiting is not None:
            return await asyncio.shield(waiting)
        self.check_lease()
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

    async def _append_retry(self, driver: Driver, payloads: Sequence[bytes], *,
                            expected_first: int | None = None,
                            on_assigned: Callable[[], None] | None = None,
                            ) -> BatchAddResult:
        """One batch on this node's writer.  With ``expected_first`` it is
        idempotent: entries already at ``expected_first + i`` must hold the same
        bytes (the batch, or the prefix of it a takeover recovered, is there),
        entries still pending are joined, and the rest is appended after them.
        ``on_assigned`` runs once every entry has its id."""
        self.check_lease()
        writer = driver.machine
        assert isinstance(writer, LedgerWriter)
        compared: dict[int, int] = {}  # entry id -> the LAC when it was read back
        if expected_first is not None:
            # Entries at or below the LAC are read back and compared first; the others
            # are pending (joined) or new (appended), all without waiting in between.
            while True:
                driver = self._current(driver)  # the writer may have slept meanwhile
                writer = driver.machine
                assert isinstance(writer, LedgerWriter)
                if expected_first > writer.next_entry_id:
                    raise EntryConflict(f"entry {expected_first} is not the next entry of "
                                        f"ledger {writer.ledger_id} (next is "
                                        f"{writer.next_entry_id})")
                todo = [expected_first + i for i in range(len(payloads))
                        if expected_first + i <= writer.lac and expected_first + i not in compared]
                if not todo:
                    break
                for entry_id in todo:
                    compared[entry_id] = await self._compare(
                        writer.ledger_id, entry_id, payloads[entry_id - expected_first])
        loop = asyncio.get_running_loop()
        tokens: list[asyncio.Future[AddDone] | int] = []
        joined = 0
        for i, payload in enumerate(payloads):
            wanted = None if expected_first is None else expected_first + i
            if wanted is not None and wanted in compared:
                tokens.append(wanted)
                continue
            token: asyncio.Future[AddDone] = loop.create_future()
            try:
                if writer.add(payload, token, entry_id=wanted) is AddOutcome.JOINED:
                    joined += 1
            except WriterSuperseded as exc:
                if tokens:
                    raise  # a part of the batch went to the writer: its fate is unknown
                raise NotHandedOver(str(exc)) from exc
            tokens.append(token)
        if on_assigned is not None:
            on_assigned()
        driver.schedule_drain()
        done = [await self._acknowledged(writer.ledger_id, t) if isinstance(t, asyncio.Future)
                else AddDone(None, t, compared[t]) for t in tokens]
        return BatchAddResult(first_entry_id=done[0].entry_id, last_entry_id=done[-1].entry_id,
                              last_add_confirmed=max(d.lac for d in done),
                              already_present=len(compared) + joined == len(payloads))

    async def append(self, driver: Driver,
                     batches: Sequence[Batch], *,
                     answer: Callable[[int, BatchAddResult], None],
                     on_assigned: Callable[[], None] | None = None) -> None:
        """The one way adds reach this node's writer: consecutive batches
        ``(expected_first_entry_id, payloads)`` (a single add is a batch of one,
        a stream's messages read together a run of several), ``answer(index,
        result)`` for each in order as it is acknowledged; the first failure is
        raised.  ``on_assigned`` runs once every entry has its id.  New entries
        only (each expected first id, if any, is where the batch lands): every
        batch is appended in this one turn, so they leave together, one call per
        bookie.  Otherwise one batch at a time (:meth:`_append_retry`)."""
        self.check_lease()
        writer = driver.machine
        assert isinstance(writer, LedgerWriter)
        next_id = writer.next_entry_id
        for expected, payloads in batches:
            if expected is not None and expected != next_id:
                await self._append_one_by_one(driver, batches, on_assigned, answer)
                return
            next_id += len(payloads)
        loop = asyncio.get_running_loop()
        tokens: list[tuple[int, asyncio.Future[AddDone]]] = []
        for _expected, payloads in batches:
            token: asyncio.Future[AddDone] = loop.create_future()
            try:
                tokens.append((writer.add_many(payloads, token), token))
            except WriterSuperseded as exc:  # before the first: nothing was handed over
                raise NotHandedOver(str(exc)) from exc
        if on_assigned is not None:
            on_assigned()
        driver.schedule_drain()
        try:
            # Acks come in id order: once the last batch is in, every one is.  One
            # wait, so the run is answered in one turn (and its stream acks in one
            # message), not a turn per batch.
            await self._acknowledged(writer.ledger_id, tokens[-1][1])
        finally:
            for index, (first, token) in enumerate(tokens):
                if not token.done() or token.cancelled() or token.exception() is not None:
                    break  # this one and those after it fail with the run
                done = token.result()
                answer(index, BatchAddResult(
                    first_entry_id=first, last_entry_id=done.entry_id,
                    last_add_confirmed=done.lac, already_present=False))

    async def _append_one_by_one(self, driver: Driver,
                                 batches: Sequence[Batch],
                                 on_assigned: Callable[[], None] | None,
                                 answer: Callable[[int, BatchAddResult], None]) -> None:
        for index, (expected, payloads) in enumerate(batches):
            driver = self._current(driver)  # the writer may have slept in between
            try:
                result = await self._append_retry(
                    driver, payloads, expected_first=expected,
                    on_assigned=on_assigned if index == len(batches) - 1 else None)
            except NotHandedOver as exc:
                if index == 0:
                    raise
                # Part of the run is in the ledger: it must not be routed again
                # whole; the client retries what failed with its entry ids.
                raise WriterSuperseded(str(exc)) from exc
            answer(index, result)

    async def _compare(self, ledger_id: int, entry_id: int, payload: bytes) -> int:
        """Entry ``entry_id`` (at or below the LAC) holds ``payload``: the LAC read, or
        ``EntryConflict`` (§6.5)."""
        assert self.reads is not None
        entry, lac = await self.reads.read_entry(ledger_id, entry_id)
        if entry.payload != payload:
            raise EntryConflict(f"entry {entry_id} of ledger {ledger_id} holds a different "
                                "payload")
        return lac

    @staticmethod
    async def _acknowledged(ledger_id: int, token: asyncio.Future[AddDone]) -> AddDone:
        try:
            return await asyncio.wait_for(asyncio.shield(token), ADD_WAIT_S_MAX)
        except TimeoutError:
            raise BookieUnreachable(f"ledger {ledger_id}: the add was not acknowledged within "
                                    f"{ADD_WAIT_S_MAX:.0f}s; its outcome is unknown, retry "
                                    "with ?entry_id") from None

    async def close_writer(self, ledger_id: int, driver: Driver) -> LedgerMetadata | None:
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

    def check_lease(self) -> None:
        if not self._rt.membership.lease_ok:
            raise NotReady("this node's membership lease is not held (etcd unreachable or "
                           "the lease expired); retry")

    def password_verified(self, ledger_id: int, password: str) -> bool:
        """Whether ``password`` is the ledger's, known without scrypt: a keyed digest
        in the metadata this node has at hand, or a scrypt one verified before."""
        writer = self.held(ledger_id)
        if writer is not None:
            md: LedgerMetadata | None = writer.metadata
        else:
            cached = self._rt.metadata.cached((ledger_id,))
            md = cached[0][0] if cached else None
        if md is not None and md.password_scheme == PASSWORD_SCHEME_KEYED \
                and self._verifier.keyed:
            return self._verifier.verify_fast(ledger_id, stored_password(md), password)
        return self._verifier.verified_before(ledger_id, password)

    def hash_password(self, password: str) -> PasswordHash:
        """A new ledger's password digest, keyed with the cluster's password key (a
        microsecond); ``NotReady`` before the node agreed the key."""
        if not self._verifier.keyed:
            raise NotReady("this node has not agreed the cluster's password key yet; retry")
        return self._verifier.hash(password)

    async def check_password(self, md: LedgerMetadata, password: str, *,
                             limiter: anyio.CapacityLimiter | None = None) -> None:
        stored = stored_password(md)
        try:
            self._verifier.check(md.ledger_id, stored, password, block=False)
        except WouldBlock:  # scrypt: off the event loop, on the limiter's threads
            await anyio.to_thread.run_sync(functools.partial(
                self._verifier.check, md.ledger_id, stored, password), limiter=limiter)


def stored_password(md: LedgerMetadata) -> PasswordHash:
    """The password digest a ledger's metadata holds, with its scheme."""
    scheme = (PasswordScheme.KEYED_BLAKE2B if md.password_scheme == PASSWORD_SCHEME_KEYED
              else PasswordScheme.SCRYPT)
    return PasswordHash(md.password_salt, md.password_hash, scheme)
