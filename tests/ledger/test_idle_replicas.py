"""Idle replicas are kept compact (issue 28, a million ledgers per node): one packed
int per replica in ``ReplicaTable``, a ``LiveReplica`` only from a change until the
next checkpoint takes the table's changes.  The packing round-trips every value a
replica record holds, reads and LAC hints leave a replica compact, and a store
that looked entries up outside the add lock still retries when the replica
changed meanwhile, even if it was packed again since."""

from __future__ import annotations

import gc
import sys
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from common.errors import InvariantViolation
from ledger import Bookie, ReplicaEntry, ReplicaState
from ledger._events import ReplicaAddEvent, ReplicaDeleteEvent, ReplicaFenceEvent, replica_stored
from ledger._replica_table import (
    ReplicaRecord,
    ReplicaTable,
    pack_replica,
    unpack_replica,
)
from ledger._storage import EntryStorage
from tests.conftest import small_engine_settings

T = 10.0
U64_MAX = 2**64 - 1
I64_MAX = 2**63 - 1

# (fenced_epoch, lac, max_entry_epoch): the record's bounds (u64, i64 from -1, u64)
# and values either side of the field widths' boundaries.
EXTREMES = [
    (0, -1, 0), (1, 0, 1), (0, I64_MAX, 0), (U64_MAX, -1, 0), (0, -1, U64_MAX),
    (U64_MAX, I64_MAX, U64_MAX), (2**32, 2**32 - 1, 2**32 + 1), (2**32 - 1, 2**31, 1),
    (3, 2**44, 2), (1, 2**62, U64_MAX - 1), (127, 128, 255), (1 << 63, 1, 1 << 63),
]


@pytest.mark.parametrize("state", EXTREMES)
def test_the_packing_round_trips_every_value_a_record_holds(
        state: tuple[int, int, int]) -> None:
    assert unpack_replica(pack_replica(*state)) == state
    record = ReplicaRecord(7, *state)
    table = ReplicaTable([record])
    assert table.compact_count() == 1
    replica = table.get(7)
    assert replica is not None and replica.record() == record
    # Live, then packed again by the checkpoint that takes it.
    table.apply(ReplicaFenceEvent(7, 1))
    assert table.compact_count() == 0
    records, deleted = table.take_changes()
    expected = ReplicaRecord(7, max(1, state[0]), state[1], state[2])
    assert records == [expected] and deleted == set()
    assert table.compact_count() == 1
    again = table.get(7)
    assert again is not None and again.record() == expected
    assert ReplicaRecord.decode(7, expected.encode()) == expected


@pytest.mark.parametrize("state", [(-1, -1, 0), (2**64, -1, 0), (0, -2, 0), (0, 2**63, 0),
                                   (0, -1, -1), (0, -1, 2**64)])
def test_a_state_no_record_could_hold_is_refused(state: tuple[int, int, int]) -> None:
    with pytest.raises(InvariantViolation):
        pack_replica(*state)


def test_the_usual_replica_packs_into_the_smallest_int_but_one() -> None:
    # A few epochs, a LAC in the billions: below 2^60, so no bigger than any id.
    assert sys.getsizeof(pack_replica(5, 10**10, 5)) <= sys.getsizeof(2**59)


def test_an_idle_replica_costs_one_int_beyond_its_dict_slot() -> None:
    count = 20_000
    ids = [10**6 + i for i in range(count)]
    gc.collect()
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        slots_only = dict.fromkeys(ids)
        slot_bytes = tracemalloc.get_traced_memory()[0] - start
        del slots_only
        gc.collect()
        start = tracemalloc.get_traced_memory()[0]
        table = ReplicaTable(ReplicaRecord(i, 1, 300 + i % 1000, 1) for i in ids)
        table_bytes = tracemalloc.get_traced_memory()[0] - start
    finally:
        tracemalloc.stop()
    assert table.compact_count() == count
    # One packed int each (a LiveReplica and its LAC would be three times that);
    # the slack covers the dict's growth steps differing from dict.fromkeys'.
    per_replica = (table_bytes - slot_bytes) / count
    assert per_replica <= sys.getsizeof(2**59) + 8, per_replica


def _add_event(ledger_id: int, epoch: int, entry_id: int, lac: int = -1) -> ReplicaAddEvent:
    stored = replica_stored(epoch, 1, b"x")
    return ReplicaAddEvent(ledger_id, epoch, lac, (entry_id,), (stored,), (0,))


def test_a_version_seen_changes_with_any_change_even_one_packed_again() -> None:
    table = ReplicaTable([ReplicaRecord(1, 1, 0, 1), ReplicaRecord(2, 1, 0, 1)])

    def version(ledger_id: int) -> int:
        replica = table.get(ledger_id)
        assert replica is not None
        return replica.version

    seen = version(1)
    assert version(1) == seen  # left alone
    table.apply(_add_event(1, 1, 1))
    live = version(1)
    assert live != seen  # changed, live
    table.take_changes()
    assert version(1) not in (seen, live)  # changed and packed again: no ABA
    packed = version(1)
    table.note_lac(1, 5)  # a hint, not a change a store looks entries up for
    assert version(1) == packed
    table.apply(ReplicaDeleteEvent(1))
    table.apply(ReplicaFenceEvent(1, 1))
    table.take_changes()
    assert version(1) != packed  # deleted and created again, packed again
    # Another replica's packing only makes a store retry for nothing.
    other = version(2)
    table.apply(_add_event(1, 1, 2))
    assert version(2) == other
    table.take_changes()
    assert version(2) != other


