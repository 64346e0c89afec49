"""Regenerate ``docs/benchmarks.md`` and its PNG charts from ``bench/results/*.json``.

``python -m bench`` calls :func:`write_report` after its suites; ``python -m
bench.report`` does only this.  The page is built from whatever JSON files
exist, so a partial run (``--only``) refreshes its own sections and keeps the
others; every section and every chart names the machine, the date and the
exact command of the run that produced it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter, NullLocator

from ._harness import RESULTS_DIR, Row

REPO_ROOT = Path(__file__).resolve().parent.parent
DOC_PATH = REPO_ROOT / "docs" / "benchmarks.md"
CHARTS_DIR = REPO_ROOT / "docs" / "benchmarks"

SIZE_PARAMS = {"entry", "block", "bytes", "stored_bytes"}
EXTRA_ORDER = ("entries_per_s", "ops_per_s", "MB_s", "p50_ms", "p99_ms", "client_cpu_s",
               "server_cpu_s", "server_us_per_entry")
ROW_FIELDS = {f.name for f in fields(Row)}


@dataclass(frozen=True)
class Result:
    """One ``bench/results/<suite>.json``."""

    suite: str
    machine: dict[str, Any]
    command: str
    notes: dict[str, str]
    rows: list[Row]

    @property
    def run_text(self) -> str:
        """The date and the machine."""
        m = self.machine
        return (f"{m.get('date')} on {m.get('cpus')} CPUs, Linux {m.get('kernel')}, "
                f"Python {m.get('python')}, host {m.get('host')}")

    @property
    def caption(self) -> str:
        return f"{self.run_text}; command: {self.command}"


@dataclass(frozen=True)
class Section:
    title: str
    about: str


@dataclass(frozen=True)
class ChartSpec:
    """A chart of ``y`` against param ``x`` for rows named ``names``: one panel
    per value of param ``panel``, one line per series (row name + the other
    params that vary), dashed lines for the ``compare`` metrics (the limits),
    and below it p50 (solid) and p99 (dotted) latency when the rows carry it."""

    stem: str
    title: str
    names: tuple[str, ...]
    x: str
    y: str = "value"
    compare: tuple[str, ...] = ("limit",)
    panel: str | None = None
    log_x: bool = False


SECTIONS: dict[str, Section] = {
    "raw": Section("Raw device limit (O_DIRECT + fdatasync, sequential, one write per sync)",
                   "The limit the journal, engine and HTTP figures are divided by."),
    "journal": Section("Journal appends (acked after fdatasync)",
                       "Writer threads appending to the journal alone; limit: raw 256 KiB "
                       "writes. The paced row is open-loop at half the 16 KiB saturation "
                       "rate; its limit is the raw device's simplest group commit at "
                       "the same rate (one thread: write what arrived, fdatasync, ack; same "
                       "pacer), whose p99 is a floor under the journal's on this machine; "
                       "`raw_commit_p99_ms` is that thread's pwrite + fdatasync alone, "
                       "the device's own time. The issue's target is 2 ms (`target_ms`). "
                       "Then issue 31, items 2 and 4, same run, same device: each sync mode "
                       "(`journal_sync_mode` setting) at 1 KiB: `raw_durable_write` is the "
                       "raw device making one 4 KiB write durable that way, back to back (the "
                       "floor), `journal_sync_latency` one writer's p50 next to it, "
                       "`journal_sync_throughput` 64 writers; `redis_xadd_one_connection` "
                       "is Redis (`appendfsync always`, scratch directory on the same disk) "
                       "taking XADDs of 1 KiB one after another on one connection (absent "
                       "when redis-server is not installed). `journal_append_vs_before` is 1 "
                       "KiB x 64 writers on the code at LEDGERD_BENCH_BEFORE (extracted with "
                       "git archive, run in a child process on the same device) and on the "
                       "code now, alternating, three rounds each in the same run, the median "
                       "round shown (`rate_min`, `rate_max`: the others); `journal_cost` is "
                       "one thread's CPU per append, no waiting; `cpu_us_per_entry` is "
                       "the process's CPU time (every thread, user + system) per entry. "
                       "docs/journal.md says where the microseconds go."),
    "engine": Section("Engine (journal + write cache + entry logs + RocksDB)",
                      "Writer threads calling `Bookie.append` (batches of one), one ledger "
                      "each; then "
                      "sequential reads from the write cache, the read cache and cold logs. "
                      "`engine_vs_journal_adds_one_cpu` is the engine-against-journal "
                      "comparison again with every thread of both sides on one CPU "
                      "(`sched_setaffinity` on the bench's threads; the kernel's work and "
                      "RocksDB's background threads are not held to it): "
                      "a GIL hand-over then wakes no other CPU. It is not issue 13's "
                      "figure, which is the row above it, as a process runs by default."),
    "replay": Section("Recovery replay", "Journal replay on open after a crash, against a raw "
                                         "sequential O_DIRECT read of the same bytes."),
    "http": Section("HTTP (uvicorn on loopback, a minimal asyncio HTTP/1.1 client)",
                    "Single 1 KiB adds against `POST /api/v1/noop` on the same server and "
                    "client, in alternating rounds (3 of each); 1 MiB frame batches "
                    "alternating likewise with raw 1 MiB writes to a second device on "
                    "the same disk; a streamed read."),
    "create": Section("Ledger creation vs a write (32 concurrent clients)",
                      "`POST /api/v1/ledgers` (a random 32-character password) from 32 "
                      "connections of the bench's asyncio HTTP client against `ledgerd "
                      "serve`, alternating round by round (3 of each) with single 1 KiB adds "
                      "on the same server from the same client: issue 28 asks creation to "
                      "cost what a write costs. `client_cpu` and `server_cpu` are CPU "
                      "seconds per second of each process during its rounds, "
                      "`server_cpu_us_per_req` the server's CPU per request. Then the "
                      "engine alone: 32 threads calling `Bookie.create_ledger` against 32 "
                      "calling `Bookie.append` (batches of one), alternating likewise."),
    "compaction": Section("Compaction",
                          "Forced major GC over interleaved ledgers with 80% deleted; then add "
                          "latency (4 writer threads, 1 KiB) in alternating windows, quiet and "
                          "busy, 3 of each: a busy window is one rate-limited run cut by its "
                          "run-time limit, the next run going on where it stopped. The target "
                          "is an add p99 during compaction at most 2x the p99 without it "
                          "(ratio ≤ 2). An earlier report measured one quiet window and then "
                          "one busy window (ratio 2.82): a single pair on a shared machine, "
                          "where p99 of the same code moved between 4 and 20 ms from minute "
                          "to minute. What compaction adds to the tail, by construction: its "
                          "per-record Python loop takes the GIL from the add path's threads "
                          "(the rate limit bounds it, but the limiter's bucket held one second "
                          "of budget, so every run started with 16 MiB read at full speed: 25 "
                          "ms of CPU without a wait, GIL held in 5 ms switch intervals; the "
                          "bucket now holds 20 ms, under 1 ms without a wait), and its "
                          "entry-log fsyncs (one per 4 MiB copied) share the disk with the "
                          "journal's fdatasync. Slow adds overlapped its RocksDB index commits "
                          "no more often than chance. `compaction_rate_limited` is MB/s moved "
                          "over the busy windows. docs/compaction.md says what is left."),
    "million": Section("A node holding 1,000 to 1,000,000 ledgers, both modes (issue 28, "
                       "item 6)",
                       "Issue 28's table, re-measured in one run, each figure with its "
                       "growth exponent (the slope of log(figure) over log(ledgers) from "
                       "the smallest count to the largest: 0 is flat, 1 proportional). "
                       "Standalone: `ledgerd serve` loaded with N ledgers of 1 to 3 "
                       "entries of 100 B, created, written and closed over HTTP by 32 "
                       "clients up to 100,000; the million is seeded into the stores "
                       "(tools.seed_ledgers), the state those creates, adds, closes and a "
                       "checkpoint leave, as creating it would take 25 minutes. RSS added "
                       "per ledger after the load and after a restart, restart to ready, "
                       "idle CPU; then the engine's figures with N held: an idle "
                       "checkpoint, the worst add across five checkpoints (next to the "
                       "worst add with none), an idle GC run, 1,000 deletions committed "
                       "with a full read cache. Cluster mode: the `cluster_idle` "
                       "measurement (three nodes and etcd): open ledgers created over "
                       "HTTP to 100,000, and a million closed ledgers seeded into etcd "
                       "and every node's stores (tools.seed_ledgers.seed_stopped_cluster), "
                       "the idle window taken once every node's metadata cache has "
                       "loaded and the auditor's first full audit is done. "
                       "`standalone_rss_per_ledger_settled` is the RSS two background "
                       "checkpoints after the load, when the bookie has given back the "
                       "heap freed in the burst. `_marginal` rows are RSS per ledger "
                       "between consecutive counts. Targets at a million: idle CPU "
                       "<= 2 % per node and <= 5 % for etcd; worst add, idle checkpoint "
                       "<= 20 ms; idle GC <= 50 ms; RSS per ledger <= 0.5 KB standalone, "
                       "<= 1 KB per cluster node; restart <= 5 s standalone, <= 10 s per "
                       "cluster node. The run before this one (2026-11-30 03:39 UTC, at "
                       "c99a447) measured, standalone at 100,000: 523 B per ledger after "
                       "the load and 394 B after a restart, 245 B at a million, a first "
                       "GC run of 1.6 s at a million; a cluster node 825 B at 100,000 "
                       "(no cluster million: it could not be made). Since then the "
                       "index's memtables are flushed at an eighth of INDEX_MEMORY (a "
                       "quarter before), the bookie gives freed heap back once idle, and "
                       "in cluster mode the metadata cache loads in windows of ids "
                       "(etcd 3.4 answered each page of a listing to the prefix's end "
                       "at a cost in every later key), the sweep of every replica "
                       "yields and unpacks no metadata of a ledger never offloaded, and "
                       "a restarted node's look for its open ledgers passes over closed "
                       "ones unpacked. A first seeded million (same bench, before those "
                       "three) never settled: each node spent six minutes loading the "
                       "metadata at every start and lost its lease while the sweep held "
                       "its event loop. At a million the idle window below still fell "
                       "in the new auditor's first check of every ledger's replicas (a "
                       "listing call to each bookie for each ledger not checked since "
                       "it became auditor, one ledger at a time: about three million "
                       "calls; py-spy put a quarter of every node's samples in serving "
                       "them and the rest in the HTTP layer around them), not in a "
                       "steady cost: pacing that first check is left to do."),
    "cluster_idle": Section("An idle cluster (issue 28, item 1)",
                            "etcd and three nodes on loopback, production cadences "
                            "(AUDIT_INTERVAL 5 s, MEMBERSHIP_TTL 10 s), holding N open "
                            "ledgers of one 100 B entry (E = Qw = 3, Qa = 2), left alone "
                            "for 30 s after 15 s to settle. Node CPU is the busiest "
                            "node's (% of one core, /proc utime + stime); etcd's "
                            "requests/s are its own mvcc range, txn and put counters. "
                            "Then what the ledgers added to the busiest node's RSS, over N "
                            "(each node holds a replica of every ledger and writes a "
                            "third), and one node's restart to ready. "
                            "`cluster_rss_per_ledger_marginal` is what each ledger past "
                            "1,000 added (the fills' RSS over the ledgers between the "
                            "smallest and the largest N): the per-ledger cost a million "
                            "ledgers would show, without the start-up and warm-up costs "
                            "the averages carry. With LEDGERD_BENCH_BEFORE set, each figure "
                            "stands next to the same measurement on the code at that "
                            "commit (`code=before`, extracted with git archive, driven by "
                            "today's harness) in the same run. The run below set none and "
                            "went to 100,000 ledgers, made by the bench's Python client "
                            "(its CPU, not the cluster, set the fill's pace: create_s). "
                            "Earlier runs, 1,000 to 10,000 ledgers: against 32e0afe (before "
                            "idle replicas were packed into one int each and writers sent "
                            "one call per bookie per turn) a marginal 929 B before and "
                            "877 B after; against f2f2217 (before compact writers, sleeping "
                            "writers, the packed metadata cache and packed entry log "
                            "usage) 1,865 B before and 1,016 B after. The run of "
                            "2026-11-29 22:53 UTC at af0667a (before idle writers shared "
                            "the cache's packed metadata and packed metadata numbered its "
                            "bookie ids), same command: 1,139 B per ledger at 100,000 and "
                            "a marginal 1,115 B. Where a ledger's bytes go (30,000 "
                            "ledgers, one node, tracemalloc and RocksDB's own figures, "
                            "before that change): about 565 B of Python objects (the "
                            "packed metadata, the replica's packed int, the writer's idle "
                            "state for a third of them, a dict slot and an id in each "
                            "table keyed by ledger), 140 B of RocksDB memtables (a "
                            "location and a replica record each, up to RocksDB's 64 MiB "
                            "write buffer per column family, then flushed: bounded), and "
                            "the entry log's running usage map for the ledgers written "
                            "into the current log (about 70 B each until it is sealed)."),
    "reclaim": Section("Space given back by deleting ledgers",
                       "N small ledgers (1-3 entries of 100 B), checkpointed; 90% of them "
                       "deleted; one forced major GC run (what `ledgerd gc` triggers). "
                       "Bytes are the data directory's entry logs plus its RocksDB index "
                       "(the journal, a fixed-size ring, left out), default engine settings "
                       "(256 MiB entry logs: all the entries sit in the current log). "
                       "`gc=main` is GC as it was before issue 28's item 3, measured in the "
                       "same run: it never looks at the current entry log and leaves the "
                       "index as the deletes' range tombstones made it (bigger: the "
                       "tombstones are added, nothing is dropped). `gc=reclaim` seals the "
                       "current log when it is mostly garbage, compacts the index's deleted "
                       "ranges and gives freed heap back. The limit is the share deleted, "
                       "what deleting alone could give back; more comes back because the "
                       "index before is mostly its WAL and memtables' worth of every write, "
                       "after it only compressed SST files of what is left. RSS is the bench "
                       "process's, each row "
                       "its own process. Ledger creation's scrypt cost is lowered in this "
                       "benchmark only (a hash's size does not depend on it)."),
    "offload": Section("Offload to S3 (radosgw on loopback)",
                       "A sealed ledger offloaded to a local one-node Ceph radosgw (one "
                       "multipart upload per segment, parts straight from the entries) and "
                       "read back cold, against a plain boto3 multipart upload of the same "
                       "bytes (same part size and parts in flight) and sequential ranged "
                       "GETs, alternating round by round on the same server; an open "
                       "ledger of the same size tiered as it fills while one writer adds "
                       "(chunk uploads against the plain upload, the writer's adds against "
                       "the same writer without tiering) and consolidated at close "
                       "(UploadPartCopy); then S3 requests per GiB by kind, for the sealed "
                       "path and for tiering, next to the chunk layout offload used "
                       "before and Pulsar's tiered storage layout (both computed)."),
    "pack": Section("A million small ledgers in S3 (issue 28, item 5)",
                    "OFFLOAD_PACK against a local one-node Ceph radosgw: a million 1 KiB "
                    "ledgers (generated, see the notes) packed into shared objects with "
                    "the default settings (64 MiB packs, 32 MiB parts) and read back "
                    "entry by entry through a cold reader, next to a sample of the same "
                    "ledgers offloaded one by one with objects of their own (the extra "
                    "columns `alone_*`); then one 1 GiB ledger of 64 KiB entries "
                    "offloaded alone in 32 MiB parts (OFFLOAD_PART_SIZE) and read back. "
                    "Limits are the issue's targets: at most 64 objects per GiB, 46 "
                    "requests per GiB offloaded, 100 GETs per GiB read back."),
    "cluster_pack": Section("Packs in cluster mode (issue 28, item 5)",
                            "Three nodes and etcd on loopback with OFFLOAD_PACK and the "
                            "default pack size (64 MiB), a local one-node Ceph radosgw: "
                            "1,024 ledgers of 16 x 64 KiB (1 GiB of frames) made and closed "
                            "over HTTP, their offload requested through each node in turn "
                            "(each node packs the ledgers whose locks it took); then the "
                            "objects in the bucket once every ledger points into a pack, "
                            "the S3 requests the nodes made meanwhile (their "
                            "`ledgerd_offload_requests_*` metrics, summed; no target: "
                            "issue 28's 46 per GiB is for a large ledger alone, and a "
                            "standalone node's packs are `pack_requests_per_gib` in the "
                            "section above, the same pack size and part size), "
                            "and a cold reader in the bench process reading every entry "
                            "back from the records in etcd (the nodes' reader code, its "
                            "GETs counted). Limits are the issue's targets."),
    "redis": Section("ledgerd over HTTP vs Redis streams, Python clients on both sides",
                     "Same entry sizes and concurrencies, both sides driven by Python asyncio "
                     "clients in the bench process (a minimal HTTP/1.1 client; redis-py). "
                     "These rows measure those clients as much as the servers: redis-py "
                     "encodes 100 commands and parses 100 replies in Python per pipeline, "
                     "so the pipelined XADD rows are the client's ceiling, not Redis's, and "
                     "an earlier headline built on them (ledgerd batch add ÷ pipelined XADD "
                     "= 1.97) was wrong. The servers' own figures are in the section "
                     "\"ledgerd vs Redis, native clients\" below. Each ledgerd row's limit "
                     "is Redis at the same point; MB/s of payload."),
    "peers": Section("ledgerd vs Redis, native clients (wrk, Node.js ws, redis-benchmark)",
                     "Each side driven by a client that is not the bottleneck: redis-benchmark "
                     "(`XADD key * d <payload>`, `-P` pipelined) for Redis with appendonly "
                     "yes + appendfsync always; wrk (one thread, a Lua script POSTing the "
                     "body) for ledgerd's HTTP adds; a Node.js `ws` client (bench/node) for "
                     "append streams, one stream per ledger, one 1 KiB entry per message. "
                     "`client cpu s` and `server cpu s` are the CPU seconds each process used "
                     "during the point (from /proc), `server us per entry` the server's CPU "
                     "per entry acknowledged; `seconds` is the point's length. Rows "
                     "`ledgerd_stream` against `redis_stream` are the issue's stream targets "
                     "(ratio ≥ 1), `of floor` what they reach of `ledgerd_stream_floor`: the "
                     "same load against `/api/v1/noop/stream` on the same server, which "
                     "decodes and acknowledges each message (acks grouped as the real route "
                     "groups them) but appends nothing, so its ratio to Redis is the ceiling "
                     "this server's WebSocket layer sets on the target; "
                     "`ledgerd_stream_durable_floor` (one stream) is the same again against "
                     "`/api/v1/noop/durable-stream`, which also writes and fdatasyncs what "
                     "each acks message covers before sending it, on the event loop's "
                     "thread (as Redis with appendfsync always does): the ceiling of any "
                     "design that syncs a stream's window before acknowledging it, with "
                     "no engine and no hand-over between threads (its file is in the data "
                     "directory, `of durable floor` what ledgerd reaches of it); "
                     "`ledgerd_stream_paced` is the ack p99 of 16 streams paced "
                     "(open loop) at half the 16 x 16 rate against twice the raw device's "
                     "group-commit p99 at that rate (ratio ≤ 1), and "
                     "`ledgerd_stream_paced_floor` the floor route's p99 under the same "
                     "paced load (the client paces with a 1 ms timer and counts latency "
                     "from each message's scheduled time); `ledgerd_http_batch_tail` "
                     "is HTTP batch p99 against five times its p50 (ratio ≤ 1)."),
    "server": Section("HTTP server A/B: uvicorn vs granian, all CPUs vs one (native clients)",
                      "The same app and settings under uvicorn (`ledgerd serve`: uvloop, "
                      "httptools), under granian (Rust HTTP/1.1 and WebSockets, ASGI, "
                      "uvloop, one worker; bench/_granian.py) and under uvicorn held to one "
                      "CPU (`taskset`, the last CPU, as an operator would run it), all three "
                      "up the whole run on "
                      "scratch devices and data dirs of the same kind, loads alternating "
                      "between them round by round (A B C, C B A, A B C): single 1 KiB adds with "
                      "wrk at 16 and 64 connections, batches of 100 x 1 KiB with wrk at 16, "
                      "append streams (16 x 16 in flight, 1 KiB per message) with the Node.js "
                      "`ws` client. Each granian row's limit is uvicorn's row (ratio > 1: "
                      "granian faster); `p99_vs_uvicorn` < 1: granian's tail shorter. "
                      "`server_us_per_entry` (server CPU over its process tree per entry) is "
                      "the figure a busy machine distorts least. Verdict: uvicorn stays. "
                      "granian did not win clearly on all three loads: in two runs (load "
                      "average 4 to 12 on 2 CPUs, provisional) it made 0.73 and 0.92 of "
                      "uvicorn's entries/s for single adds at 16 connections, 1.28 and "
                      "1.02 at 64, 0.82 and 1.01 for batches, 0.86 and 0.55 for streams, "
                      "and spent more server CPU per entry on every load in both (streams: "
                      "about twice as much); and it has no options for "
                      "what the append streams rely on in the WebSocket server: a message "
                      "size limit (close 1009), keepalive ping interval and timeout; so the "
                      "whole suite was not run under it. docs/architecture.md, \"Choices "
                      "where the brief is silent\", says the same. Each one-CPU row's limit "
                      "is uvicorn on all CPUs; the verdict rule is granian's. Verdict: "
                      "ledgerd does not hold itself to one CPU. On 2026-11-27 one CPU made "
                      "1.11 and 1.05 of the entries/s of single adds (16 and 64 "
                      "connections), 0.96 of batches' and 1.05 of streams', within what "
                      "this machine moves between rounds, while everything the engine "
                      "does outside the GIL (RocksDB's compactions, the kernel's copies "
                      "for its system calls, offload's TLS and hashing) would share that "
                      "CPU. Embedded, the engine gains far more from one CPU (the engine "
                      "section's `_one_cpu` row): `taskset` or systemd's `CPUAffinity=` "
                      "give that to whoever wants it (docs/operations.md)."),
    "split": Section("Append streams on two processes: a WebSocket front and the engine "
                     "(issue 31, item 5)",
                     "16 streams x 16 in flight, one 1 KiB entry per message, Node.js `ws` "
                     "client, against `ledgerd serve` (one process: `single_process_stream`) "
                     "and against the layout that would use the second core "
                     "(`split_stream`): a front process (uvicorn, the service's WebSocket "
                     "options) forwarding each message over a Unix socket to an engine "
                     "process (the real `Bookie`, `Bookie.append` per stream per read, acks "
                     "back once durable), rounds alternating on one scratch device, the "
                     "median round shown; `median_gain` is the median of the per-round "
                     "ratios (the issue adopts the layout at 1.3). `engine_us_per_entry` and "
                     "`front_us_per_entry` are each process's CPU per entry, "
                     "`machine_busy` the fraction of both CPUs in use (from /proc/stat). "
                     "`journal_p50_ms`/`journal_p90_ms`: in the engine process, a run's "
                     "time from `Bookie.append` to durable; `entries_per_group` the entries "
                     "per resolved journal group; `raw_group_commit_p50_ms` the device "
                     "taking one such group (O_DIRECT write + fdatasync, back to back) in "
                     "the same run. bench/split_bench.py says what the prototype leaves out."),
    "cluster": Section("Cluster mode (three nodes, etcd and the client on this machine)",
                       "Replicated adds (E=Qw=3, Qa=2, the client posting to the writer; "
                       "one row through another node, which forwards) against one "
                       "standalone server with the same settings, in alternating rounds; "
                       "p50/p99 and CPU per add of the client and of the writer (or the "
                       "standalone server). Takeover: kill -9 of a writer to the first add "
                       "acknowledged through another node, against MEMBERSHIP_TTL. "
                       "Re-replication: the auditor copying a lost bookie's share of a "
                       "closed ledger to a new node, against a raw copy (read, write, "
                       "fsync) of as many bytes. Everything shares one machine and one "
                       "disk: ratios, not a cluster of machines. So each replicated row "
                       "also has `all_nodes_cpu_ms_per_op` (the three nodes' CPU per op) "
                       "and `cpu_bound_ratio`, the standalone server's CPU per op over "
                       "it: the ratio where these shared CPUs are the limit (three "
                       "machines would give each node its own; a row whose standalone "
                       "side waits on the disk or the client, not the CPUs, can beat "
                       "it); and "
                       "`writer_cpu_vs_standalone`, the writer's CPU per op over the "
                       "standalone server's (issue 29's target: at most 1.5; in the "
                       "forwarded row the node posted to, which forwards). The stream "
                       "row gives the same in microseconds per entry. The code before "
                       "writers sent one call per bookie per turn and non-writers "
                       "coalesced forwarded adds (32e0afe), run with the same command "
                       "an hour before the run below (14:19 UTC): adds "
                       "0.32 / 0.55 / 0.76 at 1 / 16 / 64, forwarded 0.29, 1 MiB batches "
                       "0.28 / 0.27, the stream 0.17 (13,003 entries/s), re-replication "
                       "0.52; the writer's CPU over standalone's 2.16 / 1.47 / 1.18 for "
                       "adds, 3.13 / 2.76 for batches."),
    "scaling": Section("Scaling: ledgers, entry size, data size",
                       "Through the engine: 16 writer threads round-robin over N ledgers; "
                       "16 writer threads at entry sizes 100 B to 1 MiB; replay time against "
                       "bytes in "
                       "the journal; forced major GC time against bytes stored; a bookie "
                       "holding N idle ledgers: idle checkpoint, worst add across "
                       "checkpoints, idle GC run, 1,000 deletions with a full read cache."),
    "listing": Section("Ledger listing (keyset pages of 100)",
                       "One page of `GET /api/v1/ledgers` as the engine answers it "
                       "(`LedgerTable.page`, which `Bookie.list_ledgers` pages), median of "
                       "21, at the start, middle and end of a million ledgers, against the "
                       "first page in the same run; then a page filtered by state (one "
                       "ledger in 2 matches) and by a metadata pair one ledger in 1,000 "
                       "has, which looks at `ledgers_looked_at_max` ledgers at most and so "
                       "may answer a short page. The console's ledger list asks for these "
                       "pages (docs/console.md)."),
}

CHARTS: dict[str, tuple[ChartSpec, ...]] = {
    "raw": (ChartSpec("raw", "Raw O_DIRECT + fdatasync writes", ("raw_odirect_fdatasync",),
                      x="block", compare=(), log_x=True),),
    "journal": (ChartSpec("journal", "Journal appends vs writers (dashed: raw 256 KiB limit)",
                          ("journal_append",), x="writers", panel="entry", log_x=True),),
    "engine": (ChartSpec("engine", "Engine adds vs writers (dashed: raw 256 KiB limit)",
                         ("engine_add",), x="writers", panel="entry", log_x=True),),
    "http": (ChartSpec("http", "HTTP 1 KiB adds vs concurrency (dashed: no-op endpoint)",
                       ("http_add_1KiB",), x="conc", log_x=True),
             ChartSpec("http_batch", "HTTP 1 MiB batch adds vs concurrency "
                       "(dashed: raw 1 MiB writes)", ("http_batch_1MiB",), x="conc",
                       log_x=True)),
    "redis": (
        ChartSpec("redis_single", "Single adds: ledgerd POST entries vs Redis XADD",
                  ("ledgerd_add", "redis_xadd"), x="conc", compare=(), panel="entry", log_x=True),
        ChartSpec("redis_batch", "Batches of 100: ledgerd batch add vs pipelined XADD",
                  ("ledgerd_batch_add", "redis_xadd_pipeline"), x="conc", compare=(),
                  panel="entry", log_x=True),
    ),
    "cluster": (ChartSpec("cluster", "Replicated 1 KiB adds vs concurrency "
                          "(dashed: standalone)", ("cluster_add_1KiB",), x="conc", log_x=True),),
    "scaling": (
        ChartSpec("scaling_ledgers", "Adds vs ledgers written (dashed: one ledger)",
                  ("round_robin_add",), x="ledgers", log_x=True),
        ChartSpec("scaling_entry_size", "Adds vs entry size (dashed: raw 1 MiB limit)",
                  ("entry_size_add",), x="entry", log_x=True),
        ChartSpec("scaling_replay", "Replay time vs journal bytes (dashed: raw read)",
                  ("journal_replay",), x="bytes", y="replay_s", compare=("raw_read_s",)),
        ChartSpec("scaling_gc", "Major GC time vs bytes stored (dashed: raw read)",
                  ("gc_major",), x="stored_bytes", y="run_s", compare=("raw_read_s",)),
    ),
}


# --- loading ----------------------------------------------------------------


def load_result(path: Path) -> Result:
    doc = json.loads(path.read_text())
    rows = [Row(**{k: v for k, v in r.items() if k in ROW_FIELDS}) for r in doc["rows"]]
    return Result(suite=path.stem, machine=doc.get("machine", {}),
                  command=doc.get("command", "?"), notes=doc.get("notes", {}), rows=rows)


def load_results(results_dir: Path) -> list[Result]:
    """Every result file, known suites first in run order, then the rest by name."""
    order = {name: i for i, name in enumerate(SECTIONS)}
    paths = sorted(results_dir.glob("*.json"), key=lambda p: (order.get(p.stem, 99), p.stem))
    return [load_result(p) for p in paths]


# --- formatting -------------------------------------------------------------


def format_size(n: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.3g} B"


def format_number(v: object) -> str:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return str(v)
    if isinstance(v, int):
        return f"{v:,}"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    return f"{v:.1f}" if abs(v) >= 10 else f"{v:.2f}"


def format_param(key: str, v: object) -> str:
    if key in SIZE_PARAMS and isinstance(v, int | float) and not isinstance(v, bool):
        return format_size(v)
    return format_number(v)


def _union(keys: Iterable[Iterable[str]]) -> list[str]:
    return list(dict.fromkeys(k for ks in keys for k in ks))


def markdown_table(rows: Sequence[Row]) -> str:
    """One table for rows of one name: params, value, limit, ratio, extras."""
    params = _union(r.params for r in rows)
    extras = sorted(_union(r.extra for r in rows),
                    key=lambda k: (EXTRA_ORDER.index(k) if k in EXTRA_ORDER else 99, k))
    has_limit = any(r.limit is not None for r in rows)
    head = [*params, rows[0].unit, *(["limit", "ratio"] if has_limit else []),
            *(extra_header(k) for k in extras)]
    lines = ["| " + " | ".join(head) + " |", "|" + " ---: |" * len(head)]
    for r in rows:
        cells = [format_param(k, r.params.get(k, "")) for k in params]
        cells.append(format_number(r.value))
        if has_limit:
            ratio = f"**{r.ratio:.2f}**" if r.ratio is not None else ""
            cells += [format_number(r.limit) if r.limit is not None else "", ratio]
        cells += [format_number(r.extra[k]) if k in r.extra else "" for k in extras]
        lines.append("| " + " | ".join(cells) + " |")
    limit_names = sorted({r.limit_name for r in rows if r.limit_name})
    notes = [f"\n\nLimit: {name}." for name in limit_names]
    return f"`{rows[0].name}`\n\n" + "\n".join(lines) + "".join(notes)


def extra_header(key: str) -> str:
    """``entries_per_s`` → ``entries/s``, ``MB_s`` → ``MB/s``, ``p99_ms`` → ``p99 ms``."""
    return key.replace("_per_s", "/s").replace("MB_s", "MB/s").replace("_", " ")


def rows_by_name(rows: Sequence[Row]) -> dict[str, list[Row]]:
    groups: dict[str, list[Row]] = {}
    for r in rows:
        groups.setdefault(r.name, []).append(r)
    return groups


# --- charts -----------------------------------------------------------------


def metric(row: Row, key: str) -> float | None:
    if key == "value":
        return row.value
    if key == "limit":
        return row.limit
    return row.extra.get(key)


def _series(rows: Sequence[Row], spec: ChartSpec) -> dict[str, list[Row]]:
    """Rows split into lines: the row name plus the params that vary."""
    varying = [k for k in _union(r.params for r in rows)
               if k not in (spec.x, spec.panel) and len({str(r.params.get(k)) for r in rows}) > 1]
    lines: dict[str, list[Row]] = {}
    for r in rows:
        label = " ".join([r.name, *(f"{k}={format_param(k, r.params.get(k))}" for k in varying)])
        lines.setdefault(label, []).append(r)
    for line in lines.values():
        line.sort(key=lambda r: float(r.params[spec.x]))
    return lines


def _line_label(series: str, key: str, spec: ChartSpec, first: Row) -> str:
    if key == spec.y:
        return series
    if key == "limit":
        return f"limit: {first.limit_name}"
    return f"{series} {key.removesuffix('_ms').removesuffix('_s')}"


def _plot_lines(ax: Axes, spec: ChartSpec, rows: Sequence[Row], keys: tuple[str, ...],
                styles: tuple[str, ...]) -> None:
    xs_seen: set[float] = set()
    for index, (series, line) in enumerate(_series(rows, spec).items()):
        xs = [float(r.params[spec.x]) for r in line]
        xs_seen.update(xs)
        for key, style in zip(keys, styles, strict=True):
            ys = [y for r in line if (y := metric(r, key)) is not None]
            if len(ys) != len(line):
                continue
            ax.plot(xs, ys, style, color=f"C{index}", marker="o", markersize=3,
                    label=_line_label(series, key, spec, line[0]))
    _x_axis(ax, spec, sorted(xs_seen))
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=6)


def _x_axis(ax: Axes, spec: ChartSpec, xs: list[float]) -> None:
    """Ticks at the measured points, labelled like the tables (1 KiB, 64)."""
    if spec.log_x:
        ax.set_xscale("log")
    ax.set_xticks(xs, [format_param(spec.x, int(x) if x.is_integer() else x) for x in xs],
                  fontsize=7)
    ax.xaxis.set_minor_locator(NullLocator())


def _axis_labels(ax: Axes, spec: ChartSpec, y_label: str) -> None:
    ax.set_xlabel(spec.x.replace("_", " "))
    ax.set_ylabel(y_label)


def draw_chart(spec: ChartSpec, result: Result, path: Path) -> bool:
    """Write ``path`` (PNG); False when the result holds no rows for it."""
    rows = [r for r in result.rows if r.name in spec.names and spec.x in r.params]
    if not rows:
        return False
    panels = sorted({r.params.get(spec.panel) for r in rows}, key=str) if spec.panel else [None]
    with_latency = any("p99_ms" in r.extra for r in rows)
    nrows = 2 if with_latency else 1
    fig = Figure(figsize=(max(6.0, 4.4 * len(panels)), 3.0 * nrows + 0.9))
    axes = fig.subplots(nrows, len(panels), squeeze=False)
    unit = rows[0].unit if spec.y == "value" else spec.y.replace("_", " ")
    for col, panel in enumerate(panels):
        mine = [r for r in rows if spec.panel is None or r.params.get(spec.panel) == panel]
        top = axes[0][col]
        _plot_lines(top, spec, mine, (spec.y, *spec.compare), ("-", *("--",) * len(spec.compare)))
        _axis_labels(top, spec, unit)
        top.set_ylim(bottom=0)
        if spec.panel is not None:
            top.set_title(f"{spec.panel} {format_param(spec.panel, panel)}", fontsize=9)
        if with_latency:
            low = axes[1][col]
            _plot_lines(low, spec, mine, ("p50_ms", "p99_ms"), ("-", ":"))
            low.set_yscale("log")
            low.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
            low.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
            low.yaxis.set_minor_formatter(NullFormatter())
            _axis_labels(low, spec, "latency ms (solid p50, dotted p99)")
    fig.suptitle(spec.title, fontsize=10)
    fig.text(0.005, 0.005, result.caption, fontsize=6, ha="left", va="bottom", wrap=True)
    fig.tight_layout(rect=(0, 0.05, 1, 0.96))
    fig.savefig(path, dpi=100, format="png")
    return True


# --- the page ---------------------------------------------------------------

HEADER = """\
# Benchmarks

