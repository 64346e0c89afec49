"""OpenAPI fragments shared by the routes: problem responses and raw bodies."""

from __future__ import annotations

from typing import Any

from .errors import PROBLEM_MEDIA_TYPE
from .frames import FRAMES_MEDIA_TYPE

PROBLEM_REF = {"$ref": "#/components/schemas/Problem"}

_DESCRIPTIONS: dict[int, str] = {
    400: "malformed request (`EBADREQ`)",
    401: "missing or wrong admin token (`EUA`)",
    403: "wrong ledger password (`EUA`)",
    404: "no such ledger (`ENOLEDGER`) or entry (`ENOENTRY`)",
    409: "ledger fenced (`EFENCED`), closed (`ECLOSED`), entry id conflict (`ECONFLICT`) "
    "or ledger not sealed (`ENOTSEALED`)",
    413: "entry larger than MAX_ENTRY_SIZE or body larger than MAX_REQUEST_BODY_SIZE",
    415: "unsupported Content-Type (`EBADREQ`)",
    422: "request failed validation (`EBADREQ`)",
    500: "server fault: I/O error or corruption detected (`EIO`)",
    503: "back-pressure, retry after `Retry-After` seconds (`ETOOMANYREQUESTS`); S3 not "
    "answering a read of offloaded entries, retry after `Retry-After` (`EIO`); or the "
    "service is not running here (`EIO`)",
    507: "the bookie is read-only (`EREADONLY`)",
}


def problems(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """``responses=`` entries for the given error statuses (422 and 500 always)."""
    out: dict[int | str, dict[str, Any]] = {}
    for status in sorted({*statuses, 422, 500}):
        response: dict[str, Any] = {
            "description": _DESCRIPTIONS[status],
            "content": {PROBLEM_MEDIA_TYPE: {"schema": PROBLEM_REF}},
        }
        if status == 503:
            response["headers"] = {
                "Retry-After": {
                    "description": "seconds to wait before retrying (back-pressure, S3 down)",
                    "schema": {"type": "integer"},
                }
            }
        if status == 401:
            response["headers"] = {
                "WWW-Authenticate": {"schema": {"type": "string"}},
            }
        out[status] = response
    return out


BINARY_SCHEMA = {"type": "string", "format": "binary"}

RAW_ENTRY_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "description": "the entry's payload, as raw bytes (may be empty)",
        "content": {"application/octet-stream": {"schema": BINARY_SCHEMA}},
    }
}

BATCH_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "description": "the payloads, appended in order, all or nothing: JSON with base64 "
        "payloads, or repeated frames of a u32 big-endian length followed by the bytes",
        "content": {
            "application/json": {"schema": {"$ref": "#/components/schemas/BatchAppend"}},
            FRAMES_MEDIA_TYPE: {"schema": BINARY_SCHEMA},
        },
    }
}
