"""Journal record codec: bytes <-> records, framing and CRC only (no I/O).

Byte layout of one record, big-endian, a 32-byte header followed by the body:

====== ==== ================ ==========================================================
offset size field            notes
====== ==== ================ ==========================================================
0      4    magic            ``RECORD_MAGIC`` (data) or ``PAD_MAGIC`` (hole filler)
4      4    body_length      bytes of body that follow the header
8      8    logical_offset   logical journal offset of this header (never wraps)
16     8    journal_id       random id chosen when the journal was formatted
24     4    body_crc32c      CRC32C of the body (0 for a pad record)
28     4    header_crc32c    CRC32C of bytes 0..27
32     n    body             ``body_length`` bytes
====== ==== ================ ==========================================================

Records are packed back to back inside a block; a block starts at a 4 KiB aligned
logical offset and is zero-padded to a 4 KiB multiple.  A pad record is written
only by recovery over a hole (see ``journal/__init__``): its body is whatever
bytes the hole holds and is not checked.

The decoder classifies, it never guesses (STYLE 7):

* ``VALID``   every check passed (``pad`` tells a hole filler apart);
* ``END``     zeros, a wrong magic, a foreign journal id, or a logical offset other
  than the expected one: a stale record from an earlier lap of the ring looks
  exactly like a good record except for its offset, so the offset is what ends
  the log;
* ``TORN``    the bytes given stop before the record does (only a caller that
  passes a cut buffer sees this; the recovery scanner always reads enough);
* ``CORRUPT`` magic, offset and journal id are right but a CRC fails or the length
  is out of bounds.  Whether that is a torn tail (repairable) or real corruption is
  decided by recovery from its position and the shutdown type, not here.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

import crc32c

from common.errors import invariant

RECORD_MAGIC = 0x4C4A5243  # "LJRC"
PAD_MAGIC = 0x4C4A5044  # "LJPD"
RECORD_HEADER = struct.Struct(">IIQQII")
RECORD_HEADER_SIZE_BYTES = 32
invariant(RECORD_HEADER.size == RECORD_HEADER_SIZE_BYTES, "record header must be 32 bytes")
_HEADER_CRC_SPAN = 28
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


@dataclass(frozen=True, slots=True)
class RecordCheck:
    klass: RecordClass
    reason: str
    body: bytes = b""
    pad: bool = False
    # Header plus body length as framed (for a pad: the whole hole it covers).
    size_bytes: int = 0


def encode_record_header(
    *, body_length: int, logical_offset: int, journal_id: int, body_crc32c: int,
    magic: int = RECORD_MAGIC,
) -> bytes:
    """The 32 header bytes; the caller computed ``body_crc32c`` (outside any lock)."""
    invariant(0 <= body_length <= _U32_MAX, f"body_length {body_length} out of range")
    invariant(logical_offset >= 0, f"logical_offset {logical_offset} negative")
    head = RECORD_HEADER.pack(magic, body_length, logical_offset, journal_id, body_crc32c, 0)
    return head[:_HEADER_CRC_SPAN] + crc32c.crc32c(head[:_HEADER_CRC_SPAN]).to_bytes(4, "big")


def encode_record(body: bytes, *, logical_offset: int, journal_id: int) -> bytes:
    """Header plus body as one bytes object (tests and small writes)."""
    head = encode_record_header(
        body_length=len(body), logical_offset=logical_offset, journal_id=journal_id,
        body_crc32c=crc32c.crc32c(body),
    )
    return head + body


def encode_pad_header(*, hole_length: int, logical_offset: int, journal_id: int) -> bytes:
    """A pad record covering ``hole_length`` bytes (header included) of a hole."""
    invariant(hole_length >= RECORD_HEADER_SIZE_BYTES, f"hole of {hole_length} bytes too small")
    return encode_record_header(
        body_length=hole_length - RECORD_HEADER_SIZE_BYTES, logical_offset=logical_offset,
        journal_id=journal_id, body_crc32c=0, magic=PAD_MAGIC,
    )


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
    if magic not in (RECORD_MAGIC, PAD_MAGIC):
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
    return HeaderCheck(RecordClass.VALID, "ok", length, body_crc, magic == PAD_MAGIC)


def check_record_body(header: HeaderCheck, body: bytes) -> RecordCheck:
    """Finish classifying a record whose header was VALID, given the bytes after it."""
    invariant(header.klass is RecordClass.VALID, "check_record_body needs a valid header")
    size = RECORD_HEADER_SIZE_BYTES + header.body_length
    if header.pad:
        return RecordCheck(RecordClass.VALID, "pad", b"", pad=True, size_bytes=size)
    if len(body) < header.body_length:
        return RecordCheck(
            RecordClass.TORN, f"body cut at {len(body)} of {header.body_length} bytes")
    body = body[: header.body_length]
    if crc32c.crc32c(body) != header.body_crc32c:
        return RecordCheck(RecordClass.CORRUPT, "body crc32c mismatch")
    return RecordCheck(RecordClass.VALID, "ok", body, size_bytes=size)


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
