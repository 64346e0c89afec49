"""Work proportional to what changed, not to the ledgers held (issue 28).

A bookie holding 100,000 idle ledgers (written straight into its stores by
``tools.seed_ledgers``: creating them through the engine pays a scrypt each)
checkpoints and runs GC.  These tests count operations, never time them: the
Python lines the checkpoint or the GC run executes in the calling thread
(``sys.settrace``), which any per-ledger loop — a set of every ledger id, a
listing of every ledger, every entry log's map copied and looked through —
multiplies by the ledgers held, and the entry logs GC measures again.  (Work
done in C over every ledger, such as ``set(dict)``, is not counted by lines;
the logs-measured counter covers GC's.)
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest

from compaction import CompactionSettings, GarbageCollector
from ledger import Bookie, LedgerState
from tests.conftest import small_engine_settings
from tools.seed_ledgers import seed_idle_ledgers

LEDGERS = 100_000
WITH_ENTRIES = 20_000  # of them, one entry each
# An idle checkpoint or GC run executes a few hundred lines; one line per
# ledger held would be 100,000.
LINE_BUDGET = 5_000
T = 30.0

R = TypeVar("R")


def lines_run(fn: Callable[[], R]) -> tuple[R, int]:
    """``fn()`` and how many Python lines it executed in this thread."""
    count = 0

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        nonlocal count
        if event == "line":
            count += 1
        return tracer

    previous = sys.gettrace()  # coverage's, when it runs
    sys.settrace(tracer)
    try:
        result = fn()
    finally:
        sys.settrace(previous)
    return result, count


@pytest.fixture(scope="module")
def held(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Bookie, list[int]]]:
    settings = small_engine_settings(tmp_path_factory.mktemp("held") / "data")
    # Most of them empty (cheaper to write); the rest fill some entry logs.
    ids = seed_idle_ledgers(settings, LEDGERS - WITH_ENTRIES, payload=None)
    ids += seed_idle_ledgers(settings, WITH_ENTRIES)
    bookie = Bookie.open(settings)
    try:
        yield bookie, ids
    finally:
        bookie.close()


def _gc(bookie: Bookie) -> GarbageCollector:
    # Offload's deletion lag set, so the runs look for local copies and tiered
    # ranges to drop too; compaction never due.
    return GarbageCollector(
        bookie, CompactionSettings(gc_wait_time_s=3600.0, minor_interval_s=3600.0,
                                   major_interval_s=3600.0, rate_bytes_per_s=0),
        disk_usage=lambda: 0.1, offload_deletion_lag_s=0.0)


def test_an_idle_checkpoint_touches_no_ledger(held: tuple[Bookie, list[int]]) -> None:
    bookie, ids = held
    assert len(bookie.list_ledgers(after=ids[-2])[0]) == 1  # all of them held
    bookie.checkpoint()
    _, idle = lines_run(bookie.checkpoint)
    assert idle < LINE_BUDGET, idle
    # One ledger changed: the checkpoint writes that one, still nothing per ledger held.
    lid = bookie.create_ledger(password="", metadata={}).result(T).ledger_id
    for n in range(10):
        bookie.append(lid, [(None, (b"e%d" % n,))], password="")[0].result(T)
    result, busy = lines_run(bookie.checkpoint)
    assert result.entry_count == 10
    assert busy < LINE_BUDGET, busy
    assert bookie.read_entry(lid, 9).payload == b"e9"


def test_an_idle_gc_run_touches_no_ledger_and_measures_no_log(
        held: tuple[Bookie, list[int]]) -> None:
    bookie, ids = held
    store = bookie.storage.entry_log
    gc = _gc(bookie)
    gc.run_once()  # the first run measures every log once
    measured = gc._usage.measured
    assert measured >= 10  # the ledgers' entries fill many logs
    report, idle = lines_run(gc.run_once)
    assert gc._usage.measured == measured  # nothing changed: no log measured again
    assert report.logs_removed == 0 and not report.errors
    assert idle < LINE_BUDGET, idle

    # Deleting a few ledgers: the next run measures again the logs holding
    # them, and only those, once their deletion is committed.
    doomed = ids[-WITH_ENTRIES:][:3] + ids[-3:]
    holding = {log_id for log_id in store.flushed_log_ids()
               if set(store.ledgers_map(log_id)) & set(doomed)}
    # The read cache full of other ledgers' entries: committing the deletions
    # looks at the deleted ledgers' cached entries only.
    cache = bookie.storage.read_cache
    for n in range(50_000):
        cache.put(ids[n % 1000], n // 1000 + 1, b"c", 0)
    for lid in doomed:
        cache.put(lid, 0, b"d", 0)
        cache.put(lid, 1, b"d", 0)
    visits = cache.drop_visits
    for lid in doomed:
        bookie.delete_ledger(lid, password="").result(T)
    bookie.checkpoint()
    assert cache.drop_visits - visits == 2 * len(doomed)
    assert cache.statistics().entry_count == 50_000
    report = gc.run_once()
    assert gc._usage.measured == measured + len(holding)
    assert report.logs_removed == 0  # their logs hold other, live ledgers
    assert bookie.read_entry(ids[-4], 0).payload == b"x" * 64


def test_listing_open_ledgers_walks_only_the_ledgers_not_closed(
        held: tuple[Bookie, list[int]]) -> None:
    # What the tiering thread does every round: among 100,000 closed ledgers.
    bookie, _ids = held
    opened = [bookie.create_ledger(password="", metadata={}).result(T).ledger_id
              for _ in range(3)]
    bookie.close_ledger(opened[1], password="").result(T)
    (page, after), lines = lines_run(
        lambda: bookie.list_ledgers(state=LedgerState.OPEN, limit=100))
    assert [i.ledger_id for i in page if i.ledger_id in opened] == [opened[0], opened[2]]
    assert after is None and lines < LINE_BUDGET, lines
    page, _ = bookie.list_ledgers(state=LedgerState.CLOSED, after=opened[0] - 1)
    assert [i.ledger_id for i in page] == [opened[1]]
