"""``ledgerd export``, ``ledgerd verify`` and ``ledgerd tail``: the Spark jobs of
``offload.spark.jobs`` (``tail`` reads live ledgers through the nodes).

Where the offloaded ledgers are comes from, highest first: the flags, the
``LEDGERD_S3_*`` variables (as for the server), then the local S3 that
``make serve`` started: ``tools.local_s3`` writes its endpoint, region, keys and
bucket to ``data/s3/endpoint.json`` (``LEDGERD_LOCAL_S3_FILE`` names another),
so a second shell in the same directory needs no settings.  The file's keys
are used only for the file's endpoint and only when ``AWS_ACCESS_KEY_ID`` is
unset (boto3's chain wins).

Everything that can be checked without Spark is checked first (options, the S3
listing, the output), so mistakes cost a second instead of a JVM start.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from ._options import DEFAULT_URL, PasswordOpt, UrlOpt
from ._output import (
    EXIT_FAILED,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    CliError,
    Progress,
    print_json,
    print_note,
)

T = TypeVar("T")

LOCAL_S3_FILE_DEFAULT = Path("data/s3/endpoint.json")  # the Makefile's S3_DIR/endpoint.json

EndpointOpt = Annotated[str | None, typer.Option(
    envvar="LEDGERD_S3_ENDPOINT_URL", show_default=False,
    help="S3 endpoint URL (setting S3_ENDPOINT_URL; default: the quick start's local S3, "
         "else AWS)")]
BucketOpt = Annotated[str | None, typer.Option(
    envvar="LEDGERD_S3_BUCKET", show_default=False,
    help="bucket of the offloaded ledgers (setting S3_BUCKET; default: the quick start's)")]
PrefixOpt = Annotated[str | None, typer.Option(
    envvar="LEDGERD_S3_PREFIX", show_default=False, help="key prefix (setting S3_PREFIX)")]
RegionOpt = Annotated[str | None, typer.Option(
    envvar="LEDGERD_S3_REGION", show_default=False, help="S3 region (setting S3_REGION)")]
LedgersOpt = Annotated[str | None, typer.Option(
    show_default=False, help="ledger ids, e.g. 3,7,10-20 (default: all)")]
ClusterOpt = Annotated[str | None, typer.Option(
    show_default=False, help="only this cluster (default: all)")]
BookieOpt = Annotated[str | None, typer.Option(
    "--bookie-id", show_default=False, help="only this bookie (default: all)")]
MasterOpt = Annotated[str, typer.Option(help="Spark master URL")]
LocalS3FileOpt = Annotated[Path | None, typer.Option(
    "--local-s3-file", envvar="LEDGERD_LOCAL_S3_FILE", show_default=False,
    help=f"the quick start's S3 hand-off file (default: {LOCAL_S3_FILE_DEFAULT}, if present)")]


def _source_options(endpoint: str | None, bucket: str | None, prefix: str | None,
                    region: str | None, ledgers: str | None, cluster: str | None,
                    bookie_id: str | None, local_s3_file: Path | None) -> dict[str, str]:
    """The ``format("ledgerd")`` options: flags, else environment, else the local S3 file."""
    local = _read_local_s3_file(local_s3_file)
    if local:
        endpoint = endpoint or local.get("endpoint")
        bucket = bucket or local.get("bucket")
        region = region or local.get("region")
    if not bucket:
        raise CliError("no bucket: pass --bucket, set LEDGERD_S3_BUCKET, or run this from the "
                       "directory where `make serve` runs (it writes "
                       f"{LOCAL_S3_FILE_DEFAULT})", EXIT_USAGE)
    given = {"endpoint": endpoint, "bucket": bucket, "prefix": prefix, "region": region,
             "ledgers": ledgers, "cluster": cluster, "bookie_id": bookie_id}
    options = {key: value for key, value in given.items() if value}
    if local and endpoint == local.get("endpoint") and not os.environ.get("AWS_ACCESS_KEY_ID"):
        options["access_key"] = local["access_key"]
        options["secret_key"] = local["secret_key"]
        print_note(f"using the local S3 at {endpoint}, bucket {bucket} "
                   f"(from {local_s3_file or LOCAL_S3_FILE_DEFAULT})")
    return options


def _read_local_s3_file(path: Path | None) -> dict[str, str]:
    if path is None and not LOCAL_S3_FILE_DEFAULT.exists():
        return {}
    path = path or LOCAL_S3_FILE_DEFAULT
    try:
        values = json.loads(path.read_text())
    except FileNotFoundError:
        raise CliError(f"--local-s3-file {path}: no such file (is `make serve` running?)",
                       EXIT_USAGE) from None
    except (OSError, ValueError) as exc:
        raise CliError(f"--local-s3-file {path}: {exc}", EXIT_USAGE) from exc
    if not isinstance(values, dict) or not {"endpoint", "access_key", "secret_key"} <= set(
            values):
        raise CliError(f"--local-s3-file {path}: not written by tools.local_s3", EXIT_USAGE)
    return {key: str(value) for key, value in values.items()}


def _plan(check: Callable[[], T], options: dict[str, str]) -> T:
    """``check()`` (no Spark yet) with its errors as one-line CliErrors."""
    from common.errors import InvalidSetting, LedgerdError, TierUnavailable

    try:
        return check()
    except InvalidSetting as exc:
        raise CliError(str(exc), EXIT_USAGE) from exc
    except TierUnavailable as exc:
        where = options.get("endpoint", "AWS S3")
        raise CliError(f"S3 at {where} does not answer: {exc}", EXIT_UNREACHABLE) from exc
    except LedgerdError as exc:
        raise CliError(str(exc)) from exc


def _run_spark(master: str, description: str, started: float,
               job: Callable[[Any], T]) -> tuple[T, float]:
    """``job(spark)`` with a progress bar over its Spark tasks; also the Spark start-up time."""
    from offload.spark.jobs import spark_session, stage_progress

    with Progress(description, unit="tasks") as bar:
        bar.update(0, note="starting Spark")
        spark = spark_session(master, quiet=True)
        spark.sparkContext.setLogLevel("ERROR")
        startup_s = time.monotonic() - started
        try:
            with stage_progress(spark, lambda done, total: bar.update(done, total)):
                return job(spark), startup_s
        except Exception as exc:
            raise CliError(f"{description} failed: {_spark_problem(exc)}") from exc
        finally:
            spark.stop()


def _spark_problem(exc: Exception) -> str:
    """One line for an error out of Spark: a Python task's own exception line when
    there is one (it ends the worker's traceback), else the first line."""
    text = str(exc).strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if "Traceback (most recent call last)" in text:
        raised = [line for line in lines if ": " in line and not line.startswith(
            ("File ", "at ", "Traceback"))]
        if raised:
            return raised[-1]
    return lines[0] if lines else type(exc).__name__


def export_command(
    output: Annotated[str, typer.Option(
        show_default=False, help="a directory, file://, hdfs:// or s3://bucket/prefix")],
    bucket: BucketOpt = None,
    endpoint: EndpointOpt = None,
    prefix: PrefixOpt = None,
    region: RegionOpt = None,
    ledgers: LedgersOpt = None,
    cluster: ClusterOpt = None,
    bookie_id: BookieOpt = None,
    overwrite: Annotated[bool, typer.Option(
        help="replace an earlier export at --output")] = False,
    master: MasterOpt = "local[*]",
    local_s3_file: LocalS3FileOpt = None,
) -> None:
    """Export offloaded ledgers to Parquet with Spark; prints a JSON summary."""
    started = time.monotonic()
    options = _source_options(endpoint, bucket, prefix, region, ledgers, cluster, bookie_id,
                              local_s3_file)
    from offload.spark.jobs import plan_export, run_export

    plan = _plan(lambda: plan_export(options, output, overwrite=overwrite), options)
    result, startup_s = _run_spark(master, "export", started,
                                   lambda spark: run_export(spark, plan))
    print_json({"output": result.output, "ledgers": result.ledgers, "rows": result.rows,
                "payload_bytes": result.payload_bytes, "files": list(result.files),
                "elapsed_s": round(time.monotonic() - started, 3),
                "spark_startup_s": round(startup_s, 3)})


def verify_command(
    bucket: BucketOpt = None,
    endpoint: EndpointOpt = None,
    prefix: PrefixOpt = None,
    region: RegionOpt = None,
    ledgers: LedgersOpt = None,
    cluster: ClusterOpt = None,
    bookie_id: BookieOpt = None,
    master: MasterOpt = "local[*]",
    local_s3_file: LocalS3FileOpt = None,
) -> None:
    """Check offloaded ledgers with Spark: every CRC, entry count and length.

    Prints a JSON report; exit code 0 when all is well, 1 when it lists problems."""
    started = time.monotonic()
    options = _source_options(endpoint, bucket, prefix, region, ledgers, cluster, bookie_id,
                              local_s3_file)
    from offload.spark.jobs import plan_verify, run_verify

    plan = _plan(lambda: plan_verify(options), options)
    report, startup_s = _run_spark(master, "verify", started,
                                   lambda spark: run_verify(spark, plan))
    print_json({"ok": report.ok, "ledgers": report.ledgers, "segments": report.segments,
                "entries": report.entries, "payload_bytes": report.payload_bytes,
                "elapsed_s": round(time.monotonic() - started, 3),
                "spark_startup_s": round(startup_s, 3), "problems": report.problems})
    if not report.ok:
        raise typer.Exit(EXIT_FAILED)


def tail_command(
    output: Annotated[str, typer.Option(
        show_default=False, help="the Parquet directory the rows go to")],
    checkpoint: Annotated[str, typer.Option(
        show_default=False, help="the stream's checkpoint directory (restart with the same one)")],
    url: UrlOpt = DEFAULT_URL,
    ledgers: Annotated[str | None, typer.Option(
        show_default=False, help="ledger ids (3,7,10-20) and/or metadata.KEY=VALUE "
        "(new ledgers matching join the stream; default: every ledger)")] = None,
    password: PasswordOpt = None,
    option: Annotated[list[str] | None, typer.Option(
        "--option", "-o", show_default=False,
        help="another option of the source, KEY=VALUE (e.g. bucket=ledgerd); repeatable")
    ] = None,
    trigger: Annotated[float, typer.Option(
        help="seconds between micro-batches", min=0.05)] = 1.0,
    once: Annotated[bool, typer.Option(
        help="read what the ledgers hold now, then stop")] = False,
    master: MasterOpt = "local[*]",
) -> None:
    """Tail live ledgers into Parquet with Spark, exactly once across restarts.

    Prints one JSON line per micro-batch (its id, rows, and the offset it read
    up to); Ctrl-C stops after the current one.  Start it again with the same
    --checkpoint to carry on where it stopped or was killed."""
    options = {"url": url}
    if ledgers:
        options["ledgers"] = ledgers
    if password is not None:
        options["password"] = password
    for pair in option or ():
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise CliError(f"--option {pair!r}: expected KEY=VALUE", EXIT_USAGE)
        options[key.strip()] = value
    from offload.spark import parse_live_options
    from offload.spark.jobs import spark_session, start_tail

    _plan(lambda: parse_live_options(options), options)
    spark = spark_session(master, app_name="ledgerd-tail", quiet=True)
    spark.sparkContext.setLogLevel("ERROR")
    try:
        query = start_tail(spark, options, output, checkpoint, trigger_interval_s=trigger,
                           once=once)
        print_note(f"tailing {url} into {output} (checkpoint {checkpoint})")
        printed = -1
        try:
            while True:
                done = query.awaitTermination(0.2)
                for progress in query.recentProgress:
                    if progress["batchId"] > printed and progress.get("sources"):
                        printed = progress["batchId"]
                        source = progress["sources"][0]
                        sys.stdout.write(json.dumps({
                            "batch": printed, "rows": progress["numInputRows"],
                            "end_offset": json.loads(source["endOffset"] or "null")},
                            sort_keys=True) + "\n")
                        sys.stdout.flush()
                if done:
                    break
        except KeyboardInterrupt:
            query.stop()
        failure = query.exception()
        if failure is not None:
            raise CliError(f"tail failed: {_spark_problem(Exception(str(failure)))}")
    finally:
        spark.stop()


def register(cli: typer.Typer) -> None:
    cli.command("export")(export_command)
    cli.command("verify")(verify_command)
    cli.command("tail")(tail_command)