<!-- Generated by bench/report.py from bench/results/*.json: edit those, not this. -->

`make bench` (or `ledgerd bench [--duration S] [--only SUITE ...] [--quick] [--big]`,
both run `python -m bench`) runs every suite in one run, writes
`bench/results/<suite>.json` and regenerates this page and its charts in
`docs/benchmarks/`. `--only` reruns some suites and regenerates the page from the
JSON files present, so each section names the run (machine, date, command) that
produced it. Each figure stands next to a limit measured **in the same run on the
same device** (or next to Redis, the peer); the ratio column is ledgerd ÷ limit.
Timed tests assert nothing about speed; this page does the reporting.
`python -m bench.report` regenerates the page without measuring anything.
"""


# (row name, params it must have, what the ratio is, the target, the row's figure:
# None for its ratio, else the name of an extra)
_Target = tuple[str, dict[str, object], str, str, str | None]
_STREAM_TARGETS: tuple[_Target, ...] = (
    ("ledgerd_stream", {"conc": 16}, "16 streams x 16 in flight ÷ Redis `-c 16 -P 16`", "≥ 1",
     None),
    ("ledgerd_stream", {"conc": 1}, "1 stream x 16 in flight ÷ Redis `-c 1 -P 16`", "≥ 1",
     None),
    ("ledgerd_stream_floor", {"conc": 16}, "the machine's ceiling for them: the stream's "
     "floor (same server, no engine) ÷ Redis `-c 16 -P 16`", "≥ 1 for the target to be reachable",
     None),
    ("ledgerd_stream_floor", {"conc": 1}, "the stream's floor ÷ Redis `-c 1 -P 16`",
     "≥ 1 for the target to be reachable", None),
    ("ledgerd_stream_durable_floor", {"conc": 1}, "the durable floor (same server, no "
     "engine, one write + fdatasync per acks message) ÷ Redis `-c 1 -P 16`",
     "≥ 1 for the target to be reachable", None),
    ("ledgerd_stream_paced", {}, "stream ack p99 at half that rate ÷ 2 x raw group-commit p99",
     "≤ 1", None),
    ("ledgerd_stream_paced_floor", {}, "the floor's ack p99 at the same paced rate ÷ 2 x raw "
     "group-commit p99", "≤ 1 for the target to be reachable", None),
    ("ledgerd_http_batch_tail", {"entry": 1024}, "HTTP batch (100 x 1 KiB, 16 clients) "
     "p99 ÷ 5 x p50", "≤ 1", None),
    ("ledgerd_http_batch_tail", {"entry": 16384}, "HTTP batch (100 x 16 KiB, 16 clients) "
     "p99 ÷ 5 x p50", "≤ 1", None),
)
_ENGINE_TARGETS: tuple[_Target, ...] = (
    ("engine_vs_journal_adds", {"entry": 1024}, "engine adds (1 KiB, 64 writers) ÷ journal "
     "appends alone", "≥ 0.8", None),
    ("engine_vs_journal_adds", {"entry": 1024}, "engine add p99 ÷ the journal's", "≤ 2",
     "p99_ratio"),
)
_RECLAIM_TARGETS: tuple[_Target, ...] = (
    ("space_after_deleting_90pct", {"ledgers": 10_000, "gc": "reclaim"},
     "share of entry logs + index given back after deleting 90% of 10,000 ledgers", "≥ 0.8",
     "back_fraction"),
    ("space_after_deleting_90pct", {"ledgers": 100_000, "gc": "reclaim"},
     "the same with 100,000 ledgers", "≥ 0.8", "back_fraction"),
)
_IDLE_TARGETS: tuple[_Target, ...] = (
    ("cluster_idle_node_cpu", {"ledgers": 100_000, "code": "now"},
     "busiest node's CPU, idle, 100,000 ledgers (% of a core)", "≤ 2", "value"),
    ("cluster_idle_etcd_cpu", {"ledgers": 100_000, "code": "now"},
     "etcd's CPU, idle, 100,000 ledgers (% of a core)", "≤ 5", "value"),
    ("cluster_rss_per_ledger", {"ledgers": 100_000, "code": "now"},
     "RSS a node adds per ledger, 100,000 ledgers (bytes)", "≤ 1024", "value"),
    ("cluster_rss_per_ledger_marginal", {"from": 1000, "ledgers": 100_000, "code": "now"},
     "RSS a node adds per ledger from 1,000 to 100,000 ledgers (bytes)", "≤ 1024", "value"),
    ("cluster_restart_to_ready", {"ledgers": 100_000, "code": "now"},
     "a node's restart to ready, 100,000 ledgers (s)", "≤ 10", "value"),
)
_CREATE_TARGETS: tuple[_Target, ...] = (
    ("http_create", {"conc": 32}, "creates/s over HTTP, 32 clients", "≥ 2000", "value"),
    ("cluster_create", {"conc": 32, "nodes": 3},
     "creates/s on a 3-node cluster (nodes, etcd and client on these 2 CPUs), 32 clients",
     "≥ 2000", "value"),
)
_PACK_TARGETS: tuple[_Target, ...] = (
    ("pack_objects_per_gib", {}, "S3 objects per GiB, a million 1 KiB ledgers packed", "≤ 64",
     "value"),
    ("pack_read_gets_per_gib", {}, "GETs per GiB reading them back", "≤ 100", "value"),
    ("large_requests_per_gib", {}, "requests per GiB offloading a 1 GiB ledger (32 MiB parts)",
     "≤ 46", "value"),
    ("large_read_gets_per_gib", {}, "GETs per GiB reading it back", "≤ 100", "value"),
)
_CLUSTER_PACK_TARGETS: tuple[_Target, ...] = (
    ("cluster_pack_objects_per_gib", {},
     "S3 objects per GiB, a 3-node cluster packing 1 GiB of 1 MiB ledgers", "≤ 64", "value"),
    ("cluster_pack_read_gets_per_gib", {}, "GETs per GiB reading them back", "≤ 100", "value"),
)
# (suite, which issue, what the run was, its section, its targets)
_HEADLINES: tuple[tuple[str, str, str, str, tuple[_Target, ...]], ...] = (
    ("engine", "13", "same device, alternating rounds", "Engine (journal + write cache + "
     "entry logs + RocksDB)", _ENGINE_TARGETS),
    ("peers", "18", "native clients on both sides", "ledgerd vs Redis, native clients",
     _STREAM_TARGETS),
    ("reclaim", "28 (item 3)", "one forced GC run", "Space given back by deleting ledgers",
     _RECLAIM_TARGETS),
    ("cluster_idle", "28 (item 1)", "3 nodes and etcd on loopback", "An idle cluster "
     "(issue 28, item 1)", _IDLE_TARGETS),
    ("create", "28", "HTTP, asyncio client", "Ledger creation vs a write (32 concurrent "
     "clients)", _CREATE_TARGETS),
    ("pack", "28 (item 5)", "radosgw on loopback", "A million small ledgers in S3 (issue 28, "
     "item 5)", _PACK_TARGETS),
    ("cluster_pack", "28 (item 5)", "3 nodes, etcd and radosgw on loopback",
     "Packs in cluster mode (issue 28, item 5)", _CLUSTER_PACK_TARGETS),
)


def headline(results: Sequence[Result]) -> str:
    """The issues' targets, from the suites that measure them, when they ran."""
    return "".join(_headline(results, *spec) for spec in _HEADLINES)


def _headline(results: Sequence[Result], suite: str, issue: str, how: str, section: str,
              targets: tuple[_Target, ...]) -> str:
    result = next((r for r in results if r.suite == suite), None)
    if result is None:
        return ""
    lines = []
    for name, params, text, target, field in targets:
        row = next((r for r in result.rows if r.name == name
                    and all(r.params.get(k) == v for k, v in params.items())), None)
        value = (None if row is None else row.ratio if field is None
                 else row.value if field == "value" else row.extra.get(field))
        if value is not None:
            lines.append(f"- {text}: **{value:.3f}** (target {target}: "
                         f"{'met' if _meets(value, target) else 'not met'})")
    if not lines:
        return ""
    notes = f" {result.notes['machine']}" if result.notes.get("machine") else ""
    return (f"\nTargets of issue {issue}, {how} (run of {result.machine.get('date')}; "
            f"section \"{section}\").{notes}\n\n" + "\n".join(lines) + "\n")


def _meets(value: float, target: str) -> bool:
    """Whether ``value`` meets a target written "≥ 0.8" or "≤ 2 …": exactly, so
    that 0.796 is not read as a rounded 0.80 that meets ≥ 0.8."""
    relation, bound = target.split()[:2]
    return value >= float(bound) if relation == "≥" else value <= float(bound)


def render_section(result: Result, charts_dir: Path, doc_dir: Path) -> tuple[str, list[Path]]:
    section = SECTIONS.get(result.suite, Section(result.suite, ""))
    parts = [f"## {section.title}", section.about] if section.about else [f"## {section.title}"]
    parts.append(f"_Run: {result.run_text}; command: `{result.command}`._")
    if "--quick" in result.command.split():
        parts.append("> Quick smoke run: short points and small sizes, to check the code "
                     "runs; not figures to compare. Rerun without `--quick` for those.")
    notes = {"scratch": result.machine.get("scratch"), **result.notes}
    parts += [f"- {key}: {text}" for key, text in notes.items() if text]
    charts: list[Path] = []
    for spec in CHARTS.get(result.suite, ()):
        path = charts_dir / f"{spec.stem}.png"
        if draw_chart(spec, result, path):
            charts.append(path)
            parts.append(f"![{spec.title}]({os.path.relpath(path, doc_dir)})")
    parts += [markdown_table(rows) for rows in rows_by_name(result.rows).values()]
    return "\n\n".join(parts) + "\n", charts


def write_report(results_dir: Path = RESULTS_DIR, doc_path: Path = DOC_PATH,
                 charts_dir: Path = CHARTS_DIR) -> list[Path]:
    """Write the markdown page and its charts; returns every path written."""
    results = load_results(results_dir)
    charts_dir.mkdir(parents=True, exist_ok=True)
    doc_path.parent.mkdir(parents=True, exist_ok=True)
    sections, written = [], [doc_path]
    for result in results:
        text, charts = render_section(result, charts_dir, doc_path.parent)
        sections.append(text)
        written += charts
    if not results:
        sections.append(f"No results yet in `{results_dir}`: run `make bench`.\n")
    doc_path.write_text(HEADER + headline(results) + "\n" + "\n".join(sections))
    return written


def main() -> None:
    for path in write_report():
        print(path)


if __name__ == "__main__":
    main()
