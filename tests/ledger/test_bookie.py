"""The engine facade end to end: real journal (file or loop device), real entry
logs, real RocksDB."""

from __future__ import annotations

import dataclasses
import random
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import crc32c
import pytest

from common.errors import (
    BadRequest,
    DeviceBroken,
    EntryConflict,
    EntryTooLarge,
    LedgerClosed,
    LedgerFenced,
    NoSuchEntry,
    NoSuchLedger,
    ReadOnly,
    Unauthorized,
    WouldBlock,
    WriteCacheFull,
)
from common.units import KiB
from ledger import BatchAddResult, Bookie, CheckpointStep, LedgerState, WriteCacheSettings
from tests.conftest import create_scrypt_ledger, small_engine_settings

T = 10.0  # seconds a future may take before the test fails


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def bookie(data_dir: Path, journal_device: Path | None):
    b = Bookie.open(small_engine_settings(data_dir, journal_device))
    yield b
    b.close()


def add(b: Bookie, lid: int, payload: bytes, pw: str = "pw",
        expected_entry_id: int | None = None) -> BatchAddResult:
    """One entry: a batch of one through the engine's one entry point."""
    return b.append(lid, [(expected_entry_id, (payload,))], password=pw)[0].result(T)


def test_create_add_read_close(bookie: Bookie):
    info = bookie.create_ledger(password="pw", metadata={"app": "x"}).result(T)
    assert info.state == LedgerState.OPEN and info.last_add_confirmed == -1
    results = [add(bookie, info.ledger_id, f"e{i}".encode()) for i in range(10)]
    assert [r.first_entry_id for r in results] == list(range(10))
    assert [r.last_entry_id for r in results] == list(range(10))
    assert [r.last_add_confirmed for r in results] == list(range(10))
    entry = bookie.read_entry(info.ledger_id, 7)
    assert entry.payload == b"e7" and entry.crc32c == crc32c.crc32c(b"e7")
    closed = bookie.close_ledger(info.ledger_id, password="pw").result(T)
    assert closed.state == LedgerState.CLOSED
    assert closed.last_add_confirmed == 9 and closed.length == sum(len(f"e{i}") for i in range(10))
    assert closed.metadata == {"app": "x"}
    with pytest.raises(LedgerClosed):
        add(bookie, info.ledger_id, b"late")
    # Closing again is idempotent.
    again = bookie.close_ledger(info.ledger_id, password="pw").result(T)
    assert again.closed_at == closed.closed_at


def test_reads_stop_at_lac_and_range_reads(bookie: Bookie):
    lid = bookie.create_ledger(password="pw", metadata={}).result(T).ledger_id
    with pytest.raises(NoSuchEntry):
        bookie.read_entry(lid, 0)
    for i in range(5):
        add(bookie, lid, bytes([i]) * 10)
    with pytest.raises(NoSuchEntry):
        bookie.read_entry(lid, 5)
    with pytest.raises(NoSuchEntry):
        bookie.read_entry(lid, -1)
    assert [e.entry_id for e in bookie.read_entries(lid, 1, 3)] == [1, 2, 3]
    assert [e.entry_id for e in bookie.read_entries(lid, 2)] == [2, 3, 4]
    assert [e.entry_id for e in bookie.read_entries(lid, 0, 100, limit=2)] == [0, 1]
    with pytest.raises(BadRequest):
        list(bookie.read_entries(lid, -1))


def test_password_is_checked(bookie: Bookie):
    lid = bookie.create_ledger(password="right", metadata={}).result(T).ledger_id
    for call in (lambda: add(bookie, lid, b"x", pw="wrong"),
                 lambda: bookie.fence(lid, password="").result(T),
                 lambda: bookie.close_ledger(lid, password="nope").result(T),
                 lambda: bookie.delete_ledger(lid, password="x").result(T)):
        with pytest.raises(Unauthorized):
            call()
    assert bookie.get_ledger(lid).state == LedgerState.OPEN
    assert add(bookie, lid, b"x", pw="right").first_entry_id == 0


