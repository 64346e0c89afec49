"""Node-to-node calls (docs/cluster.md §12.2): the ``/internal/v1/`` routes of a real
``ledgerd serve`` process, driven through ``cluster.HttpBookieClient``, answer each
protocol message as the bookie rules say (docs/cluster.md §5.1); the local client
(no HTTP) gives the same answers; a missing or wrong token is refused with 401."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from cluster import (
    AddEntries,
    AddsOk,
    CopiesOk,
    CopyEntries,
    CopyEntry,
    CopyOk,
    Deleted,
    DeleteReplica,
    EntriesHeld,
    EntriesRead,
    EntryFound,
    Fence,
    Fenced,
    FenceOk,
    HttpBookieClient,
    LacIs,
    ListEntries,
    NewEntry,
    NoEntry,
    ReadEntries,
    ReadEntry,
    ReadLac,
    RecoveryRead,
    Replica,
    ReplicaRules,
    Unavailable,
    WriteLac,
)
from common.errors import BookieUnreachable
from node import LocalBookieClient
from tests.app.conftest import LiveServer, service_settings

TOKEN = "node-to-node-secret"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    live = LiveServer(tmp_path_factory.mktemp("n2n") / "data", {"cluster_token": TOKEN})
    live.start()
    try:
        yield live
    finally:
        live.stop()


def run(coro: Any) -> Any:
    return asyncio.run(coro)


async def conversation(client: Any, bookie: str, lid: int) -> list[object]:
    """The same sequence of messages for any BookieClient; returns the replies."""
    replies: list[object] = []
    call = client.call
    replies.append(await call(bookie, AddEntries(lid, 1, -1, (NewEntry(0, b"zero", 4),))))
    replies.append(await call(bookie, AddEntries(lid, 1, 0, (
        NewEntry(2, b"two", 7), NewEntry(5, b"five!", 12)))))
    replies.append(await call(bookie, ReadEntry(lid, 2)))
    replies.append(await call(bookie, ReadEntry(lid, 1)))  # striping: not here
    replies.append(await call(bookie, ReadLac(lid)))
    replies.append(await call(bookie, Fence(lid, 3)))
    replies.append(await call(bookie, AddEntries(lid, 2, 5, (NewEntry(6, b"late", 16),))))
    replies.append(await call(bookie, Fence(lid, 2)))  # an older fence: refused
    replies.append(await call(bookie, RecoveryRead(lid, 5, 4)))  # fences at 4 first
    replies.append(await call(bookie, RecoveryRead(lid, 9, 4)))
    replies.append(await call(bookie, CopyEntry(lid, 1, 1, b"copied", 10)))
    # Re-replication's ranges: copies of several entries (epochs may differ) in one
    # call; a range read stops once it holds bytes_max bytes and names the absent.
    replies.append(await call(bookie, CopyEntries(lid, (
        CopyEntry(lid, 3, 1, b"three", 12), CopyEntry(lid, 4, 2, b"four", 16)))))
    replies.append(await call(bookie, ReadEntries(lid, (1, 6, 2, 3, 4), 9)))
    replies.append(await call(bookie, ReadEntries(lid, (3, 4), 1 << 20)))
    replies.append(await call(bookie, ListEntries(lid, 0, 100)))
    replies.append(await call(bookie, DeleteReplica(lid)))
    replies.append(await call(bookie, WriteLac(lid, 7)))  # no replica: not made by it
    replies.append(await call(bookie, ReadEntry(lid, 0)))
    return replies


def expected(lid: int) -> list[object]:
    return [
        AddsOk(lid, 1, -1, (0,)),
        AddsOk(lid, 1, 0, (2, 5)),
        EntryFound(lid, 2, 1, b"two", 7, 0),
        NoEntry(lid, 1, 0),
        LacIs(lid, 0, 1),  # an add at epoch 1 fences older epochs
        FenceOk(lid, 3, 0),
        Fenced(lid, 3, 0),
        Fenced(lid, 3, 0),
        EntryFound(lid, 5, 1, b"five!", 12, 0),
        NoEntry(lid, 9, 0),
        CopyOk(lid, 1),
        CopiesOk(lid, (3, 4)),
        EntriesRead(lid, (EntryFound(lid, 1, 1, b"copied", 10, 0),
                          EntryFound(lid, 2, 1, b"two", 7, 0)), (6,), 0),
        EntriesRead(lid, (EntryFound(lid, 3, 1, b"three", 12, 0),
                          EntryFound(lid, 4, 2, b"four", 16, 0)), (), 0),
        EntriesHeld(lid, ((0, 1), (1, 1), (2, 1), (3, 1), (4, 2), (5, 1))),
        Deleted(lid),
        LacIs(lid, -1),
        NoEntry(lid, 0, -1),
    ]


def test_every_message_over_http(server: LiveServer) -> None:
    async def go() -> list[object]:
        client = HttpBookieClient(lambda b: server.url, token=TOKEN)
        try:
            return await conversation(client, "n1", 101)
        finally:
            await client.aclose()
    assert run(go()) == expected(101)


def test_the_local_client_answers_the_same_without_http(tmp_path: Path) -> None:
    from node import Node

    async def go(node: Node) -> list[object]:
        return await conversation(LocalBookieClient(node.replica_server), "me", 102)
    with Node.open(service_settings(tmp_path / "data").to_node()) as node:
        assert run(go(node)) == expected(102)


class RulesClient:
    """``cluster.ReplicaRules`` applied in memory, as the simulation's bookies do."""

    def __init__(self) -> None:
        self.rules = ReplicaRules()
        self.replicas: dict[int, Replica] = {}

    async def call(self, bookie_id: str, request: Any) -> object:
        replica, reply = self.rules.apply(self.replicas.get(request.ledger_id), request)
        if replica is None:
            self.replicas.pop(request.ledger_id, None)
        else:
            self.replicas[request.ledger_id] = replica
        return reply


