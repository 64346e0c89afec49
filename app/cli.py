"""``ledgerd``: run the service, talk to a running one, print the OpenAPI document.

::

    ledgerd serve [--host H] [--port P] [--config FILE]
    ledgerd ledger create [--password PW] [--meta k=v ...]
    ledgerd ledger append LEDGER_ID [DATA | --file F | stdin] [--password PW] [--entry-id N]
    ledgerd ledger read LEDGER_ID [ENTRY_ID] [--start S] [--end E]
    ledgerd ledger get|close LEDGER_ID
    ledgerd ledger list [--state OPEN|FENCED|CLOSED]
    ledgerd gc [--major | --minor] [--no-wait]
    ledgerd offload LEDGER_ID [--no-wait]
    ledgerd export --bucket B --output PATH|s3://B/P [--ledgers 3,7,10-20] [--master M]
    ledgerd verify --bucket B [--ledgers ...] [--master M]
    ledgerd openapi
    ledgerd bench [--duration S] [--only SUITE ...] [--quick] [--big]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any, NoReturn

import httpx
import typer
from rich.console import Console
from rich.table import Table

from common.errors import InvalidSetting

from .frames import FRAMES_MEDIA_TYPE, decode_download
from .settings import ServiceSettings

cli = typer.Typer(
    help="ledgerd: a BookKeeper-style ledger store with a REST API.",
    no_args_is_help=True,
    add_completion=False,
)
ledger_cli = typer.Typer(help="Work with ledgers on a running server.", no_args_is_help=True)
cli.add_typer(ledger_cli, name="ledger")

err = Console(stderr=True)

UrlOpt = Annotated[str, typer.Option("--url", envvar="LEDGERD_URL", help="server base URL")]
PasswordOpt = Annotated[
    str, typer.Option("--password", "-p", envvar="LEDGERD_PASSWORD", help="ledger password")
]
TokenOpt = Annotated[
    str, typer.Option("--token", envvar="LEDGERD_ADMIN_TOKEN", help="admin bearer token")
]
DEFAULT_URL = "http://127.0.0.1:8080"


def main() -> None:
    cli()


def _fail(message: str, code: int = 1) -> NoReturn:
    err.print(f"[red]error:[/red] {message}", highlight=False)
    raise typer.Exit(code)


@cli.command()
def serve(
    host: Annotated[str | None, typer.Option(help="listen address (HOST)")] = None,
    port: Annotated[int | None, typer.Option(help="listen port (PORT)")] = None,
    config: Annotated[
        Path | None,
        typer.Option(help="TOML settings file (else LEDGERD_CONFIG)", exists=False),
    ] = None,
) -> None:
    """Run the service (flags win over LEDGERD_* variables, which win over the file)."""
    import uvicorn

    from . import logs
    from .main import create_app

    try:
        settings = ServiceSettings.load(config, host=host, port=port)
        settings.check_listen_address()
        settings.to_node()
    except InvalidSetting as exc:
        _fail(str(exc), code=2)
    logs.configure(settings.log_level, settings.log_format)
    app = create_app(settings)
    shown = f"[{settings.host}]" if ":" in settings.host else settings.host
    err.print(
        f"ledgerd listening on http://{shown}:{settings.port} "
        f"(data dir {settings.data_dir}, journal {settings.journal_device_path})",
        highlight=False,
    )
    uvicorn.run(
        app,
        host=settings.host,
        port=settings.port,
        log_config=None,
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=10,
    )


@cli.command()
def openapi() -> None:
    """Print the OpenAPI document (JSON, sorted keys)."""
    from .main import openapi_document

    sys.stdout.write(openapi_document())


@cli.command()
def bench(
    duration: Annotated[
        float | None, typer.Option(help="seconds per data point (default 3; 0.5 with --quick)")
    ] = None,
    only: Annotated[
        list[str] | None,
        typer.Option(help="run only this suite (repeatable): raw, journal, engine, replay, "
                          "http, compaction, offload, redis, scaling"),
    ] = None,
    quick: Annotated[bool, typer.Option("--quick", help="short points, small sizes")] = False,
    big: Annotated[bool, typer.Option("--big", help="GiB-sized scaling points too")] = False,
) -> None:
    """Run the benchmarks (`python -m bench`) and regenerate docs/benchmarks.md."""
    import subprocess

    args = [sys.executable, "-m", "bench"]
    if duration is not None:
        args += ["--duration", str(duration)]
    for suite in only or []:
        args += ["--only", suite]
    args += ["--quick"] * quick + ["--big"] * big
    raise typer.Exit(subprocess.run(args, check=False).returncode)


# --- client commands --------------------------------------------------------


def _client(url: str) -> httpx.Client:
    return httpx.Client(base_url=url.rstrip("/"), timeout=30.0)


def _check(response: httpx.Response) -> httpx.Response:
    if response.is_success:
        return response
    try:
        body = response.json()
        detail = f"{body.get('code', '?')}: {body.get('detail', '')}"
    except ValueError:
        detail = response.text[:500]
    _fail(f"HTTP {response.status_code} {detail}")


def _call(url: str, method: str, path: str, **kwargs: Any) -> httpx.Response:
    try:
        with _client(url) as client:
            return _check(client.request(method, path, **kwargs))
    except httpx.TransportError as exc:
        _fail(f"cannot reach {url}: {exc}")


def _print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, indent=2, sort_keys=True) + "\n")


def _password_header(password: str) -> dict[str, str]:
    return {"X-Ledger-Password": password} if password else {}


@ledger_cli.command("create")
def ledger_create(
    url: UrlOpt = DEFAULT_URL,
    password: PasswordOpt = "",
    meta: Annotated[
        list[str] | None, typer.Option("--meta", "-m", help="metadata pair key=value")
    ] = None,
) -> None:
    """Create a ledger; prints it as JSON."""
    metadata: dict[str, str] = {}
    for pair in meta or []:
        key, sep, value = pair.partition("=")
        if not sep:
            _fail(f"--meta wants key=value, got {pair!r}", code=2)
        metadata[key] = value
    body = {"password": password, "metadata": metadata}
    _print_json(_call(url, "POST", "/api/v1/ledgers", json=body).json())


@ledger_cli.command("append")
def ledger_append(
    ledger_id: int,
    data: Annotated[str | None, typer.Argument(help="payload text (else --file or stdin)")] = None,
    file: Annotated[Path | None, typer.Option("--file", "-f", help="payload file")] = None,
    entry_id: Annotated[int | None, typer.Option(help="idempotent append at this id")] = None,
    url: UrlOpt = DEFAULT_URL,
    password: PasswordOpt = "",
) -> None:
    """Append one entry; prints its id and the new last-add-confirmed."""
    if data is not None:
        payload = data.encode()
    elif file is not None:
        payload = file.read_bytes()
    else:
        payload = sys.stdin.buffer.read()
    params = {"entry_id": entry_id} if entry_id is not None else {}
    response = _call(
        url,
        "POST",
        f"/api/v1/ledgers/{ledger_id}/entries",
        content=payload,
        params=params,
        headers={"Content-Type": "application/octet-stream", **_password_header(password)},
    )
    _print_json(response.json())


@ledger_cli.command("read")
def ledger_read(
    ledger_id: int,
    entry_id: Annotated[int | None, typer.Argument(help="one entry (else a range)")] = None,
    start: Annotated[int, typer.Option(help="first entry of the range")] = 0,
    end: Annotated[int | None, typer.Option(help="last entry, inclusive (default: LAC)")] = None,
    url: UrlOpt = DEFAULT_URL,
) -> None:
    """Write one entry's payload to stdout, or a range as JSON lines (base64 payloads)."""
    if entry_id is not None:
        response = _call(url, "GET", f"/api/v1/ledgers/{ledger_id}/entries/{entry_id}")
        sys.stdout.buffer.write(response.content)
        sys.stdout.flush()
        return
    import base64

    params: dict[str, int] = {"start": start}
    if end is not None:
        params["end"] = end
    response = _call(
        url,
        "GET",
        f"/api/v1/ledgers/{ledger_id}/entries",
        params=params,
        headers={"Accept": FRAMES_MEDIA_TYPE},
    )
    for eid, crc, payload in decode_download(response.content):
        line = {"entry_id": eid, "crc32c": crc, "payload": base64.b64encode(payload).decode()}
        sys.stdout.write(json.dumps(line) + "\n")


