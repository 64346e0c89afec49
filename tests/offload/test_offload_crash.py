"""SIGKILL an offload right after each step of its state machine, for real (a
child process kills itself inside the step hook while another thread adds
entries to an open ledger), sometimes twice (the resumed run killed again),
then run it to the end: every acknowledged add reads back byte for byte, the
bucket holds exactly ``segment`` + ``index`` per segment, no chunk and no
open multipart upload, and every offloaded entry reads back.

The same for an open ledger tiered as it fills (adds to it running), its
tiered entries dropped locally, then closed and consolidated: killed after
each tiering step and each consolidation step, the recorded position never
claims what S3 lacks, nothing acknowledged is lost, and the next run ends
OFFLOADED with no orphan."""

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
from ledger import Bookie, LedgerInfo, LedgerState, OffloadInfo, OffloadState, TierPosition
from offload import Offloader, RemoteLedgerReader, S3ObjectStore, Step, Tierer, TierStep
from offload._format import decode_index
from tools.local_s3 import LocalS3Server

from .conftest import (
    CHUNK,
    PASSWORD,
    T,
    Written,
    add_payload,
    bucket_keys,
    endpoint_of,
    engine_settings,
    offload_settings,
    random_payloads,
    segment_bytes,
    write_closed_ledger,
)

ROOT = Path(__file__).resolve().parents[2]
# 5 MiB parts, 11 MiB segments, ~13 MiB ledger: segment 0 is one multipart
# upload of three parts (5, 5 and 1 MiB), segment 1 is small (one PUT).
SEGMENT_MAX = 11 * MiB
Kill = tuple[Step | TierStep, int]
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
               client: Any, bucket: str, *, mode: str = "sealed") -> dict[int, int]:
    """Run the child until it kills itself; the last entry acked per ledger."""
    step, occurrence = kill
    env = {**os.environ, **server.env(), "PYTHONPATH": str(ROOT),
           "OFFLOAD_TEST_BUCKET": bucket, "OFFLOAD_TEST_ENDPOINT": endpoint_of(client),
           "OFFLOAD_TEST_SEGMENT_MAX": str(SEGMENT_MAX), "OFFLOAD_TEST_PAGE_SIZE": "1",
           "OFFLOAD_TEST_MODE": mode}
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


# --- tiering of an open ledger, then its consolidation at close -----------------------

# 17 MiB in an open ledger, 5 MiB chunks, 11 MiB segments: the first tiering
# step uploads segment 0's two chunks and its short last one, the next one
# chunk of segment 1; at close segment 0 is three copied parts, segment 1 a
# copied part and the local tail (the adds made meanwhile included).
TIER_CASES: list[tuple[Kill, ...]] = [
    ((TierStep.UPLOAD_CHUNK, 1),), ((TierStep.UPLOAD_CHUNK, 3),),
    ((TierStep.WRITE_TIER_INDEX, 1),), ((TierStep.RECORD_TIER, 1),),
    ((TierStep.RECORD_TIER, 2),), ((Step.MARK_IN_PROGRESS, 1),),
    ((Step.COPY_CHUNK, 1),), ((Step.COPY_CHUNK, 3),), ((Step.START_MULTIPART, 2),),
    ((Step.UPLOAD_PART, 1),), ((Step.COMPLETE_MULTIPART, 1),), ((Step.VERIFY_SEGMENT, 1),),
    ((Step.WRITE_INDEX, 1),), ((Step.WRITE_INDEX, 2),), ((Step.DELETE_LEFTOVERS, 1),),
    ((Step.MARK_OFFLOADED, 1),),
    # Killed again while resuming.
    ((TierStep.RECORD_TIER, 1), (TierStep.UPLOAD_CHUNK, 1)),
    ((Step.COPY_CHUNK, 2), (Step.LIST_PARTS, 1)),
    ((Step.COMPLETE_MULTIPART, 1), (Step.COMPLETE_MULTIPART, 1)),
]
_TIERING = {TierStep.UPLOAD_CHUNK, TierStep.WRITE_TIER_INDEX, TierStep.RECORD_TIER}
# The four chunks are copied once: a resumed consolidation copies only what the
# open upload (or a completed segment) does not hold yet.
_COPIES_LEFT = {(Step.COPY_CHUNK, 1): 3, (Step.COPY_CHUNK, 2): 2, (Step.COPY_CHUNK, 3): 1,
                (Step.START_MULTIPART, 2): 1, (Step.UPLOAD_PART, 1): 1,
                (Step.COMPLETE_MULTIPART, 1): 1, (Step.VERIFY_SEGMENT, 1): 1,
                (Step.WRITE_INDEX, 1): 1, (Step.WRITE_INDEX, 2): 0,
                (Step.DELETE_LEFTOVERS, 1): 0, (Step.MARK_OFFLOADED, 1): 0}


