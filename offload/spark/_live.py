"""Live ledgers through the nodes: planning entry ranges into partitions, and reading them.

Shared by the batch reader (``spark.read.format("ledgerd").option("url", …)``,
:class:`LiveReader`) and the stream reader (``_stream``).  A ledger's entries
``first..last`` are planned as:

1. from S3, when the ``bucket`` option is given and the node's local copy of
   them is gone (``local_deleted``, or below ``local_first_entry_id``): the
   S3 source's own byte ranges (``plan_segment``) over the segments S3 holds,
   read by :func:`read_range`;
2. the rest from the nodes' frames API, cut into ranges of about
   ``partition_size`` bytes (from the ledger's mean entry size), and in a
   cluster also at fragment boundaries, each range preferring a bookie of its
   fragment's write set (rotated from range to range so the load spreads),
   then any node.

Both read paths check every entry id and CRC32C before a row exists, and give
the same rows (``ledger_id, entry_id, payload, crc32c``): entries are
immutable once acknowledged, so a range read twice (a retried task, a
replayed micro-batch) gives the same rows.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from common.errors import InvalidSetting, NoSuchLedger

from ._catalog import survey_offloaded
from ._client import store_for
from ._live_options import LiveOptions
from ._node import LedgerView, NodeClient, client_for
from ._options import LedgerSelection
from ._plan import Bounds, ColumnBounds, PlannedRange, plan_segment
from ._read import _BatchBuilder, read_range

log = logging.getLogger("ledgerd.offload.spark")


@dataclass(frozen=True)
class LiveRange:
    """Entries ``first_entry_id..last_entry_id`` of one ledger, read from the nodes."""

    ledger_id: int
    first_entry_id: int
    last_entry_id: int
    prefer: tuple[str, ...] = ()  # node URLs to ask first (the fragment's bookies)

    @property
    def entry_count(self) -> int:
        return self.last_entry_id - self.first_entry_id + 1


Planned = LiveRange | PlannedRange


class LivePartition(InputPartition):
    """One Spark partition of a live read: a node range or an S3 byte range."""

    def __init__(self, planned: Planned) -> None:
        super().__init__(planned)
        self.planned = planned


@dataclass(frozen=True)
class Wanted:
    """Entries ``first..last`` of a ledger that a read plans."""

    view: LedgerView
    first_entry_id: int
    last_entry_id: int


def plan(options: LiveOptions, client: NodeClient, wanted: Iterable[Wanted]) -> list[Planned]:
    """Partitions reading every wanted range, S3 first where the node dropped it."""
    wanted = [w for w in wanted if w.first_entry_id <= w.last_entry_id]
    from_s3, s3_end = _plan_s3(options, wanted)
    planned: list[Planned] = list(from_s3)
    for w in wanted:
        first = max(w.first_entry_id, s3_end.get(w.view.ledger_id, 0))
        planned += _plan_nodes(options, client, w.view, first, w.last_entry_id)
    return planned


def _plan_s3(options: LiveOptions,
             wanted: list[Wanted]) -> tuple[list[PlannedRange], dict[int, int]]:
    """The S3 partitions, and per ledger the first entry id left to the nodes."""
    in_s3 = {w.view.ledger_id: w for w in wanted
             if options.s3 is not None and w.first_entry_id < w.view.s3_end_entry_id}
    if options.s3 is None or not in_s3:
        return [], {}
    s3 = replace(options.s3, ledgers=LedgerSelection(tuple((i, i) for i in sorted(in_s3))))
    store = store_for(s3.connection)
    ledgers, _ = survey_offloaded(store, s3, require_named=False)
    planned: list[PlannedRange] = []
    ends: dict[int, int] = {}
    for ledger in ledgers:
        w = in_s3[ledger.ledger_id]
        # As far as S3 holds it with no gap from entry 0, and no further than the
        # node dropped it (what S3 holds beyond that, the node serves too).
        covered = 0
        for segment in ledger.segments:
            covered = segment.index.end_entry_id
        last = min(w.last_entry_id, w.view.s3_end_entry_id - 1, covered - 1)
        if last < w.first_entry_id:
            continue
        bounds = Bounds(entry_id=ColumnBounds(lo=w.first_entry_id, hi=last))
        for segment in ledger.segments:
            planned += plan_segment(ledger.ledger_id, segment.key, segment.index, bounds,
                                    partition_size_bytes=options.partition_size_bytes,
                                    read_size_bytes=s3.read_size_bytes, chunks=segment.chunks,
                                    base=segment.base, packed=segment.packed)
        ends[ledger.ledger_id] = last + 1
    return planned, ends


def _plan_nodes(options: LiveOptions, client: NodeClient, view: LedgerView, first: int,
                last: int) -> list[LiveRange]:
    if first > last:
        return []
    per_range = max(1, options.partition_size_bytes // view.entry_bytes_mean)
    fragments = client.fragments(view.ledger_id)
    # Cut points: every ``per_range`` entries, and (cluster) every fragment start.
    starts = [f.first_entry_id for f in fragments or () if first < f.first_entry_id <= last]
    ranges: list[LiveRange] = []
    for lo, hi in _pieces(first, last, starts):
        at = lo
        while at <= hi:
            end = min(hi, at + per_range - 1)
            prefer: tuple[str, ...] = ()
            if fragments:
                fragment = max((f for f in fragments if f.first_entry_id <= at),
                               key=lambda f: f.first_entry_id, default=fragments[0])
                urls = fragment.urls
                if urls:
                    k = len(ranges) % len(urls)
                    prefer = (*urls[k:], *urls[:k])
            ranges.append(LiveRange(view.ledger_id, at, end, prefer))
            at = end + 1
    return ranges


def _pieces(first: int, last: int, starts: list[int]) -> Iterator[tuple[int, int]]:
    lo = first
    for start in sorted(set(starts)):
        yield lo, start - 1
        lo = start
    yield lo, last


def read_planned(options: LiveOptions, planned: Planned) -> Iterator[pa.RecordBatch]:
    if isinstance(planned, PlannedRange):
        assert options.s3 is not None  # planned from S3 only with a bucket
        return read_range(store_for(options.s3.connection), planned)
    return read_live(options, planned)


def read_live(options: LiveOptions, planned: LiveRange) -> Iterator[pa.RecordBatch]:
    """The rows of one node range as Arrow batches.  A ledger deleted meanwhile
    ends the range early with a warning (its entries are gone everywhere)."""
    client = client_for(options.urls)
    builder = _BatchBuilder(planned.ledger_id)
    try:
        for entry_id, payload, crc in client.frames(
                planned.ledger_id, planned.first_entry_id, planned.last_entry_id,
                password=options.password_of(planned.ledger_id), prefer=planned.prefer):
            builder.add(entry_id, payload, crc)
            if builder.full:
                yield builder.take()
    except NoSuchLedger:
        log.warning("ledger deleted while it was read: its rows end here", extra={
            "ledger_id": planned.ledger_id, "first_entry_id": planned.first_entry_id,
            "last_entry_id": planned.last_entry_id})
    if builder.entry_ids:
        yield builder.take()


def selected_ledgers(options: LiveOptions, client: NodeClient, *,
                     after: int | None = None) -> Iterator[LedgerView]:
    """Ledgers the options select with an id above ``after``, in id order: one GET
    each when ``ledgers`` names ids only, else the listing (filtered by metadata)."""
    named = options.ledgers
    if (named is not None and not options.metadata
            and sum(hi - lo + 1 for lo, hi in named.ranges) <= 64):
        for lo, hi in named.ranges:
            for ledger_id in range(max(lo, (after or -1) + 1), hi + 1):
                view = client.ledger(ledger_id)
                if view is not None:
                    yield view
        return
    if named is not None and named.ranges:
        after = max(after if after is not None else -1, named.ranges[0][0] - 1)
    for view in client.list_ledgers(after=None if after is None or after < 0 else after,
                                    metadata=options.metadata):
        if named is not None and view.ledger_id > named.ranges[-1][1]:
            return
        if options.selects(view.ledger_id, dict(view.metadata)):
            yield view


class LiveReader(DataSourceReader):
    """``spark.read.format("ledgerd").option("url", …)``: every selected ledger up to
    its last-add-confirmed as of planning.  Filters all go back to Spark (the plan
    never depends on a query, so Spark's replay of pushed plans cannot bite)."""

    def __init__(self, options: LiveOptions) -> None:
        self._options = options

    def partitions(self) -> Sequence[InputPartition]:
        options = self._options
        client = client_for(options.urls)
        views = list(selected_ledgers(options, client))
        if options.ledgers is not None and not options.metadata:
            present = {v.ledger_id for v in views}
            missing = [lo for lo, hi in options.ledgers.ranges if lo == hi and lo not in present]
            if missing:
                raise InvalidSetting(f"option ledgers names ledger(s) {missing} that no node "
                                     f"at {', '.join(options.urls)} knows")
        planned = plan(options, client, (Wanted(v, 0, v.last_add_confirmed) for v in views))
        log.info("live scan planned", extra={"ledgers": len(views), "partitions": len(planned)})
        return [LivePartition(p) for p in planned]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, LivePartition):
            return iter(())  # Spark substitutes InputPartition(None) when we planned nothing
        return read_planned(self._options, partition.planned)
