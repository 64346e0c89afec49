"""The persisted form of one ledger's metadata (RocksDB ``ledgers`` family).

Version 2 (written since issue 28) is a packed struct, about 110 bytes for a
ledger with no metadata and no offload, which a start-up reads a million of in
a second and keeps as it is for a closed, idle ledger (``LedgerTable``)::

    u8  version (2)        u8  state            u8  password scheme   u8 flags
    u64 ledger id          i64 last entry id    u64 length
    f64 created at         f64 closed at (NaN: not closed)
    u64 local first entry id
    u8  salt length, salt  u8 digest length, digest
    [flags & META]    u32 length + JSON object of the user metadata
    [flags & OFFLOAD] u32 length + JSON object of the offload state
    [flags & TIER]    five u64: the tier position

The two free-form parts stay JSON (user metadata, and the offload state that
grows a field now and then); a ledger that has neither pays nothing for them.
Version 1 records (a JSON object with ``"v":1``, written before) still decode;
they are rewritten as version 2 the next time their ledger changes.
"""

from __future__ import annotations

import functools
import json
import math
import struct
from dataclasses import dataclass, field
from typing import Any

from common.errors import InvariantViolation

from ._model import (
    LedgerFilter,
    LedgerInfo,
    LedgerState,
    OffloadInfo,
    OffloadState,
    TierPosition,
)
from ._password import PasswordHash, PasswordScheme

FORMAT_VERSION = 2
JSON_FORMAT_VERSION = 1

_HEAD = struct.Struct(">BBBBQqQddQ")
_LEN = struct.Struct(">I")
_TIER = struct.Struct(">5Q")
FLAG_META = 1
FLAG_OFFLOAD = 2
FLAG_TIER = 4
FLAG_LOCAL_DELETED = 8  # the offload state says the local copy is gone
_STATES = (LedgerState.OPEN, LedgerState.FENCED, LedgerState.CLOSED)
_STATE_CODE = {state: code for code, state in enumerate(_STATES)}
CLOSED_CODE = _STATE_CODE[LedgerState.CLOSED]
# The one offload state and tier position most ledgers have: shared, not copied.
NO_OFFLOAD = OffloadInfo()
NO_TIER = TierPosition()


@dataclass(frozen=True, kw_only=True)
class LedgerRecord:
    ledger_id: int
    state: LedgerState
    password: PasswordHash
    last_entry_id: int  # -1 when empty; the highest entry id durable in the index
    length: int
    created_at: float
    closed_at: float | None
    metadata: dict[str, str] = field(default_factory=dict)
    offload: OffloadInfo = NO_OFFLOAD
    tier: TierPosition = NO_TIER
    local_first_entry_id: int = 0

    def info(self) -> LedgerInfo:
        return LedgerInfo(
            ledger_id=self.ledger_id, state=self.state, last_add_confirmed=self.last_entry_id,
            length=self.length, entries=self.last_entry_id + 1, created_at=self.created_at,
            closed_at=self.closed_at, metadata=dict(self.metadata), offload=self.offload,
            tier=self.tier, local_first_entry_id=self.local_first_entry_id,
        )

    def encode(self) -> bytes:
        return self._encoded

    @functools.cached_property
    def _encoded(self) -> bytes:
        # Cached: a checkpoint's index batch encodes each record, and the same
        # records of closed ledgers are then kept as these bytes (LedgerTable).
        flags = 0
        tail: list[bytes] = []
        if self.metadata:
            flags |= FLAG_META
            tail.append(_json_part(self.metadata))
        if self.offload != NO_OFFLOAD:
            flags |= FLAG_OFFLOAD | (FLAG_LOCAL_DELETED if self.offload.local_deleted else 0)
            tail.append(_json_part(self.offload.to_doc()))
        if self.tier != NO_TIER:
            flags |= FLAG_TIER
            tier = self.tier
            tail.append(_TIER.pack(tier.segment_first_entry_id, tier.byte_position,
                                   tier.entry_id, tier.entry_offset, tier.segment_start_bytes))
        pw = self.password
        head = _HEAD.pack(
            FORMAT_VERSION, _STATE_CODE[self.state], int(pw.scheme), flags, self.ledger_id,
            self.last_entry_id, self.length, self.created_at,
            math.nan if self.closed_at is None else self.closed_at, self.local_first_entry_id)
        return b"".join((head, bytes((len(pw.salt),)), pw.salt, bytes((len(pw.digest),)),
                         pw.digest, *tail))

    @classmethod
    def decode(cls, raw: bytes) -> LedgerRecord:
        try:
            if raw[:1] == b"{":
                return _decode_json(raw)
            return _decode_packed(raw)
        except (ValueError, KeyError, TypeError, IndexError, struct.error) as exc:
            raise InvariantViolation(f"undecodable ledger record: {exc}") from exc


# Where the head's local-first entry id lies (the last field of _HEAD).
_LOCAL_FIRST_AT = _HEAD.size - 8
_NOTHING_DROPPED = bytes(8)
_STATE_AT, _SCHEME_AT, _FLAGS_AT = 1, 2, 3


def is_dormant(raw: bytes) -> bool:
    """Whether a ledger can be kept as this record until it changes: a version 2
    record of a closed ledger never tiered, either never offloaded or offloaded
    with its local copy gone, which nothing but a read (or its deletion, or a
    change of where it lies in S3) will look at.  Reads the head only."""
    flags = raw[_FLAGS_AT] if raw[:1] == b"\x02" else FLAG_TIER
    return (raw[_STATE_AT] == CLOSED_CODE and not flags & FLAG_TIER
            and (not flags & FLAG_OFFLOAD or bool(flags & FLAG_LOCAL_DELETED))
            and raw[_LOCAL_FIRST_AT:_HEAD.size] == _NOTHING_DROPPED)


