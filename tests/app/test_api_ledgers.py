"""In-process tests of /api/v1/ledgers against the real engine: every endpoint and
every error code DESIGN.md §5 gives them."""

from __future__ import annotations

import base64
import struct

import crc32c
import pytest

from common.frames import FRAMES_MEDIA_TYPE, decode_download, encode_upload

from .conftest import assert_problem, create_ledger, pw

ID_MAX = 2**63 - 1


def append(client, ledger_id: int, payload: bytes, password: str = "pw", **params):
    return client.post(
        f"/api/v1/ledgers/{ledger_id}/entries",
        content=payload,
        params=params,
        headers={**pw(password), "Content-Type": "application/octet-stream"},
    )


# --- create / get / list / delete -------------------------------------------------


def test_create_returns_an_open_empty_ledger(client):
    ledger = create_ledger(client, owner="tests")
    assert ledger["state"] == "OPEN"
    assert ledger["last_add_confirmed"] == -1
    assert ledger["length"] == 0 and ledger["entries"] == 0
    assert ledger["closed_at"] is None
    assert ledger["metadata"] == {"owner": "tests"}
    assert ledger["offload"]["state"] == "NONE"
    assert client.get(f"/api/v1/ledgers/{ledger['ledger_id']}").json() == ledger


def test_create_with_defaults(client):
    response = client.post("/api/v1/ledgers", json={})
    assert response.status_code == 201
    ledger_id = response.json()["ledger_id"]
    # Missing header = empty password, which is this ledger's password.
    assert append(client, ledger_id, b"x", password="").status_code == 201
    assert client.post(f"/api/v1/ledgers/{ledger_id}/entries", content=b"y").status_code == 201


@pytest.mark.parametrize(
    "body",
    [
        '{"password": 5}',
        '{"metadata": {"a": 1}}',
        '{"metadata": ["a"]}',
        '{"unknown": true}',
        '{"password": "\\ud800"}',
        '{"metadata": {"\\udfff": "x"}}',
    ],
)
def test_create_rejects_malformed_bodies(client, body):
    response = client.post(
        "/api/v1/ledgers", content=body.encode(), headers={"Content-Type": "application/json"}
    )
    assert_problem(response, 422, "EBADREQ")


def test_create_rejects_non_json(client):
    response = client.post(
        "/api/v1/ledgers", content=b"{nope", headers={"Content-Type": "application/json"}
    )
    assert_problem(response, 422, "EBADREQ")


def test_create_enforces_metadata_limits(client):
    too_many = {f"k{i}": "v" for i in range(65)}
    assert_problem(client.post("/api/v1/ledgers", json={"metadata": too_many}), 400, "EBADREQ")
    too_big = {"k": "v" * (16 * 1024)}
    assert_problem(client.post("/api/v1/ledgers", json={"metadata": too_big}), 400, "EBADREQ")
    long_password = {"password": "p" * 1025}
    assert_problem(client.post("/api/v1/ledgers", json=long_password), 400, "EBADREQ")


def test_get_unknown_ledger_is_404_enoledger(client):
    body = assert_problem(client.get(f"/api/v1/ledgers/{ID_MAX}"), 404, "ENOLEDGER")
    assert body["type"] == "urn:ledgerd:error:ENOLEDGER"
    assert body["title"] == "No such ledger"


@pytest.mark.parametrize("bad", ["-1", str(2**63), "abc", "1.5"])
def test_path_ids_are_bounded(client, bad):
    assert_problem(client.get(f"/api/v1/ledgers/{bad}"), 422, "EBADREQ")
    # An entry id is digits (the path .../entries/batch is another resource): anything
    # else is no route at all.
    status = 422 if bad.isdigit() else 404
    assert_problem(client.get(f"/api/v1/ledgers/0/entries/{bad}"), status, "EBADREQ")


def test_list_pages_in_id_order_and_filters_by_state(client):
    ids = [create_ledger(client)["ledger_id"] for _ in range(5)]
    closed = ids[1]
    assert client.post(f"/api/v1/ledgers/{closed}/close", headers=pw()).status_code == 200
    seen: list[int] = []
    after = ids[0] - 1 if ids[0] > 0 else None
    while True:
        params = {"limit": 2}
        if after is not None:
            params["after"] = after
        page = client.get("/api/v1/ledgers", params=params).json()
        assert len(page["ledgers"]) <= 2
        seen.extend(item["ledger_id"] for item in page["ledgers"])
        after = page["next_after"]
        if after is None:
            break
    assert [i for i in seen if i in ids] == ids
    assert seen == sorted(seen)
    closed_ids = [
        item["ledger_id"]
        for item in client.get("/api/v1/ledgers", params={"state": "CLOSED", "limit": 1000}).json()[
            "ledgers"
        ]
    ]
    assert closed in closed_ids and ids[0] not in closed_ids


