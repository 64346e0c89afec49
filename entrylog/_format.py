"""Pure codec for entry log files: bytes <-> header, record, ledgers map.

Nothing here touches a file descriptor, a lock or fsync (STYLE habit 1); the
writer, the reader and the scanner all frame bytes through these functions, so
they cannot disagree about the layout.  Every integer is big-endian.

File header (``HEADER_SIZE_BYTES`` = 4096 bytes, zero padded)::

    offset size field                 notes
    0      4    magic                 b"LDEL"
    4      4    version               u32, FORMAT_VERSION
    8      8    log_id                u64, equals the id in the file name
    16     8    ledgers_map_offset    u64, 0 = no map yet (log not sealed)
    24     4    ledgers_map_length    u32, 0 when there is no map
    28     4    ledger_count          u32, entries in the map
    32     4    header_crc32c         u32, CRC32C of bytes [0, 32)
    36     4060 padding               zeros (reserved; readers ignore it)

Entry record (``RECORD_HEADER_SIZE_BYTES`` = 28 bytes + payload)::

    offset size field                 notes
    0      4    record_length         u32, payload length in bytes
    4      8    ledger_id             u64
    12     8    entry_id              u64
    20     4    payload_crc32c        u32, CRC32C of the payload
    24     4    header_crc32c         u32, CRC32C of bytes [0, 24)
    28     n    payload

Ledgers map (appended after the last record when a log is sealed)::

    offset     size   field           notes
    0          4      magic           b"LDLM"
    4          4      count           u32
    8 + 24*i   8      ledger_id       u64, ascending
    16 + 24*i  8      entry_count     u64
    24 + 24*i  8      byte_count      u64, record bytes incl. the 28-byte header
    8 + 24*n   4      map_crc32c      u32, CRC32C of bytes [0, 8 + 24*n)
"""

from __future__ import annotations

import itertools
import operator
import struct
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from crc32c import crc32c as _crc32c

from common.errors import CorruptRecord, InvariantViolation, invariant

from ._types import LedgerUsage

U32_MAX = 0xFFFF_FFFF
U64_MAX = 0xFFFF_FFFF_FFFF_FFFF

# --- file header ------------------------------------------------------------

FILE_MAGIC = b"LDEL"
FORMAT_VERSION = 1
HEADER_SIZE_BYTES = 4096
_HEADER = struct.Struct(">4sIQQIII")
_HEADER_CRC_COVERED_BYTES = 32
invariant(_HEADER.size == 36, "entry log header struct must be 36 bytes")
invariant(_HEADER.size <= HEADER_SIZE_BYTES, "header struct must fit in the header block")

# --- entry record -----------------------------------------------------------

_RECORD_HEADER = struct.Struct(">IQQII")
RECORD_HEADER_SIZE_BYTES = 28
_RECORD_CRC_COVERED_BYTES = 24
_RECORD_COVERED = struct.Struct(">IQQI")  # the 24 bytes the header CRC covers
_U32 = struct.Struct(">I")
invariant(_RECORD_COVERED.size == _RECORD_CRC_COVERED_BYTES, "record CRC span layout")
invariant(_RECORD_HEADER.size == RECORD_HEADER_SIZE_BYTES, "record header struct must be 28 bytes")

# --- ledgers map ------------------------------------------------------------

MAP_MAGIC = b"LDLM"
_MAP_HEAD = struct.Struct(">4sI")
_MAP_ITEM = struct.Struct(">QQQ")
_MAP_CRC = struct.Struct(">I")
MAP_HEAD_SIZE_BYTES = 8
invariant(_MAP_HEAD.size == MAP_HEAD_SIZE_BYTES, "ledgers map head struct must be 8 bytes")
invariant(_MAP_ITEM.size == 24, "ledgers map item struct must be 24 bytes")
invariant(_MAP_CRC.size == 4, "ledgers map crc struct must be 4 bytes")


def crc32c(data: bytes | bytearray | memoryview) -> int:
    return int(_crc32c(data))


# --- file header ------------------------------------------------------------


class FileHeader(NamedTuple):
    log_id: int
    ledgers_map_offset: int = 0
    ledgers_map_length: int = 0
    ledger_count: int = 0

    @property
    def sealed(self) -> bool:
        return self.ledgers_map_offset != 0


def _check_header_fields(header: FileHeader, where: str) -> None:
    invariant(0 < header.log_id <= U64_MAX, f"{where}: log_id {header.log_id} out of range")
    if header.ledgers_map_offset == 0:
        invariant(
            header.ledgers_map_length == 0 and header.ledger_count == 0,
            f"{where}: unsealed header must have no map length and no ledger count",
        )
    else:
        invariant(
            HEADER_SIZE_BYTES <= header.ledgers_map_offset <= U64_MAX,
            f"{where}: ledgers map offset {header.ledgers_map_offset} inside the header",
        )
        invariant(
            header.ledgers_map_length == ledgers_map_size_bytes(header.ledger_count),
            f"{where}: ledgers map length {header.ledgers_map_length} does not match "
            f"ledger count {header.ledger_count}",
        )


