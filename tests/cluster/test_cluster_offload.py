"""Offload, GC and delete in a live cluster (docs/cluster.md §10), on a real S3
server (Ceph radosgw): a closed ledger is offloaded once, by the node holding its
lock, with its state in the ledger's metadata; past OFFLOAD_DELETION_LAG every
replica is garbage and reads go to S3 from any node; a delete removes the
metadata, the replicas and the objects."""

from __future__ import annotations

import base64
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tools.local_cluster import TOKEN, LiveCluster
from tools.local_etcd import LocalEtcd
from tools.local_s3 import LocalS3Server, delete_bucket

PW = {"X-Ledger-Password": "pw"}
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def until(condition: Callable[[], Any], timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.2)  # polling other processes
    pytest.fail(f"timed out waiting for {what}")


def test_offload_gc_reads_from_s3_and_delete(local_etcd: LocalEtcd, s3_server: LocalS3Server,
                                            tmp_path: Path) -> None:
    s3 = s3_server.client()
    bucket = f"cluster-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=bucket)
    settings = {"S3_BUCKET": bucket, "S3_ENDPOINT_URL": s3_server.endpoint_url,
                "OFFLOAD_DELETION_LAG": "0", "OFFLOAD_CHUNK_SIZE": "5MiB",
                "OFFLOAD_PART_SIZE": "5MiB"}
    env = {k: v for k, v in s3_server.env().items() if k.startswith("AWS_")}
    try:
        with LiveCluster(tmp_path / "c", local_etcd.metadata_url("offload"), 3,
                         settings=settings, extra_env=env) as cluster:
            urls = [n.url for n in cluster.nodes]
            lid = httpx.post(f"{urls[0]}/api/v1/ledgers", json={"password": "pw"},
                             timeout=30).json()["ledger_id"]
            sent = [bytes([i]) * (1000 * i + 1) for i in range(30)]
            for i, payload in enumerate(sent):
                assert httpx.post(f"{urls[i % 3]}/api/v1/ledgers/{lid}/entries",
                                  content=payload, headers=PW, timeout=30).status_code == 201
            refused = httpx.post(f"{urls[1]}/api/v1/ledgers/{lid}/offload", timeout=30)
            assert refused.status_code == 409 and refused.json()["code"] == "ENOTSEALED"
            assert httpx.post(f"{urls[1]}/api/v1/ledgers/{lid}/close", headers=PW,
                              timeout=30).status_code == 200
            queued = httpx.post(f"{urls[2]}/api/v1/ledgers/{lid}/offload", timeout=30)
            assert queued.status_code == 202, queued.text
            done = until(lambda: (lambda b: b if b["state"] == "OFFLOADED" else None)(
                httpx.get(f"{urls[0]}/api/v1/ledgers/{lid}/offload", timeout=30).json()),
                120, "the offload")
            prefix = done["key_prefix"]
            assert prefix.split("/")[2] == "n2"  # uploaded by the node that took the lock
            keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix=prefix)
                    .get("Contents", [])]
            assert any(k.endswith("/segment") for k in keys)
            # Past the lag (0 here) every node drops its replica; reads go to S3.
            for node in cluster.nodes:
                until(lambda n=node: httpx.get(
                    f"{n.url}/internal/v1/ledgers/{lid}/replica/entries", headers=AUTH,
                    timeout=30).json()["entries"] == [], 60, f"{node.bookie_id}'s GC")
            for url in urls:
                page = httpx.get(f"{url}/api/v1/ledgers/{lid}/entries", timeout=60).json()
                assert [base64.b64decode(e["payload"]) for e in page["entries"]] == sent
                info = httpx.get(f"{url}/api/v1/ledgers/{lid}", timeout=30).json()
                assert (info["state"], info["offload"]["state"]) == ("CLOSED", "OFFLOADED")
            assert httpx.delete(f"{urls[0]}/api/v1/ledgers/{lid}", headers=PW,
                                timeout=30).status_code == 204
            until(lambda: not s3.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents"),
                  60, "the objects' deletion")
    finally:
        delete_bucket(s3, bucket)