def test_the_engine_follows_the_replica_rules_the_simulation_runs() -> None:
    """The engine's replicas (``ledger/_replicas.py``, the two tests above) and the
    pure rules (``cluster.ReplicaRules``) answer the same conversation alike."""
    assert run(conversation(RulesClient(), "b", 104)) == expected(104)


def test_a_listing_is_paged_by_the_client(server: LiveServer) -> None:
    async def go() -> object:
        client = HttpBookieClient(lambda b: server.url, token=TOKEN)
        try:
            await client.call("n1", AddEntries(103, 1, -1, tuple(
                NewEntry(i, b"x", i + 1) for i in range(0, 30, 3))))
            first = httpx.get(f"{server.url}/internal/v1/ledgers/103/replica/entries",
                              params={"first": 0, "last": 100, "limit": 4},
                              headers={"Authorization": f"Bearer {TOKEN}"}).json()
            assert first == {"entries": [[0, 1], [3, 1], [6, 1], [9, 1]], "next_first": 10}
            return await client.call("n1", ListEntries(103, 4, 25))
        finally:
            await client.aclose()
    assert run(go()) == EntriesHeld(103, tuple((i, 1) for i in range(6, 25, 3)))


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"},
                                     {"Authorization": f"Basic {TOKEN}"}])
def test_a_missing_or_wrong_token_is_refused_with_401(server: LiveServer,
                                                       headers: dict[str, str]) -> None:
    for method, path in [("GET", "/internal/v1/ledgers/1/replica/lac"),
                         ("POST", "/internal/v1/ledgers/1/replica/fence?epoch=1"),
                         ("DELETE", "/internal/v1/ledgers/1/replica")]:
        response = httpx.request(method, server.url + path, headers=headers)
        assert response.status_code == 401, (method, path, response.text)
        assert response.json()["code"] == "EUA"
    # Nothing was fenced or deleted by the refused calls.
    ok = httpx.get(server.url + "/internal/v1/ledgers/1/replica/lac",
                   headers={"Authorization": f"Bearer {TOKEN}"})
    assert ok.status_code == 200


def test_the_wrong_token_through_the_client_is_unavailable(server: LiveServer) -> None:
    async def go() -> object:
        client = HttpBookieClient(lambda b: server.url, token="wrong")
        try:
            return await client.call("n1", ReadLac(1))
        finally:
            await client.aclose()
    reply = run(go())
    assert isinstance(reply, Unavailable) and "401" in reply.reason


def test_internal_routes_are_not_in_the_public_openapi_document(server: LiveServer) -> None:
    paths = httpx.get(server.url + "/openapi.json").json()["paths"]
    assert not [p for p in paths if p.startswith("/internal")]


