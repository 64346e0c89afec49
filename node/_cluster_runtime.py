"""What every part of a cluster node shares: etcd, the membership, the bookie
clients, the tasks it started and the drivers it ticks (docs/cluster.md)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Collection, Coroutine
from typing import Any, Protocol

from cluster import (
    BookieClient,
    Clock,
    ClusterKeys,
    ClusterSettings,
    Driver,
    DriverContext,
    Effect,
    Etcd,
    EtcdClient,
    EtcdMetadataStore,
    HttpBookieClient,
    LedgerMetadata,
    Machine,
    RoutingBookieClient,
    TickSet,
    peer_ssl_context,
)
from ledger import LedgerLimits, OffloadInfo
from offload import RemoteLedgerReader

from ._cluster_forward import ForwardClient
from ._cluster_membership import LocalStatus, Membership
from ._cluster_metadata import LedgerMetadataView
from ._cluster_packs import PackUsage
from ._replica_server import LocalBookieClient, ReplicaServer

log = logging.getLogger("ledgerd.cluster")


class MonotonicClock:
    def now(self) -> float:
        return time.monotonic()


class WallClock:
    """Seconds since the epoch, for timestamps in the metadata (``closed_at``)."""

    def now(self) -> float:
        return time.time()


class OffloadPort(Protocol):
    """What the ledger API needs of the cluster's offload (node/_cluster_offload.py)."""

    async def request(self, md: LedgerMetadata) -> OffloadInfo: ...

    async def ledger_deleted(self, md: LedgerMetadata) -> None:
        """Its objects go: those of its offload and those tiered while it was open."""

    async def audit_packs(self, usage: PackUsage, bookies: Collection[str]) -> None: ...

    def progress(self, ledger_id: int) -> tuple[int, int] | None: ...


class PeerBookies(BookieClient, Protocol):
    """The other nodes' bookies (HTTP in production)."""

    async def aclose(self) -> None: ...


class ClusterRuntime:
    """What every part of a cluster node shares: its transports, clocks, membership,
    metadata view and the drivers' context.  The transports come in through the
    constructor (``etcd``, ``peers``, ``clock``); left out, they are the network's:
    etcd's gateway at ``ETCD_ENDPOINTS``, the peers' ``/internal/v1/`` routes, the
    monotonic clock.  A cluster of one or a simulation passes its own."""

    def __init__(self, settings: ClusterSettings, *, me: str, replica_server: ReplicaServer,
                 limits: LedgerLimits, remote: RemoteLedgerReader | None,
                 status: Callable[[], LocalStatus], on_lease_lost: Callable[[], None],
                 etcd: Etcd | None = None, peers: PeerBookies | None = None,
                 clock: Clock | None = None) -> None:
        self.settings = settings
        self.me = me
        self.limits = limits
        self.remote = remote
        self.clock: Clock = clock or MonotonicClock()
        self.wall_clock = WallClock()
        self.etcd: Etcd = etcd if etcd is not None else EtcdClient(settings.etcd_endpoints)
        self.keys = ClusterKeys(settings.scope)
        self.store = EtcdMetadataStore(self.etcd, self.keys)
        self.metadata = LedgerMetadataView(self.etcd, self.keys, self.store)
        self.membership = Membership(self.etcd, self.keys, bookie_id=me,
                                     url=settings.advertised_url,
                                     ttl_s=settings.membership_ttl_s, status=status,
                                     on_lease_lost=on_lease_lost, clock=self.clock.now)
        # One trust for every call to an https:// peer (TLS_CA_FILE, else the system's).
        peer_tls = peer_ssl_context(settings.tls_ca_file)
        self.http: PeerBookies = peers if peers is not None else HttpBookieClient(
            self.membership.url_of, token=settings.token, timeout_s=settings.call_timeout_s,
            ssl_context=peer_tls)
        self.bookies = RoutingBookieClient(me, LocalBookieClient(replica_server), self.http)
        self.forward = ForwardClient(token=settings.token, ssl_context=peer_tls,
                                     worth_waiting=self._writer_reachable)
        self.offload: OffloadPort | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.ticking = TickSet()  # drivers with timers running (wants_tick)
        self._driver_context = DriverContext(
            bookies=self.bookies, store=self.store, spawn=self.spawn,
            batch_count_max=limits.batch_entry_count_max,
            batch_bytes_max=limits.batch_size_bytes_max, wake=self.ticking.add)
        self._stopping = False

    def _writer_reachable(self, url: str) -> bool:
        return self.membership.lease_ok and self.membership.has_live_url(url)

    async def start(self) -> None:
        await self.membership.start()
        self.spawn(self.metadata.watch())
        self.spawn(self._tick_loop())

    async def stop(self) -> None:
        self._stopping = True
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self.membership.stop()
        await self.http.aclose()
        await self.forward.aclose()
        await self.etcd.aclose()

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run ``coro`` as a task this node owns (cancelled when it stops)."""
        if self._stopping:
            coro.close()
            return
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("cluster task failed", exc_info=task.exception())

    def driver(self, machine: Machine, on_effect: Callable[[Driver, Effect], None]) -> Driver:
        """A driver for ``machine``, ticked while it has timers running (every input
        wakes it: ``Driver.drain``) until it is done."""
        driver = Driver(machine, self._driver_context, on_effect)
        self.ticking.add(driver)
        return driver

    async def _tick_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.tick_interval_s)
            # A node that was paused notices its lease is gone before anything else.
            self.membership.check_lease()
            self.ticking.tick()
