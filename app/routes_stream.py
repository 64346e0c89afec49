"""``GET /api/v1/ledgers/{id}/entries/stream``: append streams over WebSocket (DESIGN.md §5a).

The upgrade is refused, with the usual problem+json answer, unless the ledger
exists, the ``X-Ledger-Password`` header is its password, it is OPEN, the bookie
is writable and the client offered subprotocol ``ledgerd.v1``.

Each accepted stream runs three coroutines on the event loop:

- the receiver (the route itself) reads messages and decodes them
  (:func:`streaming.decode_batch`), and the submitter hands them to the engine,
  in order.  The submitter runs once the receiver waits for the socket, so the
  messages that one read of the socket brought in go to the engine together, in
  one call (``LedgerApi.submit``: one add lock, one completion, one journal
  record for the run within the batch limits); the call runs right on the event
  loop (``block=False``) and only goes to a worker thread when the engine would
  wait (scrypt, a read-back on resume, full caches), submitting nothing else
  meanwhile.  The receiver reads
  no further message while the unacknowledged messages' bytes (entries and
  their framing, so that empty entries count too; read or submitted) are at or
  past ``STREAM_WINDOW_BYTES``: the socket then backs up (TCP back-pressure);
  nothing is dropped.
- the acker is the stream's only writer: it sends acks, the error and the close.
  A group commit resolves the futures of everything it made durable in one go
  on a journal thread, which wakes this coroutine once; the acks of
  one group commit go out together because the acker waits while a message
  already durable has not resolved yet (``Pending.synced``: the rest of its
  group is being resolved right then).  The engine knows each message's place
  in the journal, so the grouping is exact; ``app/`` knows no offsets.
- the idle watch closes the stream (1001) after ``STREAM_IDLE_TIMEOUT`` without
  a client message and with nothing in flight.

Keepalive pings are the WebSocket server's (ASGI has no ping message): uvicorn
pings every ``ws_ping_interval`` and drops a peer whose pong does not come
within ``ws_ping_timeout`` (:func:`websocket_server_options`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import anyio.to_thread
from fastapi import APIRouter, WebSocket
from starlette.responses import Response

from common import errors
from ledger import BatchAddResult, LedgerState, Pending
from node import LedgerApi
from streaming import SUBPROTOCOL, Batch, Limits, close_code, decode_batch, encode_acks
from streaming import encode_failure as encode_failure_message

from .deps import Service, authorize, ledger_password
from .errors import problem, response_for
from .models import ID_MAX
from .settings import ServiceSettings

log = logging.getLogger("ledgerd.stream")

router = APIRouter(prefix="/api/v1/ledgers", tags=["ledgers"])

STREAM_PATH = "/api/v1/ledgers/{ledger_id}/entries/stream"
# Close code and reason of an idle stream (RFC 6455: "going away").
IDLE_CLOSE_CODE = 1001
# How often the idle watch looks again while messages are in flight past the deadline.
_IDLE_RECHECK_S = 1.0
PING_INTERVAL_S = 20.0
PING_TIMEOUT_S = 20.0
# Messages handed to the engine in one call at most: a run holds the add lock
# (and other streams' adds) while it is queued.
SUBMIT_MESSAGES_MAX = 256


def stream_limits(settings: ServiceSettings) -> Limits:
    """The limits of ``entries/batch``, which every stream message obeys too."""
    return Limits(entry_count_max=settings.max_batch_entries,
                  entry_size_bytes_max=settings.max_entry_size,
                  batch_size_bytes_max=settings.batch_size_max)


def websocket_server_options(settings: ServiceSettings) -> dict[str, Any]:
    """uvicorn's WebSocket options for this service (``uvicorn.run(app, **these)``):
    websockets' sans-I/O implementation, named rather than left to ``auto`` (which
    picks whichever library is installed): of uvicorn's three it spends the least
    CPU per stream message (docs/benchmarks.md), and it hands the route every
    message of one socket read without a pass of the event loop in between,
    which is what lets the submitter batch them; messages up to the largest valid
    stream message plus one MiB are read (a larger one is closed with 1009 by the
    server before the route sees it; between the two, the route answers 413 /
    4413); no permessage-deflate (payloads are the client's bytes, acks are short:
    compression costs CPU for nothing); keepalive pings every 20 s, a peer silent
    for 20 s more is dropped."""
    return {"ws": "websockets-sansio",
            "ws_max_size": stream_limits(settings).message_size_bytes_max + 1024 * 1024,
            "ws_per_message_deflate": False,
            "ws_ping_interval": PING_INTERVAL_S,
            "ws_ping_timeout": PING_TIMEOUT_S}


@dataclass(slots=True)
class _Received:
    """A message read and not yet handed to the engine; ``batch`` None: it did
    not decode (``error``), and the stream ends with it."""

    seq: int
    batch: Batch | None
    error: Exception | None
    message_bytes: int
    received_s: float


@dataclass(slots=True)
class _InFlight:
    seq: int
    pending: Pending[BatchAddResult]
    message_bytes: int
    received_s: float


def _problem_body(exc: Exception) -> tuple[int, dict[str, Any]]:
    """(status, problem+json body) of an error, mapped as every route maps it."""
    if isinstance(exc, errors.LedgerdError):
        response = response_for(exc)
    else:
        log.error("append stream failed", exc_info=exc)
        response = problem(500, "EIO", "internal server error")
    return response.status_code, json.loads(bytes(response.body))


@router.websocket("/{ledger_id}/entries/stream", name="append_stream")
async def append_stream(websocket: WebSocket, ledger_id: str) -> None:
    """Append entries over a WebSocket (DESIGN.md §5a; protocol in docs/api.md)."""
    service: Service = websocket.app.state.service
    admitted = await _admit(websocket, service, ledger_id)
    if admitted is None:
        return
    ledgers, lid, password = admitted
    await websocket.accept(subprotocol=SUBPROTOCOL)
    stream = _Stream(websocket, service, ledgers, lid, password)
    service.metrics.streams_open.inc()
    acker = asyncio.create_task(stream.ack_loop(), name=f"stream-acker-{lid}")
    watch = asyncio.create_task(stream.idle_watch(), name=f"stream-idle-{lid}")
    try:
        client_left = await stream.receive_loop()
        if client_left:
            acker.cancel()
        await asyncio.gather(acker, return_exceptions=True)
    finally:
        watch.cancel()
        acker.cancel()
        stream.release()
        service.metrics.streams_open.dec()


async def _admit(websocket: WebSocket, service: Service,
                 raw_id: str) -> tuple[LedgerApi, int, str] | None:
    """(the node's ledgers, ledger id, password) of an acceptable upgrade; otherwise
    the refusal is sent (problem+json with its HTTP status) and None returned."""
    node = service.node
    if node is None or node.shutting_down:
        await _refuse(websocket, problem(503, "EIO", "the bookie is not running"))
        return None
    if SUBPROTOCOL not in websocket.scope.get("subprotocols", ()):
        await _refuse(websocket, problem(400, "EBADREQ",
                                         f"append streams need subprotocol {SUBPROTOCOL}"))
        return None
    if not raw_id.isascii() or not raw_id.isdigit() or int(raw_id) > ID_MAX:
        await _refuse(websocket, problem(422, "EBADREQ",
                                         "ledger_id: an integer 0 ≤ id ≤ 2^63-1"))
        return None
    ledger_id = int(raw_id)
    ledgers = node.ledgers
    try:
        password = ledger_password(websocket.headers.get("x-ledger-password"))
        await authorize(websocket, node, ledger_id, password)  # through the password gate
        info = await ledgers.get(ledger_id)
        if info.state == LedgerState.FENCED:
            raise errors.LedgerFenced(f"ledger {ledger_id} is fenced")
        if info.state == LedgerState.CLOSED:
            raise errors.LedgerClosed(f"ledger {ledger_id} is closed")
        ledgers.check_writable()
    except errors.LedgerdError as exc:
        await _refuse(websocket, response_for(exc))
        return None
    return ledgers, ledger_id, password


async def _refuse(websocket: WebSocket, response: Response) -> None:
    if "websocket.http.response" in websocket.scope.get("extensions", {}):
        await websocket.send_denial_response(response)
    else:  # a server without the denial extension: the status rides on the close code
        await websocket.close(close_code(response.status_code))


class _Stream:
    """One accepted stream (see the module docstring for its three coroutines)."""

    def __init__(self, websocket: WebSocket, service: Service, ledgers: LedgerApi,
                 ledger_id: int, password: str) -> None:
        settings = service.settings
        self.websocket = websocket
        self.ledgers = ledgers
        self.metrics = service.metrics
        self.ledger_id = ledger_id
        self.password = password
        self.limits = stream_limits(settings)
        self.window_bytes = settings.stream_window_bytes
        self.idle_timeout_s = settings.stream_idle_timeout
        self.loop = asyncio.get_running_loop()
        self.received: deque[_Received] = deque()
        self.submit_scheduled = False
        self.submitting: asyncio.Task[None] | None = None  # an engine call on a worker thread
        self.reading_stopped = False  # a message failed to decode: read no further
        self.in_flight: deque[_InFlight] = deque()
        self.unacked_bytes = 0
        # The gauge and the counter are brought up to date once per ack message
        # (and before the receiver waits for room), not once per message.
        self.unacked_bytes_reported = 0
        self.received_unreported = 0
        self.next_seq = 0
        self.last_message_s = self.loop.time()
        # Set by the receiver: message ``seq`` failed before it was appended.
        self.refused: tuple[int, Exception] | None = None
        self.idle = False
        self.closed = False
        self.wake = asyncio.Event()  # the acker has something to look at
        self.room = asyncio.Event()  # the window has room again, or the stream ended
        self.wake_scheduled = False

    # --- receiver and submitter ---------------------------------------------------

    async def receive_loop(self) -> bool:
        """Read messages until the stream ends; True when the client left."""
        while not self.closed and self.refused is None and not self.reading_stopped:
            while self.unacked_bytes >= self.window_bytes and not self.closed:
                self._report()
                self.room.clear()
                await self.room.wait()
            if self.closed:
                return False
            message = await self.websocket.receive()
            if message["type"] == "websocket.disconnect":
                return not self.closed  # our own close comes back as a disconnect
            if self.closed or self.refused is not None:
                return False  # queued before the close went out: not appended
            self.last_message_s = self.loop.time()
            seq, self.next_seq = self.next_seq, self.next_seq + 1
            self.received_unreported += 1
            data = message.get("bytes")
            try:
                if data is None:
                    raise errors.BadRequest("stream messages are binary (u64 first_entry_id, "
                                            "then frames), not text")
                item = _Received(seq, decode_batch(data, self.limits), None, len(data),
                                 time.perf_counter())
            except Exception as exc:
                item = _Received(seq, None, exc, 0, 0.0)
                self.reading_stopped = True  # messages after a failed one are not appended
            self._queue(item)
        return False

    def _queue(self, item: _Received) -> None:
        self.received.append(item)
        self.unacked_bytes += item.message_bytes
        if not self.submit_scheduled:
            # Runs once the receiver waits for the socket: what one read brought
            # in is queued by then, and goes to the engine in one call.
            self.submit_scheduled = True
            self.loop.call_soon(self._submit)

    def _submit(self) -> None:
        """Hand the messages read so far to the engine, in order, as few calls as
        it takes; the first that fails ends the stream, unappended with all
        after it."""
        self.submit_scheduled = False
        if self.submitting is not None:
            return  # a worker thread has the engine call; it submits the rest after
        try:
            while self.received and self.refused is None and not self.closed:
                items = self._leading_batches()
                if not items:  # the head did not decode
                    failed = self.received[0]
                    assert failed.error is not None
                    self._refuse(failed.seq, failed.error)
                    return
                try:
                    pendings = self._submit_items(items, False)
                except errors.WouldBlock:
                    self.submitting = asyncio.create_task(self._submit_blocking(items),
                                                          name=f"stream-submit-{self.ledger_id}")
                    return
                self._submitted(items, pendings)
        except Exception as exc:
            self._refuse(self.received[0].seq if self.received else self.next_seq, exc)

    def _leading_batches(self) -> list[_Received]:
        """The decoded messages at the head of the queue (a bounded number)."""
        items: list[_Received] = []
        for item in self.received:
            if item.batch is None or len(items) >= SUBMIT_MESSAGES_MAX:
                break
            items.append(item)
        return items

    def _submit_items(self, items: list[_Received],
                      block: bool) -> list[Pending[BatchAddResult]]:
        batches = [(i.batch.first_entry_id, i.batch.payloads) for i in items
                   if i.batch is not None]
        return self.ledgers.submit(self.ledger_id, batches, password=self.password,
                                   block=block)

    async def _submit_blocking(self, items: list[_Received]) -> None:
        """The engine call that would wait, on a worker thread; then the rest."""
        try:
            pendings = await anyio.to_thread.run_sync(self._submit_items, items, True)
        except Exception as exc:
            self.submitting = None
            self._refuse(items[0].seq, exc)
            return
        self.submitting = None
        if self.closed:
            return
        self._submitted(items, pendings)
        self._submit()

    def _submitted(self, items: list[_Received],
                   pendings: list[Pending[BatchAddResult]]) -> None:
        """The engine took ``pendings`` (a prefix of ``items``): now in flight."""
        future: Future[object] | None = None
        for item, pending in zip(items, pendings, strict=False):
            self.received.popleft()
            self.in_flight.append(_InFlight(item.seq, pending, item.message_bytes,
                                            item.received_s))
            if pending.future is not future:  # a run of batches shares one future
                future = pending.future
                future.add_done_callback(self._on_resolved)

    def _refuse(self, seq: int, exc: Exception) -> None:
        """Message ``seq`` failed: it and every message read after it are dropped,
        and the acker sends the error once what came before is acknowledged."""
        self.refused = (seq, exc)
        for item in self.received:
            self.unacked_bytes -= item.message_bytes
        self.received.clear()
        self._wake_acker()

    def _on_resolved(self, _future: Future[object]) -> None:
        # Runs on a journal thread: one wake-up per group commit.
        if not self.wake_scheduled:
            self.wake_scheduled = True
            with contextlib.suppress(RuntimeError):  # the loop is gone: so is the stream
                self.loop.call_soon_threadsafe(self.wake.set)

    def _wake_acker(self) -> None:
        self.wake.set()

    # --- acker ----------------------------------------------------------------

    async def ack_loop(self) -> None:
        """Send acks as group commits land; then the error or the idle close."""
        try:
            while not self.closed:
                await self.wake.wait()
                self.wake_scheduled = False
                self.wake.clear()
                await self._send_ready()
                if self.closed or self.in_flight or self.received \
                        or self.submitting is not None:
                    continue
                if self.refused is not None:
                    seq, exc = self.refused
                    await self._fail(seq, exc)
                elif self.idle:
                    self.idle = False
                    if self._is_idle():
                        await self._close(IDLE_CLOSE_CODE,
                                          f"idle for {self.idle_timeout_s:g} s")
        except Exception as exc:  # the client went away mid-send, or a bug
            if not self.closed:
                log.info("append stream to ledger %d ended: %r", self.ledger_id, exc)
            self._mark_closed()

    async def _send_ready(self) -> None:
        ready = self._ready()
        acks: list[tuple[int, int, int]] = []
        last_add_confirmed = -1
        failure: tuple[int, BaseException] | None = None
        succeeded: Future[Any] | None = None  # the run's future, checked once for the run
        for item in ready:
            pending = item.pending
            if pending.future is not succeeded:
                try:
                    pending.future.result(0)
                except BaseException as exc:  # the journal failed: this one is not durable
                    failure = (item.seq, exc)
                    break
                succeeded = pending.future
            result = pending.outcome()
            acks.append((item.seq, result.first_entry_id, result.last_entry_id))
            last_add_confirmed = result.last_add_confirmed
        if acks:
            await self.websocket.send_text(encode_acks(acks, last_add_confirmed))
            self._acknowledged(len(acks))
        if failure is not None:
            await self._fail(*failure)

    def _ready(self) -> list[_InFlight]:
        """The resolved messages at the head of the window, unless the group commit
        that resolved them is still being resolved (then nothing yet)."""
        ready: list[_InFlight] = []
        done: Future[Any] | None = None  # a run of messages shares one future
        for item in self.in_flight:
            future = item.pending.future
            if future is not done:
                if not future.done():
                    # Read after the done() checks: at or past the group of every
                    # message seen resolved.
                    if item.pending.synced():
                        return []  # durable, its future resolves right now: same group
                    break
                done = future
            ready.append(item)
        return ready

    def _acknowledged(self, count: int) -> None:
        now = time.perf_counter()
        observe = self.metrics.stream_ack_seconds.observe
        for _ in range(count):
            item = self.in_flight.popleft()
            self.unacked_bytes -= item.message_bytes
            observe(now - item.received_s)
        self._report()
        self.room.set()

    def _report(self) -> None:
        """Bring the stream gauges and counters up to date."""
        delta = self.unacked_bytes - self.unacked_bytes_reported
        if delta:
            self.metrics.stream_unacked_bytes.inc(delta)
            self.unacked_bytes_reported = self.unacked_bytes
        if self.received_unreported:
            self.metrics.stream_messages.inc(self.received_unreported)
            self.received_unreported = 0

    async def _fail(self, seq: int, exc: BaseException) -> None:
        status, body = _problem_body(exc if isinstance(exc, Exception) else Exception(exc))
        await self.websocket.send_text(encode_failure_message(seq, body))
        await self._close(close_code(status), str(body.get("code", "")))

    async def _close(self, code: int, reason: str) -> None:
        self._mark_closed()
        await self.websocket.close(code, reason)

    def _mark_closed(self) -> None:
        self.closed = True
        self.room.set()

    # --- idle watch -------------------------------------------------------------

    def _is_idle(self) -> bool:
        return (not self.in_flight and not self.received and self.submitting is None
                and self.refused is None
                and self.loop.time() - self.last_message_s >= self.idle_timeout_s)

    async def idle_watch(self) -> None:
        """Wake the acker once the stream looks idle; it checks again and closes."""
        while not self.closed:
            now = self.loop.time()
            deadline = self.last_message_s + self.idle_timeout_s
            if now >= deadline:
                if self._is_idle():
                    self.idle = True
                    self._wake_acker()
                deadline = now + min(_IDLE_RECHECK_S, self.idle_timeout_s)
            await asyncio.sleep(deadline - now)

    def release(self) -> None:
        """Forget what is still unacknowledged (the stream is over)."""
        if self.submitting is not None:
            self.submitting.cancel()  # its engine call finishes; nobody acknowledges it
        self.unacked_bytes = 0
        self._report()
