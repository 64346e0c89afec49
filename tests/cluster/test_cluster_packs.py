"""Packs of small ledgers in a live cluster (docs/cluster.md §10.1), on a real S3
server (Ceph radosgw) and a real etcd: closed ledgers are packed into shared
objects by the nodes holding their offload locks; past OFFLOAD_DELETION_LAG the
replicas go and every node reads the ledgers back from the packs; deleting most
of a pack's ledgers makes a node rewrite it and delete the old one; a node
killed (kill -9) while its pack is half written leaves members that another node
resolves and packs again, every entry intact."""

from __future__ import annotations

import base64
import os
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.cluster.test_cluster_offload import until
from tools.local_cluster import TOKEN, LiveCluster
from tools.local_etcd import LocalEtcd
from tools.local_s3 import LocalS3Server, delete_bucket

PW = {"X-Ledger-Password": "pw"}
AUTH = {"Authorization": f"Bearer {TOKEN}"}
LEDGERS = 24


@pytest.fixture
def bucket(s3_server: LocalS3Server) -> Iterator[str]:
    s3 = s3_server.client()
    name = f"packs-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=name)
    try:
        yield name
    finally:
        delete_bucket(s3, name)


def _settings(s3_server: LocalS3Server, bucket: str, **more: str) -> dict[str, str]:
    return {"S3_BUCKET": bucket, "S3_ENDPOINT_URL": s3_server.endpoint_url,
            "OFFLOAD_DELETION_LAG": "0", "OFFLOAD_PACK": "true", "OFFLOAD_PACK_WAIT": "1",
            "OFFLOAD_PACK_DELETE_DELAY": "0", "OFFLOAD_CHUNK_SIZE": "5MiB",
            "OFFLOAD_PART_SIZE": "5MiB", **more}


def _env(s3_server: LocalS3Server) -> dict[str, str]:
    return {k: v for k, v in s3_server.env().items() if k.startswith("AWS_")}


def _make_ledgers(urls: list[str], count: int) -> dict[int, list[bytes]]:
    """``count`` closed ledgers of 1-3 small entries, made through every node."""
    made: dict[int, list[bytes]] = {}
    for n in range(count):
        url = urls[n % len(urls)]
        lid = httpx.post(f"{url}/api/v1/ledgers", json={"password": "pw"},
                         timeout=30).json()["ledger_id"]
        sent = [f"ledger {lid} entry {e} ".encode() * (5 + e) for e in range(1 + n % 3)]
        for payload in sent:
            assert httpx.post(f"{url}/api/v1/ledgers/{lid}/entries", content=payload,
                              headers=PW, timeout=30).status_code == 201
        assert httpx.post(f"{url}/api/v1/ledgers/{lid}/close", headers=PW,
                          timeout=30).status_code == 200
        made[lid] = sent
    return made


def _offload(url: str, lid: int) -> dict[str, Any]:
    return dict(httpx.get(f"{url}/api/v1/ledgers/{lid}/offload", timeout=30).json())


def _all_packed(url: str, ledgers: dict[int, list[bytes]]) -> dict[int, dict[str, Any]]:
    found = {lid: _offload(url, lid) for lid in ledgers}
    if all(info["state"] == "OFFLOADED" and info.get("pack_key") for info in found.values()):
        return found
    return {}


def _read_all(url: str, ledgers: dict[int, list[bytes]]) -> None:
    for lid, sent in ledgers.items():
        page = httpx.get(f"{url}/api/v1/ledgers/{lid}/entries", timeout=60).json()
        assert [base64.b64decode(e["payload"]) for e in page["entries"]] == sent, lid


def _replicas_gone(cluster: LiveCluster, ledgers: dict[int, list[bytes]]) -> None:
    for node in cluster.running:
        for lid in ledgers:
            until(lambda n=node, i=lid: httpx.get(
                f"{n.url}/internal/v1/ledgers/{i}/replica/entries", headers=AUTH,
                timeout=30).json()["entries"] == [], 60, f"{node.bookie_id}'s GC of {lid}")


def _owner(pack_key: str) -> str:
    return pack_key.split("/")[2]  # {prefix}/{cluster}/{bookie_id}/packs/{id}/data


def _pack_keys(s3: Any, bucket: str) -> set[str]:
    listed = s3.list_objects_v2(Bucket=bucket).get("Contents", [])
    return {o["Key"] for o in listed if o["Key"].endswith("/data") and "/packs/" in o["Key"]}