def test_fence_blocks_adds_but_keeps_reads(bookie: Bookie):
    lid = bookie.create_ledger(password="pw", metadata={}).result(T).ledger_id
    add(bookie, lid, b"a")
    assert bookie.fence(lid, password="pw").result(T).state == LedgerState.FENCED
    with pytest.raises(LedgerFenced):
        add(bookie, lid, b"b")
    assert bookie.read_entry(lid, 0).payload == b"a"
    assert bookie.close_ledger(lid, password="pw").result(T).state == LedgerState.CLOSED


def test_delete_is_immediate_and_ids_are_never_reused(data_dir, journal_device):
    settings = small_engine_settings(data_dir, journal_device)
    b = Bookie.open(settings)
    ids = [b.create_ledger(password="", metadata={}).result(T).ledger_id for _ in range(3)]
    add(b, ids[2], b"doomed", pw="")
    b.delete_ledger(ids[2], password="").result(T)
    with pytest.raises(NoSuchLedger):
        b.get_ledger(ids[2])
    with pytest.raises(NoSuchLedger):
        b.read_entry(ids[2], 0)
    b.close()
    b = Bookie.open(settings)
    try:
        assert [i.ledger_id for i in b.list_ledgers()[0]] == ids[:2]
        assert b.create_ledger(password="", metadata={}).result(T).ledger_id == ids[2] + 1
    finally:
        b.close()


def test_idempotent_append(bookie: Bookie):
    lid = bookie.create_ledger(password="pw", metadata={}).result(T).ledger_id
    first = add(bookie, lid, b"zero", expected_entry_id=0)
    assert first.first_entry_id == 0 and not first.already_present
    again = add(bookie, lid, b"zero", expected_entry_id=0)
    assert again.already_present and again.first_entry_id == 0
    with pytest.raises(EntryConflict):
        add(bookie, lid, b"different", expected_entry_id=0)
    with pytest.raises(EntryConflict):
        add(bookie, lid, b"gap", expected_entry_id=5)
    assert bookie.get_ledger(lid).last_add_confirmed == 0


def test_idempotent_batch(bookie: Bookie):
    lid = bookie.create_ledger(password="pw", metadata={}).result(T).ledger_id
    batch = [b"a", b"bb", b"ccc"]
    first = bookie.append(lid, [(0, batch)], password="pw")[0].result(T)
    assert (first.first_entry_id, first.last_entry_id, first.already_present) == (0, 2, False)
    again = bookie.append(lid, [(0, batch)], password="pw")[0].result(T)
    assert (again.first_entry_id, again.last_entry_id, again.already_present) == (0, 2, True)
    with pytest.raises(EntryConflict, match="different payload"):
        bookie.append(lid, [(0, [b"a", b"XX", b"ccc"])], password="pw")[0].result(T)
    with pytest.raises(EntryConflict, match="not all there"):  # overlaps the end
        bookie.append(lid, [(2, [b"ccc", b"d"])], password="pw")[0]
    with pytest.raises(EntryConflict, match="not the next"):  # a gap
        bookie.append(lid, [(9, [b"z"])], password="pw")[0]
    with pytest.raises(WouldBlock):  # a retry reads back: never on the event loop
        bookie.append(lid, [(0, batch)], password="pw", block=False)[0]
    assert bookie.append(lid, [(3, [b"d"])], password="pw")[0].result(T).first_entry_id == 3
    assert bookie.get_ledger(lid).last_add_confirmed == 3


def test_batch_is_all_or_nothing(bookie: Bookie):
    lid = bookie.create_ledger(password="pw", metadata={}).result(T).ledger_id
    r = bookie.append(lid, [(None, [b"a", b"bb", b"ccc"])], password="pw")[0].result(T)
    assert (r.first_entry_id, r.last_entry_id, r.last_add_confirmed) == (0, 2, 2)
    too_big = bookie.settings.limits.entry_size_bytes_max + 1
    with pytest.raises(EntryTooLarge):
        bookie.append(lid, [(None, [b"ok", b"x" * too_big])], password="pw")[0]
    with pytest.raises(BadRequest):
        bookie.append(lid, [(None, [])], password="pw")[0]
    assert bookie.get_ledger(lid).last_add_confirmed == 2
    assert [e.payload for e in bookie.read_entries(lid)] == [b"a", b"bb", b"ccc"]


