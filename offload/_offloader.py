"""Offloading one sealed ledger: a persisted multi-step state machine (STYLE 8).

Steps, in order (each is idempotent; ``Step`` names them for logs and tests)::

    mark_in_progress   set_offload(IN_PROGRESS, bucket, key_prefix)   (RocksDB, synced)
    survey             list the ledger's prefix (paginated); abort its multipart uploads
    per segment, unless it already has ``segment`` + a valid ``index``:
      put_segment        a segment of at most one chunk: one PUT of ``segment``; else
      start_multipart    CreateMultipartUpload of ``segment``, once the first chunk is cut
      upload_chunk       PUT chunk-{pos} (Content-MD5), skipped when the same bytes exist
      copy_part          UploadPartCopy of that chunk into part pos/chunk_size + 1, as
                         soon as its PUT is done, while later chunks upload (copies
                         have their own bound); the part ETag must be the chunk's MD5
      complete_multipart CompleteMultipartUpload
      verify_segment     HeadObject: the real size (radosgw returns no ETag on complete)
      write_index        PUT ``index``
    delete_chunks      delete chunks and segments of an earlier, different plan
    mark_offloaded     set_offload(OFFLOADED, segment_bytes, offloaded_at)

Chunks are deleted *before* the ledger is marked OFFLOADED, so every state that
can leave stray objects is still IN_PROGRESS and is resumed at start-up; a
crash can never leave chunks behind an OFFLOADED ledger that nobody lists.
Until ``mark_offloaded`` nothing reads the objects, so each step may be redone.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor
from dataclasses import dataclass, field
from functools import partial
from typing import NamedTuple

from common.errors import CorruptRecord, NotSealed, invariant
from ledger import Entry, LedgerInfo, LedgerState, OffloadInfo, OffloadState

from ._bounded import BoundedTasks
from ._chunks import Chunk, ChunkCutter, etag_matches, md5_of
from ._errors import ObjectNotFound, RemoteStorageError, UploadNotFound
from ._format import (
    FRAME_HEADER_SIZE_BYTES,
    IndexBuilder,
    LedgerFacts,
    SegmentIndex,
    decode_index,
    encode_frame_header,
    encode_index,
)
from ._keys import KeyLayout
from ._progress import Progress
from ._source import LedgerSource
from ._store import ObjectStore
from ._survey import LedgerObjects, SegmentObjects, survey
from .settings import OffloadSettings

log = logging.getLogger("ledgerd.offload")


class Step(enum.StrEnum):
    MARK_IN_PROGRESS = "mark_in_progress"
    SURVEY = "survey"
    UPLOAD_CHUNK = "upload_chunk"
    PUT_SEGMENT = "put_segment"
    START_MULTIPART = "start_multipart"
    COPY_PART = "copy_part"
    COMPLETE_MULTIPART = "complete_multipart"
    VERIFY_SEGMENT = "verify_segment"
    WRITE_INDEX = "write_index"
    DELETE_CHUNKS = "delete_chunks"
    MARK_OFFLOADED = "mark_offloaded"


# Called after each step completes, with the ledger id; tests use it to stop a
# process at an exact point.  It runs on upload threads too.
StepHook = Callable[[Step, int], None]


def frame_bytes_of(ledger: LedgerInfo) -> int:
    """Bytes of all the ledger's segments: payloads plus one frame header each."""
    return ledger.length + FRAME_HEADER_SIZE_BYTES * (ledger.last_add_confirmed + 1)


class _EntryStream:
    """The ledger's entries in order, with one entry of look-ahead."""

    def __init__(self, source: LedgerSource, ledger_id: int, last_entry_id: int) -> None:
        self._source, self._ledger_id, self._last = source, ledger_id, last_entry_id
        self._entries: Iterator[Entry] = iter(())
        self._peeked: Entry | None = None
        self.position = -1

    def seek(self, entry_id: int) -> None:
        if entry_id != self.position:
            self._entries = iter(self._source.read_entries(self._ledger_id, entry_id, self._last))
            self._peeked, self.position = None, entry_id

    def peek(self) -> Entry | None:
        if self._peeked is None:
            self._peeked = next(self._entries, None)
        return self._peeked

    def take(self) -> Entry:
        entry = self.peek()
        invariant(entry is not None and entry.entry_id == self.position,
                  f"ledger {self._ledger_id}: expected entry {self.position} from the engine")
        assert entry is not None  # for mypy; the invariant above survives -O
        self._peeked, self.position = None, self.position + 1
        return entry


class _Multipart(NamedTuple):
    key: str
    upload_id: str


class _StoredChunk(NamedTuple):
    """A chunk object in S3, waiting to be copied into its part."""

    part_number: int
    key: str
    md5_hex: str


