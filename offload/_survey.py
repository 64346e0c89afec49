"""What a ledger's prefix holds, parsed from a listing (pure).

The offloader decides what to keep from this and the persisted upload
(DESIGN.md §6 restart rules): a segment with ``segment`` and ``index`` is
done, a ``segment`` without ``index`` is verified and kept or replaced,
chunks (the chunk layout) are deleted, and so are keys it does not plan to
keep.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from ._keys import KeyLayout, ObjectKind
from ._store import ObjectInfo


@dataclass
class SegmentObjects:
    first_entry_id: int
    chunks: dict[int, ObjectInfo] = field(default_factory=dict)
    segment: ObjectInfo | None = None
    index: ObjectInfo | None = None

    @property
    def complete(self) -> bool:
        return self.segment is not None and self.index is not None

    def object_keys(self) -> list[str]:
        found = [*self.chunks.values(), self.segment, self.index]
        return [info.key for info in found if info is not None]

    def chunk_keys(self) -> list[str]:
        return [self.chunks[position].key for position in sorted(self.chunks)]


@dataclass
class LedgerObjects:
    segments: dict[int, SegmentObjects] = field(default_factory=dict)
    # Keys under the ledger's prefix that are not ours (left alone by offload,
    # removed only when the ledger's objects are deleted).
    foreign_keys: list[str] = field(default_factory=list)

    def chunk_keys(self) -> list[str]:
        return [key for first in sorted(self.segments)
                for key in self.segments[first].chunk_keys()]


def survey(layout: KeyLayout, ledger_id: int, listing: Iterable[ObjectInfo]) -> LedgerObjects:
    found = LedgerObjects()
    for info in listing:
        parsed = layout.parse(info.key)
        if parsed is None or parsed.ledger_id != ledger_id:
            found.foreign_keys.append(info.key)
            continue
        segment = found.segments.setdefault(parsed.first_entry_id,
                                            SegmentObjects(parsed.first_entry_id))
        if parsed.kind is ObjectKind.CHUNK:
            segment.chunks[parsed.byte_position] = info
        elif parsed.kind is ObjectKind.SEGMENT:
            segment.segment = info
        else:
            segment.index = info
    return found
