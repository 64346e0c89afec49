"""The pure selection rules: usage, removable logs, candidate order."""

from __future__ import annotations

import random
import threading
from array import array

import pytest

from compaction import (
    BURST_S,
    ByteRateLimiter,
    LogUsage,
    compaction_candidates,
    log_usage,
    removable,
)
from entrylog import LedgerUsage


def test_usage_counts_only_live_ledgers() -> None:
    usage_map = {1: LedgerUsage(10, 600), 2: LedgerUsage(5, 300), 3: LedgerUsage(1, 100)}
    usage = log_usage(7, 1000, usage_map, live={1, 3})
    assert usage == LogUsage(7, 1000, 700, array("Q", (1, 2, 3)))
    assert usage.usage == pytest.approx(0.7)
    assert log_usage(8, 0, {}, live={1}).usage == 0.0


def test_removable_and_candidates_lowest_usage_first() -> None:
    one = array("Q", (1,))
    logs = [LogUsage(1, 1000, 0, array("Q", (4,))), LogUsage(2, 1000, 500, one),
            LogUsage(3, 1000, 100, one), LogUsage(4, 1000, 900, one),
            LogUsage(5, 2000, 100, one)]
    assert [u.log_id for u in removable(logs)] == [1]
    assert [u.log_id for u in compaction_candidates(logs, 0.2)] == [5, 3]
    assert [u.log_id for u in compaction_candidates(logs, 0.8)] == [5, 3, 2]
    assert compaction_candidates(logs, 0.0) == []


def test_a_log_holds_a_changed_ledger_whether_few_or_many_changed() -> None:
    rng = random.Random(28)
    # Replica ids have the top bit set: the ids are unsigned 64-bit.
    held = {rng.randrange(2**64) for _ in range(5000)} | {2**63 + 7}
    usage = log_usage(1, 1000, dict.fromkeys(held, LedgerUsage(1, 1)), live=set())
    assert list(usage.ledger_ids) == sorted(held)
    absent = [rng.randrange(2**64) for _ in range(2000)]
    for changed in ({2**63 + 7}, {absent[0], 2**63 + 7}, set(absent[:3]), set(absent),
                    set(absent) | {max(held)}, {min(held)}, set()):
        # Few ids: a binary search each; many: one pass over the log's ids.
        assert usage.holds_any(changed) == (not held.isdisjoint(changed))


class StepClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class RecordingStop(threading.Event):
    """Records the waits asked for instead of waiting (time is the fake clock's)."""

    def __init__(self, clock: StepClock) -> None:
        super().__init__()
        self.clock = clock
        self.waits: list[float] = []

    def wait(self, timeout: float | None = None) -> bool:
        assert timeout is not None
        self.waits.append(timeout)
        self.clock.now += timeout
        return False


def test_rate_limiter_waits_for_the_bytes_over_budget() -> None:
    clock = StepClock()
    stop = RecordingStop(clock)
    limiter = ByteRateLimiter(1000, stop=stop, clock=clock, burst_s=1.0)
    limiter.acquire(1000)  # one second of budget is there at start
    assert stop.waits == []
    limiter.acquire(500)
    assert stop.waits == [pytest.approx(0.5)]
    clock.now += 10.0  # idle: the budget refills to one second, not ten
    limiter.acquire(1500)
    assert stop.waits[-1] == pytest.approx(0.5)
    unlimited = ByteRateLimiter(0, stop=stop, clock=clock)
    unlimited.acquire(10**9)
    assert len(stop.waits) == 2


def test_rate_limiter_holds_little_budget_by_default() -> None:
    """A run starts paced, not with a second's worth of bytes at full speed."""
    clock = StepClock()
    stop = RecordingStop(clock)
    limiter = ByteRateLimiter(1000, stop=stop, clock=clock)
    limiter.acquire(500)
    assert stop.waits == [pytest.approx(0.5 - BURST_S)]
    clock.now += 10.0  # idle: the budget refills to BURST_S only
    limiter.acquire(1000)
    assert stop.waits[-1] == pytest.approx(1.0 - BURST_S)


def test_usage_of_ledgers_whose_tiered_entries_were_dropped_follows_the_index() -> None:
    usage_map = {1: LedgerUsage(10, 600), 2: LedgerUsage(4, 400)}
    # Ledger 2 keeps 1 of its 4 entries in this log; ledger 1 none of its 10.
    assert log_usage(7, 1000, usage_map, live={1, 2}, located={2: 1}).live_bytes == 700
    assert log_usage(7, 1000, usage_map, live={1, 2}, located={1: 0, 2: 0}).live_bytes == 0
    assert log_usage(7, 1000, usage_map, live={2}, located={2: 9}).live_bytes == 400
