"""The auditor (docs/cluster.md §9): one node, elected in etcd, keeps every ledger
at its write quorum.

Election: ``{scope}/auditor`` created under this node's lease (create-revision
0); the others try again each round, and win once the holder's lease is gone.
Each round (``audit_interval_s``) the auditor looks at the ledgers whose metadata
changed since the last (from the node's watch, no etcd reads), or at every ledger
(from the same cache) when it became the auditor, a bookie came or went, a
missing bookie passed a delay, the watch broke, or ``audit_full_interval_s``
passed.  For those ledgers it:

1. notes since when each bookie named by some ledger has been missing from the
   membership (a bookie missing past ``REREPLICATION_DELAY`` is *lost*);
2. takes over OPEN ledgers whose writer has been missing for longer than the
   membership TTL (§7; it resumes them as their writer);
3. runs a ``LedgerRereplicator`` for every ledger whose settled fragments name a
   lost bookie, and for every ledger not yet checked at its current revision and
   set of live bookies (which finds entries that reached only Qa while a bookie
   was briefly away), one ledger at a time;
4. has the writer close an OPEN ledger whose last fragment names a bookie gone
   for ``open_ledger_rereplication_grace_period_s`` while the ledger's LAC stayed
   put (no add, which would have made its writer replace the bookie): its
   fragments are then settled and copied (BookKeeper fences such a ledger after
   ``openLedgerRereplicationGracePeriod``);
5. publishes ``{scope}/rereplication/{id}`` (fragments, bytes done and total;
   bytes total is the planned copies' count times the mean size copied so far)
   for ledgers being repaired or waiting for a missing bookie, under its lease,
   for ``GET /api/v1/cluster``.

Offloaded ledgers are left alone: their replicas become garbage by design.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
from dataclasses import dataclass

from cluster import (
    COPY_BATCH_BYTES_MAX,
    COPY_BATCH_ENTRIES_MAX,
    Driver,
    Effect,
    LedgerMetadata,
    LedgerRereplicator,
    LedgerState,
    RepairDone,
    Stopped,
    settled_ranges,
)
from common.errors import LedgerdError, MetadataUnavailable
from ledger import OffloadState

from ._cluster_ledgers import ClusterLedgers
from ._cluster_packs import PackUsage
from ._cluster_reads import offload_info
from ._cluster_runtime import ClusterRuntime
from ._cookie import decommissioned

log = logging.getLogger("ledgerd.cluster")


@dataclass(slots=True)
class _IdleOpen:
    """An OPEN ledger whose last fragment names a missing bookie, watched for adds:
    at metadata ``revision`` its LAC was ``lac`` (None: being asked) since ``since``."""

    revision: int
    since: float
    lac: int | None = None
    busy: bool = False   # a LAC read or a close is under way

REPAIR_TIMEOUT_S = 300.0
PROGRESS_EVERY_S = 0.5
SLOW_REPAIR_S = 30.0  # a repair still running is logged this often


class Auditor:
    def __init__(self, rt: ClusterRuntime, ledgers: ClusterLedgers) -> None:
        self._rt = rt
        self._ledgers = ledgers
        self.is_auditor = False
        self._missing_since: dict[str, float] = {}
        # The revision of each ledger found whole with the bookies ``_checked_live``
        # live; a change of those bookies starts it over (every ledger is looked at
        # again then anyway).  One int per ledger, not a pair.
        self._checked: dict[int, int] = {}
        self._checked_live: frozenset[str] = frozenset()
        self._published: set[int] = set()
        # What the next round looks at: the ledgers whose metadata changed, or every
        # ledger once something that concerns them all happened (below).
        self._changed: set[int] = set()
        self._everything = True
        self._generation = -1
        self._next_deadline: float | None = None
        self._last_full = -math.inf
        self.full_audits = 0
        self.ledgers_audited = 0
        rt.metadata.on_change.append(self._note_change)
        rt.metadata.on_reload.append(self._audit_everything)
        # OPEN ledgers whose last fragment names a missing bookie, by id.
        self._idle_open: dict[int, _IdleOpen] = {}
        self.open_ledgers_closed = 0
        self.repairs_done = 0
        self.entries_copied = 0
        self.bytes_copied = 0

    async def run(self) -> None:
        while True:
            try:
                await self._elect()
                if self.is_auditor:
                    await self._audit()
            except MetadataUnavailable as exc:
                log.warning("audit round skipped: %s", exc)
            except Exception:
                log.exception("audit round failed")
            await asyncio.sleep(self._rt.settings.audit_interval_s)

    async def _elect(self) -> None:
        membership = self._rt.membership
        lease = membership.lease_id
        if not membership.lease_ok or lease is None:
            self.is_auditor = False
            return
        key = self._rt.keys.auditor
        value = json.dumps({"bookie_id": self._rt.me, "url": membership.url}).encode()
        was = self.is_auditor
        if await self._rt.etcd.create(key, value, lease=lease) is not None:
            log.info("elected auditor", extra={"bookie_id": self._rt.me})
            self.is_auditor = True
        else:
            held = await self._rt.etcd.get(key)
            self.is_auditor = held is not None and held.lease == lease
        if self.is_auditor and not was:
            self._everything = True  # what changed before it was the auditor

    def _audit_everything(self) -> None:
        self._everything = True

    def _note_change(self, ledger_id: int, md: LedgerMetadata | None) -> None:
        if md is None:
            self._checked.pop(ledger_id, None)  # deleted
        # Only the auditor keeps them: another node would hoard every change, and
        # a node that becomes the auditor looks at every ledger first anyway.
        if self.is_auditor:
            self._changed.add(ledger_id)

    def _round(self, now: float) -> set[int] | None:
        """The ledgers this round audits, or None: every one.  Every ledger is looked
        at when this node becomes the auditor, when a bookie comes or goes, when a
        missing bookie passes the takeover or re-replication delay, when the
        metadata watch broke, and every ``AUDIT_FULL_INTERVAL`` (a week by
        default, as BookKeeper's auditor); otherwise only the ledgers whose metadata
        changed — an idle cluster's rounds cost nothing."""
        rt = self._rt
        generation = rt.membership.members_generation
        due = self._next_deadline is not None and now >= self._next_deadline
        if self._everything or due or generation != self._generation \
                or now - self._last_full >= rt.settings.audit_full_interval_s:
            self._everything = False
            self._generation = generation
            self._last_full = now
            self._changed.clear()
            self.full_audits += 1
            return None
        changed, self._changed = self._changed, set()
        # Idle open ledgers are looked at every round until closed or mended (a few,
        # while a bookie is gone), whatever changed.
        return changed | set(self._idle_open)

    async def _audit(self) -> None:
        rt = self._rt
        now = rt.clock.now()
        live = set(rt.membership.view)
        delay = rt.settings.rereplication_delay_s
        for gone in await decommissioned(rt.etcd, rt.keys):
            # An operator said its disk is lost: no waiting for it to come back.
            since = now - max(delay, rt.settings.membership_ttl_s)
            if self._missing_since.get(gone, now) > since:
                self._missing_since[gone] = since
                self._everything = True
        if not rt.metadata.synced:
            self._everything = True
            return
        subset = self._round(now)
        # Every ledger is walked unpacked one at a time (a million would not fit
        # decoded at once); what needs a repair is kept as an id and a revision.
        ledgers = rt.metadata.walk(subset)
        if self._checked_live != live:
            self._checked.clear()
            self._checked_live = frozenset(live)
        named: set[str] = set()
        seen: set[int] = set()
        todo: list[tuple[int, int]] = []
        waiting: dict[int, int] = {}
        # A full audit also tallies the packs of small ledgers (§10.1).
        packs = PackUsage() if subset is None and rt.offload is not None else None
        async for md, revision in ledgers:
            seen.add(md.ledger_id)
            bookies = {b for f in md.ensembles for b in f.bookies}
            named |= bookies | {md.writer.node}
            for bookie in (bookies | {md.writer.node}) - live:
                self._missing_since.setdefault(bookie, now)
            if md.state is not LedgerState.CLOSED:
                self._maybe_take_over(md, live, now)
            self._watch_idle_open(md, revision, live, now)
            offload = offload_info(md)
            if packs is not None:
                packs.add(offload)
            if offload.state is OffloadState.OFFLOADED:
                continue
            lost = {b for b in bookies - live if now - self._missing_since[b] >= delay}
            missing = self._settled_names(md) - live
            if missing - lost:
                # A bookie is away but not lost yet: it may come back with its
                # replicas, and until then it cannot list them.  Wait.
                waiting[md.ledger_id] = len(settled_ranges(md))
                continue
            if missing or self._checked.get(md.ledger_id) != revision:
                todo.append((md.ledger_id, revision))
        if not seen:
            return
        if packs is not None and rt.offload is not None:
            rt.spawn(rt.offload.audit_packs(packs, named | live | {rt.me}))
        self.ledgers_audited += len(seen)
        for bookie in list(self._missing_since):
            if bookie in live or (subset is None and bookie not in named):
                del self._missing_since[bookie]
        if subset is None:
            for ledger_id in set(self._idle_open) - seen:
                del self._idle_open[ledger_id]
        self._next_deadline = self._deadline(now, live)
        await self._publish_waiting(waiting, None if subset is None else seen)
        for ledger_id, revision in todo:
            # As it is now: changed since, the change brings it to the next round.
            for md, current in rt.metadata.cached((ledger_id,)):
                if current == revision:
                    await self._repair(md, revision, live, now)

    @staticmethod
    def _settled_names(md: LedgerMetadata) -> set[str]:
        return {b for r in settled_ranges(md) for b in md.ensembles[r.index].bookies}

    def _watch_idle_open(self, md: LedgerMetadata, revision: int, live: set[str],
                         now: float) -> None:
        """Close an OPEN ledger whose last fragment names a missing bookie once it went
        ``open_ledger_rereplication_grace_period_s`` without an add.

        Its writer replaces a dead bookie only when an add meets it (§6.2), and the
        auditor copies settled fragments only (§9): without this an idle open
        ledger would stay under-replicated for ever.  The grace runs from when this
        auditor first saw it (and again from each LAC change it sees: an add came);
        a changed metadata revision (an ensemble change, a takeover) starts over.
        A ledger whose writer is gone is taken over instead (above)."""
        ledger_id = md.ledger_id
        gone = set(md.ensembles[-1].bookies) - live
        if md.state is not LedgerState.OPEN or not gone or md.writer.node not in live \
                or offload_info(md).state.value == "OFFLOADED":
            self._idle_open.pop(ledger_id, None)
            return
        watch = self._idle_open.get(ledger_id)
        if watch is None or watch.revision != revision:
            watch = self._idle_open[ledger_id] = _IdleOpen(revision, now)
        if watch.busy:
            return
        grace = self._rt.settings.open_ledger_rereplication_grace_period_s
        if watch.lac is None or now - watch.since >= grace:
            watch.busy = True
            self._rt.spawn(self._check_idle_open(ledger_id, watch, gone))

    async def _check_idle_open(self, ledger_id: int, watch: _IdleOpen,
                               gone: set[str]) -> None:
        rt = self._rt
        try:
            view = await self._ledgers.reads.view(ledger_id)
            if self._idle_open.get(ledger_id) is not watch or view.revision != watch.revision:
                return
            if watch.lac is None or view.lac != watch.lac:
                # First look, or an add came: the grace starts (again) now.
                watch.lac, watch.since = view.lac, rt.clock.now()
                return
            if not rt.membership.lease_ok or not self.is_auditor:
                return
            log.warning("closing an idle open ledger whose last ensemble names a gone "
                        "bookie, so that it can be re-replicated", extra={
                            "ledger_id": ledger_id, "gone": sorted(gone), "lac": view.lac,
                            "idle_s": round(rt.clock.now() - watch.since, 3)})
            if await self._ledgers.writers.close_idle(ledger_id, watch.revision):
                self.open_ledgers_closed += 1
        except LedgerdError as exc:
            log.info("idle open ledger %d not closed: %s", ledger_id, exc)
        finally:
            watch.busy = False

    def _maybe_take_over(self, md: LedgerMetadata, live: set[str], now: float) -> None:
        writer = md.writer.node
        if writer in live or (writer == self._rt.me and self._ledgers.writer_of(md.ledger_id)):
            return
        since = self._missing_since.get(writer, now)
        if now - since < self._rt.settings.membership_ttl_s:
            return
        if not self._rt.membership.lease_ok:
            return

        async def take_over() -> None:
            with contextlib.suppress(LedgerdError):
                await self._ledgers.resume_abandoned(md.ledger_id)
        self._rt.spawn(take_over())

    async def _repair(self, md: LedgerMetadata, revision: int, live: set[str],
                      now: float) -> None:
        rt = self._rt
        delay = rt.settings.rereplication_delay_s
        lost = {b for b, since in self._missing_since.items()
                if b not in live and now - since >= delay}
        limits = rt.limits
        machine = LedgerRereplicator(
            metadata=md, revision=revision, lost=lost,
            writable=rt.membership.writable_bookies(), clock=rt.clock,
            retry_s=max(rt.settings.add_timeout_s, 1.0),
            # A range copied is one batch on the target: within its batch limits.
            batch_entries_max=min(COPY_BATCH_ENTRIES_MAX, limits.batch_entry_count_max),
            batch_bytes_max=min(COPY_BATCH_BYTES_MAX, limits.batch_size_bytes_max),
            local=rt.me)
        finished: asyncio.Future[Effect] = asyncio.get_running_loop().create_future()

        def on_effect(driver: Driver, effect: Effect) -> None:
            if isinstance(effect, RepairDone | Stopped) and not finished.done():
                finished.set_result(effect)
        driver = rt.driver(machine, on_effect)
        started = rt.clock.now()
        machine.start()
        driver.drain()
        published = False
        needed = self._settled_names(md) - lost
        try:
            deadline = rt.clock.now() + REPAIR_TIMEOUT_S
            told = started
            while not finished.done() and rt.clock.now() < deadline:
                await asyncio.wait([finished], timeout=PROGRESS_EVERY_S)
                if rt.clock.now() - told >= SLOW_REPAIR_S:
                    told = rt.clock.now()
                    log.info("re-replication of ledger %d still in phase %s after %.0f s",
                             md.ledger_id, machine.phase, told - started)
                if needed - set(rt.membership.view):
                    # A bookie it lists or copies to went away: plan again next round.
                    driver.abandon()
                    break
                plan = machine.plan
                if plan is not None and not plan.empty and not finished.done():
                    await self._publish_progress(md, machine)
                    published = True
        finally:
            if not finished.done():
                finished.cancel()
        result = finished.result() if not finished.cancelled() else None
        if result is None:
            log.warning("re-replication of ledger %d gave up in phase %s", md.ledger_id,
                        machine.phase)
        elif isinstance(result, Stopped):
            log.info("re-replication of ledger %d stopped: %s", md.ledger_id, result.error)
        if isinstance(result, RepairDone):
            if self._checked_live == live:  # else checked against bookies gone since
                self._checked[md.ledger_id] = machine.revision
            if result.entries_copied:
                self.repairs_done += 1
                self.entries_copied += result.entries_copied
                self.bytes_copied += result.bytes_copied
                log.info("ledger re-replicated", extra={
                    "ledger_id": md.ledger_id, "entries": result.entries_copied,
                    "bytes": result.bytes_copied, "lost": sorted(lost),
                    "duration_s": round(rt.clock.now() - started, 4),
                    # The listings, then the copies (the CAS is the rest).
                    "listed_s": _since(started, machine.planned_at_s),
                    "copied_s": _since(machine.planned_at_s, machine.copied_at_s)})
        if published or md.ledger_id in self._published:
            with contextlib.suppress(MetadataUnavailable):
                await rt.etcd.delete(rt.keys.rereplication(md.ledger_id))
            self._published.discard(md.ledger_id)

    async def _publish_progress(self, md: LedgerMetadata, machine: LedgerRereplicator) -> None:
        plan = machine.plan
        assert plan is not None
        fragments = {md.fragment_index(c.entry_id) for c in plan.copies} | {
            index for index, _lost in plan.replacements}
        mean = machine.bytes_copied / machine.entries_copied if machine.entries_copied else 0
        total = int(mean * len(plan.copies)) if machine.entries_copied else 0
        await self._put_progress(md.ledger_id, len(fragments), machine.bytes_copied,
                                 max(total, machine.bytes_copied))

    def _deadline(self, now: float, live: set[str]) -> float | None:
        """When the next missing bookie passes the takeover or re-replication delay
        (then every ledger is looked at again)."""
        settings = self._rt.settings
        ahead = [since + delay for bookie, since in self._missing_since.items()
                 if bookie not in live
                 for delay in (settings.membership_ttl_s, settings.rereplication_delay_s)
                 if since + delay > now]
        return min(ahead, default=None)

    async def _publish_waiting(self, waiting: dict[int, int],
                               visited: set[int] | None) -> None:
        """Publish the ledgers waiting for a missing bookie; of those published before,
        drop the ones no longer waiting (among ``visited``, or all)."""
        looked_at = self._published if visited is None else self._published & visited
        for ledger_id in looked_at - set(waiting):
            await self._rt.etcd.delete(self._rt.keys.rereplication(ledger_id))
            self._published.discard(ledger_id)
        for ledger_id, fragments in waiting.items():
            if ledger_id not in self._published:
                await self._put_progress(ledger_id, fragments, 0, 0)

    async def _put_progress(self, ledger_id: int, fragments: int, done: int,
                            total: int) -> None:
        lease = self._rt.membership.lease_id
        if lease is None:
            return
        value = json.dumps({"fragments": fragments, "bytes_done": done,
                            "bytes_total": total}).encode()
        await self._rt.etcd.put(self._rt.keys.rereplication(ledger_id), value, lease=lease)
        self._published.add(ledger_id)

    def statistics(self) -> dict[str, float]:
        return {"is_auditor": float(self.is_auditor), "repairs_total": self.repairs_done,
                "full_audits_total": self.full_audits,
                "ledgers_audited_total": self.ledgers_audited,
                "open_ledgers_closed_total": self.open_ledgers_closed,
                "entries_copied_total": self.entries_copied,
                "bytes_copied_total": self.bytes_copied}


def _since(start: float | None, end: float | None) -> float | None:
    return None if start is None or end is None else round(end - start, 4)

