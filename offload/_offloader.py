"""Offloading one sealed ledger: a persisted multi-step state machine (STYLE 8).

Steps, in order (each is idempotent; ``Step`` names them for logs and tests)::

    mark_in_progress   set_offload(IN_PROGRESS, bucket, key_prefix), keeping a
                       persisted multipart upload                (RocksDB, synced)
    survey             abort the prefix's multipart uploads but the persisted one;
                       list the prefix (paginated)
    per segment, unless it already has ``segment`` + a valid ``index``:
      verify_segment     a ``segment`` is there (a crash before its index): its size
                         and ETag must be those of the entries' bytes, else replaced
      put_segment        a segment of at most one part: one PUT of ``segment``; else
      start_multipart    CreateMultipartUpload of ``segment`` once the first part is
                         cut; its key and id persisted (set_offload, synced)
      list_parts         instead, when the persisted upload is this segment's:
                         ListParts (paginated) and resume it
      upload_part        UploadPart of each part-size range, ``upload_concurrency`` in
                         flight, straight from the entries (the signed SHA-256 of each
                         body is checked by S3); skipped when the upload holds the same
                         bytes (size, and MD5 as its ETag)
      record_parts       the parts finished so far persisted (set_offload, synced),
                         at most every ``parts_record_interval_s`` and at the end
      complete_multipart CompleteMultipartUpload
      verify_segment     HeadObject: the size, and the ETag S3 derives from the part
                         ETags it answered (radosgw returns no ETag from Complete)
      write_index        PUT ``index``
    delete_leftovers   abort every upload left under the prefix (a Create whose answer
                       was lost), delete chunks (chunk layout) and segments of an
                       earlier, different plan
    mark_offloaded     set_offload(OFFLOADED, segment_bytes, offloaded_at)

A failed segment upload is aborted (the service then records FAILED); a run
stopped by the service or by a crash keeps its upload, which the next run
resumes.  Leftovers are deleted *before* the ledger is marked OFFLOADED, so
every state that can leave stray objects is still IN_PROGRESS and is resumed
at start-up.  Until ``mark_offloaded`` nothing reads the objects, so each step
may be redone.

Chunk objects and UploadPartCopy (``ObjectStore.upload_part_copy``) are the
layout of ledgers tiered while open; a sealed ledger never writes them, and
this run deletes any that an offload of the chunk layout left behind.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Executor
from dataclasses import dataclass, replace
from functools import partial

from common.errors import CorruptRecord, NotSealed, invariant
from ledger import Entry, LedgerInfo, LedgerState, OffloadInfo, OffloadState

from ._bounded import BoundedTasks
from ._chunks import ChunkCutter, is_md5, md5_of, multipart_etag, object_etag_matches
from ._consolidation import ChunkedPart, chunked_part, skip_bytes, was_tiered
from ._errors import ObjectNotFound, OffloadCancelled, RemoteStorageError, UploadNotFound
from ._format import (
    FRAME_HEADER_SIZE_BYTES,
    IndexBuilder,
    LedgerFacts,
    SegmentIndex,
    decode_index,
    encode_frame_header,
    encode_index,
    frame_bytes,
)
from ._keys import KeyLayout
from ._multipart import PartDone, SegmentUpload, StrayParts, require_etag
from ._progress import Progress
from ._source import LedgerSource
from ._store import ObjectInfo, ObjectStore, PartInfo, PendingUpload
from ._survey import LedgerObjects, SegmentObjects, survey
from .settings import OffloadSettings

log = logging.getLogger("ledgerd.offload")


class Step(enum.StrEnum):
    MARK_IN_PROGRESS = "mark_in_progress"
    SURVEY = "survey"
    PUT_SEGMENT = "put_segment"
    START_MULTIPART = "start_multipart"
    LIST_PARTS = "list_parts"
    UPLOAD_PART = "upload_part"
    COPY_CHUNK = "copy_chunk"
    RECORD_PARTS = "record_parts"
    COMPLETE_MULTIPART = "complete_multipart"
    VERIFY_SEGMENT = "verify_segment"
    WRITE_INDEX = "write_index"
    DELETE_LEFTOVERS = "delete_leftovers"
    MARK_OFFLOADED = "mark_offloaded"


# Called after each step completes, with the ledger id; tests use it to stop a
# process at an exact point.  It runs on upload threads too (upload_part).
StepHook = Callable[[Step, int], None]


def frame_bytes_of(ledger: LedgerInfo) -> int:
    """Bytes of all the ledger's segments: payloads plus one frame header each."""
    return frame_bytes(ledger.last_add_confirmed, ledger.length)


