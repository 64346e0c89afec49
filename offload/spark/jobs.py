"""Pipeline jobs on Spark over offloaded ledgers: export to Parquet, verify integrity.

Both are plain functions (the CLI's ``ledgerd export`` / ``ledgerd verify``
call them) taking a SparkSession from :func:`spark_session` and the
``format("ledgerd")`` options as a mapping (DESIGN.md §9 names).

Export writers (docs/spark.md):

- a local or cluster file system path (``/data/out``, ``file://``,
  ``hdfs://``): Spark's own Parquet writer and commit protocol;
- ``s3://bucket/prefix``: the wheel has no s3a, so each task reads one planned
  partition with the source's own reader (Arrow batches straight from the
  segment bytes, no pandas), writes a local Parquet file with pyarrow and
  uploads it with boto3 (through
  :class:`offload.S3ObjectStore`, retries included) as
  ``part-{partition:05d}-{job}.parquet``; a retried task overwrites its own
  key, and ``_SUCCESS`` (a JSON manifest of the parts) is written last, so a
  reader that requires it never sees a half-written export.

Verify reads every segment object of the selected ledgers in Spark tasks,
recomputes each frame's CRC32C and checks entry ids, entry counts, segment
lengths and index points against the index, then sums per ledger and compares
with the ledger facts the index records (last entry id, length in bytes).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pyarrow.parquet as pq

from common.errors import CorruptRecord, InvalidSetting

from .._errors import ObjectNotFound, RemoteStorageError
from .._format import SegmentIndex
from . import (
    ARROW_SCHEMA,
    Connection,
    LedgerdDataSource,
    LedgerdPartition,
    LedgerdReader,
    OffloadedLedger,
    PlannedRange,
    Span,
    cut,
    frames_of,
    parse_options,
    read_range,
    store_for,
    survey_offloaded,
)

log = logging.getLogger("ledgerd.offload.spark.jobs")

_VERIFY_READ_BYTES = 8 * 1024 * 1024
_PROBLEMS_PER_SEGMENT_MAX = 10


def spark_session(master: str = "local[*]", *, app_name: str = "ledgerd",
                  conf: Mapping[str, str] | None = None) -> Any:
    """A SparkSession with the ledgerd source registered and filter pushdown on."""
    if master.startswith("local"):
        # Loopback only, and workers run this interpreter (it has ledgerd installed).
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.master(master).appName(app_name)
               .config("spark.sql.python.filterPushdown.enabled", "true"))
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.dataSource.register(LedgerdDataSource)
    return spark


@contextmanager
def stage_progress(spark: Any, report: Callable[[int, int], None],
                   interval_s: float = 0.25) -> Iterator[None]:
    """Calls ``report(done_tasks, total_tasks)`` of the active stages until the block ends."""
    tracker = spark.sparkContext.statusTracker()
    stop = threading.Event()

    def poll() -> None:
        while not stop.wait(interval_s):
            infos = [tracker.getStageInfo(s) for s in tracker.getActiveStageIds()]
            done = sum(i.numCompletedTasks for i in infos if i is not None)
            total = sum(i.numTasks for i in infos if i is not None)
            if total:
                report(done, total)

    thread = threading.Thread(target=poll, name="ledgerd-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


# --- export -------------------------------------------------------------------


@dataclass(frozen=True)
class ExportResult:
    output: str
    ledgers: int
    rows: int
    payload_bytes: int
    files: tuple[str, ...] = ()


def _selected(options: Mapping[str, str]) -> list[OffloadedLedger]:
    read = parse_options(options)
    ledgers, incomplete = survey_offloaded(store_for(read.connection), read)
    if incomplete:
        log.warning("incomplete offloads left out", extra={"ledgers": incomplete})
    return ledgers


def export(spark: Any, options: Mapping[str, str], output: str, *,
           overwrite: bool = False) -> ExportResult:
    """Write the selected ledgers' rows to Parquet at ``output`` (a path or s3://)."""
    ledgers = _selected(options)
    rows = sum(ledger.entry_count for ledger in ledgers)
    payload_bytes = sum(ledger.facts.length_bytes for ledger in ledgers)
    if output.startswith("s3://"):
        files = _export_to_s3(spark, options, output, overwrite=overwrite)
    else:
        df = spark.read.format("ledgerd").options(**options).load()
        df.write.mode("overwrite" if overwrite else "errorifexists").parquet(output)
        files = ()
    result = ExportResult(output, len(ledgers), rows, payload_bytes, files)
    log.info("export done", extra={"output": output, "ledgers": result.ledgers,
                                   "rows": rows, "payload_bytes": payload_bytes})
    return result


def _split_s3_url(url: str) -> tuple[str, str]:
    bucket, _, prefix = url.removeprefix("s3://").partition("/")
    if not bucket:
        raise InvalidSetting(f"invalid export output {url!r}: want s3://bucket/prefix")
    return bucket, prefix.strip("/")


