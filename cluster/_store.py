"""The etcd key layout of a cluster scope and the ledger metadata store on it
(docs/cluster.md §2.2).  Every update of a ledger's key is a compare-and-swap on
its ``mod_revision``.

Creating ledgers costs etcd two writes a ledger if done one by one (an id, then
the key), and a single etcd member commits a few hundred writes a second
whatever the concurrency, but tens of thousands of keys a second when they
come in batches.  So ledger ids come in blocks, and the creations waiting
together go to etcd in one transaction (docs/cluster.md §2.2).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from common.errors import MetadataUnavailable

from ._effects import Current, Written
from ._etcd import Compare, Etcd, Put, prefix_end
from ._metadata import LedgerMetadata, decode_metadata, encode_metadata


class ClusterKeys:
    """Keys of one scope; ids zero-padded so ranges list ledgers in id order."""

    def __init__(self, scope: str) -> None:
        self.root = "/" + scope.strip("/")

    def _key(self, *parts: str) -> bytes:
        return "/".join((self.root, *parts)).encode()

    @property
    def bookies_prefix(self) -> bytes:
        return self._key("bookies", "")

    def bookie(self, bookie_id: str) -> bytes:
        return self._key("bookies", bookie_id)

    @property
    def ledgers_prefix(self) -> bytes:
        return self._key("ledgers", "")

    def ledger(self, ledger_id: int) -> bytes:
        return self._key("ledgers", f"{ledger_id:020d}")

    @property
    def ledger_ids(self) -> bytes:
        return self._key("ids", "ledger")

    @property
    def auditor(self) -> bytes:
        return self._key("auditor")

    def offload_lock(self, ledger_id: int) -> bytes:
        return self._key("offload-locks", f"{ledger_id:020d}")

    def pack_lock(self, pack_id: str) -> bytes:
        """Held by the node rewriting the pack (``pack_id`` as offload/ makes them)."""
        return self._key("pack-locks", pack_id)

    def cookie(self, bookie_id: str) -> bytes:
        return self._key("cookies", bookie_id)

    @property
    def decommissioned_prefix(self) -> bytes:
        return self._key("decommissioned", "")

    def decommissioned(self, bookie_id: str) -> bytes:
        return self._key("decommissioned", bookie_id)

    @property
    def password_key(self) -> bytes:
        """The id of the cluster's password key (never the key: node/_cluster_password_key.py)."""
        return self._key("password-key")

    def rereplication(self, ledger_id: int) -> bytes:
        return self._key("rereplication", f"{ledger_id:020d}")

    @staticmethod
    def ledger_id_of(key: bytes) -> int:
        """The ledger id a key made by ``ledger``, ``offload_lock`` or
        ``rereplication`` ends with."""
        return int(key.rsplit(b"/", 1)[-1])


# Ledger ids a node takes from etcd at once: block b is [b * size, (b + 1) * size),
# b the id key's version after one more put (see allocate_ledger_id).
LEDGER_ID_BLOCK_SIZE = 1024
# Ledger ids a listing reads per window (list_ledgers).
LIST_WINDOW = 16_384
LEDGER_ID_MAX = 2**63 - 1
# One creation transaction at most: etcd refuses more than 128 operations per
# branch (--max-txn-ops) and requests over 1.5 MiB (--max-request-bytes).
CREATE_BATCH_COUNT_MAX = 128
# After a transaction, fewer creations than this waiting: wait this long for more.
CREATE_GATHER_COUNT = 16
CREATE_GATHER_S = 0.001
CREATE_BATCH_BYTES_MAX = 1 << 20


class _Creation:
    __slots__ = ("done", "key", "value")

    def __init__(self, key: bytes, value: bytes, done: asyncio.Future[int | None]) -> None:
        self.key = key
        self.value = value
        self.done = done