def test_many_entries_survive_flushes_rotations_and_restart(data_dir, journal_device):
    settings = small_engine_settings(data_dir, journal_device)
    rng = random.Random(7)
    b = Bookie.open(settings)
    expected: dict[int, list[bytes]] = {}
    lids = [b.create_ledger(password="", metadata={}).result(T).ledger_id for _ in range(5)]
    for lid in lids:
        expected[lid] = []
    futures = []
    for _ in range(3000):
        lid = rng.choice(lids)
        payload = rng.randbytes(rng.randint(0, 2 * KiB))
        expected[lid].append(payload)
        futures.append(b.append(lid, [(None, (payload,))], password="")[0])
    for f in futures:
        f.result(T)
    stats = b.statistics()
    assert stats.checkpoints_total > 1  # the 512 KiB cache forced flushes
    assert len(b.storage.entry_log.log_ids()) > 1  # and the 256 KiB log limit rotations
    b.close()
    b = Bookie.open(settings)
    try:
        for lid, payloads in expected.items():
            assert [e.payload for e in b.read_entries(lid)] == payloads
        assert b.statistics().read_cache_hits > 0  # read-ahead served later entries
    finally:
        b.close()


def test_concurrent_writers(bookie: Bookie):
    lids = [bookie.create_ledger(password="", metadata={}).result(T).ledger_id for _ in range(4)]

    def writer(n: int) -> list[tuple[int, int, bytes]]:
        out = []
        for i in range(200):
            lid = lids[(n + i) % len(lids)]
            payload = f"{n}-{i}".encode()
            out.append((lid, add(bookie, lid, payload, pw="").first_entry_id,
                        payload))
        return out

    with ThreadPoolExecutor(16) as pool:
        acked = [x for part in pool.map(writer, range(16)) for x in part]
    for lid, eid, payload in acked:
        assert bookie.read_entry(lid, eid).payload == payload
    for lid in lids:
        info = bookie.get_ledger(lid)
        assert info.entries == sum(1 for a in acked if a[0] == lid)


def test_read_only_refuses_adds_keeps_reads(bookie: Bookie):
    lid = bookie.create_ledger(password="", metadata={}).result(T).ledger_id
    add(bookie, lid, b"x", pw="")
    bookie.set_read_only(True)
    with pytest.raises(ReadOnly):
        add(bookie, lid, b"y", pw="")
    with pytest.raises(ReadOnly):
        bookie.create_ledger(password="", metadata={})
    assert bookie.read_entry(lid, 0).payload == b"x"
    bookie.set_read_only(False)
    assert add(bookie, lid, b"y", pw="").first_entry_id == 1


@pytest.mark.parametrize(("sync_every", "syncs_min", "syncs_max"),
                         [(64 * KiB, 16, 18), (4096 * KiB, 1, 1)])
def test_a_checkpoint_syncs_the_entry_log_every_sync_every_bytes(
        data_dir, sync_every: int, syncs_min: int, syncs_max: int):
    """A checkpoint syncs the entry log every ``sync_every_bytes`` it writes, so a
    journal on the same disk never waits behind the writeback of a whole
    buffer; a buffer smaller than that is synced once, at the end.  (The spy
    only counts calls to the real store.)"""
    settings = dataclasses.replace(
        small_engine_settings(data_dir, entry_log_limit=64 * 1024 * KiB),
        write_cache=WriteCacheSettings(size_bytes=4 * 1024 * KiB, flush_interval_s=60.0,
                                       sync_every_bytes=sync_every))
    b = Bookie.open(settings)
    try:
        lid = b.create_ledger(password="", metadata={}).result(T).ledger_id
        payloads = [bytes([n % 256]) * KiB for n in range(1024)]  # 1 MiB in one buffer
        for f in [b.append(lid, [(None, (p,))], password="")[0] for p in payloads]:
            f.result(T)
        store, syncs = b.storage.entry_log, []
        real_sync = store.sync

        def counted_sync() -> None:
            syncs.append(1)
            real_sync()

        store.sync = counted_sync  # type: ignore[method-assign]
        b.checkpoint()
        assert syncs_min <= len(syncs) <= syncs_max
        assert [e.payload for e in b.read_entries(lid)] == payloads
    finally:
        b.close()
    reopened = Bookie.open(settings)
    try:
        assert [e.payload for e in reopened.read_entries(lid)] == payloads
    finally:
        reopened.close()


