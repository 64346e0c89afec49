"""A seeded, deterministic simulation of cluster mode's protocol (STYLE 16).

Writers and bookies of 3-5 nodes run the real state machines of ``cluster/``
(``LedgerWriter``, ``LedgerRecovery``, ``LedgerRereplicator``, ``ReplicaRules``)
in one process, each machine driven by the production ``cluster.Driver`` and
ticked by the node's ``cluster.TickSet``, on an asyncio event loop whose clock
is simulated (tests/cluster/sim_loop.py).  The driver's seams are simulated: a
``BookieClient`` over a network that drops, delays, duplicates and reorders
messages and partitions nodes (a call without an answer raises
``BookieUnreachable`` after its timeout, as the HTTP client does), and a
``MetadataStore`` with etcd's compare-and-swap that loses requests and answers
(an unknown outcome is the driver's to resolve).  Each node's lease and view of
the others is the node's own ``Membership`` over ``cluster.InProcessEtcd``,
reached through a link that is cut and loses answers.  Nodes
crash and restart: a crashed bookie keeps exactly what it answered (its
replicas, fences included), a crashed writer loses everything in memory
(its drivers are abandoned).  A bookie's disk fails for a while (full, or its
journal device broken): it refuses every journaled request as the node's
replica server does (``Unavailable``) and publishes itself read-only.  Clients
append with ``?entry_id=N`` retries and in batches, fence, take ledgers over,
and read through a node's own ``ClusterReads`` (the readable end of §8.1, the
writer asked by a forwarded call, entries fetched from the write set).  After
EVERY step (each callback the loop runs) the invariants of docs/cluster.md §11
are checked; at the end the network heals, every ledger is closed, the auditor
re-replicates and every committed entry must have Qw identical replicas.

Replay one seed with its trace::

    python -m tests.cluster.simulation --seed 1234 -v
    python -m tests.cluster.simulation --seeds 0-999          # a range, summary only

Models: TigerBeetle's VOPR and FoundationDB's simulator.  Test-only rule variants
(a bookie that accepts older epochs, a LAC without Qa, recovery reads that do not
fence) come in through the constructor, never by patching.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import random
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from cluster import (
    AddDone,
    AddEntries,
    AddOutcome,
    AddsOk,
    BookieReply,
    BookieRequest,
    ClusterKeys,
    CopyEntries,
    Current,
    Driver,
    DriverContext,
    Effect,
    EntryFound,
    Fragment,
    InProcessEtcd,
    LedgerClosedDone,
    LedgerMetadata,
    LedgerRecovery,
    LedgerRereplicator,
    LedgerState,
    LedgerWriter,
    ListEntries,
    Machine,
    ReadEntries,
    ReadEntry,
    ReadLac,
    RecoveryRules,
    RepairDone,
    Replica,
    ReplicaRules,
    Resumed,
    Stopped,
    TickSet,
    Unavailable,
    WriterRef,
    WriterRules,
    Written,
    counts_as_replica,
    read_candidates,
    write_set,
)
from common.errors import (
    BookieUnreachable,
    EntryConflict,
    LedgerClosed,
    LedgerdError,
    MetadataUnavailable,
    WriterSuperseded,
)
from ledger import LedgerState as InfoState
from node import ClusterMembership, ClusterReads, LocalStatus
from tests.cluster.sim_loop import SimulatedLoop

QUORUMS = ((3, 3, 2), (3, 2, 2), (4, 3, 2), (3, 2, 1), (2, 2, 1), (4, 2, 2), (3, 3, 3))
TICK_S = 0.1
MEMBERSHIP_TTL_S = 2  # the node's membership lease (keep-alives every third of it)
REREPLICATION_DELAY_S = 2.0
AUDIT_EVERY_S = 1.5
CLIENT_TIMEOUT_S = 3.0
# How often a client appends a batch of new entries (one token) instead of one entry.
BATCH_P = 0.3
ADD_TIMEOUT_S = 0.6
# A bookie call or metadata request without an answer fails after this long (the
# node's HTTP and etcd clients time out the same way, after CALL_TIMEOUT_S).
CALL_TIMEOUT_S = 1.0
ASK_END_TIMEOUT_S = 2.0  # a writer asked for its end (the node's ForwardClient)
# Small batch limits, so that the driver splits what one turn gives a bookie.
BATCH_COUNT_MAX = 3
BATCH_BYTES_MAX = 80
RUN_S = 8.0
READS = (ReadEntry, ReadEntries, ReadLac, ListEntries)


class InvariantBroken(AssertionError):
    """An invariant of docs/cluster.md §11 does not hold."""

    def __init__(self, number: int, message: str) -> None:
        super().__init__(f"invariant {number}: {message}")
        self.number = number


class SimClock:
    """The machines' clock: the simulated loop's time."""

    def __init__(self, loop: SimulatedLoop) -> None:
        self._loop = loop

    @property
    def t(self) -> float:
        return self._loop.time()

    def now(self) -> float:
        return self._loop.time()


@dataclass
class Node:
    node_id: str
    up: bool = True
    incarnation: int = 0
    replicas: dict[int, Replica] = field(default_factory=dict)   # durable
    drivers: dict[int, Driver] = field(default_factory=dict)     # ledger → writer/recovery
    repairs: dict[int, Driver] = field(default_factory=dict)
    ticking: TickSet = field(default_factory=TickSet)
    context: DriverContext | None = None
    # The node's lease and view of the others: the node's own code over the
    # simulated etcd, one per incarnation (a crash halts it, a restart makes anew).
    membership: ClusterMembership | None = None
    # A storage fault: the disk refuses writes (full, or the journal's device
    # failed), so the engine refuses every journaled request and the node
    # publishes itself read-only; reads go on.
    disk_failed: bool = False
    # The node's reads (its own ClusterReads) and its metadata cache, which the
    # watch keeps: it lags etcd by a message, and goes stale while cut from it.
    reads: ClusterReads | None = None
    cache: dict[int, tuple[LedgerMetadata, int]] = field(default_factory=dict)
    cache_stale: bool = False

    def machine(self, ledger_id: int) -> LedgerWriter | LedgerRecovery | None:
        driver = self.drivers.get(ledger_id)
        machine = driver.machine if driver is not None else None
        assert not isinstance(machine, LedgerRereplicator)
        return machine


@dataclass
class Client:
    """One client per ledger, appending its payloads in order, exactly once."""

    ledger_id: int
    index: int = 0
    batch: int = 1  # payloads index … index + batch - 1 are in flight
    token: asyncio.Future[AddDone] | None = None
    deadline: float = 0.0
    stopped: bool = False
    tries: int = 0


class Simulation:
    """One seeded run; ``run()`` raises ``InvariantBroken`` on a violation."""

    def __init__(self, seed: int, *, replica_rules: ReplicaRules | None = None,
                 writer_rules: WriterRules | None = None,
                 recovery_rules: RecoveryRules | None = None, run_s: float = RUN_S,
                 takeover_p: float = 0.04, lease_exclusion: bool = True,
                 trusts_lapsed_writer: bool = False, probes_past_lac: bool = True,
                 takeover_on_view: bool = False,
                 verbose: bool = False, out: Callable[[str], None] = print) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.replica_rules = replica_rules or ReplicaRules()
        self.writer_rules = writer_rules or WriterRules()
        self.recovery_rules = recovery_rules or RecoveryRules()
        self.run_s = run_s
        self.takeover_p = takeover_p
        # A node takes over or fences a ledger only once its writer's lease is gone
        # from etcd, as the node does (§6.6); off, takeovers hit live writers at will
        # (fencing's worst case) and nodes read the end from bookies, never trusting
        # their own writer.
        self.lease_exclusion = lease_exclusion
        # Bugs to inject (the tests prove invariant 10 catches them).
        self.trusts_lapsed_writer = trusts_lapsed_writer
        self.probes_past_lac = probes_past_lac
        self.takeover_on_view = takeover_on_view
        self.verbose = verbose
        self.out = out
        self.loop = SimulatedLoop()
        self.loop.after_step = self.check
        self.clock = SimClock(self.loop)
        self.etcd = InProcessEtcd()
        self.keys = ClusterKeys("sim")
        rng = self.rng
        self.nodes = {f"n{i}": Node(f"n{i}") for i in range(rng.choice((3, 4, 5)))}
        for node_id, node in self.nodes.items():
            node.context = DriverContext(
                bookies=SimBookieClient(self, node_id), store=SimMetadataStore(self, node_id),
                spawn=self.loop.spawn, batch_count_max=BATCH_COUNT_MAX,
                batch_bytes_max=BATCH_BYTES_MAX, wake=node.ticking.add)
        self.drop_p = rng.choice((0.0, 0.02, 0.08))
        self.dup_p = rng.choice((0.0, 0.05))
        self.slow_p = rng.choice((0.0, 0.05, 0.15))
        self.crash_every_s = rng.choice((1.0, 2.5, 1e9))
        self.partition_every_s = rng.choice((1.5, 4.0, 1e9))
        self.disk_fault_every_s = rng.choice((2.0, 5.0, 1e9))
        self.cas_answer_loss_p = rng.choice((0.0, 0.1))
        self.faults = True
        self.blocked: set[frozenset[str]] = set()
        # The ledgers' metadata (etcd's, for the driver's CAS): value + revision.
        self.store: dict[int, tuple[LedgerMetadata, int]] = {}
        self.revision = 0
        self.clients: dict[int, Client] = {}
        # The checker's knowledge.
        self.acked: dict[tuple[int, int], bytes] = {}
        # The highest readable end any node named per ledger (acks, reads, closes).
        self.ends: dict[int, int] = {}
        self.ends_checked = 0
        self.seen: dict[tuple[int, int], bytes] = {}       # first bytes read per entry
        self.epoch_values: dict[tuple[int, int, int], bytes] = {}
        self.commit_point: dict[int, int] = {}
        # What the commit point is made of: the highest LAC any replica was told,
        # and the drivers of writers and recoveries (live ones hold the writer's LAC).
        self.replica_lac: dict[int, int] = {}
        self.writing: dict[int, list[Driver]] = {}
        self.dirty: dict[int, set[int]] = {}
        self.max_epoch: dict[int, int] = {}
        self.closed_end: dict[int, tuple[int, int]] = {}
        self.reads_checked = 0
        self.takeovers = 0
        self.disk_refusals = 0

    # --- trace and scheduling ---------------------------------------------------

    def log(self, text: str) -> None:
        if self.verbose:
            self.out(f"{self.clock.t:8.3f} {text}")

    @property
    def steps(self) -> int:
        return self.loop.steps

    def at(self, delay_s: float, action: Callable[[], None]) -> None:
        self.loop.call_later(delay_s, action)

    def _latency(self) -> float:
        if self.rng.random() < self.slow_p:
            return self.rng.uniform(0.2, 1.0)  # late enough to reorder and time out
        return self.rng.uniform(0.001, 0.02)

    # --- run ----------------------------------------------------------------------

    def run(self) -> Simulation:
        # The driver logs what a node would (an unknown CAS outcome, …): into the
        # trace when verbose, nowhere otherwise (thousands of seeds).
        driver_log = logging.getLogger("ledgerd.cluster")
        to_trace = _TraceHandler(self) if self.verbose else None
        was_disabled, driver_log.disabled = driver_log.disabled, not self.verbose
        if to_trace is not None:
            driver_log.addHandler(to_trace)
        try:
            for node in self.nodes.values():
                self._boot(node)
            # Writers are made under a lease, as the node's creates are.
            self._loop_until(lambda: all(self._lease_ok(n) for n in self.nodes.values()),
                             5 * MEMBERSHIP_TTL_S)
            for index in range(self.rng.choice((1, 2, 3))):
                self._create_ledger(index + 1)
            for node_id in self.nodes:
                self.at(self.rng.uniform(0, TICK_S), lambda n=node_id: self._tick(n))
            self.at(0.0, self._workload)
            self.at(self.crash_every_s * self.rng.random(), self._fault_crash)
            self.at(self.partition_every_s * self.rng.random(), self._fault_partition)
            self.at(self.disk_fault_every_s * self.rng.random(), self._fault_disk)
            self.at(AUDIT_EVERY_S, self._audit)
            self._loop(self.clock.t + self.run_s)
            self._heal()
        finally:
            self.loop.shut_down()
            driver_log.disabled = was_disabled
            if to_trace is not None:
                driver_log.removeHandler(to_trace)
        return self

    def _loop(self, until_s: float) -> None:
        self.loop.run_until(until_s)

    def _loop_until(self, done: Callable[[], bool], limit_s: float) -> None:
        if not done():
            self.loop.run_until(self.clock.t + limit_s, done)

    def _driver(self, node: Node, machine: Machine) -> Driver:
        """As the node's runtime makes one: ticked while its machine has timers."""
        assert node.context is not None
        driver = Driver(machine, node.context,
                        lambda d, effect: self._on_effect(node, d, effect))
        node.ticking.add(driver)
        if not isinstance(machine, LedgerRereplicator):
            self.writing.setdefault(machine.ledger_id, []).append(driver)
        return driver

    # --- ledgers, clients ------------------------------------------------------------

    def _create_ledger(self, ledger_id: int) -> None:
        e, qw, qa = self.rng.choice([q for q in QUORUMS if q[0] <= len(self.nodes)])
        writer = self.rng.choice(sorted(self.nodes))
        bookies = tuple(self.rng.sample(sorted(self.nodes), e))
        md = LedgerMetadata(ledger_id=ledger_id, state=LedgerState.OPEN, ensemble_size=e,
                            write_quorum=qw, ack_quorum=qa,
                            ensembles=(Fragment(0, bookies, 1),), writer=WriterRef(writer, 1))
        self._store_put(md)
        node = self.nodes[writer]
        if self._lease_ok(node):
            # A node creates only under its lease (else the ledger starts with its
            # writer gone, and a client's first add takes it over).
            node.drivers[ledger_id] = self._driver(
                node, self._writer(writer, md, self.store[ledger_id][1], -1, 0))
        self.clients[ledger_id] = Client(ledger_id)
        self.log(f"create L{ledger_id} E={e} Qw={qw} Qa={qa} on {bookies} writer {writer}")

    def _writer(self, node_id: str, md: LedgerMetadata, revision: int, lac: int,
                length: int) -> LedgerWriter:
        membership = self.nodes[node_id].membership
        assert membership is not None
        return LedgerWriter(node_id=node_id, metadata=md, revision=revision, clock=self.clock,
                            membership=membership, next_entry_id=lac + 1, lac=lac,
                            length=length, rules=self.writer_rules,
                            add_timeout_s=ADD_TIMEOUT_S)

    def payload(self, ledger_id: int, index: int) -> bytes:
        return f"s{self.seed}-L{ledger_id}-#{index}".encode() * (1 + index % 3)

    def _workload(self) -> None:
        if self.faults:
            self.at(self.rng.expovariate(12.0), self._workload)
        for client in self.clients.values():
            if client.token is None and not client.stopped:
                self._client_send(client)
            elif client.token is not None and self.clock.t >= client.deadline:
                self.log(f"client L{client.ledger_id} #{client.index} timed out")
                client.token = None  # unknown outcome: retry the same id
        if not self.faults:
            return
        roll = self.rng.random()
        ledger_id = self.rng.choice(sorted(self.clients))
        node_id = self.rng.choice(sorted(self.nodes))
        if roll < 0.02:
            self._start_recovery(node_id, ledger_id, close=True)
        elif roll < 0.02 + self.takeover_p:
            self._start_recovery(node_id, ledger_id, close=False)
        elif roll < 0.26 + self.takeover_p:
            self._client_read(node_id, ledger_id)

    def _client_send(self, client: Client) -> None:
        md, _ = self.store[client.ledger_id]
        if md.state is LedgerState.CLOSED:
            client.stopped = True
            return
        client.tries += 1
        token: asyncio.Future[AddDone] = self.loop.create_future()
        token.add_done_callback(lambda answer: self._client_answer(client, answer))
        client.token, client.deadline = token, self.clock.t + CLIENT_TIMEOUT_S
        node = self.nodes[md.writer.node]
        driver = node.drivers.get(client.ledger_id) if node.up else None
        machine = driver.machine if driver is not None else None
        if driver is None or not isinstance(machine, LedgerWriter) or machine.recovering \
                or machine.done or not self._lease_ok(node):
            client.token = None
            if not self._registered(md.writer.node) or not node.up \
                    or (md.state is LedgerState.OPEN and machine is None):
                self._start_recovery(self.rng.choice(sorted(self.nodes)), client.ledger_id,
                                     close=False)
            return
        data = self.payload(client.ledger_id, client.index)
        client.batch = 1
        if client.index == machine.next_entry_id and self.rng.random() < BATCH_P:
            # A batch (HTTP batch, stream message): new entries, one token.
            client.batch = self.rng.randint(2, 4)
            try:
                machine.add_many([self.payload(client.ledger_id, client.index + i)
                                  for i in range(client.batch)], token)
            except LedgerdError:
                client.token = None
                return
            self.log(f"client L{client.ledger_id} batch #{client.index}+{client.batch} via "
                     f"{node.node_id}")
            driver.schedule_drain()  # as the node does: a turn's adds leave together
            return
        try:
            outcome = machine.add(data, token, entry_id=client.index)
        except EntryConflict as exc:
            raise InvariantBroken(9, f"seed {self.seed}: L{client.ledger_id} retry of "
                                  f"#{client.index} conflicted: {exc}") from exc
        except LedgerdError:
            client.token = None
            return
        self.log(f"client L{client.ledger_id} add #{client.index} via {node.node_id}: "
                 f"{outcome.value}")
        if outcome is AddOutcome.NEEDS_COMPARE:
            self._compare(node.node_id, client, token, data)
        driver.schedule_drain()

    def _client_answer(self, client: Client, answer: asyncio.Future[AddDone]) -> None:
        """The writer's answer to the add in flight, through its token (the driver
        resolves a token that is a future, as it does for the node)."""
        if answer.cancelled():
            return
        error = answer.exception()
        if client.token is not answer:
            return
        if error is None:
            self._client_acked(client, answer.result().entry_id)
            return
        self.log(f"client L{client.ledger_id} #{client.index} failed: {error!r}")
        client.token = None
        if isinstance(error, LedgerClosed):
            client.stopped = self.store[client.ledger_id][0].state is LedgerState.CLOSED

    def _compare(self, node_id: str, client: Client, token: asyncio.Future[AddDone],
                 data: bytes) -> None:
        """§6.5: entry_id ≤ LAC, so read it and compare bytes."""
        def done(found: bytes | None) -> None:
            if client.token is not token:
                return
            if found is None:
                client.token = None
            elif found != data:
                raise InvariantBroken(9, f"L{client.ledger_id} #{client.index}: retry found "
                                      "other bytes")
            else:
                self._client_acked(client, client.index)
        self._read_entry(node_id, client.ledger_id, client.index, done)

    def _client_acked(self, client: Client, entry_id: int) -> None:
        """The add in flight is acknowledged, ``entry_id`` its last entry."""
        first = entry_id - client.batch + 1
        if first != client.index:
            raise InvariantBroken(9, f"L{client.ledger_id}: payloads #{client.index}+"
                                  f"{client.batch} acknowledged ending at entry {entry_id}")
        for acked in range(first, entry_id + 1):
            key = (client.ledger_id, acked)
            self.acked[key] = self.payload(*key)
            self.dirty.setdefault(client.ledger_id, set()).add(acked)
        self.ends[client.ledger_id] = max(self.ends.get(client.ledger_id, -1), entry_id)
        self.log(f"ACK L{client.ledger_id} entries {first}-{entry_id}")
        client.index = entry_id + 1
        client.batch = 1
        client.token = None
        client.tries = 0

    # --- recoveries, reads ---------------------------------------------------------------

    def _start_recovery(self, node_id: str, ledger_id: int, *, close: bool) -> None:
        node = self.nodes[node_id]
        driver = node.drivers.get(ledger_id)
        current = node.machine(ledger_id)
        if not node.up or (driver is not None and not driver.done):
            if close and driver is not None and isinstance(current, LedgerWriter) \
                    and not current.recovering and not current.done:
                try:
                    current.close(("close", ledger_id))
                    self.log(f"{node_id} closes L{ledger_id} as its writer")
                    driver.drain()
                except LedgerdError:
                    pass
            return
        md, revision = self.store[ledger_id]
        if md.state is LedgerState.CLOSED:
            return
        writer_node = md.writer.node
        membership = node.membership
        assert membership is not None
        if self.lease_exclusion and not membership.lease_ok:
            return  # no takeover without a lease of its own (the node's check_lease)
        if self.lease_exclusion and writer_node != node_id \
                and (membership.is_live(writer_node)
                     or (not self.takeover_on_view and self._registered(writer_node))):
            # (The node asks etcd of a writer its view does not list: Writers.
            # _writer_alive; the view lags a new registration.)
            # The writer is live: a close goes to it (forwarded), a takeover waits.
            if close and self._reachable(node_id, writer_node) \
                    and self.nodes[writer_node].up:
                self._start_recovery(writer_node, ledger_id, close=True)
            return
        recovery = LedgerRecovery(node_id=node_id, metadata=md, revision=revision,
                                  clock=self.clock, membership=membership, close=close,
                                  token=("fence", ledger_id), rules=self.recovery_rules,
                                  writer_rules=self.writer_rules, retry_s=0.3,
                                  add_timeout_s=ADD_TIMEOUT_S)
        driver = node.drivers[ledger_id] = self._driver(node, recovery)
        self.takeovers += 1
        self.log(f"{node_id} {'fences' if close else 'takes over'} L{ledger_id} "
                 f"(epoch {md.epoch} -> {md.epoch + 1})")
        recovery.start()
        driver.drain()

    def _client_read(self, node_id: str, ledger_id: int) -> None:
        """A client reads through a node: the node's own ClusterReads establishes the
        readable end (§8.1: its writer while its lease holds, else the writer asked,
        else a covering set's LAC once entry LAC + 1 is known not acknowledged),
        then fetches one entry at or below it from the write set."""
        node = self.nodes[node_id]
        reads = node.reads
        if not node.up or reads is None:
            return
        floor = self.ends.get(ledger_id, -1)
        incarnation = node.incarnation

        async def read() -> None:
            try:
                view = await reads.view(ledger_id)
            except LedgerdError:
                return  # NotReady, no answer: the client is told to retry
            if node.incarnation != incarnation:
                return  # the node crashed meanwhile: its answer never left
            self._answer_end(node_id, ledger_id, view.lac, floor, "its view")
            if view.lac < 0:
                return
            entry_id = self.rng.randint(max(0, view.lac - 5), view.lac)
            try:
                found = await reads.fetch(view.metadata, entry_id)
            except LedgerdError:
                return
            if node.incarnation == incarnation:
                self._read_checked(node_id, ledger_id, entry_id, view.lac, found.payload)
        self.loop.spawn(read())

    def _answer_end(self, node_id: str, ledger_id: int, end: int, floor: int,
                    source: str) -> None:
        """Invariant 10: an end named is at least every end named before the read began."""
        if end < floor:
            raise InvariantBroken(10, f"L{ledger_id}: {node_id} named end {end} from "
                                  f"{source}, below the {floor} named before the read")
        self.ends[ledger_id] = max(self.ends.get(ledger_id, -1), end)
        self.ends_checked += 1

    def _read_checked(self, node_id: str, ledger_id: int, entry_id: int, lac: int,
                      found: bytes) -> None:
        """Invariant 4: nothing past the end, and every read of an entry alike."""
        md, _ = self.store[ledger_id]
        self.reads_checked += 1
        if md.last_entry_id is not None and entry_id > md.last_entry_id:
            raise InvariantBroken(4, f"L{ledger_id} entry {entry_id} read past the "
                                  f"closed end {md.last_entry_id}")
        key = (ledger_id, entry_id)
        expected = self.acked.get(key, self.seen.setdefault(key, found))
        if found != expected:
            raise InvariantBroken(4, f"L{ledger_id} entry {entry_id}: read {found!r}, "
                                  f"expected {expected!r}")
        self.log(f"{node_id} read L{ledger_id} entry {entry_id} (lac {lac}) ok")

    def _read_entry(self, node_id: str, ledger_id: int, entry_id: int,
                    done: Callable[[bytes | None], None]) -> None:
        md, _ = self.store[ledger_id]
        candidates = list(read_candidates(md, entry_id, local=node_id))
        state = {"finished": False}

        def attempt() -> None:
            if state["finished"]:
                return
            if not candidates:
                state["finished"] = True
                done(None)
                return
            bookie = candidates.pop(0)
            self._rpc(node_id, bookie, ReadEntry(ledger_id, entry_id), on_reply)
            self.at(0.3, attempt)

        def on_reply(bookie: str, reply: BookieReply) -> None:
            if state["finished"]:
                return
            if isinstance(reply, EntryFound) and counts_as_replica(md, entry_id, reply.epoch):
                state["finished"] = True
                done(reply.payload)
        attempt()

    # --- the network ------------------------------------------------------------------

    def _reachable(self, a: str, b: str) -> bool:
        return frozenset((a, b)) not in self.blocked

    def _rpc(self, src: str, dst: str, request: BookieRequest,
             on_reply: Callable[[str, BookieReply], None]) -> None:
        """A request from ``src`` to bookie ``dst``; its answer goes to ``on_reply``
        if ``src`` is still the same incarnation."""
        incarnation = self.nodes[src].incarnation
        copies = 2 if self.rng.random() < self.dup_p else 1
        for _ in range(copies):
            if self.rng.random() < self.drop_p or not self._reachable(src, dst):
                continue
            self.at(self._latency(), lambda: self._serve(src, incarnation, dst, request,
                                                         on_reply))

    def _serve(self, src: str, incarnation: int, dst: str, request: BookieRequest,
               on_reply: Callable[[str, BookieReply], None]) -> None:
        bookie = self.nodes[dst]
        if not bookie.up:
            return
        ledger_id = request.ledger_id
        before = bookie.replicas.get(ledger_id)
        fenced_before = before.fenced_epoch if before is not None else 0
        if bookie.disk_failed and not isinstance(request, READS):
            # The engine cannot journal it: nothing changes, and the node's replica
            # server answers what it answers for any engine refusal.
            replica, reply = before, Unavailable(ledger_id, "ReadOnly: disk failed")
            self.disk_refusals += 1
        else:
            replica, reply = self.replica_rules.apply(before, request)
        if replica is None:
            bookie.replicas.pop(ledger_id, None)
        else:
            bookie.replicas[ledger_id] = replica
            self._observe_store(dst, request, reply, fenced_before, replica)
            if replica.lac > self.replica_lac.get(ledger_id, -1):
                self.replica_lac[ledger_id] = replica.lac
        if self.rng.random() < self.drop_p or not self._reachable(src, dst):
            return

        def deliver() -> None:
            node = self.nodes[src]
            if node.up and node.incarnation == incarnation:
                on_reply(dst, reply)
        self.at(self._latency(), deliver)

    def _observe_store(self, bookie: str, request: BookieRequest, reply: BookieReply,
                       fenced_before: int, replica: Replica) -> None:
        if isinstance(request, AddEntries) and isinstance(reply, AddsOk) \
                and request.epoch < fenced_before:
            raise InvariantBroken(6, f"{bookie} accepted L{request.ledger_id} entries "
                                  f"{reply.entry_ids} at epoch {request.epoch} after a fence "
                                  f"at {fenced_before}")
        if isinstance(request, CopyEntries | AddEntries):
            entry_ids = [c.entry_id for c in request.entries]
        else:
            entry_id = getattr(request, "entry_id", None)
            entry_ids = [] if entry_id is None else [entry_id]
        for entry_id in entry_ids:
            if entry_id not in replica.entries:
                continue
            stored = replica.entries[entry_id]
            key = (request.ledger_id, entry_id, stored.epoch)
            if self.epoch_values.setdefault(key, stored.payload) != stored.payload:
                raise InvariantBroken(5, f"L{request.ledger_id} entry {entry_id}: two "
                                      f"payloads at epoch {stored.epoch}")
            self.dirty.setdefault(request.ledger_id, set()).add(entry_id)

    # --- nodes: effects, ticks, metadata --------------------------------------------------

    def _on_effect(self, node: Node, driver: Driver, effect: Effect) -> None:
        """What the driver hands its owner (a client's token it resolves itself)."""
        machine = driver.machine
        ledger_id = machine.ledger_id
        if isinstance(effect, LedgerClosedDone):
            self.log(f"{node.node_id} closed L{ledger_id} at {effect.metadata.last_entry_id}")
            if node.drivers.get(ledger_id) is driver:
                del node.drivers[ledger_id]
        elif isinstance(effect, Resumed):
            assert isinstance(machine, LedgerRecovery) and machine.writer is not None
            self.log(f"{node.node_id} resumed L{ledger_id} at epoch {machine.epoch}, "
                     f"lac {machine.writer.lac}")
            driver.machine = machine.writer
        elif isinstance(effect, Stopped):
            self.log(f"{node.node_id} stopped L{ledger_id}: {effect.error!r}")
            if node.drivers.get(ledger_id) is driver:
                del node.drivers[ledger_id]
            if node.repairs.get(ledger_id) is driver:
                del node.repairs[ledger_id]
        elif isinstance(effect, RepairDone):
            self.log(f"{node.node_id} re-replicated L{ledger_id}: {effect.entries_copied} "
                     "copies")
            if node.repairs.get(ledger_id) is driver:
                del node.repairs[ledger_id]

    async def etcd_trip(self, node_id: str, *, answer: bool) -> None:
        """One way between ``node_id`` and etcd: a request (``answer`` False) or an
        answer.  A cut link, or an answer lost, fails after the call's timeout."""
        lost = answer and self.rng.random() < self.cas_answer_loss_p
        if lost or not self._reachable(node_id, "etcd"):
            await asyncio.sleep(CALL_TIMEOUT_S)
            raise MetadataUnavailable(f"{node_id}: etcd did not answer")
        await asyncio.sleep(self._latency())

    def _store_put(self, md: LedgerMetadata) -> None:
        old = self.store.get(md.ledger_id)
        if old is not None:
            before = old[0]
            if md.epoch < before.epoch:
                raise InvariantBroken(7, f"L{md.ledger_id}: epoch went back "
                                      f"{before.epoch} -> {md.epoch}")
            if before.state is LedgerState.CLOSED and (
                    md.state, md.last_entry_id, md.length) != (
                    before.state, before.last_entry_id, before.length):
                raise InvariantBroken(7, f"L{md.ledger_id}: reopened or end changed after "
                                      "CLOSED")
        self.revision += 1
        self.store[md.ledger_id] = (md, self.revision)
        for node in self.nodes.values():
            self._watch_delivers(node, md.ledger_id, (md, self.revision))
        if md.state is LedgerState.CLOSED and md.last_entry_id is not None:
            self.ends[md.ledger_id] = max(self.ends.get(md.ledger_id, -1), md.last_entry_id)
        self.dirty.setdefault(md.ledger_id, set()).add(-1)  # re-check everything
        self.log(f"metadata L{md.ledger_id} r{self.revision}: {md.state.value} epoch "
                 f"{md.epoch} writer {md.writer.node} fragments "
                 f"{[(f.first_entry_id, f.bookies, f.epoch) for f in md.ensembles]}"
                 + (f" end {md.last_entry_id}" if md.last_entry_id is not None else ""))

    def _watch_delivers(self, node: Node, ledger_id: int,
                        value: tuple[LedgerMetadata, int]) -> None:
        """A change reaches the node's cache a message later, or, while it is cut
        from etcd, when its watch is made again (a full re-read)."""
        if not self._reachable(node.node_id, "etcd"):
            node.cache_stale = True
            return
        incarnation = node.incarnation

        def deliver() -> None:
            held = node.cache.get(ledger_id)
            if node.incarnation == incarnation and (held is None or held[1] < value[1]):
                node.cache[ledger_id] = value
        self.at(self._latency(), deliver)

    def _tick(self, node_id: str) -> None:
        """The node's tick loop (ClusterRuntime): the lease first, then the drivers."""
        self.at(TICK_S, lambda: self._tick(node_id))
        node = self.nodes[node_id]
        if not node.up or node.membership is None:
            return
        node.membership.check_lease()
        if node.cache_stale and self._reachable(node_id, "etcd"):
            node.cache_stale = False
            for ledger_id, value in self.store.items():
                self._watch_delivers(node, ledger_id, value)
        node.ticking.tick()
        for ledger_id, driver in list(node.drivers.items()):
            if driver.done:
                del node.drivers[ledger_id]

    def _lease_lost(self, node: Node) -> None:
        """§6.6, the node's Writers.drop_all: our lease may have expired and anything
        we write may be taken over, so writers stop and recoveries are abandoned."""
        if self.trusts_lapsed_writer:
            return  # the injected bug: keep writing past the lease
        self.log(f"{node.node_id} lost its lease")
        error = WriterSuperseded(f"{node.node_id}: lease expired")
        for driver in list(node.drivers.values()):
            machine = driver.machine
            if isinstance(machine, LedgerWriter):
                machine.stop(error)
                driver.drain()
                continue
            if isinstance(machine, LedgerRecovery) and machine.writer is not None:
                machine.writer.stop(error)
                driver.drain()
            driver.abandon()
        node.drivers.clear()

    @staticmethod
    def _writer_of(node: Node, ledger_id: int) -> LedgerWriter | None:
        """As Writers.held: this node's writer of the ledger, not recovering or done."""
        machine = node.machine(ledger_id)
        if isinstance(machine, LedgerWriter) and not machine.done and not machine.recovering:
            return machine
        return None

    def _lease_ok(self, node: Node) -> bool:
        return node.membership is not None and node.membership.lease_ok

    def _registered(self, node_id: str) -> bool:
        """Whether etcd holds the node's membership key (its lease is alive)."""
        return self.etcd.get(self.keys.bookie(node_id)) is not None

    def _boot(self, node: Node) -> None:
        """Start the node's membership, as the node's start does, retrying until etcd
        answers (a supervisor restarting the process)."""
        incarnation = node.incarnation
        etcd = self.etcd.client(SimEtcdLink(self, node.node_id))
        membership = node.membership = ClusterMembership(
            etcd, self.keys, bookie_id=node.node_id, url=f"sim://{node.node_id}",
            ttl_s=MEMBERSHIP_TTL_S, clock=self.clock.now,
            status=lambda: LocalStatus(read_only=node.disk_failed, disk_usage=0.0,
                                       replicas=len(node.replicas)),
            on_lease_lost=lambda: self._lease_lost(node))

        node.cache = dict(self.store)  # loaded at start, then kept by the watch
        node.cache_stale = False
        reads_kind = ClusterReads if self.probes_past_lac else _SkipsTheProbe
        node.reads = reads_kind(
            me=node.node_id, metadata=SimMetadataView(node),  # type: ignore[arg-type]
            membership=_AlwaysLeased(membership) if self.trusts_lapsed_writer  # type: ignore[arg-type]
            else membership,
            bookies=node.context.bookies if node.context is not None else None,  # type: ignore[arg-type]
            forward=SimForward(self, node.node_id),  # type: ignore[arg-type]
            writer_of=(lambda lid: self._writer_of(node, lid)) if self.lease_exclusion
            else (lambda lid: None), remote=None)

        async def start() -> None:
            while node.incarnation == incarnation:
                try:
                    await membership.start()
                    return
                except MetadataUnavailable:
                    await asyncio.sleep(0.5)
        self.loop.spawn(start())

    # --- faults -------------------------------------------------------------------------

    def _fault_crash(self) -> None:
        if not self.faults:
            return
        self.at(self.rng.expovariate(1 / self.crash_every_s), self._fault_crash)
        node = self.nodes[self.rng.choice(sorted(self.nodes))]
        if not node.up:
            return
        node.up = False
        node.incarnation += 1
        for driver in (*node.drivers.values(), *node.repairs.values()):
            driver.abandon()  # a crashed writer loses everything in memory
        node.drivers.clear()
        node.repairs.clear()
        node.ticking.clear()
        if node.membership is not None:
            node.membership.halt()  # its lease expires in etcd on its own
        self.log(f"CRASH {node.node_id}")
        self.at(self.rng.uniform(0.2, 3.0), lambda: self._restart(node))

    def _restart(self, node: Node) -> None:
        if not node.up:
            node.up = True
            self.log(f"RESTART {node.node_id}")
            self._boot(node)

    def _fault_disk(self) -> None:
        if not self.faults:
            return
        self.at(self.rng.expovariate(1 / self.disk_fault_every_s), self._fault_disk)
        node = self.nodes[self.rng.choice(sorted(self.nodes))]
        if node.disk_failed:
            return
        node.disk_failed = True
        self.log(f"DISK FAILED {node.node_id}")

        def replaced() -> None:
            node.disk_failed = False
            self.log(f"DISK BACK {node.node_id}")
        self.at(self.rng.uniform(0.5, 3.0), replaced)

    def _fault_partition(self) -> None:
        if not self.faults:
            return
        self.at(self.rng.expovariate(1 / self.partition_every_s), self._fault_partition)
        victim = self.rng.choice(sorted(self.nodes))
        others = [n for n in (*self.nodes, "etcd") if n != victim]
        cut = {frozenset((victim, o)) for o in others if self.rng.random() < 0.7}
        self.blocked |= cut
        self.log(f"PARTITION {victim} from {sorted(n for c in cut for n in c if n != victim)}")
        self.at(self.rng.uniform(0.3, 2.5), lambda: self.blocked.difference_update(cut))

    # --- the auditor ---------------------------------------------------------------------

    def _audit(self) -> None:
        if self.faults:
            self.at(AUDIT_EVERY_S, self._audit)
        # One auditor: the registered node with the lowest id (the node elects one
        # with a key under its lease), acting on its own view, as the node's does.
        registered = [n for n in sorted(self.nodes) if self._registered(n)]
        if not registered:
            return
        auditor = self.nodes[registered[0]]
        membership = auditor.membership
        if not auditor.up or membership is None or not membership.lease_ok:
            return
        live = membership.writable_bookies()
        now = self.clock.t
        lost = {b for b, since in membership.absent_since.items()
                if not membership.is_live(b) and now - since >= REREPLICATION_DELAY_S}
        for ledger_id, (md, revision) in sorted(self.store.items()):
            if ledger_id in auditor.repairs:
                continue
            # Small ranges, so that ranges cut by count and by bytes meet the faults.
            repair = LedgerRereplicator(metadata=md, revision=revision, lost=lost,
                                        writable=live, clock=self.clock, retry_s=0.3,
                                        window=2, batch_entries_max=3,
                                        batch_bytes_max=1 + ledger_id % 3 * 20,
                                        local=auditor.node_id)
            driver = auditor.repairs[ledger_id] = self._driver(auditor, repair)
            repair.start()
            driver.drain()

    # --- invariants -----------------------------------------------------------------------

    def check(self) -> None:
        """docs/cluster.md §11, on what changed since the last step."""
        for ledger_id, (md, _) in self.store.items():
            point = self._commit_point(ledger_id, md)
            old = self.commit_point.get(ledger_id, -1)
            dirty = self.dirty.pop(ledger_id, None)
            if point > old:
                self.commit_point[ledger_id] = point
                dirty = dirty or set()
                dirty.update(range(old + 1, point + 1))
            if not dirty:
                continue
            if -1 in dirty:
                dirty = set(range(point + 1)) | {e for (lid, e) in self.acked if lid == ledger_id}
                self._check_closed(ledger_id, md)
            for entry_id in dirty:
                if entry_id <= point or (ledger_id, entry_id) in self.acked:
                    self._check_entry(ledger_id, md, entry_id, point)

    def _commit_point(self, ledger_id: int, md: LedgerMetadata) -> int:
        if md.state is LedgerState.CLOSED:
            assert md.last_entry_id is not None
            return md.last_entry_id
        point = self.replica_lac.get(ledger_id, -1)
        drivers = self.writing.get(ledger_id)
        if drivers:
            for driver in drivers:
                if driver.done:
                    drivers[:] = [d for d in drivers if not d.done]
                    break
            for driver in drivers:
                machine = driver.machine
                if isinstance(machine, LedgerWriter) and machine.lac > point:
                    point = machine.lac
        return point

    def _check_closed(self, ledger_id: int, md: LedgerMetadata) -> None:
        if md.state is not LedgerState.CLOSED:
            return
        assert md.last_entry_id is not None and md.length is not None
        end = (md.last_entry_id, md.length)
        if self.closed_end.setdefault(ledger_id, end) != end:
            raise InvariantBroken(7, f"L{ledger_id}: closed end changed")
        lost = [e for (lid, e) in self.acked if lid == ledger_id and e > md.last_entry_id]
        if lost:
            raise InvariantBroken(1, f"L{ledger_id} closed at {md.last_entry_id} without "
                                  f"acknowledged entries {sorted(lost)}")
        expected = sum(len(self.payload(ledger_id, e)) for e in range(md.last_entry_id + 1))
        if md.length != expected:
            raise InvariantBroken(3, f"L{ledger_id}: closed length {md.length}, entries "
                                  f"hold {expected}")

    def _check_entry(self, ledger_id: int, md: LedgerMetadata, entry_id: int,
                     point: int) -> None:
        fragment = md.fragment_of(entry_id)
        values = []
        for bookie in write_set(fragment, entry_id, md.write_quorum):
            replica = self.nodes[bookie].replicas.get(ledger_id)
            stored = replica.entries.get(entry_id) if replica is not None else None
            if stored is not None and stored.epoch >= fragment.epoch:
                values.append(stored.payload)
        expected = self.acked.get((ledger_id, entry_id))
        number = 1 if expected is not None else 2
        if len(values) < md.ack_quorum:
            raise InvariantBroken(number, f"L{ledger_id} entry {entry_id} (commit point "
                                  f"{point}) has {len(values)} valid replicas < Qa="
                                  f"{md.ack_quorum} in {fragment.bookies}")
        if len(set(values)) > 1 or (expected is not None and values[0] != expected):
            raise InvariantBroken(3, f"L{ledger_id} entry {entry_id}: replicas disagree "
                                  f"{set(values)!r} (acknowledged {expected!r})")

    # --- the end: heal, close everything, re-replicate, check Qw copies ---------------

    def _heal(self) -> None:
        self.faults = False
        self.blocked.clear()
        for node in self.nodes.values():
            node.disk_failed = False
        self.drop_p = self.dup_p = self.slow_p = self.cas_answer_loss_p = 0.0
        for node in self.nodes.values():
            self._restart(node)
        # Calls sent into the faults fail (after their timeout) and leases that
        # lapsed meanwhile are noticed; then every node registers again and is
        # seen by every other (keep-alives every third of the TTL).
        self._loop(self.clock.t + MEMBERSHIP_TTL_S + CALL_TIMEOUT_S)
        self._loop_until(self._settled, 5 * MEMBERSHIP_TTL_S)
        for round_ in range(8):
            still_open = [lid for lid, (md, _) in sorted(self.store.items())
                          if md.state is not LedgerState.CLOSED]
            if not still_open:
                break
            for ledger_id in still_open:
                self._start_recovery(sorted(self.nodes)[round_ % len(self.nodes)],
                                     ledger_id, close=True)
            self._loop_until(lambda: all(md.state is LedgerState.CLOSED
                                         for md, _ in self.store.values()), 3.0)
        still_open = [lid for lid, (md, _) in self.store.items()
                      if md.state is not LedgerState.CLOSED]
        if still_open:
            raise InvariantBroken(0, f"ledgers {still_open} could not be closed once healed")
        for _ in range(3):
            self._loop_until(self._settled, 5 * MEMBERSHIP_TTL_S)
            self.at(0.0, self._audit)
            self._loop(self.clock.t)  # the audit starts its repairs
            self._loop_until(lambda: not any(n.repairs for n in self.nodes.values()), 5.0)
        for ledger_id, (md, _) in self.store.items():
            self._check_closed(ledger_id, md)
            assert md.last_entry_id is not None
            for entry_id in range(md.last_entry_id + 1):
                fragment = md.fragment_of(entry_id)
                values = [self.nodes[b].replicas[ledger_id].entries[entry_id].payload
                          for b in write_set(fragment, entry_id, md.write_quorum)
                          if ledger_id in self.nodes[b].replicas
                          and entry_id in self.nodes[b].replicas[ledger_id].entries
                          and self.nodes[b].replicas[ledger_id].entries[entry_id].epoch
                          >= fragment.epoch]
                if len(values) != md.write_quorum or len(set(values)) != 1:
                    raise InvariantBroken(3, f"L{ledger_id} entry {entry_id}: {len(values)} "
                                          f"valid replicas after re-replication (Qw="
                                          f"{md.write_quorum}), {len(set(values))} values")

    def _settled(self) -> bool:
        """Every node holds its lease and lists every other."""
        return all(n.membership is not None and n.membership.lease_ok
                   and all(n.membership.is_live(o) for o in self.nodes)
                   for n in self.nodes.values())

    def summary(self) -> dict[str, Any]:
        return {"seed": self.seed, "steps": self.steps, "acked": len(self.acked),
                "ends_checked": self.ends_checked,
                "takeovers": self.takeovers, "reads_checked": self.reads_checked,
                "disk_refusals": self.disk_refusals,
                "nodes": len(self.nodes),
                "closed_ends": {lid: md.last_entry_id for lid, (md, _) in self.store.items()}}


