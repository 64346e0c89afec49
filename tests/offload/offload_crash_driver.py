"""Child process: offload one ledger while adds go on to another, and SIGKILL
itself right after a given step.

    python tests/offload/offload_crash_driver.py DATA_DIR LEDGER_ID STEP OCCURRENCE

The S3 endpoint, bucket and segment size come from ``OFFLOAD_TEST_*``
variables, credentials from boto3's chain (``AWS_ACCESS_KEY_ID`` ...).  The
kill happens inside the step hook, so it lands exactly after the
OCCURRENCE-th completion of STEP (no sleeps); exit code 3 means the step was
never reached.  A thread adds entries to a new open ledger all along and
prints ``ACK ledger entry`` for each acknowledged add (``LEDGER id`` first);
``STEP name n`` is printed just before the kill.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ledger import Bookie
from offload import Offloader, S3ObjectStore, Step, make_s3_client
from tests.offload.conftest import PASSWORD, T, add_payload, engine_settings, offload_settings

_emit_lock = threading.Lock()


def emit(line: str) -> None:
    """One whole line per write: two threads print."""
    with _emit_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def main() -> None:
    data_dir, ledger_id, step, occurrence = (Path(sys.argv[1]), int(sys.argv[2]),
                                             Step(sys.argv[3]), int(sys.argv[4]))
    settings = offload_settings(
        os.environ["OFFLOAD_TEST_BUCKET"], os.environ["OFFLOAD_TEST_ENDPOINT"],
        segment_size_bytes_max=int(os.environ["OFFLOAD_TEST_SEGMENT_MAX"]))
    seen: Counter[Step] = Counter()
    lock = threading.Lock()

    def hook(done: Step, _ledger_id: int) -> None:
        with lock:
            seen[done] += 1
            if done is step and seen[done] == occurrence:
                emit(f"STEP {done} {occurrence}")
                os.kill(os.getpid(), signal.SIGKILL)

    bookie = Bookie.open(engine_settings(data_dir))
    writer = bookie.create_ledger(password=PASSWORD, metadata={}).result(T)
    emit(f"LEDGER {writer.ledger_id}")

    def add_forever() -> None:
        entry_id = 0
        while True:
            bookie.add_entry(writer.ledger_id, add_payload(writer.ledger_id, entry_id),
                             password=PASSWORD).result(T)
            emit(f"ACK {writer.ledger_id} {entry_id}")
            entry_id += 1

    threading.Thread(target=add_forever, daemon=True).start()
    store = S3ObjectStore(make_s3_client(settings), settings,
                          list_page_size=int(os.environ.get("OFFLOAD_TEST_PAGE_SIZE", "1000")))
    with ThreadPoolExecutor(settings.upload_thread_count) as executor:
        Offloader(bookie, store, settings, executor=executor, step_hook=hook).offload(ledger_id)
    emit("FINISHED without reaching the step")
    sys.exit(3)


if __name__ == "__main__":
    main()
