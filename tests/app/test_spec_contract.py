"""The spec as a product for generated clients, and the server doing what it says:
media types, frames operations, ``Allow``, the error codes, int64 ids, base64,
camelCase aliases, strict booleans, security per configuration, limits from the
settings."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from app.errors import TITLES, ErrorCode
from app.main import openapi_document
from common import errors
from common.frames import FRAMES_MEDIA_TYPE, decode_download, encode_upload

from .conftest import REPO, assert_problem, create_ledger, pw

SPEC: dict[str, Any] = json.loads((REPO / "openapi" / "openapi.json").read_text())


def _operations(spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {op["operationId"]: op for item in spec["paths"].values() for op in item.values()}


# --- the server ------------------------------------------------------------------


@pytest.mark.parametrize("content_type", ["application/json", "text/plain",
                                          "application/x-www-form-urlencoded", FRAMES_MEDIA_TYPE])
def test_a_raw_append_refuses_other_media_types(client, content_type):
    lid = create_ledger(client)["ledger_id"]
    url = f"/api/v1/ledgers/{lid}/entries"
    response = client.post(url, content=b'{"a": 1}', headers={**pw(), "Content-Type": content_type})
    assert_problem(response, 415, "EBADREQ")
    assert client.get(f"/api/v1/ledgers/{lid}").json()["last_add_confirmed"] == -1
    # Bytes as bytes: declared, or with no Content-Type at all.
    for headers in ({"Content-Type": "application/octet-stream; x=y"}, {}):
        assert client.post(url, content=b"\x00\xff", headers={**pw(), **headers}).status_code == 201


def test_frames_operations_of_their_own(client):
    lid = create_ledger(client)["ledger_id"]
    frames = f"/api/v1/ledgers/{lid}/entries/frames"
    added = client.post(frames, content=encode_upload([b"a", b"", b"ccc"]),
                        headers={**pw(), "Content-Type": FRAMES_MEDIA_TYPE})
    assert added.status_code == 201
    assert added.json() == {"first_entry_id": 0, "last_entry_id": 2, "last_add_confirmed": 2}
    as_json = client.post(frames, json={"entries": ["YQ=="]}, headers=pw())
    assert_problem(as_json, 415, "EBADREQ")

    read = client.get(frames, params={"start": 1})
    assert read.headers["content-type"] == FRAMES_MEDIA_TYPE
    assert [(i, p) for i, _, p in decode_download(read.content)] == [(1, b""), (2, b"ccc")]
    assert decode_download(client.get(frames, params={"limit": 1}).content)[0][2] == b"a"
    assert_problem(client.get(frames, params={"start": 2, "end": 1}), 400, "EBADREQ")
    assert_problem(client.get(f"/api/v1/ledgers/{2**62}/entries/frames"), 404, "ENOLEDGER")


def test_allow_lists_exactly_the_methods_of_a_resource(client):
    lid = create_ledger(client)["ledger_id"]
    for path, allowed in ((f"/api/v1/ledgers/{lid}/entries/batch", "POST"),
                          (f"/api/v1/ledgers/{lid}/entries/frames", "GET, POST"),
                          (f"/api/v1/ledgers/{lid}/entries/0", "GET")):
        response = client.request("PATCH", path)
        assert_problem(response, 405, "EBADREQ")
        assert response.headers["allow"] == allowed, path
    assert client.get(f"/api/v1/ledgers/{lid}/entries/batch").status_code == 405


def test_admin_bodies_take_either_spelling_strict_booleans_not_both(client):
    url = "/api/v1/bookie/gc/suspend_compaction"
    assert client.put(url, json={"suspendMajor": True}).json()["is_major_gc_suspended"] is True
    resumed = client.put("/api/v1/bookie/gc/resume_compaction", json={"resume_major": True})
    assert resumed.json()["is_major_gc_suspended"] is False
    for body in ({"suspend_major": 1}, {"suspendMinor": "yes"},
                 {"suspend_major": True, "suspendMajor": True}, {"unknown": True}):
        assert_problem(client.put(url, json=body), 422, "EBADREQ")
    assert_problem(client.put("/api/v1/bookie/gc", json={"forceMajor": 0}), 422, "EBADREQ")


def test_a_password_header_as_long_as_the_spec_allows(client):
    lid = create_ledger(client, password="p" * 1024)["ledger_id"]
    url = f"/api/v1/ledgers/{lid}/fence"
    header = _operations(SPEC)["fence_ledger"]["parameters"][1]
    assert header["name"] == "X-Ledger-Password"
    longest = header["schema"]["maxLength"]
    assert longest == len("UTF-8''") + 3 * 1024
    # Any header up to the limit is a password: here a wrong one (403), never 422.
    assert_problem(client.post(url, headers=pw("x" * longest)), 403, "EUA")
    assert_problem(client.post(url, headers=pw("x" * (longest + 1))), 422, "EBADREQ")
    assert client.post(url, headers=pw("p" * 1024)).json()["state"] == "FENCED"


def test_the_benchmark_no_op_is_absent_from_the_spec():
    assert "noop" not in _operations(SPEC) and "Empty" not in SPEC["components"]["schemas"]


# --- the spec --------------------------------------------------------------------


def test_every_code_the_server_sends_is_in_the_enum():
    assert SPEC["components"]["schemas"]["ErrorCode"]["enum"] == [c.value for c in ErrorCode]
    assert set(TITLES) == set(ErrorCode)
    problem = SPEC["components"]["schemas"]["Problem"]
    assert problem["properties"]["code"] == {
        "$ref": "#/components/schemas/ErrorCode",
        "description": "what went wrong, for programs: switch on this"}

    def subclasses(cls: type) -> list[type]:
        return [cls, *(s for sub in cls.__subclasses__() for s in subclasses(sub))]

    assert {cls.code for cls in subclasses(errors.LedgerdError)} <= set(ErrorCode)


def test_every_error_answer_names_its_codes():
    codes = "|".join(ErrorCode)
    for op_id, op in _operations(SPEC).items():
        for status, response in op["responses"].items():
            if int(status) < 400:
                continue
            assert response["content"] == {"application/problem+json": {
                "schema": {"$ref": "#/components/schemas/Problem"}}}, (op_id, status)
            named = re.findall(rf"`({codes})`", response["description"])
            assert named, (op_id, status, response["description"])


def test_each_operation_lists_its_own_errors():
    ops = _operations(SPEC)

    def statuses(op_id: str) -> list[str]:
        return sorted(ops[op_id]["responses"])

    # 400 and 403: every operation refuses a foreign Host or Origin (app/browser.py).
    assert statuses("get_ledger") == ["200", "400", "403", "404", "422", "500", "503"]
    assert "ENOENTRY" not in ops["get_ledger"]["responses"]["404"]["description"]
    assert "ENOTSEALED" in ops["offload_ledger"]["responses"]["409"]["description"]
    assert "EFENCED" not in ops["offload_ledger"]["responses"]["409"]["description"]
    assert "back-pressure" not in ops["read_entry"]["responses"]["503"]["description"]
    assert "Retry-After" in ops["add_entry"]["responses"]["503"]["headers"]
    assert statuses("heartbeat") == ["200", "400", "403"]
    # fence, close and delete work on a read-only bookie (a full disk can be dug out).
    assert "507" not in ops["fence_ledger"]["responses"]


def test_ids_are_int64_and_payloads_base64():
    schemas = SPEC["components"]["schemas"]
    for name, field in (("Ledger", "ledger_id"), ("EntryAdded", "entry_id"),
                        ("BatchAdded", "first_entry_id"), ("EntryOut", "entry_id")):
        assert schemas[name]["properties"][field]["format"] == "int64", (name, field)
        assert schemas[name]["properties"][field]["maximum"] == 2**63 - 1
    assert schemas["Ledger"]["properties"]["last_add_confirmed"]["minimum"] == -1
    path_id = _operations(SPEC)["get_ledger"]["parameters"][0]["schema"]
    assert path_id["format"] == "int64" and path_id["maximum"] == 2**63 - 1
    for schema in (schemas["EntryOut"]["properties"]["payload"],
                   schemas["BatchAppend"]["properties"]["entries"]["items"]):
        assert schema["format"] == "byte" and "pattern" in schema
    entries = schemas["BatchAppend"]["properties"]["entries"]
    assert (entries["minItems"], entries["maxItems"]) == (1, 10_000)
    assert set(schemas["LogMark"]["required"]) == {
        "checkpoint_offset", "trim_offset", "synced_offset", "appended_offset"}


def test_servers_give_generated_clients_a_base_url():
    first, templated = SPEC["servers"]
    assert first["url"] == "http://127.0.0.1:8080"
    assert templated["url"] == "{scheme}://{host}:{port}"
    assert set(templated["variables"]) == {"scheme", "host", "port"}


def test_security_follows_the_admin_token(make_client):
    with_token = _operations(SPEC)
    open_spec = _operations(make_client().get("/openapi.json").json())
    secured = sorted(op_id for op_id, op in with_token.items() if "security" in op)
    assert secured == ["decommission_bookie", "offload_ledger", "resume_compaction",
                       "set_read_only", "suspend_compaction", "trigger_gc"]
    for op_id in secured:
        assert "401" in with_token[op_id]["responses"]
        assert "security" not in open_spec[op_id] and "401" not in open_spec[op_id]["responses"]
    # The checked-in document is the one a server with a token serves.
    assert json.loads(openapi_document()) == SPEC


def test_limits_in_the_spec_follow_the_settings(make_client):
    spec = make_client(max_batch_entries=7, max_password_size=16,
                       max_metadata_entries=3).get("/openapi.json").json()
    schemas = spec["components"]["schemas"]
    assert schemas["BatchAppend"]["properties"]["entries"]["maxItems"] == 7
    assert schemas["CreateLedger"]["properties"]["password"]["maxLength"] == 16
    assert schemas["CreateLedger"]["properties"]["metadata"]["maxProperties"] == 3
