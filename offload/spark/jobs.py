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

Both check what they can before Spark starts (:func:`plan_export`,
:func:`plan_verify`: options, the S3 listing, the export output), so a mistake
costs a second, not a JVM start; :func:`run_export` and :func:`run_verify`
then do the work (:func:`export` and :func:`verify` do both).  An export
output that exists needs ``overwrite``; ``overwrite`` never deletes a whole
bucket, the offloaded ledgers' prefix, ``/``, the home or the current directory.

Verify reads every segment object of the selected ledgers in Spark tasks,
recomputes each frame's CRC32C and checks entry ids, entry counts, segment
lengths and index points against the index, then sums per ledger and compares
with the ledger facts the index records (last entry id, length in bytes).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
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


# What executors import (the source, its readers and the error tree): the
# packages below ``node``/``app``/``cli`` (tests/test_layers.py draws them).
SHIPPED_PACKAGES = ("common", "journal", "entrylog", "cluster", "streaming", "ledger",
                    "compaction", "offload")


def ledgerd_zip(path: Path) -> Path:
    """A zip of this ledgerd's own packages (the source files this process
    imports them from), for ``--py-files`` or ``SparkContext.addPyFile``: on a
    Spark cluster the executors import the driver's ledgerd from it, whatever
    (if anything) is installed on them.  Their dependencies (pyarrow, crc32c,
    boto3, httpx, rocksdict) must be installed there."""
    import importlib.util
    import zipfile

    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for package in SHIPPED_PACKAGES:
            spec = importlib.util.find_spec(package)
            if spec is None or not spec.submodule_search_locations:
                raise InvalidSetting(f"package {package} of ledgerd is not importable here")
            root = Path(next(iter(spec.submodule_search_locations)))
            for source in sorted(root.rglob("*.py")):
                archive.write(source, str(Path(package) / source.relative_to(root)))
    return path


def spark_session(master: str = "local[*]", *, app_name: str = "ledgerd",
                  conf: Mapping[str, str] | None = None, quiet: bool = False,
                  ship: bool | None = None) -> Any:
    """A SparkSession with the ledgerd source registered and filter pushdown on.

    ``quiet`` (the CLI's jobs): the JVM logs errors only and its start-up
    chatter (log4j's banner, the native-hadoop warning, the JDK's incubator
    module warning) is not printed, so a run prints only what it has to say.
    ``ship`` (default: unless the master is ``local``): ledgerd's packages go
    to the executors with the job (:func:`ledgerd_zip`, ``addPyFile``).
    """
    if master.startswith("local"):
        # Loopback only, and workers run this interpreter (it has ledgerd installed).
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    settings = {"spark.sql.python.filterPushdown.enabled": "true", **(conf or {})}
    if quiet:
        settings.setdefault("spark.ui.showConsoleProgress", "false")
        settings["spark.driver.extraJavaOptions"] = " ".join(filter(None, (
            settings.get("spark.driver.extraJavaOptions"),
            f"-Dlog4j2.configurationFile=file:{_quiet_log4j2_file()}")))
        if SparkSession.getActiveSession() is None:
            _start_context_filtering_stderr(master, app_name, settings)
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    if ship if ship is not None else not master.startswith("local"):
        shipped = Path(tempfile.mkdtemp(prefix="ledgerd-ship-")) / "ledgerd.zip"
        spark.sparkContext.addPyFile(str(ledgerd_zip(shipped)))
    spark.dataSource.register(LedgerdDataSource)
    return spark


# Root at WARN, not ERROR: Spark prints "Setting default log level" whenever the
# root level differs from the shell's WARN.  The CLI lowers it to ERROR once up.
_QUIET_LOG4J2 = """\
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
logger.nativecode.name = org.apache.hadoop.util.NativeCodeLoader
logger.nativecode.level = error
"""
# The JDK prints this itself (Spark's launcher always adds the module), so no
# logging setting reaches it.
_JVM_NOISE = (b"WARNING: Using incubator modules:",)


