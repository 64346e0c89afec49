"""``ledgerd ledger append``: one entry, or many from stdin in batches.

``--lines`` makes each line of stdin (without its ``\\n``) an entry, ``--frames``
each u32-big-endian-length frame.  Entries go in batches (``entries/batch``,
frames body, all or nothing) of at most ``--batch-size`` payload bytes and
``--batch-entries`` entries, one process, one connection, a progress bar.

Exactly once, without the server's help: a batch whose answer was lost (the
connection broke after it was sent) is settled by reading the ledger's
last-add-confirmed — batches are all or nothing, so either the whole batch is
there or none of it — and, when it is there, by comparing the CRC32Cs of those
entries with ours.  ``--first-entry-id N`` says which id the first input entry
must get; rerunning a failed command with it and the same input skips (after
the same CRC comparison) what the ledger already holds and appends the rest.
"""

from __future__ import annotations

import contextlib
import io
import os
import select
import stat
import sys
import time
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import httpx
import typer
from ledgerd_client.api.ledgers import add_entries_frames, add_entry, get_ledger
from ledgerd_client.models import BatchAdded
from ledgerd_client.types import File

from common.errors import ConnectionLost, LedgerdError
from common.frames import decode_download_stream, encode_upload

from ._frames import LineSplitter, UploadFrameSplitter
from ._http import Api, given, password_header
from ._ledger import ledger_cli
from ._options import DEFAULT_URL, LedgerIdArg, PasswordOpt, UrlOpt
from ._output import EXIT_UNREACHABLE, CliError, Progress, print_json, usage_error

# A batch below the server's default limits (MAX_BATCH_SIZE is at least 1 MiB
# minus 8 KiB on a journal of 8 MiB or more; MAX_BATCH_ENTRIES is 10 000); a
# batch the server finds too large is split in two and retried.
BATCH_SIZE_BYTES_DEFAULT = 1_000_000
BATCH_ENTRIES_DEFAULT = 1000
ATTEMPTS_MAX = 8
READ_SIZE_BYTES = 1 << 20
# How long a batch waits for more input once stdin goes quiet (`tail -f | ...`).
LINGER_S = 0.1
RETRY_WAIT_S_MAX = 5.0


@ledger_cli.command("append")
def append_command(
    ledger_id: LedgerIdArg,
    data: Annotated[str | None, typer.Argument(
        show_default=False, help="the entry as text (default: stdin, or --file)")] = None,
    file: Annotated[Path | None, typer.Option(
        "--file", exists=True, dir_okay=False, readable=True, show_default=False,
        help="the entry is this file's content")] = None,
    lines: Annotated[bool, typer.Option(
        "--lines", help="each line of stdin is an entry (its \\n removed)")] = False,
    frames: Annotated[bool, typer.Option(
        "--frames", help="stdin holds frames: u32 big-endian length, then the payload")] = False,
    entry_id: Annotated[int | None, typer.Option(
        "--entry-id", min=0, show_default=False,
        help="one entry: idempotent append at this id")] = None,
    first_entry_id: Annotated[int | None, typer.Option(
        "--first-entry-id", min=0, show_default=False,
        help="--lines/--frames: the id the first input entry must get; input the ledger "
             "already holds from there is checked and skipped (resumes a failed run)")] = None,
    batch_size: Annotated[int, typer.Option(
        min=1, help="most payload bytes per batch")] = BATCH_SIZE_BYTES_DEFAULT,
    batch_entries: Annotated[int, typer.Option(
        min=1, help="most entries per batch")] = BATCH_ENTRIES_DEFAULT,
    stream: Annotated[bool, typer.Option(
        "--stream", help="--lines/--frames over one append stream (WebSocket, DESIGN §5a) "
                         "instead of HTTP batches: many messages in flight")] = False,
    url: UrlOpt = DEFAULT_URL,
    password: PasswordOpt = None,
) -> None:
    """Append one entry (DATA, --file or stdin), or every entry on stdin in batches.

    One entry: prints its id, CRC32C and the new last-add-confirmed (JSON). With --lines
    or --frames: a progress bar, then a JSON summary of what was appended."""
    if lines and frames:
        raise usage_error("--lines and --frames exclude each other")
    with Api(url, password=password) as api:
        if not (lines or frames):
            if first_entry_id is not None:
                raise usage_error("--first-entry-id goes with --lines or --frames; "
                                  "one entry takes --entry-id")
            payload = (data.encode() if data is not None
                       else file.read_bytes() if file is not None else sys.stdin.buffer.read())
            added = api.call(lambda c: add_entry.sync_detailed(
                ledger_id, client=c, body=File(payload=io.BytesIO(payload)),
                entry_id=given(entry_id),
                x_ledger_password=api.password_param))
            print_json(added.to_dict())
            return
        if data is not None or file is not None or entry_id is not None:
            raise usage_error("--lines and --frames read stdin; DATA, --file and --entry-id "
                              "are for one entry")
        if stream:
            print_json(_append_streamed(api, url, ledger_id, frames=frames,
                                        first_entry_id=first_entry_id))
            return
        fd = sys.stdin.fileno()
        entries = InputEntries(fd, LineSplitter() if lines else UploadFrameSplitter())
        summary = BulkAppend(api, ledger_id, batch_size, batch_entries).run(
            entries, first_entry_id=first_entry_id, total_bytes=_input_size(fd))
    print_json(summary)


