"""The async Python client of append streams (DESIGN.md §5a), on ``websockets``.

::

    async with await AppendStream.open("http://127.0.0.1:8080", 7, password="pw") as s:
        pending = await s.send([b"one", b"two"])   # waits only for window room
        appended = await pending                     # durable: ids and LAC

Pipelining: up to ``in_flight_max`` messages (and ``in_flight_bytes_max`` payload
bytes) are unacknowledged at once.  Exactly-once resume: once the stream knows
where its entries land (``next_entry_id`` given, or after the first ack) every
message carries its explicit ``first_entry_id``; when the connection drops, the
client reconnects and sends the unacknowledged messages again with those ids, so
the server appends each exactly once (a copy already stored is acknowledged
again, anything else is ECONFLICT).  Errors are exceptions of ``common.errors``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self
from urllib.parse import urlsplit, urlunsplit

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus
from websockets.typing import Subprotocol

from common import errors

from ._codec import (
    SUBPROTOCOL,
    Acks,
    Failure,
    decode_server_message,
    encode_batch,
    status_of_close,
)
from ._problem import error_from_problem

log = logging.getLogger("ledgerd.streaming")

IN_FLIGHT_MAX = 16
IN_FLIGHT_BYTES_MAX = 16 * 1024 * 1024
RECONNECT_ATTEMPTS = 5
RECONNECT_DELAY_S = 0.1  # doubled after each failed attempt, up to the maximum
RECONNECT_DELAY_S_MAX = 2.0
# After a 503 (the server's write cache stayed full): wait this long, then resume.
BACKPRESSURE_PAUSE_S = 1.0
MESSAGE_SIZE_MAX = 64 * 1024 * 1024
# Close codes after which a stream with unacknowledged messages reconnects:
# going away (idle, restart), abnormal (no close frame), server error, restart.
_RESUMABLE_CLOSE_CODES = frozenset({1001, 1006, 1011, 1012, 1013})


@dataclass(frozen=True, slots=True)
class Appended:
    """One acknowledged message: its entry ids and the ledger's LAC at the ack."""

    first_entry_id: int
    last_entry_id: int
    last_add_confirmed: int


@dataclass(eq=False)
class _Message:
    payloads: Sequence[bytes]
    payload_bytes: int
    done: asyncio.Future[Appended]
    first_entry_id: int | None = None
    seq: int = -1  # on the current connection
    wire: bytes = field(default=b"", repr=False)

    @property
    def count(self) -> int:
        return len(self.payloads)

    def encoded(self) -> bytes:
        """The message as sent now (re-encoded once its first id became known)."""
        if not self.wire or (self.first_entry_id is not None
                             and int.from_bytes(self.wire[:8], "big") != self.first_entry_id):
            self.wire = encode_batch(self.payloads, self.first_entry_id)
        return self.wire


def stream_url(base_url: str, ledger_id: int) -> str:
    """``http://host:port`` (or ws://, https://, wss://) → the stream's ws(s) URL."""
    parts = urlsplit(base_url)
    scheme = {"http": "ws", "https": "wss"}.get(parts.scheme, parts.scheme)
    if scheme not in ("ws", "wss"):
        raise errors.BadRequest(f"not an http(s) or ws(s) URL: {base_url!r}")
    path = parts.path.rstrip("/") + f"/api/v1/ledgers/{ledger_id}/entries/stream"
    return urlunsplit((scheme, parts.netloc, path, "", ""))