def _tiny_write_cache_settings(data_dir: Path):
    """Two 32 KiB write caches that only a checkpoint (none on a timer) empties."""
    return dataclasses.replace(
        small_engine_settings(data_dir),
        write_cache=WriteCacheSettings(size_bytes=64 * KiB, wait_s_max=0.2,
                                       flush_interval_s=60.0))


def test_full_write_cache_pushes_back_with_write_cache_full(data_dir):
    settings = _tiny_write_cache_settings(data_dir)
    b = Bookie.open(settings)
    try:
        lid = b.create_ledger(password="", metadata={}).result(T).ledger_id
        # Holding the checkpoint lock stands for a flush that cannot finish.
        with b._checkpointer.lock, pytest.raises(WriteCacheFull):
            for _ in range(100):
                b.append(lid, [(None, (b"x" * (8 * KiB),))], password="")[0].result(T)
        # Once the flush can run, adds flow again.
        assert add(b, lid, b"after", pw="").first_entry_id > 0
    finally:
        b.close()


def _add_state(b: Bookie) -> tuple[int, int]:
    """What an add changes at once (the LAC moves later, with the journal's sync)."""
    return b.journal.appended_offset, b.statistics().adds_total


def test_a_non_blocking_add_runs_when_nothing_waits_and_else_changes_nothing(data_dir):
    """``block=False`` (the event loop's call) must never wait: for scrypt (a
    ledger hashed before keyed hashes), for the read-back of an idempotent retry,
    for room in the write cache.  Each raises WouldBlock before touching
    anything, and the blocking call then succeeds.  A keyed hash never waits: a
    wrong password is refused at once, and after a restart too."""
    settings = _tiny_write_cache_settings(data_dir)
    b = Bookie.open(settings)
    try:
        lid = b.create_ledger(password="pw", metadata={}).result(T).ledger_id
        (added,) = b.append(lid, [(None, (b"a",))], password="pw", block=False)
        assert added.result(T).first_entry_id == 0
        batch = b.append(lid, [(None, [b"b", b"c"])], password="pw", block=False)[0].result(T)
        assert (batch.first_entry_id, batch.last_entry_id) == (1, 2)
        legacy = create_scrypt_ledger(b, "pw")
        before = _add_state(b)
        for wrong in (lambda: b.append(lid, [(None, (b"d",))], password="wrong", block=False)[0],
                      lambda: b.append(lid, [(None, [b"d"])], password="wrong", block=False)[0]):
            with pytest.raises(Unauthorized):
                wrong()
            assert _add_state(b) == before
        for call in (lambda: b.append(legacy, [(None, (b"d",))], password="pw", block=False)[0],
                     lambda: b.append(legacy, [(None, [b"d"])], password="pw", block=False)[0],
                     lambda: b.append(lid, [(0, (b"a",))], password="pw", block=False)[0],
                     lambda: b.append(lid, [(1, [b"b", b"c"])], password="pw", block=False)[0],
                     lambda: b.append(lid, [(1, [b"b", b"c"]), (3, [b"d"])], password="pw",
                                      block=False)):
            with pytest.raises(WouldBlock):
                call()
            assert _add_state(b) == before
        with pytest.raises(Unauthorized):
            add(b, lid, b"d", pw="wrong")
        assert add(b, lid, b"a", expected_entry_id=0).already_present
        next_id = 3
        # Holding the checkpoint lock stands for a flush that cannot finish.
        with b._checkpointer.lock:
            with pytest.raises(WouldBlock):
                for _ in range(100):
                    before = _add_state(b)
                    b.append(lid, [(None, (b"x" * (8 * KiB),))], password="pw", block=False)[0]
                    next_id += 1
            assert _add_state(b) == before
        assert add(b, lid, b"after").first_entry_id == next_id
    finally:
        b.close()
    # After a restart a keyed hash is checked at once; a scrypt one is known
    # to no one yet: its first add checks it fully.
    b = Bookie.open(settings)
    try:
        with pytest.raises(WouldBlock):
            b.append(legacy, [(None, (b"e",))], password="pw", block=False)[0]
        assert add(b, legacy, b"e").first_entry_id == 0
        assert add(b, lid, b"e").first_entry_id == next_id + 1
        (added,) = b.append(lid, [(None, (b"f",))], password="pw", block=False)
        assert added.result(T).first_entry_id == next_id + 2
    finally:
        b.close()