def test_packed_read_back_from_every_node_and_rewritten_after_deletes(
        local_etcd: LocalEtcd, s3_server: LocalS3Server, bucket: str, tmp_path: Path) -> None:
    s3 = s3_server.client()
    with LiveCluster(tmp_path / "c", local_etcd.metadata_url("packs"), 3,
                     settings=_settings(s3_server, bucket), extra_env=_env(s3_server)) as cluster:
        urls = [n.url for n in cluster.nodes]
        ledgers = _make_ledgers(urls, LEDGERS)
        for n, lid in enumerate(ledgers):  # each node takes the locks of a third
            assert httpx.post(f"{urls[n % 3]}/api/v1/ledgers/{lid}/offload",
                              timeout=30).status_code == 202
        packed = until(lambda: _all_packed(urls[0], ledgers), 120, "the packs")
        keys = {info["pack_key"] for info in packed.values()}
        # One pack per node that took locks, not two objects per ledger.
        assert 1 <= len(keys) <= 3, keys
        assert _pack_keys(s3, bucket) == keys
        assert {_owner(k) for k in keys} <= {"n0", "n1", "n2"}
        # The nodes count their S3 requests as a standalone node does: a pack is
        # a data object and an index at least, PUT whole or in parts.
        written = [n.metrics() for n in cluster.nodes]
        assert sum(m["ledgerd_offload_requests_put"] + m["ledgerd_offload_requests_part"]
                   for m in written) >= 2 * len(keys)
        _replicas_gone(cluster, ledgers)
        for url in urls:
            _read_all(url, ledgers)

        # Delete all but one of every eight (one in each node's pack): every pack
        # falls below half live and is rewritten.
        kept = dict(list(ledgers.items())[::8])
        for lid in ledgers:
            if lid not in kept:
                assert httpx.delete(f"{urls[lid % 3]}/api/v1/ledgers/{lid}", headers=PW,
                                    timeout=30).status_code == 204

        def rewritten() -> dict[int, dict[str, Any]]:
            found = _all_packed(urls[1], kept)
            if found and not {i["pack_key"] for i in found.values()} & keys \
                    and not _pack_keys(s3, bucket) & keys:
                return found
            return {}
        moved = until(rewritten, 120, "the rewrite of the packs")
        new_keys = {info["pack_key"] for info in moved.values()}
        assert _pack_keys(s3, bucket) == new_keys
        # Each beside the pack it replaces, whichever node rewrote it.
        assert {_owner(k) for k in new_keys} == {_owner(k) for k in keys}
        for url in urls:
            _read_all(url, kept)


def test_a_node_killed_mid_pack_leaves_members_another_node_packs_again(
        local_etcd: LocalEtcd, s3_server: LocalS3Server, bucket: str, tmp_path: Path) -> None:
    """The pack's node marks its members IN_PROGRESS, then its upload hangs (the
    S3 server is stopped: SIGSTOP, a fault of the real server) and the node is
    killed.  Another node finds the members when the dead node's lease and locks
    are gone, finds no index for the pack, deletes it and packs them again."""
    s3 = s3_server.client()
    s3_pid = s3_server.running_pids()["radosgw"]
    with LiveCluster(tmp_path / "c", local_etcd.metadata_url("packs-kill"), 3,
                     settings=_settings(s3_server, bucket),
                     extra_env=_env(s3_server)) as cluster:
        urls = [n.url for n in cluster.nodes]
        ledgers = _make_ledgers(urls, 9)
        victim = cluster.nodes[2]
        os.kill(s3_pid, signal.SIGSTOP)
        try:
            for lid in ledgers:
                assert httpx.post(f"{victim.url}/api/v1/ledgers/{lid}/offload",
                                  timeout=30).status_code == 202
            first = next(iter(ledgers))
            until(lambda: _offload(urls[0], first)["state"] == "IN_PROGRESS", 60,
                  "the members marked IN_PROGRESS")
            victim.kill()
        finally:
            os.kill(s3_pid, signal.SIGCONT)
        urls = urls[:2]
        packed = until(lambda: _all_packed(urls[0], ledgers), 120, "the packs after the kill")
        keys = {info["pack_key"] for info in packed.values()}
        assert {_owner(k) for k in keys} <= {"n0", "n1"}, keys
        assert _pack_keys(s3, bucket) == keys  # nothing of the half-written pack
        assert not s3.list_multipart_uploads(Bucket=bucket).get("Uploads")
        _replicas_gone(cluster, ledgers)
        for url in urls:
            _read_all(url, ledgers)


def test_the_full_audit_deletes_old_packs_no_ledger_points_at(
        local_etcd: LocalEtcd, s3_server: LocalS3Server, bucket: str, tmp_path: Path) -> None:
    """What a rewriter that died before deleting the old pack leaves behind: a
    pack nothing points at.  The auditor's full audit (every second here) deletes
    it once it is older than an hour (its id starts with its epoch milliseconds);
    a younger one may be a rewrite not repointed yet, and stays."""
    s3 = s3_server.client()
    settings = _settings(s3_server, bucket, AUDIT_FULL_INTERVAL="1")
    with LiveCluster(tmp_path / "c", local_etcd.metadata_url("packs-audit"), 3,
                     settings=settings, extra_env=_env(s3_server)) as cluster:
        urls = [n.url for n in cluster.nodes]
        ledgers = _make_ledgers(urls, 6)
        for lid in ledgers:
            assert httpx.post(f"{urls[1]}/api/v1/ledgers/{lid}/offload",
                              timeout=30).status_code == 202
        packed = until(lambda: _all_packed(urls[0], ledgers), 120, "the pack")
        (live_key,) = {info["pack_key"] for info in packed.values()}
        now_ms = int(time.time() * 1000)
        old, young = (live_key.replace(live_key.split("/")[4], f"{ms}-{uuid.uuid4().hex[:12]}")
                      for ms in (now_ms - 2 * 3600 * 1000, now_ms))
        for key in (old, young):
            for name in ("data", "index"):
                s3.put_object(Bucket=bucket, Key=key.removesuffix("data") + name, Body=b"x")
        until(lambda: old not in _pack_keys(s3, bucket), 60, "the old orphan's deletion")
        assert _pack_keys(s3, bucket) == {live_key, young}
        assert not [o for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])
                    if o["Key"].startswith(old.removesuffix("data"))]
        for url in urls:
            _read_all(url, ledgers)