def dormant_is_local(raw: bytes) -> bool:
    """Whether a dormant ledger's entries are held locally (not offloaded)."""
    return not raw[_FLAGS_AT] & FLAG_LOCAL_DELETED


def dormant_info(raw: bytes, where: LedgerFilter) -> LedgerInfo | None:
    """The ledger of a dormant record (see ``is_dormant``) as a listing shows it,
    if it matches ``where``; None otherwise.  A listing may look at 20,000 such
    records per page, so a filter is tried on the bytes first: a dormant ledger
    is CLOSED, most were never offloaded, and the compact JSON of a metadata pair it
    holds appears in its record as is (a ``"`` in JSON opens or closes a
    string, so the pattern cannot start inside one)."""
    if where.state not in (None, LedgerState.CLOSED):
        return None
    if raw[_FLAGS_AT] & FLAG_OFFLOAD:  # offloaded: its offload state decoded too
        info = LedgerRecord.decode(raw).info()
        return info if where.matches(info.state, info.offload.state, info.metadata) else None
    if where.offload_state not in (None, OffloadState.NONE):
        return None
    for key, value in where.metadata.items():
        if _pair_pattern(key, value) not in raw:
            return None
    _v, _s, _sc, flags, ledger_id, last, length, created, closed, _lf = _HEAD.unpack_from(raw)
    metadata: dict[str, str] = {}
    if flags & FLAG_META:
        metadata, _at = _json_at(raw, _password_parts(raw)[2])
        if any(metadata.get(k) != v for k, v in where.metadata.items()):
            return None
    return LedgerInfo(ledger_id=ledger_id, state=LedgerState.CLOSED, last_add_confirmed=last,
                      length=length, entries=last + 1, created_at=created, closed_at=closed,
                      metadata=metadata, offload=NO_OFFLOAD, tier=NO_TIER)


@functools.lru_cache(maxsize=256)  # a listing asks for the same pairs 20,000 times
def _pair_pattern(key: str, value: str) -> bytes:
    """A metadata pair as ``_json_part`` writes it (compact separators)."""
    return json.dumps({key: value}, separators=(",", ":")).encode()[1:-1]


def password_scheme_of(raw: bytes) -> PasswordScheme:
    """The password scheme of a version 2 record, from its head."""
    return PasswordScheme(raw[_SCHEME_AT])


def _password_parts(raw: bytes) -> tuple[bytes, bytes, int]:
    """The salt and digest of a version 2 record, and where its tail starts."""
    at = _HEAD.size
    salt = raw[at + 1:at + 1 + raw[at]]
    at += 1 + raw[at]
    digest = raw[at + 1:at + 1 + raw[at]]
    return salt, digest, at + 1 + raw[at]


def _json_at(raw: bytes, at: int) -> tuple[Any, int]:
    """The JSON part ``_json_part`` wrote at ``at``, and where the next starts."""
    (size,) = _LEN.unpack_from(raw, at)
    return json.loads(raw[at + 4:at + 4 + size]), at + 4 + size


def _json_part(doc: dict[str, Any]) -> bytes:
    body = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    return _LEN.pack(len(body)) + body


def _offload_of(doc: dict[str, Any]) -> OffloadInfo:
    info = OffloadInfo.from_doc(doc)
    return NO_OFFLOAD if info == NO_OFFLOAD else info


def _decode_packed(raw: bytes) -> LedgerRecord:
    version, state, scheme, flags, ledger_id, last, length, created, closed, local_first = \
        _HEAD.unpack_from(raw)
    if version != FORMAT_VERSION:
        raise ValueError(f"unknown ledger record version {version}")
    salt, digest, at = _password_parts(raw)
    metadata: dict[str, str] = {}
    offload, tier = NO_OFFLOAD, NO_TIER
    if flags & FLAG_META:
        found, at = _json_at(raw, at)
        metadata = dict(found)
    if flags & FLAG_OFFLOAD:
        found, at = _json_at(raw, at)
        offload = _offload_of(found)
    if flags & FLAG_TIER:
        tier = TierPosition(**dict(zip(("segment_first_entry_id", "byte_position", "entry_id",
                                        "entry_offset", "segment_start_bytes"),
                                       _TIER.unpack_from(raw, at), strict=True)))
    return LedgerRecord(
        ledger_id=ledger_id, state=_STATES[state],
        password=PasswordHash(bytes(salt), bytes(digest), PasswordScheme(scheme)),
        last_entry_id=last, length=length, created_at=created,
        closed_at=None if math.isnan(closed) else closed, metadata=metadata,
        offload=offload, tier=tier, local_first_entry_id=local_first)


def _decode_json(raw: bytes) -> LedgerRecord:
    """A version 1 record: a JSON object; the password's scheme is absent for
    scrypt, as every record written before the tag holds."""
    doc = json.loads(raw)
    if doc.get("v") != JSON_FORMAT_VERSION:
        raise ValueError(f"unknown ledger record version {doc.get('v')!r}")
    tier = TierPosition(**doc.get("tier", {}))
    return LedgerRecord(
        ledger_id=int(doc["id"]), state=LedgerState(doc["state"]),
        password=PasswordHash(
            bytes.fromhex(doc["salt"]), bytes.fromhex(doc["hash"]),
            PasswordScheme(int(doc.get("pw_scheme", PasswordScheme.SCRYPT)))),
        last_entry_id=int(doc["last"]), length=int(doc["length"]),
        created_at=float(doc["created"]), closed_at=doc["closed"],
        metadata=dict(doc["meta"]), offload=_offload_of(doc["offload"]),
        tier=NO_TIER if tier == NO_TIER else tier,
        local_first_entry_id=int(doc.get("local_first", 0)),
    )
