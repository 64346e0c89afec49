"""The one seam between ``common.errors`` and HTTP: problem+json responses.

Every error the service returns is ``application/problem+json``::

    {"type": "urn:ledgerd:error:ENOLEDGER", "title": "No such ledger",
     "status": 404, "detail": "ledger 7 does not exist", "code": "ENOLEDGER"}

:func:`status_for` is the whole mapping from the engine's error tree to HTTP
statuses (DESIGN.md §5); :func:`install` registers the handlers, including those
for Starlette's own 404/405 and for request validation errors (422, ``EBADREQ``).
"""

from __future__ import annotations

import enum
import logging
import math
from collections.abc import Mapping
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from common import errors

PROBLEM_MEDIA_TYPE = "application/problem+json"
# Where the service middleware puts a request's id in its ASGI scope.
REQUEST_ID_KEY = "ledgerd.request_id"

log = logging.getLogger("ledgerd.errors")



class ErrorCode(enum.StrEnum):
    """Every ``code`` a problem response carries (the spec's ``Problem.code`` enum)."""

    ENOLEDGER = "ENOLEDGER"
    ENOENTRY = "ENOENTRY"
    EBADREQ = "EBADREQ"
    EUA = "EUA"
    EFENCED = "EFENCED"
    ECLOSED = "ECLOSED"
    ECONFLICT = "ECONFLICT"
    EREADONLY = "EREADONLY"
    ETOOMANYREQUESTS = "ETOOMANYREQUESTS"
    EIO = "EIO"
    ENOTSEALED = "ENOTSEALED"
    ETOOMANYLEDGERS = "ETOOMANYLEDGERS"


TITLES: Mapping[ErrorCode, str] = {
    ErrorCode.ENOLEDGER: "No such ledger",
    ErrorCode.ENOENTRY: "No such entry",
    ErrorCode.EBADREQ: "Bad request",
    ErrorCode.EUA: "Unauthorized",
    ErrorCode.EFENCED: "Ledger fenced",
    ErrorCode.ECLOSED: "Ledger closed",
    ErrorCode.ECONFLICT: "Entry conflict",
    ErrorCode.EREADONLY: "Bookie is read-only",
    ErrorCode.ETOOMANYREQUESTS: "Too many requests",
    ErrorCode.EIO: "I/O error",
    ErrorCode.ENOTSEALED: "Ledger not sealed",
    ErrorCode.ETOOMANYLEDGERS: "Too many ledgers",
}


def status_for(exc: errors.LedgerdError) -> int:
    """HTTP status of an engine error (DESIGN.md §5)."""
    # Order matters: subclasses before their parents.
    table: tuple[tuple[type[errors.LedgerdError], int], ...] = (
        (errors.NoSuchLedger, 404),
        (errors.NoSuchEntry, 404),
        (errors.EntryTooLarge, 413),
        (errors.RequestTooLarge, 413),
        (errors.UnsupportedMediaType, 415),
        (errors.AuthenticationRequired, 401),
        (errors.Unauthorized, 403),
        (errors.LedgerFenced, 409),
        (errors.LedgerClosed, 409),
        (errors.EntryConflict, 409),
        (errors.NotSealed, 409),
        (errors.NotConfigured, 409),
        (errors.BookieLive, 409),
        (errors.CallerError, 400),
        (errors.AuthenticationThrottled, 429),
        (errors.Backpressure, 503),
        (errors.ReadOnly, 507),
        (errors.TooManyLedgers, 507),
        (errors.DiskFull, 507),
        (errors.TierUnavailable, 503),
        (errors.NotReady, 503),
        (errors.MetadataUnavailable, 503),
        (errors.BookieUnreachable, 503),
        (errors.StorageUnavailable, 500),
        (errors.Corruption, 500),
    )
    for cls, status in table:
        if isinstance(exc, cls):
            return status
    return 500