@pytest.fixture
def bookie(tmp_path: Path) -> Iterator[Bookie]:
    b = Bookie.open(small_engine_settings(tmp_path / "data"))
    yield b
    b.close()


def entry(entry_id: int, epoch: int, payload: bytes) -> ReplicaEntry:
    return ReplicaEntry(entry_id, epoch, payload, len(payload) * (entry_id + 1))


def _table(bookie: Bookie) -> ReplicaTable:
    return bookie._table.replicas  # the table's own counts: what these tests are about


def test_a_change_turns_one_replica_live_until_the_next_checkpoint(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    b = Bookie.open(small_engine_settings(data_dir))
    try:
        for lid in range(1, 6):
            b.replicas.add(lid, [entry(0, 2, b"a"), entry(1, 2, b"b")], epoch=2,
                           lac=0).result(T)
        assert _table(b).compact_count() == 0
        b.checkpoint()
        assert _table(b).compact_count() == 5
        # Reads, listings and LAC hints leave them compact.
        assert b.replicas.state(3) == ReplicaState(2, 0)
        assert b.replicas.read(3, 1).payload == b"b"
        assert b.replicas.entries(3, 0, 9, limit=10) == [(0, 2), (1, 2)]
        assert b.replicas.holds(3) and not b.replicas.holds(9)
        assert b.replicas.note_lac(3, 1) == 1
        assert b.replicas.note_lac(3, 0) == 1  # the max is kept
        assert b.replicas.note_lac(9, 4) == -1  # no replica, none created
        assert b.replicas.state(3) == ReplicaState(2, 1)
        assert b.replicas.read(3, 1).lac == 1
        assert _table(b).compact_count() == 5
        # A change turns exactly that one live; the rules are unchanged.
        assert b.replicas.fence(4, 5).result(T) == ReplicaState(5, 0)
        assert _table(b).compact_count() == 4
        b.replicas.copy(3, [entry(2, 1, b"c")]).result(T)
        assert b.replicas.state(3) == ReplicaState(2, 1)  # the hint survived waking
        assert _table(b).compact_count() == 3
        b.checkpoint()
        assert _table(b).compact_count() == 5
        assert b.replicas.state(4) == ReplicaState(5, 0)
        b.replicas.delete(5).result(T)
        assert len(_table(b)) == 4 and _table(b).compact_count() == 4
    finally:
        b.close()
    b = Bookie.open(small_engine_settings(data_dir))
    try:
        assert _table(b).compact_count() == 4
        assert b.replicas.ledger_ids() == [1, 2, 3, 4]
        assert b.replicas.state(4) == ReplicaState(5, 0)
        assert b.replicas.state(3) == ReplicaState(2, 1)  # noted, then persisted by the copy
        assert b.replicas.entries(3, 0, 9, limit=10) == [(0, 2), (1, 2), (2, 1)]
    finally:
        b.close()


class _RacingStorage:
    """The bookie's storage, which runs ``race`` right after the first lookup a
    store makes outside the add lock: a change landing in that window, which a
    real part cannot be made to produce on demand."""

    def __init__(self, storage: EntryStorage, race: Callable[[], None]) -> None:
        self._storage = storage
        self._race: Callable[[], None] | None = race
        self.lookups = 0

    def get(self, storage_id: int, entry_id: int, *, cached: bool) -> tuple[bytes, int]:
        found = self._storage.get(storage_id, entry_id, cached=cached)
        self.lookups += 1
        race, self._race = self._race, None
        if race is not None:
            race()
        return found

    def __getattr__(self, name: str) -> object:
        return getattr(self._storage, name)


@pytest.mark.parametrize("packed_before", [False, True])
@pytest.mark.parametrize("packed_in_race", [False, True])
def test_a_store_racing_a_change_retries(bookie: Bookie, packed_before: bool,
                                         packed_in_race: bool) -> None:
    """A copy at epoch 2 looks entry 0 up (epoch 1 then); before it takes the add
    lock, a writer at epoch 3 replaces entry 0 (and a checkpoint may pack the
    replica again).  The copy must look again and leave epoch 3's entry alone."""
    bookie.replicas.add(9, [entry(0, 1, b"old")], epoch=1, lac=-1).result(T)
    bookie.replicas.add(9, [entry(5, 3, b"top")], epoch=3, lac=-1).result(T)
    if packed_before:
        bookie.checkpoint()
    assert _table(bookie).compact_count() == (1 if packed_before else 0)

    def race() -> None:
        bookie.replicas.add(9, [entry(0, 3, b"new")], epoch=3, lac=-1).result(T)
        if packed_in_race:
            bookie.checkpoint()
            assert _table(bookie).compact_count() == 1

    racing = _RacingStorage(bookie.replicas._storage, race)
    bookie.replicas._storage = racing  # type: ignore[assignment]
    bookie.replicas.copy(9, [entry(0, 2, b"copy")]).result(T)
    assert racing.lookups == 2  # looked up again once the change was seen
    stored = bookie.replicas.read(9, 0)
    assert (stored.epoch, stored.payload) == (3, b"new")