def _export_to_s3(spark: Any, options: Mapping[str, str], url: str, *,
                  overwrite: bool) -> tuple[str, ...]:
    read = parse_options(options)
    source = read.connection
    bucket, prefix = _split_s3_url(url)
    # Same endpoint and credentials as the source; the prefix goes in the keys.
    target = Connection(bucket=bucket, endpoint_url=source.endpoint_url, region=source.region,
                        access_key=source.access_key, secret_key=source.secret_key)
    store = store_for(target)
    base = f"{prefix}/" if prefix else ""
    existing = [info.key for info in store.list_objects(base)]
    if existing and not overwrite:
        raise InvalidSetting(f"export output {url!r} is not empty ({len(existing)} objects); "
                             "pass overwrite to replace it")
    store.delete_objects(existing)
    job_id = uuid.uuid4().hex[:12]
    planned = [p.planned for p in LedgerdReader(read).partitions()
               if isinstance(p, LedgerdPartition)]
    written: list[tuple[str, int, int]] = []
    if planned:
        written = (spark.sparkContext.parallelize(list(enumerate(planned)), len(planned))
                   .map(lambda task: _write_part(source, target, f"{base}part-{task[0]:05d}-"
                                                 f"{job_id}.parquet", task[1]))
                   .collect())
    parts = sorted(w for w in written if w[1] > 0)
    manifest = {"job": job_id, "parts": [{"key": k, "rows": n, "bytes": b}
                                         for k, n, b in parts]}
    store.put_object(f"{base}_SUCCESS", json.dumps(manifest, indent=1).encode())
    return tuple(k for k, _, _ in parts)


def _write_part(source: Connection, target: Connection, key: str,
                part: PlannedRange) -> tuple[str, int, int]:
    """Runs in a task: one partition's rows to a local Parquet file, then to S3."""
    rows = 0
    with tempfile.NamedTemporaryFile(suffix=".parquet") as local:
        with pq.ParquetWriter(local.name, ARROW_SCHEMA) as writer:
            for batch in read_range(store_for(source), part):
                writer.write_batch(batch)
                rows += batch.num_rows
        data = local.read()
    if rows:
        store_for(target).put_object(key, data)
    return key, rows, len(data)


# --- verify -------------------------------------------------------------------


@dataclass(frozen=True)
class SegmentCheck:
    ledger_id: int
    key: str
    entries: int
    payload_bytes: int
    problems: tuple[str, ...]


@dataclass
class VerifyReport:
    ledgers: int = 0
    segments: int = 0
    entries: int = 0
    payload_bytes: int = 0
    problems: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.problems


def check_segment(connection: Connection, ledger_id: int, key: str,
                  index: SegmentIndex) -> SegmentCheck:
    """Read one whole segment object and check it against its index (runs in a task)."""
    store = store_for(connection)
    problems: list[str] = []
    try:
        size = store.head_object(key).size_bytes
    except (RemoteStorageError, ObjectNotFound) as exc:
        return SegmentCheck(ledger_id, key, 0, 0, (f"ledger {ledger_id}: {exc}",))
    if size != index.segment_length_bytes:
        problems.append(f"ledger {ledger_id}: object {key!r} is {size} bytes, index says "
                        f"{index.segment_length_bytes}")
    entries = payload_bytes = 0
    whole = Span(0, index.segment_length_bytes, index.first_entry_id)
    for span in (cut(index, whole, _VERIFY_READ_BYTES) if index.entry_count else []):
        try:
            data = store.get_range(key, span.start, span.end)
            for _, payload, _ in frames_of(ledger_id, key, span, data):
                entries += 1
                payload_bytes += len(payload)
        except (CorruptRecord, RemoteStorageError) as exc:
            # Keep going: one report lists every damaged span of the segment.
            problems.append(str(exc))
            if len(problems) >= _PROBLEMS_PER_SEGMENT_MAX:
                break
    if not problems and entries != index.entry_count:
        problems.append(f"ledger {ledger_id}: object {key!r} holds {entries} entries, index "
                        f"says {index.entry_count}")
    return SegmentCheck(ledger_id, key, entries, payload_bytes, tuple(problems))


def _ledger_problems(ledger: OffloadedLedger, checks: list[SegmentCheck]) -> list[str]:
    facts = ledger.facts
    entries = sum(c.entries for c in checks)
    payload_bytes = sum(c.payload_bytes for c in checks)
    if any(c.problems for c in checks):
        return []  # the segment problems already say what is wrong
    found: list[str] = []
    if entries != facts.last_entry_id + 1:
        found.append(f"ledger {ledger.ledger_id}: {entries} entries read, ledger metadata "
                     f"says last entry {facts.last_entry_id}")
    if payload_bytes != facts.length_bytes:
        found.append(f"ledger {ledger.ledger_id}: {payload_bytes} payload bytes read, ledger "
                     f"metadata says {facts.length_bytes}")
    return found


def verify(spark: Any, options: Mapping[str, str]) -> VerifyReport:
    """Check every selected ledger's segments in Spark tasks; see the module docstring."""
    started = time.monotonic()
    read = parse_options(options)
    ledgers, incomplete = survey_offloaded(store_for(read.connection), read)
    connection = read.connection
    tasks = [(ledger.ledger_id, segment.key, segment.index)
             for ledger in ledgers for segment in ledger.segments]
    checks: list[SegmentCheck] = []
    if tasks:
        checks = (spark.sparkContext.parallelize(tasks, len(tasks))
                  .map(lambda task: check_segment(connection, *task)).collect())
    report = VerifyReport(ledgers=len(ledgers), segments=len(checks),
                          entries=sum(c.entries for c in checks),
                          payload_bytes=sum(c.payload_bytes for c in checks),
                          problems=[f"incomplete offload: {text}" for text in incomplete])
    for ledger in ledgers:
        mine = [c for c in checks if c.ledger_id == ledger.ledger_id]
        report.problems.extend(p for c in mine for p in c.problems)
        report.problems.extend(_ledger_problems(ledger, mine))
    report.elapsed_s = time.monotonic() - started
    log.info("verify done", extra={"ledgers": report.ledgers, "segments": report.segments,
                                   "entries": report.entries, "problems": len(report.problems)})
    return report
