"""Unbounded ledgers (issue 14, item 5) at the API: MAX_LEDGERS is a quota with a
clear error, and listing pages through a table that changes meanwhile."""

from __future__ import annotations

import threading

from app import create_app

from .conftest import TestClient, assert_problem, create_ledger, pw, service_settings


def _ids(client: TestClient, **params: int) -> list[int]:
    ids: list[int] = []
    after = None
    while True:
        query = {**params, **({"after": after} if after is not None else {})}
        page = client.get("/api/v1/ledgers", params=query).json()
        ids += [ledger["ledger_id"] for ledger in page["ledgers"]]
        after = page["next_after"]
        if after is None:
            return ids


def test_max_ledgers_is_a_quota_with_a_clear_error(tmp_path):
    """Proves the quota end to end: the sixth ledger of five allowed is 507
    ETOOMANYLEDGERS naming the setting, a delete makes room, and a restart with a
    lower quota keeps every ledger readable while refusing new ones."""
    data_dir = tmp_path / "data"
    with TestClient(create_app(service_settings(data_dir, max_ledgers=5))) as client:
        ids = [create_ledger(client)["ledger_id"] for _ in range(5)]
        refused = client.post("/api/v1/ledgers", json={"password": "pw"})
        body = assert_problem(refused, 507, "ETOOMANYLEDGERS")
        assert "MAX_LEDGERS" in body["detail"]
        assert client.delete(f"/api/v1/ledgers/{ids[0]}", headers=pw()).status_code == 204
        ids = [*ids[1:], create_ledger(client)["ledger_id"]]
        assert _ids(client, limit=2) == ids
    with TestClient(create_app(service_settings(data_dir, max_ledgers=3))) as client:
        assert _ids(client) == ids
        assert_problem(client.post("/api/v1/ledgers", json={}), 507, "ETOOMANYLEDGERS")
        assert client.post(f"/api/v1/ledgers/{ids[0]}/entries", content=b"x",
                           headers=pw()).status_code == 201


def test_listing_pages_stay_ordered_while_ledgers_come_and_go(make_client):
    """Pages of a listing are read without the add lock while other requests
    create and delete ledgers: every page is in id order, no id shows twice, and
    every ledger that lived through the whole listing is in it."""
    client = make_client()
    survivors = [create_ledger(client)["ledger_id"] for _ in range(60)]
    stop = threading.Event()
    churned: list[int] = []

    def churn() -> None:
        while not stop.is_set():
            ledger_id = create_ledger(client)["ledger_id"]
            churned.append(ledger_id)
            if len(churned) % 2 == 0:
                client.delete(f"/api/v1/ledgers/{churned[-2]}", headers=pw())

    writer = threading.Thread(target=churn)
    writer.start()
    try:
        listings = [_ids(client, limit=7) for _ in range(10)]
    finally:
        stop.set()
        writer.join()
    assert churned, "nothing changed while listing"
    for ids in listings:
        assert ids == sorted(set(ids))
        assert set(survivors) <= set(ids)
