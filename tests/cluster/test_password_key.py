"""The cluster's password key (node/_cluster_password_key.py, docs/cluster.md §13.2) on
real ``ledgerd serve`` nodes and a real etcd: one key on every node, only its id in
etcd, keyed digests in new ledgers' metadata, fetched by a node that has none, and
a node holding another key refuses to start."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from cluster import (
    PASSWORD_KEY_PATH,
    PASSWORD_SCHEME_KEYED,
    PASSWORD_SCHEME_SCRYPT,
    ClusterKeys,
    EtcdClient,
    EtcdMetadataStore,
    Fragment,
    LedgerMetadata,
    LedgerState,
    WriterRef,
    decode_metadata,
    encode_metadata,
)
from common.errors import CorruptRecord, NotReady
from ledger import PasswordVerifier, password_key_id, read_key_file
from node._cluster_password_key import KEY_FILE_NAME, agree_password_key
from tools.local_cluster import TOKEN, ClusterNodeProcess, LiveCluster
from tools.local_etcd import LocalEtcd

SCOPE = "pwkey"
PW = {"X-Ledger-Password": "pw"}
WRONG = {"X-Ledger-Password": "not-pw"}


@pytest.fixture(scope="module")
def cluster(local_etcd: LocalEtcd, tmp_path_factory: pytest.TempPathFactory,
            ) -> Iterator[LiveCluster]:
    with LiveCluster(tmp_path_factory.mktemp("cluster-pwkey"),
                     local_etcd.metadata_url(SCOPE), 3) as live:
        yield live


def etcd_get(etcd: LocalEtcd, key: bytes) -> bytes:
    async def read() -> bytes:
        async with EtcdClient([etcd.endpoint]) as client:
            kv = await client.get(key)
            assert kv is not None
            return kv.value
    return asyncio.run(read())


def create(url: str) -> int:
    response = httpx.post(f"{url}/api/v1/ledgers", timeout=30, json={
        "password": "pw", "ensemble_size": 3, "write_quorum": 2, "ack_quorum": 2})
    assert response.status_code == 201, response.text
    return int(response.json()["ledger_id"])


def add(url: str, ledger_id: int, payload: bytes, headers: dict[str, str]) -> httpx.Response:
    return httpx.post(f"{url}/api/v1/ledgers/{ledger_id}/entries", content=payload,
                      headers=headers, timeout=30)


def key_files(cluster: LiveCluster) -> dict[str, bytes]:
    return {n.bookie_id: (n.data_dir / KEY_FILE_NAME).read_bytes() for n in cluster.nodes
            if (n.data_dir / KEY_FILE_NAME).exists()}


def assert_one_key(cluster: LiveCluster, local_etcd: LocalEtcd) -> bytes:
    """Every node's key file holds the same key, 0600, and etcd holds its id only."""
    keys = key_files(cluster)
    assert set(keys) == {n.bookie_id for n in cluster.nodes}
    assert len(set(keys.values())) == 1, "the nodes hold different keys"
    key = next(iter(keys.values()))
    for node in cluster.nodes:
        assert (node.data_dir / KEY_FILE_NAME).stat().st_mode & 0o777 == 0o600
    record = json.loads(etcd_get(local_etcd, ClusterKeys(SCOPE).password_key))
    assert record["key_id"] == password_key_id(key)
    assert record["made_by"] in keys
    assert key.hex() not in json.dumps(record)
    return key


def check_everywhere(cluster: LiveCluster, ledger_id: int, tag: bytes) -> None:
    """Adds with the right password are taken through every node (direct and
    forwarded), a wrong one is refused by every node."""
    for node in cluster.running:
        response = add(node.url, ledger_id, tag + node.bookie_id.encode(), PW)
        assert response.status_code == 201, (node.bookie_id, response.text)
        refused = add(node.url, ledger_id, b"no", WRONG)
        assert refused.status_code == 403, (node.bookie_id, refused.text)


def test_one_key_on_every_node_and_keyed_digests_checked_everywhere(
        cluster: LiveCluster, local_etcd: LocalEtcd) -> None:
    assert_one_key(cluster, local_etcd)
    for writer in cluster.nodes:
        lid = create(writer.url)
        raw = json.loads(etcd_get(local_etcd, ClusterKeys(SCOPE).ledger(lid)))
        assert raw["password"]["scheme"] == PASSWORD_SCHEME_KEYED
        assert len(bytes.fromhex(raw["password"]["hash"])) == 32
        check_everywhere(cluster, lid, b"x")
        # Delete is a mutation too: refused with a wrong password on a non-writer.
        other = next(n for n in cluster.nodes if n is not writer)
        refused = httpx.delete(f"{other.url}/api/v1/ledgers/{lid}", headers=WRONG, timeout=30)
        assert refused.status_code == 403, refused.text


