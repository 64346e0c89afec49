"""SIGKILL an offload right after each step of its state machine, for real (a
child process kills itself inside the step hook), then run it again: the
bucket must hold exactly ``segment`` + ``index`` per segment, no chunk, no
pending multipart upload, and every entry must read back."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from common.units import MiB
from ledger import Bookie, OffloadState
from offload import Offloader, RemoteLedgerReader, S3ObjectStore, Step
from tools.local_s3 import LocalS3Server

from .conftest import (
    Written,
    bucket_keys,
    endpoint_of,
    engine_settings,
    offload_settings,
    pending_uploads,
    random_payloads,
    write_closed_ledger,
)

ROOT = Path(__file__).resolve().parents[2]
# 5 MiB chunks, 11 MiB segments, ~13 MiB ledger: segment 0 is three chunks
# (consolidated with UploadPartCopy), segment 1 is small (one PUT).
SEGMENT_MAX = 11 * MiB
CASES = [
    (Step.MARK_IN_PROGRESS, 1), (Step.SURVEY, 1), (Step.UPLOAD_CHUNK, 1),
    (Step.UPLOAD_CHUNK, 3), (Step.START_MULTIPART, 1), (Step.COPY_PART, 2),
    (Step.COMPLETE_MULTIPART, 1), (Step.VERIFY_SEGMENT, 1), (Step.WRITE_INDEX, 1),
    (Step.PUT_SEGMENT, 1), (Step.WRITE_INDEX, 2), (Step.DELETE_CHUNKS, 1),
    (Step.MARK_OFFLOADED, 1),
]


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Written]:
    data_dir = tmp_path_factory.mktemp("offload-crash") / "data"
    bookie = Bookie.open(engine_settings(data_dir))
    try:
        written = write_closed_ledger(bookie, random_payloads(13 * MiB, seed=11))
    finally:
        bookie.close()
    return data_dir, written


def _run_child(data_dir: Path, ledger_id: int, step: Step, occurrence: int,
               server: LocalS3Server, client: Any, bucket: str) -> None:
    env = {**os.environ, **server.env(), "PYTHONPATH": str(ROOT),
           "OFFLOAD_TEST_BUCKET": bucket, "OFFLOAD_TEST_ENDPOINT": endpoint_of(client),
           "OFFLOAD_TEST_SEGMENT_MAX": str(SEGMENT_MAX)}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tests/offload/offload_crash_driver.py"), str(data_dir),
         str(ledger_id), str(step), str(occurrence)],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert proc.returncode == -9 and f"STEP {step} {occurrence}" in proc.stdout, (
        proc.returncode, proc.stdout[-500:], proc.stderr[-2000:])


def _check_left_behind(step: Step, occurrence: int, keys: list[str], uploads: list[str]) -> None:
    """The kill really landed where it says: the bucket shows that step's state."""
    names = [k.split("/ledgers/", 1)[1].split("/", 1)[1] for k in keys]
    chunks = [n for n in names if "/chunk-" in n]
    if step in (Step.MARK_IN_PROGRESS, Step.SURVEY):
        assert names == [] and uploads == []
    elif step in (Step.START_MULTIPART, Step.UPLOAD_CHUNK, Step.COPY_PART):
        # The multipart upload starts with the first chunk and takes each copy
        # as soon as its PUT is done: the kill leaves it open, with chunks uploaded.
        assert len(uploads) == 1 and "seg-0/segment" not in names
        assert len(chunks) >= (occurrence if step is not Step.START_MULTIPART else 0)
    elif step in (Step.COMPLETE_MULTIPART, Step.VERIFY_SEGMENT):
        assert "seg-0/segment" in names and "seg-0/index" not in names and chunks
        assert uploads == []
    elif step is Step.DELETE_CHUNKS or step is Step.MARK_OFFLOADED:
        assert chunks == [] and len(names) == 4 and uploads == []
    else:  # WRITE_INDEX, PUT_SEGMENT: index of segment 0 written, chunks still there
        assert "seg-0/index" in names and chunks and uploads == []


@pytest.mark.parametrize(("step", "occurrence"), CASES, ids=[f"{s}-{n}" for s, n in CASES])
def test_killed_offload_resumes_without_orphans(step: Step, occurrence: int, tmp_path: Path,
                                               prepared: tuple[Path, Written],
                                               s3_server: LocalS3Server,
                                               s3_bucket: tuple[Any, str]) -> None:
    client, bucket = s3_bucket
    template, written = prepared
    data_dir = tmp_path / "data"
    shutil.copytree(template, data_dir)
    _run_child(data_dir, written.ledger_id, step, occurrence, s3_server, client, bucket)
    _check_left_behind(step, occurrence, bucket_keys(client, bucket),
                       pending_uploads(client, bucket))

    settings = offload_settings(bucket, endpoint_of(client), segment_size_bytes_max=SEGMENT_MAX)
    store = S3ObjectStore(client, settings)
    bookie = Bookie.open(engine_settings(data_dir))
    try:
        left = bookie.get_ledger(written.ledger_id).offload.state
        expected = (OffloadState.OFFLOADED if step is Step.MARK_OFFLOADED
                    else OffloadState.IN_PROGRESS)
        assert left is expected
        with ThreadPoolExecutor(4) as executor:
            info = Offloader(bookie, store, settings, executor=executor).offload(
                written.ledger_id)
        assert info.state is OffloadState.OFFLOADED
        assert info.segment_bytes == written.frame_bytes
        keys = bucket_keys(client, bucket)
        assert [k.rsplit("/", 1)[1] for k in keys] == ["index", "segment"] * 2, keys
        assert pending_uploads(client, bucket) == []
        reader = RemoteLedgerReader(store, settings)
        for entry_id in range(0, len(written.payloads), 7):
            payload, _ = reader.read_entry(written.ledger_id, entry_id, info)
            assert payload == written.payloads[entry_id]
        reader.close()
    finally:
        bookie.close()
