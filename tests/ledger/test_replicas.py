"""The engine as a bookie of cluster mode (ledger/_replicas.py): the replica rules of
docs/cluster.md §5.1 on a real journal, entry logs and RocksDB, through flushes,
compaction, restarts and journal replay."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import crc32c
import pytest

from common.errors import (
    DeviceBroken,
    NoSuchEntry,
    NoSuchLedger,
    ReadOnly,
    ReplicaFenced,
    WouldBlock,
)
from common.units import KiB
from ledger import (
    Bookie,
    CheckpointStep,
    LedgerState,
    Relocation,
    ReplicaEntry,
    ReplicaState,
    WriteCacheSettings,
)
from tests.conftest import small_engine_settings

T = 10.0


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def bookie(data_dir: Path, journal_device: Path | None):
    b = Bookie.open(small_engine_settings(data_dir, journal_device))
    yield b
    b.close()


def entry(entry_id: int, epoch: int, payload: bytes, length_after: int = 0) -> ReplicaEntry:
    return ReplicaEntry(entry_id, epoch, payload, length_after or len(payload) * (entry_id + 1))


def add(b: Bookie, lid: int, epoch: int, *entries: ReplicaEntry, lac: int = -1) -> ReplicaState:
    return b.replicas.add(lid, entries, epoch=epoch, lac=lac).result(T)


def held(b: Bookie, lid: int, entry_id: int) -> tuple[int, bytes, int]:
    stored = b.replicas.read(lid, entry_id)
    assert stored.crc32c == crc32c.crc32c(stored.payload)
    return stored.epoch, stored.payload, stored.length_after


def test_entries_are_stored_under_the_writers_ids_with_epoch_and_length(bookie: Bookie):
    state = add(bookie, 7, 1, entry(0, 1, b"a", 1), entry(3, 1, b"bcd", 4), lac=-1)
    assert state == ReplicaState(fenced_epoch=1, lac=-1)
    assert held(bookie, 7, 0) == (1, b"a", 1)
    assert held(bookie, 7, 3) == (1, b"bcd", 4)
    with pytest.raises(NoSuchEntry):
        bookie.replicas.read(7, 1)  # striping: not every id is here
    assert bookie.replicas.entries(7, 0, 10, limit=100) == [(0, 1), (3, 1)]
    assert bookie.replicas.ledger_ids() == [7]


def test_a_replica_and_a_standalone_ledger_with_the_same_id_do_not_meet(bookie: Bookie):
    lid = bookie.create_ledger(password="", metadata={}).result(T).ledger_id
    bookie.append(lid, [(None, (b"standalone",))], password="")[0].result(T)
    add(bookie, lid, 1, entry(0, 1, b"replica"))
    bookie.checkpoint()
    assert bookie.read_entry(lid, 0).payload == b"standalone"
    assert held(bookie, lid, 0)[1] == b"replica"
    bookie.replicas.delete(lid).result(T)
    bookie.checkpoint()
    assert bookie.read_entry(lid, 0).payload == b"standalone"
    assert bookie.get_ledger(lid).state is LedgerState.OPEN


def test_an_add_below_the_fenced_epoch_is_refused_and_changes_nothing(bookie: Bookie):
    add(bookie, 1, 1, entry(0, 1, b"old"), lac=-1)
    assert bookie.replicas.fence(1, 3).result(T) == ReplicaState(3, -1)
    with pytest.raises(ReplicaFenced) as refused:
        add(bookie, 1, 2, entry(1, 2, b"late"), lac=0)
    assert (refused.value.fenced_epoch, refused.value.lac) == (3, -1)
    with pytest.raises(NoSuchEntry):
        bookie.replicas.read(1, 1)
    assert bookie.replicas.state(1) == ReplicaState(3, -1)
    with pytest.raises(ReplicaFenced):
        bookie.replicas.fence(1, 2).result(T)
    # The fence's own epoch is accepted, and an add of a newer epoch fences too.
    add(bookie, 1, 3, entry(1, 3, b"new"), lac=0)
    add(bookie, 1, 5, entry(2, 5, b"newer"), lac=1)
    assert bookie.replicas.state(1) == ReplicaState(5, 1)


def test_the_lac_is_the_max_piggybacked(bookie: Bookie):
    add(bookie, 2, 1, entry(0, 1, b"x"), lac=4)
    add(bookie, 2, 1, entry(1, 1, b"y"), lac=2)
    assert bookie.replicas.state(2).lac == 4
    assert bookie.replicas.read(2, 1).lac == 4


def test_a_lower_epoch_is_replaced_a_higher_one_kept(bookie: Bookie):
    add(bookie, 3, 1, entry(0, 1, b"stale at 1"))
    bookie.checkpoint()  # the stale bytes now sit in an entry log
    add(bookie, 3, 2, entry(0, 2, b"recovered at 2"))
    assert held(bookie, 3, 0)[:2] == (2, b"recovered at 2")
    bookie.checkpoint()
    assert held(bookie, 3, 0)[:2] == (2, b"recovered at 2")
    # A copy at a higher epoch than the fence, then a late add below it: kept.
    bookie.replicas.copy(3, [entry(1, 4, b"copied at 4")]).result(T)
    assert bookie.replicas.state(3).fenced_epoch == 2  # copies fence nothing
    add(bookie, 3, 3, entry(1, 3, b"late at 3"), entry(2, 3, b"new at 3"))
    assert held(bookie, 3, 1)[:2] == (4, b"copied at 4")
    assert held(bookie, 3, 2)[:2] == (3, b"new at 3")


def test_a_resend_at_the_same_epoch_is_answered_again(bookie: Bookie):
    add(bookie, 4, 1, entry(0, 1, b"once"))
    add(bookie, 4, 1, entry(0, 1, b"once"))
    assert held(bookie, 4, 0)[:2] == (1, b"once")
    assert bookie.replicas.entries(4, 0, 0, limit=10) == [(0, 1)]


def test_copies_are_not_fence_checked(bookie: Bookie):
    bookie.replicas.fence(5, 9).result(T)
    bookie.replicas.copy(5, [entry(0, 2, b"committed")]).result(T)
    assert held(bookie, 5, 0)[:2] == (2, b"committed")
    assert bookie.replicas.state(5) == ReplicaState(9, -1)


def test_a_fence_of_an_unknown_replica_creates_it_durably(data_dir: Path):
    settings = small_engine_settings(data_dir)
    b = Bookie.open(settings)
    try:
        b.replicas.fence(6, 2).result(T)
    finally:
        b.close()
    reopened = Bookie.open(settings)
    try:
        assert reopened.replicas.state(6) == ReplicaState(2, -1)
        with pytest.raises(ReplicaFenced):
            reopened.replicas.add(6, [entry(0, 1, b"x")], epoch=1, lac=-1).result(T)
    finally:
        reopened.close()


def test_listing_pages_over_cache_and_index(bookie: Bookie):
    add(bookie, 8, 1, *(entry(i, 1, b"e%d" % i) for i in range(0, 20, 2)))
    bookie.checkpoint()
    add(bookie, 8, 1, *(entry(i, 1, b"e%d" % i) for i in range(20, 30, 3)))
    listed = bookie.replicas.entries(8, 0, 100, limit=100)
    assert [e for e, _ in listed] == [*range(0, 20, 2), 20, 23, 26, 29]
    assert bookie.replicas.entries(8, 5, 21, limit=3) == [(6, 1), (8, 1), (10, 1)]
    assert bookie.replicas.entries(99, 0, 10, limit=10) == []


def test_delete_drops_entries_fence_and_lac_and_refuses_a_late_add_until_a_checkpoint(
        bookie: Bookie):
    add(bookie, 9, 2, entry(0, 2, b"gone"), lac=0)
    bookie.replicas.delete(9).result(T)
    assert bookie.replicas.ledger_ids() == []
    assert bookie.replicas.state(9) == ReplicaState(0, -1)
    with pytest.raises(NoSuchEntry):
        bookie.replicas.read(9, 0)
    with pytest.raises(NoSuchLedger):
        add(bookie, 9, 2, entry(1, 2, b"late"))
    bookie.checkpoint()
    add(bookie, 9, 3, entry(1, 3, b"a new replica"))
    assert bookie.replicas.entries(9, 0, 5, limit=5) == [(1, 3)]


def test_a_read_only_bookie_refuses_adds_and_copies_but_fences(bookie: Bookie):
    bookie.set_read_only(True)
    with pytest.raises(ReadOnly):
        add(bookie, 10, 1, entry(0, 1, b"x"))
    with pytest.raises(ReadOnly):
        bookie.replicas.copy(10, [entry(0, 1, b"x")])
    assert bookie.replicas.fence(10, 1).result(T).fenced_epoch == 1


def test_replicas_survive_a_restart_and_journal_replay(data_dir: Path):
    """The checkpoint fails (latched broken) so the restart rebuilds every replica
    from the journal; a first restart after a clean close reads the index."""
    armed = {"on": False}

    def fail(step: CheckpointStep) -> None:
        if armed["on"] and step is CheckpointStep.ENTRIES_WRITTEN:
            raise DeviceBroken("injected")

    settings = small_engine_settings(data_dir)
    b = Bookie.open(settings, checkpoint_hook=fail)
    try:
        add(b, 11, 1, entry(0, 1, b"zero"), entry(1, 1, b"one"), lac=-1)
        b.checkpoint()  # these two are in the index
        add(b, 11, 2, entry(1, 2, b"one at 2"), entry(5, 2, b"five"), lac=1)
        b.replicas.fence(12, 4).result(T)
        b.replicas.copy(13, [entry(0, 3, b"copy")]).result(T)
        add(b, 14, 1, entry(0, 1, b"deleted"))
        b.replicas.delete(14).result(T)
        armed["on"] = True
        with pytest.raises(DeviceBroken):
            b.checkpoint()
    finally:
        b.close()
    for _ in range(2):
        reopened = Bookie.open(settings)
        try:
            assert reopened.replicas.ledger_ids() == [11, 12, 13]
            assert reopened.replicas.state(11) == ReplicaState(2, 1)
            assert held(reopened, 11, 0)[:2] == (1, b"zero")
            assert held(reopened, 11, 1)[:2] == (2, b"one at 2")
            assert held(reopened, 11, 5)[:2] == (2, b"five")
            assert reopened.replicas.state(12) == ReplicaState(4, -1)
            assert held(reopened, 13, 0)[:2] == (3, b"copy")
        finally:
            reopened.close()


def test_compaction_never_points_the_index_at_a_replaced_entry(data_dir: Path):
    """Compaction copied an entry (the old epoch's bytes); a higher epoch replaced
    it and was flushed before compaction committed: the index keeps the
    replacement, and the relocation is dropped."""
    b = Bookie.open(small_engine_settings(data_dir))
    try:
        add(b, 15, 1, entry(0, 1, b"old" * 100))
        b.checkpoint()
        storage_id = 15 | 1 << 63
        relocations = b.relocations
        old = relocations.location_of(storage_id, 0)
        stored, crc = relocations.entry_log.read(old, storage_id, 0)
        copy = relocations.entry_log.append(storage_id, 0, stored, crc)  # what compaction does
        relocations.entry_log.sync()
        add(b, 15, 2, entry(0, 2, b"new"))
        b.checkpoint()
        replaced = relocations.location_of(storage_id, 0)
        assert relocations.commit([Relocation(storage_id, 0, old, copy)]) == 0
        assert relocations.location_of(storage_id, 0) == replaced
        assert held(b, 15, 0)[:2] == (2, b"new")
        # An entry nobody replaced is relocated as before.
        add(b, 16, 1, entry(0, 1, b"kept"))
        b.checkpoint()
        at = relocations.location_of(16 | 1 << 63, 0)
        stored, crc = relocations.entry_log.read(at, 16 | 1 << 63, 0)
        moved = relocations.entry_log.append(16 | 1 << 63, 0, stored, crc)
        relocations.entry_log.sync()
        assert relocations.commit([Relocation(16 | 1 << 63, 0, at, moved)]) == 1
        assert held(b, 16, 0)[:2] == (1, b"kept")
    finally:
        b.close()


def test_a_non_blocking_add_runs_when_nothing_waits_and_else_changes_nothing(data_dir: Path):
    """``block=False`` (the node's event loop serving another node's add) never
    waits: entries of an epoch below one the replica holds, which are read back
    first, and a write cache with no room raise WouldBlock before anything is
    journaled; the blocking call then succeeds."""
    settings = dataclasses.replace(
        small_engine_settings(data_dir),
        write_cache=WriteCacheSettings(size_bytes=64 * KiB, wait_s_max=0.2,
                                       flush_interval_s=60.0))
    b = Bookie.open(settings)
    try:
        state = b.replicas.add(9, [entry(0, 2, b"at 2")], epoch=2, lac=-1, block=False)
        assert state.result(T) == ReplicaState(fenced_epoch=2, lac=-1)
        appended = b.journal.appended_offset
        with pytest.raises(WouldBlock):  # epoch 1 < 2 held: its entries are read back
            b.replicas.add(9, [entry(1, 1, b"late at 1")], epoch=1, lac=-1, block=False)
        assert b.journal.appended_offset == appended
        with pytest.raises(ReplicaFenced):
            add(b, 9, 1, entry(1, 1, b"late at 1"))
        # Holding the checkpoint lock stands for a flush that cannot finish.
        with b._checkpointer.lock:
            with pytest.raises(WouldBlock):
                for i in range(1, 100):
                    appended = b.journal.appended_offset
                    b.replicas.add(9, [entry(i, 2, b"x" * (8 * KiB))], epoch=2, lac=-1,
                                   block=False)
            assert b.journal.appended_offset == appended
        assert add(b, 9, 2, entry(i, 2, b"after")) == ReplicaState(fenced_epoch=2, lac=-1)
        assert held(b, 9, i)[:2] == (2, b"after")
    finally:
        b.close()
