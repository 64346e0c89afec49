"""Journal record bodies: the ledger events that must survive a crash.

The journal stores records of parts, each part with its own CRC32C; this pure
codec gives them meaning.  The first part starts with a one-byte event type.
All integers are big-endian.

ADD (1)      part 0, the envelope:
             off size field
             0   1    type = 1
             1   8    ledger_id       u64
             9   8    first_entry_id  u64
             17  4    entry_count     u32   (a batch is one record, so it is
                                             all-or-nothing after a crash)
             parts 1..n: the payloads, in entry order; each part's CRC32C (kept by
             the journal) is the payload's, computed once when the add arrived.
CREATE (2)   one part: type, ledger_id u64, created_at f64, salt[16],
             password_hash[32], metadata_length u32, metadata (UTF-8 JSON object);
             the hash is scrypt (``PasswordScheme.SCRYPT``): only such hashes are
             written this way, as before the scheme tag
CREATE_KEYED (10)  one part (a create whose password hash names its scheme):
             off size field
             0   1    type = 10
             1   8    ledger_id        u64
             9   8    created_at       f64
             17  1    password_scheme  u8  (``PasswordScheme``)
             18  1    salt_length      u8
             19  1    digest_length    u8
             20  4    metadata_length  u32
             24  …    salt, digest, metadata (UTF-8 JSON object)
REHASH (11)  one part (a ledger's password hash replaced by one of another
             scheme: a scrypt hash by a keyed one, once its password was
             verified):
             off size field
             0   1    type = 11
             1   8    ledger_id        u64
             9   1    password_scheme  u8
             10  1    salt_length      u8
             11  1    digest_length    u8
             12  …    salt, digest
FENCE (3)    one part: type, ledger_id u64
CLOSE (4)    one part: type, ledger_id u64, closed_at f64
DELETE (5)   one part: type, ledger_id u64
TIER (9)     one part (how far the ledger is tiered to S3 while open; offload/):
             off size field
             0   1    type = 9
             1   8    ledger_id               u64
             9   8    segment_first_entry_id  u64
             17  8    byte_position           u64
             25  8    entry_id                u64
             33  8    entry_offset            u64
             41  8    segment_start_bytes     u64

Replica events (cluster mode, docs/cluster.md §12.1): a replica is a ledger's
copy on this bookie, stored under its own id space (``replica_storage_id``).

REPLICA_ADD (6)    part 0, the envelope:
                   off   size  field
                   0     1     type = 6
                   1     8     ledger_id      u64
                   9     8     fence_epoch    u64  (raises fenced_epoch to it; 0 = a
                                                    copy, which changes no fence)
                   17    8     lac            i64  (piggybacked; -1 changes nothing)
                   25    4     entry_count    u32  (0 allowed: a resend of nothing new)
                   29    8n    entry_ids      u64 each, in part order (not dense)
                   parts 1..n: the stored entries, each ``REPLICA_PREFIX`` (epoch u64,
                   length_after u64) followed by the payload; each part's CRC32C is
                   the stored bytes' (the write cache and entry log keep it).
REPLICA_FENCE (7)  one part: type, ledger_id u64, epoch u64
REPLICA_DELETE (8) one part: type, ledger_id u64

Journals written before records had parts hold ADD as one part: the envelope
followed by ``entry_count`` x (payload_crc32c u32, length u32, payload);
:func:`decode` still reads it.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from dataclasses import dataclass

import crc32c

from common.errors import InvariantViolation, invariant
from journal import record_body_bytes

from ._model import TierPosition
from ._password import HASH_SIZE_BYTES, SALT_SIZE_BYTES, PasswordHash, PasswordScheme

ADD, CREATE, FENCE, CLOSE, DELETE = 1, 2, 3, 4, 5
TIER = 9
CREATE_KEYED = 10
REHASH = 11
REPLICA_ADD, REPLICA_FENCE, REPLICA_DELETE = 6, 7, 8

_TYPE_LEDGER = struct.Struct(">BQ")
_ADD_HEAD = struct.Struct(">BQQI")
_ADD_ITEM_V1 = struct.Struct(">II")
_CREATE_HEAD = struct.Struct(f">BQd{SALT_SIZE_BYTES}s{HASH_SIZE_BYTES}sI")
_CLOSE = struct.Struct(">BQd")
invariant(_TYPE_LEDGER.size == 9, "FENCE/DELETE layout")
invariant(_ADD_HEAD.size == 21, "ADD envelope layout")
ADD_ENVELOPE_SIZE_BYTES = _ADD_HEAD.size
invariant(_CREATE_HEAD.size == 69, "CREATE header layout")
_CREATE_KEYED_HEAD = struct.Struct(">BQdBBBI")
invariant(_CREATE_KEYED_HEAD.size == 24, "CREATE_KEYED header layout")
_REHASH_HEAD = struct.Struct(">BQBBB")
invariant(_REHASH_HEAD.size == 12, "REHASH header layout")
invariant(_CLOSE.size == 17, "CLOSE layout")
_TIER = struct.Struct(">BQQQQQQ")
invariant(_TIER.size == 49, "TIER layout")
_REPLICA_ADD_HEAD = struct.Struct(">BQQqI")
_ENTRY_ID = struct.Struct(">Q")
_REPLICA_FENCE = struct.Struct(">BQQ")
invariant(_REPLICA_ADD_HEAD.size == 29, "REPLICA_ADD envelope layout")
invariant(_REPLICA_FENCE.size == 17, "REPLICA_FENCE layout")
# The 16 bytes before a replica entry's payload, in the journal, the write cache
# and the entry log alike: epoch u64, length_after u64 (big-endian).
REPLICA_PREFIX = struct.Struct(">QQ")
invariant(REPLICA_PREFIX.size == 16, "replica entry prefix layout")


@dataclass(frozen=True, slots=True)
class AddEvent:
    ledger_id: int
    first_entry_id: int
    payloads: tuple[bytes, ...]
    crcs: tuple[int, ...]  # CRC32C of each payload, checked by the journal


@dataclass(frozen=True, slots=True)
class CreateEvent:
    ledger_id: int
    created_at: float
    password: PasswordHash
    metadata: dict[str, str]


@dataclass(frozen=True, slots=True)
class FenceEvent:
    ledger_id: int


@dataclass(frozen=True, slots=True)
class CloseEvent:
    ledger_id: int
    closed_at: float


@dataclass(frozen=True, slots=True)
class DeleteEvent:
    ledger_id: int


@dataclass(frozen=True, slots=True)
class TierEvent:
    ledger_id: int
    position: TierPosition


@dataclass(frozen=True, slots=True)
class RehashEvent:
    ledger_id: int
    password: PasswordHash


@dataclass(frozen=True, slots=True)
class ReplicaAddEvent:
    """Entries stored on a replica (each ``stored`` = prefix + payload, with its CRC)."""

    ledger_id: int
    fence_epoch: int
    lac: int
    entry_ids: tuple[int, ...]
    stored: tuple[bytes, ...]
    crcs: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ReplicaFenceEvent:
    ledger_id: int
    epoch: int


@dataclass(frozen=True, slots=True)
class ReplicaDeleteEvent:
    ledger_id: int


Event = (AddEvent | CreateEvent | FenceEvent | CloseEvent | DeleteEvent | TierEvent
         | RehashEvent | ReplicaAddEvent | ReplicaFenceEvent | ReplicaDeleteEvent)
MetadataEvent = CreateEvent | FenceEvent | CloseEvent | DeleteEvent | TierEvent | RehashEvent
ReplicaEvent = ReplicaAddEvent | ReplicaFenceEvent | ReplicaDeleteEvent


def add_record_bytes(payload_bytes: int, entry_count: int) -> int:
    """The journal body of an add of ``entry_count`` entries: the envelope, one
    part per payload (framed in the record's part table) and the payloads."""
    return record_body_bytes(entry_count + 1, ADD_ENVELOPE_SIZE_BYTES + payload_bytes)


def add_envelope(ledger_id: int, first_entry_id: int, entry_count: int) -> bytes:
    """Part 0 of an ADD record; the payloads follow as parts of their own."""
    if entry_count <= 0:  # checked before building the message: every add passes here
        invariant(False, "an ADD record carries at least one entry")
    return _ADD_HEAD.pack(ADD, ledger_id, first_entry_id, entry_count)


def replica_add_envelope(ledger_id: int, fence_epoch: int, lac: int,
                         entry_ids: Sequence[int]) -> bytes:
    """Part 0 of a REPLICA_ADD record; the stored entries follow as parts."""
    invariant(fence_epoch >= 0 and lac >= -1, "REPLICA_ADD fence epoch / lac out of range")
    return _REPLICA_ADD_HEAD.pack(REPLICA_ADD, ledger_id, fence_epoch, lac,
                                  len(entry_ids)) + b"".join(
        _ENTRY_ID.pack(e) for e in entry_ids)


def replica_stored(epoch: int, length_after: int, payload: bytes) -> bytes:
    """The bytes a replica keeps for one entry: the prefix, then the payload."""
    return REPLICA_PREFIX.pack(epoch, length_after) + payload


def replica_unstored(stored: bytes) -> tuple[int, int, bytes]:
    """(epoch, length_after, payload) of a replica's stored entry."""
    invariant(len(stored) >= REPLICA_PREFIX.size, "replica entry shorter than its prefix")
    epoch, length_after = REPLICA_PREFIX.unpack_from(stored)
    return epoch, length_after, stored[REPLICA_PREFIX.size:]


def replica_parts(event: ReplicaEvent) -> tuple[list[bytes], list[int]]:
    """The parts of a replica event's record and their CRC32Cs."""
    if isinstance(event, ReplicaAddEvent):
        envelope = replica_add_envelope(event.ledger_id, event.fence_epoch, event.lac,
                                        event.entry_ids)
        return [envelope, *event.stored], [crc32c.crc32c(envelope), *event.crcs]
    body = encode(event)
    return [body], [crc32c.crc32c(body)]


def encode(event: MetadataEvent | ReplicaFenceEvent | ReplicaDeleteEvent) -> bytes:
    """The one part of a metadata event (or a replica's fence or delete)."""
    if isinstance(event, ReplicaFenceEvent):
        return _REPLICA_FENCE.pack(REPLICA_FENCE, event.ledger_id, event.epoch)
    if isinstance(event, ReplicaDeleteEvent):
        return _TYPE_LEDGER.pack(REPLICA_DELETE, event.ledger_id)
    if isinstance(event, CreateEvent):
        return _encode_create(event)
    if isinstance(event, CloseEvent):
        return _CLOSE.pack(CLOSE, event.ledger_id, event.closed_at)
    if isinstance(event, RehashEvent):
        pw = event.password
        invariant(len(pw.salt) < 256 and len(pw.digest) < 256, "REHASH salt/digest size")
        return _REHASH_HEAD.pack(REHASH, event.ledger_id, int(pw.scheme), len(pw.salt),
                                 len(pw.digest)) + pw.salt + pw.digest
    if isinstance(event, TierEvent):
        at = event.position
        return _TIER.pack(TIER, event.ledger_id, at.segment_first_entry_id, at.byte_position,
                          at.entry_id, at.entry_offset, at.segment_start_bytes)
    kind = FENCE if isinstance(event, FenceEvent) else DELETE
    return _TYPE_LEDGER.pack(kind, event.ledger_id)


def decode(parts: Sequence[bytes], crcs: Sequence[int]) -> Event:
    """Decode one record; parts the journal vouched for (CRCs ok) that do not
    parse are a bug or a foreign writer, so it raises InvariantViolation."""
    if not parts or not parts[0]:
        raise InvariantViolation("empty journal record")
    body = parts[0]
    kind = body[0]
    try:
        if kind == ADD:
            return _decode_add(parts, crcs) if len(parts) > 1 else _decode_add_v1(body)
        if kind == REPLICA_ADD:
            return _decode_replica_add(parts, crcs)
        invariant(len(parts) == 1, f"event type {kind} has {len(parts)} parts")
        if kind == CREATE:
            _, lid, created, salt, digest, n = _CREATE_HEAD.unpack_from(body)
            raw = body[_CREATE_HEAD.size:]
            invariant(len(raw) == n, "CREATE metadata length")
            return CreateEvent(lid, created, PasswordHash(salt, digest), json.loads(raw))
        if kind == CREATE_KEYED:
            return _decode_create_keyed(body)
        if kind == REHASH:
            _, lid, scheme, salt_n, digest_n = _REHASH_HEAD.unpack_from(body)
            at = _REHASH_HEAD.size
            invariant(len(body) == at + salt_n + digest_n, "REHASH length")
            return RehashEvent(lid, PasswordHash(body[at:at + salt_n], body[at + salt_n:],
                                                 PasswordScheme(scheme)))
        if kind == CLOSE:
            invariant(len(body) == _CLOSE.size, "CLOSE length")
            _, lid, closed = _CLOSE.unpack(body)
            return CloseEvent(lid, closed)
        if kind == TIER:
            invariant(len(body) == _TIER.size, "TIER length")
            _, lid, segment, position, entry_id, offset, start = _TIER.unpack(body)
            return TierEvent(lid, TierPosition(segment_first_entry_id=segment,
                                               byte_position=position, entry_id=entry_id,
                                               entry_offset=offset, segment_start_bytes=start))
        if kind in (FENCE, DELETE, REPLICA_DELETE):
            invariant(len(body) == _TYPE_LEDGER.size, "FENCE/DELETE length")
            _, lid = _TYPE_LEDGER.unpack(body)
            if kind == REPLICA_DELETE:
                return ReplicaDeleteEvent(lid)
            return FenceEvent(lid) if kind == FENCE else DeleteEvent(lid)
        if kind == REPLICA_FENCE:
            invariant(len(body) == _REPLICA_FENCE.size, "REPLICA_FENCE length")
            _, lid, epoch = _REPLICA_FENCE.unpack(body)
            return ReplicaFenceEvent(lid, epoch)
    except (struct.error, ValueError) as exc:
        raise InvariantViolation(f"undecodable journal record of type {kind}: {exc}") from exc
    raise InvariantViolation(f"unknown journal event type {kind}")


def _encode_create(event: CreateEvent) -> bytes:
    # Most ledgers have no metadata: spare json.dumps its setup for "{}".
    meta = json.dumps(event.metadata, sort_keys=True, separators=(",", ":")).encode() \
        if event.metadata else b"{}"
    pw = event.password
    if pw.scheme == PasswordScheme.SCRYPT:  # byte for byte what it was before the tag
        return _CREATE_HEAD.pack(CREATE, event.ledger_id, event.created_at, pw.salt,
                                 pw.digest, len(meta)) + meta
    invariant(len(pw.salt) < 256 and len(pw.digest) < 256, "CREATE_KEYED salt/digest size")
    return _CREATE_KEYED_HEAD.pack(CREATE_KEYED, event.ledger_id, event.created_at,
                                   int(pw.scheme), len(pw.salt), len(pw.digest),
                                   len(meta)) + pw.salt + pw.digest + meta


def _decode_create_keyed(body: bytes) -> CreateEvent:
    _, lid, created, scheme, salt_n, digest_n, meta_n = _CREATE_KEYED_HEAD.unpack_from(body)
    at = _CREATE_KEYED_HEAD.size
    invariant(len(body) == at + salt_n + digest_n + meta_n, "CREATE_KEYED length")
    salt = body[at:at + salt_n]
    digest = body[at + salt_n:at + salt_n + digest_n]
    raw = body[at + salt_n + digest_n:]
    return CreateEvent(lid, created, PasswordHash(salt, digest, PasswordScheme(scheme)),
                       json.loads(raw))


def _decode_add(parts: Sequence[bytes], crcs: Sequence[int]) -> AddEvent:
    invariant(len(parts[0]) == _ADD_HEAD.size, "ADD envelope length")
    _, lid, first, count = _ADD_HEAD.unpack(parts[0])
    invariant(count == len(parts) - 1, f"ADD envelope says {count} entries, record has "
              f"{len(parts) - 1}")
    return AddEvent(lid, first, tuple(parts[1:]), tuple(crcs[1:]))


def _decode_add_v1(body: bytes) -> AddEvent:
    _, lid, first, count = _ADD_HEAD.unpack_from(body)
    pos = _ADD_HEAD.size
    view = memoryview(body)
    payloads: list[bytes] = []
    crcs: list[int] = []
    for _ in range(count):
        crc, length = _ADD_ITEM_V1.unpack_from(body, pos)
        pos += _ADD_ITEM_V1.size
        invariant(pos + length <= len(body), "ADD payload runs past the body")
        payloads.append(bytes(view[pos:pos + length]))
        crcs.append(crc)
        pos += length
    invariant(pos == len(body), "ADD body has trailing bytes")
    return AddEvent(lid, first, tuple(payloads), tuple(crcs))


def _decode_replica_add(parts: Sequence[bytes], crcs: Sequence[int]) -> ReplicaAddEvent:
    head = parts[0]
    _, lid, fence_epoch, lac, count = _REPLICA_ADD_HEAD.unpack_from(head)
    invariant(len(head) == _REPLICA_ADD_HEAD.size + count * _ENTRY_ID.size,
              "REPLICA_ADD envelope length")
    invariant(count == len(parts) - 1, f"REPLICA_ADD envelope says {count} entries, "
              f"record has {len(parts) - 1}")
    ids = tuple(i for (i,) in _ENTRY_ID.iter_unpack(head[_REPLICA_ADD_HEAD.size:]))
    for stored in parts[1:]:
        invariant(len(stored) >= REPLICA_PREFIX.size, "REPLICA_ADD entry shorter than "
                  "its prefix")
    return ReplicaAddEvent(lid, fence_epoch, lac, ids, tuple(parts[1:]), tuple(crcs[1:]))