class _EntryStream:
    """The ledger's entries in order, with one entry of look-ahead."""

    def __init__(self, source: LedgerSource, ledger_id: int, last_entry_id: int) -> None:
        self._source, self._ledger_id, self._last = source, ledger_id, last_entry_id
        self._entries: Iterator[Entry] = iter(())
        self._peeked: Entry | None = None
        self.position = -1

    def seek(self, entry_id: int) -> None:
        if entry_id != self.position:
            self._entries = iter(self._source.scan_entries(self._ledger_id, entry_id, self._last))
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


@dataclass
class _Run:
    ledger: LedgerInfo
    facts: LedgerFacts
    found: LedgerObjects
    progress: Progress
    stream: _EntryStream
    # The offload state as last persisted; only the thread running offload() writes it.
    info: OffloadInfo


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
        info = self._mark_in_progress(ledger, prefix)
        run = self._start_run(ledger, info, progress or Progress(frame_bytes_of(ledger)))
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
        aborted = self._abort_uploads(prefix, keep=None)
        keys = [info.key for info in self._store.list_objects(prefix)]
        self._store.delete_objects(keys)
        log.info("deleted offloaded objects", extra={
            "ledger_id": ledger_id, "objects": len(keys), "uploads_aborted": aborted})
        return len(keys)

    # --- steps -------------------------------------------------------------------

    def _mark_in_progress(self, ledger: LedgerInfo, prefix: str) -> OffloadInfo:
        current = ledger.offload
        resumable = (current.state is OffloadState.IN_PROGRESS and current.upload_id is not None
                     and current.bucket == self._store.bucket and current.key_prefix == prefix
                     and (current.upload_key or "").startswith(prefix))
        info = (replace(current, state=OffloadState.IN_PROGRESS, error=None, retry_at=None)
                if resumable else OffloadInfo(
                    state=OffloadState.IN_PROGRESS, bucket=self._store.bucket, key_prefix=prefix,
                    failures=current.failures))
        self._source.set_offload(ledger.ledger_id, info)
        self._hook(Step.MARK_IN_PROGRESS, ledger.ledger_id)
        return info

    def _start_run(self, ledger: LedgerInfo, info: OffloadInfo, progress: Progress) -> _Run:
        ledger_id = ledger.ledger_id
        prefix = self.layout.ledger_prefix(ledger_id)
        # No other attempt for this ledger runs now (one worker per ledger), so
        # every pending upload under its prefix but the one persisted to be
        # resumed was abandoned by a crash.
        keep = (PendingUpload(info.upload_key, info.upload_id)
                if info.upload_key is not None and info.upload_id is not None else None)
        # Quietly: one that cannot be aborted now is aborted by delete_leftovers.
        aborted = self._abort_uploads(prefix, keep=keep, quietly=True)
        found = survey(self.layout, ledger_id, self._store.list_objects(prefix))
        self._hook(Step.SURVEY, ledger_id)
        log.info("offload started", extra={
            "ledger_id": ledger_id, "total_bytes": progress.total_bytes,
            "segments_found": len(found.segments), "uploads_aborted": aborted,
            "resuming_upload": keep is not None})
        facts = LedgerFacts(ledger_id=ledger_id, last_entry_id=ledger.last_add_confirmed,
                            length_bytes=ledger.length, created_at=ledger.created_at,
                            closed_at=ledger.closed_at or ledger.created_at,
                            metadata=dict(ledger.metadata))
        return _Run(ledger, facts, found, progress,
                    _EntryStream(self._source, ledger_id, ledger.last_add_confirmed), info)

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

    def _frames(self, run: _Run, first_entry_id: int, length: int = 0,
                count: int = 0) -> Iterator[tuple[int, bytes, bytes]]:
        """``(entry_id, frame header, payload)`` of the segment from
        ``first_entry_id`` on (``count`` entries of ``length`` bytes before
        it); the two parts stay apart so nobody copies them into one frame
        only to copy that again into a part."""
        run.stream.seek(first_entry_id)
        while (entry := run.stream.peek()) is not None:
            size = FRAME_HEADER_SIZE_BYTES + len(entry.payload)
            if count and length + size > self._settings.segment_size_bytes_max:
                return
            run.stream.take()
            length, count = length + size, count + 1
            yield entry.entry_id, encode_frame_header(entry.entry_id, entry.payload,
                                                      entry.crc32c), entry.payload

    def _write_segment(self, run: _Run, objects: SegmentObjects) -> SegmentIndex:
        first = objects.first_entry_id
        key = self.layout.segment_key(run.ledger.ledger_id, first)
        chunked = self._chunked_part(run, objects)
        if objects.segment is not None:
            # Completed (or PUT) before a crash, in this layout or the chunk
            # layout: only the index is missing, if the bytes are right.
            builder = self._builder(first, chunked)
            if self._segment_matches(run, objects.segment, builder, chunked):
                return self._write_index(run, builder)
            log.warning("replacing a segment that does not hold the ledger's bytes",
                        extra={"key": key, "size_bytes": objects.segment.size_bytes,
                               "etag": objects.segment.etag})
            self._store.delete_objects([key])
        builder = self._builder(first, chunked)
        try:
            self._upload_segment(run, key, builder, chunked)
        except StrayParts as exc:
            # Aborted by _upload_segment: the segment goes again, into a new upload.
            log.warning("sending a segment again", extra={"key": key, "error": str(exc)})
            builder = self._builder(first, chunked)
            self._upload_segment(run, key, builder, chunked)
        return self._write_index(run, builder)

    @staticmethod
    def _builder(first: int, chunked: ChunkedPart | None) -> IndexBuilder:
        return IndexBuilder(first) if chunked is None else chunked.builder.copy()

    def _chunked_part(self, run: _Run, objects: SegmentObjects) -> ChunkedPart | None:
        """The chunks of a segment tiered while its ledger was open, or None
        (never tiered; or its chunks are unusable but every entry is local)."""
        ledger, first = run.ledger, objects.first_entry_id
        if not was_tiered(ledger, first):
            return None
        index_key = self.layout.index_key(ledger.ledger_id, first)
        try:
            found: ChunkedPart | str = chunked_part(
                ledger, objects, decode_index(self._store.get_object(index_key), key=index_key),
                self._settings.chunk_size_bytes)
        except (ObjectNotFound, CorruptRecord) as exc:
            found = f"index {index_key}: {exc}"
        if isinstance(found, ChunkedPart):
            return found
        if not ledger.offload.local_deleted and ledger.local_first_entry_id <= first:
            log.warning("chunks of a tiered segment unusable; sending it from the local copy",
                        extra={"ledger_id": ledger.ledger_id, "segment": first, "error": found})
            return None
        # Entries of this segment exist nowhere else: loud, and retried later.
        raise CorruptRecord(index_key, 0, f"cannot consolidate ledger {ledger.ledger_id}: "
                                          f"{found}")

    def _rest(self, run: _Run, builder: IndexBuilder, chunked: ChunkedPart | None,
              ) -> Iterator[tuple[int, int, tuple[bytes | memoryview, ...]]]:
        """``(entry_id, frame size, pieces)`` of the segment's frames after the
        builder's entries, without the bytes chunks hold already."""
        if chunked is not None and builder.first_entry_id < run.ledger.tier.segment_first_entry_id:
            return  # tiered to its end: its chunks hold every byte
        skip = 0 if chunked is None else chunked.chunked_bytes - builder.length_bytes
        for entry_id, header, payload in self._frames(run, builder.end_entry_id,
                                                      builder.length_bytes, builder.entry_count):
            pieces = (header, payload) if not skip else tuple(skip_bytes((header, payload), skip))
            skip = 0
            yield entry_id, len(header) + len(payload), pieces

    def _segment_matches(self, run: _Run, found: ObjectInfo, builder: IndexBuilder,
                         chunked: ChunkedPart | None) -> bool:
        """Whether ``found`` holds the bytes the entries (and chunks) give:
        its size, and its ETag from the MD5s of the parts they cut into."""
        start = 0 if chunked is None else chunked.chunked_bytes
        cutter = ChunkCutter(self._part_size_bytes(chunked), start_position=start)
        part_md5s = [] if chunked is None else [chunk.etag for chunk in chunked.chunks]
        for entry_id, size, pieces in self._rest(run, builder, chunked):
            builder.add(entry_id, size)
            part_md5s += [md5_of(chunk.data)[0] for chunk in cutter.add(*pieces)]
        tail = cutter.finish()
        if tail.data or not part_md5s:
            part_md5s.append(md5_of(tail.data)[0])
        expected = (multipart_etag(part_md5s) if len(part_md5s) > 1 or chunked is not None
                    else part_md5s[0])
        if (found.size_bytes != builder.length_bytes
                or not object_etag_matches(found.etag, expected)):
            return False
        run.progress.advance(builder.length_bytes)
        self._hook(Step.VERIFY_SEGMENT, run.ledger.ledger_id)
        return True

    def _upload_segment(self, run: _Run, key: str, builder: IndexBuilder,
                        chunked: ChunkedPart | None) -> None:
        start = 0 if chunked is None else chunked.chunked_bytes
        cutter = ChunkCutter(self._part_size_bytes(chunked), start_position=start)
        upload: SegmentUpload | None = None
        try:
            if chunked is not None:
                # Tiered while open: its chunks are its first parts, copied by S3.
                upload = self._open_upload(run, key, cutter.chunk_size_bytes)
                for number, source in enumerate(chunked.chunks, start=1):
                    upload.submit_copy(number, source)
            for entry_id, size, pieces in self._rest(run, builder, chunked):
                builder.add(entry_id, size)
                for chunk in cutter.add(*pieces):
                    # A part was cut, so the segment is more than one part.
                    upload = upload or self._open_upload(run, key, cutter.chunk_size_bytes)
                    upload.submit(chunk)
            tail = cutter.finish()
            if upload is None:
                self._put_small_segment(run, key, tail.data)
                return
            if tail.data or chunked is None:
                upload.submit(tail)
            parts = upload.finish()
            self._complete(run, upload, parts)
            etags = [part.etag for part in parts]
            self._verify_segment(run, key, builder.length_bytes,
                                 multipart_etag(etags) if all(map(is_md5, etags)) else None)
        except BaseException as exc:
            if upload is not None:
                upload.cancel()
                # Stopped or killed: the upload stays, persisted, to be resumed.
                if isinstance(exc, Exception) and not isinstance(exc, OffloadCancelled):
                    self._abort_quietly(upload.key, upload.upload_id)
            raise

    def _part_size_bytes(self, chunked: ChunkedPart | None) -> int:
        """A segment never tiered goes up in parts of ``part_size_bytes``; one
        tiered while open in parts of the chunk size, since its chunks are
        copied as its first parts."""
        return self._settings.part_size_bytes if chunked is None else (
            self._settings.chunk_size_bytes)

    def _open_upload(self, run: _Run, key: str, part_size_bytes: int) -> SegmentUpload:
        """The persisted upload of this segment, resumed, or a new one."""
        ledger_id = run.ledger.ledger_id
        listed: dict[int, PartInfo] = {}
        upload_id = run.info.upload_id if run.info.upload_key == key else None
        if upload_id is not None:
            try:
                listed = {p.part_number: p for p in self._store.list_parts(key, upload_id)}
                self._hook(Step.LIST_PARTS, ledger_id)
            except UploadNotFound:
                log.warning("the persisted multipart upload is gone; starting a new one",
                            extra={"key": key, "upload_id": upload_id})
                upload_id = None
        recorded = {part[0]: part for part in run.info.upload_parts} if upload_id else {}
        if upload_id is None:
            upload_id = self._store.create_multipart_upload(key)
            self._persist_upload(run, key, upload_id, [])
            self._hook(Step.START_MULTIPART, ledger_id)
        else:
            log.info("resuming a multipart upload", extra={
                "key": key, "upload_id": upload_id, "parts_listed": len(listed),
                "parts_recorded": len(recorded),
                "recorded_parts_missing": sorted(recorded.keys() - listed.keys())})
        return SegmentUpload(
            self._store, key, upload_id,
            tasks=BoundedTasks(self._executor, self._settings.upload_concurrency),
            chunk_size_bytes=part_size_bytes, listed=listed, recorded=recorded,
            on_part=partial(self._on_part, run), on_copy=partial(self._on_copy, run),
            record=partial(self._record_parts, run, key, upload_id),
            record_interval_s=self._settings.parts_record_interval_s)

    def _on_part(self, run: _Run, size_bytes: int, uploaded: bool) -> None:
        run.progress.advance(size_bytes)
        if uploaded:
            self._hook(Step.UPLOAD_PART, run.ledger.ledger_id)

    def _on_copy(self, run: _Run, size_bytes: int) -> None:
        run.progress.advance(size_bytes)
        self._hook(Step.COPY_CHUNK, run.ledger.ledger_id)

    def _record_parts(self, run: _Run, key: str, upload_id: str, parts: list[PartDone]) -> None:
        self._persist_upload(run, key, upload_id, [part.recorded for part in parts])
        self._hook(Step.RECORD_PARTS, run.ledger.ledger_id)

    def _persist_upload(self, run: _Run, key: str, upload_id: str,
                        parts: list[tuple[int, int, str]]) -> None:
        run.info = replace(run.info, upload_key=key, upload_id=upload_id,
                           upload_parts=tuple(parts))
        self._source.set_offload(run.ledger.ledger_id, run.info)

    def _put_small_segment(self, run: _Run, key: str, data: bytearray) -> None:
        # No Content-MD5, as for parts: the signed SHA-256 of the body protects it.
        self._store.put_object(key, data)
        run.progress.advance(len(data))
        self._hook(Step.PUT_SEGMENT, run.ledger.ledger_id)

    def _complete(self, run: _Run, upload: SegmentUpload, parts: list[PartDone]) -> None:
        try:
            self._store.complete_multipart_upload(
                upload.key, upload.upload_id, [(part.part_number, part.etag) for part in parts])
        except UploadNotFound:
            # A retried Complete whose first attempt succeeded: verify decides.
            log.warning("multipart upload gone at completion; verifying the segment",
                        extra={"key": upload.key})
        self._hook(Step.COMPLETE_MULTIPART, run.ledger.ledger_id)

    def _verify_segment(self, run: _Run, key: str, length_bytes: int,
                        etag: str | None) -> None:
        """The completed segment has the size sent and the ETag S3 derives from the
        part ETags it answered (Complete assembled those parts), when they are MD5s."""
        try:
            found = self._store.head_object(key)
        except ObjectNotFound as exc:
            raise RemoteStorageError("HeadObject", key, 1,
                                     "segment missing after its multipart upload") from exc
        if found.size_bytes != length_bytes or (
                etag is not None and not object_etag_matches(found.etag, etag)):
            self._store.delete_objects([key])
            raise RemoteStorageError("HeadObject", key, 1, (
                f"segment is {found.size_bytes} bytes with ETag {found.etag}, expected "
                f"{length_bytes} bytes with ETag {etag}"))
        self._hook(Step.VERIFY_SEGMENT, run.ledger.ledger_id)

    def _write_index(self, run: _Run, builder: IndexBuilder) -> SegmentIndex:
        index = builder.build(run.facts)
        key = self.layout.index_key(run.ledger.ledger_id, builder.first_entry_id)
        data = encode_index(index)
        md5_hex, md5_b64 = md5_of(data)
        require_etag(self._store.put_object(key, data, content_md5=md5_b64), md5_hex,
                     "PutObject", key)
        self._hook(Step.WRITE_INDEX, run.ledger.ledger_id)
        return index

    def _delete_leftovers(self, run: _Run, planned: dict[int, int]) -> None:
        ledger_id = run.ledger.ledger_id
        self._abort_uploads(self.layout.ledger_prefix(ledger_id), keep=None)
        stale = [key for first, objects in run.found.segments.items() if first not in planned
                 for key in objects.object_keys()]
        self._store.delete_objects(stale + run.found.chunk_keys())
        self._hook(Step.DELETE_LEFTOVERS, ledger_id)

    def _abort_uploads(self, prefix: str, *, keep: PendingUpload | None,
                       quietly: bool = False) -> int:
        pending = [upload for upload in self._store.list_multipart_uploads(prefix)
                   if upload != keep]
        for upload in pending:
            if quietly:
                self._abort_quietly(upload.key, upload.upload_id)
            else:
                with contextlib.suppress(UploadNotFound):  # gone: what aborting wanted
                    self._store.abort_multipart_upload(upload.key, upload.upload_id)
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
