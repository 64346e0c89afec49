"""Offload through the HTTP API, with the real S3 server and the real garbage
collector: offload a closed ledger, let GC drop its local copy, read it back
from S3 through the same routes, delete it and its objects; and the same API
while the real S3 server is stopped (reads of offloaded data fail clearly and
recover, local ledgers keep being served, the offload says what failed)."""

from __future__ import annotations

import base64
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app import create_app
from common.frames import FRAMES_MEDIA_TYPE, decode_download, encode_upload
from tests.app.conftest import assert_problem, create_ledger, pw, service_settings
from tools.local_s3 import LocalS3Server

from .conftest import s3_down

ENTRY = 40_000
# A read that S3 cannot serve must fail within its retries: 5 attempts refused
# at once, with at most 0.1 + 0.2 + 0.4 + 0.8 s of backoff between them.
FAILED_READ_S_MAX = 10.0


def _payload(entry_id: int) -> bytes:
    return bytes([entry_id % 251]) * ENTRY


@pytest.fixture
def client(tmp_path: Path, s3_server: LocalS3Server, s3_bucket: tuple[Any, str],
           monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    for name, value in s3_server.env().items():  # boto3's standard credential chain
        monkeypatch.setenv(name, value)
    _s3, bucket = s3_bucket
    settings = service_settings(
        tmp_path / "data", s3_endpoint_url=s3_server.endpoint_url, s3_bucket=bucket,
        offload_deletion_lag=0.001, offload_chunk_size="5MiB", offload_part_size="5MiB",
        compaction_rate=0,
        max_entry_size="64KiB")
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        yield c


def _wait(client: TestClient, path: str, done: Any, timeout_s: float = 60.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        body = dict(client.get(path).json())
        if done(body):
            return body
        assert time.monotonic() < deadline, body
        time.sleep(0.05)  # polling the API's own status, as a client would


def _add_entries(http: Any, lid: int, first: int, count: int) -> None:
    """Entries ``first..first+count-1`` in one frames batch (keep it near 1 MB,
    the small journal's limit)."""
    body = encode_upload([_payload(e) for e in range(first, first + count)])
    added = http.post(f"/api/v1/ledgers/{lid}/entries/batch", content=body,
                      headers={**pw(), "content-type": FRAMES_MEDIA_TYPE})
    assert added.status_code == 201, added.text
    assert added.json()["first_entry_id"] == first


def _objects(s3: Any, bucket: str) -> list[str]:
    listed = s3.list_objects_v2(Bucket=bucket)
    return [o["Key"] for o in listed.get("Contents", [])]


def test_offload_gc_read_back_and_delete(client: TestClient, s3_bucket: tuple[Any, str]) -> None:
    s3, bucket = s3_bucket
    lid = create_ledger(client)["ledger_id"]
    for e in range(200):  # ~8 MB: two parts, so the multipart upload runs
        response = client.post(f"/api/v1/ledgers/{lid}/entries", content=_payload(e),
                               headers=pw())
        assert response.status_code == 201
    assert_problem(client.post(f"/api/v1/ledgers/{lid}/offload"), 409, "ENOTSEALED")
    client.post(f"/api/v1/ledgers/{lid}/close", headers=pw())
    response = client.post(f"/api/v1/ledgers/{lid}/offload")
    assert response.status_code == 202 and response.json()["state"] in ("PENDING", "IN_PROGRESS",
                                                                       "OFFLOADED")
    done = _wait(client, f"/api/v1/ledgers/{lid}/offload", lambda b: b["state"] == "OFFLOADED")
    assert done["segment_bytes"] >= 200 * ENTRY and done["bucket"] == bucket
    keys = _objects(s3, bucket)
    assert sorted(k.rsplit("/", 1)[1] for k in keys) == ["index", "segment"], keys

    client.put("/api/v1/bookie/gc", json={})  # lag passed: the local copy is garbage
    _wait(client, "/api/v1/bookie/gc", lambda b: not b["is_in_force_gc"])
    ledger = client.get(f"/api/v1/ledgers/{lid}").json()
    assert ledger["offload"]["local_deleted"] is True
    for e in (0, 1, 2, 150, 199, 57):
        entry = client.get(f"/api/v1/ledgers/{lid}/entries/{e}")
        assert entry.status_code == 200 and entry.content == _payload(e), e
    page = client.get(f"/api/v1/ledgers/{lid}/entries", params={"start": 10, "end": 30}).json()
    assert [x["entry_id"] for x in page["entries"]] == list(range(10, 31))
    metrics = client.get("/metrics").text
    assert "ledgerd_offload_requests_get" in metrics

    assert client.delete(f"/api/v1/ledgers/{lid}", headers=pw()).status_code == 204
    _wait(client, "/api/v1/bookie/info", lambda _b: not _objects(s3, bucket))


@pytest.fixture
def pack_client(tmp_path: Path, s3_server: LocalS3Server, s3_bucket: tuple[Any, str],
                monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    _s3, bucket = s3_bucket
    settings = service_settings(
        tmp_path / "data", s3_endpoint_url=s3_server.endpoint_url, s3_bucket=bucket,
        offload_deletion_lag=0.001, offload_pack=True, offload_pack_wait=1.0,
        offload_pack_delete_delay=0.0, compaction_rate=0, max_entry_size="64KiB")
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        yield c


def test_packed_ledgers_read_back_and_deleted_through_the_api(
        pack_client: TestClient, s3_bucket: tuple[Any, str]) -> None:
    """Six small ledgers share one pack; GC drops their local copies and the API
    reads them from it; deleting four (the node hands the offload record to
    the service) drops the pack's live share under half: it is rewritten with
    the other two and the old one deleted."""
    client, (s3, bucket) = pack_client, s3_bucket
    lids = [create_ledger(client)["ledger_id"] for _ in range(6)]
    for lid in lids:
        _add_entries(client, lid, 0, 3)
        assert client.post(f"/api/v1/ledgers/{lid}/close", headers=pw()).status_code == 200
    for lid in lids:  # within offload_pack_wait of each other: one pack
        assert client.post(f"/api/v1/ledgers/{lid}/offload").status_code == 202
    states = [_wait(client, f"/api/v1/ledgers/{lid}/offload",
                    lambda b: b["state"] == "OFFLOADED") for lid in lids]
    first_pack = {state["pack_key"] for state in states}
    assert len(first_pack) == 1 and None not in first_pack
    assert sorted(k.rsplit("/", 1)[1] for k in _objects(s3, bucket)) == ["data", "index"]

    client.put("/api/v1/bookie/gc", json={})
    _wait(client, "/api/v1/bookie/gc", lambda b: not b["is_in_force_gc"])
    for lid in lids:
        assert client.get(f"/api/v1/ledgers/{lid}").json()["offload"]["local_deleted"] is True
        entry = client.get(f"/api/v1/ledgers/{lid}/entries/2")
        assert entry.status_code == 200 and entry.content == _payload(2)

    for lid in lids[:4]:
        assert client.delete(f"/api/v1/ledgers/{lid}", headers=pw()).status_code == 204
    kept = lids[4:]
    _wait(client, f"/api/v1/ledgers/{kept[0]}/offload",
          lambda b: b["pack_key"] not in first_pack)
    _wait(client, "/api/v1/bookie/info", lambda _b: not any(
        key in first_pack for key in _objects(s3, bucket)))
    assert _metric(client, "ledgerd_offload_packs_rewritten") == 1
    assert len(_objects(s3, bucket)) == 2
    for lid in kept:
        for e in range(3):
            entry = client.get(f"/api/v1/ledgers/{lid}/entries/{e}")
            assert entry.status_code == 200 and entry.content == _payload(e)


def _offloaded_and_gone_locally(client: TestClient, entry_count: int) -> int:
    """A closed ledger of ``entry_count`` entries, offloaded, its local copy
    collected: every read of it goes to S3."""
    lid = create_ledger(client)["ledger_id"]
    for first in range(0, entry_count, 25):
        _add_entries(client, lid, first, min(25, entry_count - first))
    assert client.post(f"/api/v1/ledgers/{lid}/close", headers=pw()).status_code == 200
    assert client.post(f"/api/v1/ledgers/{lid}/offload").status_code == 202
    _wait(client, f"/api/v1/ledgers/{lid}/offload", lambda b: b["state"] == "OFFLOADED")
    client.put("/api/v1/bookie/gc", json={})
    _wait(client, "/api/v1/bookie/gc", lambda b: not b["is_in_force_gc"])
    assert client.get(f"/api/v1/ledgers/{lid}").json()["offload"]["local_deleted"] is True
    return lid


def _timed_get(client: TestClient, path: str, **kwargs: Any) -> tuple[Any, float]:
    started = time.monotonic()
    response = client.get(path, **kwargs)
    return response, time.monotonic() - started


def _assert_s3_read_failed(response: Any, elapsed_s: float) -> None:
    """A problem soon (not a hang, not a short answer) with the request's id, by
    which the log names the S3 request that failed; the endpoint stays private."""
    body = assert_problem(response, 503, "EIO")  # the bookie is fine: retry later
    assert int(response.headers["Retry-After"]) >= 1
    assert response.headers["X-Request-Id"] in body["detail"], body
    assert "GetObject" not in body["detail"] and "127.0.0.1" not in body["detail"], body
    assert elapsed_s < FAILED_READ_S_MAX, elapsed_s


@pytest.mark.timeout(180)  # a read that hangs on the stopped server fails here
def test_s3_down_mid_read_fails_clearly_and_reads_recover(
        client: TestClient, s3_server: LocalS3Server) -> None:
    entry_count = 300  # 12 MB: three 5 MiB parts
    lid = _offloaded_and_gone_locally(client, entry_count)
    last = entry_count - 1
    for e in range(10):  # the reader now holds the listing, the index and the first blocks
        assert client.get(f"/api/v1/ledgers/{lid}/entries/{e}").content == _payload(e)
    with s3_down(s3_server):
        # Read-ahead after ten sequential entries reaches a few MiB at most, so
        # the tail of the ledger is only in S3: every read of it must fail.
        _assert_s3_read_failed(*_timed_get(client, f"/api/v1/ledgers/{lid}/entries/{last}"))
        # A range is all or nothing: an error, never a page cut short.
        _assert_s3_read_failed(*_timed_get(client, f"/api/v1/ledgers/{lid}/entries",
                                           params={"start": 250, "end": last}))
        _assert_s3_read_failed(*_timed_get(client, f"/api/v1/ledgers/{lid}/entries",
                                           params={"start": 250, "end": last},
                                           headers={"accept": FRAMES_MEDIA_TYPE}))
    # The same reader, with the connections the stop broke: every entry is back.
    assert client.get(f"/api/v1/ledgers/{lid}/entries/{last}").content == _payload(last)
    page = client.get(f"/api/v1/ledgers/{lid}/entries", params={"start": 250, "end": last})
    assert page.status_code == 200, page.text
    assert [(x["entry_id"], base64.b64decode(x["payload"])) for x in page.json()["entries"]] == [
        (e, _payload(e)) for e in range(250, entry_count)]
    stream = client.get(f"/api/v1/ledgers/{lid}/entries", headers={"accept": FRAMES_MEDIA_TYPE})
    assert [(e, p) for e, _crc, p in decode_download(stream.content)] == [
        (e, _payload(e)) for e in range(entry_count)]


def _metric(client: TestClient, name: str) -> float:
    for line in client.get("/metrics").text.splitlines():
        if line.startswith(f"{name} "):
            return float(line.split()[1])
    raise AssertionError(f"metric {name} not exported")


@pytest.mark.timeout(180)
def test_local_ledgers_are_served_while_s3_is_down(
        client: TestClient, s3_server: LocalS3Server, s3_bucket: tuple[Any, str]) -> None:
    s3, bucket = s3_bucket
    sealed = create_ledger(client)["ledger_id"]
    _add_entries(client, sealed, 0, 10)
    assert client.post(f"/api/v1/ledgers/{sealed}/close", headers=pw()).status_code == 200
    growing = create_ledger(client)["ledger_id"]
    _add_entries(client, growing, 0, 5)
    with s3_down(s3_server):
        assert client.post(f"/api/v1/ledgers/{sealed}/offload").status_code == 202
        # Adds and reads go on while the offload retries against a dead server.
        for e in range(5, 15):
            added = client.post(f"/api/v1/ledgers/{growing}/entries", content=_payload(e),
                                headers=pw())
            assert added.status_code == 201 and added.json()["entry_id"] == e, added.text
        failed = _wait(client, f"/api/v1/ledgers/{sealed}/offload",
                       lambda b: b["state"] == "FAILED")
        # The request, the key, the attempts and the cause.
        assert re.search(r"S3 \w+ of '\S+' failed after 5 attempt\(s\): "
                         r"EndpointConnectionError", failed["error"]), failed
        assert _metric(client, "ledgerd_offload_offloads_failed") == 1
        # Retried by the server itself later (30 s at first), or now on request.
        assert failed["failures"] == 1 and failed["next_retry_at"] > time.time(), failed
        assert _metric(client, "ledgerd_offload_offloads_retry_scheduled") == 1
        assert _metric(client, "ledgerd_offload_offloads_next_retry_at") == pytest.approx(
            failed["next_retry_at"])
        # ... and after it failed: the sealed ledger still reads from its local copy.
        for lid, count in ((growing, 15), (sealed, 10)):
            for e in range(count):
                read = client.get(f"/api/v1/ledgers/{lid}/entries/{e}")
                assert read.status_code == 200 and read.content == _payload(e), (lid, e)
        fresh = create_ledger(client)["ledger_id"]
        _add_entries(client, fresh, 0, 3)
    assert client.post(f"/api/v1/ledgers/{sealed}/offload").status_code == 202
    done = _wait(client, f"/api/v1/ledgers/{sealed}/offload", lambda b: b["state"] == "OFFLOADED")
    assert done["error"] is None and done["failures"] == 0 and done["next_retry_at"] is None
    assert sorted(k.rsplit("/", 1)[1] for k in _objects(s3, bucket)) == ["index", "segment"]


def test_live_server_auto_offload_survives_sigkill_and_cli(
        tmp_path: Path, s3_server: LocalS3Server, s3_bucket: tuple[Any, str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A real uvicorn process with OFFLOAD_AFTER_CLOSE: kill -9 it right after
    the close that started the offload; the restarted server resumes it, and
    the bucket ends with exactly one segment and one index."""
    import json
    import subprocess
    import sys

    import httpx

    from tests.app.conftest import REPO, LiveServer

    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    s3, bucket = s3_bucket
    server = LiveServer(tmp_path / "data", {
        "s3_endpoint_url": s3_server.endpoint_url, "s3_bucket": bucket,
        "offload_after_close": "true", "offload_chunk_size": "5MiB",
        "offload_part_size": "5MiB",
        "max_entry_size": "64KiB"}).start()
    try:
        with httpx.Client(base_url=server.url, timeout=30) as http:
            lid = http.post("/api/v1/ledgers", json={"password": "pw"}).json()["ledger_id"]
            for first in range(0, 150, 25):
                _add_entries(http, lid, first, 25)
            assert http.post(f"/api/v1/ledgers/{lid}/close", headers=pw()).status_code == 200
        server.kill()  # the offload the close queued is pending or half done
        server.start()
        result = subprocess.run(
            [sys.executable, "-m", "cli", "offload", str(lid), "--url", server.url],
            cwd=REPO, capture_output=True, timeout=120, env=server.environment())
        assert result.returncode == 0, result.stderr.decode()
        state = json.loads(result.stdout)
        assert state["state"] == "OFFLOADED" and state["segment_bytes"] >= 150 * ENTRY
        names = sorted(k.rsplit("/", 1)[1] for k in _objects(s3, bucket))
        assert names == ["index", "segment"], names
        uploads = s3.list_multipart_uploads(Bucket=bucket).get("Uploads", [])
        assert uploads == []
    finally:
        server.stop()
