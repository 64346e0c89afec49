"""What of a segment was tiered while its ledger was open, from the recorded
position, the listing and the segment's index (pure: no I/O).

At close, such a segment is consolidated: its chunks become the first parts
of the segment's multipart upload (UploadPartCopy; chunk ``k`` is part
``k + 1``, since chunks are cut at exact multiples of the chunk size, as
parts are) and the rest of its bytes, still local, the last parts.  A
segment tiered completely (the ledger went on into a next segment) is all
chunks, its last one shorter; the segment being tiered at close has chunks
up to the position's byte and its tail on the local disk.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from common.errors import InvariantViolation
from ledger import LedgerInfo

from ._format import IndexBuilder, SegmentIndex
from ._store import ObjectInfo
from ._survey import SegmentObjects


@dataclass(frozen=True)
class ChunkedPart:
    """The chunks of a segment (in order) and the index builder of the entries
    wholly in them."""

    chunks: list[ObjectInfo]
    builder: IndexBuilder

    @property
    def chunked_bytes(self) -> int:
        return sum(chunk.size_bytes for chunk in self.chunks)


def was_tiered(ledger: LedgerInfo, first_entry_id: int) -> bool:
    """Whether chunks of the segment starting at ``first_entry_id`` were recorded."""
    at = ledger.tier
    return first_entry_id < at.segment_first_entry_id or (
        first_entry_id == at.segment_first_entry_id and at.byte_position > 0)


def chunked_part(ledger: LedgerInfo, objects: SegmentObjects, index: SegmentIndex,
                 chunk_size_bytes: int) -> ChunkedPart | str:
    """The tiered part of a segment, or why the bucket does not hold it."""
    at = ledger.tier
    first = objects.first_entry_id
    if index.first_entry_id != first:
        return f"index of segment {first} starts at entry {index.first_entry_id}"
    try:
        if first < at.segment_first_entry_id:
            # Tiered to its end: the index covers every entry, chunks every byte.
            builder = IndexBuilder.resume(index, end_entry_id=index.end_entry_id,
                                          length_bytes=index.segment_length_bytes)
            chunked = index.segment_length_bytes
        elif index.end_entry_id < at.entry_id:
            return (f"index of segment {first} covers entries up to {index.end_entry_id - 1}, "
                    f"the tier position needs up to {at.entry_id - 1}")
        else:
            builder = IndexBuilder.resume(index, end_entry_id=at.entry_id,
                                          length_bytes=at.entry_offset)
            chunked = at.byte_position
    except InvariantViolation as exc:
        return f"index of segment {first} does not match the tier position {at}: {exc}"
    chunks: list[ObjectInfo] = []
    for position in range(0, chunked, chunk_size_bytes):
        found = objects.chunks.get(position)
        expected = min(chunk_size_bytes, chunked - position)
        if found is None:
            return f"chunk-{position} of segment {first} is missing"
        if found.size_bytes != expected:
            return (f"chunk-{position} of segment {first} holds {found.size_bytes} bytes, "
                    f"expected {expected}")
        chunks.append(found)
    return ChunkedPart(chunks, builder)


def skip_bytes(pieces: tuple[bytes, ...], count: int) -> Iterator[bytes | memoryview]:
    """``pieces`` (a frame header and its payload) without their first ``count``
    bytes: the part of a frame that a chunk already holds."""
    for piece in pieces:
        if count >= len(piece):
            count -= len(piece)
            continue
        yield memoryview(piece)[count:] if count else piece
        count = 0
