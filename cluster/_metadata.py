"""Ledger metadata as stored in etcd (``{scope}/ledgers/{id:020d}``), and its JSON codec.

Format version 1 (docs/cluster.md §3)::

    {"format_version": 1, "ledger_id": int, "state": "OPEN"|"IN_RECOVERY"|"CLOSED",
     "ensemble_size": E, "write_quorum": Qw, "ack_quorum": Qa,
     "ensembles": [[first_entry_id, [bookie_id x E], epoch], ...],
     "writer": {"node": str, "epoch": int},
     "password": {"salt": hex, "hash": hex, "scheme"?: "keyed-blake2b"},
     "metadata": {str: str},
     "created_at": float, "closed_at": float|null,
     "last_entry_id": int|null, "length": int|null, "offload": object|null,
     "tier"?: {"bookie_id": str, "position": [int x 5]}}

``tier`` is how far the ledger was tiered to S3 while open (TIER_OPEN_LEDGERS),
by which node (its chunks are under that node's key prefix): absent until the
first chunk is recorded, so older records decode as they did.

The password's ``scheme`` is absent for scrypt digests (every record written
before keyed digests, which still decode and verify as they did) and
``"keyed-blake2b"`` for digests keyed with the cluster's shared password key
(node/_cluster_password_key.py; docs/api.md, Security).

The codec is pure: bytes in, values out, every field checked on both paths.
"""

from __future__ import annotations

import enum
import functools
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from common.errors import CorruptRecord, InvariantViolation, invariant

FORMAT_VERSION = 1
# How a ledger's password digest was made (ledger.PasswordScheme's names here).
PASSWORD_SCHEME_SCRYPT = "scrypt"
PASSWORD_SCHEME_KEYED = "keyed-blake2b"
# Decoded scheme names map to these constants: every record shares one string.
_PASSWORD_SCHEMES = {s: s for s in (PASSWORD_SCHEME_SCRYPT, PASSWORD_SCHEME_KEYED)}


class LedgerState(enum.StrEnum):
    OPEN = "OPEN"
    IN_RECOVERY = "IN_RECOVERY"
    CLOSED = "CLOSED"


@dataclass(frozen=True, slots=True)
class Fragment:
    """Entries ``first_entry_id …`` (up to the next fragment) live on ``bookies``.

    ``epoch`` is the writer epoch that created the fragment: a replica of one of
    its entries counts only at that epoch or later (docs/cluster.md §6.4).
    """

    first_entry_id: int
    bookies: tuple[str, ...]
    epoch: int


@dataclass(frozen=True, slots=True)
class WriterRef:
    node: str
    epoch: int


@dataclass(frozen=True, slots=True)
class LedgerMetadata:
    ledger_id: int
    state: LedgerState
    ensemble_size: int
    write_quorum: int
    ack_quorum: int
    ensembles: tuple[Fragment, ...]
    writer: WriterRef
    # Bytes, not the record's hex: about 80 B less per cached ledger on every
    # node, and no hex decode on each password check.
    password_salt: bytes = b""
    password_hash: bytes = b""
    password_scheme: str = PASSWORD_SCHEME_SCRYPT
    metadata: Mapping[str, str] = field(default_factory=dict)
    created_at: float = 0.0
    closed_at: float | None = None
    last_entry_id: int | None = None
    length: int | None = None
    offload: Mapping[str, Any] | None = None
    tier: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        check_metadata(self)

    @property
    def epoch(self) -> int:
        return self.writer.epoch

    @property
    def last_fragment(self) -> Fragment:
        return self.ensembles[-1]

    def fragment_index(self, entry_id: int) -> int:
        """Index in ``ensembles`` of the fragment holding ``entry_id``."""
        invariant(entry_id >= 0, f"entry id {entry_id} < 0")
        index = 0
        for i, fragment in enumerate(self.ensembles):
            if fragment.first_entry_id > entry_id:
                break
            index = i
        return index

    def fragment_of(self, entry_id: int) -> Fragment:
        return self.ensembles[self.fragment_index(entry_id)]

    def fragment_end(self, index: int) -> int | None:
        """Last entry id of fragment ``index``; None for the open-ended last one."""
        if index + 1 < len(self.ensembles):
            return self.ensembles[index + 1].first_entry_id - 1
        if self.state is LedgerState.CLOSED:
            return self.last_entry_id
        return None

    def with_fragment(self, fragment: Fragment) -> LedgerMetadata:
        """Append ``fragment``, or replace the last one when it starts at the same id
        (a fragment holding no committed entry is replaced, never left empty)."""
        last = self.last_fragment
        invariant(fragment.first_entry_id >= last.first_entry_id,
                  f"ledger {self.ledger_id}: fragment at {fragment.first_entry_id} "
                  f"before the last one at {last.first_entry_id}")
        if fragment.first_entry_id == last.first_entry_id:
            return replace(self, ensembles=(*self.ensembles[:-1], fragment))
        return replace(self, ensembles=(*self.ensembles, fragment))