def encode_file_header(header: FileHeader) -> bytes:
    """The 4096-byte header block for ``header``."""
    _check_header_fields(header, "encode_file_header")
    head = _HEADER.pack(
        FILE_MAGIC,
        FORMAT_VERSION,
        header.log_id,
        header.ledgers_map_offset,
        header.ledgers_map_length,
        header.ledger_count,
        0,
    )
    crc = crc32c(head[:_HEADER_CRC_COVERED_BYTES])
    block = head[:_HEADER_CRC_COVERED_BYTES] + struct.pack(">I", crc)
    return block + bytes(HEADER_SIZE_BYTES - len(block))


def decode_file_header(data: bytes, *, path: str) -> FileHeader:
    """Parse the first bytes of a log; raise :class:`CorruptRecord` at offset 0 if bad."""
    if len(data) < _HEADER.size:
        raise CorruptRecord(path, 0, f"file header truncated: {len(data)} of {_HEADER.size} bytes")
    magic, version, log_id, map_offset, map_length, ledger_count, crc = _HEADER.unpack_from(data)
    if magic != FILE_MAGIC:
        raise CorruptRecord(path, 0, f"bad file magic {magic!r}")
    if crc != crc32c(data[:_HEADER_CRC_COVERED_BYTES]):
        raise CorruptRecord(path, 0, "file header crc32c mismatch")
    if version != FORMAT_VERSION:
        raise CorruptRecord(path, 0, f"unsupported entry log version {version}")
    header = FileHeader(log_id, map_offset, map_length, ledger_count)
    # A header whose CRC holds but whose fields contradict each other was
    # written that way by us: that is a bug, not a torn write.
    _check_header_fields(header, f"decode_file_header({path})")
    return header


# --- entry record -----------------------------------------------------------


class RecordHeader(NamedTuple):
    payload_length: int
    ledger_id: int
    entry_id: int
    payload_crc32c: int

    @property
    def record_size_bytes(self) -> int:
        return RECORD_HEADER_SIZE_BYTES + self.payload_length


def encode_record_header(ledger_id: int, entry_id: int, payload_length: int,
                         payload_crc32c: int) -> bytes:
    """The 28-byte header of one entry record; the payload follows it unchanged.

    ``payload_crc32c`` is stored as given, not recomputed: the caller computed it
    once when the entry was added (the journal record carries the same value),
    and ``read`` verifies it against the payload read back.
    """
    # One check, its message built only when it fails: every flushed entry passes here.
    if not (0 <= ledger_id <= U64_MAX and 0 <= entry_id <= U64_MAX
            and 0 <= payload_length <= U32_MAX and 0 <= payload_crc32c <= U32_MAX):
        invariant(False, f"record fields out of range: ledger {ledger_id}, entry {entry_id}, "
                  f"{payload_length} bytes, crc32c {payload_crc32c}")
    covered = _RECORD_COVERED.pack(payload_length, ledger_id, entry_id, payload_crc32c)
    return covered + _U32.pack(_crc32c(covered))


def encode_record_headers(ledger_id: int, first_entry_id: int, payloads: Sequence[bytes],
                          crcs: Sequence[int]) -> list[bytes]:
    """:func:`encode_record_header` of each of one ledger's consecutive entries
    ``first_entry_id, first_entry_id + 1, …`` (payloads and their CRC32C), as a
    checkpoint hands them over.  Built by ``map`` over the columns, so no Python
    runs per entry (a flush encodes every entry it writes), with the struct's
    own range check in place of the explicit one."""
    try:
        covered = list(map(_RECORD_COVERED.pack, map(len, payloads),
                           itertools.repeat(ledger_id), itertools.count(first_entry_id),
                           crcs))
    except struct.error as exc:
        raise InvariantViolation(f"record fields out of range: ledger {ledger_id}, "
                                 f"entries from {first_entry_id}: {exc}") from exc
    return list(map(operator.add, covered, map(_U32.pack, map(_crc32c, covered))))


def encode_record(ledger_id: int, entry_id: int, payload: bytes, payload_crc32c: int) -> bytes:
    """Header + payload of one entry record, in one (copied) block of bytes."""
    return encode_record_header(ledger_id, entry_id, len(payload), payload_crc32c) + payload