class AppendStream:
    """An append stream to one ledger; make it with :meth:`open`."""

    def __init__(self, url: str, ledger_id: int, *, password: str, next_entry_id: int | None,
                 in_flight_max: int, in_flight_bytes_max: int, reconnect_attempts: int,
                 reconnect_delay_s: float, connect_options: dict[str, Any]) -> None:
        self.url = stream_url(url, ledger_id)
        self.ledger_id = ledger_id
        self._password = password
        self._next_id = next_entry_id  # where the next new message's entries land
        self._in_flight_max = in_flight_max
        self._in_flight_bytes_max = in_flight_bytes_max
        self._reconnect_attempts = reconnect_attempts
        self._reconnect_delay_s = reconnect_delay_s
        self._connect_options = connect_options
        self._unacked: deque[_Message] = deque()
        self._unacked_bytes = 0
        self._next_seq = 0
        self._room = asyncio.Event()
        self._room.set()
        self._send_lock = asyncio.Lock()
        self._connection: ClientConnection | None = None
        self._reader: asyncio.Task[None] | None = None
        self._failure: errors.LedgerdError | None = None
        self._closing = False
        self.ack_messages = 0  # server messages with acks received (one per group commit)
        self.reconnects = 0
        self.backpressure_pauses = 0
        self._paused_by_server = False  # a 503 arrived: resume once the server closed
        self._resume_not_before = 0.0  # loop time

    @classmethod
    async def open(cls, url: str, ledger_id: int, *, password: str = "",
                   next_entry_id: int | None = None, in_flight_max: int = IN_FLIGHT_MAX,
                   in_flight_bytes_max: int = IN_FLIGHT_BYTES_MAX,
                   reconnect_attempts: int = RECONNECT_ATTEMPTS,
                   reconnect_delay_s: float = RECONNECT_DELAY_S,
                   **connect_options: Any) -> AppendStream:
        """Connect (``url`` is the service's base URL).  ``next_entry_id``: the id
        the first entry will get, when the caller knows it (it is the ledger's only
        writer): then even a drop before the first ack resumes exactly once.  After a
        drop it tries ``reconnect_attempts`` times, ``reconnect_delay_s`` apart at
        first, doubling up to 2 s.  ``connect_options`` go to ``websockets.connect``
        (e.g. ``ssl``)."""
        stream = cls(url, ledger_id, password=password, next_entry_id=next_entry_id,
                     in_flight_max=in_flight_max, in_flight_bytes_max=in_flight_bytes_max,
                     reconnect_attempts=reconnect_attempts,
                     reconnect_delay_s=reconnect_delay_s, connect_options=connect_options)
        await stream._connect()
        return stream

    # --- the caller's side ------------------------------------------------------

    @property
    def next_entry_id(self) -> int | None:
        """The id the next new entry will get, once known."""
        return self._next_id

    @property
    def unacknowledged(self) -> int:
        return len(self._unacked)

    async def send(self, payloads: Sequence[bytes]) -> asyncio.Future[Appended]:
        """Queue one batch (one journal record: all or nothing); waits while the
        window is full.  The returned future resolves once the batch is durable,
        or fails with the stream's error."""
        if not payloads:
            raise errors.BadRequest("a stream message needs at least one entry")
        size = sum(len(p) for p in payloads)
        while not self._has_room(size):
            self._raise_failure()
            self._room.clear()
            await self._room.wait()
        async with self._send_lock:
            self._raise_failure()
            if self._closing:
                raise errors.BadRequest("the stream is closed")
            message = _Message(payloads, size, asyncio.get_running_loop().create_future())
            if self._next_id is not None:
                message.first_entry_id = self._next_id
                self._next_id += message.count
            self._unacked.append(message)
            self._unacked_bytes += size
            if self._connection is None:
                await self._reconnect_and_resend()  # also sends this message
            else:
                message.seq, self._next_seq = self._next_seq, self._next_seq + 1
                await self._transmit(self._connection, message)
        return message.done

    async def append(self, payloads: Sequence[bytes]) -> Appended:
        """:meth:`send`, then wait for its ack."""
        return await (await self.send(payloads))

    async def drain(self) -> None:
        """Wait until every message sent is acknowledged (raises the stream's error)."""
        while self._unacked:
            self._raise_failure()
            with contextlib.suppress(errors.LedgerdError):
                await asyncio.shield(self._unacked[-1].done)
        self._raise_failure()

    async def close(self) -> None:
        """Drain, then close the connection."""
        try:
            if self._failure is None:
                await self.drain()
        finally:
            self._closing = True
            if self._connection is not None:
                await self._connection.close()
            if self._reader is not None:
                self._reader.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._reader

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        if exc is None:
            await self.close()
            return
        self._closing = True
        with contextlib.suppress(Exception):
            await self.close()

    def _has_room(self, size: int) -> bool:
        if not self._unacked:
            return True
        return (len(self._unacked) < self._in_flight_max
                and self._unacked_bytes + size <= self._in_flight_bytes_max)

    def _raise_failure(self) -> None:
        if self._failure is not None:
            raise self._failure

    @staticmethod
    async def _transmit(connection: ClientConnection, message: _Message) -> None:
        # A dropped connection keeps the message unacknowledged: the reader sees
        # the drop and sends it again on the next connection.
        with contextlib.suppress(ConnectionClosed):
            await connection.send(message.encoded())

    # --- connection -----------------------------------------------------------------

    async def _connect(self) -> None:
        header = self._password.encode().decode("latin-1")  # UTF-8 bytes on the wire
        options: dict[str, Any] = {
            "subprotocols": [Subprotocol(SUBPROTOCOL)],
            "additional_headers": {"X-Ledger-Password": header} if self._password else {},
            "compression": None, "max_size": MESSAGE_SIZE_MAX, "open_timeout": 30,
            **self._connect_options}
        try:
            self._connection = await connect(self.url, **options)
        except InvalidStatus as exc:
            raise _refusal(exc, self.ledger_id) from exc
        except (OSError, TimeoutError, InvalidHandshake) as exc:
            raise errors.ConnectionLost(f"cannot open {self.url}: {exc}") from exc
        self._next_seq = 0
        self._reader = asyncio.create_task(self._read(self._connection),
                                           name=f"stream-reader-{self.ledger_id}")

    async def _read(self, connection: ClientConnection) -> None:
        try:
            async for text in connection:
                if isinstance(text, bytes):
                    raise errors.InvariantViolation("a binary message from the server")
                self._on_message(decode_server_message(text))
        except ConnectionClosed:
            pass
        except errors.LedgerdError as exc:
            self._fail(exc)
            await connection.close()
            return
        if self._failure is not None or self._closing:
            return
        await self._after_close(connection)

    def _on_message(self, message: Acks | Failure) -> None:
        if isinstance(message, Failure):
            head = self._unacked[0] if self._unacked else None
            exc = error_from_problem(message.problem, self.ledger_id)
            exc.add_note(f"stream message {message.seq} of this connection was refused; "
                         f"{len(self._unacked)} message(s) unacknowledged, none appended")
            errors.invariant(head is not None and head.seq == message.seq,
                             f"error for message {message.seq}, not the oldest unacked")
            if isinstance(exc, errors.Backpressure) and self._can_resend():
                # Nothing from this message on was appended: send it all again after
                # a pause, on a new connection (the server closes this one).
                self._paused_by_server = True
                self.backpressure_pauses += 1
                self._resume_not_before = (asyncio.get_running_loop().time()
                                           + BACKPRESSURE_PAUSE_S)
                return
            self._fail(exc)
            return
        self.ack_messages += 1
        for ack in message.acks:
            errors.invariant(bool(self._unacked) and self._unacked[0].seq == ack.seq,
                             f"ack for message {ack.seq}, not the oldest unacked")
            item = self._unacked.popleft()
            self._unacked_bytes -= item.payload_bytes
            errors.invariant(ack.last_entry_id - ack.first_entry_id + 1 == item.count,
                             f"ack {ack} does not cover the message's {item.count} entries")
            if not item.done.done():
                item.done.set_result(Appended(ack.first_entry_id, ack.last_entry_id,
                                              message.last_add_confirmed))
            if self._next_id is None:
                self._learn_position(ack.last_entry_id + 1)
        self._room.set()

    def _learn_position(self, next_after_acked: int) -> None:
        """After an ack the ids of every later message are known (one writer)."""
        position = next_after_acked
        for item in self._unacked:
            if item.first_entry_id is None:
                item.first_entry_id = position
            position = item.first_entry_id + item.count
        if self._next_id is None:
            self._next_id = position

    def _fail(self, exc: errors.LedgerdError) -> None:
        if self._failure is None:
            self._failure = exc
        while self._unacked:
            item = self._unacked.popleft()
            if not item.done.done():
                item.done.set_exception(exc)
                item.done.add_done_callback(_retrieved)
        self._unacked_bytes = 0
        self._room.set()

    async def _after_close(self, connection: ClientConnection) -> None:
        """The server closed without an error message, or the connection dropped."""
        if self._connection is connection:
            self._connection = None
        code = connection.close_code if connection.close_code is not None else 1006
        status = status_of_close(code)
        if self._paused_by_server:
            self._paused_by_server = False
            status, code = None, 1013  # "try again later": resumable
        if status is None and code == 1009:
            status = 413  # the server's own limit on message size
        if status is not None:
            self._fail(error_from_problem(
                {"status": status, "code": "EBADREQ" if status == 413 else "EIO",
                 "detail": connection.close_reason or f"closed with code {code}"},
                self.ledger_id))
        elif self._unacked and code not in _RESUMABLE_CLOSE_CODES:
            self._fail(errors.ConnectionLost(f"stream closed with code {code} "
                                             f"{connection.close_reason!r}"))
        elif self._unacked:
            async with self._send_lock:
                if self._connection is None and self._failure is None:
                    # A failure is kept in self._failure for the caller.
                    with contextlib.suppress(errors.LedgerdError):
                        await self._reconnect_and_resend()
        # Nothing unacknowledged (an idle close): the next send reconnects.

    def _can_resend(self) -> bool:
        return self._reconnect_attempts > 0 and all(
            m.first_entry_id is not None for m in self._unacked)

    async def _reconnect_and_resend(self) -> None:
        """Open a new connection and send every unacknowledged message again, each
        with its explicit first entry id (under the send lock)."""
        if any(m.first_entry_id is None for m in self._unacked):
            self._fail(errors.ConnectionLost(
                "the stream dropped before its first ack; without next_entry_id the "
                "unacknowledged messages cannot be sent again exactly once"))
            self._raise_failure()
        pause_s = self._resume_not_before - asyncio.get_running_loop().time()
        if pause_s > 0:
            await asyncio.sleep(pause_s)  # the server answered 503: give it the pause
        try:
            await self._reconnect()
        except errors.LedgerdError as exc:
            self._fail(exc)
            raise
        connection = self._connection
        assert connection is not None
        if self._unacked:
            self.reconnects += 1
        for message in self._unacked:
            message.seq, self._next_seq = self._next_seq, self._next_seq + 1
            await self._transmit(connection, message)

    async def _reconnect(self) -> None:
        delay = self._reconnect_delay_s
        for attempt in range(self._reconnect_attempts):
            try:
                await self._connect()
                return
            except (errors.ConnectionLost, errors.Backpressure) as exc:
                if attempt == self._reconnect_attempts - 1:
                    raise
                log.info("reconnecting to %s in %.1f s: %s", self.url, delay, exc)
            await asyncio.sleep(delay)  # back-off between attempts, not synchronisation
            delay = min(delay * 2, RECONNECT_DELAY_S_MAX)
        raise errors.ConnectionLost(f"cannot reconnect to {self.url}")


def _refusal(exc: InvalidStatus, ledger_id: int) -> errors.LedgerdError:
    response = exc.response
    problem: dict[str, Any] = {"status": response.status_code, "code": "EIO",
                               "detail": f"upgrade refused with HTTP {response.status_code}"}
    with contextlib.suppress(ValueError):
        body = json.loads(response.body or b"")
        if isinstance(body, dict):
            problem.update(body)
    if response.status_code == 503 and problem.get("code") == "EIO":
        problem["code"] = "ETOOMANYREQUESTS"  # not ready yet: worth another attempt
    return error_from_problem(problem, ledger_id)


def _retrieved(future: asyncio.Future[Appended]) -> None:
    # A caller that only awaits later sends still hears of the failure from them.
    future.exception()
