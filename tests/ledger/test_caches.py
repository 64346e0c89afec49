"""Write cache (double buffer) and read cache behaviour."""

from hypothesis import given
from hypothesis import strategies as st

from ledger._read_cache import ReadCache
from ledger._write_cache import WriteCache


def _flatten(runs):
    """(ledger, entry, payload) of each entry of the runs, checking each run is consecutive ids."""
    out = []
    for run in runs:
        assert len(run.payloads) == len(run.crcs) > 0
        out.extend((run.ledger_id, run.first_entry_id + i, p) for i, p in enumerate(run.payloads))
    return out


@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 1000), st.binary(max_size=8)),
                unique_by=lambda t: (t[0], t[1]), max_size=200))
def test_frozen_buffer_yields_live_ledgers_sorted_by_ledger_then_entry(items):
    cache = WriteCache(1 << 20)
    for lid, eid, payload in items:
        cache.put(lid, eid, payload, 0)
    frozen = cache.swap()
    records = _flatten(frozen.sorted_runs({lid for lid, _, _ in items}))
    assert [(lid, eid) for lid, eid, _ in records] == sorted((lid, eid) for lid, eid, _ in items)
    assert {(lid, eid): p for lid, eid, p in records} == {(lid, eid): p for lid, eid, p in items}
    live = {lid for lid, _, _ in items if lid % 2 == 0}
    assert [(lid, eid) for lid, eid, _ in _flatten(frozen.sorted_runs(live))] == sorted(
        (lid, eid) for lid, eid, _ in items if lid in live)
    assert frozen.size_bytes == sum(len(p) for _, _, p in items)
    assert frozen.entry_count == len(items)


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 30), st.binary(max_size=8)),
                max_size=120))
def test_the_buffer_holds_the_last_copy_stored_of_each_entry_in_any_order(puts):
    """Adds stage the next ids; a replica may store any id, again or out of order:
    every read, the counts and the flushed runs agree with a plain dict."""
    cache = WriteCache(1 << 20)
    model: dict[tuple[int, int], tuple[bytes, int]] = {}
    for n, (lid, eid, payload) in enumerate(puts):
        cache.put(lid, eid, payload, n)
        model[(lid, eid)] = (payload, n)
        assert cache.get(lid, eid) == (payload, n)
    for (lid, eid), hit in model.items():
        assert cache.get(lid, eid) == hit
    assert cache.get(9, 0) is None
    stats = cache.statistics()
    assert (stats.active_entries, stats.active_bytes) == (
        len(model), sum(len(p) for p, _ in model.values()))
    for lid in range(4):
        assert cache.ids_between(lid, 5, 20) == {e for (m, e) in model if m == lid and 5 <= e <= 20}
    frozen = cache.swap()
    flushed = [(run.ledger_id, run.first_entry_id + i, p, c)
               for run in frozen.sorted_runs({0, 1, 2, 3})
               for i, (p, c) in enumerate(zip(run.payloads, run.crcs, strict=True))]
    assert flushed == [(lid, eid, *model[(lid, eid)]) for lid, eid in sorted(model)]


def test_a_refused_add_takes_back_only_what_it_staged():
    cache = WriteCache(1 << 20)
    assert cache.try_stage(7, 0, [b"a", b"bb"], [1, 2], 3)
    assert cache.try_stage(7, 2, [b"ccc"], [3], 3)
    cache.discard(7, 2, 1, 3)
    assert cache.get(7, 2) is None and cache.get(7, 1) == (b"bb", 2)
    assert cache.try_stage(7, 2, [b"dd"], [4], 2)  # the same ids again, as the retry does
    cache.discard(7, 2, 1, 2)
    cache.discard(7, 0, 2, 3)
    assert cache.statistics().active_entries == 0 and cache.fits(1 << 30)
    assert cache.try_stage(8, 5, [b"e"], [5], 1)  # a ledger's first staged id may be any
    assert cache.get(8, 5) == (b"e", 5)


