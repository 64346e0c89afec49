"""Journal header slot codec (no I/O).

The device starts with two 4 KiB header slots (device offsets 0 and 4096).  Each
header write increments ``generation`` and goes to slot ``generation % 2``, so a
torn header write damages at most one slot and the other still holds a good one.

Byte layout of one slot, big-endian:

====== ==== =========================== =============================================
offset size field                       notes
====== ==== =========================== =============================================
0      4    magic                       ``HEADER_MAGIC`` ("LJHD")
4      2    version                     ``HEADER_VERSION`` (1)
6      2    shutdown_type               1 = CLEAN, 2 = UNCLEAN
8      8    journal_id                  random, never 0; every record repeats it
16     8    generation                  +1 per header write; the highest valid wins
24     8    capacity_bytes              ring size, fixed at format time
32     8    trim_offset                 logical offset recovery starts from
40     8    last_write_time_us          injected clock at the write, microseconds
48     8    sliding_window_max_length   bytes that may be written but unsynced
56     4    header_crc32c               CRC32C of bytes 0..55
60     4036 padding                     zeros (checked: a non-zero byte is damage)
====== ==== =========================== =============================================
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

import crc32c

from common.errors import FormatMismatch, invariant

from ._settings import ALIGNMENT_BYTES

HEADER_MAGIC = 0x4C4A4844  # "LJHD"
HEADER_VERSION = 1
HEADER_SLOT_SIZE_BYTES = ALIGNMENT_BYTES
HEADER_SLOT_COUNT = 2
HEADER_AREA_SIZE_BYTES = HEADER_SLOT_COUNT * HEADER_SLOT_SIZE_BYTES
HEADER = struct.Struct(">IHHQQQQQQI")
invariant(HEADER.size == 60, "journal header struct must be 60 bytes")
_CRC_SPAN = 56
_ZERO_SLOT = bytes(HEADER_SLOT_SIZE_BYTES)


class ShutdownType(enum.IntEnum):
    CLEAN = 1
    UNCLEAN = 2


@dataclass(frozen=True, slots=True, kw_only=True)
class JournalHeader:
    journal_id: int
    generation: int
    capacity_bytes: int
    trim_offset: int
    last_write_time_us: int
    sliding_window_max_length: int
    shutdown_type: ShutdownType
    version: int = HEADER_VERSION

    @property
    def slot_index(self) -> int:
        return self.generation % HEADER_SLOT_COUNT


class SlotClass(enum.Enum):
    VALID = "valid"
    EMPTY = "empty"  # all zeros: never written
    INVALID = "invalid"


@dataclass(frozen=True, slots=True)
class SlotCheck:
    klass: SlotClass
    reason: str
    header: JournalHeader | None = None


def encode_header(header: JournalHeader) -> bytes:
    """One full 4 KiB slot; validates the fields before they reach the device."""
    invariant(header.journal_id != 0, "journal_id must not be 0")
    invariant(header.capacity_bytes > 0 and header.capacity_bytes % ALIGNMENT_BYTES == 0,
              f"capacity {header.capacity_bytes} must be a positive multiple of 4096")
    invariant(header.trim_offset >= 0, "trim_offset must not be negative")
    invariant(header.generation >= 1, "generation starts at 1")
    body = HEADER.pack(
        HEADER_MAGIC, header.version, int(header.shutdown_type), header.journal_id,
        header.generation, header.capacity_bytes, header.trim_offset,
        header.last_write_time_us, header.sliding_window_max_length, 0,
    )[:_CRC_SPAN]
    slot = body + crc32c.crc32c(body).to_bytes(4, "big")
    return slot + bytes(HEADER_SLOT_SIZE_BYTES - len(slot))


def decode_header(slot: bytes, *, slot_index: int) -> SlotCheck:
    """Classify one slot read from device offset ``slot_index * 4096``."""
    if len(slot) != HEADER_SLOT_SIZE_BYTES:
        return SlotCheck(SlotClass.INVALID, f"slot is {len(slot)} bytes, not 4096")
    if slot == _ZERO_SLOT:
        return SlotCheck(SlotClass.EMPTY, "zeros")
    (magic, version, shutdown, jid, generation, capacity, trim, written_us, window,
     crc) = HEADER.unpack_from(slot)
    if magic != HEADER_MAGIC:
        return SlotCheck(SlotClass.INVALID, f"wrong magic {magic:#010x}")
    if crc32c.crc32c(slot[:_CRC_SPAN]) != crc:
        return SlotCheck(SlotClass.INVALID, "header crc32c mismatch")
    if any(slot[HEADER.size:]):
        return SlotCheck(SlotClass.INVALID, "non-zero bytes in the slot padding")
    if version != HEADER_VERSION:
        return SlotCheck(SlotClass.INVALID, f"unsupported version {version}")
    if shutdown not in (ShutdownType.CLEAN, ShutdownType.UNCLEAN):
        return SlotCheck(SlotClass.INVALID, f"unknown shutdown type {shutdown}")
    if generation % HEADER_SLOT_COUNT != slot_index:
        # A misdirected write: the slot holds a header meant for the other slot.
        return SlotCheck(
            SlotClass.INVALID, f"generation {generation} does not belong in slot {slot_index}")
    if jid == 0 or capacity == 0 or capacity % ALIGNMENT_BYTES:
        return SlotCheck(SlotClass.INVALID, "journal id or capacity out of range")
    header = JournalHeader(
        journal_id=jid, generation=generation, capacity_bytes=capacity, trim_offset=trim,
        last_write_time_us=written_us, sliding_window_max_length=window,
        shutdown_type=ShutdownType(shutdown), version=version,
    )
    return SlotCheck(SlotClass.VALID, "ok", header)


def choose_header(checks: list[SlotCheck], *, path: str) -> JournalHeader | None:
    """The header to use: the valid slot with the highest generation.

    Returns None when every slot is empty (a new device: format it).  Raises
    FormatMismatch when no slot is valid but some hold bytes: that is another
    format or a destroyed header, and formatting it would destroy data.
    """
    valid = [c.header for c in checks if c.header is not None]
    if valid:
        return max(valid, key=lambda h: h.generation)
    if all(c.klass is SlotClass.EMPTY for c in checks):
        return None
    reasons = "; ".join(f"slot {i}: {c.reason}" for i, c in enumerate(checks))
    raise FormatMismatch(
        f"journal device {path} has no valid ledgerd journal header ({reasons}); it holds "
        "another format or a damaged header; refusing to format it")
