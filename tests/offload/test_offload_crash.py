"""SIGKILL an offload right after each step of its state machine, for real (a
child process kills itself inside the step hook while another thread adds
entries to an open ledger), sometimes twice (the resumed run killed again),
then run it to the end: every acknowledged add reads back byte for byte, the
bucket holds exactly ``segment`` + ``index`` per segment, no chunk and no
open multipart upload, and every offloaded entry reads back."""

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
from ledger import Bookie, OffloadInfo, OffloadState
from offload import Offloader, RemoteLedgerReader, S3ObjectStore, Step
from tools.local_s3 import LocalS3Server

from .conftest import (
    Written,
    add_payload,
    bucket_keys,
    endpoint_of,
    engine_settings,
    offload_settings,
    random_payloads,
    write_closed_ledger,
)

ROOT = Path(__file__).resolve().parents[2]
# 5 MiB parts, 11 MiB segments, ~13 MiB ledger: segment 0 is one multipart
# upload of three parts (5, 5 and 1 MiB), segment 1 is small (one PUT).
SEGMENT_MAX = 11 * MiB
Kill = tuple[Step, int]
CASES: list[tuple[Kill, ...]] = [
    ((Step.MARK_IN_PROGRESS, 1),), ((Step.SURVEY, 1),), ((Step.START_MULTIPART, 1),),
    # Parts by completion: the first, the middle and the last.
    ((Step.UPLOAD_PART, 1),), ((Step.UPLOAD_PART, 2),), ((Step.UPLOAD_PART, 3),),
    ((Step.RECORD_PARTS, 1),), ((Step.COMPLETE_MULTIPART, 1),), ((Step.VERIFY_SEGMENT, 1),),
    ((Step.WRITE_INDEX, 1),), ((Step.PUT_SEGMENT, 1),), ((Step.WRITE_INDEX, 2),),
    ((Step.DELETE_LEFTOVERS, 1),), ((Step.MARK_OFFLOADED, 1),),
    # Killed again while resuming the persisted upload.
    ((Step.UPLOAD_PART, 2), (Step.LIST_PARTS, 1)),
    ((Step.START_MULTIPART, 1), (Step.UPLOAD_PART, 1)),
    ((Step.RECORD_PARTS, 1), (Step.RECORD_PARTS, 1)),
    ((Step.UPLOAD_PART, 3), (Step.COMPLETE_MULTIPART, 1)),
]
# Steps after which the upload of segment 0 is open and persisted.
_UPLOAD_OPEN = {Step.START_MULTIPART, Step.LIST_PARTS, Step.UPLOAD_PART, Step.RECORD_PARTS}


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Written]:
    data_dir = tmp_path_factory.mktemp("offload-crash") / "data"
    bookie = Bookie.open(engine_settings(data_dir))
    try:
        written = write_closed_ledger(bookie, random_payloads(13 * MiB, seed=11))
    finally:
        bookie.close()
    return data_dir, written


def _run_child(data_dir: Path, ledger_id: int, kill: Kill, server: LocalS3Server,
               client: Any, bucket: str) -> dict[int, int]:
    """Run the child until it kills itself; the last entry acked per ledger."""
    step, occurrence = kill
    env = {**os.environ, **server.env(), "PYTHONPATH": str(ROOT),
           "OFFLOAD_TEST_BUCKET": bucket, "OFFLOAD_TEST_ENDPOINT": endpoint_of(client),
           "OFFLOAD_TEST_SEGMENT_MAX": str(SEGMENT_MAX), "OFFLOAD_TEST_PAGE_SIZE": "1"}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tests/offload/offload_crash_driver.py"), str(data_dir),
         str(ledger_id), str(step), str(occurrence)],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert proc.returncode == -9 and f"STEP {step} {occurrence}" in proc.stdout, (
        proc.returncode, proc.stdout[-500:], proc.stderr[-2000:])
    acked: dict[int, int] = {}
    for line in proc.stdout.splitlines():
        words = line.split()
        if words[0] == "LEDGER":
            acked[int(words[1])] = -1
        elif words[0] == "ACK":
            acked[int(words[1])] = max(acked[int(words[1])], int(words[2]))
    return acked


