"""Ledger metadata as this node knows it: etcd, and a cache kept by a watch.

docs/cluster.md §2.2: nothing is cached without a watch.  One watch on
``{scope}/ledgers/`` (after one paginated range read, re-established the same way
whenever it breaks) keeps every ledger's metadata and revision.  Reads of the
data path (where a ledger's entries are, who writes it, is it closed) use the
cache, so they go on while etcd is away — nobody can change metadata then.  A
ledger missing from the cache (created a moment ago) is read from etcd, and so
is everything that decides a write (``fresh=True``); a CAS on a stale revision
fails anyway and returns the current value.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Collection

from cluster import (
    ClusterKeys,
    Etcd,
    EtcdMetadataStore,
    LedgerMetadata,
    LedgerState,
    decode_metadata,
    pack_metadata,
    packed_notes_offload,
    packed_revision,
    packed_state,
    unpack_metadata,
    unpack_recent,
)
from common.errors import CorruptRecord, MetadataUnavailable, NoSuchLedger

log = logging.getLogger("ledgerd.cluster")

RETRY_S = 0.5
# A walk over every ledger gives the event loop a turn this often: unpacking a
# million takes seconds, and the node's lease keep-alive must not wait on it.
WALK_TURN = 1024


class LedgerMetadataView:
    def __init__(self, etcd: Etcd, keys: ClusterKeys, store: EtcdMetadataStore) -> None:
        self._etcd = etcd
        self._keys = keys
        self.store = store
        # Packed (cluster/_packed.py: a third of the decoded size), and shared
        # with the idle writers of this node's ledgers (``packed``); decoded, the
        # very value its writer holds, for a ledger this node created until its
        # writer goes idle.
        self._cache: dict[int, bytes | tuple[LedgerMetadata, int]] = {}
        self.synced = False  # the cache holds everything up to the watch's revision
        # Who reacts to changes instead of polling: each watched change as (ledger
        # id, its metadata or None once deleted), and each full re-read (the watch
        # broke: changes may have been missed) as a call with no argument.
        self.on_change: list[Callable[[int, LedgerMetadata | None], None]] = []
        self.on_reload: list[Callable[[], None]] = []

    async def read(self, ledger_id: int, *, fresh: bool = False,
                   ) -> tuple[LedgerMetadata, int]:
        """The ledger's metadata and revision; ``NoSuchLedger`` when it has none."""
        cached = self._get(ledger_id)
        if cached is not None and self.synced and not fresh:
            return cached
        try:
            found = await self.store.read(ledger_id)
        except MetadataUnavailable:
            if cached is not None and not fresh:
                return cached  # etcd is away: nobody changes metadata meanwhile
            raise
        if found is None:
            raise NoSuchLedger(ledger_id)
        self._remember(ledger_id, *found)
        return found

    def cached(self, ledger_ids: Collection[int] | None = None,
               ) -> list[tuple[LedgerMetadata, int]]:
        """What the cache holds, of ``ledger_ids`` or of every ledger, in id order."""
        ids = sorted(self._cache) if ledger_ids is None else sorted(ledger_ids)
        return [found for i in ids if (found := self._get(i, keep=False)) is not None]

    async def walk(self, ledger_ids: Collection[int] | None = None, *,
                   unclosed: bool = False) -> AsyncIterator[tuple[LedgerMetadata, int]]:
        """What the cache holds of ``ledger_ids`` or of every ledger (each as it is
        when reached), in id order, unpacked one at a time: none kept decoded,
        other tasks run meanwhile.  ``unclosed``: only ledgers not CLOSED, the
        closed ones passed over from the packed state, never unpacked (most of a
        million ledgers are closed)."""
        ids = sorted(self._cache) if ledger_ids is None else sorted(ledger_ids)
        for n, ledger_id in enumerate(ids):
            if n % WALK_TURN == WALK_TURN - 1:
                await asyncio.sleep(0)
            if unclosed and self._closed(ledger_id):
                continue
            found = self._get(ledger_id, keep=False)
            if found is not None:
                yield found

    def _closed(self, ledger_id: int) -> bool:
        value = self._cache.get(ledger_id)
        if value is None:
            return False
        state = packed_state(value) if isinstance(value, bytes) else value[0].state
        return state is LedgerState.CLOSED

    def notes_offload(self, ledger_id: int) -> bool | None:
        """Whether the ledger's cached metadata holds an offload record or a tier
        position; None when the cache has none.  Read from the packed form's
        flags, nothing unpacked: what a sweep of every ledger asks of each."""
        value = self._cache.get(ledger_id)
        if value is None:
            return None
        if isinstance(value, bytes):
            return packed_notes_offload(value)
        return value[0].offload is not None or value[0].tier is not None

    def noting_offload(self, ledger_ids: Collection[int] | None = None) -> list[int]:
        """Of ``ledger_ids`` (else of every cached ledger), those whose metadata
        holds an offload record or a tier position (``notes_offload``)."""
        ids = self._cache if ledger_ids is None else ledger_ids
        return [i for i in ids if self.notes_offload(i)]

    def _get(self, ledger_id: int, *, keep: bool = True,
             ) -> tuple[LedgerMetadata, int] | None:
        value = self._cache.get(ledger_id)
        if not isinstance(value, bytes):
            return value
        return unpack_recent(value) if keep else unpack_metadata(value)

    def _revision(self, ledger_id: int) -> int | None:
        value = self._cache.get(ledger_id)
        if value is None:
            return None
        return packed_revision(value) if isinstance(value, bytes) else value[1]

    def remember(self, md: LedgerMetadata, revision: int) -> None:
        """What this node itself wrote at ``revision`` (a ledger it created): the
        cache keeps this very value, shared with its writer, and the watch's echo of
        the write is not decoded again (or, echoed first, its copy is dropped)."""
        known = self._revision(md.ledger_id)
        if known is None or known <= revision:
            self._cache[md.ledger_id] = (md, revision)

    def packed(self, md: LedgerMetadata, revision: int) -> bytes:
        """``md`` at ``revision`` packed: the very bytes the cache holds (kept there
        when the cache had it decoded or older), so an idle writer costs nothing
        beside the cache.  A ledger the cache does not hold stays out of it: the
        watch may have dropped it as deleted, and nothing would drop it again."""
        value = self._cache.get(md.ledger_id)
        if isinstance(value, bytes) and packed_revision(value) == revision:
            return value
        packed = pack_metadata(md, revision)
        known = self._revision(md.ledger_id)
        if known is not None and known <= revision:
            self._cache[md.ledger_id] = packed
        return packed

    def _remember(self, ledger_id: int, md: LedgerMetadata, revision: int) -> None:
        known = self._revision(ledger_id)
        if known is None or known < revision:
            self._cache[ledger_id] = pack_metadata(md, revision)

    async def watch(self) -> None:
        """Keep the cache (a task of the node, until cancelled)."""
        prefix = self._keys.ledgers_prefix
        while True:
            try:
                revision = await self._load()
                async for event in self._etcd.watch(prefix, prefix=True,
                                                    start_revision=revision + 1):
                    ledger_id = self._keys.ledger_id_of(event.kv.key)
                    if event.kind == "DELETE":
                        self._cache.pop(ledger_id, None)
                        self._changed(ledger_id, None)
                        continue
                    if self._revision(ledger_id) == event.kv.mod_revision:
                        found = self._get(ledger_id)  # our own write's echo
                        assert found is not None
                        self._changed(ledger_id, found[0])
                        continue
                    try:
                        md = decode_metadata(event.kv.value, key=event.kv.key.decode())
                    except CorruptRecord:
                        log.exception("unreadable ledger metadata in etcd")
                        continue
                    if md.ledger_id != ledger_id:
                        log.error("ledger metadata under %s names ledger %d; ignored",
                                  event.kv.key.decode(), md.ledger_id)
                        continue
                    # Keyed by the value's own id: one int per ledger, not two.
                    self._remember(md.ledger_id, md, event.kv.mod_revision)
                    self._changed(ledger_id, md)
                self.synced = False
            except MetadataUnavailable as exc:
                log.warning("ledger metadata watch broke, re-reading: %s", exc)
                await asyncio.sleep(RETRY_S)

    async def _load(self) -> int:
        """Read every ledger (in pages); the revision to watch from is the store's
        before the first page, so the watch replays whatever changed meanwhile."""
        found: dict[int, bytes | tuple[LedgerMetadata, int]] = {}
        _kvs, revision = await self._etcd.get_prefix(self._keys.ledger_ids)
        async for md, mod_revision in self.store.list_ledgers():
            found[md.ledger_id] = pack_metadata(md, mod_revision)
        self._cache = found
        self.synced = True
        for listener in self.on_reload:
            listener()
        return revision

    def _changed(self, ledger_id: int, md: LedgerMetadata | None) -> None:
        for listener in self.on_change:
            try:
                listener(ledger_id, md)
            except Exception:
                log.exception("a metadata listener failed")