@ledger_cli.command("get")
def ledger_get(ledger_id: int, url: UrlOpt = DEFAULT_URL) -> None:
    """Print a ledger as JSON."""
    _print_json(_call(url, "GET", f"/api/v1/ledgers/{ledger_id}").json())


@ledger_cli.command("close")
def ledger_close(ledger_id: int, url: UrlOpt = DEFAULT_URL, password: PasswordOpt = "") -> None:
    """Close (seal) a ledger; prints it as JSON."""
    response = _call(
        url, "POST", f"/api/v1/ledgers/{ledger_id}/close", headers=_password_header(password)
    )
    _print_json(response.json())


@ledger_cli.command("list")
def ledger_list(
    url: UrlOpt = DEFAULT_URL,
    state: Annotated[str | None, typer.Option(help="OPEN, FENCED or CLOSED")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON instead of a table")] = False,
) -> None:
    """List every ledger (follows pagination)."""
    ledgers: list[dict[str, Any]] = []
    after: int | None = None
    while True:
        params: dict[str, Any] = {"limit": 1000}
        if state:
            params["state"] = state.upper()
        if after is not None:
            params["after"] = after
        page = _call(url, "GET", "/api/v1/ledgers", params=params).json()
        ledgers.extend(page["ledgers"])
        after = page["next_after"]
        if after is None:
            break
    if as_json:
        _print_json(ledgers)
        return
    table = Table("ledger_id", "state", "last_add_confirmed", "entries", "length", "offload")
    for item in ledgers:
        table.add_row(
            str(item["ledger_id"]),
            item["state"],
            str(item["last_add_confirmed"]),
            str(item["entries"]),
            str(item["length"]),
            item["offload"]["state"],
        )
    Console().print(table)


def _admin_header(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


@cli.command("gc")
def gc_command(
    url: UrlOpt = DEFAULT_URL,
    token: TokenOpt = "",
    major: Annotated[bool, typer.Option("--major", help="force a major compaction")] = False,
    minor: Annotated[bool, typer.Option("--minor", help="force a minor compaction")] = False,
    wait: Annotated[bool, typer.Option(help="follow the run with a progress bar")] = True,
) -> None:
    """Run garbage collection now on a running server; shows its progress and
    prints what it reclaimed (JSON)."""
    import time

    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn

    body = {"force_major": major, "force_minor": minor}
    _call(url, "PUT", "/api/v1/bookie/gc", json=body, headers=_admin_header(token))
    if not wait:
        return
    columns = (TextColumn("{task.description}"), BarColumn(), DownloadColumn())
    with Progress(*columns, console=err, transient=True) as bar:
        task = bar.add_task("gc", total=None)
        while _call(url, "GET", "/api/v1/bookie/gc").json()["is_in_force_gc"]:
            progress = _call(url, "GET", "/api/v1/bookie/gc_details").json()["progress"]
            if progress["running"]:
                bar.update(task, description=f"{progress['kind']} compaction, log "
                           f"{progress['log_id']}", completed=progress["bytes_done"],
                           total=progress["bytes_total"] or None)
            time.sleep(0.2)  # an operator's poll interval
    _print_json(_call(url, "GET", "/api/v1/bookie/gc_details").json()["last_run"])


@cli.command("offload")
def offload_command(
    ledger_id: int,
    url: UrlOpt = DEFAULT_URL,
    token: TokenOpt = "",
    wait: Annotated[bool, typer.Option(help="follow the offload with a progress bar")] = True,
) -> None:
    """Offload a closed ledger to S3 on a running server; shows its progress and
    prints its final offload state (JSON); exit code 1 if it failed."""
    import time

    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn

    path = f"/api/v1/ledgers/{ledger_id}/offload"
    state = _call(url, "POST", path, headers=_admin_header(token)).json()
    columns = (TextColumn("{task.description}"), BarColumn(), DownloadColumn())
    with Progress(*columns, console=err, transient=True) as bar:
        task = bar.add_task(f"ledger {ledger_id}", total=None)
        while wait and state["state"] in ("PENDING", "IN_PROGRESS"):
            if state.get("bytes_total"):
                bar.update(task, completed=state["bytes_done"], total=state["bytes_total"])
            time.sleep(0.2)  # an operator's poll interval
            state = _call(url, "GET", path).json()
    _print_json(state)
    if state["state"] == "FAILED":
        raise typer.Exit(1)


# --- Spark jobs over offloaded ledgers (offload.spark.jobs, docs/spark.md) ----------

EndpointOpt = Annotated[str | None, typer.Option(envvar="LEDGERD_S3_ENDPOINT_URL",
                                                 help="S3 endpoint (S3_ENDPOINT_URL)")]
BucketOpt = Annotated[str, typer.Option(envvar="LEDGERD_S3_BUCKET", help="bucket (S3_BUCKET)")]
PrefixOpt = Annotated[str, typer.Option(envvar="LEDGERD_S3_PREFIX", help="key prefix")]
RegionOpt = Annotated[str, typer.Option(envvar="LEDGERD_S3_REGION", help="S3 region")]
LedgersOpt = Annotated[str | None, typer.Option(help="ledger ids, e.g. 3,7,10-20 (default all)")]
ClusterOpt = Annotated[str | None, typer.Option(help="only this cluster (default all)")]
BookieOpt = Annotated[str | None, typer.Option("--bookie-id", help="only this bookie")]
MasterOpt = Annotated[str, typer.Option(help="Spark master URL")]


def _source_options(endpoint: str | None, bucket: str, prefix: str, region: str,
                    ledgers: str | None, cluster: str | None,
                    bookie_id: str | None) -> dict[str, str]:
    given = {"endpoint": endpoint, "bucket": bucket, "prefix": prefix, "region": region,
             "ledgers": ledgers, "cluster": cluster, "bookie_id": bookie_id}
    return {key: value for key, value in given.items() if value}


def _run_spark_job(master: str, description: str, job: Any) -> Any:
    """Run ``job(spark)`` with a progress bar over the Spark tasks."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from common.errors import LedgerdError
    from offload.spark.jobs import spark_session, stage_progress

    spark = spark_session(master, conf={"spark.ui.showConsoleProgress": "false"})
    spark.sparkContext.setLogLevel("ERROR")
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    try:
        with Progress(*columns, console=err, transient=True) as bar:
            task = bar.add_task(description, total=None)
            with stage_progress(spark, lambda done, total: bar.update(
                    task, completed=done, total=total)):
                return job(spark)
    except LedgerdError as exc:
        _fail(str(exc), code=2)
    finally:
        spark.stop()


@cli.command("export")
def export_command(
    output: Annotated[str, typer.Option(help="a directory path, or s3://bucket/prefix")],
    bucket: BucketOpt,
    endpoint: EndpointOpt = None,
    prefix: PrefixOpt = "ledgerd",
    region: RegionOpt = "us-east-1",
    ledgers: LedgersOpt = None,
    cluster: ClusterOpt = None,
    bookie_id: BookieOpt = None,
    overwrite: Annotated[bool, typer.Option(help="replace what output holds")] = False,
    master: MasterOpt = "local[*]",
) -> None:
    """Export offloaded ledgers to Parquet with Spark; prints a JSON summary."""
    from offload.spark.jobs import export

    options = _source_options(endpoint, bucket, prefix, region, ledgers, cluster, bookie_id)
    result = _run_spark_job(master, "export", lambda spark: export(
        spark, options, output, overwrite=overwrite))
    _print_json({"output": result.output, "ledgers": result.ledgers, "rows": result.rows,
                 "payload_bytes": result.payload_bytes, "files": list(result.files)})


@cli.command("verify")
def verify_command(
    bucket: BucketOpt,
    endpoint: EndpointOpt = None,
    prefix: PrefixOpt = "ledgerd",
    region: RegionOpt = "us-east-1",
    ledgers: LedgersOpt = None,
    cluster: ClusterOpt = None,
    bookie_id: BookieOpt = None,
    master: MasterOpt = "local[*]",
) -> None:
    """Recompute every CRC of offloaded ledgers and check counts and lengths against
    their indexes; exit code 0 when all is well, 1 with a report of what is not."""
    from offload.spark.jobs import verify

    options = _source_options(endpoint, bucket, prefix, region, ledgers, cluster, bookie_id)
    report = _run_spark_job(master, "verify", lambda spark: verify(spark, options))
    _print_json({"ok": report.ok, "ledgers": report.ledgers, "segments": report.segments,
                 "entries": report.entries, "payload_bytes": report.payload_bytes,
                 "elapsed_s": round(report.elapsed_s, 3), "problems": report.problems})
    if not report.ok:
        raise typer.Exit(1)


if __name__ == "__main__":  # pragma: no cover
    main()
