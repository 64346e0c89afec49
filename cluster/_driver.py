"""Drivers: the sans-I/O machines of this package run on an asyncio event loop.

A :class:`Driver` owns one machine (``LedgerWriter``, ``LedgerRecovery`` or
``LedgerRereplicator``) and does what the simulation does for it
(tests/cluster/simulation.py): ``take_effects()`` after every event, each
``Send`` as a call to a bookie whose reply goes back through ``on_reply`` (no
answer at all is ``Unavailable``), each ``WriteMetadata`` as a compare-and-swap
in the metadata store (etcd) with exactly one result (an unknown outcome is resolved by reading the
key, retried until etcd answers), ``tick()`` from the node's tick loop.  A writer
sends each bookie the adds made since its last send as one ``AddEntries`` (one
journal record on that bookie), split here only past the batch limits.  Client
tokens are asyncio futures, resolved here; the other effects go to the owner.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from common.errors import BookieUnreachable, MetadataUnavailable

from ._effects import (
    AddDone,
    AddFailed,
    BookieClient,
    Current,
    Effect,
    LedgerClosedDone,
    MetadataStore,
    Send,
    WriteMetadata,
    Written,
)
from ._messages import AddEntries, BookieReply, BookieRequest, Unavailable
from ._recovery import LedgerRecovery
from ._rereplication import LedgerRereplicator
from ._wire import batch_runs
from ._writer import LedgerWriter

log = logging.getLogger("ledgerd.cluster")

Machine = LedgerWriter | LedgerRecovery | LedgerRereplicator
Spawn = Callable[[Coroutine[Any, Any, None]], None]
# A call that failed this fast is answered no sooner than this: a writer with no
# replacement for a dead bookie resends at once, and must not spin.
UNREACHABLE_PACE_S = 0.2
CAS_RETRY_S = 0.25


class RoutingBookieClient:
    """This node's own bookie without HTTP, the others over HTTP."""

    def __init__(self, me: str, local: BookieClient, remote: BookieClient) -> None:
        self._me = me
        self._local = local
        self._remote = remote

    def _of(self, bookie_id: str) -> BookieClient:
        return self._local if bookie_id == self._me else self._remote

    async def call(self, bookie_id: str, request: BookieRequest) -> BookieReply:
        return await self._of(bookie_id).call(bookie_id, request)


@dataclass(frozen=True, slots=True)
class DriverContext:
    """What every driver of a node shares: one reference per driver, not seven (a
    node holds a driver per open ledger it writes)."""

    bookies: BookieClient
    store: MetadataStore
    spawn: Spawn
    batch_count_max: int
    batch_bytes_max: int
    wake: Callable[[Driver], None] | None = None


