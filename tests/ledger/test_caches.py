"""Write cache (double buffer) and read cache behaviour."""

from hypothesis import given
from hypothesis import strategies as st

from ledger._read_cache import ReadCache
from ledger._write_cache import WriteCache


@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 1000), st.binary(max_size=8)),
                unique_by=lambda t: (t[0], t[1]), max_size=200))
def test_frozen_buffer_yields_live_ledgers_sorted_by_ledger_then_entry(items):
    cache = WriteCache(1 << 20)
    for lid, eid, payload in items:
        cache.put(lid, eid, payload, 0)
    frozen = cache.swap()
    records = frozen.sorted_records({lid for lid, _, _ in items})
    assert [(lid, eid) for lid, eid, _, _ in records] == sorted((lid, eid) for lid, eid, _ in items)
    assert {(lid, eid): p for lid, eid, p, _ in records} == {(lid, eid): p for lid, eid, p in items}
    live = {lid for lid, _, _ in items if lid % 2 == 0}
    assert [(lid, eid) for lid, eid, _, _ in frozen.sorted_records(live)] == sorted(
        (lid, eid) for lid, eid, _ in items if lid in live)
    assert frozen.size_bytes == sum(len(p) for _, _, p in items)


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
