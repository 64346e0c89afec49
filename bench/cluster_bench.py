"""Cluster mode against standalone, in the same run on this machine.

- **Replicated adds**: three ``ledgerd serve`` nodes in cluster mode on one etcd,
  a ledger with E = Qw = 3, Qa = 2 written by node n0, the client posting to n0;
  against one standalone server with the same settings, in alternating rounds
  (3 of each) so that drift weighs on both: single 1 KiB adds at 1, 16 and 64
  concurrent clients, and 1 MiB batches (64 frames of 16 KiB) at 1 and 4.  One
  more row posts to n1, which forwards every add to the writer.  Each row has
  p50/p99, the client's CPU per add, the writer node's (or the standalone
  server's) CPU per add and all three nodes' together (``_cpu_bound``: what the
  shared CPUs allow).  Append streams (DESIGN §5a): one stream of messages of
  16 entries of 1 KiB to the writer against one to the standalone server, same
  Python client (``streaming.AppendStream``), alternating rounds, with the same
  CPU figures per entry.
- **Replicated adds over TLS**: the same ledger shape and 1 KiB adds at 16
  clients through a second cluster of three nodes serving HTTPS and calling each
  other over it (``TLS_CERT_FILE``/``TLS_KEY_FILE``/``TLS_CA_FILE``, certificates
  from ``tools.local_pki``), against the plain cluster, alternating rounds.
- **Takeover**: from ``kill -9`` of a ledger's writer to the first add
  acknowledged through another node (the client retrying with ``?entry_id``);
  the limit is ``MEMBERSHIP_TTL``, the lease a dead writer keeps.
- **Re-replication**: a closed ledger of E = Qw = 3 on n0-n2, a fourth node
  started, n1 killed for good; the auditor's copy of n1's share to n3 (its log
  says bytes and seconds, of which listed_s listing the survivors' replicas and
  copied_s the copies, in ranges of up to 1,024 entries / 4 MiB a call) against
  a raw copy of the same number of bytes on the same disk (read a file, write a
  new one, fsync).
- **Node-to-node calls over TLS**: ``cluster.HttpPool`` (what nodes call each
  other with) calling ``GET /heartbeat`` of an HTTPS server (certificate from
  ``tools.local_pki``, verified) against the same calls to a plain HTTP server
  with the same settings, alternating rounds, one call at a time: on a kept-alive
  connection, and each on a new connection (TCP + TLS handshake), with the
  client's and the server's CPU per call.

All nodes, etcd and the client share this machine (and its one disk), so the
ratios say what replication costs here, not what a cluster of machines does.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import shutil
import ssl
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import httpx

from cluster import HttpPool, peer_ssl_context
from common.units import KiB, MiB
from tools.local_cluster import LiveCluster
from tools.local_pki import make_pki
from tools.local_server import ServerProcess

from ._harness import Row, percentile
from ._load import LoadResult, closed_loop, http_connections

FRAMES = "application/x-ledgerd-frames"
OCTETS = "application/octet-stream"
ROUNDS = 3
SINGLE_CONCURRENCY = (1, 16, 64)
BATCH_CONCURRENCY = (1, 4)
BENCH_TTL_S = 2.0
# Every node and the standalone server alike.
SETTINGS = {"JOURNAL_CAPACITY": "256MiB", "WRITE_CACHE_SIZE": "64MiB",
            "READ_CACHE_SIZE": "32MiB", "ACCESS_LOG": "false", "LOG_LEVEL": "INFO",
            "FLUSH_INTERVAL": "10"}
# The ledger shape every replicated figure uses.
QUORUMS = {"ensemble_size": 3, "write_quorum": 3, "ack_quorum": 2}
CLUSTER_SETTINGS = {**SETTINGS, "MEMBERSHIP_TTL": str(BENCH_TTL_S),
                    "REREPLICATION_DELAY": "1", "AUDIT_INTERVAL": "0.5"}


def describe() -> dict[str, str]:
    return {"machine": "three cluster nodes, etcd, the standalone server and the client "
                       "share one machine and one disk: ratios, not a cluster's figures"}


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far (/proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _load(url: str, path: str, body: bytes, concurrency: int, duration_s: float,
                content_type: str, context: ssl.SSLContext | None) -> LoadResult:
    async with http_connections(url, concurrency, context) as connections:

        async def post(n: int) -> None:
            status, answer = await connections[n].post(path, body, content_type)
            if status >= 300:
                raise RuntimeError(f"POST {path}: {status} {answer[:200]!r}")

        return await closed_loop(post, concurrency=concurrency, duration_s=duration_s)


class _Side:
    """One side of a comparison: where to post, whose CPU to count, and the totals."""

    def __init__(self, url: str, path: str, pid: int,
                 context: ssl.SSLContext | None = None, others: Sequence[int] = ()) -> None:
        self.url, self.path, self.pid, self.context = url, path, pid, context
        self.others = tuple(others)  # the other nodes of a cluster, whose CPU counts too
        self.others_cpu_s = 0.0
        self.ops = 0
        self.elapsed_s = 0.0
        self.latencies: list[float] = []
        self.client_cpu_s = 0.0
        self.server_cpu_s = 0.0

    def measure(self, body: bytes, concurrency: int, duration_s: float,
                content_type: str) -> None:
        server0, client0 = cpu_s(self.pid), time.process_time()
        others0 = sum(cpu_s(p) for p in self.others)
        result = asyncio.run(_load(self.url, self.path, body, concurrency, duration_s,
                                   content_type, self.context))
        self.client_cpu_s += time.process_time() - client0
        self.server_cpu_s += cpu_s(self.pid) - server0
        self.others_cpu_s += sum(cpu_s(p) for p in self.others) - others0
        self.ops += result.ops
        self.elapsed_s += result.elapsed_s
        self.latencies += result.latencies_s

    def row(self, name: str, params: dict[str, object], unit_bytes: int | None) -> Row:
        rate = self.ops / self.elapsed_s
        value, unit = (rate, "req/s") if unit_bytes is None else (
            rate * unit_bytes / 1e6, "MB/s")
        row = Row(name, dict(params), value, unit, extra={
            "p50_ms": percentile(self.latencies, 50) * 1e3,
            "p99_ms": percentile(self.latencies, 99) * 1e3,
            "client_cpu_ms_per_op": self.client_cpu_s / max(1, self.ops) * 1e3,
            "server_cpu_ms_per_op": self.server_cpu_s / max(1, self.ops) * 1e3})
        if self.others:
            row.extra["all_nodes_cpu_ms_per_op"] = (
                (self.server_cpu_s + self.others_cpu_s) / max(1, self.ops) * 1e3)
        return row


def _compare(name: str, params: dict[str, object], replicated: _Side, standalone: _Side,
             body: bytes, concurrency: int, duration_s: float, content_type: str,
             unit_bytes: int | None, *, peer: str = "standalone") -> Row:
    """``replicated`` against ``standalone`` (or the ``peer`` named so)."""
    for _ in range(ROUNDS):
        standalone.measure(body, concurrency, duration_s / ROUNDS, content_type)
        replicated.measure(body, concurrency, duration_s / ROUNDS, content_type)
    row = replicated.row(name, params, unit_bytes)
    limit = standalone.row(name, params, unit_bytes)
    row.limit, row.limit_name = limit.value, f"{peer}, alternating rounds"
    prefix = peer.split(" ")[0].replace("-", "_").lower()
    row.extra.update({f"{prefix}_{k}": v for k, v in limit.extra.items()})
    if peer == "standalone":
        _cpu_bound(row, limit.extra["server_cpu_ms_per_op"])
    return row


def _cpu_bound(row: Row, standalone_cpu_per_op: float) -> None:
    """Where the three nodes share this machine's CPUs with the standalone server's
    work spread over all of them: the ratio the CPU allows (standalone server CPU
    per op over all three nodes' CPU per op), beside the one measured; and the
    writer's CPU per op over standalone's (issue 29: at most 1.5)."""
    every_node = row.extra.get("all_nodes_cpu_ms_per_op")
    if every_node:
        row.extra["cpu_bound_ratio"] = standalone_cpu_per_op / every_node
    writer = row.extra.get("server_cpu_ms_per_op")
    if writer and standalone_cpu_per_op:
        row.extra["writer_cpu_vs_standalone"] = writer / standalone_cpu_per_op


def _frames(entry_bytes: int, count: int) -> bytes:
    entry = b"b" * entry_bytes
    return b"".join(len(entry).to_bytes(4, "big") + entry for _ in range(count))


def _create(url: str, quorums: dict[str, int] | None = None,
            context: ssl.SSLContext | None = None) -> int:
    response = httpx.post(f"{url}/api/v1/ledgers", json=quorums or {}, timeout=60,
                          verify=context or True)
    response.raise_for_status()
    return int(response.json()["ledger_id"])


def _others(cluster: LiveCluster, pid: int) -> list[int]:
    """The pids of the cluster's nodes but ``pid``."""
    return [n.process.pid for n in cluster.nodes
            if n.process is not None and n.process.pid != pid]


def _adds(cluster: LiveCluster, solo: ServerProcess, duration_s: float) -> list[Row]:
    n0, n1 = cluster.nodes[0], cluster.nodes[1]
    assert n0.process is not None and n1.process is not None and solo.process is not None
    rows = []
    body = b"h" * KiB
    for conc in SINGLE_CONCURRENCY:
        lid, sid = _create(n0.url, QUORUMS), _create(solo.url)
        rows.append(_compare(
            "cluster_add_1KiB", {"conc": conc},
            _Side(n0.url, f"/api/v1/ledgers/{lid}/entries", n0.process.pid,
                  others=_others(cluster, n0.process.pid)),
            _Side(solo.url, f"/api/v1/ledgers/{sid}/entries", solo.process.pid),
            body, conc, duration_s, OCTETS, None))
    lid, sid = _create(n0.url, QUORUMS), _create(solo.url)
    forwarded = _compare(
        "cluster_add_1KiB_forwarded", {"conc": 16},
        _Side(n1.url, f"/api/v1/ledgers/{lid}/entries", n1.process.pid,
              others=_others(cluster, n1.process.pid)),
        _Side(solo.url, f"/api/v1/ledgers/{sid}/entries", solo.process.pid),
        body, 16, duration_s, OCTETS, None)
    rows.append(forwarded)
    frames = _frames(16 * KiB, 64)
    for conc in BATCH_CONCURRENCY:
        lid, sid = _create(n0.url, QUORUMS), _create(solo.url)
        rows.append(_compare(
            "cluster_batch_1MiB", {"conc": conc},
            _Side(n0.url, f"/api/v1/ledgers/{lid}/entries/batch", n0.process.pid,
                  others=_others(cluster, n0.process.pid)),
            _Side(solo.url, f"/api/v1/ledgers/{sid}/entries/batch", solo.process.pid),
            frames, conc, duration_s, FRAMES, 64 * 16 * KiB))
    return rows


def _tls_adds(plain: LiveCluster, work: Path, etcd_url: str, duration_s: float) -> Row:
    """Replicated 1 KiB adds at 16 clients through three nodes serving HTTPS and
    calling each other over it (certificates from ``tools.local_pki``, verified
    by client and nodes) against the plain cluster, alternating rounds."""
    pki = make_pki(work / "cluster-pki", "cluster")
    settings = {**CLUSTER_SETTINGS, "TLS_CERT_FILE": str(pki.cert),
                "TLS_KEY_FILE": str(pki.key), "TLS_CA_FILE": str(pki.ca)}
    context = ssl.create_default_context(cafile=str(pki.ca))
    with LiveCluster(work / "cluster-tls", f"{etcd_url}-tls", 3, settings=settings,
                     ca_file=pki.ca) as secure:
        n0, t0 = plain.nodes[0], secure.nodes[0]
        assert n0.process is not None and t0.process is not None
        lid, tid = _create(n0.url, QUORUMS), _create(t0.url, QUORUMS, context)
        return _compare(
            "cluster_add_1KiB_tls", {"conc": 16},
            _Side(t0.url, f"/api/v1/ledgers/{tid}/entries", t0.process.pid, context),
            _Side(n0.url, f"/api/v1/ledgers/{lid}/entries", n0.process.pid),
            b"h" * KiB, 16, duration_s, OCTETS, None, peer="plain-HTTP cluster")


STREAM_ENTRIES = 16


async def _stream(url: str, ledger_id: int, duration_s: float) -> tuple[int, list[float]]:
    """Entries acknowledged and each message's ack latency, for one stream."""
    from streaming import AppendStream

    loop = asyncio.get_running_loop()
    latencies: list[float] = []
    message = [b"s" * KiB] * STREAM_ENTRIES
    sent = 0
    async with await AppendStream.open(url, ledger_id) as stream:
        deadline = loop.time() + duration_s
        while loop.time() < deadline:
            done = await stream.send(message)
            done.add_done_callback(functools.partial(_acked, latencies, loop.time()))
            sent += 1
        await stream.drain()
    return sent * STREAM_ENTRIES, latencies


def _acked(latencies: list[float], sent_s: float, done: object) -> None:
    latencies.append(asyncio.get_running_loop().time() - sent_s)


def _streams(cluster: LiveCluster, solo: ServerProcess, duration_s: float) -> Row:
    n0 = cluster.nodes[0]
    assert n0.process is not None and solo.process is not None
    lid = _create(n0.url, QUORUMS)
    sid = _create(solo.url)
    entries = {"replicated": 0, "standalone": 0}
    seconds = {"replicated": 0.0, "standalone": 0.0}
    server_cpu_s = {"replicated": 0.0, "standalone": 0.0}
    others_cpu_s = 0.0
    others = _others(cluster, n0.process.pid)
    latencies: dict[str, list[float]] = {"replicated": [], "standalone": []}
    for _ in range(ROUNDS):
        for side, url, ledger, pid in (("standalone", solo.url, sid, solo.process.pid),
                                       ("replicated", n0.url, lid, n0.process.pid)):
            started, server0 = time.perf_counter(), cpu_s(pid)
            others0 = sum(cpu_s(p) for p in others)
            count, acks = asyncio.run(_stream(url, ledger, duration_s / ROUNDS))
            seconds[side] += time.perf_counter() - started
            server_cpu_s[side] += cpu_s(pid) - server0
            if side == "replicated":
                others_cpu_s += sum(cpu_s(p) for p in others) - others0
            entries[side] += count
            latencies[side] += acks
    rate = {side: entries[side] / seconds[side] for side in entries}
    row = Row("cluster_stream_1KiB", {"entries_per_message": STREAM_ENTRIES},
              rate["replicated"], "entries/s", limit=rate["standalone"],
              limit_name="standalone, alternating rounds")
    for side, key in (("replicated", ""), ("standalone", "standalone_")):
        row.extra[f"{key}ack_p50_ms"] = percentile(latencies[side], 50) * 1e3
        row.extra[f"{key}ack_p99_ms"] = percentile(latencies[side], 99) * 1e3
        row.extra[f"{key}server_us_per_entry"] = (
            server_cpu_s[side] / max(1, entries[side]) * 1e6)
    row.extra["all_nodes_us_per_entry"] = (
        (server_cpu_s["replicated"] + others_cpu_s) / max(1, entries["replicated"]) * 1e6)
    standalone = row.extra["standalone_server_us_per_entry"]
    row.extra["cpu_bound_ratio"] = standalone / row.extra["all_nodes_us_per_entry"]
    row.extra["writer_cpu_vs_standalone"] = row.extra["server_us_per_entry"] / standalone
    return row


def _until(call: Callable[[], bool], timeout_s: float) -> float:
    """Seconds until ``call()`` is true (polled every 10 ms: the measurement's grain)."""
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        if call():
            return time.monotonic() - started
        time.sleep(0.01)
    raise TimeoutError("no takeover in time")


def _takeover(cluster: LiveCluster, trials: int) -> list[Row]:
    rows = []
    for trial in range(trials):
        writer = cluster.nodes[trial % 3]
        other = cluster.nodes[(trial + 1) % 3]
        lid = _create(writer.url, QUORUMS)
        for i in range(10):
            httpx.post(f"{writer.url}/api/v1/ledgers/{lid}/entries", content=b"t%d" % i,
                       timeout=30).raise_for_status()

        def acknowledged(lid: int = lid, url: str = other.url) -> bool:
            try:
                return httpx.post(f"{url}/api/v1/ledgers/{lid}/entries", content=b"after",
                                  params={"entry_id": 10}, timeout=10).status_code in (200, 201)
            except httpx.HTTPError:
                return False
        writer.kill()
        seconds = _until(acknowledged, 120)
        rows.append(Row("cluster_takeover", {"trial": trial}, seconds, "s",
                        limit=BENCH_TTL_S, limit_name="MEMBERSHIP_TTL"))
        writer.start()
        cluster.wait_members(len(cluster.nodes))
    return rows


def _raw_copy_mb_s(work: Path, total_bytes: int) -> float:
    source, target = work / "raw-source", work / "raw-target"
    block = os.urandom(MiB)
    with open(source, "wb") as f:
        for _ in range(total_bytes // MiB):
            f.write(block)
        os.fsync(f.fileno())
    started = time.perf_counter()
    with open(source, "rb") as src, open(target, "wb") as dst:
        shutil.copyfileobj(src, dst, MiB)
        os.fsync(dst.fileno())
    elapsed = time.perf_counter() - started
    source.unlink()
    target.unlink()
    return total_bytes / elapsed / 1e6


def _rereplication(cluster: LiveCluster, work: Path, total_bytes: int) -> Row:
    n0, n1 = cluster.nodes[0], cluster.nodes[1]
    lid = _create(n0.url, QUORUMS)
    frames = _frames(64 * KiB, 16)
    for _ in range(total_bytes // MiB):
        httpx.post(f"{n0.url}/api/v1/ledgers/{lid}/entries/batch", content=frames,
                   headers={"Content-Type": FRAMES}, timeout=60).raise_for_status()
    httpx.post(f"{n0.url}/api/v1/ledgers/{lid}/close", timeout=60).raise_for_status()
    spare = cluster.add_node()
    n1.kill()  # lost for good: its share goes to the spare
    logs = [n.log_path for n in cluster.nodes if n.log_path is not None]
    done = None
    deadline = time.monotonic() + 600
    while done is None and time.monotonic() < deadline:
        time.sleep(0.5)  # the auditor works on its own schedule
        done = _repair_logged(logs, lid)
    if done is None:
        raise TimeoutError(f"ledger {lid} was not re-replicated to {spare.bookie_id}")
    copied, seconds = done
    raw = _raw_copy_mb_s(work, copied // MiB * MiB or MiB)
    return Row("cluster_rereplication", {"bytes": copied}, copied / seconds / 1e6, "MB/s",
               limit=raw, limit_name="raw copy of as many bytes (read, write, fsync)",
               extra={"seconds": seconds})


def _repair_logged(logs: list[Path], ledger_id: int) -> tuple[int, float] | None:
    for path in logs:
        for line in path.read_text(errors="replace").splitlines():
            if '"ledger re-replicated"' not in line:
                continue
            doc = json.loads(line)
            if doc.get("ledger_id") == ledger_id and doc.get("bytes"):
                return int(doc["bytes"]), float(doc["duration_s"])
    return None


async def _heartbeats(url: str, duration_s: float, context: ssl.SSLContext, *,
                      keep_alive: bool) -> list[float]:
    """Sequential ``GET /heartbeat`` calls for ``duration_s``, each one's seconds; on
    one kept-alive connection, or each on a new one."""
    latencies: list[float] = []
    pool = HttpPool(ssl_context=context)
    try:
        started = time.perf_counter()
        while time.perf_counter() - started < duration_s:
            t0 = time.perf_counter()
            response = await pool.request(url, "GET", "/heartbeat")
            if not keep_alive:
                await pool.aclose()
            latencies.append(time.perf_counter() - t0)
            if response.status != 200:
                raise RuntimeError(f"GET /heartbeat: {response.status}")
    finally:
        await pool.aclose()
    return latencies


class _CallSide:
    def __init__(self, server: ServerProcess) -> None:
        assert server.process is not None
        self.url, self.pid = server.url, server.process.pid
        self.latencies: list[float] = []
        self.client_cpu_s = self.server_cpu_s = 0.0

    def measure(self, duration_s: float, context: ssl.SSLContext, keep_alive: bool) -> None:
        server0, client0 = cpu_s(self.pid), time.process_time()
        self.latencies += asyncio.run(_heartbeats(self.url, duration_s, context,
                                                  keep_alive=keep_alive))
        self.client_cpu_s += time.process_time() - client0
        self.server_cpu_s += cpu_s(self.pid) - server0

    def figures(self, prefix: str) -> dict[str, float]:
        calls = max(1, len(self.latencies))
        return {f"{prefix}p50_ms": percentile(self.latencies, 50) * 1e3,
                f"{prefix}p99_ms": percentile(self.latencies, 99) * 1e3,
                f"{prefix}client_cpu_ms_per_call": self.client_cpu_s / calls * 1e3,
                f"{prefix}server_cpu_ms_per_call": self.server_cpu_s / calls * 1e3}


def _peer_calls(work: Path, duration_s: float) -> list[Row]:
    pki = make_pki(work / "pki")
    context = peer_ssl_context(pki.ca)
    base = {**SETTINGS, "LOG_LEVEL": "WARNING"}
    plain = ServerProcess({**base, "DATA_DIR": str(work / "plain")})
    tls = ServerProcess({**base, "DATA_DIR": str(work / "tls"), "TLS_CERT_FILE": str(pki.cert),
                         "TLS_KEY_FILE": str(pki.key)}, ca_file=pki.ca)
    rows = []
    try:
        plain.start()
        tls.start()
        for name, keep_alive in (("peer_call_keepalive", True),
                                 ("peer_call_new_connection", False)):
            http, https = _CallSide(plain), _CallSide(tls)
            for _ in range(ROUNDS):
                http.measure(duration_s / ROUNDS, context, keep_alive)
                https.measure(duration_s / ROUNDS, context, keep_alive)
            # Sequential calls: the rate is the inverse of the mean latency.
            rate = {side: len(side.latencies) / sum(side.latencies) for side in (http, https)}
            rows.append(Row(name, {"scheme": "https", "conc": 1}, rate[https], "calls/s",
                            limit=rate[http],
                            limit_name="plain HTTP, same settings, alternating rounds",
                            extra={**https.figures(""), **http.figures("http_")}))
        return rows
    finally:
        plain.stop()
        tls.stop()


def run(work: Path, etcd_url: str, *, duration_s: float, quick: bool) -> list[Row]:
    solo = ServerProcess({**SETTINGS, "DATA_DIR": str(work / "standalone"),
                          "LOG_LEVEL": "WARNING"})
    solo.start()
    try:
        with LiveCluster(work / "cluster", etcd_url, 3, settings=CLUSTER_SETTINGS) as cluster:
            rows = _adds(cluster, solo, duration_s)
            rows.append(_streams(cluster, solo, duration_s))
            solo.stop()
            rows.append(_tls_adds(cluster, work, etcd_url, duration_s))
            rows += _takeover(cluster, 1 if quick else 3)
            rows.append(_rereplication(cluster, work, (16 if quick else 64) * MiB))
        return rows + _peer_calls(work, duration_s)
    finally:
        solo.stop()
