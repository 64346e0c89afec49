"""The single add's short way past FastAPI (app/fast_paths.py) answers exactly as
the route does.

Each request is sent twice, to two ledgers in the same state: once as it is,
which the shortcut takes, and once with an extra query parameter, which the
shortcut leaves to FastAPI (the route ignores parameters it does not know).
Both answers must be the same: status, body, media type.  A spy checks that the
first went through the shortcut and the second did not.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient

import app.fast_paths as fast_paths
from app.models import ID_MAX

from .conftest import create_ledger

OCTETS = {"Content-Type": "application/octet-stream"}


@pytest.fixture
def shortcut_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = fast_paths.add_single

    async def spy(request: Any, ledger_id: int, *args: Any) -> Any:
        calls.append(ledger_id)
        return await real(request, ledger_id, *args)

    monkeypatch.setattr(fast_paths, "add_single", spy)
    return calls


def _comparable(response: Any) -> tuple[int, str, Any]:
    body = response.json()
    if isinstance(body, dict) and "detail" in body and "code" in body:
        # A private detail names the request's id, which differs between the two.
        body = {k: v for k, v in body.items() if k != "detail"}
    return response.status_code, response.headers["content-type"], body


def _both(client: TestClient, prepare: Callable[[int], None], path: str,
          password: str, **request: Any) -> tuple[Any, Any, int, int]:
    """The same request on two fresh ledgers in the same state: plain, then with
    an extra query parameter."""
    plain_id = create_ledger(client, password)["ledger_id"]
    routed_id = create_ledger(client, password)["ledger_id"]
    for ledger_id in (plain_id, routed_id):
        prepare(ledger_id)
    separator = "&" if "?" in path else "?"
    plain = client.post(path.format(id=plain_id), **request)
    routed = client.post(path.format(id=routed_id) + f"{separator}via=fastapi", **request)
    return plain, routed, plain_id, routed_id


def _nothing(_ledger_id: int) -> None:
    pass


CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "add": ("/api/v1/ledgers/{id}/entries",
            {"content": b"x" * 100, "headers": {**OCTETS, "X-Ledger-Password": "pw"}}),
    "no content type": ("/api/v1/ledgers/{id}/entries",
                        {"content": b"y", "headers": {"X-Ledger-Password": "pw"}}),
    "wrong password": ("/api/v1/ledgers/{id}/entries",
                       {"content": b"x", "headers": {**OCTETS, "X-Ledger-Password": "no"}}),
    "no password": ("/api/v1/ledgers/{id}/entries", {"content": b"x", "headers": OCTETS}),
    "bad ext-value": ("/api/v1/ledgers/{id}/entries",
                      {"content": b"x", "headers": {**OCTETS,
                                                    "X-Ledger-Password": "UTF-8''%zz"}}),
    "JSON body": ("/api/v1/ledgers/{id}/entries",
                  {"json": {"a": 1}, "headers": {"X-Ledger-Password": "pw"}}),
    "too large": ("/api/v1/ledgers/{id}/entries",
                  {"content": b"z" * (64 * 1024 * 1024),
                   "headers": {**OCTETS, "X-Ledger-Password": "pw"}}),
    "gap": ("/api/v1/ledgers/{id}/entries?entry_id=5",
            {"content": b"x", "headers": {**OCTETS, "X-Ledger-Password": "pw"}}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_shortcut_answers_as_the_route(client: TestClient, shortcut_calls: list[int],
                                           case: str):
    path, request = CASES[case]
    plain, routed, plain_id, _ = _both(client, _nothing, path, "pw", **request)
    assert _comparable(plain) == _comparable(routed), (plain.text, routed.text)
    assert shortcut_calls == [plain_id]  # the second went through FastAPI


def test_a_retry_with_an_entry_id_and_a_closed_ledger_answer_as_the_route(
        client: TestClient, shortcut_calls: list[int]):
    def one_entry(ledger_id: int) -> None:
        client.post(f"/api/v1/ledgers/{ledger_id}/entries", content=b"first",
                    headers={**OCTETS, "X-Ledger-Password": "pw"}).raise_for_status()

    headers = {**OCTETS, "X-Ledger-Password": "pw"}
    plain, routed, *_ = _both(client, one_entry, "/api/v1/ledgers/{id}/entries?entry_id=0",
                              "pw", content=b"first", headers=headers)
    assert plain.status_code == 200 and _comparable(plain) == _comparable(routed)

    def closed(ledger_id: int) -> None:
        one_entry(ledger_id)
        client.post(f"/api/v1/ledgers/{ledger_id}/close",
                    headers={"X-Ledger-Password": "pw"}).raise_for_status()

    plain, routed, *_ = _both(client, closed, "/api/v1/ledgers/{id}/entries", "pw",
                              content=b"late", headers=headers)
    assert plain.status_code == 409 and _comparable(plain) == _comparable(routed)


@pytest.mark.parametrize("path", [
    "/api/v1/ledgers/007/entries",  # leading zeros: FastAPI reads 7
    "/api/v1/ledgers/{id}/entries?entry_id=00",
    "/api/v1/ledgers/{id}/entries?entry_id=",
    "/api/v1/ledgers/{id}/entries?entry_id=1&entry_id=2",
    f"/api/v1/ledgers/{ID_MAX + 1}/entries",
    "/api/v1/ledgers/{id}/entries/",
])
def test_other_forms_go_to_fastapi(client: TestClient, shortcut_calls: list[int], path: str):
    ledger_id = create_ledger(client, "pw")["ledger_id"]
    # Not following FastAPI's redirect of the trailing slash, which the shortcut takes.
    client.post(path.format(id=ledger_id), content=b"x", follow_redirects=False,
                headers={**OCTETS, "X-Ledger-Password": "pw"})
    assert shortcut_calls == []


def test_two_password_headers_go_to_fastapi(client: TestClient, shortcut_calls: list[int]):
    ledger_id = create_ledger(client, "pw")["ledger_id"]
    client.post(f"/api/v1/ledgers/{ledger_id}/entries", content=b"x",
                headers=[("Content-Type", "application/octet-stream"),
                         ("X-Ledger-Password", "pw"), ("X-Ledger-Password", "other")])
    assert shortcut_calls == []
