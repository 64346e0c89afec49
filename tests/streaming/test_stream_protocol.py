"""DESIGN.md §5a clause by clause, against a real uvicorn server on loopback.

Protocol-level assertions use raw WebSocket connections (``_wire``); the client's
own behaviour (resume, errors as exceptions, the stdin feed) uses
``streaming.AppendStream``.
"""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from common import errors
from streaming import AppendStream, Progress, append_from_file, encode_batch

from ._wire import raw_stream, read_until
from .conftest import PASSWORD, StreamServer


def run(coroutine: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coroutine, 60))


def payloads_of(count: int, tag: str) -> list[bytes]:
    return [f"{tag}-{i}-".encode() + bytes([i % 251]) * (i % 300) for i in range(count)]


# --- refusals before the upgrade ------------------------------------------------


def _fenced(server: StreamServer) -> int:
    lid = server.create_ledger()
    assert server.post(f"/api/v1/ledgers/{lid}/fence").status_code == 200
    return lid


def _closed(server: StreamServer) -> int:
    lid = server.create_ledger()
    assert server.post(f"/api/v1/ledgers/{lid}/close").status_code == 200
    return lid


@pytest.mark.parametrize(("make_path", "headers", "status", "code"), [
    (lambda s: f"/api/v1/ledgers/{10**12}/entries/stream", {}, 404, "ENOLEDGER"),
    (lambda s: f"/api/v1/ledgers/{s.create_ledger()}/entries/stream",
     {"X-Ledger-Password": "wrong"}, 403, "EUA"),
    (lambda s: f"/api/v1/ledgers/{_fenced(s)}/entries/stream", {}, 409, "EFENCED"),
    (lambda s: f"/api/v1/ledgers/{_closed(s)}/entries/stream", {}, 409, "ECLOSED"),
    (lambda s: "/api/v1/ledgers/abc/entries/stream", {}, 422, "EBADREQ"),
    (lambda s: f"/api/v1/ledgers/{2**63}/entries/stream", {}, 422, "EBADREQ"),
    (lambda s: f"/api/v1/ledgers/{s.create_ledger()}/entries/stream",
     {"Sec-WebSocket-Protocol": "other.v1"}, 400, "EBADREQ"),
], ids=["unknown", "wrong-password", "fenced", "closed", "not-an-id", "id-too-large",
        "no-subprotocol"])
def test_refused_upgrades_answer_problem_json(server: StreamServer, make_path: Any,
                                              headers: dict[str, str], status: int, code: str):
    url = server.url.replace("http://", "ws://") + make_path(server)
    offered = {"X-Ledger-Password": PASSWORD, **headers}
    protocols = [offered.pop("Sec-WebSocket-Protocol", "ledgerd.v1")]

    async def attempt() -> InvalidStatus:
        with pytest.raises(InvalidStatus) as refused:
            async with connect(url, subprotocols=protocols,  # type: ignore[arg-type]
                               additional_headers=offered):
                pass
        return refused.value

    refused = run(attempt())
    response = refused.response
    assert response.status_code == status
    assert response.headers["content-type"].startswith("application/problem+json")
    body = json.loads(response.body or b"")
    assert body["status"] == status and body["code"] == code
    assert set(body) == {"type", "title", "status", "detail", "code"}


def test_read_only_bookie_refuses_the_upgrade(server: StreamServer):
    lid = server.create_ledger()
    with _read_only(server), pytest.raises(errors.ReadOnly):
        run(AppendStream.open(server.url, lid, password=PASSWORD))


@pytest.mark.parametrize(("ledger", "password", "error"), [
    ("missing", PASSWORD, errors.NoSuchLedger),
    ("open", "wrong", errors.Unauthorized),
    ("closed", PASSWORD, errors.LedgerClosed),
])
def test_client_raises_refusals_as_the_error_tree(server: StreamServer, ledger: str,
                                                  password: str, error: type[Exception]):
    lid = {"missing": 10**12, "open": server.create_ledger(), "closed": _closed(server)}[ledger]
    with pytest.raises(error):
        run(AppendStream.open(server.url, lid, password=password))


