"""Corruption-test child: append entries, then die without a clean shutdown
(``os._exit``), leaving them only in the journal. Prints the ledger id, the
journal offset where each add's record ends, and the appended offset."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ledger import Bookie
from tests.conftest import small_engine_settings


def main() -> None:
    data_dir, count = Path(sys.argv[1]), int(sys.argv[2])
    settings = small_engine_settings(data_dir, flush_interval_s=3600,
                                     write_cache=64 * 1024 * 1024)
    bookie = Bookie.open(settings)
    lid = bookie.create_ledger(password="", metadata={}).result(30).ledger_id
    bookie.checkpoint()  # the ledger itself is in the index; its entries are not
    ends = []
    for i in range(count):
        bookie.append(lid, [(None, (f"entry-{i}".encode() * 50,))], password="")[0].result(30)
        ends.append(bookie.journal.appended_offset)
    print(lid, bookie.journal.appended_offset, *ends, flush=True)
    os._exit(0)


if __name__ == "__main__":
    main()