def test_no_answer_is_bookie_unreachable(tmp_path: Path) -> None:
    from tools.local_s3 import free_port

    async def go() -> None:
        client = HttpBookieClient(lambda b: f"http://127.0.0.1:{free_port()}", token=TOKEN)
        unknown = HttpBookieClient(lambda b: None, token=TOKEN)
        try:
            with pytest.raises(BookieUnreachable):
                await client.call("gone", ReadLac(1))
            with pytest.raises(BookieUnreachable):
                await unknown.call("unknown", ReadLac(1))
        finally:
            await client.aclose()
            await unknown.aclose()
    run(go())


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_the_pool_resends_on_a_connection_the_server_had_closed(
        scheme: str, tmp_path: Path) -> None:
    """A server that closes each keep-alive connection after one answer without
    saying so (what uvicorn does to a connection idle for 5 s, here at once so the
    test need not wait): the pool sees the close before reusing it, or meets EOF
    before any byte of an answer and sends the request again on a fresh
    connection; either way each request reaches the server once and is answered.
    A chunked answer is read whole.  Over TLS too (a close_notify then the TCP
    close).  (A small asyncio server stands in for uvicorn: it cannot be told to
    close at once.)"""
    from cluster import HttpPool, peer_ssl_context
    from tools.local_pki import make_pki

    server_tls: ssl.SSLContext | None = None
    client_tls: ssl.SSLContext | None = None
    if scheme == "https":
        pki = make_pki(tmp_path)
        server_tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        server_tls.load_cert_chain(pki.cert, pki.key)
        client_tls = peer_ssl_context(pki.ca)

    async def go() -> list[tuple[int, bytes]]:
        served = []

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            head = await reader.readuntil(b"\r\n\r\n")
            served.append(head.split(b" ")[1])
            if b"chunked" in head.split(b" ")[1]:
                writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                             b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
            else:
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            await writer.drain()
            writer.close()  # no "Connection: close": the client cannot know
        server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=server_tls)
        port = server.sockets[0].getsockname()[1]
        pool = HttpPool(ssl_context=client_tls)
        try:
            answers = []
            for path in ("/a", "/b", "/chunked", "/c"):
                response = await pool.request(f"{scheme}://127.0.0.1:{port}", "GET", path)
                answers.append((response.status, response.body))
                await asyncio.sleep(0.01)  # let the server's close arrive
            assert served == [b"/a", b"/b", b"/chunked", b"/c"]  # each sent once
            return answers
        finally:
            await pool.aclose()
            server.close()
    assert run(go()) == [(200, b"ok"), (200, b"ok"), (200, b"abcde"), (200, b"ok")]


def test_an_answer_that_is_not_http_is_a_call_that_got_no_answer() -> None:
    """Whatever comes back — a line that is not an HTTP status line, headers past
    the reader's limit — the call raises BookieUnreachable and the connection is
    dropped; no other exception escapes to the caller (one did, an IndexError, and
    killed a node's keep-alive task in the partition suite).  Then a good answer
    on a fresh connection, and the lines of a streamed answer."""
    from cluster import HttpPool
    from common.errors import BookieUnreachable

    answers = [b"\r\n\r\n", b"garbage\r\n\r\n", b"HTTP/1.1 20\r\n\r\n",
               b"HTTP/1.1 200 OK\r\nX: " + b"y" * 70_000 + b"\r\n\r\n",
               b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
               b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
               b"4\r\na\nbc\r\n3\r\n\nd\n\r\n0\r\n\r\n"]

    async def go() -> tuple[list[object], list[bytes]]:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(answers.pop(0))
            await writer.drain()
            writer.close()
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        base = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        pool = HttpPool()
        got: list[object] = []
        try:
            for _ in range(5):
                try:
                    got.append((await pool.request(base, "GET", "/")).body)
                except BookieUnreachable as exc:
                    got.append(type(exc))
            lines = []
            with pytest.raises(BookieUnreachable, match="ended"):
                async for line in pool.stream_lines(base, "POST", "/watch"):
                    lines.append(line)
            return got, lines
        finally:
            await pool.aclose()
            server.close()
    got, lines = run(go())
    assert got == [BookieUnreachable] * 4 + [b"ok"]
    assert lines == [b"a", b"bc", b"d"]