# --- acks: once, in order, grouped per group commit -----------------------------------


def test_every_message_is_acked_once_in_order_with_the_acks_of_a_group_commit_together(
        server: StreamServer):
    lid = server.create_ledger()
    sent = [payloads_of(1 + i % 3, f"m{i}") for i in range(300)]
    journal = server.node.bookie.journal
    before = journal.statistics()

    async def scenario() -> Any:
        async with raw_stream(server.stream_url(lid)) as ws:
            # Pipelined: everything is on the wire before the first ack is read.
            for message in sent:
                await ws.send(encode_batch(message))
            return await read_until(ws, acks=len(sent))

    transcript = run(scenario())
    after = journal.statistics()
    syncs = after.sync_count - before.sync_count
    assert transcript.failure is None
    # The messages one read brought in go as one journal record (one ADD of
    # consecutive ids): pipelined, far fewer records than messages.
    assert 1 <= after.record_count - before.record_count < len(sent)
    assert [seq for seq, _, _ in transcript.acked] == list(range(len(sent)))
    expected_first = 0
    for (_, first, last), message in zip(transcript.acked, sent, strict=True):
        assert (first, last) == (expected_first, expected_first + len(message) - 1)
        expected_first = last + 1
    # One ack message per group commit at most: never more ack messages than syncs,
    # and with 300 messages pipelined, far fewer than one per message.
    assert len(transcript.acks) <= syncs
    assert len(transcript.acks) < len(sent)
    for message in transcript.acks:
        assert message.last_add_confirmed >= message.acks[-1].last_entry_id
    assert server.entries(lid) == [p for message in sent for p in message]


# --- exactly-once resume ----------------------------------------------------------------


def test_resume_by_first_entry_id_appends_each_message_exactly_once(server: StreamServer):
    lid = server.create_ledger()
    sent = [payloads_of(2, f"r{i}") for i in range(40)]
    firsts = [2 * i for i in range(len(sent))]

    resume = 5  # the acks of messages 5.. count as lost with the connection

    async def scenario() -> tuple[Any, Any]:
        async with raw_stream(server.stream_url(lid)) as ws:
            for first, message in zip(firsts[:30], sent[:30], strict=True):
                await ws.send(encode_batch(message, first))
            before = await read_until(ws, acks=resume)  # then drop, maybe mid-flight
        async with raw_stream(server.stream_url(lid)) as ws:
            # From the next id the client knows to be acked: 25 messages that are
            # stored (or about to be), then ten new ones.
            for first, message in zip(firsts[resume:], sent[resume:], strict=True):
                await ws.send(encode_batch(message, first))
            after = await read_until(ws, acks=len(sent) - resume)
        return before, after

    before, after = run(scenario())
    assert before.acked[:resume] == [(i, 2 * i, 2 * i + 1) for i in range(resume)]
    assert after.acked == [(i, 2 * (i + resume), 2 * (i + resume) + 1)
                           for i in range(len(sent) - resume)]
    assert server.entries(lid) == [p for message in sent for p in message]


@pytest.mark.parametrize(("first", "payloads"), [
    (0, [b"a", b"different"]),  # stored with other payloads
    (1, [b"b", b"c"]),  # overlaps the end of what is stored
    (5, [b"x"]),  # past the next id
])
def test_resume_at_a_wrong_id_is_a_conflict_and_appends_nothing(server: StreamServer,
                                                               first: int,
                                                               payloads: list[bytes]):
    lid = server.create_ledger()

    async def scenario() -> Any:
        async with raw_stream(server.stream_url(lid)) as ws:
            await ws.send(encode_batch([b"a", b"b"], 0))
            assert (await read_until(ws, acks=1)).acked == [(0, 0, 1)]
        async with raw_stream(server.stream_url(lid)) as ws:
            await ws.send(encode_batch(payloads, first))
            await ws.send(encode_batch([b"never"]))
            return await read_until(ws)

    transcript = run(scenario())
    assert transcript.acked == []
    assert transcript.failure is not None and transcript.failure.seq == 0
    assert transcript.failure.problem["code"] == "ECONFLICT"
    assert transcript.close_code == 4409
    assert server.entries(lid) == [b"a", b"b"]


