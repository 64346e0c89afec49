"""Live ledgers through a real node: ``spark.read`` and ``spark.readStream`` with ``url``.

A real ``ledgerd serve`` (SMALL settings) per module; entries are appended over
HTTP and every row Spark returns is compared, byte for byte, with what the
node acknowledged.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pyarrow.parquet as pq
import pytest

from common.errors import CorruptRecord, InvalidSetting
from offload.spark import (
    LiveOptions,
    LivePartition,
    LiveRange,
    LiveReader,
    PlannedRange,
    parse_live_options,
)
from tests.app.conftest import REPO, LiveServer
from tests.cluster.conftest import local_etcd as local_etcd
from tests.spark.conftest import make_bucket
from tools.local_cluster import LiveCluster
from tools.local_etcd import LocalEtcd
from tools.local_s3 import LocalS3Server, delete_bucket

FRAMES = "application/x-ledgerd-frames"


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    live = LiveServer(tmp_path_factory.mktemp("live-spark") / "data").start()
    try:
        yield live
    finally:
        live.stop()


@pytest.fixture(scope="module")
def http(node: LiveServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=node.url, timeout=30) as client:
        yield client


def create(http: httpx.Client, password: str = "pw", **metadata: str) -> int:
    response = http.post("/api/v1/ledgers", json={"password": password, "metadata": metadata})
    response.raise_for_status()
    return int(response.json()["ledger_id"])


def append(http: httpx.Client, ledger_id: int, payloads: list[bytes],
           password: str = "pw") -> None:
    for at in range(0, len(payloads), 16):  # within MAX_BATCH_SIZE (2 MiB - 8 KiB here)
        body = b"".join(len(p).to_bytes(4, "big") + p for p in payloads[at:at + 16])
        http.post(f"/api/v1/ledgers/{ledger_id}/entries/batch", content=body,
                  headers={"content-type": FRAMES, "X-Ledger-Password": password}
                  ).raise_for_status()


def payloads(count: int, seed: int, size_max: int = 2000) -> list[bytes]:
    rng = random.Random(seed)
    return [rng.randbytes(rng.randrange(0, size_max)) for _ in range(count)]


def rows_of(df: Any) -> list[tuple[int, int, bytes]]:
    return sorted((r.ledger_id, r.entry_id, bytes(r.payload)) for r in df.collect())


def expected(ledgers: dict[int, list[bytes]]) -> list[tuple[int, int, bytes]]:
    return sorted((ledger_id, i, p) for ledger_id, ps in ledgers.items()
                  for i, p in enumerate(ps))


# --- options ------------------------------------------------------------------------


def test_live_options_parse_ids_metadata_and_passwords() -> None:
    options = parse_live_options({"url": "127.0.0.1:1, http://h:2/", "ledgers":
                                  "3,10-20,metadata.team=a,metadata.kind=x=y",
                                  "password": "pw", "passwords": '{"7": "seven"}'})
    assert options.urls == ("http://127.0.0.1:1", "http://h:2")
    assert options.ledgers is not None and 3 in options.ledgers and 15 in options.ledgers
    assert options.metadata == (("team", "a"), ("kind", "x=y"))
    assert options.password_of(7) == "seven" and options.password_of(3) == "pw"
    assert options.s3 is None
    assert "seven" not in repr(options) and "pw" not in repr(options)
    for bad in ({"url": ""}, {"url": "ftp://x"}, {"url": "h:1", "passwords": "[1]"},
                {"url": "h:1", "endpoint": "http://s3"}, {"url": "h:1", "typo": "1"}):
        with pytest.raises(InvalidSetting):
            parse_live_options(bad)


# --- batch --------------------------------------------------------------------------


def test_batch_read_of_open_and_closed_ledgers_through_the_node(
        spark: Any, node: LiveServer, http: httpx.Client) -> None:
    written = {create(http): payloads(300, seed=1), create(http): payloads(50, seed=2),
               create(http): []}
    for ledger_id, ps in written.items():
        if ps:
            append(http, ledger_id, ps)
    first = min(written)
    http.post(f"/api/v1/ledgers/{first}/close", headers={"X-Ledger-Password": "pw"}
              ).raise_for_status()
    ids = ",".join(str(i) for i in written)
    df = (spark.read.format("ledgerd").option("url", node.url).option("ledgers", ids)
          .option("partition_size", "1MiB").load())
    assert rows_of(df) == expected(written)
    crcs = {(r.ledger_id, r.entry_id): r.crc32c for r in df.collect()}
    assert len(crcs) == 350


def test_batch_partitions_cut_ranges_by_size(node: LiveServer, http: httpx.Client) -> None:
    ledger_id = create(http)
    append(http, ledger_id, [os.urandom(64 * 1024) for _ in range(40)])  # 2.5 MiB
    options = parse_live_options({"url": node.url, "ledgers": str(ledger_id),
                                  "partition_size": "1MiB"})
    parts = LiveReader(options).partitions()
    ranges = [p.planned for p in parts if isinstance(p, LivePartition)]
    assert [(r.first_entry_id, r.last_entry_id) for r in ranges if isinstance(r, LiveRange)
            ] == [(0, 15), (16, 31), (32, 39)]


def test_batch_read_names_a_missing_ledger(spark: Any, node: LiveServer) -> None:
    options = LiveOptions(urls=(node.url,), ledgers=parse_live_options(
        {"url": node.url, "ledgers": "999999"}).ledgers)
    with pytest.raises(InvalidSetting, match="999999"):
        LiveReader(options).partitions()


# --- stream -------------------------------------------------------------------------


def run_available_now(spark: Any, node: LiveServer, out: Path, checkpoint: Path,
                      **options: str) -> dict[str, Any]:
    """One availableNow run of the stream into Parquet; its last progress."""
    query = (spark.readStream.format("ledgerd").option("url", node.url)
             .option("discovery_grace", "0").options(**options).load()
             .writeStream.format("parquet").option("path", str(out))
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    query.awaitTermination(60)
    assert query.exception() is None
    progress = query.lastProgress
    return dict(progress) if progress else {}


def sink_rows(out: Path) -> list[tuple[int, int, bytes]]:
    """Rows of the files the sink committed (its _spark_metadata log), duplicates kept."""
    files: set[str] = set()
    for log_file in sorted((out / "_spark_metadata").iterdir()):
        if log_file.name.startswith("."):
            continue
        for line in log_file.read_text().splitlines()[1:]:
            entry = json.loads(line)
            if entry.get("action", "add") == "add":
                files.add(entry["path"].removeprefix("file://"))
    rows: list[tuple[int, int, bytes]] = []
    for path in sorted(files):
        table = pq.read_table(path)
        rows += zip(table["ledger_id"].to_pylist(), table["entry_id"].to_pylist(),
                    table["payload"].to_pylist(), strict=True)
    return sorted(rows)


def test_stream_follows_new_entries_new_ledgers_close_and_delete(
        spark: Any, node: LiveServer, http: httpx.Client, tmp_path: Path) -> None:
    tag = os.urandom(4).hex()
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    a = create(http, team=tag)
    create(http, team="other")  # not selected
    written: dict[int, list[bytes]] = {a: payloads(100, seed=3)}
    append(http, a, written[a])
    run_available_now(spark, node, out, checkpoint, ledgers=f"metadata.team={tag}")
    assert sink_rows(out) == expected(written)

    # More entries, a new ledger matching the filter, then a close and a delete.
    more = payloads(20, seed=4)
    append(http, a, more)
    written[a] += more
    b = create(http, team=tag)
    written[b] = payloads(30, seed=5)
    append(http, b, written[b])
    http.post(f"/api/v1/ledgers/{a}/close", headers={"X-Ledger-Password": "pw"}
              ).raise_for_status()
    progress = run_available_now(spark, node, out, checkpoint, ledgers=f"metadata.team={tag}")
    assert sink_rows(out) == expected(written)
    end = json.loads(progress["sources"][0]["endOffset"])
    assert end["ended"][str(a)] == {"next": 120, "why": "closed"}
    assert str(b) in end["next"]

    http.delete(f"/api/v1/ledgers/{b}", headers={"X-Ledger-Password": "pw"}
                ).raise_for_status()
    progress = run_available_now(spark, node, out, checkpoint, ledgers=f"metadata.team={tag}")
    end = json.loads(progress["sources"][0]["endOffset"])
    assert end["ended"][str(b)] == {"next": 30, "why": "deleted"}
    assert end["next"] == {}
    assert sink_rows(out) == expected(written)


# --- exactly once across kill -9 of the driver --------------------------------------


class Writer(threading.Thread):
    """Appends small batches to the ledgers, round robin, about 100 entries a second
    (a steady producer, not a flood that starves the driver of CPU), until
    stopped; keeps what the node acknowledged, in order, per ledger."""

    def __init__(self, url: str, ledger_ids: list[int]) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.acked: dict[int, list[bytes]] = {i: [] for i in ledger_ids}
        self.stopping = threading.Event()
        self.progress = threading.Condition()
        self.count = 0
        self.failure: BaseException | None = None

    def run(self) -> None:
        rng = random.Random(7)
        try:
            with httpx.Client(base_url=self.url, timeout=30) as http:
                while not self.stopping.wait(0.1):  # the producer's pace
                    for ledger_id in self.acked:
                        batch = [rng.randbytes(rng.randrange(0, 3000)) for _ in range(5)]
                        append(http, ledger_id, batch)
                        with self.progress:
                            self.acked[ledger_id] += batch
                            self.count += len(batch)
                            self.progress.notify_all()
        except BaseException as exc:  # surfaced by the test
            self.failure = exc

    def wait_for(self, count: int) -> None:
        with self.progress:
            assert self.progress.wait_for(lambda: self.count >= count or self.failure is not None,
                                          timeout=30)
        assert self.failure is None, self.failure


def batch_ids(log_dir: Path) -> set[int]:
    """Batch ids of a checkpoint's offsets or commits log (a file per batch id)."""
    if not log_dir.exists():
        return set()
    return {int(p.name) for p in log_dir.iterdir() if p.name.isdigit()}


