"""Ledger listing at a million ledgers: the cost of one keyset page
(``after=<id>&limit=100``, what ``GET /api/v1/ledgers`` and the console's ledger
list ask for) at the start, the middle and the end of the ids, against the first
page of the same table in the same run (the limit: a listing that stays fast
costs the same anywhere).  Then filtered pages: by state (scans until the page is
full), and by a metadata pair that one ledger in 1,000 has, whose pages are
bounded by the ledgers they look at (``_FILTERED_SCAN_MAX``).

The table is the engine's own (``ledger._table.LedgerTable``, which
``Bookie.list_ledgers`` pages), filled from records directly: creating a million
ledgers through the bookie would spend hours in scrypt, and the listing does
not care how they came.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import Any

from ledger import LedgerFilter, LedgerInfo, LedgerState
from ledger._ledger_record import LedgerRecord
from ledger._password import PasswordHash
from ledger._table import _FILTERED_SCAN_MAX, LedgerTable

from ._harness import Row

PAGE = 100
RARE_EVERY = 1000


def build(count: int) -> LedgerTable:
    password = PasswordHash(salt=b"\0" * 16, digest=b"\0" * 32)
    now = time.time()
    records = (LedgerRecord(
        ledger_id=i, state=LedgerState.CLOSED if i % 2 else LedgerState.OPEN,
        password=password, last_entry_id=9, length=1000, created_at=now,
        closed_at=now if i % 2 else None,
        metadata={"topic": "rare" if i % RARE_EVERY == 0 else f"t{i % 97}"})
        for i in range(count))
    # As a restart reads them: closed ones stay packed records (dormant).
    return LedgerTable(((r.ledger_id, r.encode()) for r in records), next_ledger_id=count,
                       ledger_count_max=count + 1)


def _time_ms(call: Callable[[], Any], repeat: int) -> float:
    """The median of ``repeat`` timed calls, in ms."""
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        call()
        times.append((time.perf_counter() - started) * 1000)
    return sorted(times)[len(times) // 2]


def run(*, quick: bool) -> list[Row]:
    count = 100_000 if quick else 1_000_000
    repeat = 5 if quick else 21
    table = build(count)

    def page(after: int | None, where: LedgerFilter | None = None,
             ) -> tuple[list[LedgerInfo], int | None]:
        return table.page(state=None, after=after, limit=PAGE, where=where)

    first = _time_ms(lambda: page(None), repeat)
    rows = [Row("listing_page", {"ledgers": count, "at": "first page"}, first, "ms",
                limit=first, limit_name="first page")]
    for at, after in (("middle", count // 2), ("last full page", count - PAGE - 1)):
        rows.append(Row("listing_page", {"ledgers": count, "at": at},
                        _time_ms(partial(page, after), repeat), "ms",
                        limit=first, limit_name="first page"))
    closed = LedgerFilter(state=LedgerState.CLOSED)
    rows.append(Row("listing_page_filtered", {"ledgers": count, "filter": "state=CLOSED (1 in 2)",
                                              "at": "middle"},
                    _time_ms(lambda: page(count // 2, closed), repeat), "ms",
                    limit=first, limit_name="first page, unfiltered"))
    rare = LedgerFilter(metadata={"topic": "rare"})
    found, _ = page(count // 2, rare)
    rows.append(Row("listing_page_filtered",
                    {"ledgers": count, "filter": f"metadata (1 in {RARE_EVERY})",
                     "at": "middle"},
                    _time_ms(lambda: page(count // 2, rare), repeat), "ms",
                    limit=first, limit_name="first page, unfiltered",
                    extra={"ledgers_found": len(found),
                           "ledgers_looked_at_max": _FILTERED_SCAN_MAX}))
    return rows
