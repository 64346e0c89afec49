"""The §5a wire messages (pure: bytes and text in, values out; no I/O).

Client → server, one binary WebSocket message per batch::

    offset  size  field            endianness
    0       8     first_entry_id   u64 big-endian; 2^64-1 (ASSIGN): the server assigns
    8       4     length           u32 big-endian  ┐ one frame per entry,
    12      n     payload                          ┘ repeated, at least one

Server → client, text messages (JSON)::

    {"acks": [[seq, first_entry_id, last_entry_id], ...], "last_add_confirmed": n}
    {"seq": n, "error": {"type", "title", "status", "detail", "code"}}

``seq`` counts the client messages of one connection from 0.  After an error
the server closes with code ``4000 + status`` (:func:`close_code`).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from common.errors import BadRequest, EntryTooLarge, InvariantViolation
from common.frames import UPLOAD_HEADER, decode_upload, encode_upload

SUBPROTOCOL = "ledgerd.v1"
ASSIGN = 2**64 - 1  # first_entry_id meaning "the next id, whatever it is"
CLOSE_CODE_BASE = 4000

_HEAD = struct.Struct(">Q")
_FIRST_FRAME = struct.Struct(">QI")
if _HEAD.size != 8 or UPLOAD_HEADER.size != 4 or _FIRST_FRAME.size != 12:  # pragma: no cover
    raise ImportError("stream message header sizes changed")
HEAD_SIZE_BYTES = _HEAD.size
FRAME_OVERHEAD_BYTES = UPLOAD_HEADER.size


class Batch(NamedTuple):
    """One decoded client message: where it must start (None: anywhere), its
    entries and their total size (a tuple: built once per message, in C)."""

    first_entry_id: int | None
    payloads: list[bytes]
    payload_bytes: int


@dataclass(frozen=True, slots=True)
class Ack:
    seq: int
    first_entry_id: int
    last_entry_id: int


@dataclass(frozen=True, slots=True)
class Acks:
    """One server message acknowledging one or more client messages, in order."""

    acks: tuple[Ack, ...]
    last_add_confirmed: int


@dataclass(frozen=True, slots=True)
class Failure:
    """The server refused client message ``seq``; ``problem`` is its problem+json."""

    seq: int
    problem: Mapping[str, Any]

    @property
    def status(self) -> int:
        return int(self.problem.get("status", 500))


@dataclass(frozen=True, slots=True)
class Limits:
    """The limits of ``entries/batch``, which a stream message obeys too, and the
    largest message that can pass them (framing included)."""

    entry_count_max: int
    entry_size_bytes_max: int
    batch_size_bytes_max: int
    message_size_bytes_max: int = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "message_size_bytes_max",
                           HEAD_SIZE_BYTES + self.batch_size_bytes_max
                           + FRAME_OVERHEAD_BYTES * self.entry_count_max)


def encode_batch(payloads: Sequence[bytes], first_entry_id: int | None = None) -> bytes:
    """One client message; ``first_entry_id`` None lets the server assign ids."""
    if not payloads:
        raise BadRequest("a stream message needs at least one entry")
    head = _HEAD.pack(ASSIGN if first_entry_id is None else first_entry_id)
    return head + encode_upload(payloads)


def decode_batch(message: bytes, limits: Limits) -> Batch:
    """A client message, checked against ``limits``: BadRequest (400) when it is
    shorter than 8 bytes, holds no frame, a cut frame or too many frames;
    EntryTooLarge (413) for a frame or a batch over the size limits."""
    size = len(message)
    if size < HEAD_SIZE_BYTES:
        raise BadRequest(f"a stream message is at least {HEAD_SIZE_BYTES} bytes, not {size}")
    if size == HEAD_SIZE_BYTES:
        raise BadRequest("a stream message needs at least one entry")
    if size > limits.message_size_bytes_max:
        raise EntryTooLarge(f"message of {size} bytes exceeds the batch limits")
    if size < _FIRST_FRAME.size:
        raise BadRequest(f"frame 0: cut length prefix at byte {HEAD_SIZE_BYTES}")
    first, length = _FIRST_FRAME.unpack_from(message)
    first_entry_id = None if first == ASSIGN else first
    if size == _FIRST_FRAME.size + length:  # the common case: one entry
        _check_entry(0, length, limits)
        if length > limits.batch_size_bytes_max:
            raise EntryTooLarge(f"batch payloads exceed MAX_BATCH_SIZE "
                                f"({limits.batch_size_bytes_max} bytes)")
        return Batch(first_entry_id, [message[_FIRST_FRAME.size:]], length)
    payloads, total = _frames(message, limits)
    return Batch(first_entry_id, payloads, total)


def _check_entry(index: int, length: int, limits: Limits) -> None:
    if length > limits.entry_size_bytes_max:
        raise EntryTooLarge(f"frame {index}: entry of {length} bytes exceeds "
                            f"MAX_ENTRY_SIZE ({limits.entry_size_bytes_max})")


def _frames(message: bytes, limits: Limits) -> tuple[list[bytes], int]:
    payloads = decode_upload(memoryview(message)[HEAD_SIZE_BYTES:],
                             count_max=limits.entry_count_max,
                             size_max=limits.entry_size_bytes_max)
    total = sum(len(p) for p in payloads)
    if total > limits.batch_size_bytes_max:
        raise EntryTooLarge(f"batch payloads exceed MAX_BATCH_SIZE "
                            f"({limits.batch_size_bytes_max} bytes)")
    return payloads, total


def encode_acks(acks: Iterable[tuple[int, int, int]], last_add_confirmed: int) -> str:
    """The server's ack message (built by hand: it is on every group commit's path)."""
    items = ",".join(f"[{seq},{first},{last}]" for seq, first, last in acks)
    return f'{{"acks":[{items}],"last_add_confirmed":{last_add_confirmed}}}'


def encode_failure(seq: int, problem: Mapping[str, Any]) -> str:
    return json.dumps({"seq": seq, "error": dict(problem)}, separators=(",", ":"))


def decode_server_message(text: str) -> Acks | Failure:
    """A server message; InvariantViolation when it is not one of §5a's two shapes."""
    try:
        doc = json.loads(text)
        if "acks" in doc:
            acks = tuple(Ack(int(s), int(f), int(last)) for s, f, last in doc["acks"])
            return Acks(acks, int(doc["last_add_confirmed"]))
        problem = doc["error"]
        if not isinstance(problem, dict):
            raise TypeError("error is not an object")
        return Failure(int(doc["seq"]), problem)
    except (ValueError, TypeError, KeyError) as exc:
        raise InvariantViolation(f"not a ledgerd stream message: {text[:200]!r}") from exc


def close_code(status: int) -> int:
    """The close code after an error of HTTP ``status`` (409 → 4409)."""
    return CLOSE_CODE_BASE + status


def status_of_close(code: int) -> int | None:
    """The HTTP status a close code carries, None for the RFC 6455 codes."""
    status = code - CLOSE_CODE_BASE
    return status if 100 <= status <= 599 else None