class _TraceHandler(logging.Handler):
    def __init__(self, sim: Simulation) -> None:
        super().__init__()
        self._sim = sim

    def emit(self, record: logging.LogRecord) -> None:
        self._sim.log(f"log {record.getMessage()}")


class SimEtcdLink:
    """``cluster.EtcdLink`` from one node to the simulated etcd: a cut link or a lost
    answer fails after the call's timeout; a watch breaks on a lost answer."""

    def __init__(self, sim: Simulation, node_id: str) -> None:
        self._sim = sim
        self._node_id = node_id

    async def request(self) -> None:
        await self._sim.etcd_trip(self._node_id, answer=False)

    async def answer(self) -> None:
        await self._sim.etcd_trip(self._node_id, answer=True)


class SimMetadataView:
    """The node's LedgerMetadataView: the cache its watch keeps, or etcd read now."""

    def __init__(self, node: Node) -> None:
        self._node = node

    async def read(self, ledger_id: int, *, fresh: bool = False,
                   ) -> tuple[LedgerMetadata, int]:
        cached = self._node.cache.get(ledger_id)
        if cached is not None and not fresh:
            return cached
        assert self._node.context is not None
        value = await self._node.context.store.read(ledger_id)  # the node's SimMetadataStore
        assert value is not None  # the simulation deletes no ledger
        return value


