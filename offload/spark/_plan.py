"""From pushed filters and segment indexes to byte ranges (pure: no Spark session, no S3).

A *scan* is planned in two steps:

1. :func:`bounds_from_filters` turns the filters Spark offers on ``ledger_id``
   and ``entry_id`` into :class:`Bounds` (an inclusive interval plus an
   optional set of values per column) and hands back the filters it cannot
   honour exactly, which Spark then evaluates itself.
2. :func:`plan_segment` narrows one segment to the frames the entry bounds
   can match, using the index points (frame starts), and cuts that byte range
   into partitions of about ``partition_size_bytes`` and each partition into
   ranged GETs of about ``read_size_bytes``, always at frame starts.

Every range starts at a frame whose entry id is known from the index, and
ends where the next frame starts (or at the segment's end), so the executor
can decode it with :func:`offload._format.iter_frames` without guessing.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import (
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    LessThan,
    LessThanOrEqual,
)

from .._format import SegmentIndex
from ._options import U64_MAX

COLUMNS = ("ledger_id", "entry_id")


@dataclass(frozen=True)
class ColumnBounds:
    """Values a column may take: ``lo <= v <= hi`` and, if set, ``v in values``."""

    lo: int = 0
    hi: int = U64_MAX
    values: frozenset[int] | None = None

    def admits(self, value: int) -> bool:
        return self.lo <= value <= self.hi and (self.values is None or value in self.values)

    @property
    def empty(self) -> bool:
        return self.lo > self.hi or (self.values is not None
                                     and not any(self.lo <= v <= self.hi for v in self.values))

    def narrowed(self, lo: int = 0, hi: int = U64_MAX,
                 values: frozenset[int] | None = None) -> ColumnBounds:
        merged = values if self.values is None else (
            self.values if values is None else self.values & values)
        return ColumnBounds(max(self.lo, lo), min(self.hi, hi), merged)

    @property
    def span(self) -> tuple[int, int]:
        """The tightest interval: the set's extremes when there is a set."""
        if self.values:
            return max(self.lo, min(self.values)), min(self.hi, max(self.values))
        return self.lo, self.hi


@dataclass(frozen=True)
class Bounds:
    ledger_id: ColumnBounds = ColumnBounds()
    entry_id: ColumnBounds = ColumnBounds()


UNBOUNDED = Bounds()


def _int_value(value: Any) -> int | None:
    # bool is an int subclass, and Spark passes floats for `entry_id > 1.5`;
    # neither is honoured exactly here, so both go back to Spark.
    return value if type(value) is int else None


def _narrow(bounds: ColumnBounds, condition: Filter) -> ColumnBounds | None:
    """``bounds`` narrowed by one filter, or None when it cannot be honoured exactly."""
    if isinstance(condition, IsNotNull):
        return bounds  # our columns are never null
    if isinstance(condition, In):
        values = [_int_value(v) for v in condition.value]
        if any(v is None for v in values):
            return None
        return bounds.narrowed(values=frozenset(v for v in values if v is not None))
    value = _int_value(getattr(condition, "value", None))
    if value is None:
        return None
    if isinstance(condition, EqualTo):
        return bounds.narrowed(values=frozenset({value}))
    if isinstance(condition, GreaterThan):
        return bounds.narrowed(lo=value + 1)
    if isinstance(condition, GreaterThanOrEqual):
        return bounds.narrowed(lo=value)
    if isinstance(condition, LessThan):
        return bounds.narrowed(hi=value - 1)
    if isinstance(condition, LessThanOrEqual):
        return bounds.narrowed(hi=value)
    return None


def bounds_from_filters(filters: list[Filter]) -> tuple[Bounds, list[Filter]]:
    """``(bounds, unsupported)``: the AND of the filters we honour, and the rest."""
    columns = {name: ColumnBounds() for name in COLUMNS}
    unsupported: list[Filter] = []
    for condition in filters:
        attribute = getattr(condition, "attribute", None)
        name = str(attribute[0]) if isinstance(attribute, tuple) and len(attribute) == 1 else ""
        narrowed = _narrow(columns[name], condition) if name in columns else None
        if narrowed is None:
            unsupported.append(condition)
        else:
            columns[name] = narrowed
    return Bounds(columns["ledger_id"], columns["entry_id"]), unsupported


# --- byte ranges ----------------------------------------------------------------


