"""Tiering of open ledgers in a live cluster (TIER_OPEN_LEDGERS; docs/cluster.md
§10), on a real S3 server (Ceph radosgw) and a real etcd: the writer uploads an
open ledger's chunks as they fill and records how far in the ledger's metadata,
which every node shows; at close the ledger is offloaded (without
OFFLOAD_AFTER_CLOSE) under the tiering node's prefix, its chunks consolidated
by UploadPartCopy; a writer killed mid-ledger leaves its chunks to the node that
takes the ledger over, closes and offloads it, and every acknowledged entry
reads back from S3 byte for byte."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import random
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx

from cluster import ClusterKeys, EtcdClient
from tests.cluster.test_cluster_faults import add, eventually
from tests.cluster.test_cluster_offload import until
from tools.local_cluster import TOKEN, LiveCluster
from tools.local_etcd import LocalEtcd
from tools.local_s3 import LocalS3Server, delete_bucket

PW = {"X-Ledger-Password": "pw"}
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def payload(entry_id: int) -> bytes:
    """Entry ``entry_id``'s bytes: 512 KiB, different for every entry."""
    return random.Random(entry_id).randbytes(512 * 1024)


@contextlib.contextmanager
def tiering_cluster(etcd: LocalEtcd, s3_server: LocalS3Server, root: Path, scope: str,
                    ) -> Iterator[tuple[LiveCluster, Any, str, int]]:
    """Three nodes tiering open ledgers into a bucket of their own; the cluster,
    the S3 client, the bucket and a ledger n0 created (and writes)."""
    s3 = s3_server.client()
    bucket = f"tier-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=bucket)
    settings = {"S3_BUCKET": bucket, "S3_ENDPOINT_URL": s3_server.endpoint_url,
                "TIER_OPEN_LEDGERS": "true", "OFFLOAD_DELETION_LAG": "0",
                "OFFLOAD_CHUNK_SIZE": "5MiB", "OFFLOAD_PART_SIZE": "5MiB"}
    env = {k: v for k, v in s3_server.env().items() if k.startswith("AWS_")}
    try:
        with LiveCluster(root, etcd.metadata_url(scope), 3, settings=settings,
                         extra_env=env) as cluster:
            lid = httpx.post(f"{cluster.nodes[0].url}/api/v1/ledgers",
                             json={"password": "pw"}, timeout=30).json()["ledger_id"]
            yield cluster, s3, bucket, lid
    finally:
        delete_bucket(s3, bucket)


def _keys(s3: Any, bucket: str, prefix: str) -> list[str]:
    listed = s3.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])
    return sorted(o["Key"] for o in listed)


def _offload(url: str, ledger_id: int) -> dict[str, Any]:
    answer = httpx.get(f"{url}/api/v1/ledgers/{ledger_id}", timeout=30)
    assert answer.status_code == 200, answer.text
    found: dict[str, Any] = answer.json()["offload"]
    return found


def _offload_when(url: str, ledger_id: int, wanted: Callable[[dict[str, Any]], bool],
                  timeout_s: float, what: str) -> dict[str, Any]:
    """The ledger's offload record once ``wanted`` holds of it; a 503 meanwhile (its
    writer busy or just gone) is asked again."""
    def found() -> dict[str, Any] | None:
        answer = httpx.get(f"{url}/api/v1/ledgers/{ledger_id}", timeout=30)
        if answer.status_code == 503:
            return None
        assert answer.status_code == 200, answer.text
        record: dict[str, Any] = answer.json()["offload"]
        return record if wanted(record) else None
    done: dict[str, Any] = until(found, timeout_s, what)
    return done


def entries(url: str, ledger_id: int) -> list[bytes]:
    """Every entry of the ledger, page after page."""
    found: list[bytes] = []
    start: int | None = 0
    while start is not None:
        page = httpx.get(f"{url}/api/v1/ledgers/{ledger_id}/entries",
                         params={"start": start}, timeout=60).json()
        found += [base64.b64decode(e["payload"]) for e in page["entries"]]
        start = page["next_start"]
    return found