def test_stream_into_parquet_is_exactly_once_across_kill_9_of_the_driver(
        spark: Any, node: LiveServer, http: httpx.Client, tmp_path: Path) -> None:
    tag = os.urandom(4).hex()
    ledger_ids = [create(http, run=tag), create(http, run=tag)]
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    writer = Writer(node.url, ledger_ids)
    writer.start()
    writer.wait_for(50)
    # The driver: `ledgerd tail` in its own session, so kill -9 takes its JVM too.
    driver = subprocess.Popen(
        [sys.executable, "-m", "cli", "tail", "--url", node.url, "--ledgers",
         f"metadata.run={tag}", "-o", "discovery_grace=0", "--output", str(out),
         "--checkpoint", str(checkpoint), "--trigger", "0.3", "--master", "local[2]"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        assert driver.stdout is not None
        committed = []
        for line in driver.stdout:  # one line per micro-batch the sink committed
            committed.append(json.loads(line))
            if len(committed) >= 3 and committed[-1]["rows"] > 0:
                break
        assert len(committed) >= 3, "the driver stopped before three micro-batches"
        # Aim inside the next micro-batch: its offsets are logged (Spark's write-ahead
        # log) and its commit is not, i.e. it is being read or written.
        deadline = time.monotonic() + 10
        while not batch_ids(checkpoint / "offsets") - batch_ids(checkpoint / "commits"):
            if time.monotonic() > deadline:
                break  # kill between batches then: exactly once must hold all the same
            time.sleep(0.005)  # watching the checkpoint directory, as `ls` would
        os.killpg(driver.pid, signal.SIGKILL)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
        driver.wait()
    planned, done = batch_ids(checkpoint / "offsets"), batch_ids(checkpoint / "commits")
    print(f"killed: micro-batches planned {sorted(planned)}, committed {sorted(done)}")
    killed_at = writer.count
    writer.wait_for(killed_at + 50)  # the writer keeps adding while no driver runs
    writer.stopping.set()
    writer.join()
    http.post(f"/api/v1/ledgers/{ledger_ids[0]}/close", headers={"X-Ledger-Password": "pw"}
              ).raise_for_status()

    # Restart from the checkpoint (here, in this process's Spark) and catch up.
    from offload.spark.jobs import start_tail

    query = start_tail(spark, {"url": node.url, "ledgers": f"metadata.run={tag}",
                               "discovery_grace": "0"}, str(out), str(checkpoint), once=True)
    query.awaitTermination(60)
    assert query.exception() is None
    assert sink_rows(out) == expected(writer.acked)  # every acked entry once, byte for byte
    assert spark.read.parquet(str(out)).count() == writer.count


# --- entries whose local copy is gone: from S3, the same rows ------------------------


def read_all(reader: LiveReader) -> list[tuple[int, int, bytes, int]]:
    """Every row of every planned partition, as Spark's tasks would read them."""
    return sorted((ledger_id, entry_id, payload, crc)
                  for part in reader.partitions() for batch in reader.read(part)
                  for ledger_id, entry_id, payload, crc in zip(
                      *(batch[name].to_pylist()
                        for name in ("ledger_id", "entry_id", "payload", "crc32c")),
                      strict=True))


def test_dropped_local_copy_reads_from_s3_directly_with_the_same_rows(
        s3_server: LocalS3Server, tmp_path: Path) -> None:
    from bench.spark_bench import ENTRY_BYTES, served_offloaded_ledgers

    client, bucket = make_bucket(s3_server)
    try:
        with served_offloaded_ledgers(s3_server, tmp_path / "server", bucket, 1,
                                      2 * ENTRY_BYTES * 16) as (url, (ledger_id,)):
            s3_options = {"endpoint": s3_server.endpoint_url, "bucket": bucket,
                          "access_key": s3_server.access_key,
                          "secret_key": s3_server.secret_key}
            through_node = parse_live_options({"url": url, "ledgers": str(ledger_id)})
            direct = parse_live_options({"url": url, "ledgers": str(ledger_id), **s3_options})
            planned_node = [p.planned for p in LiveReader(through_node).partitions()
                            if isinstance(p, LivePartition)]
            planned_s3 = [p.planned for p in LiveReader(direct).partitions()
                          if isinstance(p, LivePartition)]
            assert planned_node and all(isinstance(p, LiveRange) for p in planned_node)
            assert planned_s3 and all(isinstance(p, PlannedRange) for p in planned_s3)
            rows = read_all(LiveReader(through_node))
            assert len(rows) == 32 and {len(r[2]) for r in rows} == {ENTRY_BYTES}
            assert read_all(LiveReader(direct)) == rows
    finally:
        delete_bucket(client, bucket)


# --- a cluster: ranges spread over the ensemble ---------------------------------------


def test_cluster_reads_cut_by_size_spread_over_the_ensemble_and_read_back(
        local_etcd: LocalEtcd, tmp_path: Path) -> None:
    """Three nodes in cluster mode (E = Qw = 3: every node holds every entry): the
    planner asks one node for the placement, cuts the ledger into ranges, and sends
    each to another member of the ensemble; every range reads back the entries."""
    with LiveCluster(tmp_path / "cluster", local_etcd.metadata_url("spark"), 3) as live:
        urls = [n.url for n in live.nodes]
        with httpx.Client(base_url=urls[0], timeout=30) as http:
            ledger_id = int(http.post("/api/v1/ledgers", json={
                "password": "pw", "ensemble_size": 3, "write_quorum": 3, "ack_quorum": 2,
            }).json()["ledger_id"])
            written = [os.urandom(64 * 1024) for _ in range(48)]  # 3 MiB
            append(http, ledger_id, written)
        options = parse_live_options({"url": urls[1], "ledgers": str(ledger_id),
                                      "partition_size": "1MiB"})
        reader = LiveReader(options)
        parts = [p for p in reader.partitions() if isinstance(p, LivePartition)]
        ranges = [p.planned for p in parts if isinstance(p.planned, LiveRange)]
        assert [(r.first_entry_id, r.last_entry_id) for r in ranges] == [
            (0, 15), (16, 31), (32, 47)]
        assert {r.prefer[0] for r in ranges} == set(urls)  # one range per ensemble member
        assert all(set(r.prefer) == set(urls) for r in ranges)
        assert [(r[1], r[2]) for r in read_all(reader)] == list(enumerate(written))


# --- CRC checks and the CLI's own checks -----------------------------------------------


class FlippingProxy:
    """An HTTP proxy in front of a node that flips one byte of every frame stream it
    relays, at ``position``.  A fault a real node cannot be asked to produce: its
    frames carry the CRC32C it stored, computed from the same bytes."""

    def __init__(self, upstream: str, position: int) -> None:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                answer = httpx.get(upstream + self.path, headers={
                    k: v for k, v in self.headers.items() if k.lower() != "host"}, timeout=30)
                body = bytearray(answer.content)
                if "/entries/frames" in self.path and len(body) > proxy.position:
                    body[proxy.position] ^= 0x01
                self.send_response(answer.status_code)
                self.send_header("content-type", answer.headers.get("content-type", ""))
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(bytes(body))

        self.position = position
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_a_frame_failing_its_crc_fails_the_read_naming_ledger_and_entry(
        node: LiveServer, http: httpx.Client) -> None:
    ledger_id = create(http)
    append(http, ledger_id, [bytes([i]) * 100 for i in range(10)])
    proxy = FlippingProxy(node.url, 3 * (16 + 100) + 16 + 50)  # a payload byte of entry 3
    try:
        reader = LiveReader(parse_live_options({"url": proxy.url, "ledgers": str(ledger_id)}))
        with pytest.raises(CorruptRecord, match=rf"ledger {ledger_id} entry 3: payload crc32c"):
            read_all(reader)
    finally:
        proxy.close()


def test_tail_refuses_bad_options_before_starting_spark(tmp_path: Path) -> None:
    tailed = subprocess.run(
        [sys.executable, "-m", "cli", "tail", "--url", "ftp://x", "--output",
         str(tmp_path / "o"), "--checkpoint", str(tmp_path / "c")],
        cwd=REPO, capture_output=True, timeout=60, check=False)
    assert tailed.returncode == 2, tailed.stderr
    assert b"invalid option url" in tailed.stderr


def test_each_trigger_costs_one_listing_and_one_get_per_followed_ledger(
        node: LiveServer, http: httpx.Client) -> None:
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from offload.spark import LedgerdStreamReader, NodeClient
    from offload.spark._node import client_for

    tag = os.urandom(4).hex()
    ids = [create(http, count=tag) for _ in range(3)]
    for ledger_id in ids:
        append(http, ledger_id, [b"x"] * (ledger_id % 5 + 1))
    settled = parse_live_options({"url": node.url, "ledgers": f"metadata.count={tag}",
                                  "discovery_grace": "0"})
    client: NodeClient = client_for(settled.urls)
    reader = LedgerdStreamReader(settled)
    before = client.requests
    first = reader.latestOffset(reader.initialOffset(), ReadAllAvailable())
    assert client.requests - before == 1  # one listing page: it carries every LAC
    assert first["after"] == max(ids)
    assert first["next"] == {str(i): i % 5 + 1 for i in ids}
    before = client.requests
    second = reader.latestOffset(first, ReadAllAvailable())
    assert client.requests - before == 1 + len(ids)  # nothing new listed: a GET each
    assert second == first
    parts = reader.partitions(reader.initialOffset(), first)
    assert sorted((p.planned.ledger_id, p.planned.first_entry_id, p.planned.last_entry_id)
                  for p in parts if isinstance(p, LivePartition)
                  and isinstance(p.planned, LiveRange)) == [(i, 0, i % 5) for i in ids]

    # Ledgers created within the grace keep the cursor back: listed again, no GETs.
    unsettled = LedgerdStreamReader(parse_live_options(
        {"url": node.url, "ledgers": f"metadata.count={tag}", "discovery_grace": "3600"}))
    first = unsettled.latestOffset(unsettled.initialOffset(), ReadAllAvailable())
    assert first["after"] == -1
    before = client.requests
    assert unsettled.latestOffset(first, ReadAllAvailable()) == first
    assert client.requests - before == 1


def test_a_dead_first_url_costs_one_failed_call_then_the_live_node_serves(
        node: LiveServer, http: httpx.Client) -> None:
    from offload.spark import NodeClient
    from tools.local_s3 import free_port

    ledger_id = create(http)
    append(http, ledger_id, payloads(20, seed=9))
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    client = NodeClient((dead, node.url))
    try:
        assert client.ledger(ledger_id) is not None
        assert client.requests == 2  # the dead one, then the live one
        assert client.ledger(ledger_id) is not None
        assert client.requests == 3  # the live one first from now on
        rows = list(client.frames(ledger_id, 0, 19))
        assert [payload for _, payload, _ in rows] == payloads(20, seed=9)
        assert client.requests == 4
    finally:
        client.close()
