"""S3 objects and requests per GiB: a million 1 KiB ledgers packed, and one large
ledger in 32 MiB parts (``python -m bench --only pack``; radosgw on loopback,
started here, or ``BENCH_S3_ENDPOINT``).

The million ledgers are *generated*, not written through a bookie: a
:class:`GeneratedLedgers` source (the engine seam offload codes against,
:class:`offload._source.PackSource`) answers ``get_ledger`` and
``scan_entries`` from the ledger id (one entry each, 1 KiB payload derived
from the id, its real CRC32C) and keeps the offload records in memory.
Everything from there on is the real code against the real S3 server: the
:class:`~offload._packer.Packer` packs them into packs of ``pack_size_bytes``
(defaults), and a cold :class:`~offload.RemoteLedgerReader` reads every entry
back, checking every CRC.  Creating a million ledgers through the journal
would measure the engine, not S3, and take longer than the rest of the run;
``--quick`` packs 100 000.  Next to them, 100 000 *real* ledgers (10 000 with
``--quick``; created, one 1 KiB entry added, closed through a real bookie,
scrypt's cost lowered as in the reclaim bench) are packed from the bookie
and read back the same way (rows with ``generated=false``).

Rows (each next to its peer measured in the same run):

- ``pack_objects_per_gib``: objects in the bucket per GiB of frames after
  packing, vs two objects per ledger of its own (the ``segment`` and
  ``index`` a ledger gets unpacked), limit 64;
- ``pack_requests_per_gib``: requests to pack them, by kind, vs the
  requests per ledger of offloading a sample of the same ledgers one by one
  (measured on ``SAMPLE`` of them, scaled);
- ``pack_read_gets_per_gib``: GETs to read every entry back, limit 100;
- ``large_requests_per_gib`` / ``large_read_gets_per_gib``: one 1 GiB ledger of
  64 KiB entries offloaded alone with the default 32 MiB parts (limit 46) and
  read back entry by entry (limit 100);
- ``cluster_pack_*`` (the ``cluster_pack`` suite): a 3-node cluster packing
  1 GiB of 1 MiB ledgers: objects per GiB (limit 64), the nodes' S3 requests
  per GiB while packing (their ``ledgerd_offload_requests_*`` metrics; what a
  standalone node's packs cost is ``pack_requests_per_gib``), GETs per GiB of a
  cold reader (limit 100).
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from common.units import GiB, KiB, MiB
from ledger import Entry, LedgerInfo, LedgerState, OffloadInfo, TierPosition
from offload import Offloader, OffloadSettings, RemoteLedgerReader, S3ObjectStore
from offload._format import FRAME_HEADER_SIZE_BYTES, crc32c
from offload._packer import Packer
from offload._s3 import make_s3_client
from tools.local_server import ServerProcess

from ._harness import Row
from .offload_bench import s3_endpoint

BUCKET = "pack-bench"
SAMPLE = 500


class GeneratedLedgers:
    """CLOSED ledgers ``first..first+count-1``, each of ``entries`` entries of
    ``entry_bytes``; payloads and CRCs computed from the ids on every scan."""

    def __init__(self, count: int, *, entry_bytes: int, entries: int = 1, first: int = 1) -> None:
        self.first, self.count = first, count
        self.entry_bytes, self.entries = entry_bytes, entries
        self._offloads: dict[int, OffloadInfo] = {}
        self._lock = threading.Lock()

    @property
    def next_ledger_id(self) -> int:
        return self.first + self.count

    @property
    def frame_bytes(self) -> int:
        return self.count * self.entries * (FRAME_HEADER_SIZE_BYTES + self.entry_bytes)

    def payload(self, ledger_id: int, entry_id: int) -> bytes:
        seed = (ledger_id * 1_000_003 + entry_id).to_bytes(8, "big")
        return seed * (self.entry_bytes // 8) + seed[:self.entry_bytes % 8]

    def get_ledger(self, ledger_id: int) -> LedgerInfo:
        return LedgerInfo(ledger_id=ledger_id, state=LedgerState.CLOSED,
                          last_add_confirmed=self.entries - 1,
                          length=self.entries * self.entry_bytes, entries=self.entries,
                          created_at=1.0e9, closed_at=1.0e9 + 1, metadata={"app": "bench"},
                          offload=self._offloads.get(ledger_id, OffloadInfo()),
                          tier=TierPosition())

    def list_ledgers(self, *, state: LedgerState | None = None, after: int | None = None,
                     limit: int = 100) -> tuple[list[LedgerInfo], int | None]:
        start = self.first if after is None else after + 1
        end = min(self.first + self.count, start + limit)
        page = [self.get_ledger(i) for i in range(start, end)]
        return page, (end - 1 if end < self.first + self.count else None)

    def scan_entries(self, ledger_id: int, start: int = 0,
                     end: int | None = None) -> Iterator[Entry]:
        last = self.entries - 1 if end is None else min(end, self.entries - 1)
        for entry_id in range(start, last + 1):
            payload = self.payload(ledger_id, entry_id)
            yield Entry(ledger_id=ledger_id, entry_id=entry_id, payload=payload,
                        crc32c=crc32c(payload))

    def set_offload(self, ledger_id: int, info: OffloadInfo) -> LedgerInfo:
        with self._lock:
            self._offloads[ledger_id] = info
        return self.get_ledger(ledger_id)

    def set_offloads(self, infos: Mapping[int, OffloadInfo]) -> list[LedgerInfo]:
        with self._lock:
            self._offloads.update(infos)
        return [self.get_ledger(ledger_id) for ledger_id in infos]

    def record_tier_position(self, ledger_id: int, position: TierPosition) -> LedgerInfo:
        raise NotImplementedError

    def offload_of(self, ledger_id: int) -> OffloadInfo:
        return self._offloads[ledger_id]


_Count = TypeVar("_Count", int, float)


def _used(store: S3ObjectStore, before: dict[str, int]) -> dict[str, int]:
    return _requests_between(before, store.statistics())


def _requests_between(before: Mapping[str, _Count],
                      after: Mapping[str, _Count]) -> dict[str, _Count]:
    """Requests made between two readings of ``requests_<kind>`` counters, by
    kind, kinds with none left out."""
    return {k.removeprefix("requests_"): v - before.get(k, 0)
            for k, v in after.items()
            if k.startswith("requests_") and v - before.get(k, 0)}


def _per_gib(counts: Mapping[str, float], frame_bytes: int) -> dict[str, float]:
    return {k: round(v * GiB / frame_bytes, 1) for k, v in counts.items()}


def _objects(client: Any, prefix: str) -> int:
    return _objects_in(client, BUCKET, prefix)


def _objects_in(client: Any, bucket: str, prefix: str = "") -> int:
    count = 0
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        count += len(page.get("Contents", []))
    return count


def _pack_rows(client: Any, settings: OffloadSettings, ledger_count: int) -> list[Row]:
    store = S3ObjectStore(client, settings)
    source = GeneratedLedgers(ledger_count, entry_bytes=KiB)
    per_pack = settings.pack_size_bytes // (FRAME_HEADER_SIZE_BYTES + KiB)
    before = store.statistics()
    started = time.monotonic()
    with ThreadPoolExecutor(settings.upload_concurrency) as pool:
        packer = Packer(source, store, settings, executor=pool)
        ids = range(source.first, source.next_ledger_id)
        for at in range(0, len(ids), per_pack):
            packer.pack(ids[at:at + per_pack])
    pack_s = time.monotonic() - started
    packed = _used(store, before)
    objects = _objects(client, f"{settings.prefix}/{settings.cluster}/{settings.bookie_id}/packs/")

    # Read every entry back through a cold reader, ledger by ledger.
    reader = RemoteLedgerReader(store, settings)
    before = store.statistics()
    started = time.monotonic()
    try:
        for ledger_id in ids:
            payload, _ = reader.read_entry(ledger_id, 0, source.offload_of(ledger_id))
            if payload != source.payload(ledger_id, 0):
                raise AssertionError(f"ledger {ledger_id} read back wrong")
    finally:
        reader.close()
    read_s = time.monotonic() - started
    reads = _used(store, before)

    # The peer: a sample of the same ledgers offloaded one by one, each with
    # objects of its own (what every small ledger cost before packs).
    sample = GeneratedLedgers(SAMPLE, entry_bytes=KiB, first=source.next_ledger_id)
    before = store.statistics()
    with ThreadPoolExecutor(settings.upload_concurrency) as pool:
        offloader = Offloader(sample, store, settings, executor=pool)
        for ledger_id in range(sample.first, sample.next_ledger_id):
            offloader.offload(ledger_id)
    alone = _used(store, before)
    alone_objects = _objects(client, f"{settings.prefix}/{settings.cluster}/"
                                     f"{settings.bookie_id}/ledgers/")
    params = {"ledgers": ledger_count, "entry_bytes": KiB, "generated": True}
    return [
        Row("pack_objects_per_gib", params, round(objects * GiB / source.frame_bytes, 1),
            "objects/GiB", limit=64, limit_name="target",
            extra={"objects": objects, "alone_objects_per_gib": round(
                alone_objects * GiB / sample.frame_bytes, 1)}),
        Row("pack_requests_per_gib", params,
            round(sum(packed.values()) * GiB / source.frame_bytes, 1), "requests/GiB",
            extra={**_per_gib(packed, source.frame_bytes), "pack_s": round(pack_s, 1),
                   "alone_requests_per_gib": round(
                       sum(alone.values()) * GiB / sample.frame_bytes, 1),
                   **{f"alone_{k}": v for k, v in _per_gib(alone, sample.frame_bytes).items()}}),
        Row("pack_read_gets_per_gib", params,
            round(reads.get("get", 0) * GiB / source.frame_bytes, 1), "GETs/GiB",
            limit=100, limit_name="target",
            extra={"read_s": round(read_s, 1), **_per_gib(reads, source.frame_bytes)}),
    ]


def _real_rows(client: Any, settings: OffloadSettings, workdir: Path,
               ledger_count: int) -> list[Row]:
    """``ledger_count`` real ledgers (created, one 1 KiB entry added, closed
    through a bookie), packed by the Packer on that bookie and read back."""
    from journal import JournalSettings
    from ledger import Bookie, EngineSettings, _password
    from ledger import LedgerInfo as _Info

    scrypt_n = _password._SCRYPT_N
    # Creation pays scrypt (about 9 ms each): lowered here as the reclaim bench
    # does; nothing measured below depends on it.
    _password._SCRYPT_N = 2
    data_dir = workdir / "bookie"
    data_dir.mkdir(parents=True)
    bookie = Bookie.open(EngineSettings.in_directory(
        data_dir, journal=JournalSettings(device_path=data_dir / "journal.dev",
                                          capacity_bytes=256 * MiB)))
    try:
        started = time.monotonic()
        ids: list[int] = []
        for first in range(0, ledger_count, 1000):
            created: list[_Info] = [p.result() for p in [
                bookie.create_ledger(password="pw", metadata={})
                for _ in range(min(1000, ledger_count - first))]]
            batch = [info.ledger_id for info in created]
            for add in [bookie.append(lid, [(None, [lid.to_bytes(8, "big") * 128])],
                                      password="pw")[0]
                        for lid in batch]:
                add.result()
            for close in [bookie.close_ledger(lid, password="pw") for lid in batch]:
                close.result()
            ids += batch
        fill_s = time.monotonic() - started
        store = S3ObjectStore(client, replace(settings, bookie_id="real"))
        layout_settings = replace(settings, bookie_id="real")
        per_pack = settings.pack_size_bytes // (FRAME_HEADER_SIZE_BYTES + KiB)
        before = store.statistics()
        started = time.monotonic()
        with ThreadPoolExecutor(settings.upload_concurrency) as pool:
            packer = Packer(bookie, store, layout_settings, executor=pool)
            for at in range(0, len(ids), per_pack):
                packer.pack(ids[at:at + per_pack])
        pack_s = time.monotonic() - started
        packed = _used(store, before)
        frame_bytes = ledger_count * (FRAME_HEADER_SIZE_BYTES + KiB)
        objects = _objects(client, f"{settings.prefix}/{settings.cluster}/real/")
        reader = RemoteLedgerReader(store, layout_settings)
        before = store.statistics()
        try:
            for ledger_id in ids:
                payload, _ = reader.read_entry(ledger_id, 0, bookie.get_ledger(ledger_id).offload)
                if payload != ledger_id.to_bytes(8, "big") * 128:
                    raise AssertionError(f"ledger {ledger_id} read back wrong")
        finally:
            reader.close()
        reads = _used(store, before)
    finally:
        bookie.close()
        _password._SCRYPT_N = scrypt_n
    params = {"ledgers": ledger_count, "entry_bytes": KiB, "generated": False}
    return [
        Row("pack_objects_per_gib", params, round(objects * GiB / frame_bytes, 1),
            "objects/GiB", limit=64, limit_name="target", extra={"objects": objects,
                                                                 "fill_s": round(fill_s, 1)}),
        Row("pack_requests_per_gib", params, round(sum(packed.values()) * GiB / frame_bytes, 1),
            "requests/GiB", extra={**_per_gib(packed, frame_bytes), "pack_s": round(pack_s, 1)}),
        Row("pack_read_gets_per_gib", params, round(reads.get("get", 0) * GiB / frame_bytes, 1),
            "GETs/GiB", limit=100, limit_name="target", extra=_per_gib(reads, frame_bytes)),
    ]


def _large_rows(client: Any, settings: OffloadSettings) -> list[Row]:
    store = S3ObjectStore(client, settings)
    entry_bytes = 64 * KiB
    source = GeneratedLedgers(1, entry_bytes=entry_bytes, entries=GiB // entry_bytes,
                              first=10 ** 9)
    before = store.statistics()
    with ThreadPoolExecutor(settings.upload_concurrency) as pool:
        Offloader(source, store, settings, executor=pool).offload(source.first)
    sent = _used(store, before)
    reader = RemoteLedgerReader(store, settings)
    before = store.statistics()
    try:
        for entry_id in range(source.entries):
            reader.read_entry(source.first, entry_id, source.offload_of(source.first))
    finally:
        reader.close()
    reads = _used(store, before)
    params = {"ledger_bytes": GiB, "entry_bytes": entry_bytes,
              "part_bytes": settings.part_size_bytes, "generated": True}
    return [
        Row("large_requests_per_gib", params,
            round(sum(sent.values()) * GiB / source.frame_bytes, 1), "requests/GiB",
            limit=46, limit_name="target", extra=_per_gib(sent, source.frame_bytes)),
        Row("large_read_gets_per_gib", params,
            round(reads.get("get", 0) * GiB / source.frame_bytes, 1), "GETs/GiB",
            limit=100, limit_name="target", extra=_per_gib(reads, source.frame_bytes)),
    ]


def _cluster_rows(settings: OffloadSettings, workdir: Path, *, ledger_count: int,
                  entries: int, entry_bytes: int, bucket: str = f"{BUCKET}-cluster",
                  ) -> list[Row]:
    """A 3-node cluster (real etcd) packing ``ledger_count`` closed ledgers of
    ``entries`` x ``entry_bytes``, offload requested through every node: the
    objects in the bucket per GiB, and the GETs of a cold reader reading every
    entry back from the records in etcd (the nodes' own reader code)."""
    import httpx

    from cluster import ClusterKeys, EtcdClient, EtcdMetadataStore, parse_metadata_url
    from tools.local_cluster import LiveCluster
    from tools.local_etcd import LocalEtcd

    client = make_s3_client(settings)
    client.create_bucket(Bucket=bucket)
    node_settings = {"S3_BUCKET": bucket, "S3_ENDPOINT_URL": settings.endpoint_url,
                     "OFFLOAD_PACK": "true", "OFFLOAD_PACK_WAIT": "2",
                     "JOURNAL_CAPACITY": "256MiB", "WRITE_CACHE_SIZE": "64MiB",
                     "ENTRY_LOG_SIZE_LIMIT": "64MiB", "AUDIT_INTERVAL": "5"}
    env = {k: v for k, v in os.environ.items() if k.startswith("AWS_")}
    payload = bytes(range(256)) * (entry_bytes // 256)
    with LocalEtcd(workdir / "etcd") as etcd, \
            LiveCluster(workdir / "c", etcd.metadata_url("packs"), 3, settings=node_settings,
                        extra_env=env) as cluster:
        urls = [node.url for node in cluster.nodes]

        def fill(n: int) -> int:
            url = urls[n % 3]
            with httpx.Client(base_url=url, timeout=60) as http:
                lid = int(http.post("/api/v1/ledgers", json={"password": "pw"})
                          .json()["ledger_id"])
                for _ in range(entries):
                    http.post(f"/api/v1/ledgers/{lid}/entries", content=payload,
                              headers={"X-Ledger-Password": "pw"}).raise_for_status()
                http.post(f"/api/v1/ledgers/{lid}/close",
                          headers={"X-Ledger-Password": "pw"}).raise_for_status()
            return lid

        started = time.monotonic()
        with ThreadPoolExecutor(16) as pool:
            ids = list(pool.map(fill, range(ledger_count)))
        fill_s = time.monotonic() - started
        requested = _node_requests(cluster.nodes)
        started = time.monotonic()
        with httpx.Client(timeout=60) as http:
            for n, lid in enumerate(ids):
                http.post(f"{urls[n % 3]}/api/v1/ledgers/{lid}/offload").raise_for_status()
            while sum(1 for lid in ids if http.get(f"{urls[0]}/api/v1/ledgers/{lid}/offload")
                      .json().get("pack_key")) < len(ids):
                time.sleep(0.5)  # polling the nodes' progress
        pack_s = time.monotonic() - started
        packed = _requests_between(requested, _node_requests(cluster.nodes))

        async def records() -> dict[int, OffloadInfo]:
            endpoints, scope = parse_metadata_url(etcd.metadata_url("packs"))
            async with EtcdClient(endpoints) as etcd_client:
                store = EtcdMetadataStore(etcd_client, ClusterKeys(scope))
                found = {lid: await store.read(lid) for lid in ids}
            return {lid: OffloadInfo.from_doc(value[0].offload or {})
                    for lid, value in found.items() if value is not None}
        infos = asyncio.run(records())
    frame_bytes = ledger_count * entries * (FRAME_HEADER_SIZE_BYTES + entry_bytes)
    objects = _objects_in(client, bucket)
    store = S3ObjectStore(client, replace(settings, bucket=bucket))
    reader = RemoteLedgerReader(store, replace(settings, bucket=bucket))
    before = store.statistics()
    try:
        for lid in sorted(ids):  # in id order, as the one-node rows read
            for entry_id in range(entries):
                got, _ = reader.read_entry(lid, entry_id, infos[lid])
                if got != payload:
                    raise AssertionError(f"ledger {lid} entry {entry_id} read back wrong")
    finally:
        reader.close()
    reads = _used(store, before)
    packs = len({info.pack_key for info in infos.values()})
    params = {"ledgers": ledger_count, "ledger_bytes": entries * entry_bytes, "nodes": 3}
    return [
        Row("cluster_pack_objects_per_gib", params, round(objects * GiB / frame_bytes, 1),
            "objects/GiB", limit=64, limit_name="target",
            extra={"objects": objects, "packs": packs, "fill_s": round(fill_s, 1),
                   "pack_s": round(pack_s, 1),
                   "pack_mb_s": round(frame_bytes / pack_s / 1e6, 1)}),
        Row("cluster_pack_requests_per_gib", params,
            round(sum(packed.values()) * GiB / frame_bytes, 1), "requests/GiB",
            extra=_per_gib(packed, frame_bytes)),
        Row("cluster_pack_read_gets_per_gib", params,
            round(reads.get("get", 0) * GiB / frame_bytes, 1), "GETs/GiB",
            limit=100, limit_name="target", extra=_per_gib(reads, frame_bytes)),
    ]


def _node_requests(nodes: Sequence[ServerProcess]) -> dict[str, float]:
    """The nodes' ``requests_<kind>`` counters so far, summed (their
    ``ledgerd_offload_requests_*`` metrics)."""
    total: dict[str, float] = {}
    for node in nodes:
        for name, value in node.metrics().items():
            counter = name.removeprefix("ledgerd_offload_")
            if counter != name and counter.startswith("requests_"):
                total[counter] = total.get(counter, 0) + value
    return total


def describe() -> dict[str, str]:
    return {
        "generated": "the small ledgers are generated by a LedgerSource in the bench "
                     "process (one 1 KiB entry each, payload from the id, real CRC32C), "
                     "not written through a bookie; packing, the S3 requests and the reads "
                     "are the real code against radosgw. A real bookie's packs are the same "
                     "requests: tests/offload/test_packs.py counts them for 41 ledgers",
        "alone": "alone_*: SAMPLE ledgers offloaded one by one (Offloader, a segment and an "
                 "index each), scaled to a GiB of such ledgers",
        "real": "generated=False rows: real ledgers created, added to and closed through "
                "a bookie, then packed from it; at 100,000 (0.1 GiB) per GiB figures carry "
                "each pack's fixed costs (its objects, the read-ahead climbing from 1 MiB in "
                "the first pack) ten times over",
        "large": "large_*: one ledger of 16,384 entries of 64 KiB; its frames pass 1 GiB "
                 "by the frame headers, so it is two segments (the second one PUT)",
    }


def run_cluster(workdir: Path, *, ledger_count: int = 1024) -> list[Row]:
    """The ``cluster_pack`` suite: :func:`_cluster_rows` with 1 MiB ledgers."""
    with s3_endpoint(workdir / "s3") as (endpoint, _pids):
        settings = OffloadSettings(bucket=BUCKET, endpoint_url=endpoint, cluster="bench",
                                   bookie_id="b1", pack=True)
        settings.check()
        return _cluster_rows(settings, workdir / "cluster", ledger_count=ledger_count,
                             entries=16, entry_bytes=64 * KiB)


def run(workdir: Path, *, ledger_count: int = 1_000_000,
        real_ledger_count: int = 100_000) -> list[Row]:
    with s3_endpoint(workdir / "s3") as (endpoint, _pids):
        settings = OffloadSettings(bucket=BUCKET, endpoint_url=endpoint, cluster="bench",
                                   bookie_id="b1", pack=True)
        settings.check()
        client = make_s3_client(settings)
        client.create_bucket(Bucket=BUCKET)
        return (_pack_rows(client, settings, ledger_count)
                + _real_rows(client, settings, workdir, real_ledger_count)
                + _large_rows(client, settings))