def _quiet_log4j2_file() -> Path:
    path = Path(tempfile.gettempdir()) / f"ledgerd-log4j2-{os.getuid()}.properties"
    if not path.exists() or path.read_text() != _QUIET_LOG4J2:
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(_QUIET_LOG4J2)
        os.replace(tmp, path)
    return path


def _start_context_filtering_stderr(master: str, app_name: str,
                                    settings: Mapping[str, str]) -> None:
    """Start the JVM with its stderr piped through a thread that drops _JVM_NOISE."""
    from pyspark import SparkConf, SparkContext, java_gateway

    conf = SparkConf().setMaster(master).setAppName(app_name).setAll(list(settings.items()))
    launch: Any = java_gateway.launch_gateway  # untyped
    gateway = launch(conf, popen_kwargs={"stderr": subprocess.PIPE})
    threading.Thread(target=_forward_stderr, args=(gateway.proc.stderr,),
                     name="ledgerd-jvm-stderr", daemon=True).start()
    SparkContext(conf=conf, gateway=gateway)


def _forward_stderr(pipe: Any) -> None:
    for line in pipe:
        if not line.startswith(_JVM_NOISE):
            sys.stderr.buffer.write(line)
            sys.stderr.buffer.flush()


@contextmanager
def stage_progress(spark: Any, report: Callable[[int, int], None],
                   interval_s: float = 0.25) -> Iterator[None]:
    """Calls ``report(done_tasks, total_tasks)`` of every stage started since the
    block began, until it ends, and once more at its end (finished stages count, so
    a job that finished reports all its tasks done)."""
    tracker = spark.sparkContext.statusTracker()
    stop = threading.Event()
    seen: dict[int, tuple[int, int]] = {}

    def poll() -> None:
        for stage_id in {*tracker.getActiveStageIds(), *seen}:
            info = tracker.getStageInfo(stage_id)
            if info is not None:
                seen[stage_id] = (info.numCompletedTasks, info.numTasks)
        total = sum(t for _, t in seen.values())
        if total:
            report(sum(d for d, _ in seen.values()), total)

    def loop() -> None:
        while not stop.wait(interval_s):
            poll()

    thread = threading.Thread(target=loop, name="ledgerd-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
    poll()


# --- export -------------------------------------------------------------------


@dataclass(frozen=True)
class ExportResult:
    output: str
    ledgers: int
    rows: int
    payload_bytes: int
    files: tuple[str, ...] = ()  # S3 keys, or local paths, of the Parquet files


@dataclass(frozen=True)
class ExportPlan:
    """What :func:`run_export` will do, checked without Spark (:func:`plan_export`)."""

    options: Mapping[str, str]
    output: str
    overwrite: bool
    ledgers: tuple[OffloadedLedger, ...]
    existing_keys: tuple[str, ...] = ()  # S3 output: what --overwrite replaces


def _selected(options: Mapping[str, str]) -> list[OffloadedLedger]:
    read = parse_options(options)
    ledgers, incomplete = survey_offloaded(store_for(read.connection), read)
    if incomplete:
        log.warning("incomplete offloads left out", extra={"ledgers": incomplete})
    return ledgers


def plan_export(options: Mapping[str, str], output: str, *,
                overwrite: bool = False) -> ExportPlan:
    """Check the options, find the ledgers (S3 listing) and check the output, all
    before any Spark work: raises InvalidSetting for an output that exists without
    ``overwrite``, and for one that ``overwrite`` must never delete."""
    read = parse_options(options)
    existing: tuple[str, ...] = ()
    if output.startswith("s3://"):
        existing = _check_s3_output(read.connection, output, overwrite=overwrite)
    elif "://" not in output or output.startswith("file://"):
        _check_local_output(Path(output.removeprefix("file://")), overwrite=overwrite)
    return ExportPlan(options, output, overwrite, tuple(_selected(options)), existing)


def _check_local_output(path: Path, *, overwrite: bool) -> None:
    if not path.exists() or (path.is_dir() and not any(path.iterdir())):
        return
    if not overwrite:
        raise InvalidSetting(f"export output {str(path)!r} already exists; pass --overwrite "
                             "(overwrite=True) to replace it")
    resolved = path.resolve()
    precious = {Path("/"), Path.home().resolve(), *Path.cwd().resolve().parents,
                Path.cwd().resolve()}
    if resolved in precious:
        raise InvalidSetting(f"refusing to overwrite export output {str(path)!r}: it is "
                             "/, your home or the current directory or one of its parents")


def _check_s3_output(source: Connection, url: str, *, overwrite: bool) -> tuple[str, ...]:
    bucket, prefix = _split_s3_url(url)
    if bucket == source.bucket and _overlaps(prefix, source.prefix):
        raise InvalidSetting(f"export output {url!r} overlaps the offloaded ledgers under "
                             f"s3://{source.bucket}/{source.prefix}/; choose another prefix")
    existing = tuple(info.key for info in store_for(_target(source, bucket)).list_objects(
        f"{prefix}/" if prefix else ""))
    if existing and not overwrite:
        raise InvalidSetting(f"export output {url!r} is not empty ({len(existing)} objects); "
                             "pass --overwrite (overwrite=True) to replace it")
    if overwrite and not prefix:
        raise InvalidSetting(f"refusing --overwrite of export output {url!r}: without a "
                             "prefix it would delete every object in the bucket")
    return existing


def _overlaps(a: str, b: str) -> bool:
    """Key prefixes ``a`` and ``b`` (no slashes around) share keys: one contains the other."""
    return not a or not b or a == b or a.startswith(f"{b}/") or b.startswith(f"{a}/")


def _target(source: Connection, bucket: str) -> Connection:
    # Same endpoint and credentials as the source; the prefix goes in the keys.
    return Connection(bucket=bucket, endpoint_url=source.endpoint_url, region=source.region,
                      access_key=source.access_key, secret_key=source.secret_key)


def export(spark: Any, options: Mapping[str, str], output: str, *,
           overwrite: bool = False) -> ExportResult:
    """Write the selected ledgers' rows to Parquet at ``output`` (a path or s3://)."""
    return run_export(spark, plan_export(options, output, overwrite=overwrite))


def run_export(spark: Any, plan: ExportPlan) -> ExportResult:
    """Carry out a checked :class:`ExportPlan` with Spark."""
    rows = sum(ledger.entry_count for ledger in plan.ledgers)
    payload_bytes = sum(ledger.facts.length_bytes for ledger in plan.ledgers)
    if plan.output.startswith("s3://"):
        files = _export_to_s3(spark, plan)
    else:
        df = spark.read.format("ledgerd").options(**plan.options).load()
        # An existing output is either empty or to be replaced (plan_export checked).
        df.write.mode("overwrite").parquet(plan.output)
        files = _local_parquet_files(plan.output)
    result = ExportResult(plan.output, len(plan.ledgers), rows, payload_bytes, files)
    log.info("export done", extra={"output": plan.output, "ledgers": result.ledgers,
                                   "rows": rows, "payload_bytes": payload_bytes})
    return result


def _local_parquet_files(output: str) -> tuple[str, ...]:
    if "://" in output and not output.startswith("file://"):
        return ()  # hdfs:// and the like: Spark's file system, not ours to list
    return tuple(sorted(str(p) for p in Path(output.removeprefix("file://")).glob("*.parquet")))


def _split_s3_url(url: str) -> tuple[str, str]:
    bucket, _, prefix = url.removeprefix("s3://").partition("/")
    if not bucket:
        raise InvalidSetting(f"invalid export output {url!r}: want s3://bucket/prefix")
    return bucket, prefix.strip("/")


def _export_to_s3(spark: Any, plan: ExportPlan) -> tuple[str, ...]:
    read = parse_options(plan.options)
    source = read.connection
    bucket, prefix = _split_s3_url(plan.output)
    target = _target(source, bucket)
    store = store_for(target)
    base = f"{prefix}/" if prefix else ""
    store.delete_objects(list(plan.existing_keys))
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


@dataclass(frozen=True)
class VerifyPlan:
    """What :func:`run_verify` checks, found without Spark (:func:`plan_verify`)."""

    connection: Connection
    ledgers: tuple[OffloadedLedger, ...]
    incomplete: tuple[str, ...]


def plan_verify(options: Mapping[str, str]) -> VerifyPlan:
    """Check the options and find the ledgers (S3 listing), before any Spark work."""
    read = parse_options(options)
    ledgers, incomplete = survey_offloaded(store_for(read.connection), read)
    return VerifyPlan(read.connection, tuple(ledgers), tuple(incomplete))


def verify(spark: Any, options: Mapping[str, str]) -> VerifyReport:
    """Check every selected ledger's segments in Spark tasks; see the module docstring."""
    started = time.monotonic()
    report = run_verify(spark, plan_verify(options))
    report.elapsed_s = time.monotonic() - started
    return report


def run_verify(spark: Any, plan: VerifyPlan) -> VerifyReport:
    """Carry out a :class:`VerifyPlan` with Spark; ``elapsed_s`` is this call's time."""
    started = time.monotonic()
    connection = plan.connection
    tasks = [(ledger.ledger_id, segment.key, segment.index)
             for ledger in plan.ledgers for segment in ledger.segments]
    checks: list[SegmentCheck] = []
    if tasks:
        checks = (spark.sparkContext.parallelize(tasks, len(tasks))
                  .map(lambda task: check_segment(connection, *task)).collect())
    report = VerifyReport(ledgers=len(plan.ledgers), segments=len(checks),
                          entries=sum(c.entries for c in checks),
                          payload_bytes=sum(c.payload_bytes for c in checks),
                          problems=[f"incomplete offload: {text}" for text in plan.incomplete])
    for ledger in plan.ledgers:
        mine = [c for c in checks if c.ledger_id == ledger.ledger_id]
        report.problems.extend(p for c in mine for p in c.problems)
        report.problems.extend(_ledger_problems(ledger, mine))
    report.elapsed_s = time.monotonic() - started
    log.info("verify done", extra={"ledgers": report.ledgers, "segments": report.segments,
                                   "entries": report.entries, "problems": len(report.problems)})
    return report


# --- tail: live ledgers into Parquet, exactly once ------------------------------------


def start_tail(spark: Any, options: Mapping[str, str], output: str, checkpoint: str, *,
               trigger_interval_s: float = 1.0, once: bool = False) -> Any:
    """Start the stream of live ledgers' new entries into Parquet at ``output``.

    Exactly once and restart-safe: the stream's offsets (per ledger, the next
    entry id) and Spark's file sink commit log live in ``checkpoint``; a driver
    killed at any point and started again with the same ``checkpoint`` replays
    the micro-batch it was in, which reads the same rows, and the sink keeps
    one copy (readers of ``output`` go through its ``_spark_metadata`` log,
    as ``spark.read.parquet`` does).  ``once``: what is there now, then stop
    (``Trigger.AvailableNow``).  Returns the ``StreamingQuery``."""
    from . import parse_live_options

    parse_live_options(options)  # a mistake fails here, not in the first micro-batch
    writer = (spark.readStream.format("ledgerd").options(**options).load()
              .writeStream.format("parquet").option("path", output)
              .option("checkpointLocation", checkpoint).queryName("ledgerd-tail"))
    trigger = ({"availableNow": True} if once
               else {"processingTime": f"{int(trigger_interval_s * 1000)} milliseconds"})
    return writer.trigger(**trigger).start()