def test_client_resumes_after_the_server_restarts(tmp_path: Path):
    """The client's own resume: the server goes away mid-stream (1012) and comes back
    on the same port; every message is appended exactly once."""
    first = StreamServer(tmp_path / "data").start()
    lid = first.create_ledger()
    port = first.port
    sent = [payloads_of(3, f"s{i}") for i in range(200)]

    async def scenario() -> list[Any]:
        async with await AppendStream.open(first.url, lid, password=PASSWORD,
                                           reconnect_attempts=12) as stream:
            futures = [await stream.send(message) for message in sent[:100]]
            await asyncio.to_thread(first.stop)  # acks of some messages are lost
            second = StreamServer(tmp_path / "data", port=port)
            await asyncio.to_thread(second.start)
            try:
                futures += [await stream.send(message) for message in sent[100:]]
                results = await asyncio.gather(*futures)
                assert stream.reconnects >= 1
            finally:
                await stream.close()
                await asyncio.to_thread(second.stop)
        return results

    results = run(scenario())
    assert [(r.first_entry_id, r.last_entry_id) for r in results] == [
        (3 * i, 3 * i + 2) for i in range(len(sent))]
    third = StreamServer(tmp_path / "data", port=port).start()
    try:
        assert third.entries(lid) == [p for message in sent for p in message]
    finally:
        third.stop()


# --- errors: prefix property and close codes -----------------------------------------


BAD_MESSAGES = {
    "short": (b"\x00" * 7, 4400, "EBADREQ"),
    "no-frame": (b"\xff" * 8, 4400, "EBADREQ"),
    "cut-frame": (b"\xff" * 8 + b"\x00\x00\x00\x09abc", 4400, "EBADREQ"),
    "text": ("hello", 4400, "EBADREQ"),
    "entry-too-large": (encode_batch([b"x" * (256 * 1024 + 1)]), 4413, "EBADREQ"),
    # all or nothing: the good entry before the oversized one is not appended either
    "second-entry-too-large": (encode_batch([b"ok", b"x" * (256 * 1024 + 1)]), 4413, "EBADREQ"),
    "batch-too-large": (encode_batch([b"x" * (256 * 1024)] * 9), 4413, "EBADREQ"),  # > 2 MiB
    "too-many-entries": (encode_batch([b""] * 10_001), 4400, "EBADREQ"),  # MAX_BATCH_ENTRIES
    "conflict": (encode_batch([b"y"], 10**6), 4409, "ECONFLICT"),
}


@pytest.mark.parametrize("bad", list(BAD_MESSAGES))
def test_after_an_error_nothing_later_is_appended_and_the_close_code_carries_the_status(
        server: StreamServer, bad: str):
    message, code, error_code = BAD_MESSAGES[bad]
    lid = server.create_ledger()
    good = [payloads_of(2, f"g{i}") for i in range(20)]
    later = [payloads_of(1, f"l{i}") for i in range(20)]

    async def scenario() -> Any:
        async with raw_stream(server.stream_url(lid), max_size=None) as ws:
            for payloads in good:
                await ws.send(encode_batch(payloads))
            await ws.send(message)
            for payloads in later:
                await ws.send(encode_batch(payloads))
            return await read_until(ws)

    transcript = run(scenario())
    assert [seq for seq, _, _ in transcript.acked] == list(range(len(good)))
    assert transcript.failure is not None
    assert transcript.failure.seq == len(good)
    assert transcript.failure.problem["code"] == error_code
    assert transcript.failure.status == code - 4000
    assert set(transcript.failure.problem) == {"type", "title", "status", "detail", "code"}
    assert transcript.close_code == code
    assert server.entries(lid) == [p for payloads in good for p in payloads]


