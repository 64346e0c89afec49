"""The bytes of node-to-node calls (docs/cluster.md §12.2), shared by the node's
``/internal/v1/`` routes and :class:`HttpBookieClient`.  Pure: no sockets.

A replica batch (``POST …/replica/entries/batch?epoch=&lac=``) is a body of
frames, big-endian::

    off  size  field
    0    8     entry_id       u64
    8    8     length_after   u64
    16   4     payload length u32
    20   n     payload

Headers of a replica entry read: ``X-Epoch``, ``X-Length-After``, ``X-Crc32c``
(decimal, of the payload) and ``X-Last-Add-Confirmed`` (the replica's LAC).

Re-replication moves ranges (``POST …/replica/reads`` answers them,
``POST …/replica/copies/batch`` stores them) as entry frames, which carry each
entry's epoch (entries of one range may differ) and CRC32C, big-endian::

    off  size  field
    0    8     entry_id       u64
    8    8     epoch          u64
    16   8     length_after   u64
    24   4     crc32c         u32  (of the payload)
    28   4     payload length u32
    32   n     payload

A range read answers its frames with headers ``X-Absent-Entries`` (the ids asked
for that the bookie does not hold, comma-separated) and ``X-Last-Add-Confirmed``.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from common.errors import BadRequest, invariant

from ._messages import NewEntry

INTERNAL_PREFIX = "/internal/v1"
FORWARDED_HEADER = "X-Ledgerd-Forwarded"
BATCH_MEDIA_TYPE = "application/x-ledgerd-replica-frames"

_FRAME = struct.Struct(">QQI")
FRAME_HEADER_SIZE_BYTES = _FRAME.size
invariant(_FRAME.size == 20, "replica frame header layout")


def batch_runs(sizes: Sequence[int], *, count_max: int,
               bytes_max: int) -> list[tuple[int, int]]:
    """``[start, end)`` index ranges cutting items of ``sizes`` bytes, in order, into
    calls within the batch limits: at most ``count_max`` items and ``bytes_max``
    bytes each, except that one item over ``bytes_max`` goes alone."""
    runs: list[tuple[int, int]] = []
    start, size = 0, 0
    for i, item_bytes in enumerate(sizes):
        if i > start and (i - start >= count_max or size + item_bytes > bytes_max):
            runs.append((start, i))
            start, size = i, 0
        size += item_bytes
    runs.append((start, len(sizes)))
    return runs


def encode_batch(entries: Sequence[NewEntry]) -> bytes:
    pack = _FRAME.pack
    return b"".join([part for e in entries
                     for part in (pack(e.entry_id, e.length_after, len(e.payload)), e.payload)])


def decode_batch(body: bytes, *, count_max: int) -> list[NewEntry]:
    """The entries of a batch body; ``BadRequest`` for a cut or overlong body."""
    return [NewEntry(entry_id, payload, length_after)
            for (entry_id, length_after, _size), payload
            in _split(body, _FRAME, count_max=count_max, what="replica batch")]


def _split(body: bytes, header: struct.Struct, *, count_max: int,
           what: str) -> list[tuple[tuple[int, ...], bytes]]:
    """``(header fields, payload)`` of each frame of ``body``: a header whose
    first field is the entry id and last the payload's size, then the payload;
    ``BadRequest`` for a cut or overlong body."""
    frames: list[tuple[tuple[int, ...], bytes]] = []
    view = memoryview(body)
    pos = 0
    while pos < len(body):
        if len(frames) >= count_max:
            raise BadRequest(f"a {what} holds at most {count_max} entries")
        if pos + header.size > len(body):
            raise BadRequest(f"{what} cut inside a frame header at byte {pos}")
        fields = header.unpack_from(body, pos)
        pos += header.size
        size = fields[-1]
        if pos + size > len(body):
            raise BadRequest(f"{what} cut inside the payload of entry {fields[0]}")
        frames.append((fields, bytes(view[pos:pos + size])))
        pos += size
    return frames


_ENTRY_FRAME = struct.Struct(">QQQII")
ENTRY_FRAME_HEADER_SIZE_BYTES = _ENTRY_FRAME.size
invariant(_ENTRY_FRAME.size == 32, "replica entry frame header layout")


@dataclass(frozen=True, slots=True)
class EntryFrame:
    entry_id: int
    epoch: int
    length_after: int
    crc32c: int
    payload: bytes


def encode_entry_frames(frames: Sequence[EntryFrame]) -> bytes:
    # One join: the payloads (megabytes) are copied once.
    parts: list[bytes] = []
    for f in frames:
        parts.append(_ENTRY_FRAME.pack(f.entry_id, f.epoch, f.length_after, f.crc32c,
                                       len(f.payload)))
        parts.append(f.payload)
    return b"".join(parts)


def decode_entry_frames(body: bytes, *, count_max: int) -> list[EntryFrame]:
    """The entry frames of a body; ``BadRequest`` for a cut or overlong body.  The
    CRCs are the caller's to check (it knows who to blame)."""
    return [EntryFrame(entry_id, epoch, length_after, crc, payload)
            for (entry_id, epoch, length_after, crc, _size), payload
            in _split(body, _ENTRY_FRAME, count_max=count_max, what="replica range")]


def replica_path(ledger_id: int, *rest: str | int) -> str:
    return "/".join((f"{INTERNAL_PREFIX}/ledgers/{ledger_id}/replica", *map(str, rest)))


# The cluster's password key, node to node (node/_cluster_password_key.py).
PASSWORD_KEY_PATH = f"{INTERNAL_PREFIX}/password-key"


def forward_path(ledger_id: int, *rest: str) -> str:
    return "/".join((f"{INTERNAL_PREFIX}/ledgers/{ledger_id}/forward", *rest))


def held_pairs(raw: object) -> Iterator[tuple[int, int]]:
    """(entry_id, epoch) pairs of a listing's JSON, checked."""
    if not isinstance(raw, list):
        raise ValueError("entries must be a list")
    for pair in raw:
        entry_id, epoch = pair
        if not isinstance(entry_id, int) or not isinstance(epoch, int):
            raise ValueError(f"bad listing pair {pair!r}")
        yield entry_id, epoch
