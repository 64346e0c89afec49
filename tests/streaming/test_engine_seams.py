"""The engine calls append streams rely on, on a real Bookie (journal file,
entry logs, RocksDB): ``Bookie.authorize`` (the upgrade's password check),
``Bookie.append`` with an expected first id (exactly-once resume) and with
several batches (the messages one socket read brought in, in one call)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from common.errors import EntryConflict, EntryTooLarge, NoSuchLedger, Unauthorized, WouldBlock
from common.units import KiB
from ledger import Bookie, LedgerState, kdf_runs
from tests.conftest import create_scrypt_ledger, small_engine_settings

T = 10.0  # seconds a future may take before the test fails


@pytest.fixture
def bookie(tmp_path: Path) -> Iterator[Bookie]:
    opened = Bookie.open(small_engine_settings(tmp_path / "data"))
    try:
        yield opened
    finally:
        opened.close()


def test_authorize_checks_the_ledger_and_its_password(bookie: Bookie):
    lid = bookie.create_ledger(password="pw", metadata={}).result(T).ledger_id
    assert bookie.authorize(lid, password="pw", block=False).state == LedgerState.OPEN
    with pytest.raises(Unauthorized):
        bookie.authorize(lid, password="nope")
    with pytest.raises(NoSuchLedger):
        bookie.authorize(lid + 1, password="pw")


def test_authorize_without_blocking_after_a_restart(tmp_path: Path):
    """A keyed hash is checked without blocking, after a restart too, and no
    KDF runs; a scrypt hash (a ledger created before keyed hashes) not verified
    since the restart refuses to block, pays scrypt once, then is remembered."""
    settings = small_engine_settings(tmp_path / "data")
    first = Bookie.open(settings)
    keyed = first.create_ledger(password="pw", metadata={}).result(T).ledger_id
    legacy = create_scrypt_ledger(first, "old")
    first.close()
    reopened = Bookie.open(settings)  # its password cache starts empty
    try:
        before = kdf_runs()
        reopened.authorize(keyed, password="pw", block=False)
        with pytest.raises(Unauthorized):
            reopened.authorize(keyed, password="nope", block=False)
        assert kdf_runs() == before
        with pytest.raises(WouldBlock):
            reopened.authorize(legacy, password="old", block=False)
        reopened.authorize(legacy, password="old")  # the full (scrypt) check
        reopened.authorize(legacy, password="old", block=False)
        assert kdf_runs() == before + 1
    finally:
        reopened.close()


def test_batch_at_the_next_id_appends_and_elsewhere_conflicts(bookie: Bookie):
    lid = bookie.create_ledger(password="pw", metadata={}).result(T).ledger_id
    added = bookie.append(lid, [(0, [b"a", b"b"])], password="pw")[0].result(T)
    assert (added.first_entry_id, added.last_entry_id, added.already_present) == (0, 1, False)
    with pytest.raises(EntryConflict):
        bookie.append(lid, [(3, [b"c"])], password="pw")[0]
    assert bookie.get_ledger(lid).last_add_confirmed == 1


def test_batch_already_stored_is_acknowledged_again_without_appending(bookie: Bookie):
    lid = bookie.create_ledger(password="pw", metadata={}).result(T).ledger_id
    bookie.append(lid, [(None, [b"a", b"b", b"c"])], password="pw")[0].result(T)
    with pytest.raises(WouldBlock):  # a read-back: never on the event loop
        bookie.append(lid, [(1, [b"b", b"c"])], password="pw", block=False)[0]
    again = bookie.append(lid, [(1, [b"b", b"c"])], password="pw")[0].result(T)
    assert (again.first_entry_id, again.last_entry_id, again.already_present) == (1, 2, True)
    assert bookie.get_ledger(lid).last_add_confirmed == 2


@pytest.mark.parametrize(("first", "payloads"), [
    (1, [b"b", b"x"]),  # another payload at 2
    (2, [b"c", b"d"]),  # runs past what is stored
])
def test_batch_retry_that_does_not_match_what_is_stored_conflicts(bookie: Bookie, first: int,
                                                                  payloads: list[bytes]):
    lid = bookie.create_ledger(password="pw", metadata={}).result(T).ledger_id
    bookie.append(lid, [(None, [b"a", b"b", b"c"])], password="pw")[0].result(T)
    with pytest.raises(EntryConflict):
        bookie.append(lid, [(first, payloads)], password="pw")[0]
    assert bookie.get_ledger(lid).last_add_confirmed == 2


# --- Bookie.append of several batches: a stream's queued messages in one call ------------------


def _records(bookie: Bookie) -> int:
    return bookie.journal.statistics().record_count


def _payloads(bookie: Bookie, lid: int) -> list[bytes]:
    return [e.payload for e in bookie.read_entries(lid)]


def test_batches_in_one_call_are_one_journal_record_resolving_together_in_order(
        tmp_path: Path):
    settings = small_engine_settings(tmp_path / "data")
    bookie = Bookie.open(settings)
    lid = bookie.create_ledger(password="pw", metadata={}).result(T).ledger_id
    batches: list[tuple[int | None, list[bytes]]] = [
        (None, [b"a"]), (1, [b"b", b"c"]), (None, [b""]), (4, [b"d" * 5000, b"e"])]
    before = _records(bookie)
    pendings = bookie.append(lid, batches, password="pw", block=False)
    assert len(pendings) == 4
    assert _records(bookie) - before == 1  # consecutive ids of one ledger: one ADD
    assert len({id(p.future) for p in pendings}) == 1  # one completion for the run
    results = [p.result(T) for p in pendings]
    assert [(r.first_entry_id, r.last_entry_id) for r in results] == [
        (0, 0), (1, 2), (3, 3), (4, 5)]
    assert all(r.last_add_confirmed == 5 and not r.already_present for r in results)
    bookie.close()
    reopened = Bookie.open(settings)  # the records replay into the same entries
    try:
        assert _payloads(reopened, lid) == [b"a", b"b", b"c", b"", b"d" * 5000, b"e"]
    finally:
        reopened.close()


def test_a_run_over_the_batch_limits_is_cut_into_records_within_them_at_batch_bounds(
        tmp_path: Path):
    """Every record fits the limits one batch is held to (what the settings check
    makes fit the journal), and no batch is split across two records."""
    base = small_engine_settings(tmp_path / "data")
    settings = dataclasses.replace(base, limits=dataclasses.replace(
        base.limits, batch_entry_count_max=3, batch_size_bytes_max=64 * KiB,
        entry_size_bytes_max=64 * KiB))
    bookie = Bookie.open(settings)
    lid = bookie.create_ledger(password="pw", metadata={}).result(T).ledger_id
    batches: list[tuple[int | None, list[bytes]]] = [
        (None, [b"a", b"b"]), (None, [b"c"]), (None, [b"d", b"e"]),  # 3 entries, then 2
        (None, [b"f" * (40 * KiB)]), (None, [b"g" * (40 * KiB)]),  # 64 KiB: one each
        (None, [b"h"])]
    before = _records(bookie)
    pendings = bookie.append(lid, batches, password="pw")
    assert [p.result(T).last_entry_id for p in pendings] == [1, 2, 4, 5, 6, 7]
    # [ab c] [de f] [g h]: cut where the next batch would pass a limit.
    assert _records(bookie) - before == 3
    bookie.close()
    reopened = Bookie.open(settings)  # replayed from the journal
    try:
        assert _payloads(reopened, lid) == [b"a", b"b", b"c", b"d", b"e", b"f" * (40 * KiB),
                                            b"g" * (40 * KiB), b"h"]
    finally:
        reopened.close()


def test_a_run_ends_before_a_conflicting_batch_which_raises_when_it_comes_first(
        bookie: Bookie):
    lid = bookie.create_ledger(password="pw", metadata={}).result(T).ledger_id
    batches: list[tuple[int | None, list[bytes]]] = [
        (None, [b"a"]), (1, [b"b"]), (7, [b"x"]), (None, [b"y"])]
    pendings = bookie.append(lid, batches, password="pw")
    assert [p.result(T).last_entry_id for p in pendings] == [0, 1]
    with pytest.raises(EntryConflict):
        bookie.append(lid, batches[2:], password="pw")
    assert bookie.get_ledger(lid).last_add_confirmed == 1
    assert _payloads(bookie, lid) == [b"a", b"b"]  # nothing after the conflict


def test_a_run_ends_before_a_batch_over_the_limits(bookie: Bookie):
    lid = bookie.create_ledger(password="pw", metadata={}).result(T).ledger_id
    too_large = b"z" * (256 * 1024 + 1)  # over MAX_ENTRY_SIZE
    pendings = bookie.append(lid, [(None, [b"a"]), (None, [too_large]), (None, [b"b"])],
                             password="pw")
    assert [p.result(T).last_entry_id for p in pendings] == [0]
    with pytest.raises(EntryTooLarge):
        bookie.append(lid, [(None, [too_large]), (None, [b"b"])], password="pw")
    assert _payloads(bookie, lid) == [b"a"]


def test_a_run_ends_before_an_idempotent_retry_which_is_answered_from_what_is_stored(
        bookie: Bookie):
    lid = bookie.create_ledger(password="pw", metadata={}).result(T).ledger_id
    bookie.append(lid, [(None, [b"a", b"b", b"c"])], password="pw")[0].result(T)
    retry: tuple[int | None, list[bytes]] = (1, [b"b", b"c"])
    pendings = bookie.append(lid, [(3, [b"d"]), retry], password="pw", block=False)
    assert [p.result(T).first_entry_id for p in pendings] == [3]
    with pytest.raises(WouldBlock):  # the read-back goes to a worker thread
        bookie.append(lid, [retry], password="pw", block=False)
    (again,) = bookie.append(lid, [retry], password="pw")
    assert again.result(T) == (1, 2, 3, True)
    assert _payloads(bookie, lid) == [b"a", b"b", b"c", b"d"]


def test_a_run_shrinks_to_its_first_batch_when_the_write_cache_holds_only_that(
        tmp_path: Path):
    # 512 KiB of write cache: 256 KiB per buffer.
    bookie = Bookie.open(small_engine_settings(tmp_path / "data", write_cache=512 * KiB))
    try:
        lid = bookie.create_ledger(password="pw", metadata={}).result(T).ledger_id
        bookie.append(lid, [(None, [b"s"])], password="pw")[0].result(T)
        big = [b"1" * (150 * KiB), b"2" * (150 * KiB)]
        pendings = bookie.append(lid, [(None, [big[0]]), (None, [big[1]])], password="pw",
                                 block=False)
        assert [p.result(T).last_entry_id for p in pendings] == [1]
        with pytest.raises(WouldBlock):  # the second waits for a swap
            bookie.append(lid, [(None, [big[1]])], password="pw", block=False)
        (second,) = bookie.append(lid, [(None, [big[1]])], password="pw")
        assert second.result(T).last_entry_id == 2
        assert _payloads(bookie, lid) == [b"s", *big]
    finally:
        bookie.close()