def test_the_key_route_needs_the_cluster_token(cluster: LiveCluster) -> None:
    url = cluster.nodes[0].url + PASSWORD_KEY_PATH
    assert httpx.get(url, timeout=10).status_code == 401
    assert httpx.get(url, timeout=10,
                     headers={"Authorization": "Bearer wrong"}).status_code == 401
    given = httpx.get(url, timeout=10, headers={"Authorization": f"Bearer {TOKEN}"})
    assert given.status_code == 200 and given.headers["cache-control"] == "no-store"
    assert bytes.fromhex(given.json()["key"]) == key_files(cluster)["n0"]


def test_an_old_scrypt_record_still_verifies(cluster: LiveCluster,
                                             local_etcd: LocalEtcd) -> None:
    """A ledger written before keyed digests: its record has no scheme and a scrypt
    digest (made here by the same code the old release ran)."""
    hashed = PasswordVerifier().hash("pw")  # no key: scrypt, as cluster mode did

    async def put_old_record() -> tuple[int, bytes]:
        async with EtcdClient([local_etcd.endpoint]) as client:
            keys = ClusterKeys(SCOPE)
            store = EtcdMetadataStore(client, keys)
            lid = await store.allocate_ledger_id()
            md = LedgerMetadata(
                ledger_id=lid, state=LedgerState.OPEN, ensemble_size=3, write_quorum=2,
                ack_quorum=2, ensembles=(Fragment(0, ("n0", "n1", "n2"), 1),),
                writer=WriterRef("n0", 1), password_salt=hashed.salt,
                password_hash=hashed.digest, created_at=time.time())
            raw = encode_metadata(md)
            assert await client.create(keys.ledger(lid), raw) is not None
            return lid, raw
    lid, raw = asyncio.run(put_old_record())
    assert md_scheme(raw) is None  # what records written before the scheme hold
    # n0 takes the ledger over (its writer epoch 1 is not running), n1 and n2 forward.
    check_everywhere(cluster, lid, b"old")
    stored = json.loads(etcd_get(local_etcd, ClusterKeys(SCOPE).ledger(lid)))
    assert stored["password"].get("scheme", PASSWORD_SCHEME_SCRYPT) == PASSWORD_SCHEME_SCRYPT
    assert stored["password"]["hash"] == hashed.digest.hex()  # not rehashed


def md_scheme(raw: bytes) -> str | None:
    scheme = json.loads(raw)["password"].get("scheme")
    return None if scheme is None else str(scheme)


def test_a_node_without_the_key_fetches_it_and_checks_older_ledgers(
        cluster: LiveCluster, local_etcd: LocalEtcd) -> None:
    before = [create(cluster.nodes[0].url), create(cluster.nodes[2].url)]
    node = cluster.node("n2")
    node.stop()
    (node.data_dir / KEY_FILE_NAME).unlink()  # a lost key file
    node.start()
    cluster.wait_members(3)
    assert_one_key(cluster, local_etcd)
    assert "fetched the cluster's password key" in node.logs()
    for lid in before:  # n2 checks them itself (one it wrote before: it takes it over)
        check_everywhere(cluster, lid, b"after")


def test_a_node_with_another_key_refuses_to_start_naming_the_file(
        cluster: LiveCluster, local_etcd: LocalEtcd) -> None:
    node = cluster.node("n1")
    path = node.data_dir / KEY_FILE_NAME
    kept = path.read_bytes()
    node.stop()
    path.write_bytes(os.urandom(32))
    try:
        with pytest.raises(RuntimeError, match="server exited") as refused:
            node.start()
        assert str(path) in str(refused.value)
        assert "is not this cluster's" in str(refused.value)
        assert not node.running
    finally:
        path.write_bytes(kept)
        node.start()
        cluster.wait_members(3)
    assert_one_key(cluster, local_etcd)


