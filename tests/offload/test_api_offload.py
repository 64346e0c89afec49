"""Offload through the HTTP API, with the real S3 server and the real garbage
collector: offload a closed ledger, let GC drop its local copy, read it back
from S3 through the same routes, delete it and its objects."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app import create_app
from offload.local_s3 import LocalS3Server
from tests.app.conftest import assert_problem, create_ledger, pw, service_settings

ENTRY = 40_000


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
        offload_deletion_lag=0.001, offload_chunk_size="5MiB", compaction_rate=0,
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


def _objects(s3: Any, bucket: str) -> list[str]:
    listed = s3.list_objects_v2(Bucket=bucket)
    return [o["Key"] for o in listed.get("Contents", [])]


def test_offload_gc_read_back_and_delete(client: TestClient, s3_bucket: tuple[Any, str]) -> None:
    s3, bucket = s3_bucket
    lid = create_ledger(client)["ledger_id"]
    for e in range(200):  # ~8 MB: two chunks, so consolidation by part copy runs
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
        "max_entry_size": "64KiB"}).start()
    try:
        with httpx.Client(base_url=server.url, timeout=30) as http:
            lid = http.post("/api/v1/ledgers", json={"password": "pw"}).json()["ledger_id"]
            for first in range(0, 150, 25):  # batches of ~1 MB (the small journal's limit)
                frames = b"".join(len(_payload(e)).to_bytes(4, "big") + _payload(e)
                                  for e in range(first, first + 25))
                added = http.post(f"/api/v1/ledgers/{lid}/entries/batch", content=frames,
                                  headers={**pw(), "content-type": "application/x-ledgerd-frames"})
                assert added.status_code == 201, added.text
            assert http.post(f"/api/v1/ledgers/{lid}/close", headers=pw()).status_code == 200
        server.kill()  # the offload the close queued is pending or half done
        server.start()
        result = subprocess.run(
            [sys.executable, "-m", "app", "offload", str(lid), "--url", server.url],
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