def decode_record_header(data: bytes, *, path: str, offset: int) -> RecordHeader:
    """Parse the 28-byte record header at the start of ``data`` (located at ``offset``)."""
    if len(data) < RECORD_HEADER_SIZE_BYTES:
        raise CorruptRecord(
            path, offset,
            f"record header truncated: {len(data)} of {RECORD_HEADER_SIZE_BYTES} bytes",
        )
    length, ledger_id, entry_id, payload_crc, header_crc = _RECORD_HEADER.unpack_from(data)
    if header_crc != crc32c(data[:_RECORD_CRC_COVERED_BYTES]):
        raise CorruptRecord(path, offset, "record header crc32c mismatch")
    return RecordHeader(length, ledger_id, entry_id, payload_crc)


def check_record_payload(header: RecordHeader, payload: bytes, *, path: str, offset: int) -> None:
    """Raise :class:`CorruptRecord` unless ``payload`` is the whole, intact payload."""
    if len(payload) != header.payload_length:
        raise CorruptRecord(
            path, offset,
            f"record payload truncated: {len(payload)} of {header.payload_length} bytes",
        )
    if crc32c(payload) != header.payload_crc32c:
        raise CorruptRecord(path, offset, "record payload crc32c mismatch")


def decode_record(data: bytes, *, path: str, offset: int) -> tuple[RecordHeader, bytes]:
    """Parse a whole record (header and payload) at the start of ``data``."""
    header = decode_record_header(data, path=path, offset=offset)
    end = header.record_size_bytes
    payload = bytes(data[RECORD_HEADER_SIZE_BYTES:end])
    check_record_payload(header, payload, path=path, offset=offset)
    return header, payload


# --- ledgers map ------------------------------------------------------------


def ledgers_map_size_bytes(ledger_count: int) -> int:
    return MAP_HEAD_SIZE_BYTES + _MAP_ITEM.size * ledger_count + _MAP_CRC.size


def encode_ledgers_map(usage: Mapping[int, LedgerUsage]) -> bytes:
    """The map block for ``usage``, items sorted by ledger id."""
    invariant(len(usage) <= U32_MAX, "too many ledgers for one map")
    parts = [_MAP_HEAD.pack(MAP_MAGIC, len(usage))]
    for ledger_id in sorted(usage):
        item = usage[ledger_id]
        invariant(0 <= ledger_id <= U64_MAX, f"ledger_id {ledger_id} out of range")
        invariant(
            0 < item.entry_count <= U64_MAX and 0 < item.byte_count <= U64_MAX,
            f"ledger {ledger_id} usage {item} out of range",
        )
        parts.append(_MAP_ITEM.pack(ledger_id, item.entry_count, item.byte_count))
    body = b"".join(parts)
    return body + _MAP_CRC.pack(crc32c(body))


def decode_ledgers_map_count(data: bytes, *, path: str, offset: int) -> int:
    """The ledger count from the first 8 bytes of a map (magic checked)."""
    if len(data) < MAP_HEAD_SIZE_BYTES:
        raise CorruptRecord(path, offset, "ledgers map head truncated")
    magic, count = _MAP_HEAD.unpack_from(data)
    if magic != MAP_MAGIC:
        raise CorruptRecord(path, offset, f"bad ledgers map magic {magic!r}")
    return int(count)


def decode_ledgers_map(data: bytes, *, path: str, offset: int) -> dict[int, LedgerUsage]:
    """Parse a whole map block; ``data`` must be exactly the map's bytes."""
    count = decode_ledgers_map_count(data, path=path, offset=offset)
    size = ledgers_map_size_bytes(count)
    if len(data) != size:
        raise CorruptRecord(
            path, offset, f"ledgers map of {count} ledgers needs {size} bytes, got {len(data)}"
        )
    (crc,) = _MAP_CRC.unpack_from(data, size - _MAP_CRC.size)
    if crc != crc32c(data[: size - _MAP_CRC.size]):
        raise CorruptRecord(path, offset, "ledgers map crc32c mismatch")
    usage: dict[int, LedgerUsage] = {}
    previous = -1
    items = memoryview(data)[MAP_HEAD_SIZE_BYTES:size - _MAP_CRC.size]
    for ledger_id, entry_count, byte_count in _MAP_ITEM.iter_unpack(items):
        # The CRC holds, so out-of-order or empty items mean our writer is wrong
        # (checked inline: a million items, no message formatted for each).
        if ledger_id <= previous:
            raise InvariantViolation(f"{path}: ledgers map not sorted at ledger {ledger_id}")
        if entry_count <= 0 or byte_count <= 0:
            raise InvariantViolation(f"{path}: empty usage for {ledger_id}")
        usage[ledger_id] = LedgerUsage(entry_count, byte_count)
        previous = ledger_id
    return usage