def test_list_filters_by_metadata_pairs_and_offload_state(client):
    tag = {"console": "filter-test"}
    ids = [create_ledger(client, **tag, n=str(i))["ledger_id"] for i in range(3)]
    create_ledger(client, console="something-else")
    listed = client.get("/api/v1/ledgers", params=[("metadata", "console=filter-test"),
                                                   ("limit", "2")]).json()
    assert [item["ledger_id"] for item in listed["ledgers"]] == ids[:2]
    rest = client.get("/api/v1/ledgers", params=[("metadata", "console=filter-test"),
                                                 ("after", str(listed["next_after"]))]).json()
    assert [item["ledger_id"] for item in rest["ledgers"]] == ids[2:]
    assert rest["next_after"] is None
    both = client.get("/api/v1/ledgers", params=[("metadata", "console=filter-test"),
                                                 ("metadata", "n=1")]).json()
    assert [item["ledger_id"] for item in both["ledgers"]] == [ids[1]]
    # A value may hold "=": only the first one splits.
    assert client.get("/api/v1/ledgers", params={"metadata": "console=a=b"}).json()[
        "ledgers"] == []
    failed = client.get("/api/v1/ledgers", params={"offload_state": "FAILED"}).json()
    assert failed == {"ledgers": [], "next_after": None}
    assert_problem(client.get("/api/v1/ledgers", params={"metadata": "no-equals-sign"}),
                   422, "EBADREQ")


@pytest.mark.parametrize(
    "params", [{"limit": 0}, {"limit": 1001}, {"after": -1}, {"state": "SEALED"},
               {"offload_state": "GONE"}, [("metadata", f"k{i}=v") for i in range(17)]]
)
def test_list_query_is_validated(client, params):
    assert_problem(client.get("/api/v1/ledgers", params=params), 422, "EBADREQ")


def test_delete_needs_the_password_then_404s(client):
    ledger_id = create_ledger(client)["ledger_id"]
    assert append(client, ledger_id, b"data").status_code == 201
    assert_problem(client.delete(f"/api/v1/ledgers/{ledger_id}", headers=pw("wrong")), 403, "EUA")
    assert_problem(client.delete(f"/api/v1/ledgers/{ledger_id}"), 403, "EUA")
    response = client.delete(f"/api/v1/ledgers/{ledger_id}", headers=pw())
    assert response.status_code == 204 and response.content == b""
    assert_problem(client.get(f"/api/v1/ledgers/{ledger_id}"), 404, "ENOLEDGER")
    assert_problem(client.get(f"/api/v1/ledgers/{ledger_id}/entries/0"), 404, "ENOLEDGER")
    assert_problem(client.delete(f"/api/v1/ledgers/{ledger_id}", headers=pw()), 404, "ENOLEDGER")


# --- add ----------------------------------------------------------------------------


def test_add_assigns_dense_ids_and_reports_lac_and_crc(client):
    ledger_id = create_ledger(client)["ledger_id"]
    for i, payload in enumerate([b"a", b"", b"\x00\xff" * 1000]):
        response = append(client, ledger_id, payload)
        assert response.status_code == 201, response.text
        assert response.json() == {
            "entry_id": i,
            "last_add_confirmed": i,
            "crc32c": crc32c.crc32c(payload),
        }
    ledger = client.get(f"/api/v1/ledgers/{ledger_id}").json()
    assert ledger["last_add_confirmed"] == 2
    assert ledger["entries"] == 3
    assert ledger["length"] == 1 + 0 + 2000


def test_add_wrong_password_is_403_eua(client):
    ledger_id = create_ledger(client, password="secret")["ledger_id"]
    assert_problem(append(client, ledger_id, b"x", password="wrong"), 403, "EUA")
    assert_problem(client.post(f"/api/v1/ledgers/{ledger_id}/entries", content=b"x"), 403, "EUA")


def test_non_ascii_password_in_header_matches_json(client):
    ledger_id = create_ledger(client, password="pässwörd")["ledger_id"]
    response = client.post(
        f"/api/v1/ledgers/{ledger_id}/entries",
        content=b"x",
        headers=[(b"x-ledger-password", "pässwörd".encode())],
    )
    assert response.status_code == 201, response.text


def test_add_to_unknown_ledger_is_404(client):
    assert_problem(append(client, ID_MAX, b"x"), 404, "ENOLEDGER")