def _append_streamed(api: Api, url: str, ledger_id: int, *, frames: bool,
                     first_entry_id: int | None) -> dict[str, object]:
    """stdin over one append stream.  The stream resumes exactly once from the next
    id the ledger expects (or --first-entry-id), so a dropped connection is resent
    without duplicates."""
    import asyncio

    import streaming

    started = time.monotonic()
    if first_entry_id is None:
        info = api.call(lambda c: get_ledger.sync_detailed(ledger_id, client=c))
        first_entry_id = info.last_add_confirmed + 1
    total = _input_size(sys.stdin.fileno())
    with Progress(f"stream to ledger {ledger_id}", unit="bytes", total=total) as bar:
        def progress(done: streaming.Progress) -> None:
            bar.update(done.payload_bytes, note=f"{done.entries} entries")

        try:
            done = asyncio.run(streaming.append_from_file(
                sys.stdin.buffer, url, ledger_id,
                password="" if api.password is None else password_header(api.password),
                input_format="frames" if frames else "lines", next_entry_id=first_entry_id,
                progress=progress))
        except ConnectionLost as exc:
            raise CliError(f"append stream to {url}: {exc}", EXIT_UNREACHABLE) from exc
        except LedgerdError as exc:
            raise CliError(f"append stream: {exc} ({exc.code})") from exc
    return {"ledger_id": ledger_id, "first_entry_id": done.first_entry_id,
            "last_entry_id": done.last_entry_id, "appended": done.entries,
            "payload_bytes": done.payload_bytes,
            "last_add_confirmed": done.last_add_confirmed,
            "elapsed_s": round(time.monotonic() - started, 3)}


def _input_size(fd: int) -> int | None:
    """Bytes left on stdin when it is a regular file (a bar with an end), else None."""
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            return None
        return status.st_size - os.lseek(fd, 0, os.SEEK_CUR)
    except OSError:
        return None


class InputEntries:
    """The entries on a file descriptor, split as its bytes arrive.

    Reads take whatever is there (``os.read``), so a slow producer (``tail -f``)
    is not waited for: while :attr:`batch_waiting`, an input quiet for LINGER_S
    yields ``None``, and the batch goes out with what it has.
    """

    def __init__(self, fd: int, splitter: LineSplitter | UploadFrameSplitter) -> None:
        self.fd = fd
        self.splitter = splitter
        self.bytes_read = 0
        self.batch_waiting = False

    def __iter__(self) -> Iterator[bytes | None]:
        while True:
            if self.batch_waiting and not select.select([self.fd], [], [], LINGER_S)[0]:
                yield None
                continue
            data = os.read(self.fd, READ_SIZE_BYTES)
            self.bytes_read += len(data)
            yield from (self.splitter.feed(data) if data else self.splitter.finish())
            if not data:
                return


