"""Reading entries of offloaded (or tiered) ledgers straight from S3.

A read finds the segment (one listing of the ledger's prefix, cached), its
index (one GET, cached within ``index_cache_size_bytes``), the span of frames
holding the entry, and the span's 1 MiB blocks (ranged GETs through the
read-ahead cache).

A segment tiered while its ledger was open has ``chunk-*`` objects and an
index covering the entries wholly in them, and no ``segment`` yet: its bytes
are read from the chunks (chunk ``p`` holds the segment's bytes from ``p``
on), through the same block cache keyed by the segment's key, since the bytes
at an offset are the same in the chunks and in the consolidated segment.  A
chunk deleted by the consolidation meanwhile is read from ``segment``.  The
index of such a segment grows as tiering goes on: a read past what the cached
index covers lists and fetches again once (:meth:`refresh` does it at once).

Every payload's CRC32C is checked; a mismatch raises
:class:`~common.errors.CorruptRecord` naming the object key and the entry, and
the span's cached blocks are dropped so a retry fetches fresh bytes.

Thread-safe: the HTTP server reads on many threads.  One lock guards the
caches; GETs run outside it, and a block already being fetched is waited for
rather than fetched twice.
"""

from __future__ import annotations

import bisect
import contextlib
import logging
import re
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import NamedTuple

from common.errors import CorruptRecord, NoSuchEntry, StorageUnavailable
from ledger import OffloadInfo, OffloadState

from ._errors import ObjectNotFound
from ._format import SegmentIndex, decode_index, find_entry
from ._keys import KeyLayout
from ._read_ahead import BLOCK_SIZE_BYTES, Fetch, ReadAheadCache
from ._store import ObjectStore, read_indexed_range
from .settings import OffloadSettings

log = logging.getLogger("ledgerd.offload.reader")

_SEGMENT_TAIL = re.compile(
    r"seg-(0|[1-9][0-9]{0,19})/(segment|index|chunk-(0|[1-9][0-9]{0,19}))")
_CATALOG_COUNT_MAX = 4096

Blocks = dict[int, bytes]


class _Segment(NamedTuple):
    first_entry_id: int
    segment_key: str
    index_key: str
    # ``(byte_position, key)`` of its chunk objects, in order, when the segment
    # object did not exist at listing time (tiered, not consolidated yet).
    chunks: tuple[tuple[int, str], ...] = ()


