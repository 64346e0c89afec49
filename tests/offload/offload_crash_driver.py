"""Child process: offload one ledger while adds go on, and SIGKILL itself right
after a given step.

    python tests/offload/offload_crash_driver.py DATA_DIR LEDGER_ID STEP OCCURRENCE

The S3 endpoint, bucket and segment size come from ``OFFLOAD_TEST_*``
variables, credentials from boto3's chain (``AWS_ACCESS_KEY_ID`` ...).  The
kill happens inside the step hook, so it lands exactly after the
OCCURRENCE-th completion of STEP (no sleeps); exit code 3 means the step was
never reached.  ``STEP name n`` is printed just before the kill, and ``ACK
ledger entry`` for each acknowledged add (``LEDGER id`` first).

Two modes (``OFFLOAD_TEST_MODE``):

- ``sealed`` (default): LEDGER_ID is closed; a thread adds entries to a new
  open ledger all along while it is offloaded.
- ``tier``: LEDGER_ID is open; a thread adds entries to it while it is
  tiered (every chunk ready is uploaded, its tiered entries dropped
  locally), then it is closed (the adds stop) and offloaded, which
  consolidates its chunks.  STEP may name a tiering step (``TierStep``).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from common.errors import LedgerClosed
from ledger import Bookie
from offload import (
    Offloader,
    RemoteLedgerReader,
    S3ObjectStore,
    Step,
    Tierer,
    TierStep,
    make_s3_client,
)
from tests.offload.conftest import PASSWORD, T, add_payload, engine_settings, offload_settings

_emit_lock = threading.Lock()


def emit(line: str) -> None:
    """One whole line per write: two threads print."""
    with _emit_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def parse_step(name: str) -> Step | TierStep:
    return TierStep(name) if name in {s.value for s in TierStep} else Step(name)


def add_until_closed(bookie: Bookie, ledger_id: int) -> None:
    entry_id = bookie.get_ledger(ledger_id).last_add_confirmed + 1
    while True:
        try:
            payload = add_payload(ledger_id, entry_id)
            bookie.append(ledger_id, [(None, (payload,))], password=PASSWORD)[0].result(T)
        except LedgerClosed:
            return
        emit(f"ACK {ledger_id} {entry_id}")
        entry_id += 1


def main() -> None:
    data_dir, ledger_id, step, occurrence = (Path(sys.argv[1]), int(sys.argv[2]),
                                             parse_step(sys.argv[3]), int(sys.argv[4]))
    tiering = os.environ.get("OFFLOAD_TEST_MODE", "sealed") == "tier"
    settings = offload_settings(
        os.environ["OFFLOAD_TEST_BUCKET"], os.environ["OFFLOAD_TEST_ENDPOINT"],
        segment_size_bytes_max=int(os.environ["OFFLOAD_TEST_SEGMENT_MAX"]),
        tier_open_ledgers=tiering)
    seen: Counter[Step | TierStep] = Counter()
    lock = threading.Lock()

    def hook(done: Step | TierStep, _ledger_id: int) -> None:
        with lock:
            seen[done] += 1
            if done is step and seen[done] == occurrence:
                emit(f"STEP {done} {occurrence}")
                os.kill(os.getpid(), signal.SIGKILL)

    store = S3ObjectStore(make_s3_client(settings), settings,
                          list_page_size=int(os.environ.get("OFFLOAD_TEST_PAGE_SIZE", "1000")))
    reader = RemoteLedgerReader(store, settings)
    bookie = Bookie.open(engine_settings(data_dir), remote=reader)
    adds = ledger_id if tiering else bookie.create_ledger(password=PASSWORD,
                                                          metadata={}).result(T).ledger_id
    emit(f"LEDGER {adds}")
    adder = threading.Thread(target=add_until_closed, args=(bookie, adds), daemon=True)
    adder.start()
    with ThreadPoolExecutor(settings.upload_thread_count) as executor:
        if tiering:
            tierer = Tierer(bookie, store, settings, executor=executor, step_hook=hook)
            while tierer.tier(ledger_id):
                pass
            bookie.drop_local_entries({ledger_id: bookie.get_ledger(ledger_id).tier.entry_id})
            bookie.close_ledger(ledger_id, password=PASSWORD).result(T)
            adder.join()
        Offloader(bookie, store, settings, executor=executor, step_hook=hook).offload(ledger_id)
    emit("FINISHED without reaching the step")
    sys.exit(3)


if __name__ == "__main__":
    main()
