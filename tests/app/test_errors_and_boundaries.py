"""The one error mapping (every class of common.errors), and app/'s import boundary."""

from __future__ import annotations

import ast
import logging
from pathlib import Path

import pytest

from app.errors import response_for, status_for
from common import errors
from offload import RemoteStorageError

from .conftest import REPO

TABLE = [
    (errors.NoSuchLedger(3), 404, "ENOLEDGER"),
    (errors.NoSuchEntry(3, 4), 404, "ENOENTRY"),
    (errors.BadRequest("x"), 400, "EBADREQ"),
    (errors.EntryTooLarge("x"), 413, "EBADREQ"),
    (errors.RequestTooLarge("x"), 413, "EBADREQ"),
    (errors.UnsupportedMediaType("x"), 415, "EBADREQ"),
    (errors.NotConfigured("x"), 409, "EBADREQ"),
    (errors.Unauthorized("x"), 403, "EUA"),
    (errors.AuthenticationRequired("x"), 401, "EUA"),
    (errors.LedgerFenced("x"), 409, "EFENCED"),
    (errors.LedgerClosed("x"), 409, "ECLOSED"),
    (errors.EntryConflict("x"), 409, "ECONFLICT"),
    (errors.NotSealed("x"), 409, "ENOTSEALED"),
    (errors.WriteCacheFull("x"), 503, "ETOOMANYREQUESTS"),
    (errors.JournalFull("x"), 503, "ETOOMANYREQUESTS"),
    (errors.SyncTimeout("x"), 503, "ETOOMANYREQUESTS"),
    (errors.WouldBlock("x"), 503, "ETOOMANYREQUESTS"),
    (errors.ReadOnly("x"), 507, "EREADONLY"),
    (errors.TooManyLedgers("x"), 507, "ETOOMANYLEDGERS"),
    (errors.NotReady("x"), 503, "EIO"),
    (errors.WriterSuperseded("x"), 409, "EFENCED"),
    (errors.NotHandedOver("x"), 409, "EFENCED"),
    (errors.BookieLive("x"), 409, "EBADREQ"),
    (errors.IdentityMismatch("x"), 500, "EIO"),
    (errors.NotEnoughBookies("x"), 503, "ETOOMANYREQUESTS"),
    (errors.MetadataConflict("x"), 503, "ETOOMANYREQUESTS"),
    (errors.MetadataUnavailable("x"), 503, "EIO"),
    (errors.LeaseExpired("x"), 503, "EIO"),
    (errors.BookieUnreachable("x"), 503, "EIO"),
    (errors.ReplicaFenced(1, 3, 7), 409, "EFENCED"),
    (errors.DiskFull("x"), 507, "EREADONLY"),
    (errors.DeviceBroken("x"), 500, "EIO"),
    (errors.FormatMismatch("x"), 500, "EIO"),
    (errors.Corruption("x"), 500, "EIO"),
    (errors.CorruptRecord("f", 8, "crc"), 500, "EIO"),
    (errors.TierUnavailable("x"), 503, "EIO"),
    (errors.ConnectionLost("x"), 500, "EIO"),  # client side; never raised by the service
    (RemoteStorageError("PutObject", "k", 3, "x"), 503, "EIO"),
    (errors.InvariantViolation("x"), 500, "EIO"),
    (errors.HostNotAllowed("x"), 400, "EBADREQ"),
    (errors.ForeignOrigin("x"), 403, "EUA"),
    (errors.TooManyRequests("x"), 503, "ETOOMANYREQUESTS"),
    (errors.AuthenticationThrottled("x", 3.0), 429, "ETOOMANYREQUESTS"),
]


@pytest.mark.parametrize(("exc", "status", "code"), TABLE, ids=lambda v: type(v).__name__)
def test_every_engine_error_has_its_status_and_code(exc, status, code):
    assert status_for(exc) == status
    response = response_for(exc)
    assert response.status_code == status
    assert response.media_type == "application/problem+json"
    assert f'"code":"{code}"'.encode() in response.body


def test_table_covers_the_whole_tree():
    def leaves(cls: type) -> set[type]:
        subs = cls.__subclasses__()
        return {cls} if not subs else set().union(*(leaves(s) for s in subs)) | {cls}

    covered = {type(exc) for exc, _, _ in TABLE}
    abstract = {
        errors.LedgerdError,
        errors.CallerError,
        errors.Backpressure,
        errors.StorageUnavailable,
        errors.InvalidSetting,
    }
    assert leaves(errors.LedgerdError) - abstract - covered == set()


def test_backpressure_sets_retry_after():
    exc = errors.WriteCacheFull("full")
    exc.retry_after_s = 2.2
    assert response_for(exc).headers["retry-after"] == "3"


def test_an_unreachable_remote_tier_says_when_to_retry(caplog):
    """The client learns when to retry and the request's id; the S3 request that
    failed (its key, the endpoint's answer) goes to the log under that id."""
    response = response_for(RemoteStorageError("GetObject", "k", 5, "connection refused"),
                            request_id="r-1")
    assert response.headers["retry-after"] == "5"
    assert b"GetObject" not in response.body and b"request r-1" in response.body
    assert "request r-1 failed" in caplog.text
    assert "S3 GetObject of 'k' failed after 5 attempt(s)" in caplog.text


def test_a_broken_device_does_not_ask_for_a_retry():
    assert "retry-after" not in response_for(errors.DeviceBroken("eio")).headers


def test_app_imports_no_private_module_of_another_package():
    offenders = []
    for path in sorted((REPO / "app").glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            for name in names:
                parts = name.split(".")
                if parts[0] != "app" and any(p.startswith("_") for p in parts[1:]):
                    offenders.append(f"{Path(path).name}: {name}")
    assert offenders == []


def test_corrupted_entry_is_500_eio_never_data(tmp_path, caplog):
    """The client gets 500 EIO with a request id, no data and no path; the log
    has the entry log's path under that id."""
    from app import create_app

    from .conftest import TestClient, assert_problem, create_ledger, pw, service_settings

    data_dir = tmp_path / "data"
    marker = b"CORRUPT-ME-" * 100
    with TestClient(create_app(service_settings(data_dir))) as client:
        ledger_id = create_ledger(client)["ledger_id"]
        assert (
            client.post(
                f"/api/v1/ledgers/{ledger_id}/entries", content=marker, headers=pw()
            ).status_code
            == 201
        )
    # A clean shutdown checkpointed the entry into an entry log: flip one byte of it.
    hits = []
    for log in (data_dir / "entrylogs").glob("*.log"):
        raw = bytearray(log.read_bytes())
        at = raw.find(marker)
        if at >= 0:
            raw[at + 500] ^= 0xFF
            log.write_bytes(bytes(raw))
            hits.append(log)
    assert hits, "entry not found in any entry log"
    app = create_app(service_settings(data_dir))
    with (TestClient(app, raise_server_exceptions=False) as client,
          caplog.at_level(logging.ERROR, logger="ledgerd.errors")):
        response = client.get(f"/api/v1/ledgers/{ledger_id}/entries/0")
    body = assert_problem(response, 500, "EIO")
    assert marker not in response.content
    request_id = response.headers["X-Request-Id"]
    assert request_id in body["detail"]
    assert str(tmp_path) not in body["detail"] and "entrylogs" not in body["detail"]
    failure = [r.getMessage() for r in caplog.records if request_id in r.getMessage()]
    assert failure and str(hits[0]) in failure[0], caplog.text