def _check_left_behind(kill: Kill, client: Any, bucket: str, persisted: OffloadInfo) -> None:
    """The kill really landed where it says: the bucket and the persisted
    state show that step's state."""
    step, occurrence = kill
    names = [k.split("/ledgers/", 1)[1].split("/", 1)[1] for k in bucket_keys(client, bucket)]
    uploads = client.list_multipart_uploads(Bucket=bucket).get("Uploads", [])
    assert not [n for n in names if "/chunk-" in n]
    if step in (Step.MARK_IN_PROGRESS, Step.SURVEY):
        assert names == [] and uploads == []
    elif step in _UPLOAD_OPEN:
        # Persisted before any part is sent, so a restart resumes this upload.
        assert len(uploads) == 1 and "seg-0/segment" not in names
        assert persisted.upload_id == uploads[0]["UploadId"]
        assert persisted.upload_key == uploads[0]["Key"]
        listed = client.list_parts(Bucket=bucket, Key=uploads[0]["Key"],
                                   UploadId=uploads[0]["UploadId"]).get("Parts", [])
        recorded = {(n, size, etag) for n, size, etag in persisted.upload_parts}
        assert recorded <= {(p["PartNumber"], p["Size"], p["ETag"].strip('"')) for p in listed}
        if step is Step.UPLOAD_PART:
            assert len(listed) >= occurrence
        if step is Step.RECORD_PARTS:
            assert recorded
    elif step in (Step.COMPLETE_MULTIPART, Step.VERIFY_SEGMENT):
        assert "seg-0/segment" in names and "seg-0/index" not in names and uploads == []
    elif step is Step.WRITE_INDEX and occurrence == 1:
        assert names == ["seg-0/index", "seg-0/segment"] and uploads == []
    elif step is Step.PUT_SEGMENT:
        later = [n.split("/")[1] for n in names if not n.startswith("seg-0/")]
        assert later == ["segment"] and "seg-0/index" in names
    else:  # WRITE_INDEX 2, DELETE_LEFTOVERS, MARK_OFFLOADED
        assert len(names) == 4 and uploads == []


def _parts_missing(client: Any, bucket: str) -> int:
    """Parts of segment 0 that are neither in its open upload nor in its segment."""
    if any(k.endswith("/seg-0/segment") for k in bucket_keys(client, bucket)):
        return 0
    uploads = client.list_multipart_uploads(Bucket=bucket).get("Uploads", [])
    if not uploads:
        return 3
    return 3 - len(client.list_parts(Bucket=bucket, Key=uploads[0]["Key"],
                                     UploadId=uploads[0]["UploadId"]).get("Parts", []))


@pytest.mark.parametrize("kills", CASES, ids=["+".join(f"{s}-{n}" for s, n in c) for c in CASES])
def test_killed_offload_resumes_without_orphans(kills: tuple[Kill, ...], tmp_path: Path,
                                               prepared: tuple[Path, Written],
                                               s3_server: LocalS3Server,
                                               s3_bucket: tuple[Any, str]) -> None:
    client, bucket = s3_bucket
    template, written = prepared
    data_dir = tmp_path / "data"
    shutil.copytree(template, data_dir)
    acked: dict[int, int] = {}
    for kill in kills:
        acked |= _run_child(data_dir, written.ledger_id, kill, s3_server, client, bucket)
        bookie = Bookie.open(engine_settings(data_dir))
        try:
            persisted = bookie.get_ledger(written.ledger_id).offload
            expected = (OffloadState.OFFLOADED if kill[0] is Step.MARK_OFFLOADED
                        else OffloadState.IN_PROGRESS)
            assert persisted.state is expected
            _check_left_behind(kill, client, bucket, persisted)
        finally:
            bookie.close()

    # The next run (listings one item per page: ListParts paginates) finishes,
    # sending only the parts of segment 0 that the open upload does not hold.
    parts_missing = _parts_missing(client, bucket)
    settings = offload_settings(bucket, endpoint_of(client), segment_size_bytes_max=SEGMENT_MAX)
    store = S3ObjectStore(client, settings, list_page_size=1)
    bookie = Bookie.open(engine_settings(data_dir))
    try:
        for ledger_id, last in acked.items():
            assert bookie.get_ledger(ledger_id).last_add_confirmed >= last
            for entry_id in range(last + 1):
                assert bookie.read_entry(ledger_id, entry_id).payload == add_payload(
                    ledger_id, entry_id), (ledger_id, entry_id)
        with ThreadPoolExecutor(4) as executor:
            info = Offloader(bookie, store, settings, executor=executor).offload(
                written.ledger_id)
        assert info.state is OffloadState.OFFLOADED and info.upload_id is None
        assert store.statistics()["requests_part"] == parts_missing
        assert info.segment_bytes == written.frame_bytes
        keys = bucket_keys(client, bucket)
        assert [k.rsplit("/", 1)[1] for k in keys] == ["index", "segment"] * 2, keys
        assert client.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
        reader = RemoteLedgerReader(store, settings)
        for entry_id in range(len(written.payloads)):
            payload, _ = reader.read_entry(written.ledger_id, entry_id, info)
            assert payload == written.payloads[entry_id]
        reader.close()
    finally:
        bookie.close()