def problem(
    status: int,
    code: str,
    detail: str,
    *,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    """A problem+json response; ``code`` must be an :class:`ErrorCode` (the spec's enum)."""
    known = ErrorCode(code)  # an unknown code is a bug: clients switch on the enum
    body = {
        "type": f"urn:ledgerd:error:{known}",
        "title": TITLES[known],
        "status": status,
        "detail": detail,
        "code": str(known),
    }
    return JSONResponse(body, status_code=status, headers=headers, media_type=PROBLEM_MEDIA_TYPE)


# Errors whose message is written for the client.  The others (an OSError on the
# journal or an entry log, RocksDB, S3, corruption, a bug) name files, devices
# or endpoints: the client gets their title and the request's id, the log the
# whole message under that id.
PUBLIC_DETAIL: tuple[type[errors.LedgerdError], ...] = (
    errors.CallerError,
    errors.Backpressure,
    errors.NotReady,
    errors.ReadOnly,
    errors.TooManyLedgers,
)


def response_for(exc: errors.LedgerdError, request_id: str | None = None) -> JSONResponse:
    status = status_for(exc)
    headers: dict[str, str] = {}
    if exc.retry_after_s is not None:
        headers["Retry-After"] = str(max(1, math.ceil(exc.retry_after_s)))
    if isinstance(exc, errors.AuthenticationRequired):
        headers["WWW-Authenticate"] = 'Bearer realm="ledgerd"'

    code = exc.code if exc.code in ErrorCode.__members__ else ErrorCode.EIO
    if isinstance(exc, PUBLIC_DETAIL):
        detail = str(exc) or type(exc).__name__
    else:
        detail = private_detail(TITLES[ErrorCode(code)], request_id)
    # Back-pressure is the server working as meant; logging each refusal at error
    # level would make an overload worse.
    if not isinstance(exc, errors.Backpressure) and (
            status >= 500 or not isinstance(exc, PUBLIC_DETAIL)):
        log.error("request %s failed: %s: %s", request_id, type(exc).__name__, exc,
                  exc_info=status == 500, extra={"request_id": request_id})
    return problem(status, code, detail, headers=headers)


def private_detail(title: str, request_id: str | None) -> str:
    """What a client learns of an error whose message is for the operator."""
    return f"{title}; the server's log has the details (request {request_id or 'unknown'})"


def request_id_of(request: Request) -> str | None:
    """The id the service middleware gave the request (``X-Request-Id``)."""
    value = request.scope.get(REQUEST_ID_KEY)
    return value if isinstance(value, str) else None


async def _ledgerd_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, errors.LedgerdError)
    return response_for(exc, request_id_of(request))


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    detail = exc.detail if isinstance(exc.detail, str) else HTTPStatus(exc.status_code).phrase
    if exc.status_code == 404 and detail == "Not Found":
        detail = f"no route for {request.method} {request.url.path}"
    code = "EUA" if exc.status_code in (401, 403) else "EBADREQ"
    if exc.status_code >= 500:
        code = "EIO"
    headers = dict(exc.headers or {})
    if exc.status_code == 405:
        # Starlette names only the first route that matched the path; list them all.
        headers["Allow"] = ", ".join(_allowed_methods(request))
        detail = f"{request.method} is not allowed on {request.url.path}"
    return problem(exc.status_code, code, detail, headers=headers)


def _allowed_methods(request: Request) -> list[str]:
    methods: set[str] = set()
    for route in getattr(request.app.state, "api_routes", ()):
        match, _ = route.matches({**request.scope, "method": "GET"})
        route_methods = getattr(route, "methods", None)
        if match != Match.NONE and route_methods:
            methods.update(route_methods)
    return sorted(methods)


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    return problem(422, "EBADREQ", describe_validation(exc.errors()))


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    request_id = request_id_of(request)
    log.exception("request %s: unhandled error on %s %s", request_id, request.method,
                  request.url.path, extra={"request_id": request_id})
    return problem(500, "EIO", private_detail("internal server error", request_id))


def describe_validation(errs: Any) -> str:
    parts = []
    for err in errs:
        loc = ".".join(str(p) for p in err.get("loc", ()) if p != "body") or "request"
        parts.append(f"{loc}: {err.get('msg', 'invalid')}")
    return "; ".join(parts)[:2000] or "invalid request"


def install(app: FastAPI) -> None:
    app.add_exception_handler(errors.LedgerdError, _ledgerd_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(Exception, _unexpected)
