"""Ledger passwords (403 EUA) and the admin bearer token (401 EUA)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from app import ServiceSettings, create_app
from common.errors import InvalidSetting

from .conftest import REPO, SMALL, assert_problem, create_ledger, pw, service_settings

MUTATING_ADMIN = [
    ("PUT", "/api/v1/bookie/gc", None),
    ("PUT", "/api/v1/bookie/gc/suspend_compaction", None),
    ("PUT", "/api/v1/bookie/gc/resume_compaction", None),
    ("PUT", "/api/v1/bookie/state/readonly", {"read_only": False}),
]


def test_missing_or_wrong_password_is_403(client):
    ledger_id = create_ledger(client, password="right")["ledger_id"]
    for headers in ({}, pw("wrong"), pw("")):
        for method, path in [
            ("POST", f"/api/v1/ledgers/{ledger_id}/entries"),
            ("POST", f"/api/v1/ledgers/{ledger_id}/fence"),
            ("POST", f"/api/v1/ledgers/{ledger_id}/close"),
            ("DELETE", f"/api/v1/ledgers/{ledger_id}"),
        ]:
            assert_problem(client.request(method, path, headers=headers, content=b"x"), 403, "EUA")
    assert client.get(f"/api/v1/ledgers/{ledger_id}").json()["state"] == "OPEN"


def test_admin_token_required_when_configured(make_client):
    client = make_client(admin_token="s3cret")
    for method, path, body in MUTATING_ADMIN:
        response = client.request(method, path, json=body)
        assert_problem(response, 401, "EUA")
        assert response.headers["www-authenticate"].startswith("Bearer")
        response = client.request(
            method, path, json=body, headers={"Authorization": "Bearer wrong"}
        )
        assert_problem(response, 401, "EUA")
        response = client.request(method, path, json=body, headers={"Authorization": "Basic x"})
        assert_problem(response, 401, "EUA")
    ok = client.put(
        "/api/v1/bookie/state/readonly",
        json={"read_only": False},
        headers={"Authorization": "Bearer s3cret"},
    )
    assert ok.status_code == 200
    ledger_id = create_ledger(client)["ledger_id"]
    assert_problem(client.post(f"/api/v1/ledgers/{ledger_id}/offload"), 401, "EUA")
    response = client.post(
        f"/api/v1/ledgers/{ledger_id}/offload", headers={"Authorization": "Bearer s3cret"}
    )
    assert_problem(response, 409, "EBADREQ")  # authorised, but offload is not configured
    # Reading admin endpoints need no token; ledger calls use passwords, not the token.
    assert client.get("/api/v1/bookie/state").status_code == 200
    assert client.get("/api/v1/bookie/gc").status_code == 200


def test_no_token_on_loopback_means_open_admin(client):
    response = client.put("/api/v1/bookie/state/readonly", json={"read_only": False})
    assert response.status_code == 200


@pytest.mark.parametrize("host", ["0.0.0.0", "192.0.2.10", "::", "example.org"])
def test_non_loopback_without_token_is_refused(tmp_path, host):
    with pytest.raises(InvalidSetting, match="HOST"):
        create_app(service_settings(tmp_path, host=host))
    settings = service_settings(tmp_path, host=host, admin_token="t")
    create_app(settings)  # accepted with a token


@pytest.mark.parametrize("host", ["127.0.0.1", "127.1.2.3", "::1", "localhost"])
def test_loopback_without_token_is_accepted(tmp_path, host):
    create_app(service_settings(tmp_path, host=host))


def test_serve_refuses_non_loopback_without_token(tmp_path):
    env = {f"LEDGERD_{k.upper()}": str(v) for k, v in SMALL.items()}
    env["LEDGERD_DATA_DIR"] = str(tmp_path / "data")
    result = subprocess.run(
        [sys.executable, "-m", "cli", "serve", "--host", "0.0.0.0", "--port", "1"],
        cwd=REPO,
        env={**_base_env(), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "HOST" in result.stderr and "ADMIN_TOKEN" in result.stderr
    assert not (tmp_path / "data").exists()  # refused before touching anything


def _base_env() -> dict[str, str]:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("LEDGERD_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), str(REPO)) if p)
    return env


def test_empty_token_is_invalid():
    with pytest.raises(InvalidSetting, match="ADMIN_TOKEN"):
        ServiceSettings.load(environ={"LEDGERD_ADMIN_TOKEN": ""})
