"""Pure codec for offloaded objects: segment frames and the segment index.

Nothing here does I/O (STYLE 1); the offloader, the remote reader and the
Spark source all frame bytes through these functions.  Integers are big-endian,
CRCs are CRC32C (Castagnoli).

Segment object: the frames of consecutive entries, nothing else::

    offset size field           notes
    0      8    entry_id        u64
    8      4    payload_length  u32, n
    12     4    payload_crc32c  u32, the entry's CRC32C (as returned to clients)
    16     n    payload

A frame has no header CRC of its own: readers always reach a frame through
the index, which fixes where it starts (a span of frames between two index
points must end exactly at the next point) and which entry it must hold, and
the payload CRC covers the rest.  Scanning a segment without its index still
works: frames are self-describing and entry ids must be dense.

Index object (``HEAD_SIZE_BYTES`` = 80 bytes + metadata + points + CRC)::

    offset      size field                 notes
    0           4    magic                 b"LDOI"
    4           4    version               u32, FORMAT_VERSION
    8           8    ledger_id             u64
    16          8    first_entry_id        u64, first entry of this segment
    24          8    entry_count           u64, entries in this segment
    32          8    segment_length        u64, bytes of the segment object
    40          8    ledger_last_entry_id  i64, the ledger's last entry (-1: empty)
    48          8    ledger_length         u64, payload bytes of the whole ledger
    56          8    created_at            f64, epoch seconds
    64          8    closed_at             f64, epoch seconds; 0 while the ledger is
                                           open (the index of a segment tiered while
                                           open covers the entries in its chunks, and
                                           the ledger facts so far)
    72          4    point_count           u32, k
    76          4    metadata_length       u32, m
    80          m    metadata              UTF-8 JSON object of str -> str, sorted keys
    80+m        16*k points                (entry_id u64, frame offset u64), ascending
    80+m+16k    4    index_crc32c          u32, CRC32C of every byte before it

Points are sparse: one for the segment's first frame, one for every frame
that starts at least ``POINT_STRIDE_BYTES`` after the previous point, and one
for every frame at least that large, so an entry is found by reading one
span of at most ``2 * POINT_STRIDE_BYTES`` (or one large frame) and the index
stays near 0.1 % of the segment.
"""

from __future__ import annotations

import bisect
import json
import math
import struct
import sys
from array import array
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from crc32c import crc32c as _crc32c

from common.errors import CorruptRecord, invariant

U32_MAX = 0xFFFF_FFFF
U64_MAX = 0xFFFF_FFFF_FFFF_FFFF

_FRAME = struct.Struct(">QII")
FRAME_HEADER_SIZE_BYTES = 16


def frame_bytes(last_add_confirmed: int, length: int) -> int:
    """What entries ``0..last_add_confirmed`` of ``length`` payload bytes take as
    frames: the payloads plus one frame header each (segments, chunks, packs)."""
    return length + FRAME_HEADER_SIZE_BYTES * (last_add_confirmed + 1)
invariant(_FRAME.size == FRAME_HEADER_SIZE_BYTES, "segment frame header must be 16 bytes")

INDEX_MAGIC = b"LDOI"
FORMAT_VERSION = 1
_HEAD = struct.Struct(">4sIQQQQqQddII")
HEAD_SIZE_BYTES = 80
invariant(_HEAD.size == HEAD_SIZE_BYTES, "index head must be 80 bytes")
_POINT = struct.Struct(">QQ")
invariant(_POINT.size == 16, "index point must be 16 bytes")
_CRC = struct.Struct(">I")
POINT_STRIDE_BYTES = 16 * 1024


def crc32c(data: bytes | bytearray | memoryview) -> int:
    return int(_crc32c(data))


# --- segment frames -----------------------------------------------------------


class FrameHeader(NamedTuple):
    entry_id: int
    payload_length: int
    payload_crc32c: int

    @property
    def frame_size_bytes(self) -> int:
        return FRAME_HEADER_SIZE_BYTES + self.payload_length


def encode_frame_header(entry_id: int, payload: bytes, payload_crc32c: int) -> bytes:
    """The 16-byte header that precedes ``payload`` in a segment."""
    invariant(0 <= entry_id <= U64_MAX, f"entry_id {entry_id} out of range")
    invariant(len(payload) <= U32_MAX, f"payload of {len(payload)} bytes too large")
    # The engine verified this CRC when it read the entry; checking again here
    # keeps a payload corrupted in memory from becoming "valid" in S3.
    invariant(payload_crc32c == crc32c(payload),
              f"payload crc32c {payload_crc32c} does not match entry {entry_id}")
    return _FRAME.pack(entry_id, len(payload), payload_crc32c)


