"""``spark.readStream.format("ledgerd")``: new entries of live ledgers as rows.

Offset (JSON, in Spark's checkpoint)::

    {"after": A,                        # every ledger id <= A that was ever selected
                                        # is in "next" or has ended
     "next": {"7": 120, ...},           # per ledger being followed: next entry id
     "ended": {"5": {"next": 40, "why": "closed" | "deleted"}, ...}}

A micro-batch from offset S to offset E reads, per ledger, entries
``S.next[id] (0 for a new one) .. E's next - 1``: up to the ledger's
last-add-confirmed when E was planned.  Entries at or below the LAC never
change, so a micro-batch replayed after a driver crash reads the same rows,
and Spark's file sink (which commits each batch id once) holds each entry
exactly once.

``latestOffset``, on the driver, once per trigger:

1. discovery: the ledgers the options select with an id above ``A`` (one
   listing page per 1000 new ledgers, or one GET per named id); each joins
   ``next`` at entry 0.  ``A`` only moves past ids created more than
   ``discovery_grace`` seconds ago: a ledger whose id was handed out before
   another's may become visible after it, and must not be skipped;
2. one ``GET`` per followed ledger the listing did not show (a listed
   ledger's entry carries its state and LAC): its LAC becomes its next entry id, a
   CLOSED ledger moves to ``ended`` (its part of the stream ends after its
   last entry) and one no node knows any more moves to ``ended`` as
   ``deleted`` with a warning: reported in the offset (``lastProgress``'s
   ``endOffset``) and the log, never an error;
3. ended ledgers are dropped from the offset one offset later once ``A``
   covers them, so the offset holds the ledgers being followed, not history.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, SupportsTriggerAvailableNow

from ._live import LivePartition, Wanted, plan, read_planned, selected_ledgers
from ._live_options import LiveOptions
from ._node import LedgerView, client_for

log = logging.getLogger("ledgerd.offload.spark")

_GET_THREADS = 8

Offset = dict[str, Any]


def initial_offset() -> Offset:
    return {"after": -1, "next": {}, "ended": {}}


class LedgerdStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: LiveOptions) -> None:
        self._options = options
        # Ledgers as the last latestOffset saw them: partitions() plans with their
        # mean entry size and where their local copy starts (a fresh GET otherwise).
        self._views: dict[int, LedgerView] = {}
        # Trigger.AvailableNow: the offset to stop at, fixed at the first planning.
        self._available_now = False
        self._target: Offset | None = None

    def initialOffset(self) -> Offset:
        return initial_offset()

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now = True

    def latestOffset(self, start: Offset, limit: ReadLimit) -> Offset:
        if self._target is not None:
            return self._target
        latest = self._latest(start)
        if self._available_now:
            self._target = latest
        return latest

    def _latest(self, start: Offset) -> Offset:
        options = self._options
        client = client_for(options.urls)
        after = int(start["after"])
        following = {int(k): int(v) for k, v in start["next"].items()}
        # Ended ones stay one offset (reported), and until ``after`` covers them.
        ended = {int(k): v for k, v in start["ended"].items() if int(k) > after}
        fresh: dict[int, LedgerView] = {}
        settled = time.time() - options.discovery_grace_s
        cursor, settling = after, True
        for view in selected_ledgers(options, client, after=after):
            if view.ledger_id not in ended:
                following.setdefault(view.ledger_id, 0)
                fresh[view.ledger_id] = view  # as current as a GET: no second call
            # The cursor passes the settled ledgers before the first unsettled one.
            settling = settling and view.created_at <= settled
            if settling:
                cursor = view.ledger_id
        stale = [i for i in following if i not in fresh]
        with ThreadPoolExecutor(_GET_THREADS, thread_name_prefix="ledgerd-lac") as pool:
            for i, found in zip(stale, pool.map(client.ledger, stale), strict=True):
                if found is not None:
                    fresh[i] = found
        for ledger_id in sorted(following):
            current = fresh.get(ledger_id)
            if current is None:
                log.warning("a followed ledger was deleted: its part of the stream ends",
                            extra={"ledger_id": ledger_id,
                                   "next_entry_id": following[ledger_id]})
                ended[ledger_id] = {"next": following.pop(ledger_id), "why": "deleted"}
                continue
            self._views[ledger_id] = current
            end = max(following[ledger_id], current.last_add_confirmed + 1)
            if current.closed:
                following.pop(ledger_id)
                ended[ledger_id] = {"next": end, "why": "closed"}
            else:
                following[ledger_id] = end
        return {"after": cursor,
                "next": {str(k): v for k, v in sorted(following.items())},
                "ended": {str(k): v for k, v in sorted(ended.items())}}

    def partitions(self, start: Offset, end: Offset) -> Sequence[InputPartition]:
        options = self._options
        client = client_for(options.urls)
        begin = {int(k): int(v) for k, v in start["next"].items()}
        already_ended = {int(k) for k in start["ended"]}
        stop = {int(k): int(v) for k, v in end["next"].items()}
        stop.update({int(k): int(v["next"]) for k, v in end["ended"].items()
                     if int(k) not in already_ended})
        wanted: list[Wanted] = []
        for ledger_id, next_id in sorted(stop.items()):
            first = begin.get(ledger_id, 0)
            if next_id <= first:
                continue
            view = self._views.get(ledger_id) or client.ledger(ledger_id)
            if view is None:
                # Deleted since: nothing to read (its rows are gone everywhere).
                log.warning("ledger deleted before its micro-batch was read",
                            extra={"ledger_id": ledger_id})
                continue
            wanted.append(Wanted(view, first, next_id - 1))
        return [LivePartition(p) for p in plan(options, client, wanted)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, LivePartition):
            return iter(())
        return read_planned(self._options, partition.planned)

    def commit(self, end: Offset) -> None:
        """Nothing to release: the nodes keep every entry until the ledger is deleted."""