@dataclass
class _Run:
    ledger: LedgerInfo
    facts: LedgerFacts
    found: LedgerObjects
    progress: Progress
    stream: _EntryStream
    uploaded_chunk_keys: list[str] = field(default_factory=list)


class Offloader:
    def __init__(self, source: LedgerSource, store: ObjectStore, settings: OffloadSettings, *,
                 executor: Executor, step_hook: StepHook | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self._source, self._store, self._settings = source, store, settings
        self._executor = executor
        self._hook: StepHook = step_hook or (lambda step, ledger_id: None)
        self._clock = clock
        self.layout = KeyLayout(settings)

    def offload(self, ledger_id: int, progress: Progress | None = None) -> OffloadInfo:
        """Run (or resume) every step for ``ledger_id``; return the OFFLOADED state."""
        ledger = self._source.get_ledger(ledger_id)
        if ledger.state is not LedgerState.CLOSED:
            raise NotSealed(f"ledger {ledger_id} is {ledger.state}; only CLOSED ledgers "
                            "are offloaded")
        if ledger.offload.state is OffloadState.OFFLOADED:
            return ledger.offload
        prefix = self.layout.ledger_prefix(ledger_id)
        self._source.set_offload(ledger_id, OffloadInfo(
            state=OffloadState.IN_PROGRESS, bucket=self._store.bucket, key_prefix=prefix))
        self._hook(Step.MARK_IN_PROGRESS, ledger_id)
        run = self._start_run(ledger, progress or Progress(frame_bytes_of(ledger)))
        planned = self._offload_segments(run)
        self._delete_leftovers(run, planned)
        info = OffloadInfo(state=OffloadState.OFFLOADED, bucket=self._store.bucket,
                           key_prefix=prefix, segment_bytes=sum(planned.values()),
                           offloaded_at=self._clock())
        self._source.set_offload(ledger_id, info)
        self._hook(Step.MARK_OFFLOADED, ledger_id)
        log.info("ledger offloaded", extra={"ledger_id": ledger_id, "key_prefix": prefix,
                                            "segments": len(planned),
                                            "segment_bytes": info.segment_bytes})
        return info

    def delete_objects(self, ledger_id: int) -> int:
        """Delete every object under the ledger's prefix and abort its uploads."""
        prefix = self.layout.ledger_prefix(ledger_id)
        aborted = self._abort_uploads(prefix)
        keys = [info.key for info in self._store.list_objects(prefix)]
        self._store.delete_objects(keys)
        log.info("deleted offloaded objects", extra={
            "ledger_id": ledger_id, "objects": len(keys), "uploads_aborted": aborted})
        return len(keys)

    # --- steps -------------------------------------------------------------------

    def _start_run(self, ledger: LedgerInfo, progress: Progress) -> _Run:
        ledger_id = ledger.ledger_id
        prefix = self.layout.ledger_prefix(ledger_id)
        # No other attempt for this ledger runs now (one worker per ledger), so
        # every pending upload under its prefix was abandoned by a crash.
        aborted = self._abort_uploads(prefix)
        found = survey(self.layout, ledger_id, self._store.list_objects(prefix))
        self._hook(Step.SURVEY, ledger_id)
        log.info("offload started", extra={
            "ledger_id": ledger_id, "total_bytes": progress.total_bytes,
            "segments_found": len(found.segments), "uploads_aborted": aborted})
        facts = LedgerFacts(ledger_id=ledger_id, last_entry_id=ledger.last_add_confirmed,
                            length_bytes=ledger.length, created_at=ledger.created_at,
                            closed_at=ledger.closed_at or ledger.created_at,
                            metadata=dict(ledger.metadata))
        return _Run(ledger, facts, found, progress,
                    _EntryStream(self._source, ledger_id, ledger.last_add_confirmed))

    def _offload_segments(self, run: _Run) -> dict[int, int]:
        """Every segment done; returns first entry id -> segment bytes."""
        planned: dict[int, int] = {}
        first = 0
        while True:
            objects = run.found.segments.get(first) or SegmentObjects(first)
            index = self._completed_index(run, objects) or self._write_segment(run, objects)
            planned[first] = index.segment_length_bytes
            first = index.end_entry_id
            if first > run.ledger.last_add_confirmed:
                return planned

    def _completed_index(self, run: _Run, objects: SegmentObjects) -> SegmentIndex | None:
        if objects.segment is None or objects.index is None:
            return None
        try:
            index = decode_index(self._store.get_object(objects.index.key), key=objects.index.key)
        except (CorruptRecord, ObjectNotFound) as exc:
            log.warning("rewriting a damaged or vanished index", extra={"key": objects.index.key,
                                                            "error": str(exc)})
            return None
        if (index.ledger != run.facts or index.first_entry_id != objects.first_entry_id
                or index.segment_length_bytes != objects.segment.size_bytes):
            log.warning("rewriting a segment that does not match the ledger",
                        extra={"key": objects.segment.key})
            return None
        run.progress.advance(index.segment_length_bytes)
        return index

    def _frames(self, run: _Run, first_entry_id: int) -> Iterator[tuple[int, bytes, bytes]]:
        """``(entry_id, frame header, payload)`` of the segment starting at
        ``first_entry_id``; the two parts stay apart so nobody copies them
        into one frame only to copy that again into a chunk."""
        run.stream.seek(first_entry_id)
        length = count = 0
        while (entry := run.stream.peek()) is not None:
            size = FRAME_HEADER_SIZE_BYTES + len(entry.payload)
            if count and length + size > self._settings.segment_size_bytes_max:
                return
            run.stream.take()
            length, count = length + size, count + 1
            yield entry.entry_id, encode_frame_header(entry.entry_id, entry.payload,
                                                      entry.crc32c), entry.payload

    def _write_segment(self, run: _Run, objects: SegmentObjects) -> SegmentIndex:
        first, ledger_id = objects.first_entry_id, run.ledger.ledger_id
        builder = IndexBuilder(first)
        key = self.layout.segment_key(ledger_id, first)
        if objects.segment is not None:
            # The multipart upload completed before a crash: only the index is missing.
            for entry_id, header, payload in self._frames(run, first):
                builder.add(entry_id, len(header) + len(payload))
            if objects.segment.size_bytes == builder.length_bytes:
                run.progress.advance(builder.length_bytes)
                return self._write_index(run, builder)
            self._store.delete_objects([key])
            objects.segment = None
            return self._write_segment(run, objects)
        self._upload_segment(run, objects, builder)
        self._verify_segment(ledger_id, key, builder.length_bytes)
        return self._write_index(run, builder)

    def _upload_segment(self, run: _Run, objects: SegmentObjects, builder: IndexBuilder) -> None:
        cutter = ChunkCutter(self._settings.chunk_size_bytes)
        # Two stages, each with its own bound: a chunk PUT holds its chunk in
        # memory, a part copy holds nothing, so copies of early chunks run
        # alongside the PUTs of later ones instead of taking their upload slots.
        puts: BoundedTasks[_StoredChunk] = BoundedTasks(
            self._executor, self._settings.upload_concurrency)
        copies: BoundedTasks[tuple[int, str]] = BoundedTasks(
            self._executor, self._settings.upload_concurrency)
        upload: _Multipart | None = None
        try:
            for entry_id, header, payload in self._frames(run, objects.first_entry_id):
                builder.add(entry_id, len(header) + len(payload))
                for chunk in cutter.add(header, payload):
                    # A chunk was cut, so the segment is more than one chunk:
                    # consolidation starts now and runs alongside the uploads.
                    upload = upload or self._start_multipart(run, objects)
                    puts.submit(partial(self._put_chunk, run, objects, chunk))
                    self._copy_parts(run, upload, puts.take_finished(), copies)
            tail = cutter.finish()
            if upload is None:
                self._put_small_segment(run, objects, tail.data)
                return
            puts.submit(partial(self._put_chunk, run, objects, tail))
            self._copy_parts(run, upload, puts.as_finished(), copies)
            self._complete(run, upload, sorted(copies.results()))
        except BaseException:
            puts.cancel()
            copies.cancel()
            if upload is not None:
                self._abort_quietly(upload.key, upload.upload_id)
            raise

    def _start_multipart(self, run: _Run, objects: SegmentObjects) -> _Multipart:
        key = self.layout.segment_key(run.ledger.ledger_id, objects.first_entry_id)
        upload = _Multipart(key, self._store.create_multipart_upload(key))
        self._hook(Step.START_MULTIPART, run.ledger.ledger_id)
        return upload

    def _put_chunk(self, run: _Run, objects: SegmentObjects, chunk: Chunk) -> _StoredChunk:
        """Upload one chunk, unless an earlier attempt left the same bytes there."""
        ledger_id = run.ledger.ledger_id
        key = self.layout.chunk_key(ledger_id, objects.first_entry_id, chunk.byte_position)
        md5_hex, md5_b64 = md5_of(chunk.data)
        existing = objects.chunks.get(chunk.byte_position)
        if not (existing is not None and existing.size_bytes == len(chunk.data)
                and etag_matches(existing.etag, md5_hex)):
            etag = self._store.put_object(key, chunk.data, content_md5=md5_b64)
            _require_etag(etag, md5_hex, "PutObject", key)
            run.uploaded_chunk_keys.append(key)  # list.append is atomic across threads
        run.progress.advance(len(chunk.data))
        self._hook(Step.UPLOAD_CHUNK, ledger_id)
        return _StoredChunk(chunk.byte_position // self._settings.chunk_size_bytes + 1, key,
                            md5_hex)

    def _copy_parts(self, run: _Run, upload: _Multipart, stored: Iterable[_StoredChunk],
                    copies: BoundedTasks[tuple[int, str]]) -> None:
        for chunk in stored:
            copies.submit(partial(self._copy_part, run, upload, chunk))

    def _copy_part(self, run: _Run, upload: _Multipart, chunk: _StoredChunk) -> tuple[int, str]:
        """UploadPartCopy of a stored chunk into its part; returns (number, ETag)."""
        part_etag = self._store.upload_part_copy(upload.key, upload.upload_id,
                                                 chunk.part_number, chunk.key)
        # The part's ETag is the MD5 of the bytes copied: the chunk's, or S3 copied wrong.
        _require_etag(part_etag, chunk.md5_hex, "UploadPartCopy", chunk.key)
        self._hook(Step.COPY_PART, run.ledger.ledger_id)
        return chunk.part_number, part_etag

    def _put_small_segment(self, run: _Run, objects: SegmentObjects, data: bytearray) -> None:
        ledger_id = run.ledger.ledger_id
        key = self.layout.segment_key(ledger_id, objects.first_entry_id)
        md5_hex, md5_b64 = md5_of(data)
        _require_etag(self._store.put_object(key, data, content_md5=md5_b64), md5_hex,
                      "PutObject", key)
        run.progress.advance(len(data))
        self._hook(Step.PUT_SEGMENT, ledger_id)

    def _complete(self, run: _Run, upload: _Multipart, parts: list[tuple[int, str]]) -> None:
        try:
            self._store.complete_multipart_upload(upload.key, upload.upload_id, parts)
        except UploadNotFound:
            # A retried Complete whose first attempt succeeded: verify decides.
            log.warning("multipart upload gone at completion; verifying the segment",
                        extra={"key": upload.key})
        self._hook(Step.COMPLETE_MULTIPART, run.ledger.ledger_id)

    def _verify_segment(self, ledger_id: int, key: str, length_bytes: int) -> None:
        try:
            size = self._store.head_object(key).size_bytes
        except ObjectNotFound as exc:
            raise RemoteStorageError("HeadObject", key, 1,
                                     "segment missing after its multipart upload") from exc
        if size != length_bytes:
            self._store.delete_objects([key])
            raise RemoteStorageError("HeadObject", key, 1,
                                     f"segment is {size} bytes, expected {length_bytes}")
        self._hook(Step.VERIFY_SEGMENT, ledger_id)

    def _write_index(self, run: _Run, builder: IndexBuilder) -> SegmentIndex:
        index = builder.build(run.facts)
        key = self.layout.index_key(run.ledger.ledger_id, builder.first_entry_id)
        data = encode_index(index)
        md5_hex, md5_b64 = md5_of(data)
        _require_etag(self._store.put_object(key, data, content_md5=md5_b64), md5_hex,
                      "PutObject", key)
        self._hook(Step.WRITE_INDEX, run.ledger.ledger_id)
        return index

    def _delete_leftovers(self, run: _Run, planned: dict[int, int]) -> None:
        stale = [key for first, objects in run.found.segments.items() if first not in planned
                 for key in objects.object_keys()]
        chunks = sorted(set(run.found.chunk_keys()) | set(run.uploaded_chunk_keys))
        self._store.delete_objects(stale + chunks)
        self._hook(Step.DELETE_CHUNKS, run.ledger.ledger_id)

    def _abort_uploads(self, prefix: str) -> int:
        pending = list(self._store.list_multipart_uploads(prefix))
        for upload in pending:
            self._abort_quietly(upload.key, upload.upload_id)
        return len(pending)

    def _abort_quietly(self, key: str, upload_id: str) -> None:
        try:
            self._store.abort_multipart_upload(key, upload_id)
        except UploadNotFound:
            pass  # already gone: what aborting wanted
        except RemoteStorageError as exc:
            # The next run lists and aborts it again; nothing is lost meanwhile.
            log.warning("could not abort a multipart upload", extra={
                "key": key, "upload_id": upload_id, "error": str(exc)})


def _require_etag(etag: str, md5_hex: str, operation: str, key: str) -> None:
    if not etag_matches(etag, md5_hex):
        raise RemoteStorageError(operation, key, 1,
                                 f"ETag {etag} is not the MD5 {md5_hex} of the bytes sent")