def check_metadata(md: LedgerMetadata) -> None:
    """The properties every metadata value has, on the write and the read path."""
    e, qw, qa = md.ensemble_size, md.write_quorum, md.ack_quorum
    invariant(e >= qw >= qa >= 1, f"ledger {md.ledger_id}: need E >= Qw >= Qa >= 1, "
              f"got {e}, {qw}, {qa}")
    invariant(len(md.ensembles) >= 1, f"ledger {md.ledger_id}: no fragment")
    previous = -1
    for fragment in md.ensembles:
        invariant(fragment.first_entry_id > previous,
                  f"ledger {md.ledger_id}: fragments not strictly increasing")
        invariant(len(fragment.bookies) == e and len(set(fragment.bookies)) == e,
                  f"ledger {md.ledger_id}: fragment {fragment.first_entry_id} needs "
                  f"{e} distinct bookies, has {list(fragment.bookies)}")
        invariant(0 <= fragment.epoch <= md.writer.epoch,
                  f"ledger {md.ledger_id}: fragment epoch {fragment.epoch} above "
                  f"the writer's {md.writer.epoch}")
        previous = fragment.first_entry_id
    invariant(md.password_scheme in _PASSWORD_SCHEMES,
              f"ledger {md.ledger_id}: unknown password scheme {md.password_scheme!r}")
    closed = md.state is LedgerState.CLOSED
    invariant(closed == (md.last_entry_id is not None) == (md.length is not None),
              f"ledger {md.ledger_id}: last_entry_id/length are set exactly when CLOSED")
    if md.last_entry_id is not None:
        invariant(md.last_entry_id >= -1 and (md.length or 0) >= 0,
                  f"ledger {md.ledger_id}: bad end {md.last_entry_id}/{md.length}")


def write_set(fragment: Fragment, entry_id: int, write_quorum: int) -> tuple[str, ...]:
    """The bookies of ``fragment`` that store ``entry_id``: positions e mod E … (e+Qw-1) mod E."""
    ensemble = fragment.bookies
    size = len(ensemble)
    return tuple(ensemble[(entry_id + i) % size] for i in range(write_quorum))


def in_write_set(position: int, entry_id: int, ensemble_size: int, write_quorum: int) -> bool:
    """Whether the bookie at ``position`` of an ensemble is in ``entry_id``'s write
    set: :func:`write_set` without building it (a writer asks for every entry of
    every answer)."""
    return (position - entry_id) % ensemble_size < write_quorum


def write_set_positions(ensemble_size: int, entry_id: int, write_quorum: int) -> range:
    """Positions (indexes into the ensemble) of ``entry_id``'s write set, before mod E."""
    start = entry_id % ensemble_size
    return range(start, start + write_quorum)


def covers(fragment: Fragment, responders: set[str], write_quorum: int, ack_quorum: int) -> bool:
    """True when ``responders`` hold at least Qw - Qa + 1 members of every write set of
    ``fragment``: then no write set has Qa bookies outside them (docs/cluster.md §4)."""
    needed = write_quorum - ack_quorum + 1
    size = len(fragment.bookies)
    for start in range(size):
        members = (fragment.bookies[(start + i) % size] for i in range(write_quorum))
        if sum(1 for b in members if b in responders) < needed:
            return False
    return True


# --- codec -----------------------------------------------------------------


def encode_metadata(md: LedgerMetadata) -> bytes:
    check_metadata(md)
    doc: dict[str, Any] = {
        "format_version": FORMAT_VERSION,
        "ledger_id": md.ledger_id,
        "state": md.state.value,
        "ensemble_size": md.ensemble_size,
        "write_quorum": md.write_quorum,
        "ack_quorum": md.ack_quorum,
        "ensembles": [[f.first_entry_id, list(f.bookies), f.epoch] for f in md.ensembles],
        "writer": {"node": md.writer.node, "epoch": md.writer.epoch},
        "password": _password_doc(md),
        "metadata": dict(md.metadata),
        "created_at": md.created_at,
        "closed_at": md.closed_at,
        "last_entry_id": md.last_entry_id,
        "length": md.length,
        "offload": None if md.offload is None else dict(md.offload),
    }
    if md.tier is not None:
        doc["tier"] = dict(md.tier)
    return json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()