def test_add_too_large_is_413(client):
    ledger_id = create_ledger(client)["ledger_id"]
    body = assert_problem(append(client, ledger_id, b"x" * (256 * 1024 + 1)), 413, "EBADREQ")
    assert "MAX_ENTRY_SIZE" in body["detail"]
    assert append(client, ledger_id, b"x" * (256 * 1024)).status_code == 201


def test_add_to_fenced_is_409_efenced_and_closed_is_409_eclosed(client):
    fenced = create_ledger(client)["ledger_id"]
    assert append(client, fenced, b"before").status_code == 201
    response = client.post(f"/api/v1/ledgers/{fenced}/fence", headers=pw())
    assert response.status_code == 200 and response.json()["state"] == "FENCED"
    assert_problem(append(client, fenced, b"after"), 409, "EFENCED")
    # A fenced ledger still reads, up to its LAC.
    assert client.get(f"/api/v1/ledgers/{fenced}/entries/0").content == b"before"

    closed = create_ledger(client)["ledger_id"]
    assert append(client, closed, b"one").status_code == 201
    response = client.post(f"/api/v1/ledgers/{closed}/close", headers=pw())
    assert response.status_code == 200
    ledger = response.json()
    assert ledger["state"] == "CLOSED" and ledger["closed_at"] is not None
    assert ledger["last_add_confirmed"] == 0 and ledger["length"] == 3
    assert_problem(append(client, closed, b"two"), 409, "ECLOSED")


def test_fence_and_close_check_the_password(client):
    ledger_id = create_ledger(client)["ledger_id"]
    assert_problem(client.post(f"/api/v1/ledgers/{ledger_id}/fence", headers=pw("x")), 403, "EUA")
    assert_problem(client.post(f"/api/v1/ledgers/{ledger_id}/close", headers=pw("x")), 403, "EUA")
    assert_problem(client.post(f"/api/v1/ledgers/{ID_MAX}/fence", headers=pw()), 404, "ENOLEDGER")
    assert_problem(client.post(f"/api/v1/ledgers/{ID_MAX}/close", headers=pw()), 404, "ENOLEDGER")


def test_idempotent_append(client):
    ledger_id = create_ledger(client)["ledger_id"]
    first = append(client, ledger_id, b"zero", entry_id=0)
    assert first.status_code == 201 and first.json()["entry_id"] == 0
    retry = append(client, ledger_id, b"zero", entry_id=0)
    assert retry.status_code == 200
    assert retry.json()["entry_id"] == 0
    assert_problem(append(client, ledger_id, b"other", entry_id=0), 409, "ECONFLICT")
    assert_problem(append(client, ledger_id, b"gap", entry_id=5), 409, "ECONFLICT")
    assert append(client, ledger_id, b"one", entry_id=1).status_code == 201
    assert_problem(append(client, ledger_id, b"x", entry_id=-1), 422, "EBADREQ")


# --- batch --------------------------------------------------------------------------


def test_idempotent_batch(client):
    ledger_id = create_ledger(client)["ledger_id"]
    url = f"/api/v1/ledgers/{ledger_id}/entries/batch"
    body = {"entries": [base64.b64encode(p).decode() for p in (b"a", b"bb")]}
    first = client.post(url, params={"first_entry_id": 0}, json=body, headers=pw())
    assert first.status_code == 201 and first.json()["first_entry_id"] == 0
    retry = client.post(url, params={"first_entry_id": 0}, json=body, headers=pw())
    assert retry.status_code == 200
    assert retry.json() == {"first_entry_id": 0, "last_entry_id": 1, "last_add_confirmed": 1}
    other = {"entries": [base64.b64encode(b"zz").decode()]}
    assert_problem(client.post(url, params={"first_entry_id": 0}, json=other, headers=pw()),
                   409, "ECONFLICT")
    assert_problem(client.post(url, params={"first_entry_id": 7}, json=body, headers=pw()),
                   409, "ECONFLICT")
    assert client.post(url, params={"first_entry_id": 2}, json=body,
                       headers=pw()).status_code == 201


def test_batch_json_and_frames(client):
    ledger_id = create_ledger(client)["ledger_id"]
    payloads = [b"a", b"", b"ccc"]
    response = client.post(
        f"/api/v1/ledgers/{ledger_id}/entries/batch",
        headers=pw(),
        json={"entries": [base64.b64encode(p).decode() for p in payloads]},
    )
    assert response.status_code == 201, response.text
    assert response.json() == {"first_entry_id": 0, "last_entry_id": 2, "last_add_confirmed": 2}
    response = client.post(
        f"/api/v1/ledgers/{ledger_id}/entries/batch",
        content=encode_upload([b"d", b"ee"]),
        headers={**pw(), "Content-Type": FRAMES_MEDIA_TYPE},
    )
    assert response.status_code == 201, response.text
    assert response.json() == {"first_entry_id": 3, "last_entry_id": 4, "last_add_confirmed": 4}
    got = [client.get(f"/api/v1/ledgers/{ledger_id}/entries/{i}").content for i in range(5)]
    assert got == [b"a", b"", b"ccc", b"d", b"ee"]


