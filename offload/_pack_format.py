"""Pure codec of packs: many small sealed ledgers in one shared object.

A pack is two objects (keys in :mod:`offload._keys`): ``data``, the members
one after another, and ``index``, written after ``data`` is complete.

Member in ``data`` (at ``offset``): the ledger's segment frames (exactly the
bytes a ``segment`` object of its own would hold, ``segment_length`` long),
then its segment index (exactly an ``index`` object's bytes,
``index_length`` long).  A ledger's index sits next to its frames, so a cold
read of a packed ledger is one ranged GET of ``data``.

Pack index object::

    offset    size  field          notes
    0         4     magic          b"LDPK"
    4         4     version        u32, PACK_FORMAT_VERSION
    8         8     data_length    u64, bytes of the ``data`` object
    16        4     member_count   u32, n
    20        28*n  members        ledger_id u64, offset u64, segment_length u64,
                                   index_length u32; offsets strictly ascending,
                                   members contiguous from 0 to data_length
    20+28n    ...   member indexes the n members' index bytes again, in order
                                   (Spark plans a scan from this object alone)
    end-4     4     pack_crc32c    u32, CRC32C of every byte before it

Integers are big-endian, CRCs CRC32C, as in :mod:`offload._format`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from common.errors import CorruptRecord, invariant

from ._format import U32_MAX, U64_MAX, SegmentIndex, crc32c, decode_index

PACK_MAGIC = b"LDPK"
PACK_FORMAT_VERSION = 1
_HEAD = struct.Struct(">4sIQI")
PACK_HEAD_SIZE_BYTES = 20
invariant(_HEAD.size == PACK_HEAD_SIZE_BYTES, "pack index head must be 20 bytes")
_MEMBER = struct.Struct(">QQQI")
PACK_MEMBER_SIZE_BYTES = 28
invariant(_MEMBER.size == PACK_MEMBER_SIZE_BYTES, "pack member must be 28 bytes")
_CRC = struct.Struct(">I")


@dataclass(frozen=True, kw_only=True)
class PackMember:
    ledger_id: int
    offset: int
    segment_length_bytes: int
    index_length_bytes: int

    @property
    def length_bytes(self) -> int:
        return self.segment_length_bytes + self.index_length_bytes

    @property
    def end(self) -> int:
        return self.offset + self.length_bytes

    @property
    def index_offset(self) -> int:
        return self.offset + self.segment_length_bytes


@dataclass(frozen=True)
class PackIndex:
    data_length_bytes: int
    members: tuple[PackMember, ...]
    # Each member's segment index, as in ``data`` (same order as ``members``).
    member_indexes: tuple[bytes, ...]

    def segment_index(self, position: int, *, key: str) -> SegmentIndex:
        return decode_index(self.member_indexes[position], key=key)


def encode_pack_index(pack: PackIndex) -> bytes:
    _check_pack(pack, "encode_pack_index")
    head = _HEAD.pack(PACK_MAGIC, PACK_FORMAT_VERSION, pack.data_length_bytes,
                      len(pack.members))
    members = b"".join(_MEMBER.pack(m.ledger_id, m.offset, m.segment_length_bytes,
                                    m.index_length_bytes) for m in pack.members)
    body = b"".join((head, members, *pack.member_indexes))
    return body + _CRC.pack(crc32c(body))


def decode_pack_index(data: bytes, *, key: str) -> PackIndex:
    """Parse a whole pack index object; :class:`CorruptRecord` naming ``key`` if bad."""
    if len(data) < PACK_HEAD_SIZE_BYTES + _CRC.size:
        raise CorruptRecord(key, 0, f"pack index truncated: {len(data)} bytes")
    magic, version, data_length, count = _HEAD.unpack_from(data)
    if magic != PACK_MAGIC:
        raise CorruptRecord(key, 0, f"bad pack index magic {magic!r}")
    table_end = PACK_HEAD_SIZE_BYTES + PACK_MEMBER_SIZE_BYTES * count
    if len(data) < table_end + _CRC.size:
        raise CorruptRecord(key, 0, f"pack index of {count} members truncated")
    if _CRC.unpack_from(data, len(data) - _CRC.size)[0] != crc32c(
            memoryview(data)[:len(data) - _CRC.size]):
        raise CorruptRecord(key, 0, "pack index crc32c mismatch")
    if version != PACK_FORMAT_VERSION:
        raise CorruptRecord(key, 0, f"unsupported pack index version {version}")
    members = tuple(PackMember(ledger_id=lid, offset=offset, segment_length_bytes=seg,
                               index_length_bytes=idx)
                    for lid, offset, seg, idx in _MEMBER.iter_unpack(
                        data[PACK_HEAD_SIZE_BYTES:table_end]))
    indexes: list[bytes] = []
    at = table_end
    for member in members:
        indexes.append(data[at:at + member.index_length_bytes])
        at += member.index_length_bytes
    if at != len(data) - _CRC.size:
        raise CorruptRecord(key, 0, f"pack index needs {at + _CRC.size} bytes, "
                                    f"got {len(data)}")
    pack = PackIndex(data_length, members, tuple(indexes))
    # The CRC holds, so contradicting fields were written that way: a bug.
    _check_pack(pack, f"decode_pack_index({key})")
    return pack


def _check_pack(pack: PackIndex, where: str) -> None:
    invariant(0 <= pack.data_length_bytes <= U64_MAX, f"{where}: data length out of range")
    invariant(len(pack.members) == len(pack.member_indexes) and len(pack.members) <= U32_MAX,
              f"{where}: member table and member indexes differ")
    at = 0
    for member, index in zip(pack.members, pack.member_indexes, strict=True):
        invariant(member.offset == at, f"{where}: member of ledger {member.ledger_id} at "
                                       f"{member.offset}, expected {at}")
        invariant(member.index_length_bytes == len(index) and len(index) <= U32_MAX,
                  f"{where}: index length of ledger {member.ledger_id}")
        at = member.end
    invariant(at == pack.data_length_bytes, f"{where}: members end at {at}, data is "
                                            f"{pack.data_length_bytes} bytes")
