"""``ledgerd ledger …``: create, get, list, fence, close, delete, offload-status, read.

``append`` lives in :mod:`cli._append`.  Results are JSON on stdout (the API's own
field names), except ``list``'s table and ``read``'s entries.
"""

from __future__ import annotations

import base64
import json
import sys
from collections.abc import Callable, Iterable, Iterator
from enum import StrEnum
from typing import Annotated, Any, BinaryIO

import typer
from ledgerd_client.api.ledgers import (
    close_ledger,
    create_ledger,
    delete_ledger,
    fence_ledger,
    get_ledger,
    get_offload,
    list_ledgers,
    read_entry,
)
from ledgerd_client.models import (
    CreateLedger,
    CreateLedgerMetadata,
    Ledger,
    LedgerList,
    LedgerStateName,
    Problem,
)
from ledgerd_client.types import Response

from common.errors import ConnectionLost
from common.frames import decode_download_stream, encode_download

from ._http import Api, given
from ._options import DEFAULT_URL, LedgerIdArg, PasswordOpt, UrlOpt
from ._output import CliError, print_json, print_rows, usage_error

ledger_cli = typer.Typer(help="Work with the ledgers of a running server.",
                         no_args_is_help=True)

LIST_PAGE_ENTRIES = 1000


@ledger_cli.command("create")
def create_command(
    url: UrlOpt = DEFAULT_URL,
    password: PasswordOpt = None,
    meta: Annotated[list[str] | None, typer.Option(
        "--meta", "-m", help="metadata pair key=value (repeatable)")] = None,
) -> None:
    """Create a ledger; prints it as JSON."""
    metadata: dict[str, str] = {}
    for pair in meta or []:
        key, sep, value = pair.partition("=")
        if not sep:
            raise usage_error(f"--meta wants key=value, got {pair!r}")
        metadata[key] = value
    body = CreateLedger(password=password or "",
                        metadata=CreateLedgerMetadata.from_dict(metadata))
    with Api(url, password=password) as api:
        ledger = api.call(lambda c: create_ledger.sync_detailed(client=c, body=body))
    print_json(ledger.to_dict())


@ledger_cli.command("get")
def get_command(ledger_id: LedgerIdArg, url: UrlOpt = DEFAULT_URL,
                password: PasswordOpt = None) -> None:
    """Print a ledger as JSON (--password is not needed)."""
    with Api(url) as api:
        print_json(api.call(lambda c: get_ledger.sync_detailed(ledger_id, client=c)).to_dict())