class SimForward:
    """The node's ForwardClient, for the one call reads make: the writer's view of
    its ledger (``ledger``), answered by that node's ClusterReads."""

    def __init__(self, sim: Simulation, node_id: str) -> None:
        self._sim = sim
        self._node_id = node_id

    async def ledger_call(self, url: str, ledger_id: int, action: str, *,
                          password: str | None = None) -> Any:
        assert action == "ledger", action
        sim, src = self._sim, self._node_id
        dst = url.removeprefix("sim://")
        target = sim.nodes[dst]
        started = sim.clock.t
        if not sim._reachable(src, dst) or sim.rng.random() < sim.drop_p:
            await asyncio.sleep(ASK_END_TIMEOUT_S)
            raise BookieUnreachable(f"{dst} did not answer")
        await asyncio.sleep(sim._latency())
        reads = target.reads
        if not target.up or reads is None:
            raise BookieUnreachable(f"{dst} is down")
        view = await reads.view(ledger_id, forwarded=True, need_length=True)
        await asyncio.sleep(sim._latency())
        if not sim._reachable(src, dst) or not target.up:
            await asyncio.sleep(max(0.0, started + ASK_END_TIMEOUT_S - sim.clock.t))
            raise BookieUnreachable(f"{dst}'s answer was lost")
        closed = view.metadata.state is LedgerState.CLOSED
        return SimpleNamespace(state=InfoState.CLOSED if closed else InfoState.OPEN,
                               last_add_confirmed=view.lac, length=view.length)