def decode_metadata(raw: bytes, *, key: str = "") -> LedgerMetadata:
    """Metadata from its JSON; ``CorruptRecord`` (naming ``key``) for anything else."""
    try:
        doc = json.loads(raw)
        if not isinstance(doc, dict):
            raise TypeError("not an object")
        version = doc["format_version"]
        if version != FORMAT_VERSION:
            raise ValueError(f"unknown format_version {version!r}")
        return LedgerMetadata(
            ledger_id=_int(doc["ledger_id"]),
            state=LedgerState(doc["state"]),
            ensemble_size=_int(doc["ensemble_size"]),
            write_quorum=_int(doc["write_quorum"]),
            ack_quorum=_int(doc["ack_quorum"]),
            ensembles=shared_ensembles(tuple(_fragment(f) for f in doc["ensembles"])),
            writer=shared_writer(sys.intern(str(doc["writer"]["node"])),
                           _int(doc["writer"]["epoch"])),
            password_salt=bytes.fromhex(str(doc["password"]["salt"])),
            password_hash=bytes.fromhex(str(doc["password"]["hash"])),
            password_scheme=_password_scheme(doc["password"]),
            metadata={str(k): str(v) for k, v in dict(doc["metadata"]).items()}
            or NO_METADATA,
            created_at=float(doc["created_at"]),
            closed_at=None if doc["closed_at"] is None else float(doc["closed_at"]),
            last_entry_id=None if doc["last_entry_id"] is None else _int(doc["last_entry_id"]),
            length=None if doc["length"] is None else _int(doc["length"]),
            offload=None if doc["offload"] is None else dict(doc["offload"]),
            tier=_tier(doc.get("tier")),
        )
    except (ValueError, TypeError, KeyError, InvariantViolation) as exc:
        raise CorruptRecord(key or "ledger metadata", 0, f"bad ledger metadata: {exc}") from exc


def _password_doc(md: LedgerMetadata) -> dict[str, str]:
    doc = {"salt": md.password_salt.hex(), "hash": md.password_hash.hex()}
    if md.password_scheme != PASSWORD_SCHEME_SCRYPT:
        # Absent means scrypt: a scrypt ledger's record stays what older releases read.
        doc["scheme"] = md.password_scheme
    return doc


def _password_scheme(doc: Mapping[str, Any]) -> str:
    name = doc.get("scheme", PASSWORD_SCHEME_SCRYPT)
    scheme = _PASSWORD_SCHEMES.get(name) if isinstance(name, str) else None
    if scheme is None:
        raise ValueError(f"unknown password scheme {name!r}")
    return scheme


def _tier(raw: object) -> dict[str, Any] | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise TypeError(f"tier: expected an object, got {raw!r}")
    position = [_int(v) for v in raw["position"]]
    if len(position) != 5 or min(position) < 0:
        raise ValueError(f"tier: bad position {position!r}")
    return {"bookie_id": sys.intern(str(raw["bookie_id"])), "position": position}


def _int(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected an integer, got {value!r}")
    return value


def _fragment(raw: Sequence[Any]) -> Fragment:
    first, bookies, epoch = raw
    return shared_fragment(_int(first), tuple(sys.intern(str(b)) for b in bookies),
                            _int(epoch))


# A node keeps every ledger's metadata (node/_cluster_metadata.py), and most
# ledgers share their ensembles, epochs and writers: decoded values are shared
# rather than copied per ledger (they are frozen).  Bounded caches, so that
# values seen once do not stay.
_SHARED = 4096
NO_METADATA: Mapping[str, str] = MappingProxyType({})


def with_shared_parts(md: LedgerMetadata) -> LedgerMetadata:
    """``md`` with the fragments, writer and empty user metadata that decoded values
    share (a ledger this node makes itself is cached as made: node/_cluster_metadata.py)."""
    fragments = tuple(shared_fragment(f.first_entry_id, tuple(sys.intern(b) for b in f.bookies),
                                       f.epoch) for f in md.ensembles)
    return replace(md, ensembles=shared_ensembles(fragments),
                   writer=shared_writer(sys.intern(md.writer.node), md.writer.epoch),
                   metadata=md.metadata or NO_METADATA)


@functools.lru_cache(maxsize=_SHARED)
def shared_fragment(first: int, bookies: tuple[str, ...], epoch: int) -> Fragment:
    return Fragment(first, bookies, epoch)


@functools.lru_cache(maxsize=_SHARED)
def shared_ensembles(fragments: tuple[Fragment, ...]) -> tuple[Fragment, ...]:
    return fragments


@functools.lru_cache(maxsize=_SHARED)
def shared_writer(node: str, epoch: int) -> WriterRef:
    return WriterRef(node, epoch)