class Driver:
    __slots__ = ("_abandoned", "_context", "_drain_scheduled", "_on_effect", "machine")

    def __init__(self, machine: Machine, context: DriverContext,
                 on_effect: Callable[[Driver, Effect], None]) -> None:
        self.machine: Machine = machine
        self._context = context
        self._on_effect = on_effect
        self._drain_scheduled = False
        self._abandoned = False

    @property
    def done(self) -> bool:
        return self._abandoned or self.machine.done

    @property
    def wants_tick(self) -> bool:
        """Done (to be dropped), or a machine with timers running; an idle writer
        is woken by its next input instead (``wake``, on every drain)."""
        machine = self.machine
        return self.done or not isinstance(machine, LedgerWriter) or machine.wants_tick

    def abandon(self) -> None:
        """Stop driving the machine where it stands: no more effects, replies, ticks."""
        self._abandoned = True
        self.machine.take_effects()

    # --- events -----------------------------------------------------------------

    def drain(self) -> None:
        """Carry out everything the machine asked for since the last drain."""
        self._drain_scheduled = False
        if self._abandoned:
            self.machine.take_effects()
            return
        for effect in self.machine.take_effects():
            if isinstance(effect, Send):
                request = effect.request
                if isinstance(request, AddEntries):
                    for part in self._parts(request):
                        self._context.spawn(self._call(effect.bookie_id, part))
                else:
                    self._context.spawn(self._call(effect.bookie_id, request))
            elif isinstance(effect, WriteMetadata):
                self._context.spawn(self._cas(effect))
            else:
                self._settle(effect)
                self._on_effect(self, effect)
        wake = self._context.wake
        if wake is not None:
            wake(self)

    def schedule_drain(self) -> None:
        """Drain once the event loop has run what is ready: adds of concurrent
        requests made in the same turn then share one batch per bookie."""
        if not self._drain_scheduled:
            self._drain_scheduled = True
            asyncio.get_running_loop().call_soon(self.drain)

    def tick(self) -> None:
        if not self._abandoned:
            self.machine.tick()
            self.drain()

    def on_reply(self, bookie_id: str, reply: BookieReply) -> None:
        if not self._abandoned:
            self.machine.on_reply(bookie_id, reply)
            self.drain()

    # --- I/O ----------------------------------------------------------------------

    def _parts(self, request: AddEntries) -> list[AddEntries]:
        """``request`` as calls within the batch limits (each its own journal
        record: the writer counts each entry's acks on its own)."""
        count_max = self._context.batch_count_max
        bytes_max = self._context.batch_bytes_max
        entries = request.entries
        sizes = [len(e.payload) for e in entries]
        if len(entries) <= count_max and sum(sizes) <= bytes_max:
            return [request]
        return [dataclasses.replace(request, entries=entries[start:end])
                for start, end in batch_runs(sizes, count_max=count_max,
                                             bytes_max=bytes_max)]

    async def _call(self, bookie_id: str, request: BookieRequest) -> None:
        reply = await self._paced(self._context.bookies.call(bookie_id, request), request.ledger_id)
        self.on_reply(bookie_id, reply)

    async def _paced(self, call: Coroutine[Any, Any, Any], ledger_id: int) -> Any:
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            return await call
        except BookieUnreachable as exc:
            await asyncio.sleep(max(0.0, started + UNREACHABLE_PACE_S - loop.time()))
            return Unavailable(ledger_id, str(exc))

    async def _cas(self, effect: WriteMetadata) -> None:
        """Exactly one result per metadata write (docs/cluster.md §6.3)."""
        result: Written | Current | None = None
        try:
            result = await self._context.store.compare_and_swap(effect.metadata,
                                                        effect.expected_revision)
        except MetadataUnavailable as exc:
            log.warning("metadata write of ledger %d: outcome unknown (%s); reading it",
                        effect.metadata.ledger_id, exc)
        while result is None:
            try:
                read = await self._context.store.read(effect.metadata.ledger_id)
            except MetadataUnavailable:
                await asyncio.sleep(CAS_RETRY_S)
                continue
            result = Current(None, 0) if read is None else Current(*read)
        if not self._abandoned:
            self.machine.on_metadata(result)
            self.drain()

    @staticmethod
    def _settle(effect: Effect) -> None:
        token = getattr(effect, "token", None)
        if not isinstance(token, asyncio.Future) or token.done():
            return
        if isinstance(effect, AddFailed):
            token.set_exception(effect.error)
        elif isinstance(effect, AddDone | LedgerClosedDone):
            token.set_result(effect)


class TickSet:
    """The drivers a node's tick loop visits: those whose machines have timers
    running.  An idle writer leaves it and is put back by its next input (every
    drain calls ``DriverContext.wake``, which is :meth:`add`).  Insertion-ordered,
    so that a simulated node ticks its machines in the same order every replay."""

    __slots__ = ("_drivers", "on_idle")

    def __init__(self) -> None:
        self._drivers: dict[Driver, None] = {}
        # Told of each driver the loop stops visiting because its machine has no
        # timer running (the node's writers retire an idle writer then).
        self.on_idle: Callable[[Driver], None] | None = None

    def __len__(self) -> int:
        return len(self._drivers)

    def add(self, driver: Driver) -> None:
        self._drivers[driver] = None

    def clear(self) -> None:
        self._drivers.clear()

    def tick(self) -> None:
        """One round: a done driver gets its last drain and leaves; every other is
        ticked, and leaves once its machine wants no more ticks."""
        for driver in list(self._drivers):
            if driver.done:
                driver.drain()  # its last effects (a drain wakes it: drop it after)
                self._drivers.pop(driver, None)
                continue
            try:
                driver.tick()
            except Exception:
                log.exception("a cluster machine failed on tick; dropping it")
                driver.abandon()
            if not driver.wants_tick:
                self._drivers.pop(driver, None)
                if self.on_idle is not None:
                    self.on_idle(driver)