class _SkipsTheProbe(ClusterReads):
    """Broken: names the bookies' LAC without checking that entry LAC + 1 is not
    acknowledged (``probes_past_lac=False``)."""

    async def _check_nothing_past(self, md: LedgerMetadata, lac: int) -> None:
        return None


class _AlwaysLeased:
    """Broken: a membership that tells reads the lease holds even after it lapsed
    (with ``trusts_lapsed_writer``, which also keeps the writers)."""

    def __init__(self, membership: ClusterMembership) -> None:
        self._membership = membership

    @property
    def lease_ok(self) -> bool:
        return True

    def __getattr__(self, name: str) -> Any:
        return getattr(self._membership, name)


class SimBookieClient:
    """``cluster.BookieClient`` from one node over the simulated network."""

    def __init__(self, sim: Simulation, node_id: str) -> None:
        self._sim = sim
        self._node_id = node_id

    async def call(self, bookie_id: str, request: BookieRequest) -> BookieReply:
        sim = self._sim
        if not sim.nodes[bookie_id].up and sim._reachable(self._node_id, bookie_id):
            await asyncio.sleep(sim._latency())  # connection refused
            raise BookieUnreachable(f"{bookie_id} is down")
        answer: asyncio.Future[BookieReply] = sim.loop.create_future()

        def on_reply(_bookie: str, reply: BookieReply) -> None:
            if not answer.done():  # the network may deliver an answer twice
                answer.set_result(reply)

        def time_out() -> None:
            if not answer.done():
                answer.set_exception(BookieUnreachable(f"{bookie_id} did not answer"))
        sim._rpc(self._node_id, bookie_id, request, on_reply)
        timer = sim.loop.call_later(CALL_TIMEOUT_S, time_out)
        try:
            return await answer
        finally:
            timer.cancel()