@ledger_cli.command("list")
def list_command(
    url: UrlOpt = DEFAULT_URL,
    password: PasswordOpt = None,
    state: Annotated[str | None, typer.Option(help="only OPEN, FENCED or CLOSED ledgers")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON instead of a table")] = False,
) -> None:
    """List every ledger (all pages)."""
    try:
        wanted = LedgerStateName(state.upper()) if state else None
    except ValueError:
        raise usage_error(f"--state {state!r}: want OPEN, FENCED or CLOSED") from None
    ledgers: list[dict[str, Any]] = []
    after: int | None = None
    with Api(url) as api:

        def page_after(cursor: int | None) -> LedgerList:
            return api.call(lambda c: list_ledgers.sync_detailed(
                client=c, state=given(wanted), after=given(cursor), limit=LIST_PAGE_ENTRIES))

        while True:
            page = page_after(after)
            ledgers.extend(item.to_dict() for item in page.ledgers)
            if not isinstance(page.next_after, int):
                break
            after = page.next_after
    if as_json:
        print_json(ledgers)
        return
    print_rows(("ledger_id", "state", "last_add_confirmed", "entries", "length", "offload"),
               [(str(item["ledger_id"]), item["state"], str(item["last_add_confirmed"]),
                 str(item["entries"]), str(item["length"]), item["offload"]["state"])
                for item in ledgers])


def _state_change(operation: Callable[..., Response[Ledger | Problem]]
                  ) -> Callable[..., None]:
    """A command that moves a ledger to another state (fence, close) and prints it."""

    def command(ledger_id: LedgerIdArg, url: UrlOpt = DEFAULT_URL,
                password: PasswordOpt = None) -> None:
        with Api(url, password=password) as api:
            ledger = api.call(lambda c: operation(
                ledger_id, client=c, x_ledger_password=api.password_param))
        print_json(ledger.to_dict())

    return command


ledger_cli.command("fence", help="Fence a ledger (no more adds); prints it as JSON.")(
    _state_change(fence_ledger.sync_detailed))
ledger_cli.command("close", help="Close (seal) a ledger; prints it as JSON.")(
    _state_change(close_ledger.sync_detailed))


@ledger_cli.command("delete")
def delete_command(ledger_id: LedgerIdArg, url: UrlOpt = DEFAULT_URL,
                   password: PasswordOpt = None) -> None:
    """Delete a ledger (and its offloaded copy); prints {"ledger_id", "deleted"}."""
    with Api(url, password=password) as api:
        api.call(lambda c: delete_ledger.sync_detailed(
            ledger_id, client=c, x_ledger_password=api.password_param))
    print_json({"ledger_id": ledger_id, "deleted": True})


@ledger_cli.command("offload-status")
def offload_status_command(ledger_id: LedgerIdArg, url: UrlOpt = DEFAULT_URL,
                           password: PasswordOpt = None) -> None:
    """Print a ledger's offload state as JSON (`ledgerd offload ID` starts one)."""
    with Api(url) as api:
        print_json(api.call(lambda c: get_offload.sync_detailed(ledger_id, client=c)).to_dict())


class ReadFormat(StrEnum):
    raw = "raw"
    jsonl = "jsonl"
    frames = "frames"


@ledger_cli.command("read")
def read_command(
    ledger_id: LedgerIdArg,
    entry_id: Annotated[int | None, typer.Argument(
        min=0, metavar="[ENTRY]", show_default=False, help="one entry (default: a range)")] = None,
    start: Annotated[int | None, typer.Option(
        min=0, show_default=False, help="first entry of the range (default 0)")] = None,
    end: Annotated[int | None, typer.Option(
        min=0, show_default=False,
        help="last entry of the range, inclusive (default: last-add-confirmed)")] = None,
    limit: Annotated[int | None, typer.Option(
        min=1, show_default=False, help="at most this many entries")] = None,
    output_format: Annotated[ReadFormat | None, typer.Option(
        "--format", "-f", show_default=False,
        help="raw: payloads back to back (default for one entry); jsonl: one JSON object "
             "per entry with a base64 payload (default for a range); frames: the server's "
             "download frames (u64 entry id, u32 crc32c, u32 length, payload)")] = None,
    url: UrlOpt = DEFAULT_URL,
    password: PasswordOpt = None,
) -> None:
    """Write entries to stdout: one entry, or the range --start..--end."""
    out = sys.stdout.buffer
    with Api(url) as api:
        if entry_id is not None:
            if start is not None or end is not None or limit is not None:
                raise usage_error("give an ENTRY_ID or --start/--end/--limit, not both")
            response = api.send(lambda c: read_entry.sync_detailed(ledger_id, entry_id, client=c))
            payload = api.checked(response).payload.read()
            crc = int(response.headers["x-crc32c"])
            _check_crc(entry_id, crc, payload)
            _write_entry(out, output_format or ReadFormat.raw, entry_id, crc, payload)
            out.flush()
            return
        params = {"start": start or 0}
        if end is not None:
            params["end"] = end
        if limit is not None:
            params["limit"] = limit
        with api.stream_frames(ledger_id, params) as chunks:
            try:
                for eid, crc, payload in _checked(decode_download_stream(chunks)):
                    _write_entry(out, output_format or ReadFormat.jsonl, eid, crc, payload)
            except ConnectionLost as exc:
                raise CliError(f"{exc}; the server's log says why") from exc
    out.flush()


def _checked(frames: Iterable[tuple[int, int, bytes]]) -> Iterator[tuple[int, int, bytes]]:
    """Each frame after checking its payload's CRC32C: end to end, where the server's
    check covers only the bytes it read from disk."""
    for entry_id, crc, payload in frames:
        _check_crc(entry_id, crc, payload)
        yield entry_id, crc, payload


def _check_crc(entry_id: int, crc: int, payload: bytes) -> None:
    import crc32c

    if crc32c.crc32c(payload) != crc:
        raise CliError(f"entry {entry_id}: payload CRC32C does not match the server's "
                       f"{crc} (corrupted in transit)")


def _write_entry(out: BinaryIO, output_format: ReadFormat, entry_id: int, crc: int,
                 payload: bytes) -> None:
    if output_format is ReadFormat.raw:
        out.write(payload)
    elif output_format is ReadFormat.jsonl:
        line = {"entry_id": entry_id, "crc32c": crc,
                "payload": base64.b64encode(payload).decode("ascii")}
        out.write(json.dumps(line).encode() + b"\n")
    else:
        out.write(encode_download(entry_id, crc, payload))