def test_messages_of_one_read_go_to_the_engine_together_and_a_failure_among_them_ends_it(
        server: StreamServer, monkeypatch: pytest.MonkeyPatch):
    lid = server.create_ledger()
    good = [payloads_of(1 + i % 2, f"g{i}") for i in range(40)]
    later = [payloads_of(1, f"l{i}") for i in range(20)]
    burst = [encode_batch(p) for p in good] + [encode_batch([b"y"], 10**6)] + [
        encode_batch(p) for p in later]
    # A spy, not a fake: it makes each engine call and records what it appended.
    calls: list[list[list[bytes]]] = []
    ledgers = server.node.ledgers
    submit = ledgers.submit

    def spy(ledger_id: int, batches: Any, **kwargs: Any) -> Any:
        pendings = submit(ledger_id, batches, **kwargs)
        calls.append([list(payloads) for _, payloads in batches[:len(pendings)]])
        return pendings

    monkeypatch.setattr(ledgers, "submit", spy)

    async def scenario() -> Any:
        async with raw_stream(server.stream_url(lid)) as ws:
            # Every frame in one TCP write, so that the server reads many at once.
            for message in burst:
                ws.protocol.send_binary(message)
            ws.transport.write(b"".join(ws.protocol.data_to_send()))
            return await read_until(ws)

    transcript = run(scenario())
    assert max(len(batches) for batches in calls) > 1  # several messages in one call
    assert [seq for seq, _, _ in transcript.acked] == list(range(len(good)))
    assert transcript.failure is not None and transcript.failure.seq == len(good)
    assert transcript.close_code == 4409
    assert server.entries(lid) == [p for payloads in good for p in payloads]
    # Each good message was appended by exactly one call (a call appends a prefix
    # of what it is given, and the rest comes again), and nothing after the conflict.
    assert [payloads for batches in calls for payloads in batches] == good


def test_client_raises_the_servers_error_for_the_failed_message_and_after(server: StreamServer):
    lid = server.create_ledger()

    async def scenario() -> tuple[list[Any], Exception]:
        stream = await AppendStream.open(server.url, lid, password=PASSWORD)
        good = [await stream.send([b"ok"]) for _ in range(5)]
        bad = await stream.send([b"z" * (256 * 1024 + 1)])
        results = await asyncio.gather(*good)
        with pytest.raises(errors.EntryTooLarge) as failed:
            await bad
        with pytest.raises(errors.EntryTooLarge):
            await stream.send([b"later"])
        await stream.close()
        return results, failed.value

    results, failure = run(scenario())
    assert [r.first_entry_id for r in results] == [0, 1, 2, 3, 4]
    assert isinstance(failure, errors.EntryTooLarge)
    assert server.entries(lid) == [b"ok"] * 5


# --- the stream outlives fence, close and read-only through other calls ------------------


class _read_only:
    def __init__(self, server: StreamServer) -> None:
        self.url = f"{server.url}/api/v1/bookie/state/readonly"

    def __enter__(self) -> None:
        assert httpx.put(self.url, json={"read_only": True}).status_code == 200

    def __exit__(self, *exc: object) -> None:
        assert httpx.put(self.url, json={"read_only": False}).status_code == 200


