"""Journal record codec: bytes <-> records, framing and CRC only (no I/O).

A record is a 32-byte header, a part table and the parts (big-endian)::

    offset   size field            notes
    0        4    magic            ``RECORD_MAGIC`` ("LJR2"), ``PAD_MAGIC`` (hole filler),
                                   or ``RECORD_V1_MAGIC`` ("LJRC", read only)
    4        4    body_length      bytes after the header: part table and parts
    8        8    logical_offset   logical journal offset of this header (never wraps)
    16       8    journal_id       random id chosen when the journal was formatted
    24       4    table_crc32c     CRC32C of the part table (v1: of the whole body; pad: 0)
    28       4    header_crc32c    CRC32C of bytes 0..27
    32       4    part_count       n
    36       8n   part table       n x (length u32, crc32c u32)
    36+8n    ...  parts            back to back, in table order

Every part carries its own CRC32C, so a caller that already computed the CRC of
a payload (the engine does, once per entry, and stores the same value in the
entry log) hands it in and the payload is never checksummed twice on its way to
disk.  A version-1 record (one body, one CRC) is read as a record of one part.

Records are packed back to back inside a block; a block starts at a 4 KiB
aligned logical offset and is zero-padded to a 4 KiB multiple.  A pad record is
written only by recovery over a hole (see ``journal/__init__``): its body is
whatever bytes the hole holds and is not checked.

The decoder classifies, it never guesses (STYLE 7):

* ``VALID``   every check passed (``pad`` tells a hole filler apart);
* ``END``     zeros, a wrong magic, a foreign journal id, or a logical offset other
  than the expected one: a stale record from an earlier lap of the ring looks
  exactly like a good record except for its offset, so the offset is what ends
  the log;
* ``TORN``    the bytes given stop before the record does (only a caller that
  passes a cut buffer sees this; the recovery scanner always reads enough);
* ``CORRUPT`` magic, offset and journal id are right but a CRC fails, the length
  is out of bounds or the part table does not add up.  Whether that is a torn
  tail (repairable) or real corruption is decided by recovery from its position
  and the shutdown type, not here.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Sequence
from dataclasses import dataclass

import crc32c

from common.errors import invariant

RECORD_MAGIC = 0x4C4A5232  # "LJR2"
RECORD_V1_MAGIC = 0x4C4A5243  # "LJRC"
PAD_MAGIC = 0x4C4A5044  # "LJPD"
RECORD_HEADER = struct.Struct(">IIQQII")
RECORD_HEADER_SIZE_BYTES = 32
invariant(RECORD_HEADER.size == RECORD_HEADER_SIZE_BYTES, "record header must be 32 bytes")
_PART_COUNT = struct.Struct(">I")
_PART = struct.Struct(">II")
PART_OVERHEAD_BYTES = _PART.size
invariant(PART_OVERHEAD_BYTES == 8, "part table entries must be 8 bytes")
_HEADER_CRC_SPAN = 28
_HEAD_CRC_SPAN = struct.Struct(">IIQQI")  # the 28 bytes the header CRC covers
_U32 = struct.Struct(">I")
invariant(_HEAD_CRC_SPAN.size == _HEADER_CRC_SPAN, "header CRC span must be 28 bytes")
_ZERO_HEADER = bytes(RECORD_HEADER_SIZE_BYTES)
_U32_MAX = 0xFFFFFFFF


class RecordClass(enum.Enum):
    VALID = "valid"
    END = "end"
    TORN = "torn"
    CORRUPT = "corrupt"


@dataclass(frozen=True, slots=True)
class HeaderCheck:
    """The verdict on a record header; ``body_length`` is meaningful only when VALID."""

    klass: RecordClass
    reason: str
    body_length: int = 0
    body_crc32c: int = 0
    pad: bool = False
    version: int = 2


@dataclass(frozen=True, slots=True)
class RecordCheck:
    klass: RecordClass
    reason: str
    parts: tuple[bytes, ...] = ()
    crcs: tuple[int, ...] = ()
    pad: bool = False
    # Header plus body length as framed (for a pad: the whole hole it covers).
    size_bytes: int = 0


def record_body_bytes(part_count: int, part_bytes: int) -> int:
    """Body bytes of a record of ``part_count`` parts holding ``part_bytes`` in all
    (the part table included): what ``body_length`` says and the limits count."""
    return _PART_COUNT.size + PART_OVERHEAD_BYTES * part_count + part_bytes


def _table_struct(part_count: int) -> struct.Struct:
    """One struct for a whole part table (count, then length and crc per part),
    so a table is one ``pack`` call: every add builds one."""
    table = _TABLES.get(part_count)
    if table is None:
        table = struct.Struct(f">I{2 * part_count}I")
        if part_count <= _TABLES_CACHED_MAX:
            _TABLES[part_count] = table
    return table


_TABLES: dict[int, struct.Struct] = {}
_TABLES_CACHED_MAX = 64
_TABLE_OF_ONE = _table_struct(1)
_TABLE_OF_TWO = _table_struct(2)


def encode_part_table(lengths: Sequence[int], crcs: Sequence[int]) -> tuple[bytes, int]:
    """The part table of a record and its CRC32C (computed before any lock is taken)."""
    count = len(lengths)
    if count == 2 and len(crcs) == 2:
        # An add of one entry (envelope and payload), the most common record:
        # packed without building the field list.
        table = _TABLE_OF_TWO.pack(2, lengths[0], crcs[0], lengths[1], crcs[1])
        return table, crc32c.crc32c(table)
    if count == 1 and len(crcs) == 1:
        return encode_one_part_table(lengths[0], crcs[0])
    invariant(count == len(crcs) and count > 0, "a record has parts, each a crc")
    fields = [0] * (2 * count)
    fields[0::2] = lengths
    fields[1::2] = crcs
    table = _table_struct(count).pack(count, *fields)
    return table, crc32c.crc32c(table)


def encode_one_part_table(length: int, crc: int) -> tuple[bytes, int]:
    """The part table of a record of one part (a journal append of one body)."""
    table = _TABLE_OF_ONE.pack(1, length, crc)
    return table, crc32c.crc32c(table)


def encode_record_header(*, body_length: int, logical_offset: int, journal_id: int,
                         table_crc32c: int) -> bytes:
    """The 32 header bytes of a record whose body (table and parts) is ``body_length``."""
    return _header(RECORD_MAGIC, body_length, logical_offset, journal_id, table_crc32c)


def _header(magic: int, body_length: int, logical_offset: int, journal_id: int,
            crc: int) -> bytes:
    # Checked without building the messages first: every record passes here.
    if not 0 <= body_length <= _U32_MAX or logical_offset < 0:
        invariant(False, f"body_length {body_length} or logical_offset {logical_offset} "
                  "out of range")
    head = _HEAD_CRC_SPAN.pack(magic, body_length, logical_offset, journal_id, crc)
    return head + _U32.pack(crc32c.crc32c(head))


def encode_record(parts: Sequence[bytes], *, logical_offset: int, journal_id: int) -> bytes:
    """A whole record as one bytes object (tests and small writes)."""
    lengths = [len(p) for p in parts]
    table, table_crc = encode_part_table(lengths, [crc32c.crc32c(p) for p in parts])
    head = encode_record_header(body_length=record_body_bytes(len(lengths), sum(lengths)),
                                logical_offset=logical_offset, journal_id=journal_id,
                                table_crc32c=table_crc)
    return head + table + b"".join(parts)


def encode_record_v1(body: bytes, *, logical_offset: int, journal_id: int) -> bytes:
    """A version-1 record (one body, one CRC): what journals written before parts
    hold; only tests write them now."""
    return _header(RECORD_V1_MAGIC, len(body), logical_offset, journal_id,
                   crc32c.crc32c(body)) + body


def encode_pad_header(*, hole_length: int, logical_offset: int, journal_id: int) -> bytes:
    """A pad record covering ``hole_length`` bytes (header included) of a hole."""
    invariant(hole_length >= RECORD_HEADER_SIZE_BYTES, f"hole of {hole_length} bytes too small")
    return _header(PAD_MAGIC, hole_length - RECORD_HEADER_SIZE_BYTES, logical_offset,
                   journal_id, 0)


def check_record_header(
    head: bytes | memoryview, *, expected_offset: int, journal_id: int, body_length_max: int,
) -> HeaderCheck:
    """Classify 32 header bytes found at ``expected_offset``."""
    if len(head) < RECORD_HEADER_SIZE_BYTES:
        if not any(head):
            return HeaderCheck(RecordClass.END, "zeros")
        return HeaderCheck(RecordClass.TORN, f"header cut at {len(head)} of 32 bytes")
    head = bytes(head[:RECORD_HEADER_SIZE_BYTES])
    if head == _ZERO_HEADER:
        return HeaderCheck(RecordClass.END, "zeros")
    magic, length, offset, jid, body_crc, head_crc = RECORD_HEADER.unpack(head)
    if magic not in (RECORD_MAGIC, RECORD_V1_MAGIC, PAD_MAGIC):
        return HeaderCheck(RecordClass.END, f"wrong magic {magic:#010x}")
    if jid != journal_id:
        return HeaderCheck(RecordClass.END, f"foreign journal id {jid:#018x}")
    if offset != expected_offset:
        return HeaderCheck(
            RecordClass.END, f"logical offset {offset} where {expected_offset} was expected "
            "(stale record from an earlier lap)")
    if crc32c.crc32c(head[:_HEADER_CRC_SPAN]) != head_crc:
        return HeaderCheck(RecordClass.CORRUPT, "header crc32c mismatch")
    # Bound the length before anyone allocates or reads a body of that size.
    if length > body_length_max:
        return HeaderCheck(
            RecordClass.CORRUPT, f"body length {length} exceeds the bound {body_length_max}")
    return HeaderCheck(RecordClass.VALID, "ok", length, body_crc, magic == PAD_MAGIC,
                       1 if magic == RECORD_V1_MAGIC else 2)


def check_record_body(header: HeaderCheck, body: bytes) -> RecordCheck:
    """Finish classifying a record whose header was VALID, given the bytes after it."""
    invariant(header.klass is RecordClass.VALID, "check_record_body needs a valid header")
    size = RECORD_HEADER_SIZE_BYTES + header.body_length
    if header.pad:
        return RecordCheck(RecordClass.VALID, "pad", pad=True, size_bytes=size)
    if len(body) < header.body_length:
        return RecordCheck(
            RecordClass.TORN, f"body cut at {len(body)} of {header.body_length} bytes")
    body = body[: header.body_length]
    if header.version == 1:
        crc = crc32c.crc32c(body)
        if crc != header.body_crc32c:
            return RecordCheck(RecordClass.CORRUPT, "body crc32c mismatch")
        return RecordCheck(RecordClass.VALID, "ok", (body,), (crc,), size_bytes=size)
    return _check_parts(header, body, size)


def _check_parts(header: HeaderCheck, body: bytes, size: int) -> RecordCheck:
    if len(body) < _PART_COUNT.size:
        return RecordCheck(RecordClass.CORRUPT, "body shorter than its part count")
    (count,) = _PART_COUNT.unpack_from(body)
    table_end = _PART_COUNT.size + PART_OVERHEAD_BYTES * count
    if count == 0 or table_end > len(body):
        return RecordCheck(RecordClass.CORRUPT, f"part table of {count} parts does not fit")
    if crc32c.crc32c(body[:table_end]) != header.body_crc32c:
        return RecordCheck(RecordClass.CORRUPT, "part table crc32c mismatch")
    parts: list[bytes] = []
    crcs: list[int] = []
    view = memoryview(body)
    at = table_end
    for i in range(count):
        length, crc = _PART.unpack_from(body, _PART_COUNT.size + PART_OVERHEAD_BYTES * i)
        part = view[at:at + length]
        if len(part) != length or crc32c.crc32c(part) != crc:
            return RecordCheck(RecordClass.CORRUPT, f"part {i} crc32c mismatch")
        parts.append(part.tobytes())
        crcs.append(crc)
        at += length
    if at != len(body):
        return RecordCheck(RecordClass.CORRUPT, "parts do not add up to the body length")
    return RecordCheck(RecordClass.VALID, "ok", tuple(parts), tuple(crcs), size_bytes=size)


def decode_record(
    buf: bytes, *, expected_offset: int, journal_id: int, body_length_max: int,
) -> RecordCheck:
    """Classify the record that ``buf`` starts with (header and body in one buffer)."""
    head = check_record_header(
        buf[:RECORD_HEADER_SIZE_BYTES], expected_offset=expected_offset,
        journal_id=journal_id, body_length_max=body_length_max)
    if head.klass is not RecordClass.VALID:
        return RecordCheck(head.klass, head.reason)
    end = RECORD_HEADER_SIZE_BYTES + head.body_length
    return check_record_body(head, buf[RECORD_HEADER_SIZE_BYTES:end])