def decode_frame_header(data: bytes | memoryview, *, key: str, offset: int) -> FrameHeader:
    """Parse the frame header at the start of ``data`` (located at ``offset`` in ``key``)."""
    if len(data) < FRAME_HEADER_SIZE_BYTES:
        raise CorruptRecord(key, offset, f"frame header truncated: {len(data)} of 16 bytes")
    entry_id, length, crc = _FRAME.unpack_from(data)
    return FrameHeader(entry_id, length, crc)


def iter_frames(data: bytes, *, key: str, offset: int,
                first_entry_id: int) -> Iterator[tuple[int, bytes, int]]:
    """Every ``(entry_id, payload, crc32c)`` of a span of whole frames, CRCs verified.

    ``data`` starts with the frame of ``first_entry_id`` at ``offset`` in ``key``
    and must end exactly at a frame boundary.
    """
    view = memoryview(data)
    position, expected = 0, first_entry_id
    while position < len(view):
        payload, crc = _checked_frame(view, position, key=key, offset=offset,
                                      entry_id=expected)
        yield expected, payload, crc
        position += FRAME_HEADER_SIZE_BYTES + len(payload)
        expected += 1


def find_entry(span: bytes | memoryview, *, key: str, offset: int, first_entry_id: int,
               entry_id: int) -> tuple[bytes, int]:
    """``(payload, crc32c)`` of ``entry_id`` in a span of whole frames.

    The span starts with the frame of ``first_entry_id`` at ``offset`` in ``key``
    (an index point) and ends at the next point; frames before the target are
    walked by their headers only.
    """
    view = memoryview(span)
    position = 0
    for walked in range(first_entry_id, entry_id):
        header = _checked_header(view, position, key=key, offset=offset, entry_id=walked)
        position += header.frame_size_bytes
    return _checked_frame(view, position, key=key, offset=offset, entry_id=entry_id)


def _checked_header(view: memoryview, position: int, *, key: str, offset: int,
                    entry_id: int) -> FrameHeader:
    where = offset + position
    header = decode_frame_header(view[position:position + FRAME_HEADER_SIZE_BYTES],
                                 key=key, offset=where)
    if header.entry_id != entry_id:
        raise CorruptRecord(key, where, f"frame holds entry {header.entry_id}, "
                                        f"expected entry {entry_id}")
    if position + header.frame_size_bytes > len(view):
        raise CorruptRecord(key, where, f"frame of entry {entry_id} runs past its span "
                                        f"({header.payload_length} payload bytes)")
    return header


def _checked_frame(view: memoryview, position: int, *, key: str, offset: int,
                   entry_id: int) -> tuple[bytes, int]:
    header = _checked_header(view, position, key=key, offset=offset, entry_id=entry_id)
    start = position + FRAME_HEADER_SIZE_BYTES
    payload = bytes(view[start:start + header.payload_length])
    if crc32c(payload) != header.payload_crc32c:
        raise CorruptRecord(key, offset + position,
                            f"payload crc32c mismatch in entry {entry_id}")
    return payload, header.payload_crc32c


# --- the index ------------------------------------------------------------------


# ``closed_at`` of the facts in an index written while the ledger is open.
OPEN_CLOSED_AT = 0.0


@dataclass(frozen=True, kw_only=True)
class LedgerFacts:
    """What the index records about the whole ledger: fixed once it is sealed;
    while it is open (tiering), the entries wholly in chunks so far."""

    ledger_id: int
    last_entry_id: int
    length_bytes: int
    created_at: float
    closed_at: float
    metadata: Mapping[str, str] = field(default_factory=dict)

    @property
    def is_open(self) -> bool:
        return self.closed_at == OPEN_CLOSED_AT


