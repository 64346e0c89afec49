"""Ledger metadata packed for a node's memory: the watched cache's cold form.

Every node caches every ledger's metadata (node/_cluster_metadata.py).  Decoded,
a ledger's value is about 400 B of Python objects (the dataclass, its salt and
digest, its floats and ints, the pair with its revision); packed it is one bytes
object of about 150 B, decoded again (a few microseconds) when it is used.  The
layout lives in memory only — never on disk or the wire — so it has no version:

    revision u64, ledger_id i64, state u8, E u16, Qw u16, Qa u16, created_at f64,
    writer epoch u64, flags u8 (1 closed_at, 2 last_entry_id, 4 length,
    8 user metadata, 16 offload, 32 keyed password digest, 64 tier);
    writer node (a name), salt, digest (u16 length + bytes each);
    fragment count u16, then per fragment first_entry_id i64, epoch u64 and E
    bookie ids (names);
    then, as flagged: closed_at f64, last_entry_id i64, length i64, user
    metadata, offload and tier as u32 length + JSON.

A name (a node's bookie id) is its u16 number in this process's table of the
names it has packed: a cluster has a handful of bookies, and every ledger names
E + 1 of them, so a number instead of the UTF-8 saves about 30 B per ledger.
Past ``_NAMES_MAX`` distinct names the name itself follows ``_SPELLED``.
"""

from __future__ import annotations

import functools
import json
import struct
import sys
import threading

from ._metadata import (
    NO_METADATA,
    PASSWORD_SCHEME_KEYED,
    PASSWORD_SCHEME_SCRYPT,
    Fragment,
    LedgerMetadata,
    LedgerState,
    shared_ensembles,
    shared_fragment,
    shared_writer,
)

_HEAD = struct.Struct("<QqBHHHdQB")
_SHORT = struct.Struct("<H")
_LONG = struct.Struct("<I")
_FRAGMENT = struct.Struct("<qQ")
_FLOAT = struct.Struct("<d")
_INT = struct.Struct("<q")
_STATES = (LedgerState.OPEN, LedgerState.IN_RECOVERY, LedgerState.CLOSED)
_CLOSED_AT, _LAST_ENTRY, _LENGTH, _USER, _OFFLOAD, _KEYED, _TIER = 1, 2, 4, 8, 16, 32, 64
_SPELLED = 0xFFFF  # a name number meaning "the name itself follows"
_NAMES_MAX = _SPELLED
_names: list[str] = []            # number -> name
_name_numbers: dict[str, int] = {}
_names_lock = threading.Lock()    # numbers are handed out from any thread


def _name_bytes(name: str) -> bytes:
    number = _name_numbers.get(name)
    if number is None:
        with _names_lock:
            number = _name_numbers.get(name)
            if number is None:
                if len(_names) >= _NAMES_MAX:
                    raw = name.encode()
                    return _SHORT.pack(_SPELLED) + _SHORT.pack(len(raw)) + raw
                number = len(_names)
                _names.append(sys.intern(name))
                _name_numbers[name] = number
    return _SHORT.pack(number)


def pack_metadata(md: LedgerMetadata, revision: int) -> bytes:
    flags = ((_CLOSED_AT if md.closed_at is not None else 0)
             | (_LAST_ENTRY if md.last_entry_id is not None else 0)
             | (_LENGTH if md.length is not None else 0)
             | (_USER if md.metadata else 0) | (_OFFLOAD if md.offload is not None else 0)
             | (_KEYED if md.password_scheme == PASSWORD_SCHEME_KEYED else 0)
             | (_TIER if md.tier is not None else 0))
    parts = [_HEAD.pack(revision, md.ledger_id, _STATES.index(md.state), md.ensemble_size,
                        md.write_quorum, md.ack_quorum, md.created_at, md.writer.epoch, flags)]
    parts.append(_name_bytes(md.writer.node))
    for raw in (md.password_salt, md.password_hash):
        parts += (_SHORT.pack(len(raw)), raw)
    parts.append(_SHORT.pack(len(md.ensembles)))
    for fragment in md.ensembles:
        parts.append(_FRAGMENT.pack(fragment.first_entry_id, fragment.epoch))
        parts += map(_name_bytes, fragment.bookies)
    if md.closed_at is not None:
        parts.append(_FLOAT.pack(md.closed_at))
    for value in (md.last_entry_id, md.length):
        if value is not None:
            parts.append(_INT.pack(value))
    for doc in (md.metadata or None, md.offload, md.tier):
        if doc is not None:
            raw = json.dumps(dict(doc), separators=(",", ":")).encode()
            parts += (_LONG.pack(len(raw)), raw)
    return b"".join(parts)


