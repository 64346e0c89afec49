"""Reading offloaded ledgers: the read-ahead window (pure) and the reader
against the real S3 server: sequential and random reads, window growth and
shrinking, corruption named by key and entry, many threads."""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from common.errors import CorruptRecord, NoSuchEntry
from common.units import MiB
from ledger import Bookie, OffloadInfo
from offload import Offloader, OffloadSettings, RemoteLedgerReader, S3ObjectStore
from offload._read_ahead import Fetch, ReadAheadCache

from .conftest import Written, endpoint_of, offload_settings, random_payloads, write_closed_ledger

# --- the window, without I/O -----------------------------------------------------


def _cache(capacity_blocks: int = 16, ttl_s: float = 10.0) -> ReadAheadCache:
    return ReadAheadCache(capacity_bytes=capacity_blocks * 4, window_blocks_min=1,
                          window_blocks_max=8, ttl_s=ttl_s)


def _blocks(fetch: Fetch) -> list[bytes]:
    return [b"data"] * fetch.block_count  # 4 bytes a block: capacity counts blocks


def test_window_doubles_while_reads_stay_sequential() -> None:
    cache = _cache(capacity_blocks=64)
    fetch = cache.plan_miss("s", 0, 100)
    assert fetch == Fetch(0, 1)
    cache.insert("s", fetch, _blocks(fetch), wanted=0, now=0.0)
    fetch = cache.plan_miss("s", 1, 100)  # ran off the end: sequential
    assert fetch == Fetch(1, 2)
    cache.insert("s", fetch, _blocks(fetch), wanted=1, now=0.0)
    assert cache.lookup("s", 2) == (b"data", True)  # a read-ahead hit...
    ahead = cache.plan_ahead("s", 2, 100)  # ...with less than two windows ahead: more
    assert ahead == Fetch(3, 4)
    cache.insert("s", ahead, _blocks(ahead), wanted=None, now=0.0)
    assert cache.lookup("s", 3) == (b"data", True)
    assert cache.plan_ahead("s", 3, 100) == Fetch(7, 8)  # 3 ahead < 2 windows of 4
    cache.insert("s", Fetch(7, 8), _blocks(Fetch(7, 8)), wanted=None, now=0.0)
    cache.lookup("s", 4)
    assert cache.plan_ahead("s", 4, 100) == Fetch(15, 8)  # 10 ahead < 16; at the maximum
    cache.lookup("s", 5)
    assert cache.plan_ahead("s", 5, 100) is None  # 17 ahead: two windows are in flight
    assert cache.window_bytes("s") == 8 * 1024 * 1024
    assert cache.counts["read_ahead_grows"] == 3


def test_window_is_clipped_to_the_segment() -> None:
    cache = _cache()
    assert cache.plan_miss("s", 3, 4) == Fetch(3, 1)


def test_window_halves_when_prefetched_blocks_are_evicted_unread() -> None:
    cache = _cache(capacity_blocks=8)
    cache.plan_miss("s", 0, 100)
    for start in (1, 3):  # sequential misses grow the window to 4 blocks
        fetch = cache.plan_miss("s", start, 100)
    assert fetch == Fetch(3, 4)
    cache.insert("s", fetch, _blocks(fetch), wanted=3, now=0.0)
    other = cache.plan_miss("t", 50, 100)
    for _ in range(8):  # another segment fills the cache: s's 3 unread blocks go
        cache.insert("t", other, _blocks(other), wanted=50, now=0.0)
        other = Fetch(other.first_block + 1, 1)
    assert cache.counts["read_ahead_wasted"] == 3
    assert cache.window_bytes("s") == 1 * 1024 * 1024  # 4 -> 2 -> 1 (the minimum)


def test_unread_prefetch_expires_after_the_ttl() -> None:
    cache = _cache(capacity_blocks=64, ttl_s=5.0)
    cache.plan_miss("s", 0, 100)
    fetch = cache.plan_miss("s", 1, 100)
    cache.insert("s", fetch, _blocks(fetch), wanted=1, now=0.0)
    cache.insert("t", Fetch(0, 1), [b"data"], wanted=0, now=6.0)
    assert cache.lookup("s", 2) == (None, False)
    assert cache.counts["read_ahead_wasted"] == 1 and cache.counts["read_ahead_shrinks"] == 1


# --- against the real server ------------------------------------------------------


