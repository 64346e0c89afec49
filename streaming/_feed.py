"""Stream entries read from a file (stdin for the CLI) into a ledger.

The splitters are pure (bytes in, entries out); :func:`append_from_file` reads
the file on a worker thread, groups entries into messages and keeps the stream's
window full, reporting progress as acks arrive.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import BinaryIO, Literal

from common.errors import BadRequest

from ._client import Appended, AppendStream

InputFormat = Literal["lines", "frames"]
READ_SIZE_BYTES = 1024 * 1024
ENTRIES_PER_MESSAGE = 1000
MESSAGE_BYTES_MAX = 1024 * 1024


@dataclass
class Progress:
    """What is acknowledged so far."""

    entries: int = 0
    payload_bytes: int = 0
    first_entry_id: int | None = None
    last_entry_id: int | None = None
    last_add_confirmed: int = -1


def split_lines(buffer: bytes, *, final: bool) -> tuple[list[bytes], bytes]:
    """(entries, rest): one entry per ``\\n``-terminated line, without the ``\\n``;
    at the end of the input (``final``) a last unterminated line is one too."""
    lines = buffer.split(b"\n")
    rest = lines.pop()
    if final and rest:
        return [*lines, rest], b""
    return lines, rest


def split_frames(buffer: bytes, *, final: bool) -> tuple[list[bytes], bytes]:
    """(entries, rest) of u32 big-endian length-prefixed frames; a frame cut by
    the end of the input (``final``) is BadRequest."""
    entries: list[bytes] = []
    offset = 0
    while len(buffer) - offset >= 4:
        length = int.from_bytes(buffer[offset:offset + 4], "big")
        if len(buffer) - offset - 4 < length:
            break
        entries.append(buffer[offset + 4:offset + 4 + length])
        offset += 4 + length
    rest = buffer[offset:]
    if final and rest:
        raise BadRequest(f"the input ends inside a frame ({len(rest)} bytes left over)")
    return entries, rest


SPLITTERS = {"lines": split_lines, "frames": split_frames}


def group(entries: list[bytes], *, count_max: int, bytes_max: int) -> list[list[bytes]]:
    """Consecutive messages of at most ``count_max`` entries and ``bytes_max``
    payload bytes (an entry larger than that is a message of its own)."""
    messages: list[list[bytes]] = []
    current: list[bytes] = []
    size = 0
    for entry in entries:
        if current and (len(current) >= count_max or size + len(entry) > bytes_max):
            messages.append(current)
            current, size = [], 0
        current.append(entry)
        size += len(entry)
    if current:
        messages.append(current)
    return messages


async def append_from_file(
    source: BinaryIO, url: str, ledger_id: int, *, password: str = "",
    input_format: InputFormat = "lines", next_entry_id: int | None = None,
    entries_per_message: int = ENTRIES_PER_MESSAGE,
    message_bytes_max: int = MESSAGE_BYTES_MAX,
    progress: Callable[[Progress], None] | None = None,
) -> Progress:
    """Append every entry of ``source`` (lines or frames) over one append stream;
    returns what was acknowledged, calling ``progress`` after every ack.  Raises
    the stream's error (``common.errors``) once what came before it is acked."""
    split = SPLITTERS[input_format]
    done = Progress()

    def acknowledged(future: asyncio.Future[Appended], *, count: int, size: int) -> None:
        if future.cancelled() or future.exception() is not None:
            return
        appended = future.result()
        done.entries += count
        done.payload_bytes += size
        if done.first_entry_id is None:
            done.first_entry_id = appended.first_entry_id
        done.last_entry_id = appended.last_entry_id
        done.last_add_confirmed = appended.last_add_confirmed
        if progress is not None:
            progress(done)

    read = getattr(source, "read1", source.read)
    async with await AppendStream.open(url, ledger_id, password=password,
                                       next_entry_id=next_entry_id) as stream:
        rest = b""
        while True:
            chunk = await asyncio.to_thread(read, READ_SIZE_BYTES)
            entries, rest = split(rest + chunk, final=not chunk)
            for message in group(entries, count_max=entries_per_message,
                                 bytes_max=message_bytes_max):
                future = await stream.send(message)
                future.add_done_callback(
                    functools.partial(acknowledged, count=len(message),
                                      size=sum(len(p) for p in message)))
            if not chunk:
                break
        await stream.drain()
    return done
