"""Byte ranges of a scan (pure: no Spark session, no S3): how ``cut`` splits a span."""

from __future__ import annotations

import itertools

import pytest

from common.units import KiB, MiB
from offload._format import FRAME_HEADER_SIZE_BYTES, IndexBuilder, LedgerFacts, SegmentIndex
from offload.spark import Span, cut


def index_of(payload_sizes: list[int]) -> SegmentIndex:
    builder = IndexBuilder(0)
    for entry_id, size in enumerate(payload_sizes):
        builder.add(entry_id, FRAME_HEADER_SIZE_BYTES + size)
    facts = LedgerFacts(ledger_id=1, last_entry_id=len(payload_sizes) - 1,
                        length_bytes=sum(payload_sizes), created_at=0.0, closed_at=0.0)
    return builder.build(facts)


def whole(index: SegmentIndex) -> Span:
    return Span(0, index.segment_length_bytes, 0)


def check_tiles(index: SegmentIndex, span: Span, pieces: list[Span]) -> None:
    """Pieces cover the span end to end, each starting at an index point."""
    assert pieces[0].start == span.start and pieces[-1].end == span.end
    for before, after in itertools.pairwise(pieces):
        assert before.end == after.start
    points = dict(zip(index.point_offsets, index.point_entry_ids, strict=True))
    assert all(points[p.start] == p.first_entry_id for p in pieces)


# 1024 frames of 64 KiB + 16 bytes: just over 64 MiB, the bench's ledgers.
FRAMES_64K = [64 * KiB] * 1024


@pytest.mark.parametrize(("payloads", "size_bytes", "count"), [
    (FRAMES_64K, 64 * MiB, 1),  # greedy cutting gave 64 MiB plus a 16 KiB piece
    (FRAMES_64K, 32 * MiB, 2),  # greedy: 32 MiB, 32 MiB - 48 KiB and one frame
    (FRAMES_64K, 8 * MiB, 8),
    (FRAMES_64K, 48 * MiB, 1),  # 1.33 rounds to one piece
    (FRAMES_64K, 40 * MiB, 2),  # 1.6 rounds to two
    (FRAMES_64K, 1024 * MiB, 1),
    ([100] * 45_000, 1 * MiB, 5),  # 4.98 MiB of small frames, points every 16 KiB
])
def test_cut_makes_the_nearest_count_of_even_pieces(payloads, size_bytes, count):
    index = index_of(payloads)
    pieces = cut(index, whole(index), size_bytes)
    check_tiles(index, whole(index), pieces)
    assert len(pieces) == count
    mean = index.segment_length_bytes / count
    largest_frame = FRAME_HEADER_SIZE_BYTES + max(payloads)
    assert all(abs(p.size_bytes - mean) <= count * largest_frame + 16 * KiB for p in pieces)


def test_cut_keeps_a_span_with_one_large_frame_whole():
    index = index_of([5 * MiB, 100, 100])
    pieces = cut(index, whole(index), 1 * MiB)
    check_tiles(index, whole(index), pieces)
    # Points sit at the large frame and the frame after it only: two pieces at most.
    assert [p.first_entry_id for p in pieces] == [0, 1]


def test_cut_of_a_span_inside_a_segment_starts_at_its_first_frame():
    index = index_of(FRAMES_64K)
    frame = FRAME_HEADER_SIZE_BYTES + 64 * KiB
    span = Span(100 * frame, 300 * frame, 100)
    pieces = cut(index, span, 4 * MiB)
    check_tiles(index, span, pieces)
    assert len(pieces) == round(200 * frame / (4 * MiB))