class SimMetadataStore:
    """``cluster.MetadataStore`` from one node: the simulation's store, with
    etcd's compare-and-swap on revisions, reached over a link that can be cut
    and lose answers (an outcome the driver must then read back)."""

    def __init__(self, sim: Simulation, node_id: str) -> None:
        self._sim = sim
        self._node_id = node_id

    async def read(self, ledger_id: int) -> tuple[LedgerMetadata, int] | None:
        await self._sim.etcd_trip(self._node_id, answer=False)
        value = self._sim.store.get(ledger_id)
        await self._sim.etcd_trip(self._node_id, answer=True)
        return value

    async def create(self, metadata: LedgerMetadata) -> int | None:
        raise NotImplementedError("the simulation creates ledgers itself")

    async def compare_and_swap(self, metadata: LedgerMetadata, expected_revision: int,
                               ) -> Written | Current:
        sim = self._sim
        await sim.etcd_trip(self._node_id, answer=False)
        md, revision = sim.store[metadata.ledger_id]
        result: Written | Current
        if revision == expected_revision:
            sim._store_put(metadata)
            result = Written(sim.store[metadata.ledger_id][1])
        else:
            result = Current(md, revision)
        await sim.etcd_trip(self._node_id, answer=True)
        return result

    async def delete(self, ledger_id: int, expected_revision: int) -> bool:
        raise NotImplementedError("the simulation deletes no ledger")


def run_seed(seed: int, **kwargs: Any) -> Simulation:
    return Simulation(seed, **kwargs).run()


def _seeds(text: str) -> list[int]:
    first, _, last = text.partition("-")
    return list(range(int(first), int(last or first) + 1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.cluster.simulation",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, help="replay this seed")
    parser.add_argument("--seeds", default="0-99", help="a range such as 0-999")
    parser.add_argument("-v", "--verbose", action="store_true", help="print the trace")
    args = parser.parse_args(argv)
    seeds = [args.seed] if args.seed is not None else _seeds(args.seeds)
    failures = 0
    for seed in seeds:
        sim = Simulation(seed, verbose=args.verbose)
        try:
            sim.run()
        except InvariantBroken as exc:
            failures += 1
            print(f"seed {seed}: FAILED at step {sim.steps}, t={sim.clock.t:.3f}: {exc}")
            continue
        if args.seed is not None or args.verbose:
            print(f"seed {seed}: ok {sim.summary()}")
    print(f"{len(seeds) - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