@dataclass(frozen=True, kw_only=True)
class SegmentIndex:
    ledger: LedgerFacts
    first_entry_id: int
    entry_count: int
    segment_length_bytes: int
    point_entry_ids: array[int]
    point_offsets: array[int]

    @property
    def end_entry_id(self) -> int:
        """One past the last entry of the segment."""
        return self.first_entry_id + self.entry_count

    @property
    def memory_size_bytes(self) -> int:
        return HEAD_SIZE_BYTES + 16 * len(self.point_offsets)

    def span_of(self, entry_id: int) -> tuple[int, int, int]:
        """``(start, end, first_entry_id)``: the byte span whose frames include ``entry_id``."""
        invariant(self.first_entry_id <= entry_id < self.end_entry_id,
                  f"entry {entry_id} is not in segment {self.first_entry_id}")
        i = bisect.bisect_right(self.point_entry_ids, entry_id) - 1
        end = (self.point_offsets[i + 1] if i + 1 < len(self.point_offsets)
               else self.segment_length_bytes)
        return self.point_offsets[i], end, self.point_entry_ids[i]


class IndexBuilder:
    """Accumulates the points of one segment as its frames are produced."""

    def __init__(self, first_entry_id: int) -> None:
        self.first_entry_id = first_entry_id
        self.entry_count = 0
        self.length_bytes = 0
        self._ids = array("Q")
        self._offsets = array("Q")
        self._previous_large = False

    @classmethod
    def resume(cls, index: SegmentIndex, *, end_entry_id: int,
               length_bytes: int) -> IndexBuilder:
        """The builder of ``index``'s segment as it was holding only the entries
        below ``end_entry_id``, whose frames end at ``length_bytes``: tiering
        continues a segment whose older entries may be in S3 only.  The
        points kept are exactly those a fresh build would have made."""
        first = index.first_entry_id
        invariant(first <= end_entry_id <= index.end_entry_id,
                  f"resume at entry {end_entry_id} outside segment {first}..{index.end_entry_id}")
        invariant(end_entry_id < index.end_entry_id or length_bytes == index.segment_length_bytes,
                  "resume at the segment's end with another length")
        builder = cls(first)
        keep = bisect.bisect_left(index.point_entry_ids, end_entry_id)
        invariant((keep > 0) == (end_entry_id > first), "resume without the first point")
        builder._ids = array("Q", index.point_entry_ids[:keep])
        builder._offsets = array("Q", index.point_offsets[:keep])
        builder.entry_count = end_entry_id - first
        builder.length_bytes = length_bytes
        # A large frame always has a point, so the last frame was large exactly
        # when a point marks it and it spans a stride or more.
        builder._previous_large = bool(keep) and (
            builder._ids[-1] == end_entry_id - 1
            and length_bytes - builder._offsets[-1] >= POINT_STRIDE_BYTES)
        return builder

    def copy(self) -> IndexBuilder:
        twin = IndexBuilder(self.first_entry_id)
        twin.entry_count, twin.length_bytes = self.entry_count, self.length_bytes
        twin._ids, twin._offsets = array("Q", self._ids), array("Q", self._offsets)
        twin._previous_large = self._previous_large
        return twin

    @property
    def end_entry_id(self) -> int:
        return self.first_entry_id + self.entry_count

    def add(self, entry_id: int, frame_size_bytes: int) -> None:
        invariant(entry_id == self.first_entry_id + self.entry_count,
                  f"entry {entry_id} added out of order")
        large = frame_size_bytes >= POINT_STRIDE_BYTES
        since_point = self.length_bytes - (self._offsets[-1] if self._offsets else 0)
        if not self._offsets or large or self._previous_large or since_point >= POINT_STRIDE_BYTES:
            self._ids.append(entry_id)
            self._offsets.append(self.length_bytes)
        self._previous_large = large
        self.entry_count += 1
        self.length_bytes += frame_size_bytes

    def build(self, ledger: LedgerFacts) -> SegmentIndex:
        return SegmentIndex(ledger=ledger, first_entry_id=self.first_entry_id,
                            entry_count=self.entry_count, segment_length_bytes=self.length_bytes,
                            point_entry_ids=array("Q", self._ids),
                            point_offsets=array("Q", self._offsets))


def encode_index(index: SegmentIndex) -> bytes:
    _check_index(index, "encode_index")
    led = index.ledger
    metadata = json.dumps(dict(led.metadata), sort_keys=True, separators=(",", ":"),
                          ensure_ascii=False).encode()
    head = _HEAD.pack(INDEX_MAGIC, FORMAT_VERSION, led.ledger_id, index.first_entry_id,
                      index.entry_count, index.segment_length_bytes, led.last_entry_id,
                      led.length_bytes, led.created_at, led.closed_at,
                      len(index.point_offsets), len(metadata))
    points = b"".join(_POINT.pack(e, o) for e, o in zip(index.point_entry_ids,
                                                        index.point_offsets, strict=True))
    body = head + metadata + points
    return body + _CRC.pack(crc32c(body))


