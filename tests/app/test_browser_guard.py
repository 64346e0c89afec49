"""Browser attacks on a loopback server (issue 14, item 2): DNS rebinding (the
Host header) and cross-site requests (the Origin header), for HTTP requests
and WebSocket upgrades."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import httpx
import pytest
import uvicorn
from starlette.types import Receive, Scope, Send
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from app.browser import AllowedHosts, BrowserGuardMiddleware
from tools.local_s3 import free_port

from .conftest import LiveServer, assert_problem, create_ledger, pw


@pytest.mark.parametrize("host", ["evil.example", "evil.example:8080", "127.0.0.1.nip.io",
                                  "localhost.evil.example", "a b", "x@127.0.0.1"])
def test_a_host_not_named_by_the_server_is_refused(client, host):
    """DNS rebinding: the attacker's name in Host is refused, whatever the route."""
    for method, path in [("GET", "/api/v1/ledgers"), ("POST", "/api/v1/ledgers"),
                         ("PUT", "/api/v1/bookie/state/readonly"), ("GET", "/heartbeat")]:
        response = client.request(method, path, headers={"Host": host}, json={})
        body = assert_problem(response, 400, "EBADREQ")
        assert "ALLOWED_HOSTS" in body["detail"]


@pytest.mark.parametrize("host", ["localhost", "localhost:8080", "LOCALHOST.", "127.0.0.1",
                                  "127.0.0.1:8080", "[::1]:8080", "10.1.2.3", "testserver"])
def test_loopback_names_addresses_and_allowed_names_are_served(client, host):
    assert client.get("/api/v1/ledgers", headers={"Host": host}).status_code == 200


def test_allowed_hosts_adds_names_and_domains(make_client):
    client = make_client(allowed_hosts="testserver, ledgerd.internal, .example.com")
    for host in ["ledgerd.internal", "example.com", "a.b.example.com:9000"]:
        assert client.get("/heartbeat", headers={"Host": host}).status_code == 200, host
    for host in ["ledgerd.internal.evil", "badexample.com"]:
        assert_problem(client.get("/heartbeat", headers={"Host": host}), 400, "EBADREQ")
    anything = make_client(allowed_hosts="*")
    assert anything.get("/heartbeat", headers={"Host": "whatever.example"}).status_code == 200


@pytest.mark.parametrize("origin", ["http://evil.example", "null", "http://testserver:8080",
                                    "https://testserver", "http://localhost", "garbage"])
def test_a_request_from_another_site_is_refused_and_changes_nothing(client, origin):
    """Cross-site POSTs: a page elsewhere (or a sandboxed one, Origin null)
    creates, fences and reconfigures nothing."""
    ledger_id = create_ledger(client)["ledger_id"]
    count = len(client.get("/api/v1/ledgers", params={"limit": 1000}).json()["ledgers"])
    foreign = {"Origin": origin}
    attempts = [
        ("POST", "/api/v1/ledgers", {"json": {}}),
        ("POST", f"/api/v1/ledgers/{ledger_id}/fence", {"headers": pw()}),
        ("POST", f"/api/v1/ledgers/{ledger_id}/entries",
         {"content": b"x", "headers": {**pw(), "Content-Type": "text/plain"}}),
        ("PUT", "/api/v1/bookie/state/readonly", {"json": {"read_only": True}}),
        ("GET", f"/api/v1/ledgers/{ledger_id}", {}),
    ]
    for method, path, kwargs in attempts:
        headers = {**kwargs.pop("headers", {}), **foreign}
        response = client.request(method, path, headers=headers, **kwargs)
        assert_problem(response, 403, "EUA")
    ledger = client.get(f"/api/v1/ledgers/{ledger_id}").json()
    assert (ledger["state"], ledger["last_add_confirmed"]) == ("OPEN", -1)
    assert len(client.get("/api/v1/ledgers", params={"limit": 1000}).json()["ledgers"]) == count
    assert client.get("/api/v1/bookie/state/readonly").json() == {"read_only": False}


def test_a_same_origin_request_is_served(client):
    response = client.post("/api/v1/ledgers", json={}, headers={"Origin": "http://testserver"})
    assert response.status_code == 201


@pytest.fixture(scope="module")
def loopback_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    server = LiveServer(tmp_path_factory.mktemp("browser") / "data").start()
    try:
        yield server
    finally:
        server.stop()


def test_a_real_server_refuses_rebinding_and_cross_site_posts(loopback_server):
    """The same checks on ``ledgerd serve``: the browser's request as it goes on
    the wire, a rebound name and a cross-site form post."""
    url = loopback_server.url
    port = url.rsplit(":", 1)[1]
    with httpx.Client(base_url=url) as client:
        rebound = client.get("/api/v1/ledgers", headers={"Host": f"attacker.example:{port}"})
        assert_problem(rebound, 400, "EBADREQ")
        form = client.post("/api/v1/ledgers", content=b"password=x",
                           headers={"Origin": "http://attacker.example",
                                    "Content-Type": "application/x-www-form-urlencoded"})
        assert_problem(form, 403, "EUA")
        same = client.post("/api/v1/ledgers", json={},
                           headers={"Origin": f"http://127.0.0.1:{port}"})
        assert same.status_code == 201, same.text
        assert client.get("/api/v1/ledgers", headers={"Host": f"localhost:{port}"}).status_code \
            == 200


async def _echo(scope: Scope, receive: Receive, send: Send) -> None:
    """A WebSocket route: accepts and closes."""
    if scope["type"] == "websocket":
        assert (await receive())["type"] == "websocket.connect"
        await send({"type": "websocket.accept"})
        await send({"type": "websocket.close", "code": 1000})


@pytest.fixture(scope="module")
def websocket_url() -> Iterator[str]:
    port = free_port()
    app = BrowserGuardMiddleware(_echo, allowed_hosts=AllowedHosts("127.0.0.1", ()))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, lifespan="off",
                                           log_level="warning"))
    thread = threading.Thread(target=server.run)
    thread.start()
    try:
        for _ in range(500):
            if server.started:
                break
            threading.Event().wait(0.01)  # polling the server thread's start-up
        yield f"ws://127.0.0.1:{port}/stream"
    finally:
        server.should_exit = True
        thread.join()


def test_a_cross_site_websocket_is_refused(websocket_url):
    """WebSockets are not bound by CORS: a page elsewhere could open a stream and
    append.  The upgrade from a foreign Origin or a rebound Host is refused with
    a problem; one from the same origin or a client without Origin goes through."""
    port = int(websocket_url.split(":")[2].split("/")[0])
    with connect(websocket_url):
        pass
    with connect(websocket_url, origin=f"http://127.0.0.1:{port}"):  # type: ignore[arg-type]
        pass
    with pytest.raises(InvalidStatus) as refused:
        connect(websocket_url, origin="http://evil.example")  # type: ignore[arg-type]
    assert refused.value.response.status_code == 403
    assert b'"code":"EUA"' in refused.value.response.body
    # The rebound name, on a socket to loopback (as the browser's would be).
    with pytest.raises(InvalidStatus) as rebound:
        connect(f"ws://evil.example:{port}/stream",
                sock=socket.create_connection(("127.0.0.1", port)))
    assert rebound.value.response.status_code == 400


def test_two_host_headers_are_refused(client):
    """RFC 9112: a request with more than one Host is a bad request (which one
    would the checks have seen?)."""
    response = client.get("/heartbeat", headers=[("Host", "testserver"),
                                                 ("Host", "evil.example")])
    assert_problem(response, 400, "EBADREQ")