@pytest.mark.parametrize(
    ("content", "content_type", "status"),
    [
        (b'{"entries": ["not base64!"]}', "application/json", 400),
        (b'{"entries": []}', "application/json", 400),
        (b'{"entries": "x"}', "application/json", 422),
        (b"{", "application/json", 422),
        (b"\x00\x00\x00\x05abc", FRAMES_MEDIA_TYPE, 400),  # cut frame
        (b"\x00\x00", FRAMES_MEDIA_TYPE, 400),  # cut length
        (b"", FRAMES_MEDIA_TYPE, 400),  # empty batch
        (b"abc", "text/plain", 415),
    ],
)
def test_batch_is_validated_before_anything_is_written(client, content, content_type, status):
    ledger_id = create_ledger(client)["ledger_id"]
    response = client.post(
        f"/api/v1/ledgers/{ledger_id}/entries/batch",
        content=content,
        headers={**pw(), "Content-Type": content_type},
    )
    assert_problem(response, status, "EBADREQ")
    assert client.get(f"/api/v1/ledgers/{ledger_id}").json()["last_add_confirmed"] == -1


def test_batch_with_one_oversized_entry_writes_nothing(client):
    ledger_id = create_ledger(client)["ledger_id"]
    frames = encode_upload([b"ok", b"x" * (256 * 1024 + 1)])
    response = client.post(
        f"/api/v1/ledgers/{ledger_id}/entries/batch",
        content=frames,
        headers={**pw(), "Content-Type": FRAMES_MEDIA_TYPE},
    )
    assert_problem(response, 413, "EBADREQ")
    big = base64.b64encode(b"x" * (256 * 1024 + 1)).decode()
    response = client.post(
        f"/api/v1/ledgers/{ledger_id}/entries/batch", headers=pw(), json={"entries": ["", big]}
    )
    assert_problem(response, 413, "EBADREQ")
    assert client.get(f"/api/v1/ledgers/{ledger_id}").json()["last_add_confirmed"] == -1


def test_batch_errors_from_the_engine(client):
    ledger_id = create_ledger(client)["ledger_id"]
    url = f"/api/v1/ledgers/{ledger_id}/entries/batch"
    assert_problem(client.post(url, headers=pw("x"), json={"entries": ["YQ=="]}), 403, "EUA")
    missing = f"/api/v1/ledgers/{ID_MAX}/entries/batch"
    assert_problem(client.post(missing, headers=pw(), json={"entries": ["YQ=="]}), 404, "ENOLEDGER")
    client.post(f"/api/v1/ledgers/{ledger_id}/close", headers=pw())
    assert_problem(client.post(url, headers=pw(), json={"entries": ["YQ=="]}), 409, "ECLOSED")


# --- read ---------------------------------------------------------------------------


def test_read_single_entry_headers(client):
    ledger_id = create_ledger(client)["ledger_id"]
    for payload in (b"first", b"second"):
        append(client, ledger_id, payload)
    response = client.get(f"/api/v1/ledgers/{ledger_id}/entries/0")
    assert response.status_code == 200
    assert response.content == b"first"
    assert response.headers["content-type"] == "application/octet-stream"
    assert response.headers["x-entry-id"] == "0"
    assert response.headers["x-crc32c"] == str(crc32c.crc32c(b"first"))
    assert response.headers["x-last-add-confirmed"] == "1"


def test_read_beyond_lac_is_404_enoentry(client):
    ledger_id = create_ledger(client)["ledger_id"]
    assert_problem(client.get(f"/api/v1/ledgers/{ledger_id}/entries/0"), 404, "ENOENTRY")
    append(client, ledger_id, b"x")
    assert_problem(client.get(f"/api/v1/ledgers/{ledger_id}/entries/1"), 404, "ENOENTRY")
    assert_problem(client.get(f"/api/v1/ledgers/{ID_MAX}/entries/0"), 404, "ENOLEDGER")


