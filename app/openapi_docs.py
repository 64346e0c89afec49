"""OpenAPI fragments for the routes: each operation's own error answers, and bodies.

Every route lists the errors it can answer with (:func:`problems`), each an
:class:`Answer` naming its status, its ``code`` and when it happens, so a
generated client's docs say what *this* operation can fail with, and a client
can switch on ``Problem.code`` knowing which cases occur.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from common.frames import FRAMES_MEDIA_TYPE

from .errors import PROBLEM_MEDIA_TYPE, ErrorCode

PROBLEM_REF = {"$ref": "#/components/schemas/Problem"}
_RETRY_AFTER = {"description": "seconds to wait before retrying",
                "schema": {"type": "integer", "minimum": 1}}
OCTETS_MEDIA_TYPE = "application/octet-stream"


@dataclass(frozen=True)
class Answer:
    """One error an operation answers with."""

    status: int
    code: ErrorCode
    when: str
    retry_after: bool = False  # carries Retry-After


# --- every operation on the node -----------------------------------------------
NOT_READY = Answer(503, ErrorCode.EIO, "the bookie is starting or shutting down")
SERVER_FAULT = Answer(500, ErrorCode.EIO, "a fault of the server: an I/O error, corruption "
                      "detected by a CRC check, a bug; a bookie whose disk failed stays broken "
                      "for writes (reads still work) until it is restarted")
# --- ledgers -------------------------------------------------------------------
NO_LEDGER = Answer(404, ErrorCode.ENOLEDGER, "no such ledger (never created, or deleted)")
NO_ENTRY = Answer(404, ErrorCode.ENOENTRY, "no such entry: beyond last-add-confirmed")
NOT_AN_ENTRY_ID = Answer(404, ErrorCode.EBADREQ, "the entry id is not a decimal number: no "
                         "such route")
WRONG_PASSWORD = Answer(403, ErrorCode.EUA, "wrong ledger password (`X-Ledger-Password`)")
FENCED = Answer(409, ErrorCode.EFENCED, "the ledger is fenced")
CLOSED = Answer(409, ErrorCode.ECLOSED, "the ledger is closed")
ENTRY_CONFLICT = Answer(409, ErrorCode.ECONFLICT, "`entry_id` is not the next entry id, or a "
                        "different payload is stored at it")
BATCH_CONFLICT = Answer(409, ErrorCode.ECONFLICT, "`first_entry_id` is not the next entry id, "
                        "or different payloads are stored from it")
NOT_SEALED = Answer(409, ErrorCode.ENOTSEALED, "the ledger is not CLOSED")
BOOKIE_REGISTERED = Answer(409, ErrorCode.EBADREQ, "the bookie is registered (live): stop "
                           "it and let its lease lapse first")
OFFLOAD_OFF = Answer(409, ErrorCode.EBADREQ, "offload is not configured on this server "
                     "(no S3_BUCKET)")
CREATE_LIMITS = Answer(400, ErrorCode.EBADREQ, "the password is longer than MAX_PASSWORD_SIZE "
                       "bytes, or the metadata exceeds MAX_METADATA_ENTRIES pairs or "
                       "MAX_METADATA_SIZE bytes")
BAD_BATCH = Answer(400, ErrorCode.EBADREQ, "an empty batch, more than MAX_BATCH_ENTRIES "
                   "entries, a payload that is not padded base64, or a cut frame")
BAD_RANGE = Answer(400, ErrorCode.EBADREQ, "`end` is below `start`")
ENTRY_TOO_LARGE = Answer(413, ErrorCode.EBADREQ, "the entry is larger than MAX_ENTRY_SIZE")
BATCH_TOO_LARGE = Answer(413, ErrorCode.EBADREQ, "an entry larger than MAX_ENTRY_SIZE, more "
                         "payload bytes than MAX_BATCH_SIZE, or a body larger than "
                         "MAX_REQUEST_BODY_SIZE")
BODY_TOO_LARGE = Answer(413, ErrorCode.EBADREQ, "the body is larger than MAX_REQUEST_BODY_SIZE")
BACKPRESSURE = Answer(503, ErrorCode.ETOOMANYREQUESTS, "back-pressure: the write cache or the "
                      "journal is full; retry after `Retry-After` seconds", retry_after=True)
S3_DOWN = Answer(503, ErrorCode.EIO, "the ledger's local copy is gone and S3 did not answer; "
                 "retry after `Retry-After` seconds", retry_after=True)
READ_ONLY = Answer(507, ErrorCode.EREADONLY, "the bookie is read-only (an operator's choice, "
                   "or its disk is full)")
TOO_MANY_LEDGERS = Answer(507, ErrorCode.ETOOMANYLEDGERS, "the bookie holds MAX_LEDGERS "
                          "ledgers already")
# --- cluster mode (docs/cluster.md) ---------------------------------------------
QUORUMS_STANDALONE = Answer(409, ErrorCode.EBADREQ, "`ensemble_size`, `write_quorum` or "
                            "`ack_quorum` given to a standalone server: they need cluster "
                            "mode (METADATA_URL)")
BAD_QUORUMS = Answer(400, ErrorCode.EBADREQ, "cluster mode: not ensemble_size >= write_quorum "
                     ">= ack_quorum >= 1")
NOT_ENOUGH_BOOKIES = Answer(503, ErrorCode.ETOOMANYREQUESTS, "cluster mode: fewer writable "
                            "bookies than `ensemble_size`", retry_after=True)
NOT_CLUSTER = Answer(409, ErrorCode.EBADREQ, "this server is not in cluster mode "
                     "(METADATA_URL is not set)")
CLUSTER_UNAVAILABLE = Answer(503, ErrorCode.EIO, "cluster mode: etcd did not answer; retry "
                             "after `Retry-After` seconds", retry_after=True)
# --- admin ---------------------------------------------------------------------
NO_ADMIN_TOKEN = Answer(401, ErrorCode.EUA, "missing or wrong admin token (`Authorization: "
                        "Bearer`); only on a server with ADMIN_TOKEN set")
GC_OFF = Answer(409, ErrorCode.EBADREQ, "garbage collection is switched off "
                "(GC_ENABLED=false)")
INVALID = Answer(422, ErrorCode.EBADREQ, "a parameter or the body does not match this spec")
# FastAPI's own answer to a JSON body it cannot even decode as text.
NOT_TEXT = Answer(400, ErrorCode.EBADREQ, "the JSON body is not UTF-8 text")


def unsupported_media_type(*media_types: str) -> Answer:
    return Answer(415, ErrorCode.EBADREQ, "`Content-Type` is not "
                  + " or ".join(f"`{m}`" for m in media_types))


def problems(*answers: Answer, node: bool = True) -> dict[int | str, dict[str, Any]]:
    """``responses=`` entries for an operation's errors.  ``node``: the operation
    needs the running node, so it may also answer NOT_READY and SERVER_FAULT.
    (422 for invalid parameters or bodies is added by ``build_openapi`` to every
    operation that has any.)"""
    chosen = [*answers, *((NOT_READY, SERVER_FAULT) if node else ())]
    out: dict[int | str, dict[str, Any]] = {}
    for status in sorted({a.status for a in chosen}):
        same = [a for a in chosen if a.status == status]
        response: dict[str, Any] = {
            "description": "; ".join(f"{a.when} (`{a.code}`)" for a in same),
            "content": {PROBLEM_MEDIA_TYPE: {"schema": PROBLEM_REF}},
        }
        headers: dict[str, Any] = {}
        if any(a.retry_after for a in same):
            headers["Retry-After"] = _RETRY_AFTER
        if status == 401:
            headers["WWW-Authenticate"] = {"schema": {"type": "string"}}
        if headers:
            response["headers"] = headers
        out[status] = response
    return out


def add_answer(responses: dict[str, Any], answer: Answer) -> None:
    """One more error answer for an operation of the built document (answers
    that middleware gives every operation it guards)."""
    text = f"{answer.when} (`{answer.code}`)"
    response = responses.get(str(answer.status))
    if response is None:
        response = responses[str(answer.status)] = {
            "description": text, "content": {PROBLEM_MEDIA_TYPE: {"schema": PROBLEM_REF}}}
    elif text not in response.get("description", ""):
        response["description"] = f"{response['description']}; {text}"
    if answer.retry_after:
        response.setdefault("headers", {})["Retry-After"] = _RETRY_AFTER


BINARY_SCHEMA = {"type": "string", "format": "binary"}

BATCH_RETRIED: dict[str, Any] = {
    "description": "idempotent retry: the whole batch is already there from `first_entry_id`",
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/BatchAdded"}}},
}

RAW_ENTRY_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "description": "the entry's payload, as raw bytes (may be empty); a request "
        "without `Content-Type` is taken as `application/octet-stream`, any other type "
        "is refused with 415",
        "content": {OCTETS_MEDIA_TYPE: {"schema": BINARY_SCHEMA}},
    }
}

FRAMES_UPLOAD = ("repeated frames of a u32 big-endian length followed by that many "
                 "payload bytes")
FRAMES_DOWNLOAD = ("a stream of frames, each a u64 entry id, a u32 CRC32C and a u32 length "
                   "(big-endian), followed by that many payload bytes")

BATCH_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "description": "the payloads, appended in order, all or nothing: JSON with base64 "
        f"payloads, or {FRAMES_UPLOAD} (typed clients: `add_entries_frames`)",
        "content": {
            "application/json": {"schema": {"$ref": "#/components/schemas/BatchAppend"}},
            FRAMES_MEDIA_TYPE: {"schema": BINARY_SCHEMA},
        },
    }
}

FRAMES_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "description": f"the payloads, appended in order, all or nothing: {FRAMES_UPLOAD}",
        "content": {FRAMES_MEDIA_TYPE: {"schema": BINARY_SCHEMA}},
    }
}


# --- links: how one answer feeds the next call (fuzzers' stateful phase follows them) --
_CREATED = {"path.ledger_id": "$response.body#/ledger_id"}
_CREATED_WITH_PASSWORD = {**_CREATED, "header.X-Ledger-Password": "$request.body#/password"}


def _links(parameters: dict[str, str], *operation_ids: str) -> dict[str, Any]:
    return {op: {"operationId": op, "parameters": parameters} for op in operation_ids}


CREATED_LEDGER_LINKS: dict[str, Any] = {
    **_links(_CREATED_WITH_PASSWORD, "add_entry", "add_entries", "add_entries_frames",
             "fence_ledger", "close_ledger", "delete_ledger"),
    **_links(_CREATED, "get_ledger", "read_entries", "read_entries_frames", "get_offload",
             "offload_ledger"),
}
ADDED_ENTRY_LINKS: dict[str, Any] = _links(
    {"path.ledger_id": "$request.path.ledger_id", "path.entry_id": "$response.body#/entry_id"},
    "read_entry")
CLOSED_LEDGER_LINKS: dict[str, Any] = _links(_CREATED, "offload_ledger", "get_offload")