@pytest.fixture
def offloaded(bookie: Bookie, s3_bucket: tuple[Any, str]
              ) -> tuple[Written, OffloadInfo, S3ObjectStore, OffloadSettings]:
    client, bucket = s3_bucket
    settings = offload_settings(bucket, endpoint_of(client), read_ahead_bytes_max=4 * MiB,
                                read_cache_size_bytes=12 * MiB)
    store = S3ObjectStore(client, settings)
    written = write_closed_ledger(bookie, random_payloads(14 * MiB, seed=7, size_max=64 * 1024))
    with ThreadPoolExecutor(4) as executor:
        info = Offloader(bookie, store, settings, executor=executor).offload(written.ledger_id)
    return written, info, store, settings


def test_sequential_reads_grow_the_window_to_its_maximum(offloaded) -> None:
    written, info, store, settings = offloaded
    reader = RemoteLedgerReader(store, settings)
    try:
        for entry_id, expected in enumerate(written.payloads):
            assert reader.read_entry(written.ledger_id, entry_id, info)[0] == expected
        stats = reader.statistics()
        assert stats["read_ahead_grows"] >= 2 and stats["read_ahead_hits"] > 0
        assert reader.window_bytes(written.ledger_id, info) == settings.read_ahead_bytes_max
        # 14 MiB in 1, 2 and then 4 MiB ranges: a handful of GETs, not one per entry.
        gets = store.statistics()["requests_get"]
        assert gets <= 8, gets
        assert stats["bytes_fetched"] == written.frame_bytes
    finally:
        reader.close()


def test_random_reads_shrink_the_window(offloaded) -> None:
    written, info, store, settings = offloaded
    reader = RemoteLedgerReader(store, settings)
    try:
        for entry_id in range(len(written.payloads) // 3):  # grow it first
            reader.read_entry(written.ledger_id, entry_id, info)
        rng = random.Random(8)
        for entry_id in rng.sample(range(len(written.payloads)), 60):
            assert reader.read_entry(written.ledger_id, entry_id, info)[0] == \
                written.payloads[entry_id]
        stats = reader.statistics()
        assert stats["read_ahead_wasted"] > 0 and stats["read_ahead_shrinks"] > 0
        assert stats["read_cache_bytes"] <= settings.read_cache_size_bytes
    finally:
        reader.close()


def test_many_threads_read_the_same_ledger(offloaded) -> None:
    written, info, store, settings = offloaded
    reader = RemoteLedgerReader(store, settings)

    def read_slice(seed: int) -> int:
        rng = random.Random(seed)
        start = rng.randrange(len(written.payloads))
        for entry_id in range(start, min(start + 200, len(written.payloads))):
            assert reader.read_entry(written.ledger_id, entry_id, info)[0] == \
                written.payloads[entry_id]
        return seed

    try:
        with ThreadPoolExecutor(8) as pool:
            assert sorted(pool.map(read_slice, range(16))) == list(range(16))
    finally:
        reader.close()


def test_a_flipped_byte_in_a_segment_is_named_by_key_and_entry(offloaded, s3_bucket) -> None:
    client, bucket = s3_bucket
    written, info, store, settings = offloaded
    key = f"{info.key_prefix}seg-0/segment"
    original = client.get_object(Bucket=bucket, Key=key)["Body"].read()
    target = len(written.payloads) // 2
    while not written.payloads[target]:
        target += 1
    offset = sum(16 + len(p) for p in written.payloads[:target]) + 16
    damaged = bytearray(original)
    damaged[offset] ^= 0x40
    client.put_object(Bucket=bucket, Key=key, Body=bytes(damaged))
    reader = RemoteLedgerReader(store, settings)
    try:
        with pytest.raises(CorruptRecord, match=f"payload crc32c mismatch in entry {target}") as e:
            reader.read_entry(written.ledger_id, target, info)
        assert e.value.path == key
        # The damaged span is not kept: once the object is good again, so is the read.
        client.put_object(Bucket=bucket, Key=key, Body=original)
        assert reader.read_entry(written.ledger_id, target, info)[0] == written.payloads[target]
    finally:
        reader.close()


def test_missing_objects_and_entries(offloaded, s3_bucket) -> None:
    client, bucket = s3_bucket
    written, info, store, settings = offloaded
    reader = RemoteLedgerReader(store, settings)
    try:
        with pytest.raises(NoSuchEntry):
            reader.read_entry(written.ledger_id, len(written.payloads), info)
        client.delete_object(Bucket=bucket, Key=f"{info.key_prefix}seg-0/index")
        fresh = RemoteLedgerReader(store, settings)
        with pytest.raises(CorruptRecord, match="no offloaded segment holds entry 0"):
            fresh.read_entry(written.ledger_id, 0, info)
        fresh.close()
    finally:
        reader.close()
