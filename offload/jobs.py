"""Pipeline jobs on Spark over offloaded ledgers: export to Parquet, verify integrity.

Both are plain functions (the CLI's ``ledgerd export`` / ``ledgerd verify``
call them) taking a SparkSession from :func:`spark_session` and the
``format("ledgerd")`` options as a mapping (DESIGN.md §9 names).

Export writers (docs/spark.md):

- a local or cluster file system path (``/data/out``, ``file://``,
  ``hdfs://``): Spark's own Parquet writer and commit protocol;
- ``s3://bucket/prefix``: the wheel has no s3a, so each task writes its rows
  to a local Parquet file with pyarrow and uploads it with boto3 (through
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

import pyarrow as pa
import pyarrow.parquet as pq

from ledger.errors import InvalidSetting

from ._errors import RemoteStorageError
from ._format import SegmentIndex
from .spark import (
    Connection,
    LedgerdDataSource,
    OffloadedLedger,
    SegmentCorrupt,
    Span,
    cut,
    frames_of,
    parse_options,
    store_for,
    survey_offloaded,
)

log = logging.getLogger("ledgerd.offload.jobs")

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
    # The DataFrame serves this one query, so pruning by pushed filters is safe.
    df = spark.read.format("ledgerd").options(**options).option("pushdown", "always").load()
    rows = sum(ledger.entry_count for ledger in ledgers)
    payload_bytes = sum(ledger.facts.length_bytes for ledger in ledgers)
    if output.startswith("s3://"):
        files = _export_to_s3(df, parse_options(options).connection, output,
                              overwrite=overwrite)
    else:
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


def _export_to_s3(df: Any, source: Connection, url: str, *, overwrite: bool) -> tuple[str, ...]:
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
    written = df.mapInArrow(_part_writer(target, base, job_id),
                            "key string, rows long, bytes long").collect()
    parts = sorted((r.key, r.rows, r.bytes) for r in written if r.rows > 0)
    manifest = {"job": job_id, "parts": [{"key": k, "rows": n, "bytes": b}
                                         for k, n, b in parts]}
    store.put_object(f"{base}_SUCCESS", json.dumps(manifest, indent=1).encode())
    return tuple(k for k, _, _ in parts)


def _part_writer(target: Connection, base: str,
                 job_id: str) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    def write_part(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        context = TaskContext.get()
        partition = context.partitionId() if context is not None else 0
        key = f"{base}part-{partition:05d}-{job_id}.parquet"
        rows = 0
        with tempfile.NamedTemporaryFile(suffix=".parquet") as local:
            writer: pq.ParquetWriter | None = None
            for batch in batches:
                writer = writer or pq.ParquetWriter(local.name, batch.schema)
                writer.write_batch(batch)
                rows += batch.num_rows
            if writer is not None:
                writer.close()
                store_for(target).put_object(key, local.read())
        yield pa.RecordBatch.from_pylist([{"key": key, "rows": rows,
                                           "bytes": os.path.getsize(local.name) if rows else 0}])

    return write_part


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
    except RemoteStorageError as exc:
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
        except (SegmentCorrupt, RemoteStorageError) as exc:
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
