"""Object keys (pure): building them and parsing listed keys back.

Layout (DESIGN.md §6)::

    {prefix}/{cluster}/{bookie_id}/ledgers/{ledger_id}/seg-{first_entry_id}/chunk-{byte_position}
    {prefix}/{cluster}/{bookie_id}/ledgers/{ledger_id}/seg-{first_entry_id}/segment
    {prefix}/{cluster}/{bookie_id}/ledgers/{ledger_id}/seg-{first_entry_id}/index
    {prefix}/{cluster}/{bookie_id}/packs/{pack_id}/data
    {prefix}/{cluster}/{bookie_id}/packs/{pack_id}/index

A pack (:mod:`offload._pack_format`) holds many small ledgers; its id is
``{epoch_ms}-{12 random hex digits}``: a pack run never reuses the key of
another (an earlier one that crashed, say), and of two packs of one bookie
the newer has the larger number.

Numbers are decimal without padding, so listings are not in numeric order:
callers sort what :func:`parse_key` returns.  The components come from
:class:`~offload.settings.OffloadSettings`, whose ``check()`` admits only
``[A-Za-z0-9._-]`` words.
"""

from __future__ import annotations

import enum
import re
from typing import NamedTuple

from common.errors import invariant

from .settings import OffloadSettings

U64_MAX = 0xFFFF_FFFF_FFFF_FFFF


class ObjectKind(enum.StrEnum):
    CHUNK = "chunk"
    SEGMENT = "segment"
    INDEX = "index"


class ParsedKey(NamedTuple):
    ledger_id: int
    first_entry_id: int
    kind: ObjectKind
    # Byte position of a chunk within its segment; 0 for segment and index.
    byte_position: int


_TAIL = re.compile(
    r"(?P<ledger>0|[1-9][0-9]{0,19})/seg-(?P<first>0|[1-9][0-9]{0,19})/"
    r"(?:chunk-(?P<pos>0|[1-9][0-9]{0,19})|(?P<name>segment|index))"
)


PACK_ID = re.compile(r"[0-9]{1,20}-[0-9a-f]{12}")
# Any bookie's pack object, after ``{prefix}/{cluster}/``: in cluster mode a
# node reads, rewrites, resolves and sweeps packs another node wrote.
_ANY_PACK = re.compile(r"(?P<bookie>[A-Za-z0-9._-]+)/packs/"
                       r"(?P<pack>[0-9]{1,20}-[0-9a-f]{12})/(?P<name>data|index)")
_BOOKIE = re.compile(r"[A-Za-z0-9._-]+")


class KeyLayout:
    """Builds the keys of one bookie's offloaded ledgers under one prefix."""

    def __init__(self, settings: OffloadSettings) -> None:
        # check() validated the components; keys are built from nothing else.
        settings.check()
        self.bookie_prefix = f"{settings.prefix}/{settings.cluster}/{settings.bookie_id}/ledgers/"
        self.pack_prefix = f"{settings.prefix}/{settings.cluster}/{settings.bookie_id}/packs/"
        self._cluster_prefix = f"{settings.prefix}/{settings.cluster}/"

    def pack_data_key(self, pack_id: str) -> str:
        invariant(PACK_ID.fullmatch(pack_id) is not None, f"bad pack id {pack_id!r}")
        return f"{self.pack_prefix}{pack_id}/data"

    def packs_prefix(self, bookie_id: str | None = None) -> str:
        """Where the packs of ``bookie_id`` (default: this bookie) are."""
        if bookie_id is None:
            return self.pack_prefix
        invariant(_BOOKIE.fullmatch(bookie_id) is not None, f"bad bookie id {bookie_id!r}")
        return f"{self._cluster_prefix}{bookie_id}/packs/"

    def pack_data_key_of(self, key: str) -> str | None:
        """The data key of the pack a key (its data or index) belongs to, of any
        bookie of this cluster; None for any other key."""
        tail = key[len(self._cluster_prefix):] if key.startswith(self._cluster_prefix) else ""
        match = _ANY_PACK.fullmatch(tail)
        if match is None:
            return None
        return f"{self._cluster_prefix}{match['bookie']}/packs/{match['pack']}/data"

    def pack_of(self, data_key: str) -> tuple[str, str]:
        """``(directory, pack_id)`` of a pack data key of any bookie of this cluster
        (the directory ends with ``/``; the index is ``{directory}index``)."""
        invariant(self.pack_data_key_of(data_key) == data_key,
                  f"{data_key!r} is not a pack data key of this cluster")
        directory = data_key.removesuffix("data")
        return directory, directory.rsplit("/", 2)[-2]

    def sibling_pack_data_key(self, data_key: str, pack_id: str) -> str:
        """The data key of pack ``pack_id`` beside ``data_key`` (same bookie)."""
        invariant(PACK_ID.fullmatch(pack_id) is not None, f"bad pack id {pack_id!r}")
        directory = self.pack_of(data_key)[0]
        return f"{directory.rsplit('/', 2)[0]}/{pack_id}/data"

    def ledger_prefix(self, ledger_id: int) -> str:
        invariant(0 <= ledger_id <= U64_MAX, f"ledger_id {ledger_id} out of range")
        return f"{self.bookie_prefix}{ledger_id}/"

    def segment_prefix(self, ledger_id: int, first_entry_id: int) -> str:
        invariant(0 <= first_entry_id <= U64_MAX, f"first_entry_id {first_entry_id} out of range")
        return f"{self.ledger_prefix(ledger_id)}seg-{first_entry_id}/"

    def chunk_key(self, ledger_id: int, first_entry_id: int, byte_position: int) -> str:
        invariant(0 <= byte_position <= U64_MAX, f"byte_position {byte_position} out of range")
        return f"{self.segment_prefix(ledger_id, first_entry_id)}chunk-{byte_position}"

    def segment_key(self, ledger_id: int, first_entry_id: int) -> str:
        return f"{self.segment_prefix(ledger_id, first_entry_id)}segment"

    def index_key(self, ledger_id: int, first_entry_id: int) -> str:
        return f"{self.segment_prefix(ledger_id, first_entry_id)}index"

    def parse(self, key: str) -> ParsedKey | None:
        """The parts of one of our keys, or None for a key that is not ours."""
        if not key.startswith(self.bookie_prefix):
            return None
        return parse_tail(key[len(self.bookie_prefix):])

    def parse_ledger_prefix(self, prefix: str) -> int | None:
        """The ledger id of a ``{ledger_id}/`` common prefix, or None."""
        if not prefix.startswith(self.bookie_prefix):
            return None
        tail = prefix[len(self.bookie_prefix):]
        if re.fullmatch(r"(0|[1-9][0-9]{0,19})/", tail) is None:
            return None
        value = int(tail[:-1])
        return value if value <= U64_MAX else None


def parse_tail(tail: str) -> ParsedKey | None:
    """Parse ``{ledger_id}/seg-{first}/{chunk-N|segment|index}``."""
    match = _TAIL.fullmatch(tail)
    if match is None:
        return None
    ledger_id, first = int(match["ledger"]), int(match["first"])
    position = int(match["pos"]) if match["pos"] is not None else 0
    if max(ledger_id, first, position) > U64_MAX:
        return None
    kind = ObjectKind.CHUNK if match["pos"] is not None else ObjectKind(match["name"])
    return ParsedKey(ledger_id, first, kind, position)