def test_range_read_json_pages(client):
    ledger_id = create_ledger(client)["ledger_id"]
    payloads = [f"entry-{i}".encode() for i in range(7)]
    for p in payloads:
        append(client, ledger_id, p)
    url = f"/api/v1/ledgers/{ledger_id}/entries"
    page = client.get(url).json()
    assert [base64.b64decode(e["payload"]) for e in page["entries"]] == payloads
    assert [e["crc32c"] for e in page["entries"]] == [crc32c.crc32c(p) for p in payloads]
    assert page["next_start"] is None

    got: list[bytes] = []
    start: int | None = 0
    while start is not None:
        page = client.get(url, params={"start": start, "limit": 3}).json()
        assert len(page["entries"]) <= 3
        got.extend(base64.b64decode(e["payload"]) for e in page["entries"])
        start = page["next_start"]
    assert got == payloads

    page = client.get(url, params={"start": 2, "end": 4}).json()
    assert [e["entry_id"] for e in page["entries"]] == [2, 3, 4]
    assert page["next_start"] is None
    # end beyond the LAC stops at the LAC; start beyond it is an empty page.
    assert len(client.get(url, params={"start": 5, "end": 100}).json()["entries"]) == 2
    assert client.get(url, params={"start": 50}).json() == {"entries": [], "next_start": None}
    assert_problem(client.get(url, params={"start": -1}), 422, "EBADREQ")
    assert_problem(client.get(url, params={"limit": 0}), 422, "EBADREQ")
    assert_problem(client.get(f"/api/v1/ledgers/{ID_MAX}/entries"), 404, "ENOLEDGER")


def test_range_read_streams_frames(client):
    ledger_id = create_ledger(client)["ledger_id"]
    payloads = [bytes([i]) * (i * 1000) for i in range(150)]
    for p in payloads:
        assert append(client, ledger_id, p).status_code == 201
    url = f"/api/v1/ledgers/{ledger_id}/entries"
    with client.stream("GET", url, headers={"Accept": FRAMES_MEDIA_TYPE}) as response:
        assert response.status_code == 200
        assert response.headers["content-type"] == FRAMES_MEDIA_TYPE
        body = b"".join(response.iter_bytes())
    frames = decode_download(body)
    assert [f[0] for f in frames] == list(range(150))
    assert [f[2] for f in frames] == payloads
    assert all(f[1] == crc32c.crc32c(f[2]) for f in frames)
    # The layout is exactly u64 id, u32 crc, u32 length, payload.
    assert body[:16] == struct.pack(">QII", 0, crc32c.crc32c(b""), 0)

    response = client.get(
        url, params={"start": 10, "end": 12}, headers={"Accept": FRAMES_MEDIA_TYPE}
    )
    assert [f[0] for f in decode_download(response.content)] == [10, 11, 12]
    response = client.get(
        url, params={"start": 10, "limit": 2}, headers={"Accept": FRAMES_MEDIA_TYPE}
    )
    assert [f[0] for f in decode_download(response.content)] == [10, 11]
    response = client.get(url, params={"start": 1000}, headers={"Accept": FRAMES_MEDIA_TYPE})
    assert response.status_code == 200 and response.content == b""
    response = client.get(
        f"/api/v1/ledgers/{ID_MAX}/entries", headers={"Accept": FRAMES_MEDIA_TYPE}
    )
    assert_problem(response, 404, "ENOLEDGER")


# --- offload -------------------------------------------------------------------------


def test_offload_without_configuration(client):
    ledger_id = create_ledger(client)["ledger_id"]
    offload = client.get(f"/api/v1/ledgers/{ledger_id}/offload")
    assert offload.status_code == 200
    assert offload.json() == {
        "state": "NONE",
        "bucket": None,
        "key_prefix": None,
        "segment_bytes": 0,
        "offloaded_at": None,
        "local_deleted": False,
        "error": None,
        "failures": 0,
        "next_retry_at": None,
        "tiered_entries": 0,
        "local_first_entry_id": 0,
        "pack_key": None,
        "bytes_done": None,
        "bytes_total": None,
    }
    body = assert_problem(client.post(f"/api/v1/ledgers/{ledger_id}/offload"), 409, "EBADREQ")
    assert body["detail"].startswith("offload is not configured")
    assert_problem(client.post(f"/api/v1/ledgers/{ID_MAX}/offload"), 404, "ENOLEDGER")
    assert_problem(client.get(f"/api/v1/ledgers/{ID_MAX}/offload"), 404, "ENOLEDGER")


def test_unknown_routes_and_methods_are_problems(client):
    assert_problem(client.get("/api/v1/nothing"), 404, "EBADREQ")
    response = client.patch("/api/v1/ledgers")
    assert_problem(response, 405, "EBADREQ")
    assert "GET" in response.headers["allow"] and "POST" in response.headers["allow"]
