"""Child process: offload one ledger and SIGKILL itself right after a given step.

    python tests/offload/offload_crash_driver.py DATA_DIR LEDGER_ID STEP OCCURRENCE

The S3 endpoint, bucket and segment size come from ``OFFLOAD_TEST_*``
variables, credentials from boto3's chain (``AWS_ACCESS_KEY_ID`` ...).  The
kill happens inside the step hook, so it lands exactly after the
OCCURRENCE-th completion of STEP (no sleeps); exit code 3 means the step was
never reached.
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
from tests.offload.conftest import engine_settings, offload_settings


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
                print(f"STEP {done} {occurrence}", flush=True)
                os.kill(os.getpid(), signal.SIGKILL)

    bookie = Bookie.open(engine_settings(data_dir))
    store = S3ObjectStore(make_s3_client(settings), settings)
    with ThreadPoolExecutor(settings.upload_thread_count) as executor:
        Offloader(bookie, store, settings, executor=executor, step_hook=hook).offload(ledger_id)
    print("FINISHED without reaching the step", flush=True)
    sys.exit(3)


if __name__ == "__main__":
    main()
