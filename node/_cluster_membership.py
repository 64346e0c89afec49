"""This node's membership in etcd and its view of everyone's (docs/cluster.md §2.2, §6.6).

Registration: ``{scope}/bookies/{bookie_id}`` → ``{"format_version": 1, "url",
"state": "writable"|"readonly", "disk_usage", "replicas"}`` under a lease of
``MEMBERSHIP_TTL`` that a task keeps alive (every third of the TTL).  The lease
counts as held until ``sent + TTL`` of the last keep-alive etcd answered, a
conservative bound: when it passes, ``on_lease_lost`` runs once (the node stops
acknowledging adds, §6.6) and the node registers again as soon as etcd answers.

The view: one range read of ``bookies/`` and a watch from the revision after it,
re-established (range, then watch) whenever it breaks.  Each bookie's URL is
remembered after it leaves, so a node that is restarting can still be called
(and refuse the connection).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from cluster import ClusterKeys, Etcd, KeyValue
from common.errors import LeaseExpired, MetadataUnavailable

log = logging.getLogger("ledgerd.cluster")

FORMAT_VERSION = 1
RETRY_S = 0.5
STATUS_EVERY_S = 2.0


@dataclass(frozen=True, slots=True)
class BookieInfo:
    bookie_id: str
    url: str
    state: str          # "writable" | "readonly"
    disk_usage: float   # used fraction of the data disk
    replicas: int = 0   # replicas held (how "used" a bookie is, for ensembles)


@dataclass(frozen=True, slots=True)
class LocalStatus:
    read_only: bool
    disk_usage: float
    replicas: int


class Membership:
    def __init__(self, etcd: Etcd, keys: ClusterKeys, *, bookie_id: str, url: str,
                 ttl_s: float, status: Callable[[], LocalStatus],
                 on_lease_lost: Callable[[], None],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._etcd = etcd
        self._keys = keys
        self.bookie_id = bookie_id
        self.url = url
        self._ttl_s = max(1, int(ttl_s + 0.999))
        self._status = status
        self._on_lease_lost = on_lease_lost
        self._clock = clock
        self.view: dict[str, BookieInfo] = {}
        self._urls: dict[str, str] = {bookie_id: url}
        self.lease_id: int | None = None
        self._valid_until = 0.0
        self._lost_reported = True
        self._published: tuple[str, float, int] | None = None
        self._published_at = 0.0
        self.generation = 0  # bumped on every change of the view
        # Bumped only when a bookie comes, goes or changes state (not on its disk
        # usage): what makes the auditor and the sweep look at every ledger again.
        self.members_generation = 0
        self._members: frozenset[tuple[str, str]] = frozenset()
        self.absent_since: dict[str, float] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._changed = asyncio.Event()

    # --- lifecycle --------------------------------------------------------------

    async def start(self) -> None:
        await self._register()
        await self._load_view()
        self._tasks = [asyncio.create_task(self._keep_alive(), name="ledgerd-keepalive"),
                       asyncio.create_task(self._watch(), name="ledgerd-membership-watch")]
        for task in self._tasks:
            task.add_done_callback(self._ended)

    @staticmethod
    def _ended(task: asyncio.Task[None]) -> None:
        """A membership task never ends but by ``stop``/``halt``: say why it did."""
        if not task.cancelled() and task.exception() is not None:
            log.error("membership task %s failed", task.get_name(),
                      exc_info=task.exception())

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self.lease_id is not None:
            # Others see this node gone at once rather than after the TTL.
            with contextlib.suppress(MetadataUnavailable):
                await self._etcd.lease_revoke(self.lease_id)
            self.lease_id = None

    def halt(self) -> None:
        """Stop where it stands, as a crash would: no revoke, etcd lets the lease
        expire (the seeded simulation crashes nodes this way)."""
        for task in self._tasks:
            task.cancel()
        self._tasks = []

    # --- the view ---------------------------------------------------------------

    @property
    def lease_ok(self) -> bool:
        return self.lease_id is not None and self._clock() < self._valid_until

    def is_live(self, bookie_id: str) -> bool:
        return bookie_id in self.view

    async def registered(self, bookie_id: str) -> bool:
        """Whether etcd holds ``bookie_id``'s registration now (its lease is alive):
        what a takeover is decided on, not the view, which lags a new registration
        by a watch event (the seeded simulation found a node taking over the ledger
        of a writer that had just registered, while that writer, its lease held,
        still answered reads with its LAC)."""
        return await self._etcd.get(self._keys.bookie(bookie_id)) is not None

    def has_live_url(self, url: str) -> bool:
        """Whether a live member serves at ``url``."""
        return any(info.url == url for info in self.view.values())

    def url_of(self, bookie_id: str) -> str | None:
        return self._urls.get(bookie_id)

    def writable_bookies(self) -> list[str]:
        """Writable bookies, least used first (fewest replicas, then disk usage)."""
        writable = [b for b in self.view.values() if b.state == "writable"]
        writable.sort(key=lambda b: (b.replicas, b.disk_usage, b.bookie_id))
        return [b.bookie_id for b in writable]

    def note_chosen(self, bookie_ids: list[str]) -> None:
        """A ledger was just placed on these bookies: count it until they say so, so
        that a burst of creates spreads instead of piling on the same bookies."""
        for bookie_id in bookie_ids:
            info = self.view.get(bookie_id)
            if info is not None:
                self.view[bookie_id] = BookieInfo(info.bookie_id, info.url, info.state,
                                                  info.disk_usage, info.replicas + 1)

    async def changed(self) -> None:
        """Wait for the next change of the view."""
        self._changed.clear()
        await self._changed.wait()

    # --- registration -------------------------------------------------------------

    def _value(self) -> bytes:
        status = self._status()
        state = "readonly" if status.read_only else "writable"
        self._published = (state, round(status.disk_usage, 2), status.replicas)
        self._published_at = self._clock()
        return json.dumps({"format_version": FORMAT_VERSION, "url": self.url, "state": state,
                           "disk_usage": status.disk_usage,
                           "replicas": status.replicas}).encode()

    async def _register(self) -> None:
        sent = self._clock()
        lease = await self._etcd.lease_grant(self._ttl_s)
        await self._etcd.put(self._keys.bookie(self.bookie_id), self._value(), lease=lease)
        self.lease_id = lease
        self._valid_until = sent + self._ttl_s
        self._lost_reported = False
        log.info("registered in the cluster", extra={"bookie_id": self.bookie_id,
                                                     "lease": lease, "ttl_s": self._ttl_s})

    async def _keep_alive(self) -> None:
        while True:
            await asyncio.sleep(min(self._ttl_s / 3, 1.0))
            self.check_lease()
            try:
                if self.lease_id is None:
                    await self._register()
                    continue
                sent = self._clock()
                ttl = await self._etcd.lease_keepalive(self.lease_id)
                if self._lost_reported:
                    # The lease outlived our doubt (etcd was away and kept it), but
                    # the writers are gone already: start over with a fresh one.
                    raise LeaseExpired("re-registering after a lost lease")
                self._valid_until = sent + ttl
                await self._publish_status()
            except LeaseExpired:
                old, self.lease_id = self.lease_id, None
                self.check_lease()
                if old is not None:
                    # What it still holds (auditor, offload locks) is not trusted.
                    with contextlib.suppress(MetadataUnavailable):
                        await self._etcd.lease_revoke(old)
            except MetadataUnavailable as exc:
                log.warning("etcd did not answer a keep-alive: %s", exc)

    def check_lease(self) -> None:
        if not self.lease_ok and not self._lost_reported:
            self._lost_reported = True
            log.warning("membership lease lost: no longer acknowledging adds",
                        extra={"bookie_id": self.bookie_id})
            self._on_lease_lost()

    async def _publish_status(self) -> None:
        status = self._status()
        state = "readonly" if status.read_only else "writable"
        current = (state, round(status.disk_usage, 2), status.replicas)
        due = self._clock() - self._published_at >= STATUS_EVERY_S
        if current != self._published and (due or current[0] != (self._published or ("",))[0]):
            assert self.lease_id is not None
            await self._etcd.put(self._keys.bookie(self.bookie_id), self._value(),
                                 lease=self.lease_id)

    # --- the watch ----------------------------------------------------------------

    async def _load_view(self) -> int:
        kvs, revision = await self._etcd.get_prefix(self._keys.bookies_prefix)
        now = self._clock()
        seen: dict[str, BookieInfo] = {}
        for kv in kvs:
            info = self._decode(kv)
            if info is not None:
                seen[info.bookie_id] = info
        for gone in set(self.view) - set(seen):
            self.absent_since.setdefault(gone, now)
        self.view = seen
        for bookie_id, info in seen.items():
            self._urls[bookie_id] = info.url
            self.absent_since.pop(bookie_id, None)
        self._bump()
        return revision

    async def _watch(self) -> None:
        revision: int | None = None
        while True:
            try:
                if revision is None:
                    revision = await self._load_view()
                async for event in self._etcd.watch(self._keys.bookies_prefix, prefix=True,
                                                    start_revision=revision + 1):
                    revision = event.revision
                    self._apply(event.kind, event.kv)
                revision = None  # the stream ended: read again
            except MetadataUnavailable as exc:
                log.warning("membership watch broke, re-reading: %s", exc)
                revision = None
                await asyncio.sleep(RETRY_S)

    def _apply(self, kind: str, kv: KeyValue) -> None:
        bookie_id = kv.key.decode().rsplit("/", 1)[-1]
        if kind == "DELETE":
            if self.view.pop(bookie_id, None) is not None:
                self.absent_since.setdefault(bookie_id, self._clock())
        else:
            info = self._decode(kv)
            if info is None:
                return
            self.view[bookie_id] = info
            self._urls[bookie_id] = info.url
            self.absent_since.pop(bookie_id, None)
        self._bump()

    def _bump(self) -> None:
        self.generation += 1
        members = frozenset((b.bookie_id, b.state) for b in self.view.values())
        if members != self._members:
            self._members = members
            self.members_generation += 1
        self._changed.set()

    @staticmethod
    def _decode(kv: KeyValue) -> BookieInfo | None:
        bookie_id = kv.key.decode().rsplit("/", 1)[-1]
        try:
            doc = json.loads(kv.value)
            return BookieInfo(bookie_id, str(doc["url"]), str(doc["state"]),
                              float(doc.get("disk_usage", 0.0)), int(doc.get("replicas", 0)))
        except (ValueError, KeyError, TypeError):
            log.warning("unreadable membership value of %s", bookie_id)
            return None
