"""Tiering OPEN ledgers as they fill (DESIGN.md §6; seed 001's quasi-real-time tiering).

A ledger's frames are cut into segments exactly as a sealed offload cuts them
(at entry boundaries, at most ``segment_size_bytes_max``, at least one entry)
and each segment into chunks at exact multiples of ``chunk_size_bytes`` (the
bytes of ``chunk-{p}`` are the segment's bytes ``[p, p + chunk)``, so they can
become its multipart parts with UploadPartCopy at close, and a reader may take
the same range from either).  One step of one ledger, in order::

    read              acknowledged entries after the tier position
                      (``scan_entries``: no read cache), straight into chunks
    upload_chunk      PUT chunk-{byte_position} for each full chunk, up to
                      ``upload_concurrency`` of them in parallel; and the segment's
                      last, shorter chunk once an entry past its end is acknowledged
    write_tier_index  PUT the segment's ``index``: the entries wholly in its chunks,
                      with the ledger's facts so far (``closed_at`` 0: open)
    record_tier       the new position recorded by the engine (a TIER journal
                      record, synced): :class:`ledger.TierPosition`

Each write comes before whatever vouches for it: a chunk before the index
covering it, the index before the position.  So the recorded position never
claims bytes S3 lacks, and what a reader (or Spark) sees through an index is
always in chunks.  A crash between steps leaves chunks or an index ahead of
the recorded position; the next step starts from the position and rewrites
them with the same bytes (the same entries cut the same way).

The cursor of a ledger (the segment being tiered, the builder of its index)
lives in memory; after a restart it is rebuilt from the recorded position and
one GET of the segment's index (its points below the position).  Nothing is
listed: the position alone says what is in S3.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from functools import partial

from common.errors import CorruptRecord, InvariantViolation, invariant
from ledger import LedgerInfo, LedgerState, TierPosition

from ._bounded import BoundedTasks
from ._chunks import Chunk, md5_of
from ._errors import ObjectNotFound
from ._format import (
    FRAME_HEADER_SIZE_BYTES,
    OPEN_CLOSED_AT,
    IndexBuilder,
    LedgerFacts,
    decode_index,
    encode_frame_header,
    encode_index,
    frame_bytes,
)
from ._keys import KeyLayout
from ._multipart import require_etag
from ._source import LedgerSource
from ._store import ObjectStore
from .settings import OffloadSettings

log = logging.getLogger("ledgerd.offload.tiering")


class TierStep(enum.StrEnum):
    UPLOAD_CHUNK = "upload_chunk"
    WRITE_TIER_INDEX = "write_tier_index"
    RECORD_TIER = "record_tier"


# Called after each step with the ledger id (tests stop a process there); it
# runs on upload threads too (upload_chunk).
TierHook = Callable[[TierStep, int], None]


def tiered_bytes(position: TierPosition) -> int:
    """The ledger's frame bytes in chunks at ``position``."""
    return position.segment_start_bytes + position.byte_position


def pending_bytes(ledger: LedgerInfo) -> int:
    """Acknowledged frame bytes of the ledger that are not in chunks yet."""
    return frame_bytes(ledger.last_add_confirmed, ledger.length) - tiered_bytes(ledger.tier)


@dataclass
class _Cursor:
    """Where tiering of one ledger stands (what the recorded position says)."""

    segment_start_bytes: int
    # The segment's entries wholly in chunks; its length is where the next
    # entry's frame starts.
    builder: IndexBuilder
    byte_position: int

    @property
    def position(self) -> TierPosition:
        return TierPosition(segment_first_entry_id=self.builder.first_entry_id,
                            byte_position=self.byte_position,
                            entry_id=self.builder.end_entry_id,
                            entry_offset=self.builder.length_bytes,
                            segment_start_bytes=self.segment_start_bytes)


@dataclass
class _Cut:
    chunks: list[Chunk]
    builder: IndexBuilder
    byte_position: int
    # The segment ended (an entry past it is acknowledged): its last chunk is
    # in ``chunks`` and the next step starts a new segment.
    segment_done: bool