# Packed values used lately, kept decoded: the ledgers being read or written are
# unpacked once (about 15 us), not on every call.  Bounded: a fixed cost.
RECENT_MAX = 512


@functools.lru_cache(maxsize=RECENT_MAX)
def unpack_recent(packed: bytes) -> tuple[LedgerMetadata, int]:
    """``unpack_metadata``, the same decoded value again for a value used lately."""
    return unpack_metadata(packed)


def packed_ledger_id(packed: bytes) -> int:
    ledger_id: int = _HEAD.unpack_from(packed)[1]
    return ledger_id


def packed_state(packed: bytes) -> LedgerState:
    """The ledger's state, without unpacking the rest."""
    return _STATES[_HEAD.unpack_from(packed)[2]]


def packed_notes_offload(packed: bytes) -> bool:
    """Whether the packed metadata holds an offload record or a tier position,
    from its flags alone (a sweep of every ledger asks this of each)."""
    flags: int = _HEAD.unpack_from(packed)[8]
    return bool(flags & (_OFFLOAD | _TIER))


def packed_revision(packed: bytes) -> int:
    """The revision a packed value was cached at, without unpacking the rest."""
    revision: int = _HEAD.unpack_from(packed)[0]
    return revision


def unpack_metadata(packed: bytes) -> tuple[LedgerMetadata, int]:
    (revision, ledger_id, state, e, qw, qa, created_at, writer_epoch,
     flags) = _HEAD.unpack_from(packed)
    at = _HEAD.size

    def chunk(prefix: struct.Struct = _SHORT) -> bytes:
        nonlocal at
        (size,) = prefix.unpack_from(packed, at)
        at += prefix.size
        at += size
        return packed[at - size:at]

    def number(form: struct.Struct) -> int | float:
        nonlocal at
        (value,) = form.unpack_from(packed, at)
        at += form.size
        return value  # type: ignore[no-any-return]

    def name() -> str:
        nonlocal at
        (number,) = _SHORT.unpack_from(packed, at)
        at += _SHORT.size
        return _names[number] if number != _SPELLED else sys.intern(chunk().decode())

    writer = name()
    salt, digest = chunk(), chunk()
    fragments: list[Fragment] = []
    for _ in range(int(number(_SHORT))):
        first, epoch = _FRAGMENT.unpack_from(packed, at)
        at += _FRAGMENT.size
        bookies = tuple(name() for _ in range(e))
        fragments.append(shared_fragment(first, bookies, epoch))
    closed_at = float(number(_FLOAT)) if flags & _CLOSED_AT else None
    last_entry_id = int(number(_INT)) if flags & _LAST_ENTRY else None
    length = int(number(_INT)) if flags & _LENGTH else None
    user = json.loads(chunk(_LONG)) if flags & _USER else NO_METADATA
    offload = json.loads(chunk(_LONG)) if flags & _OFFLOAD else None
    tier = json.loads(chunk(_LONG)) if flags & _TIER else None
    md = LedgerMetadata(
        ledger_id=ledger_id, state=_STATES[state], ensemble_size=e, write_quorum=qw,
        ack_quorum=qa, ensembles=shared_ensembles(tuple(fragments)),
        writer=shared_writer(writer, writer_epoch), password_salt=salt,
        password_hash=digest,
        password_scheme=PASSWORD_SCHEME_KEYED if flags & _KEYED else PASSWORD_SCHEME_SCRYPT,
        metadata=user, created_at=created_at, closed_at=closed_at,
        last_entry_id=last_entry_id, length=length, offload=offload, tier=tier)
    return md, revision