class EtcdMetadataStore:
    """Ledger metadata in etcd; implements ``cluster.MetadataStore``."""

    def __init__(self, client: Etcd, keys: ClusterKeys) -> None:
        self._client = client
        self._keys = keys
        self._next_ledger_id = 0
        self._block_end = 0  # the current id block is used up at this id
        self._reserving = asyncio.Lock()
        self._creations: list[_Creation] = []
        self._last_batch_count = 0
        self._writing: asyncio.Task[None] | None = None

    async def allocate_ledger_id(self) -> int:
        """A ledger id no other node (or earlier run of this one) gets.

        Block b is the id key's version after one more put, as each id was before
        blocks (BookKeeper's ``Etcd64bitIdGenerator``): blocks never overlap, and
        every id made one per version before (1 … V) is below the first block
        (V + 1) * size.  Ids left in a block when the node stops are never used."""
        while self._next_ledger_id >= self._block_end:
            async with self._reserving:
                if self._next_ledger_id >= self._block_end:
                    block = await self._client.next_id(self._keys.ledger_ids)
                    self._next_ledger_id = block * LEDGER_ID_BLOCK_SIZE
                    self._block_end = self._next_ledger_id + LEDGER_ID_BLOCK_SIZE
        ledger_id = self._next_ledger_id
        self._next_ledger_id += 1
        return ledger_id

    async def read(self, ledger_id: int) -> tuple[LedgerMetadata, int] | None:
        key = self._keys.ledger(ledger_id)
        kv = await self._client.get(key)
        if kv is None:
            return None
        return decode_metadata(kv.value, key=key.decode()), kv.mod_revision

    async def create(self, metadata: LedgerMetadata) -> int | None:
        """The new key's revision, or None when it exists already.  Creations
        waiting together are one etcd transaction (group commit: while one is in
        flight the next gather, a millisecond longer when they come together)."""
        done: asyncio.Future[int | None] = asyncio.get_running_loop().create_future()
        self._creations.append(_Creation(self._keys.ledger(metadata.ledger_id),
                                         encode_metadata(metadata), done))
        if self._writing is None:
            self._writing = asyncio.create_task(self._write_creations())
        return await done

    async def _write_creations(self) -> None:
        batch: list[_Creation] = []
        try:
            gathered = False
            while self._creations:
                if (gathered or self._last_batch_count > 1) \
                        and len(self._creations) < CREATE_GATHER_COUNT:
                    # Creations come together (they kept coming while the last
                    # transaction was in flight, or the last batch held several):
                    # a moment more gathers a larger batch.  Each transaction costs
                    # etcd and this node more than each key in it.  A client
                    # creating one ledger after another never waits here.
                    await asyncio.sleep(CREATE_GATHER_S)
                gathered = True
                batch = self._take_batch()
                self._last_batch_count = len(batch)
                try:
                    await self._write_batch(batch)
                except Exception as exc:
                    for creation in batch:
                        _settle(creation.done, exc)
        except asyncio.CancelledError:  # the node stops: nobody is left to write them
            stopped = MetadataUnavailable("the node stopped before etcd created the ledger")
            for creation in (*batch, *self._creations):
                _settle(creation.done, stopped)
            self._creations.clear()
            raise
        finally:
            self._writing = None

    def _take_batch(self) -> list[_Creation]:
        size = 0
        count = 0
        for creation in self._creations:
            if count == CREATE_BATCH_COUNT_MAX or (
                    count and size + len(creation.value) > CREATE_BATCH_BYTES_MAX):
                break
            size += len(creation.value)
            count += 1
        batch, self._creations = self._creations[:count], self._creations[count:]
        return batch

    async def _write_batch(self, batch: list[_Creation]) -> None:
        result = await self._client.txn(
            [Compare(c.key, "CREATE", 0) for c in batch], [Put(c.key, c.value) for c in batch])
        if result.succeeded:
            for creation in batch:
                _settle(creation.done, result.revision)
            return
        # A key existed (never for fresh ids): one by one, so that only its own
        # creation fails, as a creation alone would.
        for creation in batch:
            _settle(creation.done, await self._client.create(creation.key, creation.value))

    async def compare_and_swap(self, metadata: LedgerMetadata, expected_revision: int,
                               ) -> Written | Current:
        key = self._keys.ledger(metadata.ledger_id)
        ok, revision, kv = await self._client.compare_and_swap(
            key, encode_metadata(metadata), expected_revision)
        if ok:
            return Written(revision)
        if kv is None:
            return Current(None, revision)
        return Current(decode_metadata(kv.value, key=key.decode()), kv.mod_revision)

    async def delete(self, ledger_id: int, expected_revision: int) -> bool:
        return await self._client.compare_and_delete(self._keys.ledger(ledger_id),
                                                     expected_revision)

    async def list_ledgers(self, *, after: int | None = None,
                           ) -> AsyncIterator[tuple[LedgerMetadata, int]]:
        """Every ledger after ``after``, in id order, read in windows of
        ``LIST_WINDOW`` ids: etcd counts the keys to a range's end to answer each
        page, so paging to the prefix's end cost every later key per page, and a
        node loading a million ledgers spent minutes (pages of 500 went from
        80 ms at the end to 550 ms at the start).  An empty window asks for the
        next key anywhere (one page of one), so gaps cost one request each."""
        keys, end = self._keys, prefix_end(self._keys.ledgers_prefix)
        first = 0 if after is None else after + 1
        while first <= LEDGER_ID_MAX:
            last = first + LIST_WINDOW
            upper = keys.ledger(last) if last <= LEDGER_ID_MAX else end
            found = False
            async for kv in self._client.range_between(keys.ledger(first), upper):
                found = True
                yield decode_metadata(kv.value, key=kv.key.decode()), kv.mod_revision
            if found:
                first = last
                continue
            kvs, _more = await self._client.range_page(upper, end, 1)
            if not kvs:
                return
            first = keys.ledger_id_of(kvs[0].key)


def _settle(done: asyncio.Future[int | None], outcome: int | Exception | None) -> None:
    """Answer a creation's waiter, unless it gave up (was cancelled) already."""
    if done.done():
        return
    if isinstance(outcome, Exception):
        done.set_exception(outcome)
    else:
        done.set_result(outcome)
