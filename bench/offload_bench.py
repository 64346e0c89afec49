"""Offload benchmarks against a real S3 server on loopback (radosgw, started here).

Each figure is printed next to a limit measured in the same run on the same
server with plain boto3 (the same client settings, chunk size and concurrency):

- ``offload``: offload MB/s (local reads, framing, chunk PUTs, UploadPartCopy,
  index) vs parallel PUTs of the same bytes (the issue's figure, target 0.8);
- ``raw_put_copy``: what DESIGN.md section 6 costs the server whoever the
  client is (each chunk PUT, then copied whole into a multipart upload with
  UploadPartCopy, copies running alongside the PUTs) vs the same PUTs alone:
  the ceiling of the first ratio;
- ``offload_vs_put_copy``: ledgerd against that ceiling (its own overhead);
- cold sequential read through ``RemoteLedgerReader`` (read-ahead, CRC checks)
  vs sequential ranged GETs of the same segment objects, one range at a time,
  as large as the reader's largest window;
- requests per GiB for both.

Offload figures are the best of ``ROUNDS`` interleaved rounds: the machine is
shared, and other work only ever slows a round down.

Why ``offload`` stays near 0.5 of a plain PUT on radosgw, short of the
issue's 0.8: UploadPartCopy there reads and rewrites every byte (it costs
the radosgw and OSD about the CPU of a PUT of the same bytes; only
CopyObject shares the source's tail objects by reference), so an offload
that puts each chunk and then copies it asks twice a PUT's work of a server
that shares two cores with everything else.  ``raw_put_copy`` measures that
ceiling in each run; see "Performance" in docs/formats-offload.md.

``BENCH_S3_ENDPOINT`` (with ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``)
points it at a running server instead of starting one.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from common.units import GiB, KiB, MiB
from entrylog import EntryLogSettings
from journal import JournalSettings
from ledger import Bookie, EngineSettings, OffloadInfo, WriteCacheSettings
from offload import (
    Offloader,
    OffloadSettings,
    RemoteLedgerReader,
    S3ObjectStore,
    make_s3_client,
)

from ._harness import Row

BUCKET = "ledgerd-bench"
ROUNDS = 2


@contextmanager
def s3_endpoint(workdir: Path) -> Iterator[str]:
    """An S3 endpoint URL with credentials in the environment (boto3's chain)."""
    external = os.environ.get("BENCH_S3_ENDPOINT")
    if external:
        yield external
        return
    from tools.local_s3 import LocalS3Server

    server = LocalS3Server(workdir)
    server.start()
    saved = {k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    os.environ["AWS_ACCESS_KEY_ID"] = server.access_key
    os.environ["AWS_SECRET_ACCESS_KEY"] = server.secret_key
    try:
        yield server.endpoint_url
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        server.stop()


def describe() -> dict[str, str]:
    return {"ceiling": "raw_put_copy / raw parallel PUT bounds offload / raw parallel PUT: "
                       "DESIGN.md section 6 puts every chunk and then copies it with "
                       "UploadPartCopy, which radosgw performs by rewriting every byte"}


def _engine_settings(data_dir: Path) -> EngineSettings:
    return EngineSettings(
        data_dir=data_dir,
        journal=JournalSettings(device_path=data_dir / "journal.dev", capacity_bytes=256 * MiB),
        entry_log=EntryLogSettings(directory=data_dir / "entrylogs", size_bytes_limit=256 * MiB),
        write_cache=WriteCacheSettings(size_bytes=64 * MiB))


def _write_ledger(bookie: Bookie, total_bytes: int, entry_bytes: int) -> int:
    ledger_id = bookie.create_ledger(password="", metadata={}).result().ledger_id
    rng = random.Random(1)
    block = rng.randbytes(entry_bytes * 16)
    batch = [block[i * entry_bytes:(i + 1) * entry_bytes] for i in range(16)]
    for _ in range(total_bytes // (entry_bytes * 16)):
        bookie.add_entries(ledger_id, batch, password="").result()
    bookie.close_ledger(ledger_id, password="").result()
    return ledger_id


def raw_parallel_put(client: Any, total_bytes: int, chunk_bytes: int, concurrency: int) -> float:
    """MB/s of plain PutObject calls of ``chunk_bytes`` on ``concurrency`` threads."""
    body = random.Random(2).randbytes(chunk_bytes)
    count = -(-total_bytes // chunk_bytes)
    started = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(lambda n: client.put_object(Bucket=BUCKET, Key=f"raw/put-{n}", Body=body),
                      range(count)))
    return count * chunk_bytes / (time.perf_counter() - started) / 1e6


def raw_put_then_copy(client: Any, total_bytes: int, chunk_bytes: int,
                      concurrency: int) -> float:
    """MB/s of what DESIGN.md section 6 asks of the server for each chunk, with plain
    boto3: a PutObject, then an UploadPartCopy of that whole object into one
    multipart upload (completed at the end), ``concurrency`` PUTs and as many
    copies in flight, as the offloader runs them.  The ceiling of any offload
    that consolidates chunks by copying them."""
    body = random.Random(3).randbytes(chunk_bytes)
    count = -(-total_bytes // chunk_bytes)
    started = time.perf_counter()
    upload_id = client.create_multipart_upload(Bucket=BUCKET, Key="raw/segment")["UploadId"]

    def put(n: int) -> int:
        client.put_object(Bucket=BUCKET, Key=f"raw/chunk-{n}", Body=body)
        return n

    def copy(n: int) -> dict[str, Any]:
        result = client.upload_part_copy(Bucket=BUCKET, Key="raw/segment", UploadId=upload_id,
                                         PartNumber=n + 1, CopySource={
                                             "Bucket": BUCKET, "Key": f"raw/chunk-{n}"})
        return {"PartNumber": n + 1, "ETag": result["CopyPartResult"]["ETag"]}

    with ThreadPoolExecutor(concurrency) as puts, ThreadPoolExecutor(concurrency) as copies:
        parts = [copies.submit(copy, n) for n in puts.map(put, range(count))]
        client.complete_multipart_upload(Bucket=BUCKET, Key="raw/segment", UploadId=upload_id,
                                         MultipartUpload={"Parts": [p.result() for p in parts]})
    return count * chunk_bytes / (time.perf_counter() - started) / 1e6


def raw_ranged_get(client: Any, keys: list[str], range_bytes: int) -> float:
    """MB/s of sequential ranged GETs over ``keys``, one range at a time."""
    fetched = 0
    started = time.perf_counter()
    for key in keys:
        size = client.head_object(Bucket=BUCKET, Key=key)["ContentLength"]
        for start in range(0, size, range_bytes):
            end = min(size, start + range_bytes) - 1
            fetched += len(client.get_object(Bucket=BUCKET, Key=key,
                                             Range=f"bytes={start}-{end}")["Body"].read())
    return fetched / (time.perf_counter() - started) / 1e6


def _per_gib(stats: dict[str, int], nbytes: int) -> dict[str, float]:
    scale = GiB / nbytes
    return {kind: stats[f"requests_{kind}"] * scale
            for kind in ("put", "copy", "multipart", "get", "head", "list", "delete")
            if stats[f"requests_{kind}"]}


def run(workdir: Path, *, total_bytes: int = 256 * MiB, entry_bytes: int = 64 * KiB) -> list[Row]:
    with s3_endpoint(workdir / "s3") as endpoint:
        settings = OffloadSettings(bucket=BUCKET, endpoint_url=endpoint, cluster="bench",
                                   bookie_id="b1")
        settings.check()
        client = make_s3_client(settings)
        client.create_bucket(Bucket=BUCKET)
        bookie = Bookie.open(_engine_settings(workdir / "data"))
        try:
            ledger_id = _write_ledger(bookie, total_bytes, entry_bytes)
            return _measure(bookie, ledger_id, client, settings, entry_bytes)
        finally:
            bookie.close()


def _offload_from_scratch(bookie: Bookie, ledger_id: int, client: Any,
                          settings: OffloadSettings) -> tuple[float, OffloadInfo, dict[str, int]]:
    """Seconds to offload the ledger with nothing in S3, its state, the requests made."""
    store = S3ObjectStore(client, settings)
    with ThreadPoolExecutor(settings.upload_thread_count) as executor:
        offloader = Offloader(bookie, store, settings, executor=executor)
        # An earlier round's objects and state go first, outside the timing.
        offloader.delete_objects(ledger_id)
        bookie.set_offload(ledger_id, OffloadInfo())
        requests_before = store.statistics()
        started = time.perf_counter()
        info = offloader.offload(ledger_id)
        elapsed_s = time.perf_counter() - started
    requests = {k: v - requests_before[k] for k, v in store.statistics().items()}
    return elapsed_s, info, requests


def _measure_offload(bookie: Bookie, ledger_id: int, client: Any, settings: OffloadSettings,
                     params: dict[str, int], frame_bytes: int) -> tuple[list[Row], OffloadInfo]:
    """Offload, raw PUT and raw PUT + copy in interleaved rounds; each figure is
    its best round, since other work on the machine only ever slows one down."""
    chunk, concurrency = settings.chunk_size_bytes, settings.upload_concurrency
    put_mb_s = put_copy_mb_s = 0.0
    offload_s = float("inf")
    for _ in range(ROUNDS):
        put_mb_s = max(put_mb_s, raw_parallel_put(client, frame_bytes, chunk, concurrency))
        put_copy_mb_s = max(put_copy_mb_s,
                            raw_put_then_copy(client, frame_bytes, chunk, concurrency))
        elapsed_s, info, requests = _offload_from_scratch(bookie, ledger_id, client, settings)
        offload_s = min(offload_s, elapsed_s)
    offload_mb_s = frame_bytes / offload_s / 1e6
    per_gib = {f"{k}_per_gib": v for k, v in _per_gib(requests, frame_bytes).items()}
    return [Row("offload", params, offload_mb_s, "MB/s", put_mb_s, "raw parallel PUT",
                extra={"seconds": offload_s, **per_gib}),
            Row("raw_put_copy", params, put_copy_mb_s, "MB/s", put_mb_s, "raw parallel PUT"),
            Row("offload_vs_put_copy", params, offload_mb_s, "MB/s", put_copy_mb_s,
                "raw PUT + UploadPartCopy")], info


def _measure(bookie: Bookie, ledger_id: int, client: Any, settings: OffloadSettings,
             entry_bytes: int) -> list[Row]:
    ledger = bookie.get_ledger(ledger_id)
    frame_bytes = ledger.length + 16 * ledger.entries
    params = {"ledger_mib": frame_bytes // MiB, "entry": entry_bytes,
              "chunk_mib": settings.chunk_size_bytes // MiB}
    rows, info = _measure_offload(bookie, ledger_id, client, settings, params, frame_bytes)
    keys = sorted(item.key for item in S3ObjectStore(client, settings).list_objects(
                  info.key_prefix or "")
                  if item.key.endswith("/segment"))
    raw_get = raw_ranged_get(client, keys, settings.read_ahead_bytes_max)
    read_store = S3ObjectStore(client, settings)
    reader = RemoteLedgerReader(read_store, settings)
    started = time.perf_counter()
    for entry_id in range(ledger.entries):
        reader.read_entry(ledger_id, entry_id, info)
    read_s = time.perf_counter() - started
    reader.close()
    read_requests = read_store.statistics()
    rows.append(Row("cold_read", params, frame_bytes / read_s / 1e6, "MB/s", raw_get,
                    "raw ranged GET", extra={"seconds": read_s, **{
                        f"{k}_per_gib": v for k, v in _per_gib(read_requests,
                                                               frame_bytes).items()}}))
    return rows
