"""``ledgerd gc`` and ``ledgerd offload``: admin calls that start work on the server
and follow it with a progress bar."""

from __future__ import annotations

import time
from typing import Annotated

import typer
from ledgerd_client.api.bookie import gc_details, get_gc, trigger_gc
from ledgerd_client.api.ledgers import get_offload, offload_ledger
from ledgerd_client.models import GcProgress, GcRequest, OffloadStateName

from ._http import Api
from ._options import DEFAULT_URL, LedgerIdArg, PasswordOpt, TokenOpt, UrlOpt
from ._output import EXIT_FAILED, Progress, print_json

POLL_INTERVAL_S = 0.2  # an operator's poll interval: cheap GETs, a lively bar


def gc_command(
    url: UrlOpt = DEFAULT_URL,
    token: TokenOpt = None,
    major: Annotated[bool, typer.Option("--major", help="force a major compaction")] = False,
    minor: Annotated[bool, typer.Option("--minor", help="force a minor compaction")] = False,
    wait: Annotated[bool, typer.Option(help="follow the run with a progress bar")] = True,
) -> None:
    """Run garbage collection now, following its progress.

    Prints what the run reclaimed (JSON)."""
    with Api(url, token=token) as api:
        api.call(lambda c: trigger_gc.sync_detailed(
            client=c, body=GcRequest(force_major=major, force_minor=minor)))
        if not wait:
            return
        with Progress("gc", unit="bytes") as bar:
            while api.call(lambda c: get_gc.sync_detailed(client=c)).is_in_force_gc:
                progress = api.call(lambda c: gc_details.sync_detailed(client=c)).progress
                if isinstance(progress, GcProgress) and progress.running:
                    bar.update(progress.bytes_done or 0, progress.bytes_total or None,
                               note=f"{progress.kind} compaction of log {progress.log_id}")
                time.sleep(POLL_INTERVAL_S)
        details = api.call(lambda c: gc_details.sync_detailed(client=c))
    print_json(details.to_dict()["last_run"])


def offload_command(
    ledger_id: LedgerIdArg,
    url: UrlOpt = DEFAULT_URL,
    password: PasswordOpt = None,
    token: TokenOpt = None,
    wait: Annotated[bool, typer.Option(help="follow the offload with a progress bar")] = True,
) -> None:
    """Offload a closed ledger to S3, following its progress.

    Prints the final offload state (JSON); exit code 1 if it failed."""
    pending = (OffloadStateName.PENDING, OffloadStateName.IN_PROGRESS)
    with Api(url, token=token) as api:
        state = api.call(lambda c: offload_ledger.sync_detailed(ledger_id, client=c))
        with Progress(f"offload ledger {ledger_id}", unit="bytes") as bar:
            while wait and state.state in pending:
                if isinstance(state.bytes_total, int) and state.bytes_total:
                    bar.update(state.bytes_done or 0, state.bytes_total)
                time.sleep(POLL_INTERVAL_S)
                state = api.call(lambda c: get_offload.sync_detailed(ledger_id, client=c))
            if state.state is OffloadStateName.OFFLOADED:
                bar.update(state.segment_bytes, state.segment_bytes)
    print_json(state.to_dict())
    if state.state is OffloadStateName.FAILED:
        raise typer.Exit(EXIT_FAILED)