class _ChunkWriter:
    """Frames of one segment into chunk-size buffers at exact multiples of the
    chunk size, from ``start`` on (bytes before it are in S3 already)."""

    def __init__(self, chunk_size_bytes: int, start: int) -> None:
        self._size = chunk_size_bytes
        self.chunk_start = start
        self._buffer = bytearray(chunk_size_bytes)
        self._filled = 0
        self.chunks: list[Chunk] = []

    def write(self, at: int, piece: bytes) -> None:
        """``piece`` occupies segment bytes ``[at, at + len(piece))``."""
        view = memoryview(piece)
        written_to = self.chunk_start + self._filled
        if at < written_to:
            view = view[written_to - at:]
        while view:
            room = self._size - self._filled
            taken = view[:room]
            self._buffer[self._filled:self._filled + len(taken)] = taken
            self._filled += len(taken)
            view = view[len(taken):]
            if self._filled == self._size:
                self.chunks.append(Chunk(self.chunk_start, self._buffer))
                self.chunk_start += self._size
                self._buffer, self._filled = bytearray(self._size), 0

    def finish_segment(self) -> None:
        """The segment ends here: what was written since the last full chunk
        is its last chunk."""
        if self._filled:
            del self._buffer[self._filled:]
            self.chunks.append(Chunk(self.chunk_start, self._buffer))
            self.chunk_start += self._filled
            self._buffer, self._filled = bytearray(self._size), 0


