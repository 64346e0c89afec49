"""Child of the replay benchmark: fill the journal, then exit without closing
(``os._exit``), as a crash would, so the next open must replay it all."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ledger import Bookie

from .engine_bench import replay_settings


def main() -> None:
    data_dir, device, total = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
    bookie = Bookie.open(replay_settings(data_dir, device, total))
    lid = bookie.create_ledger(password="", metadata={}).result().ledger_id
    payload = os.urandom(64 * 1024)
    futures = [bookie.append(lid, [(None, (payload,))], password="")[0]
               for _ in range(total // len(payload))]
    for f in futures:
        f.result()
    os._exit(0)


if __name__ == "__main__":
    main()