@pytest.fixture(scope="module")
def prepared_open(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Written]:
    data_dir = tmp_path_factory.mktemp("tier-crash") / "data"
    bookie = Bookie.open(engine_settings(data_dir))
    try:
        payloads = random_payloads(17 * MiB, seed=12)
        ledger_id = bookie.create_ledger(password=PASSWORD, metadata={}).result(T).ledger_id
        for start in range(0, len(payloads), 4):
            batch = payloads[start:start + 4]
            bookie.append(ledger_id, [(None, batch)], password=PASSWORD)[0].result(T)
    finally:
        bookie.close()
    return data_dir, Written(ledger_id, payloads)


def _s3_holds_the_position(client: Any, bucket: str, info: LedgerInfo) -> None:
    """What the recorded tier position claims is in S3: the segment's index
    covering the entries below it, and every chunk below its byte."""
    if info.offload.state is not OffloadState.NONE or info.tier == TierPosition():
        return
    at = info.tier
    prefix = f"ledgerd/test/b1/ledgers/{info.ledger_id}/seg-{at.segment_first_entry_id}/"
    keys = set(bucket_keys(client, bucket))
    for position in range(0, at.byte_position, CHUNK):
        assert f"{prefix}chunk-{position}" in keys, (position, at)
    if at.entry_id > at.segment_first_entry_id:
        raw = client.get_object(Bucket=bucket, Key=f"{prefix}index")["Body"].read()
        assert decode_index(raw, key="index").end_entry_id >= at.entry_id, at


@pytest.mark.parametrize("kills", TIER_CASES,
                         ids=["+".join(f"{s}-{n}" for s, n in c) for c in TIER_CASES])
def test_killed_tiering_and_consolidation_lose_nothing_and_leave_no_orphans(
        kills: tuple[Kill, ...], tmp_path: Path, prepared_open: tuple[Path, Written],
        s3_server: LocalS3Server, s3_bucket: tuple[Any, str]) -> None:
    client, bucket = s3_bucket
    template, written = prepared_open
    ledger_id = written.ledger_id
    data_dir = tmp_path / "data"
    shutil.copytree(template, data_dir)
    settings = offload_settings(bucket, endpoint_of(client), segment_size_bytes_max=SEGMENT_MAX,
                                tier_open_ledgers=True)
    store = S3ObjectStore(client, settings, list_page_size=1)
    reader = RemoteLedgerReader(store, settings)
    acked = -1
    for kill in kills:
        acked = max(acked, _run_child(data_dir, ledger_id, kill, s3_server, client, bucket,
                                      mode="tier").get(ledger_id, -1))
        bookie = Bookie.open(engine_settings(data_dir), remote=reader)
        try:
            info = bookie.get_ledger(ledger_id)
            assert info.last_add_confirmed >= acked
            assert (info.state is LedgerState.OPEN) == (kill[0] in _TIERING), info
            _s3_holds_the_position(client, bucket, info)
        finally:
            bookie.close()

    bookie = Bookie.open(engine_settings(data_dir), remote=reader)
    try:
        expected = [*written.payloads, *(add_payload(ledger_id, e) for e in range(
            len(written.payloads), bookie.get_ledger(ledger_id).last_add_confirmed + 1))]
        assert len(expected) > acked
        reader.refresh(ledger_id)
        assert [e.payload for e in bookie.read_entries(ledger_id)] == expected
        with ThreadPoolExecutor(4) as executor:
            if bookie.get_ledger(ledger_id).state is LedgerState.OPEN:
                tierer = Tierer(bookie, store, settings, executor=executor)
                while tierer.tier(ledger_id):
                    pass
                bookie.close_ledger(ledger_id, password=PASSWORD).result(T)
            info = Offloader(bookie, store, settings, executor=executor).offload(ledger_id)
    finally:
        bookie.close()
    assert info.state is OffloadState.OFFLOADED and info.upload_id is None
    copied = [kill for kill in kills if kill in _COPIES_LEFT]
    if copied:
        # Each attempt is a request: a copy retried (a slow server timing out
        # under load) counts twice without being copied twice.
        stats = store.statistics()
        assert stats["requests_copy"] <= _COPIES_LEFT[copied[0]] + stats.get("retries", 0), stats
    names = [k.rsplit("/", 1)[1] for k in bucket_keys(client, bucket)]
    assert sorted(names) == ["index", "index", "segment", "segment"], names
    assert client.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
    segments = sorted((k for k in bucket_keys(client, bucket) if k.endswith("/segment")),
                      key=lambda k: int(k.split("seg-")[1].split("/")[0]))
    stored = b"".join(client.get_object(Bucket=bucket, Key=k)["Body"].read() for k in segments)
    assert stored == segment_bytes(Written(ledger_id, expected))
    reader.refresh(ledger_id)
    for entry_id in range(0, len(expected), 13):
        assert reader.read_entry(ledger_id, entry_id, info)[0] == expected[entry_id]
    reader.close()