class Tierer:
    """Tiers open ledgers one step at a time; the caller serialises the steps
    of one ledger (and keeps them apart from that ledger's offload at close)."""

    def __init__(self, source: LedgerSource, store: ObjectStore, settings: OffloadSettings, *,
                 executor: Executor, step_hook: TierHook | None = None,
                 on_tiered: Callable[[int], None] | None = None) -> None:
        self._source, self._store, self._settings = source, store, settings
        self._executor = executor
        self._hook: TierHook = step_hook or (lambda step, ledger_id: None)
        self._on_tiered = on_tiered or (lambda ledger_id: None)
        self.layout = KeyLayout(settings)
        self._cursors: dict[int, _Cursor] = {}

    def has_work(self, ledger: LedgerInfo) -> bool:
        """Whether the ledger holds a full chunk of acknowledged bytes to tier."""
        return (ledger.state is not LedgerState.CLOSED
                and pending_bytes(ledger) >= self._settings.chunk_size_bytes)

    def forget(self, ledger_id: int) -> None:
        """Drop the cursor of a ledger closed (its offload takes over) or deleted."""
        self._cursors.pop(ledger_id, None)

    def tier(self, ledger_id: int) -> int:
        """One step: upload what is ready, record the position; the chunks
        uploaded (0: nothing to do)."""
        ledger = self._source.get_ledger(ledger_id)
        if not self.has_work(ledger):
            return 0
        cursor = self._cursor(ledger)
        chunk = self._settings.chunk_size_bytes
        chunks_max = max(1, min(self._settings.upload_concurrency, pending_bytes(ledger) // chunk))
        cut = self._cut(ledger, cursor, chunks_max)
        if not cut.chunks and not cut.segment_done:
            return 0
        try:
            self._upload(ledger_id, cursor, cut)
        except BaseException:
            # What S3 holds may now run ahead of the position: the next step
            # starts again from the recorded position (rebuilt from S3).
            self.forget(ledger_id)
            raise
        self._on_tiered(ledger_id)
        return len(cut.chunks)

    # --- the cursor ------------------------------------------------------------------

    def _cursor(self, ledger: LedgerInfo) -> _Cursor:
        cursor = self._cursors.get(ledger.ledger_id)
        if cursor is None or cursor.position != ledger.tier:
            cursor = self._cursors[ledger.ledger_id] = self._load(ledger)
        return cursor

    def _load(self, ledger: LedgerInfo) -> _Cursor:
        """The cursor the recorded position describes: the segment's index from
        S3, cut back to the entries below the position."""
        at = ledger.tier
        first = at.segment_first_entry_id
        if at.entry_id == first:
            invariant(at.entry_offset == 0, f"ledger {ledger.ledger_id}: tier position {at} "
                                            "has an offset but no entry")
            return _Cursor(at.segment_start_bytes, IndexBuilder(first), at.byte_position)
        key = self.layout.index_key(ledger.ledger_id, first)
        try:
            index = decode_index(self._store.get_object(key), key=key)
        except ObjectNotFound as exc:
            raise CorruptRecord(key, 0, f"the index of ledger {ledger.ledger_id}'s segment "
                                        f"being tiered is missing (position {at})") from exc
        if index.first_entry_id != first or index.end_entry_id < at.entry_id:
            raise CorruptRecord(key, 0, f"index covers entries {index.first_entry_id}.."
                                        f"{index.end_entry_id - 1}, the recorded tier "
                                        f"position {at} needs up to {at.entry_id - 1}")
        try:
            builder = IndexBuilder.resume(index, end_entry_id=at.entry_id,
                                          length_bytes=at.entry_offset)
        except InvariantViolation as exc:
            raise CorruptRecord(key, 0, f"index does not match tier position {at}: "
                                        f"{exc}") from exc
        return _Cursor(at.segment_start_bytes, builder, at.byte_position)

    # --- one step ----------------------------------------------------------------------

    def _cut(self, ledger: LedgerInfo, cursor: _Cursor, chunks_max: int) -> _Cut:
        """Up to ``chunks_max`` full chunks from the entries after the position
        (fewer if the segment ends first: then its last chunk too)."""
        builder = cursor.builder.copy()
        writer = _ChunkWriter(self._settings.chunk_size_bytes, cursor.byte_position)
        # Frames written (at least in part) but not wholly in a full chunk yet.
        pending: list[tuple[int, int]] = []
        segment_length = builder.length_bytes
        done = False
        for entry in self._source.scan_entries(ledger.ledger_id, builder.end_entry_id,
                                               ledger.last_add_confirmed):
            size = FRAME_HEADER_SIZE_BYTES + len(entry.payload)
            if (builder.entry_count or pending) and (
                    segment_length + size > self._settings.segment_size_bytes_max):
                done = True
                break
            writer.write(segment_length, encode_frame_header(entry.entry_id, entry.payload,
                                                             entry.crc32c))
            writer.write(segment_length + FRAME_HEADER_SIZE_BYTES, entry.payload)
            segment_length += size
            pending.append((entry.entry_id, size))
            while pending and builder.length_bytes + pending[0][1] <= writer.chunk_start:
                builder.add(*pending.pop(0))
            if len(writer.chunks) >= chunks_max:
                break
        if done:
            writer.finish_segment()
            for entry_id, size in pending:
                builder.add(entry_id, size)
        return _Cut(writer.chunks, builder, writer.chunk_start, done)

    def _upload(self, ledger_id: int, cursor: _Cursor, cut: _Cut) -> None:
        first = cursor.builder.first_entry_id
        tasks: BoundedTasks[str] = BoundedTasks(self._executor,
                                                self._settings.upload_concurrency)
        for chunk in cut.chunks:
            tasks.submit(partial(self._put_chunk, ledger_id, first, chunk))
        tasks.results()
        ledger = self._source.get_ledger(ledger_id)
        index = cut.builder.build(self._facts_so_far(ledger, cursor, cut.builder))
        key = self.layout.index_key(ledger_id, first)
        data = encode_index(index)
        md5_hex, md5_b64 = md5_of(data)
        require_etag(self._store.put_object(key, data, content_md5=md5_b64), md5_hex,
                     "PutObject", key)
        self._hook(TierStep.WRITE_TIER_INDEX, ledger_id)
        if cut.segment_done:
            # The next segment starts at the first entry that did not fit.
            nxt = _Cursor(cursor.segment_start_bytes + cut.builder.length_bytes,
                          IndexBuilder(cut.builder.end_entry_id), 0)
        else:
            nxt = _Cursor(cursor.segment_start_bytes, cut.builder, cut.byte_position)
        self._source.record_tier_position(ledger_id, nxt.position)
        self._cursors[ledger_id] = nxt
        self._hook(TierStep.RECORD_TIER, ledger_id)
        log.debug("tiered", extra={"ledger_id": ledger_id, "chunks": len(cut.chunks),
                                   "position": str(nxt.position)})

    def _put_chunk(self, ledger_id: int, first: int, chunk: Chunk) -> str:
        # No Content-MD5, as for parts: botocore signs the body's SHA-256,
        # which S3 checks, and every payload's CRC32C is checked on reads.
        etag = self._store.put_object(self.layout.chunk_key(ledger_id, first, chunk.byte_position),
                                      chunk.data)
        self._hook(TierStep.UPLOAD_CHUNK, ledger_id)
        return etag

    @staticmethod
    def _facts_so_far(ledger: LedgerInfo, cursor: _Cursor, builder: IndexBuilder) -> LedgerFacts:
        """The ledger as far as its chunks go: entries below the builder's end."""
        end = builder.end_entry_id
        frames = cursor.segment_start_bytes + builder.length_bytes
        return LedgerFacts(ledger_id=ledger.ledger_id, last_entry_id=end - 1,
                           length_bytes=frames - FRAME_HEADER_SIZE_BYTES * end,
                           created_at=ledger.created_at, closed_at=OPEN_CLOSED_AT,
                           metadata=dict(ledger.metadata))