@dataclass
class Appended:
    first_entry_id: int
    last_entry_id: int
    last_add_confirmed: int


class BulkAppend:
    """Batches of input entries appended in order, each exactly once."""

    def __init__(self, api: Api, ledger_id: int, batch_size_bytes: int,
                 batch_entries: int) -> None:
        self.api = api
        self.ledger_id = ledger_id
        self.batch_size_bytes = batch_size_bytes
        self.batch_entries = batch_entries
        self.first: int | None = None  # id of the first input entry
        self.next: int | None = None  # id the next batch must get
        self.appended = self.skipped = self.batches = self.payload_bytes = 0
        self.last_add_confirmed = -1

    def run(self, entries: InputEntries, *, first_entry_id: int | None,
            total_bytes: int | None) -> dict[str, object]:
        started = time.monotonic()
        stream = iter(entries)
        with Progress(f"append to ledger {self.ledger_id}", unit="bytes",
                      total=total_bytes) as bar:
            try:
                if first_entry_id is not None:
                    self.first = self.next = first_entry_id
                    self._skip_present(stream, first_entry_id)
                    bar.update(entries.bytes_read, note=f"{self.skipped} entries already there")
                for batch in _batches(stream, entries, self.batch_size_bytes,
                                      self.batch_entries):
                    self._append(batch)
                    bar.update(entries.bytes_read, note=f"{self.appended} entries")
            except CliError as exc:
                exc.message += self._how_far()
                raise
        return {"ledger_id": self.ledger_id, "first_entry_id": self.first,
                "last_entry_id": None if self.next is None else self.next - 1,
                "appended": self.appended, "skipped": self.skipped, "batches": self.batches,
                "payload_bytes": self.payload_bytes,
                "last_add_confirmed": self.last_add_confirmed,
                "elapsed_s": round(time.monotonic() - started, 3)}

    def _how_far(self) -> str:
        done = "; nothing was appended"
        if self.appended and self.next is not None:
            done = (f"; {self.appended} entries were appended, ids "
                    f"{self.next - self.appended}..{self.next - 1}")
        if self.first is None or not (self.appended or self.skipped):
            return done
        return (f"{done}; rerun with --first-entry-id {self.first} and the same input "
                "to append the rest")

    # --- resuming ---------------------------------------------------------------

    def _ledger_lac(self) -> int:
        ledger = self.api.call(lambda c: get_ledger.sync_detailed(self.ledger_id, client=c))
        return ledger.last_add_confirmed

    def _skip_present(self, entries: Iterator[bytes | None], first_entry_id: int) -> None:
        """Consume the input entries the ledger already holds from ``first_entry_id``,
        checking each against the ledger."""
        lac = self._ledger_lac()
        self.last_add_confirmed = lac
        if lac < first_entry_id - 1:
            raise CliError(f"--first-entry-id {first_entry_id}: ledger {self.ledger_id}'s "
                           f"next entry is {lac + 1}")
        if lac < first_entry_id:
            return
        with contextlib.closing(self._crcs(first_entry_id, lac)) as present:
            for entry_id, crc in present:
                payload = next((e for e in entries if e is not None), None)
                if payload is None:
                    break
                if _crc(payload) != crc:
                    raise CliError(f"--first-entry-id {first_entry_id}: entry {entry_id} of "
                                   f"ledger {self.ledger_id} is not input entry "
                                   f"{entry_id - first_entry_id} (CRC32C differs)")
                self.skipped += 1
        self.next = first_entry_id + self.skipped

    def _crcs(self, first: int, last: int) -> Generator[tuple[int, int]]:
        with self.api.stream_frames(self.ledger_id, {"start": first, "end": last}) as chunks:
            for entry_id, crc, _ in decode_download_stream(chunks):
                yield entry_id, crc

    # --- one batch --------------------------------------------------------------

    def _append(self, batch: list[bytes]) -> None:
        done = self._send(batch)
        if self.next is not None and done.first_entry_id != self.next:
            raise CliError(f"another writer appends to ledger {self.ledger_id}: this batch "
                           f"got ids {done.first_entry_id}..{done.last_entry_id}, expected "
                           f"{self.next}..{self.next + len(batch) - 1}")
        if self.first is None:
            self.first = done.first_entry_id
        self.next = done.last_entry_id + 1
        self.appended += len(batch)
        self.batches += 1
        self.payload_bytes += sum(len(p) for p in batch)
        self.last_add_confirmed = done.last_add_confirmed

    def _send(self, batch: list[bytes]) -> Appended:
        """Append ``batch`` once: retries what is safe to retry, splits what is too big."""
        body = encode_upload(batch)
        for attempt in range(ATTEMPTS_MAX):
            try:
                # With ?first_entry_id a resend after a lost answer is plain: 200
                # when the batch is already there, 409 when something else is.
                response = add_entries_frames.sync_detailed(
                    self.ledger_id, client=self.api.client, body=File(payload=io.BytesIO(body)),
                    first_entry_id=given(self.next), x_ledger_password=self.api.password_param)
            except (httpx.ConnectError, httpx.ConnectTimeout):
                _wait(attempt)  # nothing was sent
                continue
            except httpx.TransportError as exc:
                landed = self._settle_lost_answer(batch, exc)
                if landed is not None:
                    return landed
                continue
            if response.status_code == 413 and len(batch) > 1:
                half = len(batch) // 2
                first, second = self._send(batch[:half]), self._send(batch[half:])
                return Appended(first.first_entry_id, second.last_entry_id,
                                second.last_add_confirmed)
            if response.status_code == 503:
                _wait(attempt, response.headers.get("retry-after"))
                continue
            added: BatchAdded = self.api.checked(response)
            return Appended(added.first_entry_id, added.last_entry_id, added.last_add_confirmed)
        raise CliError(f"gave up on a batch after {ATTEMPTS_MAX} attempts (server busy or "
                       "unreachable)")

    def _settle_lost_answer(self, batch: list[bytes], exc: Exception) -> Appended | None:
        """After a batch's answer was lost: the batch as appended, or None when it was not."""
        if self.next is None:
            raise CliError(f"the connection broke during the first batch ({exc}); whether it "
                           "was appended is unknown: look at `ledgerd ledger get "
                           f"{self.ledger_id}`, then rerun with --first-entry-id")
        for attempt in range(ATTEMPTS_MAX):
            try:
                lac = self._ledger_lac()
                break
            except CliError:
                _wait(attempt)  # the server may be restarting
        else:
            raise CliError(f"lost the answer to a batch ({exc}) and the server stays away")
        last = self.next + len(batch) - 1
        if lac == self.next - 1:
            return None
        if lac >= last:
            theirs = [crc for _, crc in self._crcs(self.next, last)]
            if theirs == [_crc(p) for p in batch]:
                return Appended(self.next, last, lac)
        raise CliError(f"lost the answer to a batch and ledger {self.ledger_id} now ends at "
                       f"entry {lac}, not {self.next - 1} or {last}: another writer appends")


def _batches(stream: Iterator[bytes | None], entries: InputEntries, size_bytes_max: int,
             count_max: int) -> Iterator[list[bytes]]:
    """Consecutive runs of entries within both limits, or what arrived before the input
    went quiet (an entry larger than ``size_bytes_max`` goes alone: the server says
    whether it fits)."""
    batch: list[bytes] = []
    size = 0
    for payload in stream:
        if payload is not None and batch and size + len(payload) > size_bytes_max:
            yield batch
            batch, size = [], 0
        if payload is not None:
            batch.append(payload)
            size += len(payload)
        if batch and (payload is None or len(batch) >= count_max or size >= size_bytes_max):
            yield batch
            batch, size = [], 0
        entries.batch_waiting = bool(batch)
    if batch:
        yield batch


def _crc(payload: bytes) -> int:
    import crc32c

    return int(crc32c.crc32c(payload))


def _wait(attempt: int, retry_after: str | None = None) -> None:
    """Back off before a retry: the server's Retry-After, else 0.1 s doubling."""
    try:
        wait_s = float(retry_after) if retry_after else 0.1 * 2**attempt
    except ValueError:
        wait_s = 0.1 * 2**attempt
    time.sleep(min(wait_s, RETRY_WAIT_S_MAX))