class _Head(NamedTuple):
    magic: bytes
    version: int
    ledger_id: int
    first_entry_id: int
    entry_count: int
    segment_length: int
    ledger_last_entry_id: int
    ledger_length: int
    created_at: float
    closed_at: float
    point_count: int
    metadata_length: int


def decode_index(data: bytes, *, key: str) -> SegmentIndex:
    """Parse a whole index object; raise :class:`CorruptRecord` naming ``key`` if bad."""
    if len(data) < HEAD_SIZE_BYTES + _CRC.size:
        raise CorruptRecord(key, 0, f"index truncated: {len(data)} bytes")
    head = _Head._make(_HEAD.unpack_from(data))
    if head.magic != INDEX_MAGIC:
        raise CorruptRecord(key, 0, f"bad index magic {head.magic!r}")
    size = HEAD_SIZE_BYTES + head.metadata_length + _POINT.size * head.point_count + _CRC.size
    if len(data) != size:
        raise CorruptRecord(key, 0, f"index needs {size} bytes, got {len(data)}")
    if _CRC.unpack_from(data, size - _CRC.size)[0] != crc32c(data[:size - _CRC.size]):
        raise CorruptRecord(key, 0, "index crc32c mismatch")
    if head.version != FORMAT_VERSION:
        raise CorruptRecord(key, 0, f"unsupported index version {head.version}")
    index = _index_from_head(data, head, key=key)
    # The CRC holds, so contradicting fields were written that way: a bug.
    _check_index(index, f"decode_index({key})")
    return index


def _index_from_head(data: bytes, head: _Head, *, key: str) -> SegmentIndex:
    points_start = HEAD_SIZE_BYTES + head.metadata_length
    try:
        metadata = json.loads(data[HEAD_SIZE_BYTES:points_start].decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorruptRecord(key, HEAD_SIZE_BYTES, f"index metadata is not JSON: {exc}") from exc
    raw = array("Q", data[points_start:points_start + _POINT.size * head.point_count])
    if sys.byteorder == "little":
        raw.byteswap()  # the points are big-endian; array() reads native order
    ledger = LedgerFacts(ledger_id=head.ledger_id, last_entry_id=head.ledger_last_entry_id,
                         length_bytes=head.ledger_length, created_at=head.created_at,
                         closed_at=head.closed_at, metadata=metadata)
    return SegmentIndex(ledger=ledger, first_entry_id=head.first_entry_id,
                        entry_count=head.entry_count, segment_length_bytes=head.segment_length,
                        point_entry_ids=raw[0::2], point_offsets=raw[1::2])


def _check_index(index: SegmentIndex, where: str) -> None:
    led = index.ledger
    invariant(0 <= led.ledger_id <= U64_MAX, f"{where}: ledger_id out of range")
    invariant(-1 <= led.last_entry_id < U64_MAX, f"{where}: last entry id out of range")
    invariant(math.isfinite(led.created_at) and math.isfinite(led.closed_at),
              f"{where}: timestamps must be finite")
    invariant(isinstance(led.metadata, Mapping)
              and all(isinstance(k, str) and isinstance(v, str) for k, v in led.metadata.items()),
              f"{where}: metadata must map str to str")
    invariant(index.end_entry_id <= led.last_entry_id + 1,
              f"{where}: segment ends past the ledger's last entry")
    invariant(index.segment_length_bytes >= FRAME_HEADER_SIZE_BYTES * index.entry_count,
              f"{where}: segment too short for its entries")
    _check_points(index, where)


def _check_points(index: SegmentIndex, where: str) -> None:
    ids, offsets = index.point_entry_ids, index.point_offsets
    invariant(len(ids) == len(offsets), f"{where}: point arrays differ in length")
    if index.entry_count == 0:
        invariant(not ids and index.segment_length_bytes == 0,
                  f"{where}: an empty segment has no points and no bytes")
        return
    invariant(len(ids) > 0 and ids[0] == index.first_entry_id and offsets[0] == 0,
              f"{where}: the first point must be the first entry at offset 0")
    for i in range(1, len(ids)):
        invariant(ids[i - 1] < ids[i] < index.end_entry_id
                  and offsets[i - 1] < offsets[i] < index.segment_length_bytes,
                  f"{where}: point {i} out of order or out of the segment")
