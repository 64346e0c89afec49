"""Ledger listings: keyset pages filtered by state, offload state and metadata,
and a filtered page's bound on the ledgers it looks at (so a filter that matches
few of a million ledgers answers in bounded time)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ledger import Bookie, LedgerFilter, LedgerState, OffloadState
from ledger import _table as table
from tests.conftest import small_engine_settings

T = 30


@pytest.fixture
def bookie(tmp_path: Path, journal_device: Path | None) -> Iterator[Bookie]:
    b = Bookie.open(small_engine_settings(tmp_path / "data", journal_device))
    yield b
    b.close()


def _all_pages(bookie: Bookie, where: LedgerFilter, limit: int) -> tuple[list[int], int]:
    """Every listed id, following next_after, and how many pages it took."""
    seen: list[int] = []
    after = None
    pages = 0
    while True:
        page, after = bookie.list_ledgers(after=after, limit=limit, where=where)
        pages += 1
        seen.extend(info.ledger_id for info in page)
        if after is None:
            return seen, pages


def test_filters_by_metadata_offload_state_and_state(bookie: Bookie) -> None:
    ids = [bookie.create_ledger(password="", metadata={"team": "blue" if i % 3 else "red",
                                                       "n": str(i)}).result(T).ledger_id
           for i in range(12)]
    bookie.close_ledger(ids[1], password="").result(T)
    blue = [lid for i, lid in enumerate(ids) if i % 3]
    assert _all_pages(bookie, LedgerFilter(metadata={"team": "blue"}), 2)[0] == blue
    both = LedgerFilter(metadata={"team": "blue", "n": "4"})
    assert _all_pages(bookie, both, 5)[0] == [ids[4]]
    closed_blue = LedgerFilter(state=LedgerState.CLOSED, metadata={"team": "blue"})
    assert _all_pages(bookie, closed_blue, 5)[0] == [ids[1]]
    assert _all_pages(bookie, LedgerFilter(offload_state=OffloadState.NONE), 100)[0] == ids
    assert _all_pages(bookie, LedgerFilter(offload_state=OffloadState.FAILED), 100)[0] == []
    # The state argument of a plain listing still narrows a filter's.
    page, _ = bookie.list_ledgers(state=LedgerState.OPEN, limit=100,
                                  where=LedgerFilter(metadata={"n": "1"}))
    assert page == []


def test_a_filtered_page_looks_at_a_bounded_number_of_ledgers(
        bookie: Bookie, monkeypatch: pytest.MonkeyPatch) -> None:
    # The bound made small (it is 20,000): the behaviour, not its size, is tested.
    monkeypatch.setattr(table, "_FILTERED_SCAN_MAX", 10)
    monkeypatch.setattr(table, "_LISTING_STEP", 4)
    ids = [bookie.create_ledger(password="", metadata={"k": "rare" if i == 33 else "common"})
           .result(T).ledger_id for i in range(40)]
    page, after = bookie.list_ledgers(limit=5, where=LedgerFilter(metadata={"k": "rare"}))
    # Ten ledgers looked at, none matched: an empty page that is not the last.
    assert page == [] and after == ids[9]
    seen, pages = _all_pages(bookie, LedgerFilter(metadata={"k": "rare"}), 5)
    assert seen == [ids[33]] and pages == 5
    # A listing by state alone is not bounded that way: it fills its page.
    page, after = bookie.list_ledgers(state=LedgerState.OPEN, limit=30)
    assert [i.ledger_id for i in page] == ids[:30] and after == ids[29]