@pytest.mark.parametrize(("change", "code", "close"), [
    ("fence", "EFENCED", 4409), ("close", "ECLOSED", 4409), ("read-only", "EREADONLY", 4507),
])
def test_stream_stays_open_through_fence_close_and_read_only_and_fails_the_next_message(
        server: StreamServer, change: str, code: str, close: int):
    lid = server.create_ledger()

    async def scenario() -> Any:
        async with raw_stream(server.stream_url(lid)) as ws:
            await ws.send(encode_batch([b"before"]))
            assert (await read_until(ws, acks=1)).acked == [(0, 0, 0)]
            with _changed(server, lid, change):
                # Still open: the server answers a ping...
                await asyncio.wait_for(await ws.ping(), 10)
                # ...and refuses the next message with the state's error.
                await ws.send(encode_batch([b"after"]))
                return await read_until(ws)

    transcript = run(scenario())
    assert transcript.failure is not None and transcript.failure.seq == 1
    assert transcript.failure.problem["code"] == code
    assert transcript.close_code == close
    assert server.entries(lid) == [b"before"]


class _changed:
    def __init__(self, server: StreamServer, lid: int, change: str) -> None:
        self.server, self.lid, self.change = server, lid, change
        self.read_only = _read_only(server)

    def __enter__(self) -> None:
        if self.change == "read-only":
            self.read_only.__enter__()
        else:
            response = self.server.post(f"/api/v1/ledgers/{self.lid}/{self.change}")
            assert response.status_code == 200, response.text

    def __exit__(self, *exc: object) -> None:
        if self.change == "read-only":
            self.read_only.__exit__()


# --- keepalive: the server answers pings ----------------------------------------------


def test_the_server_answers_a_clients_ping(server: StreamServer):
    lid = server.create_ledger()

    async def scenario() -> float:
        async with raw_stream(server.stream_url(lid)) as ws:
            return await asyncio.wait_for(await ws.ping(b"are you there"), 10)

    assert run(scenario()) >= 0


# --- metrics -------------------------------------------------------------------------


def test_metrics_count_open_streams_unacked_bytes_and_ack_latency(server: StreamServer):
    lid = server.create_ledger()
    acks_before = server.metric("ledgerd_stream_ack_latency_seconds_count")

    async def scenario() -> tuple[float, float]:
        async with await AppendStream.open(server.url, lid, password=PASSWORD) as stream:
            for _ in range(10):
                await stream.append([b"m" * 100])
            open_now = await asyncio.to_thread(server.metric, "ledgerd_streams_open")
        closed = await asyncio.to_thread(server.metric, "ledgerd_streams_open")
        return open_now, closed

    open_now, closed = run(scenario())
    assert open_now >= 1 and closed == open_now - 1
    assert server.metric("ledgerd_stream_ack_latency_seconds_count") == acks_before + 10
    assert server.metric("ledgerd_stream_unacknowledged_bytes") == 0


# --- the CLI's feed --------------------------------------------------------------------


@pytest.fixture
def progress_log() -> Iterator[list[Progress]]:
    yield []


@pytest.mark.parametrize("input_format", ["lines", "frames"])
def test_append_from_file_streams_every_entry_with_progress(server: StreamServer,
                                                            input_format: str,
                                                            progress_log: list[Progress]):
    lid = server.create_ledger()
    entries = [f"line {i} ".encode() * (i % 7) for i in range(5000)]
    if input_format == "lines":
        data = b"\n".join(entries) + b"\n"
    else:
        data = b"".join(len(e).to_bytes(4, "big") + e for e in entries)

    def seen(progress: Progress) -> None:
        progress_log.append(Progress(**vars(progress)))

    done = run(append_from_file(io.BytesIO(data), server.url, lid, password=PASSWORD,
                                input_format=input_format,  # type: ignore[arg-type]
                                entries_per_message=300, progress=seen))
    assert (done.entries, done.first_entry_id, done.last_entry_id) == (5000, 0, 4999)
    assert done.payload_bytes == sum(len(e) for e in entries)
    assert [p.entries for p in progress_log] == sorted(p.entries for p in progress_log)
    assert len(progress_log) == -(-5000 // 300)
    assert server.entries(lid) == entries
