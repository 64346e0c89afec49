"""Offload benchmarks against a real S3 server on loopback (radosgw, started here).

Each figure is printed next to its peer measured in the same run on the same
server with plain boto3 (the same client settings, part size and concurrency),
the two sides alternating round by round (best round of each kept: the
machine is shared, and other work only ever slows a round down):

- ``offload``: a sealed ledger offloaded from scratch (local reads, framing,
  MD5s, one multipart upload per segment with ``upload_concurrency`` parts in
  flight, the persisted state, index, verification) vs a plain boto3
  multipart upload of the same number of bytes in parts of the same size with
  the same parallelism (the issue's target: 0.9);
- ``cold_read``: the whole ledger read entry by entry through a cold
  ``RemoteLedgerReader`` (read-ahead, CRC checks) vs sequential ranged GETs of
  the same segment objects, one range at a time, as large as the reader's
  largest window (target 0.8);
- ``tier_upload``: an open ledger of the same size tiered as it fills
  (``TIER_OPEN_LEDGERS``): chunk PUTs and index PUTs while one writer adds
  64 KiB entries in batches of 16 as fast as it can, until everything is in
  chunks, vs the plain multipart upload of the same bytes; ``tier_adds``:
  that writer's add rate vs the same writer on a fresh bookie without
  tiering (alternating rounds); ``consolidation``: closing it and
  consolidating its chunks into segments (UploadPartCopy, the tail, index,
  chunk deletion) vs the plain upload;
- ``requests_per_gib``: S3 requests per GiB offloaded and read back, by kind,
  for ledgerd (measured: the sealed path, and tiering with its consolidation),
  for the plain upload (measured), for the chunk layout offload used before
  (its request pattern, computed) and for Pulsar's tiered storage layout
  (computed from its defaults: 64 MiB blocks uploaded as the parts of one
  multipart upload plus an index object; reads in 1 MiB ranged GETs).

Client CPU is this process's CPU time (every thread); server CPU is radosgw's
and the OSD's, read from ``/proc`` when the server was started here.

``BENCH_S3_ENDPOINT`` (with ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``)
points it at a running server instead of starting one.
"""

from __future__ import annotations

import os
import random
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, replace
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
    Tierer,
    make_s3_client,
)

from ._harness import Row

BUCKET = "ledgerd-bench"
ROUNDS = 3
REQUEST_KINDS = ("put", "part", "copy", "multipart", "get", "head", "list", "delete")
# Pulsar's tiered storage defaults (managedLedgerOffloadMaxBlockSizeInBytes,
# managedLedgerOffloadReadBufferSizeInBytes).
PULSAR_BLOCK_BYTES = 64 * MiB
PULSAR_READ_BUFFER_BYTES = 1 * MiB