def test_reads_see_active_then_frozen_until_released():
    cache = WriteCache(1024)
    cache.put(1, 0, b"a", 11)
    cache.swap()
    cache.put(1, 1, b"b", 22)
    assert cache.get(1, 0) == (b"a", 11)
    assert cache.get(1, 1) == (b"b", 22)
    assert not cache.can_swap()
    cache.release_frozen()
    assert cache.get(1, 0) is None
    assert cache.get(1, 1) == (b"b", 22)
    assert cache.can_swap()


def test_buffer_capacity_is_half_and_big_entry_fits_empty_buffer():
    cache = WriteCache(1000)
    assert cache.fits(500)
    assert cache.fits(5000)  # larger than a buffer, but the buffer is empty
    cache.put(1, 0, b"x" * 400, 0)
    assert cache.fits(100)
    assert not cache.fits(101)
    assert not cache.is_full()
    cache.put(1, 1, b"x" * 100, 0)
    assert cache.is_full()


def test_read_cache_evicts_least_recently_used_by_bytes():
    cache = ReadCache(10)
    cache.put(1, 0, b"aaaa", 0)
    cache.put(1, 1, b"bbbb", 0)
    assert cache.get(1, 0) == (b"aaaa", 0)  # 0 is now most recent
    cache.put(1, 2, b"cccc", 0)  # 12 bytes > 10: evicts entry 1
    assert cache.get(1, 1) is None
    assert cache.get(1, 0) is not None and cache.get(1, 2) is not None
    stats = cache.statistics()
    assert stats.size_bytes == 8 and stats.entry_count == 2


def test_read_cache_drop_ledger():
    cache = ReadCache(100)
    cache.put(1, 0, b"a", 0)
    cache.put(2, 0, b"b", 0)
    cache.drop_ledger(1)
    assert cache.get(1, 0) is None
    assert cache.get(2, 0) == (b"b", 0)
    assert cache.statistics().size_bytes == 1


def test_read_cache_drop_ledger_looks_only_at_that_ledgers_entries():
    # A full cache of many ledgers' small entries: forgetting one ledger costs
    # its own cached entries (it used to scan all of them under the lock).
    cache = ReadCache(1_000_000)
    for ledger_id in range(1, 2001):
        for entry_id in range(5):
            cache.put(ledger_id, entry_id, b"x" * 10, 0)
    cache.drop_ledger(7)
    assert cache.drop_visits == 5
    cache.drop_ledger(8, below=3)
    assert cache.drop_visits == 10
    assert [cache.get(8, e) is None for e in range(5)] == [True, True, True, False, False]
    cache.drop_ledger(9999)  # nothing cached: nothing looked at
    assert cache.drop_visits == 10
    stats = cache.statistics()
    assert stats.entry_count == 2000 * 5 - 5 - 3 and stats.size_bytes == stats.entry_count * 10


@given(st.lists(st.tuples(st.sampled_from(["put", "get", "drop", "drop_below"]),
                          st.integers(1, 4), st.integers(0, 6), st.integers(0, 5)),
                max_size=80))
def test_read_cache_per_ledger_index_agrees_with_the_lru(ops):
    # Eviction, overwrites and both kinds of drop keep the per-ledger index and
    # the byte count equal to what the LRU holds.
    cache = ReadCache(20)
    model: dict[tuple[int, int], bytes] = {}
    for op, ledger_id, entry_id, size in ops:
        if op == "put":
            cache.put(ledger_id, entry_id, b"p" * size, 0)
        elif op == "get":
            cache.get(ledger_id, entry_id)
        elif op == "drop":
            cache.drop_ledger(ledger_id)
        else:
            cache.drop_ledger(ledger_id, below=entry_id)
        held = dict(cache._entries)
        model = {k: v[0] for k, v in held.items()}
        assert {(lid, e) for lid, ids in cache._by_ledger.items() for e in ids} == set(model)
        assert all(cache._by_ledger.values())  # no empty sets left behind
        assert cache.statistics().size_bytes == sum(map(len, model.values())) <= 20
