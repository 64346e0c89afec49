"""HTTPS (issue 14, item 3): TLS_CERT_FILE and TLS_KEY_FILE, with a certificate
made at test time by the ``openssl`` command and clients that verify it."""

from __future__ import annotations

import asyncio
import base64
import os
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.settings import ServiceSettings
from app.tls import uvicorn_tls_options
from common.errors import ConnectionLost, InvalidSetting
from streaming import Appended, AppendStream
from tools.local_pki import Pki, make_pki

from .conftest import REPO, LiveServer, create_ledger, pw, service_settings


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """A CA and a server certificate for 127.0.0.1 and localhost, signed by it."""
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def https_server(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    server = LiveServer(tmp_path_factory.mktemp("tls") / "data",
                        {"tls_cert_file": pki.cert, "tls_key_file": pki.key},
                        ca_file=pki.ca).start()
    try:
        yield server
    finally:
        server.stop()


def test_a_client_that_trusts_the_ca_talks_https(https_server, pki):
    """Proves TLS end to end: ``ledgerd serve`` answers HTTPS with the configured
    certificate, which a client verifies against the CA (by address and by name)."""
    assert https_server.url.startswith("https://")
    trusted = ssl.create_default_context(cafile=str(pki.ca))
    with httpx.Client(base_url=https_server.url, verify=trusted) as client:
        ledger_id = create_ledger(client)["ledger_id"]
        added = client.post(f"/api/v1/ledgers/{ledger_id}/entries", content=b"secret",
                            headers=pw())
        assert added.status_code == 201, added.text
        assert client.get(f"/api/v1/ledgers/{ledger_id}/entries/0").content == b"secret"
    by_name = https_server.url.replace("127.0.0.1", "localhost")
    assert httpx.get(f"{by_name}/heartbeat", verify=trusted).json() == {"status": "OK"}


def test_clients_that_do_not_trust_it_or_speak_plain_http_get_nothing(https_server):
    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        httpx.get(f"{https_server.url}/heartbeat")  # the system's CAs only
    plain = https_server.url.replace("https://", "http://")
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{plain}/heartbeat")


def test_an_append_stream_over_wss_verifies_the_certificate(https_server, pki):
    """DESIGN §5a over TLS: the stream is a wss:// WebSocket on the HTTPS port, and a
    client trusting the CA appends through it; the entries read back byte for byte."""
    trusted = ssl.create_default_context(cafile=str(pki.ca))
    with httpx.Client(base_url=https_server.url, verify=trusted) as client:
        ledger_id = create_ledger(client)["ledger_id"]
    messages = [[b"one", b"\x00two"], [bytes(range(256)) * 40], [b"four", b"five", b"six"]]

    async def append() -> list[Appended]:
        async with await AppendStream.open(https_server.url, ledger_id, password="pw",
                                           ssl=trusted) as stream:
            assert stream.url.startswith("wss://")
            return [await stream.append(m) for m in messages]

    acks = asyncio.run(append())
    assert [(a.first_entry_id, a.last_entry_id) for a in acks] == [(0, 1), (2, 2), (3, 5)]
    with httpx.Client(base_url=https_server.url, verify=trusted) as client:
        page = client.get(f"/api/v1/ledgers/{ledger_id}/entries").json()
    assert [base64.b64decode(e["payload"]) for e in page["entries"]] == [
        p for m in messages for p in m]


def test_an_append_stream_that_does_not_trust_the_ca_is_refused(https_server, pki,
                                                                tmp_path):
    with httpx.Client(base_url=https_server.url,
                      verify=ssl.create_default_context(cafile=str(pki.ca))) as client:
        ledger_id = create_ledger(client)["ledger_id"]

    async def append_through(url: str, **options: Any) -> None:
        async with await AppendStream.open(url, ledger_id, password="pw",
                                           reconnect_attempts=0, **options) as stream:
            await stream.append([b"never"])

    with pytest.raises(ConnectionLost, match="CERTIFICATE_VERIFY_FAILED"):
        asyncio.run(append_through(https_server.url))  # the system's CAs only
    other_ca = make_pki(tmp_path, "other").ca
    with pytest.raises(ConnectionLost, match="CERTIFICATE_VERIFY_FAILED"):
        asyncio.run(append_through(https_server.url,
                                   ssl=ssl.create_default_context(cafile=str(other_ca))))
    with pytest.raises(ConnectionLost):  # ws:// to the HTTPS port: no WebSocket
        asyncio.run(append_through(https_server.url.replace("https://", "ws://")))
    with httpx.Client(base_url=https_server.url,
                      verify=ssl.create_default_context(cafile=str(pki.ca))) as client:
        assert client.get(f"/api/v1/ledgers/{ledger_id}").json()["entries"] == 0


def _tls(tmp_path: Path, **files: Path | str) -> dict[str, str]:
    return dict(uvicorn_tls_options(service_settings(tmp_path / "data", **files)))


def test_no_tls_settings_means_plain_http(tmp_path):
    assert _tls(tmp_path) == {}


def test_tls_files_that_do_not_load_are_refused_naming_the_setting(tmp_path, pki):
    with pytest.raises(InvalidSetting, match=r"TLS_KEY_FILE='/nonexistent/key\.pem'"):
        _tls(tmp_path, tls_cert_file=pki.cert, tls_key_file="/nonexistent/key.pem")
    with pytest.raises(InvalidSetting, match=r"TLS_CERT_FILE=.*cannot read"):
        _tls(tmp_path, tls_cert_file=tmp_path, tls_key_file=pki.key)  # a directory
    with pytest.raises(InvalidSetting, match=r"TLS_CERT_FILE=.*TLS_KEY_FILE=.*not a PEM"):
        _tls(tmp_path, tls_cert_file=pki.cert, tls_key_file=pki.other_key)
    with pytest.raises(InvalidSetting, match="not a PEM"):
        _tls(tmp_path, tls_cert_file=pki.key, tls_key_file=pki.key)
    assert _tls(tmp_path, tls_cert_file=pki.cert, tls_key_file=pki.key) == {
        "ssl_certfile": str(pki.cert), "ssl_keyfile": str(pki.key)}


@pytest.mark.parametrize(("given", "missing"), [("CERT", "KEY"), ("KEY", "CERT")])
def test_serve_refuses_one_tls_file_without_the_other(tmp_path, pki, given, missing):
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEDGERD_")}
    env[f"LEDGERD_TLS_{given}_FILE"] = str(pki.cert if given == "CERT" else pki.key)
    env["LEDGERD_DATA_DIR"] = str(tmp_path / "data")
    result = subprocess.run([sys.executable, "-m", "cli", "serve", "--port", "0"], cwd=REPO,
                            env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    said = " ".join(result.stderr.split())  # the console wraps long lines
    assert f"TLS_{given}_FILE is set but TLS_{missing}_FILE is not" in said


# --- cluster mode: what a node advertises and whom it trusts ----------------------

CLUSTER = {"LEDGERD_METADATA_URL": "etcd://127.0.0.1:2379/tls",
           "LEDGERD_CLUSTER_TOKEN": "t"}


def _cluster_settings(pki: Pki, **env: str) -> ServiceSettings:
    tls = {"LEDGERD_TLS_CERT_FILE": str(pki.cert), "LEDGERD_TLS_KEY_FILE": str(pki.key)}
    return ServiceSettings.load(environ={**CLUSTER, **tls, **env})


def test_a_tls_node_advertises_https_and_trusts_tls_ca_file(pki):
    cluster = _cluster_settings(pki, LEDGERD_TLS_CA_FILE=str(pki.ca),
                                LEDGERD_PORT="8443").to_node().cluster_mode
    assert cluster is not None
    assert (cluster.advertised_url, cluster.tls_ca_file) == ("https://127.0.0.1:8443", pki.ca)
    plain = ServiceSettings.load(environ=CLUSTER).to_node().cluster_mode
    assert plain is not None
    assert (plain.advertised_url, plain.tls_ca_file) == ("http://127.0.0.1:8080", None)


def test_an_advertised_scheme_that_is_not_what_the_node_serves_is_refused(pki):
    with pytest.raises(InvalidSetting, match=r"ADVERTISED_URL='http://n1:8080' is not "
                                             r"https:// but TLS_CERT_FILE is set"):
        _cluster_settings(pki, LEDGERD_ADVERTISED_URL="http://n1:8080")
    with pytest.raises(InvalidSetting, match=r"ADVERTISED_URL='https://n1:8080' is https:// "
                                             r"but TLS_CERT_FILE is not set"):
        ServiceSettings.load(environ={**CLUSTER, "LEDGERD_ADVERTISED_URL": "https://n1:8080"})
    given = _cluster_settings(pki, LEDGERD_ADVERTISED_URL="https://n1.example:8443")
    assert given.to_node().cluster_mode.advertised_url == "https://n1.example:8443"


def test_tls_ca_file_is_for_cluster_mode_and_must_load(tmp_path, pki):
    with pytest.raises(InvalidSetting, match="TLS_CA_FILE is the trust of node-to-node"):
        ServiceSettings.load(environ={"LEDGERD_TLS_CA_FILE": str(pki.ca)})
    with pytest.raises(InvalidSetting, match=r"TLS_CA_FILE='/nonexistent/ca\.pem': cannot read"):
        uvicorn_tls_options(_cluster_settings(pki, LEDGERD_TLS_CA_FILE="/nonexistent/ca.pem"))
    with pytest.raises(InvalidSetting, match=r"TLS_CA_FILE=.*not a readable PEM bundle"):
        uvicorn_tls_options(_cluster_settings(pki, LEDGERD_TLS_CA_FILE=str(pki.key)))
    assert uvicorn_tls_options(_cluster_settings(pki, LEDGERD_TLS_CA_FILE=str(pki.ca)))
