"""The two engine calls append streams rely on, on a real Bookie (journal file,
entry logs, RocksDB): ``Bookie.authorize`` (the upgrade's password check) and
``Bookie.add_entries(expected_first_entry_id=...)`` (exactly-once resume)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from common.errors import EntryConflict, NoSuchLedger, Unauthorized, WouldBlock
from ledger import Bookie, LedgerState
from tests.conftest import small_engine_settings

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


def test_authorize_without_blocking_refuses_a_password_not_verified_yet(tmp_path: Path):
    settings = small_engine_settings(tmp_path / "data")
    first = Bookie.open(settings)
    lid = first.create_ledger(password="pw", metadata={}).result(T).ledger_id
    first.close()
    reopened = Bookie.open(settings)  # its password cache starts empty
    try:
        with pytest.raises(WouldBlock):
            reopened.authorize(lid, password="pw", block=False)
        reopened.authorize(lid, password="pw")  # the full (scrypt) check
        reopened.authorize(lid, password="pw", block=False)
    finally:
        reopened.close()


def test_batch_at_the_next_id_appends_and_elsewhere_conflicts(bookie: Bookie):
    lid = bookie.create_ledger(password="pw", metadata={}).result(T).ledger_id
    added = bookie.add_entries(lid, [b"a", b"b"], password="pw",
                               expected_first_entry_id=0).result(T)
    assert (added.first_entry_id, added.last_entry_id, added.already_present) == (0, 1, False)
    with pytest.raises(EntryConflict):
        bookie.add_entries(lid, [b"c"], password="pw", expected_first_entry_id=3)
    assert bookie.get_ledger(lid).last_add_confirmed == 1


def test_batch_already_stored_is_acknowledged_again_without_appending(bookie: Bookie):
    lid = bookie.create_ledger(password="pw", metadata={}).result(T).ledger_id
    bookie.add_entries(lid, [b"a", b"b", b"c"], password="pw").result(T)
    with pytest.raises(WouldBlock):  # a read-back: never on the event loop
        bookie.add_entries(lid, [b"b", b"c"], password="pw", expected_first_entry_id=1,
                           block=False)
    again = bookie.add_entries(lid, [b"b", b"c"], password="pw",
                               expected_first_entry_id=1).result(T)
    assert (again.first_entry_id, again.last_entry_id, again.already_present) == (1, 2, True)
    assert bookie.get_ledger(lid).last_add_confirmed == 2


@pytest.mark.parametrize(("first", "payloads"), [
    (1, [b"b", b"x"]),  # another payload at 2
    (2, [b"c", b"d"]),  # runs past what is stored
])
def test_batch_retry_that_does_not_match_what_is_stored_conflicts(bookie: Bookie, first: int,
                                                                  payloads: list[bytes]):
    lid = bookie.create_ledger(password="pw", metadata={}).result(T).ledger_id
    bookie.add_entries(lid, [b"a", b"b", b"c"], password="pw").result(T)
    with pytest.raises(EntryConflict):
        bookie.add_entries(lid, payloads, password="pw", expected_first_entry_id=first)
    assert bookie.get_ledger(lid).last_add_confirmed == 2
