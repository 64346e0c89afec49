"""``python -m bench [--duration S] [--only SUITE ...] [--quick] [--big]``: run the
benchmarks, print tables, write ``bench/results/<suite>.json`` and regenerate
``docs/benchmarks.md`` (with charts) from every JSON file present.

Each figure is printed next to a limit measured in the same run on the same
device (raw O_DIRECT + fdatasync writes, raw sequential reads) or next to its
peer (Redis streams with ``appendfsync always``).  The raw device limit is
measured first in every run, whatever ``--only`` says, because the other suites
divide by it.  A suite is one entry of :data:`SUITES`: a name, a title and a
function from the run's options to rows.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass

from common.units import MiB

from . import (
    cluster_bench,
    compaction_bench,
    create_bench,
    engine_bench,
    http_bench,
    idle_bench,
    journal_bench,
    listing_bench,
    million_bench,
    offload_bench,
    pack_bench,
    peer_bench,
    raw_device,
    reclaim_bench,
    redis_bench,
    report,
    scaling_bench,
    server_bench,
    spark_bench,
    spark_stream_bench,
    split_bench,
)
from ._harness import Row, print_table, scratch_device, scratch_dir, write_json

DEVICE_BYTES = 1024 * MiB


@dataclass(frozen=True)
class RunOptions:
    duration_s: float
    quick: bool
    big: bool
    command: str
    raw_rows: list[Row]

    def raw_write_mb_s(self, block_bytes: int) -> float:
        return next(r.value for r in self.raw_rows if r.params["block"] == block_bytes)


@dataclass(frozen=True)
class Suite:
    title: str
    run: Callable[[RunOptions], list[Row]]
    notes: Callable[[], dict[str, str]] | None = None  # free text for the report


def _raw(opts: RunOptions) -> list[Row]:
    return opts.raw_rows


def _journal(opts: RunOptions) -> list[Row]:
    with scratch_device(DEVICE_BYTES) as device:
        return journal_bench.run(device, raw_limit_mb_s=opts.raw_write_mb_s(256 * 1024),
                                 duration_s=opts.duration_s,
                                 before=os.environ.get("LEDGERD_BENCH_BEFORE"))


def _engine(opts: RunOptions) -> list[Row]:
    with scratch_device(DEVICE_BYTES) as device, scratch_dir() as data:
        return engine_bench.run(data, device, raw_limit_mb_s=opts.raw_write_mb_s(256 * 1024),
                                duration_s=opts.duration_s)


def _replay(opts: RunOptions) -> list[Row]:
    with scratch_device(DEVICE_BYTES) as device, scratch_dir() as data:
        return engine_bench.replay(data, device, total_bytes=(32 if opts.quick else 128) * MiB)


def _http(opts: RunOptions) -> list[Row]:
    with scratch_device(DEVICE_BYTES) as device, scratch_device(
            http_bench.RAW_REGION_BYTES) as raw_device, scratch_dir() as data:
        return http_bench.run(data, device, raw_device, duration_s=opts.duration_s)


def _create(opts: RunOptions) -> list[Row]:
    with scratch_device(DEVICE_BYTES) as device, scratch_device(DEVICE_BYTES) as engine_device, \
            scratch_dir() as data, scratch_dir() as engine_data, scratch_dir() as cluster:
        return create_bench.run(data, device, engine_data, engine_device, cluster,
                                duration_s=opts.duration_s)


def _compaction(opts: RunOptions) -> list[Row]:
    with scratch_device(DEVICE_BYTES) as device, scratch_dir() as data:
        return compaction_bench.run(data, device, duration_s=opts.duration_s,
                                    total_bytes=(64 if opts.quick else 256) * MiB)


def _cluster_idle(opts: RunOptions) -> list[Row]:
    return idle_bench.run((1000,) if opts.quick else (1000, 10_000, 100_000),
                          before=os.environ.get("LEDGERD_BENCH_BEFORE"))


def _reclaim(opts: RunOptions) -> list[Row]:
    with scratch_dir() as work:
        return reclaim_bench.run(work, ledger_counts=(10_000,) if opts.quick
                                 else (10_000, 100_000))


def _offload(opts: RunOptions) -> list[Row]:
    with scratch_dir() as work:
        return offload_bench.run(work, total_bytes=(64 if opts.quick else 256) * MiB)


def _pack(opts: RunOptions) -> list[Row]:
    with scratch_dir() as work:
        return pack_bench.run(work, ledger_count=100_000 if opts.quick else 1_000_000,
                              real_ledger_count=10_000 if opts.quick else 100_000)


def _cluster_pack(opts: RunOptions) -> list[Row]:
    with scratch_dir() as work:
        return pack_bench.run_cluster(work, ledger_count=128 if opts.quick else 1024)


def _spark(opts: RunOptions) -> list[Row]:
    with scratch_dir() as data:
        return spark_bench.run(data, ledger_bytes=(16 if opts.quick else 64) * MiB)


def _spark_stream(opts: RunOptions) -> list[Row]:
    with scratch_dir() as data:
        return spark_stream_bench.run(data, ledger_bytes=(8 if opts.quick else 32) * MiB,
                                      latency_s=10.0 if opts.quick else 30.0)


def _redis(opts: RunOptions) -> list[Row]:
    return redis_bench.run(duration_s=opts.duration_s, quick=opts.quick)


def _peers(opts: RunOptions) -> list[Row]:
    return peer_bench.run(duration_s=opts.duration_s)


def _server(opts: RunOptions) -> list[Row]:
    return server_bench.run(duration_s=opts.duration_s, quick=opts.quick)


def _split(opts: RunOptions) -> list[Row]:
    return split_bench.run(duration_s=max(opts.duration_s, 3.0))


def _cluster(opts: RunOptions) -> list[Row]:
    from tools.local_etcd import LocalEtcd

    with scratch_dir() as work, LocalEtcd(work / "etcd") as etcd:
        return cluster_bench.run(work, etcd.metadata_url("bench"), duration_s=opts.duration_s,
                                 quick=opts.quick)


def _million(opts: RunOptions) -> list[Row]:
    standalone = (1000, 10_000) if opts.quick else (1000, 10_000, 100_000, 1_000_000)
    cluster = (1000,) if opts.quick else (1000, 10_000, 100_000, 1_000_000)
    return million_bench.run(standalone, cluster)


def _scaling(opts: RunOptions) -> list[Row]:
    return scaling_bench.run(duration_s=opts.duration_s, raw_1mib_mb_s=opts.raw_write_mb_s(MiB),
                             scale=scaling_bench.Scale.pick(quick=opts.quick, big=opts.big))


def _listing(opts: RunOptions) -> list[Row]:
    return listing_bench.run(quick=opts.quick)


SUITES: dict[str, Suite] = {
    "raw": Suite("raw device limit (O_DIRECT + fdatasync)", _raw),
    "journal": Suite("journal appends", _journal, journal_bench.describe),
    "engine": Suite("engine", _engine),
    "replay": Suite("recovery replay", _replay),
    "http": Suite("HTTP (uvicorn on loopback)", _http),
    "create": Suite("ledger creation vs a write", _create, create_bench.describe),
    "compaction": Suite("compaction", _compaction),
    "cluster_idle": Suite("an idle 3-node cluster holding N ledgers", _cluster_idle,
                          idle_bench.describe),
    "reclaim": Suite("space given back by deleting 90% of small ledgers", _reclaim),
    "offload": Suite("offload to S3 (radosgw on loopback)", _offload, offload_bench.describe),
    "pack": Suite("a million 1 KiB ledgers packed in S3, and a 1 GiB ledger alone "
                  "(radosgw on loopback)", _pack, pack_bench.describe),
    "cluster_pack": Suite("a 3-node cluster packing 1 GiB of 1 MiB ledgers in S3 "
                          "(radosgw, etcd on loopback)", _cluster_pack),
    "spark": Suite("Spark scan of offloaded ledgers (local S3)", _spark, spark_bench.describe),
    "spark_stream": Suite("Spark over live ledgers: stream and batch through a node",
                          _spark_stream, spark_stream_bench.describe),
    "redis": Suite("ledgerd over HTTP vs Redis streams, Python clients", _redis,
                   redis_bench.describe),
    "peers": Suite("ledgerd vs Redis, native clients (wrk, Node.js ws, redis-benchmark)",
                   _peers, peer_bench.describe),
    "server": Suite("HTTP server A/B: uvicorn vs granian, all CPUs vs one (wrk, Node.js ws)",
                    _server,
                    server_bench.describe),
    "scaling": Suite("scaling: ledgers, entry size, journal bytes, stored bytes", _scaling),
    "split": Suite("append streams on two processes (a WebSocket front, the engine) vs one",
                   _split),
    "cluster": Suite("cluster mode: replicated adds, takeover, re-replication", _cluster,
                     cluster_bench.describe),
    "listing": Suite("ledger listing at a million ledgers", _listing),
    "million": Suite("a node holding 1,000 to 1,000,000 ledgers, both modes (issue 28)",
                     _million, million_bench.describe),
}


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument("--duration", type=float, default=None,
                        help="seconds per data point (default 3, or 0.5 with --quick)")
    parser.add_argument("--only", choices=list(SUITES), action="append",
                        help="run only this suite (repeatable); the report keeps the others")
    parser.add_argument("--quick", action="store_true",
                        help="short points and small data sizes (a smoke run, ~3 min)")
    parser.add_argument("--big", action="store_true",
                        help="add the large data sizes to the scaling suite (GiB of data)")
    parser.add_argument("--no-report", action="store_true",
                        help="write JSON only; do not regenerate docs/benchmarks.md")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    duration_s = args.duration if args.duration is not None else (0.5 if args.quick else 3.0)
    command = shlex.join(["python", "-m", "bench", *argv])
    with scratch_device(DEVICE_BYTES) as device:
        raw_rows = raw_device.run(device, total_bytes=(32 if args.quick else 256) * MiB,
                                  region_bytes=512 * MiB)
    opts = RunOptions(duration_s=duration_s, quick=args.quick, big=args.big, command=command,
                      raw_rows=raw_rows)
    # raw is measured in every run (the others divide by it), so its JSON is too
    failed = [name for name in dict.fromkeys(["raw", *(args.only or SUITES)])
              if not run_suite(name, opts)]
    if not args.no_report:
        written = report.write_report()
        print(f"\nreport: {', '.join(str(p) for p in written)}")
    if failed:
        sys.exit(f"failed suites (their previous results, if any, were kept): {failed}")


def run_suite(name: str, opts: RunOptions) -> bool:
    """Run, print and save one suite; a failure is reported and the run goes on."""
    suite = SUITES[name]
    try:
        rows = suite.run(opts)
    except Exception:
        traceback.print_exc()
        print(f"\n== {suite.title}: FAILED (see the traceback above) ==", file=sys.stderr)
        return False
    print_table(suite.title, rows)
    write_json(name, rows, opts.command, suite.notes() if suite.notes else None)
    return True


if __name__ == "__main__":
    main()