def test_a_new_node_fetches_the_key(cluster: LiveCluster, local_etcd: LocalEtcd) -> None:
    lid = create(cluster.nodes[1].url)
    fresh = cluster.add_node("n3")
    try:
        assert_one_key(cluster, local_etcd)
        check_everywhere(cluster, lid, b"n3")
        assert key_files(cluster)["n3"] == key_files(cluster)["n0"]
    finally:
        fresh.stop()
        cluster.nodes.remove(fresh)
        cluster.wait_members(3)


# --- the agreement alone, on a real etcd (no nodes) -------------------------------


def test_nodes_starting_together_agree_on_one_key(local_etcd: LocalEtcd,
                                                  tmp_path: Path) -> None:
    """Three first starts at once: each makes a key and offers it, one wins, the
    others drop theirs (made by this start: nothing was hashed with it) and fetch
    the winner's from it."""
    dirs = {f"b{i}": tmp_path / f"b{i}" for i in range(3)}
    for directory in dirs.values():
        directory.mkdir()

    async def fetch(url: str) -> bytes:
        key = read_key_file(dirs[url.removeprefix("http://")] / KEY_FILE_NAME)
        if key is None:
            raise NotReady(f"{url} has no key yet")
        return key

    async def main() -> list[bytes]:
        keys = ClusterKeys(f"agree-{uuid.uuid4().hex}")
        # A client each, as each node has: their reads of etcd are not serialised.
        clients = [EtcdClient([local_etcd.endpoint]) for _ in dirs]
        try:
            for bookie_id in dirs:
                await clients[0].put(keys.bookie(bookie_id),
                                     json.dumps({"url": f"http://{bookie_id}"}).encode())
            return list(await asyncio.gather(*[
                agree_password_key(etcd, keys, bookie_id=b, data_dir=d, fetch=fetch)
                for etcd, (b, d) in zip(clients, dirs.items(), strict=True)]))
        finally:
            for client in clients:
                await client.aclose()
    agreed = asyncio.run(main())
    assert len(set(agreed)) == 1
    for directory in dirs.values():
        assert [p.name for p in directory.iterdir()] == [KEY_FILE_NAME]  # no partial file
        assert (directory / KEY_FILE_NAME).read_bytes() == agreed[0]


def test_the_scheme_is_tagged_only_for_keyed_digests() -> None:
    md = LedgerMetadata(ledger_id=1, state=LedgerState.OPEN, ensemble_size=1,
                        write_quorum=1, ack_quorum=1, ensembles=(Fragment(0, ("n0",), 1),),
                        writer=WriterRef("n0", 1), password_salt=b"\x00", password_hash=b"\x11")
    assert md.password_scheme == PASSWORD_SCHEME_SCRYPT and md_scheme(encode_metadata(md)) is None
    keyed = dataclasses.replace(md, password_scheme=PASSWORD_SCHEME_KEYED)
    raw = encode_metadata(keyed)
    assert md_scheme(raw) == PASSWORD_SCHEME_KEYED and decode_metadata(raw) == keyed
    assert decode_metadata(encode_metadata(md)) == md
    with pytest.raises(CorruptRecord, match="unknown password scheme 'argon2'"):
        decode_metadata(raw.replace(b'"keyed-blake2b"', b'"argon2"'))


def test_a_new_node_the_members_refuse_waits_and_says_why(cluster: LiveCluster) -> None:
    """A new node with the wrong CLUSTER_TOKEN gets no key: it never serves, and its
    log names what it waits for and each member's refusal."""
    stranger = ClusterNodeProcess(cluster.root, "stranger", cluster.metadata_url,
                                  token="not-the-token")
    stranger.spawn()
    try:
        deadline = time.monotonic() + 15
        while "waiting for a member" not in stranger.logs() and time.monotonic() < deadline:
            time.sleep(0.1)  # polling another process's log
        line = next(json.loads(line) for line in stranger.logs().splitlines()
                    if "waiting for a member" in line)
        assert line["waiting_for"] == "cluster password key"
        assert set(line["members"]) == {"n0", "n1", "n2"}
        assert all("refused this node's CLUSTER_TOKEN" in why
                   for why in line["failures"].values())
        with pytest.raises(httpx.TransportError):
            httpx.get(f"{stranger.url}/api/v1/bookie/is_ready", timeout=2)
        assert not (stranger.data_dir / KEY_FILE_NAME).exists()
        # SIGTERM ends the wait (uvicorn alone would wait for the startup to end).
        started = time.monotonic()
        stranger.stop()
        assert time.monotonic() - started < 10
        assert stranger.process is not None and stranger.process.returncode != -9
    finally:
        stranger.kill()
