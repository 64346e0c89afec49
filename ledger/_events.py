"""Journal record bodies: the ledger events that must survive a crash.

The journal stores opaque bodies; this pure codec gives them meaning.  Every
body starts with a one-byte event type.  All integers are big-endian.

ADD (1)      off size field
             0   1    type = 1
             1   8    ledger_id       u64
             9   8    first_entry_id  u64
             17  4    entry_count     u32   (1 for a single add; a batch is one record,
                                             so a batch is all-or-nothing after a crash)
             21  ...  entry_count x (payload_crc32c u32, length u32, payload)
CREATE (2)   type, ledger_id u64, created_at f64, salt[16], password_hash[32],
             metadata_length u32, metadata (UTF-8 JSON object of str -> str)
FENCE (3)    type, ledger_id u64
CLOSE (4)    type, ledger_id u64, closed_at f64
DELETE (5)   type, ledger_id u64
"""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from dataclasses import dataclass

from common.errors import InvariantViolation, invariant

from ._password import HASH_SIZE_BYTES, SALT_SIZE_BYTES, PasswordHash

ADD, CREATE, FENCE, CLOSE, DELETE = 1, 2, 3, 4, 5

_TYPE_LEDGER = struct.Struct(">BQ")
_ADD_HEAD = struct.Struct(">BQQI")
_ADD_ITEM = struct.Struct(">II")
_CREATE_HEAD = struct.Struct(f">BQd{SALT_SIZE_BYTES}s{HASH_SIZE_BYTES}sI")
_CLOSE = struct.Struct(">BQd")
invariant(_TYPE_LEDGER.size == 9, "FENCE/DELETE layout")
invariant(_ADD_HEAD.size == 21, "ADD header layout")
invariant(_ADD_ITEM.size == 8, "ADD item layout")
ADD_ITEM_OVERHEAD_BYTES = _ADD_ITEM.size
invariant(_CREATE_HEAD.size == 69, "CREATE header layout")
invariant(_CLOSE.size == 17, "CLOSE layout")


@dataclass(frozen=True)
class AddEvent:
    ledger_id: int
    first_entry_id: int
    entries: tuple[tuple[bytes, int], ...]  # (payload, crc32c) in entry order


@dataclass(frozen=True)
class CreateEvent:
    ledger_id: int
    created_at: float
    password: PasswordHash
    metadata: dict[str, str]


@dataclass(frozen=True)
class FenceEvent:
    ledger_id: int


@dataclass(frozen=True)
class CloseEvent:
    ledger_id: int
    closed_at: float


@dataclass(frozen=True)
class DeleteEvent:
    ledger_id: int


Event = AddEvent | CreateEvent | FenceEvent | CloseEvent | DeleteEvent


def encode_add(ledger_id: int, first_entry_id: int,
               entries: Sequence[tuple[bytes, int]]) -> bytes:
    invariant(len(entries) > 0, "an ADD record carries at least one entry")
    parts = [_ADD_HEAD.pack(ADD, ledger_id, first_entry_id, len(entries))]
    for payload, crc in entries:
        parts.append(_ADD_ITEM.pack(crc, len(payload)))
        parts.append(payload)
    return b"".join(parts)


def set_first_entry_id(body: bytearray, first_entry_id: int) -> None:
    """Fill in the entry id of an ADD body encoded ahead of time.

    Encoding copies the payloads, so the bookie encodes outside its add lock
    and only stamps the id (known once the lock is held) in place.
    """
    invariant(body[0] == ADD, "not an ADD body")
    struct.pack_into(">Q", body, 9, first_entry_id)


def encode_create(event: CreateEvent) -> bytes:
    meta = json.dumps(event.metadata, sort_keys=True, separators=(",", ":")).encode()
    return _CREATE_HEAD.pack(CREATE, event.ledger_id, event.created_at, event.password.salt,
                             event.password.digest, len(meta)) + meta


def encode_fence(ledger_id: int) -> bytes:
    return _TYPE_LEDGER.pack(FENCE, ledger_id)


def encode_close(ledger_id: int, closed_at: float) -> bytes:
    return _CLOSE.pack(CLOSE, ledger_id, closed_at)


def encode_delete(ledger_id: int) -> bytes:
    return _TYPE_LEDGER.pack(DELETE, ledger_id)


def decode(body: bytes) -> Event:
    """Decode one body; a body the journal vouched for (CRC ok) that does not
    parse is a bug or a foreign writer, so it raises InvariantViolation."""
    if not body:
        raise InvariantViolation("empty journal body")
    kind = body[0]
    try:
        if kind == ADD:
            return _decode_add(body)
        if kind == CREATE:
            _, lid, created, salt, digest, n = _CREATE_HEAD.unpack_from(body)
            raw = body[_CREATE_HEAD.size:]
            invariant(len(raw) == n, "CREATE metadata length")
            meta = json.loads(raw)
            return CreateEvent(lid, created, PasswordHash(salt, digest), meta)
        if kind == CLOSE:
            invariant(len(body) == _CLOSE.size, "CLOSE length")
            _, lid, closed = _CLOSE.unpack(body)
            return CloseEvent(lid, closed)
        if kind in (FENCE, DELETE):
            invariant(len(body) == _TYPE_LEDGER.size, "FENCE/DELETE length")
            _, lid = _TYPE_LEDGER.unpack(body)
            return FenceEvent(lid) if kind == FENCE else DeleteEvent(lid)
    except (struct.error, ValueError) as exc:
        raise InvariantViolation(f"undecodable journal body of type {kind}: {exc}") from exc
    raise InvariantViolation(f"unknown journal event type {kind}")


def _decode_add(body: bytes) -> AddEvent:
    _, lid, first, count = _ADD_HEAD.unpack_from(body)
    pos = _ADD_HEAD.size
    view = memoryview(body)
    entries: list[tuple[bytes, int]] = []
    for _ in range(count):
        crc, length = _ADD_ITEM.unpack_from(body, pos)
        pos += _ADD_ITEM.size
        invariant(pos + length <= len(body), "ADD payload runs past the body")
        entries.append((bytes(view[pos:pos + length]), crc))
        pos += length
    invariant(pos == len(body), "ADD body has trailing bytes")
    return AddEvent(lid, first, tuple(entries))
