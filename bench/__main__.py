"""``python -m bench [--quick]``: run every benchmark, print tables, write JSON.

Each figure is printed next to a limit measured in the same run on the same
device (raw O_DIRECT + fdatasync writes, raw sequential reads)."""

from __future__ import annotations

import argparse
import sys

from ledger.settings import MiB

from . import (
    compaction_bench,
    engine_bench,
    http_bench,
    journal_bench,
    offload_bench,
    raw_device,
    spark_bench,
)
from ._harness import print_table, scratch_device, scratch_dir, write_json

SUITES = ["raw", "journal", "engine", "replay", "http", "compaction", "offload", "spark"]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument("--duration", type=float, default=3.0, help="seconds per data point")
    parser.add_argument("--only", choices=SUITES, action="append")
    args = parser.parse_args(argv)
    only = set(args.only or SUITES)
    command = "python -m bench " + " ".join(argv if argv is not None else sys.argv[1:])
    with scratch_device(1024 * MiB) as device:
        raw = raw_device.run(device, total_bytes=256 * MiB, region_bytes=512 * MiB)
        print_table(f"raw device limit ({device})", raw)
        write_json("raw_device", raw, command)
        limit = next(r.value for r in raw if r.params["block"] == 262144)
        limit_1mib = next(r.value for r in raw if r.params["block"] == 1048576)
        if "journal" in only:
            rows = journal_bench.run(device, raw_limit_mb_s=limit, duration_s=args.duration)
            print_table("journal appends", rows)
            write_json("journal", rows, command)
    if "engine" in only:
        with scratch_device(1024 * MiB) as device, scratch_dir() as data:
            rows = engine_bench.run(data, device, raw_limit_mb_s=limit,
                                    duration_s=args.duration)
            print_table("engine", rows)
            write_json("engine", rows, command)
    if "http" in only:
        with scratch_device(1024 * MiB) as device, scratch_dir() as data:
            rows = http_bench.run(data, device, raw_1mib_mb_s=limit_1mib,
                                  duration_s=args.duration)
            print_table("HTTP (uvicorn on loopback)", rows)
            write_json("http", rows, command)
    if "compaction" in only:
        with scratch_device(1024 * MiB) as device, scratch_dir() as data:
            rows = compaction_bench.run(data, device, duration_s=args.duration)
            print_table("compaction", rows)
            write_json("compaction", rows, command)
    if "spark" in only:
        with scratch_dir() as data:
            rows = spark_bench.run(data)
            print_table("Spark scan of offloaded ledgers (local S3)", rows)
            write_json("spark", rows, command)
    if "offload" in only:
        with scratch_dir() as work:
            rows = offload_bench.run(work)
            print_table("offload to S3 (radosgw on loopback)", rows)
            write_json("offload", rows, command)
    if "replay" in only:
        with scratch_device(1024 * MiB) as device, scratch_dir() as data:
            rows = engine_bench.replay(data, device, total_bytes=128 * MiB)
            print_table("recovery replay", rows)
            write_json("replay", rows, command)


if __name__ == "__main__":
    main()