class RemoteLedgerReader:
    def __init__(self, store: ObjectStore, settings: OffloadSettings, *,
                 clock: Callable[[], float] = time.monotonic, read_ahead_threads: int = 4) -> None:
        settings.check()
        self._store, self._settings, self._clock = store, settings, clock
        self._lock = threading.Lock()
        self._catalogs: OrderedDict[int, list[_Segment]] = OrderedDict()
        self._indexes: OrderedDict[str, SegmentIndex] = OrderedDict()
        self._index_bytes = 0
        self._cache = ReadAheadCache(
            capacity_bytes=settings.read_cache_size_bytes,
            window_blocks_min=settings.read_ahead_bytes_min // BLOCK_SIZE_BYTES,
            window_blocks_max=settings.read_ahead_bytes_max // BLOCK_SIZE_BYTES,
            ttl_s=settings.read_ahead_ttl_s)
        self._inflight: dict[tuple[str, int], Future[Blocks]] = {}
        # Segment key -> its chunks, for segments read from chunks.
        self._chunks: dict[str, tuple[tuple[int, str], ...]] = {}
        self._counts: Counter[str] = Counter()
        # The pack of the last packed ledger read (read-ahead carries over).
        self._last_pack: str | None = None
        self._layout = KeyLayout(settings)
        self._read_ahead = ThreadPoolExecutor(read_ahead_threads,
                                              thread_name_prefix="offload-read-ahead")

    @property
    def store(self) -> ObjectStore:
        return self._store

    def read_entry(self, ledger_id: int, entry_id: int, info: OffloadInfo) -> tuple[bytes, int]:
        """``(payload, crc32c)`` of an entry in S3 (an OFFLOADED ledger's, or one
        tiered while its ledger was open), CRC verified."""
        if info.pack_key is not None and info.state is OffloadState.OFFLOADED:
            return self._read_packed(ledger_id, entry_id, info)
        key_prefix = info.key_prefix or self._layout.ledger_prefix(ledger_id)
        try:
            segment, index = self._locate(ledger_id, entry_id, key_prefix)
        except (NoSuchEntry, CorruptRecord):
            # Tiering (or consolidation) went on since the catalog was cached.
            self.refresh(ledger_id)
            segment, index = self._locate(ledger_id, entry_id, key_prefix)
        start, end, span_first = index.span_of(entry_id)
        span = self._read_span(segment.segment_key, start, end, index.segment_length_bytes)
        try:
            found = find_entry(span, key=segment.segment_key, offset=start,
                               first_entry_id=span_first, entry_id=entry_id)
        except CorruptRecord:
            with self._lock:
                self._cache.drop(segment.segment_key, range(start // BLOCK_SIZE_BYTES,
                                                            (end - 1) // BLOCK_SIZE_BYTES + 1))
                self._counts["corrupt_reads"] += 1
            raise
        with self._lock:
            self._counts["reads"] += 1
        return found

    def _read_packed(self, ledger_id: int, entry_id: int,
                     info: OffloadInfo) -> tuple[bytes, int]:
        """An entry of a packed ledger: its index and frames sit together in the
        pack's ``data``, read through the same block cache (keyed by the pack,
        so neighbouring ledgers share blocks and read-ahead)."""
        key, base = info.pack_key or "", info.pack_offset
        with self._lock:
            if self._last_pack is not None and self._last_pack != key:
                self._cache.carry_over(self._last_pack, key)
            self._last_pack = key
        index = self._packed_index(ledger_id, info)
        if entry_id >= index.end_entry_id:
            raise NoSuchEntry(ledger_id, entry_id)
        start, end, span_first = index.span_of(entry_id)
        span = self._read_span(key, base + start, base + end, info.pack_bytes)
        try:
            found = find_entry(span, key=key, offset=base + start, first_entry_id=span_first,
                               entry_id=entry_id)
        except CorruptRecord:
            with self._lock:
                self._cache.drop(key, range((base + start) // BLOCK_SIZE_BYTES,
                                            (base + end - 1) // BLOCK_SIZE_BYTES + 1))
                self._counts["corrupt_reads"] += 1
            raise
        with self._lock:
            self._counts["reads"] += 1
        return found

    def _packed_index(self, ledger_id: int, info: OffloadInfo) -> SegmentIndex:
        key = info.pack_key or ""
        cache_key = f"{key}@{info.pack_offset}"
        with self._lock:
            index = self._indexes.get(cache_key)
            if index is not None:
                self._indexes.move_to_end(cache_key)
                return index
        start = info.pack_offset + info.segment_bytes
        if info.segment_bytes + info.pack_index_bytes <= self._settings.read_ahead_bytes_max:
            # The member's first block before its index (at its end): ledgers read
            # in order stay one sequential pass over the pack, not a step back to
            # each member's frames after its index, which restarts read-ahead.
            self._read_span(key, info.pack_offset, info.pack_offset + 1, info.pack_bytes)
        data = bytes(self._read_span(key, start, start + info.pack_index_bytes, info.pack_bytes))
        index = decode_index(data, key=key)
        if (index.ledger.ledger_id != ledger_id or index.first_entry_id != 0
                or index.segment_length_bytes != info.segment_bytes):
            raise CorruptRecord(key, start, f"the member at {info.pack_offset} is not "
                                            f"ledger {ledger_id}'s")
        with self._lock:
            self._counts["index_fetches"] += 1
            if cache_key not in self._indexes:
                self._indexes[cache_key] = index
                self._index_bytes += index.memory_size_bytes
            while self._index_bytes > self._settings.index_cache_size_bytes and self._indexes:
                self._index_bytes -= self._indexes.popitem(last=False)[1].memory_size_bytes
        return index

    def window_bytes(self, ledger_id: int, info: OffloadInfo, entry_id: int = 0) -> int:
        """The read-ahead window of the segment holding ``entry_id`` (for tests and ops)."""
        segment, _ = self._locate(ledger_id, entry_id, info.key_prefix or "")
        with self._lock:
            return self._cache.window_bytes(segment.segment_key)

    def forget(self, ledger_id: int) -> None:
        """Drop what is cached for a ledger (deleted, or offloaded again)."""
        with self._lock:
            for segment in self._catalogs.get(ledger_id, []):
                self._cache.drop(segment.segment_key)
                self._chunks.pop(segment.segment_key, None)
        self.refresh(ledger_id)

    def refresh(self, ledger_id: int) -> None:
        """Forget the ledger's listing and indexes (it was tiered further, or
        consolidated), keeping cached bytes: they do not change.  The chunks
        known of a segment stay too: a read that located its segment before
        this still fetches its bytes from them (the tiering thread refreshes
        after every step, while reads run), and their bytes do not change
        either; the next listing adds the newer ones, and a chunk deleted by
        the consolidation sends the read to the ``segment`` object."""
        with self._lock:
            for segment in self._catalogs.pop(ledger_id, []):
                dropped = self._indexes.pop(segment.index_key, None)
                if dropped is not None:
                    self._index_bytes -= dropped.memory_size_bytes

    def statistics(self) -> dict[str, int]:
        with self._lock:
            stats = {**self._counts, **self._cache.counts}
            stats["read_cache_bytes"] = self._cache.size_bytes
            stats["index_cache_bytes"] = self._index_bytes
        for name in ("reads", "cache_hits", "cache_misses", "read_ahead_hits",
                     "read_ahead_wasted", "read_ahead_grows", "read_ahead_shrinks",
                     "bytes_fetched", "index_fetches", "catalog_lists", "corrupt_reads"):
            stats.setdefault(name, 0)
        return stats

    def close(self) -> None:
        self._read_ahead.shutdown(wait=True, cancel_futures=True)
        with self._lock:
            for pending in self._inflight.values():
                if not pending.done():
                    pending.set_exception(StorageUnavailable("remote reader closed"))

    # --- locating ---------------------------------------------------------------

    def _locate(self, ledger_id: int, entry_id: int,
                key_prefix: str) -> tuple[_Segment, SegmentIndex]:
        catalog = self._catalog(ledger_id, key_prefix)
        position = bisect.bisect_right([s.first_entry_id for s in catalog], entry_id) - 1
        if position < 0:
            raise CorruptRecord(key_prefix, 0, f"no offloaded segment holds entry {entry_id} "
                                               f"of ledger {ledger_id}")
        segment = catalog[position]
        index = self._index(segment)
        if entry_id >= index.end_entry_id:
            if entry_id > index.ledger.last_entry_id:
                raise NoSuchEntry(ledger_id, entry_id)
            raise CorruptRecord(key_prefix, 0, f"no offloaded segment holds entry {entry_id} "
                                               f"of ledger {ledger_id}")
        return segment, index

    def _catalog(self, ledger_id: int, key_prefix: str) -> list[_Segment]:
        with self._lock:
            catalog = self._catalogs.get(ledger_id)
            if catalog is not None:
                self._catalogs.move_to_end(ledger_id)
                return catalog
        seen: dict[int, set[str]] = {}
        chunks: dict[int, list[tuple[int, str]]] = {}
        for item in self._store.list_objects(key_prefix):
            match = _SEGMENT_TAIL.fullmatch(item.key[len(key_prefix):])
            if match is None:
                continue
            first = int(match[1])
            if match[3] is not None:
                chunks.setdefault(first, []).append((int(match[3]), item.key))
            else:
                seen.setdefault(first, set()).add(match[2])
        catalog = []
        for first in sorted(seen):
            if "index" not in seen[first]:
                continue
            held = () if "segment" in seen[first] else tuple(sorted(chunks.get(first, [])))
            if "segment" in seen[first] or held:
                catalog.append(_Segment(first, f"{key_prefix}seg-{first}/segment",
                                        f"{key_prefix}seg-{first}/index", held))
        with self._lock:
            self._counts["catalog_lists"] += 1
            self._catalogs[ledger_id] = catalog
            for segment in catalog:
                if segment.chunks:
                    # A listing that ran alongside an older one may finish
                    # first: chunks are only ever added, so keep them all.
                    known = dict(self._chunks.get(segment.segment_key, ()))
                    known.update(segment.chunks)
                    self._chunks[segment.segment_key] = tuple(sorted(known.items()))
                else:
                    self._chunks.pop(segment.segment_key, None)  # consolidated
            while len(self._catalogs) > _CATALOG_COUNT_MAX:
                for segment in self._catalogs.popitem(last=False)[1]:
                    self._chunks.pop(segment.segment_key, None)
        return catalog

    def _index(self, segment: _Segment) -> SegmentIndex:
        with self._lock:
            index = self._indexes.get(segment.index_key)
            if index is not None:
                self._indexes.move_to_end(segment.index_key)
                return index
        try:
            data = self._store.get_object(segment.index_key)
        except ObjectNotFound as exc:
            raise CorruptRecord(segment.index_key, 0, "index object is missing") from exc
        index = decode_index(data, key=segment.index_key)
        with self._lock:
            self._counts["index_fetches"] += 1
            if segment.index_key not in self._indexes:
                self._indexes[segment.index_key] = index
                self._index_bytes += index.memory_size_bytes
            while self._index_bytes > self._settings.index_cache_size_bytes and self._indexes:
                self._index_bytes -= self._indexes.popitem(last=False)[1].memory_size_bytes
        return index

    # --- blocks -------------------------------------------------------------------

    def _read_span(self, key: str, start: int, end: int,
                   segment_length: int) -> bytes | memoryview:
        """Bytes ``[start, end)`` of the segment: a view of one cached block, or
        the pieces of several joined (only the span's bytes are copied, not
        the whole blocks)."""
        pieces = []
        for number in range(start // BLOCK_SIZE_BYTES, (end - 1) // BLOCK_SIZE_BYTES + 1):
            base = number * BLOCK_SIZE_BYTES
            block = memoryview(self._block(key, number, segment_length))
            if base + len(block) < min(end, base + BLOCK_SIZE_BYTES):
                # Cached when the (tiered) segment was shorter: fetch it again.
                with self._lock:
                    self._cache.drop(key, range(number, number + 1))
                block = memoryview(self._block(key, number, segment_length))
            pieces.append(block[max(start, base) - base:min(end, base + len(block)) - base])
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)

    def _block(self, key: str, number: int, segment_length: int) -> bytes:
        segment_blocks = -(-segment_length // BLOCK_SIZE_BYTES)
        while True:
            own: tuple[Fetch, Future[Blocks]] | None = None
            pending: Future[Blocks] | None = None
            with self._lock:
                data, was_prefetched = self._cache.lookup(key, number)
                ahead = self._plan_ahead(key, number, segment_blocks) if was_prefetched else None
                if data is None:
                    pending = self._inflight.get((key, number))
                    if pending is None:
                        own = self._register(key, self._cache.plan_miss(key, number,
                                                                         segment_blocks))
            if ahead is not None:
                self._read_ahead.submit(self._prefetch, key, *ahead, segment_length)
            if data is not None:
                return data
            if own is not None:
                return self._fetch(key, own[0], own[1], segment_length, wanted=number)[number]
            assert pending is not None  # for mypy: data, own and pending cannot all be None
            # If another thread's fetch failed, the next pass fetches the block here.
            with contextlib.suppress(Exception):
                pending.result()

    def _plan_ahead(self, key: str, number: int,
                    segment_blocks: int) -> tuple[Fetch, Future[Blocks]] | None:
        fetch = self._cache.plan_ahead(key, number, segment_blocks)
        return None if fetch is None else self._register(key, fetch)

    def _register(self, key: str, fetch: Fetch) -> tuple[Fetch, Future[Blocks]]:
        future: Future[Blocks] = Future()
        for number in range(fetch.first_block, fetch.first_block + fetch.block_count):
            self._inflight.setdefault((key, number), future)
        return fetch, future

    def _prefetch(self, key: str, fetch: Fetch, future: Future[Blocks],
                  segment_length: int) -> None:
        try:
            self._fetch(key, fetch, future, segment_length, wanted=None)
        except Exception as exc:
            log.warning("read-ahead failed", extra={"key": key, "error": str(exc)})

    def _fetch(self, key: str, fetch: Fetch, future: Future[Blocks], segment_length: int, *,
               wanted: int | None) -> Blocks:
        start = fetch.first_block * BLOCK_SIZE_BYTES
        end = min(segment_length, (fetch.first_block + fetch.block_count) * BLOCK_SIZE_BYTES)
        try:
            data = self._get_range(key, start, end)
        except BaseException as exc:
            with self._lock:
                self._cache.cancel(key, fetch)
                self._settle(key, fetch, future)
            future.set_exception(exc)
            raise
        blocks = {fetch.first_block + i: data[o:o + BLOCK_SIZE_BYTES]
                  for i, o in enumerate(range(0, len(data), BLOCK_SIZE_BYTES))}
        with self._lock:
            self._cache.insert(key, fetch, list(blocks.values()), wanted=wanted,
                               now=self._clock())
            self._settle(key, fetch, future)
        future.set_result(blocks)
        return blocks

    def _get_range(self, key: str, start: int, end: int) -> bytes:
        return read_indexed_range(self._store, key, start, end, what="segment",
                                  short="segment shorter than its index",
                                  read=lambda: self._read_range(key, start, end))

    def _read_range(self, key: str, start: int, end: int) -> bytes:
        with self._lock:
            chunks = self._chunks.get(key)
        if chunks:
            try:
                return self._get_from_chunks(chunks, start, end)
            except ObjectNotFound:
                # Consolidated (and its chunks deleted) since the listing.
                with self._lock:
                    self._chunks.pop(key, None)
        return self._store.get_range(key, start, end)

    def _get_from_chunks(self, chunks: tuple[tuple[int, str], ...], start: int,
                         end: int) -> bytes:
        """Segment bytes ``[start, end)`` from the chunks that hold them."""
        positions = [position for position, _ in chunks]
        pieces: list[bytes] = []
        at = bisect.bisect_right(positions, start) - 1
        while start < end and 0 <= at < len(chunks):
            position, key = chunks[at]
            chunk_end = positions[at + 1] if at + 1 < len(chunks) else end
            piece = self._store.get_range(key, start - position, min(end, chunk_end) - position)
            if not piece:
                break
            pieces.append(piece)
            start += len(piece)
            at += 1
        return b"".join(pieces)

    def _settle(self, key: str, fetch: Fetch, future: Future[Blocks]) -> None:
        for number in range(fetch.first_block, fetch.first_block + fetch.block_count):
            if self._inflight.get((key, number)) is future:
                del self._inflight[(key, number)]