@dataclass(frozen=True)
class Span:
    """Bytes ``[start, end)`` of a segment object; the frame at ``start`` holds
    entry ``first_entry_id``."""

    start: int
    end: int
    first_entry_id: int

    @property
    def size_bytes(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class PlannedRange:
    """One Spark partition: consecutive frames of one segment, read by ``reads``."""

    ledger_id: int
    segment_key: str
    reads: tuple[Span, ...]
    entry_id: ColumnBounds
    # ``(byte_position, key)`` of the chunks holding the segment's bytes, when
    # it is read from chunks (tiered while open); empty: from ``segment_key``.
    chunks: tuple[tuple[int, str], ...] = ()
    # Where the segment starts in ``segment_key`` (a packed ledger's offset in
    # its pack); spans are relative to it.
    base: int = 0
    # A packed ledger's: ranges of one pack may share a partition (grouped()).
    packed: bool = False

    @property
    def start(self) -> int:
        return self.reads[0].start

    @property
    def end(self) -> int:
        return self.reads[-1].end

    @property
    def size_bytes(self) -> int:
        return self.end - self.start


def narrowed_span(index: SegmentIndex, entry_id: ColumnBounds) -> Span | None:
    """The frames of the segment that ``entry_id`` may match, or None if none can."""
    lo, hi = entry_id.span
    first = max(lo, index.first_entry_id)
    last = min(hi, index.end_entry_id - 1)
    if first > last or entry_id.empty:
        return None
    start, _, start_entry = index.span_of(first)
    _, end, _ = index.span_of(last)
    return Span(start, end, start_entry)


def cut(index: SegmentIndex, span: Span, size_bytes: int) -> list[Span]:
    """``span`` cut into the whole number of pieces closest to ``size / size_bytes``
    (at least one), of about equal size, so every piece starts at a known frame.

    Each cut is the first index point at or after ``start + k * size / pieces``:
    pieces differ from the mean by at most a point stride (or one large frame).
    Cutting greedily at ``size_bytes`` instead left a remainder piece, often of
    a single frame, and each such piece costs a whole Spark task (~0.1 s of
    CPU on the Python worker and the JVM) or a whole ranged GET."""
    pieces_count = max(1, round(span.size_bytes / size_bytes))
    offsets, ids = index.point_offsets, index.point_entry_ids
    pieces: list[Span] = []
    start, first = span.start, span.first_entry_id
    for k in range(1, pieces_count):
        target = span.start + span.size_bytes * k // pieces_count
        i = bisect.bisect_left(offsets, max(target, start + 1))
        if i == len(offsets) or offsets[i] >= span.end:
            break  # no frame starts in the rest of the span: it stays whole
        pieces.append(Span(start, offsets[i], first))
        start, first = offsets[i], ids[i]
    pieces.append(Span(start, span.end, first))
    return pieces


def plan_segment(ledger_id: int, segment_key: str, index: SegmentIndex, bounds: Bounds, *,
                 partition_size_bytes: int, read_size_bytes: int,
                 chunks: tuple[tuple[int, str], ...] = (), base: int = 0,
                 packed: bool = False) -> list[PlannedRange]:
    """The partitions reading what ``bounds`` may match of one segment."""
    if index.entry_count == 0 or not bounds.ledger_id.admits(ledger_id):
        return []
    span = narrowed_span(index, bounds.entry_id)
    if span is None:
        return []
    return [PlannedRange(ledger_id, segment_key, tuple(cut(index, part, read_size_bytes)),
                         bounds.entry_id, chunks, base, packed)
            for part in cut(index, span, partition_size_bytes)]


def grouped(planned: list[PlannedRange], partition_size_bytes: int) -> list[list[PlannedRange]]:
    """Planned ranges in Spark partitions: ranges of one object that follow each
    other (packed ledgers, one pack) share a partition up to about
    ``partition_size_bytes``, read with one ranged GET: a million 1 KiB
    ledgers are then tens of tasks and GETs, not a million."""
    groups: list[list[PlannedRange]] = []
    for part in planned:
        last = groups[-1][-1] if groups else None
        if (last is not None and part.packed and last.packed
                and last.segment_key == part.segment_key
                and last.base + last.end <= part.base + part.start
                and part.base + part.end - (groups[-1][0].base + groups[-1][0].start)
                <= partition_size_bytes):
            groups[-1].append(part)
        else:
            groups.append([part])
    return groups