def _replicas_dropped(cluster: LiveCluster, ledger_id: int) -> None:
    """Past the lag (0) every running node drops its replica: reads go to S3."""
    for node in cluster.running:
        until(lambda n=node: httpx.get(
            f"{n.url}/internal/v1/ledgers/{ledger_id}/replica/entries", headers=AUTH,
            timeout=30).json()["entries"] == [], 60, f"{node.bookie_id}'s GC")


def test_an_open_ledger_is_tiered_by_its_writer_and_consolidated_at_close(
        local_etcd: LocalEtcd, s3_server: LocalS3Server, tmp_path: Path) -> None:
    with tiering_cluster(local_etcd, s3_server, tmp_path / "c", "tier") as (
            cluster, s3, bucket, lid):
        n0, n1, n2 = cluster.nodes
        # 24 entries of 512 KiB: two full chunks and a part of a third.  Adds
        # through the other nodes are forwarded to the writer, n0.
        for entry_id in range(24):
            node = cluster.nodes[entry_id % 3]
            assert add(node.url, lid, payload(entry_id), entry_id).status_code == 201
        # The position reaches every node through the metadata.
        tiered = _offload_when(n2.url, lid, lambda o: o["tiered_entries"] >= 19, 60,
                               "two chunks tiered")
        assert tiered["state"] == "NONE"
        chunks = [k for k in _keys(s3, bucket, "") if "/chunk-" in k]
        assert chunks and all(f"/n0/ledgers/{lid}/seg-0/chunk-" in k for k in chunks), chunks
        uploaded = n0.metrics()
        assert uploaded["ledgerd_offload_tier_chunks_uploaded"] >= 2
        assert n1.metrics()["ledgerd_offload_tier_steps"] == 0  # only the writer tiers

        # Closed, it is offloaded though OFFLOAD_AFTER_CLOSE is off: under n0's
        # prefix, its two chunks copied into the segment rather than sent again.
        assert httpx.post(f"{n1.url}/api/v1/ledgers/{lid}/close", headers=PW,
                          timeout=30).status_code == 200
        done = _offload_when(n2.url, lid, lambda o: o["state"] == "OFFLOADED", 120,
                             "the offload")
        assert f"/n0/ledgers/{lid}/" in done["key_prefix"]
        copied = sum(n.metrics()["ledgerd_offload_requests_copy"] for n in cluster.nodes)
        assert copied >= 2
        objects = _keys(s3, bucket, done["key_prefix"])
        assert any(k.endswith("/segment") for k in objects), objects
        assert not any("/chunk-" in k for k in objects), objects  # consolidated

        _replicas_dropped(cluster, lid)
        for node in cluster.nodes:
            assert entries(node.url, lid) == [payload(i) for i in range(24)]
        assert httpx.delete(f"{n0.url}/api/v1/ledgers/{lid}", headers=PW,
                            timeout=30).status_code == 204
        until(lambda: not _keys(s3, bucket, done["key_prefix"]), 60,
              "the objects' deletion")