@contextmanager
def s3_endpoint(workdir: Path) -> Iterator[tuple[str, list[int]]]:
    """An S3 endpoint URL with credentials in the environment (boto3's chain),
    and the pids of its radosgw and OSD when it was started here."""
    external = os.environ.get("BENCH_S3_ENDPOINT")
    if external:
        yield external, []
        return
    from tools.local_s3 import LocalS3Server

    server = LocalS3Server(workdir)
    server.start()
    saved = {k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    os.environ["AWS_ACCESS_KEY_ID"] = server.access_key
    os.environ["AWS_SECRET_ACCESS_KEY"] = server.secret_key
    try:
        pids = [pid for role, pid in server.running_pids().items() if role in ("radosgw", "osd")]
        yield server.endpoint_url, pids
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        server.stop()


def describe() -> dict[str, str]:
    return {
        "peers": "offload: a plain boto3 multipart upload of the same bytes (same part size, "
                 "same parts in flight, same client settings); cold read: sequential ranged "
                 "GETs of the segments, one range of the reader's largest window at a time; "
                 "each pair alternates round by round, best round kept",
        "pulsar": "Pulsar's rows are computed from its layout and defaults (64 MiB blocks as "
                  "the parts of one multipart upload, an index object, 1 MiB read buffer), "
                  "not measured; the chunk layout row is the request pattern offload had "
                  "before (each chunk PUT, then copied with UploadPartCopy)",
        "per_gib": "requests per GiB are scaled from this run's ledger: requests made once per "
                   "ledger (create, complete, HeadObject, index, listings) count GiB / ledger "
                   "size times; docs/formats-offload.md has the counts for a 1 GiB segment",
    }


@dataclass(frozen=True)
class Timed:
    seconds: float
    client_cpu_s: float
    server_cpu_s: float


class CpuClock:
    """Wall time, this process's CPU time and the server daemons' CPU time."""

    def __init__(self, server_pids: list[int]) -> None:
        self._pids = server_pids
        self._ticks_per_s = os.sysconf("SC_CLK_TCK")

    def _server_s(self) -> float:
        total = 0
        for pid in self._pids:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime + stime
        return total / self._ticks_per_s

    def measure(self, work: Callable[[], object]) -> Timed:
        wall, cpu, server = time.perf_counter(), time.process_time(), self._server_s()
        work()
        return Timed(time.perf_counter() - wall, time.process_time() - cpu,
                     self._server_s() - server)


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
        bookie.append(ledger_id, [(None, batch)], password="")[0].result()
    bookie.close_ledger(ledger_id, password="").result()
    return ledger_id


def plain_multipart_upload(client: Any, total_bytes: int, part_bytes: int,
                           concurrency: int) -> None:
    """``total_bytes`` as one multipart upload of ``part_bytes`` parts, ``concurrency``
    parts in flight, with nothing but boto3: the peer of an offload."""
    bodies = random.Random(2).randbytes(part_bytes)
    sizes = [min(part_bytes, total_bytes - start) for start in range(0, total_bytes, part_bytes)]
    key = "plain/segment"
    upload_id = client.create_multipart_upload(Bucket=BUCKET, Key=key)["UploadId"]

    def send(number: int) -> dict[str, Any]:
        etag = client.upload_part(Bucket=BUCKET, Key=key, UploadId=upload_id,
                                  PartNumber=number, Body=bodies[:sizes[number - 1]])["ETag"]
        return {"PartNumber": number, "ETag": etag}

    with ThreadPoolExecutor(concurrency) as pool:
        parts = list(pool.map(send, range(1, len(sizes) + 1)))
    client.complete_multipart_upload(Bucket=BUCKET, Key=key, UploadId=upload_id,
                                     MultipartUpload={"Parts": parts})


def raw_ranged_get(client: Any, keys: list[str], range_bytes: int) -> None:
    """Sequential ranged GETs over ``keys``, one range at a time."""
    for key in keys:
        size = client.head_object(Bucket=BUCKET, Key=key)["ContentLength"]
        for start in range(0, size, range_bytes):
            end = min(size, start + range_bytes) - 1
            client.get_object(Bucket=BUCKET, Key=key, Range=f"bytes={start}-{end}")["Body"].read()


def run(workdir: Path, *, total_bytes: int = 256 * MiB, entry_bytes: int = 64 * KiB) -> list[Row]:
    with s3_endpoint(workdir / "s3") as (endpoint, server_pids):
        settings = OffloadSettings(bucket=BUCKET, endpoint_url=endpoint, cluster="bench",
                                   bookie_id="b1")
        settings.check()
        client = make_s3_client(settings)
        client.create_bucket(Bucket=BUCKET)
        bookie = Bookie.open(_engine_settings(workdir / "data"))
        clock = CpuClock(server_pids)
        try:
            ledger_id = _write_ledger(bookie, total_bytes, entry_bytes)
            rows = _measure(bookie, ledger_id, client, settings, entry_bytes, clock)
        finally:
            bookie.close()
        return rows + _measure_tiering(workdir, client, settings, clock, rows,
                                       total_bytes=total_bytes, entry_bytes=entry_bytes)


def _offload_from_scratch(bookie: Bookie, ledger_id: int, client: Any,
                          settings: OffloadSettings, clock: CpuClock
                          ) -> tuple[Timed, OffloadInfo, dict[str, int]]:
    """The offload of the ledger with nothing in S3: its time, state and requests."""
    store = S3ObjectStore(client, settings)
    with ThreadPoolExecutor(settings.upload_thread_count) as executor:
        offloader = Offloader(bookie, store, settings, executor=executor)
        # An earlier round's objects and state go first, outside the timing.
        offloader.delete_objects(ledger_id)
        bookie.set_offload(ledger_id, OffloadInfo())
        before = store.statistics()
        done: list[OffloadInfo] = []
        timed = clock.measure(lambda: done.append(offloader.offload(ledger_id)))
    requests = {k: v - before[k] for k, v in store.statistics().items()}
    return timed, done[0], requests


def _cold_read(bookie: Bookie, ledger_id: int, info: OffloadInfo, client: Any,
               settings: OffloadSettings, clock: CpuClock) -> tuple[Timed, dict[str, int]]:
    store = S3ObjectStore(client, settings)
    reader = RemoteLedgerReader(store, settings)
    entries = bookie.get_ledger(ledger_id).entries

    def read_all() -> None:
        for entry_id in range(entries):
            reader.read_entry(ledger_id, entry_id, info)

    try:
        return clock.measure(read_all), store.statistics()
    finally:
        reader.close()


def _best(rounds: list[Timed]) -> Timed:
    return min(rounds, key=lambda timed: timed.seconds)


def _cpu_extra(timed: Timed) -> dict[str, float]:
    extra = {"seconds": timed.seconds, "client_cpu_s": timed.client_cpu_s}
    if timed.server_cpu_s:
        extra["server_cpu_s"] = timed.server_cpu_s
    return extra


def _measure(bookie: Bookie, ledger_id: int, client: Any, settings: OffloadSettings,
             entry_bytes: int, clock: CpuClock) -> list[Row]:
    ledger = bookie.get_ledger(ledger_id)
    frame_bytes = ledger.length + 16 * ledger.entries
    chunk, concurrency = settings.part_size_bytes, settings.upload_concurrency
    params = {"ledger_mib": frame_bytes // MiB, "entry": entry_bytes, "part_mib": chunk // MiB,
              "in_flight": concurrency}
    plain: list[Timed] = []
    offloads: list[Timed] = []
    for _ in range(ROUNDS):
        plain.append(clock.measure(lambda: plain_multipart_upload(client, frame_bytes, chunk,
                                                                  concurrency)))
        timed, info, offload_requests = _offload_from_scratch(bookie, ledger_id, client,
                                                              settings, clock)
        offloads.append(timed)
    keys = sorted(item.key for item in S3ObjectStore(client, settings).list_objects(
        info.key_prefix or "") if item.key.endswith("/segment"))
    raw_gets: list[Timed] = []
    reads: list[Timed] = []
    for _ in range(ROUNDS):
        raw_gets.append(clock.measure(lambda: raw_ranged_get(client, keys,
                                                             settings.read_ahead_bytes_max)))
        timed, read_requests = _cold_read(bookie, ledger_id, info, client, settings, clock)
        reads.append(timed)
    best_offload, best_plain = _best(offloads), _best(plain)
    best_read, best_get = _best(reads), _best(raw_gets)
    mb = frame_bytes / 1e6
    plain_row = Row("plain_multipart_upload", params, mb / best_plain.seconds, "MB/s",
                    extra=_cpu_extra(best_plain))
    get_row = Row("raw_ranged_get", params, mb / best_get.seconds, "MB/s",
                  extra=_cpu_extra(best_get))
    return [
        Row("offload", params, mb / best_offload.seconds, "MB/s", plain_row.value,
            "plain boto3 multipart upload, same bytes and parallelism",
            extra=_cpu_extra(best_offload)),
        plain_row,
        Row("cold_read", params, mb / best_read.seconds, "MB/s", get_row.value,
            "sequential ranged GETs", extra=_cpu_extra(best_read)),
        get_row,
        *_request_rows(offload_requests, read_requests, frame_bytes, settings),
    ]


def _per_gib(requests: dict[str, int], nbytes: int) -> dict[str, float]:
    return {kind: requests.get(f"requests_{kind}", 0) * GiB / nbytes for kind in REQUEST_KINDS
            if requests.get(f"requests_{kind}", 0)}


def _request_rows(offload_requests: dict[str, int], read_requests: dict[str, int],
                  frame_bytes: int, settings: OffloadSettings) -> list[Row]:
    """Requests per GiB by kind: ledgerd's (measured), and the layouts compared."""
    parts = frame_bytes / settings.part_size_bytes
    chunks = frame_bytes / settings.chunk_size_bytes
    scale = GiB / frame_bytes
    layouts = {
        "ledgerd offload": _per_gib(offload_requests, frame_bytes),
        "ledgerd cold read": _per_gib(read_requests, frame_bytes),
        "plain multipart upload": {"part": parts * scale, "multipart": 2 * scale},
        # Before: every chunk PUT, then copied; create, complete, head, index,
        # two listings at the start, and one DeleteObjects of the chunks.
        "chunk layout offload (before)": {"put": (chunks + 1) * scale, "copy": chunks * scale,
                                          "multipart": 2 * scale, "head": scale,
                                          "list": 2 * scale, "delete": scale},
        "Pulsar offload, 64 MiB blocks": {"part": GiB / PULSAR_BLOCK_BYTES,
                                          "multipart": 2.0, "put": 1.0},
        "Pulsar read, 1 MiB buffer": {"get": GiB / PULSAR_READ_BUFFER_BYTES + 1},
    }
    return [Row("requests_per_gib", {"layout": name}, sum(kinds.values()), "requests/GiB",
                extra={f"{kind}": count for kind, count in kinds.items()})
            for name, kinds in layouts.items()]


# --- tiering of an open ledger as it fills ---------------------------------------------

TIER_ROUNDS = 2


@dataclass(frozen=True)
class TierRound:
    adds_s: float
    tiered_s: float
    client_cpu_s: float
    consolidation: Timed
    tier_requests: dict[str, int]
    consolidation_requests: dict[str, int]
    frame_bytes: int


def _add_as_fast_as_possible(bookie: Bookie, ledger_id: int, total_bytes: int,
                             entry_bytes: int) -> None:
    block = random.Random(3).randbytes(entry_bytes * 16)
    batch = [block[i * entry_bytes:(i + 1) * entry_bytes] for i in range(16)]
    for _ in range(total_bytes // (entry_bytes * 16)):
        bookie.append(ledger_id, [(None, batch)], password="")[0].result()


def _adds_alone(workdir: Path, total_bytes: int, entry_bytes: int) -> float:
    """Seconds the writer takes on a fresh bookie with nothing else running."""
    data_dir = workdir / "adds-data"
    bookie = Bookie.open(_engine_settings(data_dir))
    try:
        ledger_id = bookie.create_ledger(password="", metadata={}).result().ledger_id
        started = time.perf_counter()
        _add_as_fast_as_possible(bookie, ledger_id, total_bytes, entry_bytes)
        return time.perf_counter() - started
    finally:
        bookie.close()
        shutil.rmtree(data_dir)


def _tier_round(workdir: Path, client: Any, settings: OffloadSettings, clock: CpuClock, *,
                total_bytes: int, entry_bytes: int) -> TierRound:
    """The writer on a fresh bookie while the tierer uploads chunks as they
    fill, until all is tiered; then close and consolidation."""
    data_dir = workdir / "tier-data"
    tiering = replace(settings, tier_open_ledgers=True)
    store = S3ObjectStore(client, tiering)
    bookie = Bookie.open(_engine_settings(data_dir))
    try:
        ledger_id = bookie.create_ledger(password="", metadata={}).result().ledger_id
        done = threading.Event()
        adds: list[float] = []

        def write() -> None:
            started = time.perf_counter()
            _add_as_fast_as_possible(bookie, ledger_id, total_bytes, entry_bytes)
            adds.append(time.perf_counter() - started)
            done.set()

        with ThreadPoolExecutor(tiering.upload_thread_count) as executor:
            tierer = Tierer(bookie, store, tiering, executor=executor)
            started, cpu = time.perf_counter(), time.process_time()
            writer = threading.Thread(target=write)
            writer.start()
            while not done.is_set() or tierer.has_work(bookie.get_ledger(ledger_id)):
                if not tierer.tier(ledger_id):
                    time.sleep(0.01)  # no full chunk yet: wait for the writer
            writer.join()
            tiered_s, cpu_s = time.perf_counter() - started, time.process_time() - cpu
            tier_requests = store.statistics()
            bookie.close_ledger(ledger_id, password="").result()
            offloader = Offloader(bookie, store, tiering, executor=executor)
            consolidation = clock.measure(lambda: offloader.offload(ledger_id))
            after = store.statistics()
            offloader.delete_objects(ledger_id)
        ledger = bookie.get_ledger(ledger_id)
        return TierRound(adds[0], tiered_s, cpu_s, consolidation, tier_requests,
                         {k: v - tier_requests.get(k, 0) for k, v in after.items()},
                         ledger.length + 16 * ledger.entries)
    finally:
        bookie.close()
        shutil.rmtree(data_dir)


def _measure_tiering(workdir: Path, client: Any, settings: OffloadSettings, clock: CpuClock,
                     sealed_rows: list[Row], *, total_bytes: int,
                     entry_bytes: int) -> list[Row]:
    plain = next(r for r in sealed_rows if r.name == "plain_multipart_upload")
    alone: list[float] = []
    rounds: list[TierRound] = []
    for _ in range(TIER_ROUNDS):
        alone.append(_adds_alone(workdir, total_bytes, entry_bytes))
        rounds.append(_tier_round(workdir, client, settings, clock, total_bytes=total_bytes,
                                  entry_bytes=entry_bytes))
    best = min(rounds, key=lambda r: r.tiered_s)
    mb = best.frame_bytes / 1e6
    params = {"ledger_mib": best.frame_bytes // MiB, "entry": entry_bytes,
              "part_mib": settings.chunk_size_bytes // MiB,
              "in_flight": settings.upload_concurrency}
    return [
        Row("tier_upload", params, mb / best.tiered_s, "MB/s", plain.value,
            "plain boto3 multipart upload, same bytes and parallelism",
            extra={"seconds": best.tiered_s, "client_cpu_s": best.client_cpu_s,
                   "adds_MB_s": mb / best.adds_s}),
        Row("tier_adds", params, mb / min(r.adds_s for r in rounds), "MB/s",
            mb / min(alone), "the same writer without tiering"),
        Row("consolidation", params, mb / best.consolidation.seconds, "MB/s", plain.value,
            "plain boto3 multipart upload of the same bytes",
            extra=_cpu_extra(best.consolidation)),
        *_tier_request_rows(best),
    ]


def _tier_request_rows(best: TierRound) -> list[Row]:
    tiering = _per_gib(best.tier_requests, best.frame_bytes)
    consolidation = _per_gib(best.consolidation_requests, best.frame_bytes)
    total = {kind: tiering.get(kind, 0.0) + consolidation.get(kind, 0.0)
             for kind in {*tiering, *consolidation}}
    return [Row("requests_per_gib", {"layout": name}, sum(kinds.values()), "requests/GiB",
                extra=dict(kinds))
            for name, kinds in (("ledgerd tiering while open", tiering),
                                ("ledgerd consolidation at close", consolidation),
                                ("ledgerd tiered ledger, total", total))]
