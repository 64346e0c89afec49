"""Executor side of a scan: ranged GETs of one partition, frames → Arrow batches.

Each planned read is fetched with one ranged GET (the next one is fetched
while the current one is decoded) and decoded by
:func:`offload._format.iter_frames`, which checks every frame's entry id and
payload CRC32C.  A mismatch fails the task with a ``CorruptRecord``
naming the ledger, the entry and the object key: bytes that fail their
check are never returned as data (DESIGN.md §4).
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import pyarrow as pa

from common.errors import CorruptRecord

from .._errors import ObjectNotFound
from .._format import iter_frames
from .._store import ObjectStore
from ._plan import PlannedRange, Span

ARROW_SCHEMA = pa.schema([("ledger_id", pa.int64()), ("entry_id", pa.int64()),
                          ("payload", pa.binary()), ("crc32c", pa.int64())])
SCHEMA_DDL = "ledger_id long, entry_id long, payload binary, crc32c long"

# Bytes of payload per Arrow batch: big enough to amortise the per-batch cost,
# small enough that a worker holds a few of them at once.
BATCH_PAYLOAD_BYTES = 4 * 1024 * 1024
BATCH_ROWS_MAX = 65536


def segment_corrupt(ledger_id: int, entry_id: int, key: str, offset: int,
                    reason: str) -> CorruptRecord:
    """The error of a bad frame: ``corrupt record in KEY at offset O: ledger L entry E: …``.

    A plain :class:`CorruptRecord` (the error tree's corruption leaf, mapped
    to ``EIO`` by ``app/``) whose reason names the ledger and the entry."""
    return CorruptRecord(key, offset, f"ledger {ledger_id} entry {entry_id}: {reason}")


def fetch_span(store: ObjectStore, ledger_id: int, key: str, span: Span,
               chunks: tuple[tuple[int, str], ...] = (), base: int = 0) -> bytes:
    try:
        data = _from_chunks(store, chunks, span) if chunks else None
        if data is None:
            data = store.get_range(key, base + span.start, base + span.end)
    except ObjectNotFound as exc:
        # The index says the segment exists: its absence is data loss, not "no rows".
        raise segment_corrupt(ledger_id, span.first_entry_id, key, span.start,
                              "segment object is missing") from exc
    if len(data) != span.size_bytes:
        raise segment_corrupt(ledger_id, span.first_entry_id, key, span.start,
                             f"object ends early: got {len(data)} of {span.size_bytes} bytes")
    return data


def _from_chunks(store: ObjectStore, chunks: tuple[tuple[int, str], ...],
                 span: Span) -> bytes | None:
    """The span's bytes from the chunks holding them; None once a chunk is gone
    (consolidated since planning: the segment object holds the same bytes)."""
    pieces: list[bytes] = []
    start = span.start
    for i, (position, key) in enumerate(chunks):
        end = chunks[i + 1][0] if i + 1 < len(chunks) else span.end
        if end <= start or start >= span.end:
            continue
        try:
            pieces.append(store.get_range(key, start - position, min(end, span.end) - position))
        except ObjectNotFound:
            return None
        start += len(pieces[-1])
    return b"".join(pieces)


def frames_of(ledger_id: int, key: str, span: Span,
              data: bytes) -> Iterator[tuple[int, bytes, int]]:
    """``(entry_id, payload, crc32c)`` of a fetched span; corruption names the entry."""
    next_entry = span.first_entry_id
    try:
        for entry_id, payload, crc in iter_frames(data, key=key, offset=span.start,
                                                  first_entry_id=span.first_entry_id):
            next_entry = entry_id + 1
            yield entry_id, payload, crc
    except CorruptRecord as exc:
        raise segment_corrupt(ledger_id, next_entry, key, exc.offset, exc.reason) from exc


def fetched_spans(store: ObjectStore, part: PlannedRange) -> Iterator[tuple[Span, bytes]]:
    """The partition's spans in order, the next one fetched while this one is decoded."""
    with ThreadPoolExecutor(1, thread_name_prefix="ledgerd-prefetch") as pool:
        pending: Future[bytes] | None = None
        for i, span in enumerate(part.reads):
            data = pending.result() if pending is not None else fetch_span(
                store, part.ledger_id, part.segment_key, span, part.chunks, part.base)
            following = part.reads[i + 1] if i + 1 < len(part.reads) else None
            pending = (pool.submit(fetch_span, store, part.ledger_id, part.segment_key,
                                   following, part.chunks, part.base)
                       if following is not None else None)
            yield span, data


class _BatchBuilder:
    def __init__(self, ledger_id: int) -> None:
        self._ledger_id = ledger_id
        self._clear()

    def _clear(self) -> None:
        self.entry_ids: list[int] = []
        self.payloads: list[bytes] = []
        self.crcs: list[int] = []
        self.payload_bytes = 0

    def add(self, entry_id: int, payload: bytes, crc: int) -> None:
        self.entry_ids.append(entry_id)
        self.payloads.append(payload)
        self.crcs.append(crc)
        self.payload_bytes += len(payload)

    @property
    def full(self) -> bool:
        return (self.payload_bytes >= BATCH_PAYLOAD_BYTES
                or len(self.entry_ids) >= BATCH_ROWS_MAX)

    def take(self) -> pa.RecordBatch:
        rows = len(self.entry_ids)
        batch = pa.RecordBatch.from_arrays([
            pa.array([self._ledger_id] * rows, type=pa.int64()),
            pa.array(self.entry_ids, type=pa.int64()),
            pa.array(self.payloads, type=pa.binary()),
            pa.array(self.crcs, type=pa.int64()),
        ], schema=ARROW_SCHEMA)
        self._clear()
        return batch


def read_group(store: ObjectStore, parts: list[PlannedRange]) -> Iterator[pa.RecordBatch]:
    """The rows of a partition of several ranges of one object (packed ledgers,
    :func:`~offload.spark._plan.grouped`): one ranged GET of all of them."""
    if len(parts) == 1:
        yield from read_range(store, parts[0])
        return
    first, last = parts[0], parts[-1]
    whole = Span(first.base + first.start, last.base + last.end, 0)
    data = fetch_span(store, first.ledger_id, first.segment_key, whole)
    for part in parts:
        spans = [(span, data[part.base + span.start - whole.start:
                             part.base + span.end - whole.start]) for span in part.reads]
        yield from read_range(store, part, spans)


def read_range(store: ObjectStore, part: PlannedRange,
               spans: list[tuple[Span, bytes]] | None = None) -> Iterator[pa.RecordBatch]:
    """The rows of one partition that its entry bounds admit, as Arrow batches
    (``spans``: its reads fetched already)."""
    builder = _BatchBuilder(part.ledger_id)
    bounds = part.entry_id
    for span, data in spans if spans is not None else fetched_spans(store, part):
        for entry_id, payload, crc in frames_of(part.ledger_id, part.segment_key, span, data):
            if bounds.admits(entry_id):
                builder.add(entry_id, payload, crc)
                if builder.full:
                    yield builder.take()
    if builder.entry_ids:
        yield builder.take()