def test_a_writer_killed_mid_ledger_leaves_its_chunks_to_the_next_writer(
        local_etcd: LocalEtcd, s3_server: LocalS3Server, tmp_path: Path) -> None:
    """kill -9 of the tiering writer under load; n1 takes the ledger over, writes
    more (not tiering it: its chunks are n0's), closes and offloads it under n0's
    prefix.  Every acknowledged entry reads back from S3, byte for byte."""
    with tiering_cluster(local_etcd, s3_server, tmp_path / "c", "tier-kill") as (
            cluster, s3, bucket, lid):
        n0, n1, n2 = cluster.nodes
        acked: list[int] = []
        stop = threading.Event()

        def load() -> None:
            entry_id = 0
            while not stop.is_set():
                try:
                    answer = add(n0.url, lid, payload(entry_id), entry_id)
                except httpx.HTTPError:
                    return  # n0 died under this add
                if answer.status_code != 201:
                    return
                acked.append(entry_id)
                entry_id += 1

        loader = threading.Thread(target=load)
        loader.start()
        try:
            _offload_when(n1.url, lid, lambda o: o["tiered_entries"] >= 9, 60,
                          "a chunk tiered")
            until(lambda: len(acked) >= 16, 60, "adds past the tiered chunk")
            n0.kill()
        finally:
            stop.set()
            loader.join(60)

        # n1 takes over (once n0's lease lapsed) and goes on at the next ids, more
        # than a chunk (n1 does not tier them) — unless the auditor, taking over
        # the ledger of a writer gone past the membership TTL, closed it first.
        sent = {i: payload(i) for i in acked}
        for entry_id in range(acked[-1] + 1, acked[-1] + 14):
            answer = eventually(lambda e=entry_id: add(n1.url, lid, payload(e), e),
                                (201, 409), 60)
            if answer.status_code == 201:
                sent[entry_id] = payload(entry_id)
            elif answer.json()["code"] == "ECLOSED":
                break
            # Otherwise the add n0 died under had landed at this id: the next one.
        closed = httpx.post(f"{n2.url}/api/v1/ledgers/{lid}/close", headers=PW, timeout=30)
        assert closed.status_code == 200 or closed.json()["code"] == "ECLOSED", closed.text
        done = _offload_when(n2.url, lid, lambda o: o["state"] == "OFFLOADED", 120,
                             "the offload")
        assert f"/n0/ledgers/{lid}/" in done["key_prefix"]
        assert sum(n.metrics()["ledgerd_offload_requests_copy"] for n in (n1, n2)) >= 1
        assert [n.metrics()["ledgerd_offload_tier_steps"] for n in (n1, n2)] == [0, 0]
        assert not [k for k in _keys(s3, bucket, "") if f"/n1/ledgers/{lid}/" in k]

        _replicas_dropped(cluster, lid)
        for node in cluster.running:
            read = entries(node.url, lid)
            # The add n0 died under may have landed past the last acknowledged id.
            assert max(sent) + 1 <= len(read) <= max(sent) + 2
            for entry_id, data in enumerate(read):
                # Every acknowledged entry as sent; the one n0 died under, if
                # it landed, as its add sent it.
                assert data == sent.get(entry_id, payload(entry_id)), entry_id


def test_a_tiered_ledger_whose_close_found_its_lock_taken_is_offloaded_by_a_sweep(
        local_etcd: LocalEtcd, s3_server: LocalS3Server, tmp_path: Path) -> None:
    """The writer's tiering step holds the ledger's offload lock when the ledger is
    closed (the close's offload request finds it taken), and the writer dies before
    it lets go.  Its lock goes with its lease, and so does its membership: the
    other nodes' sweep of every ledger then offloads the closed, tiered ledger."""
    with tiering_cluster(local_etcd, s3_server, tmp_path / "c", "tier-sweep") as (
            cluster, _s3, _bucket, lid):
        n0, n1, n2 = cluster.nodes
        for entry_id in range(12):
            assert add(n0.url, lid, payload(entry_id), entry_id).status_code == 201
        _offload_when(n1.url, lid, lambda o: o["tiered_entries"] >= 9, 60, "a chunk tiered")
        keys = ClusterKeys("tier-sweep")

        async def hold_lock_as_n0() -> None:
            """A step of n0's, frozen: its lock, under n0's own lease."""
            async with EtcdClient([local_etcd.endpoint]) as etcd:
                member = await etcd.get(keys.bookie("n0"))
                assert member is not None and member.lease
                assert await etcd.create(keys.offload_lock(lid), b'{"bookie_id": "n0"}',
                                         lease=member.lease) is not None
        asyncio.run(hold_lock_as_n0())
        assert httpx.post(f"{n1.url}/api/v1/ledgers/{lid}/close", headers=PW,
                          timeout=30).status_code == 200
        assert _offload(n2.url, lid)["state"] == "NONE"  # its lock was taken
        n0.kill()
        done = _offload_when(n2.url, lid, lambda o: o["state"] == "OFFLOADED", 120,
                             "the offload by a sweep")
        assert f"/n0/ledgers/{lid}/" in done["key_prefix"]
        assert sum(n.metrics()["ledgerd_offload_requests_copy"] for n in (n1, n2)) >= 1
        _replicas_dropped(cluster, lid)
        for node in cluster.running:
            assert entries(node.url, lid) == [payload(i) for i in range(12)]