@pytest.mark.parametrize("step", [CheckpointStep.FROZEN, CheckpointStep.ENTRIES_WRITTEN,
                                  CheckpointStep.ENTRY_LOG_SYNCED])
def test_a_failed_checkpoint_latches_and_keeps_acknowledged_entries_readable(
        data_dir, step: CheckpointStep):
    """A checkpoint failing before its index batch (a step that raises stands for a
    failed write or fsync) leaves the bookie refusing writes but serving every
    acknowledged entry from memory; a restart replays the journal."""
    armed = {"on": False}

    def fail(reached: CheckpointStep) -> None:
        if armed["on"] and reached is step:
            raise DeviceBroken(f"injected failure at {reached.value}")

    settings = small_engine_settings(data_dir)
    b = Bookie.open(settings, checkpoint_hook=fail)
    try:
        lid = b.create_ledger(password="", metadata={}).result(T).ledger_id
        payloads = [f"entry {i}".encode() for i in range(20)]
        for p in payloads:
            b.append(lid, [(None, (p,))], password="")[0].result(T)
        armed["on"] = True
        with pytest.raises(DeviceBroken, match="injected"):
            b.checkpoint()
        assert b.broken is not None
        assert [e.payload for e in b.read_entries(lid)] == payloads
        assert b.get_ledger(lid).last_add_confirmed == 19
        with pytest.raises(DeviceBroken):
            b.append(lid, [(None, (b"refused",))], password="")[0].result(T)
    finally:
        b.close()
    reopened = Bookie.open(settings)
    try:
        assert [e.payload for e in reopened.read_entries(lid)] == payloads
        reopened.append(lid, [(None, (b"after restart",))], password="")[0].result(T)
    finally:
        reopened.close()


def test_the_heap_freed_in_a_busy_spell_goes_back_once_the_bookie_is_idle(
        data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The background checkpoint that finds nothing new after one that wrote gives
    freed heap back to the kernel (``malloc_trim``), once per busy spell, never
    while writes go on.  (The spy counts calls to the real release: what it gives
    back depends on the allocator's state, measured in bench/million_bench.py.)"""
    import ledger._bookie as bookie_module

    released: list[bool] = []
    real = bookie_module.release_free_heap
    monkeypatch.setattr(bookie_module, "release_free_heap",
                        lambda: released.append(real()) or True)
    settings = dataclasses.replace(
        small_engine_settings(data_dir),
        write_cache=WriteCacheSettings(size_bytes=4 * 1024 * KiB, flush_interval_s=3600.0))
    b = Bookie.open(settings)
    try:
        released.clear()  # opening checkpoints too
        lid = b.create_ledger(password="pw", metadata={}).result(T).ledger_id
        for spell in range(2):
            for n in range(20):
                add(b, lid, bytes([n]) * KiB)
                b._checkpoint_in_background()       # busy: nothing given back
            assert len(released) == spell
            b._checkpoint_in_background()           # idle: given back once
            b._checkpoint_in_background()
            assert len(released) == spell + 1
    finally:
        b.close()
