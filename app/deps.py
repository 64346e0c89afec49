"""Per-request dependencies: the running node, ids, passwords, admin auth, bodies."""

from __future__ import annotations

import contextlib
import hmac
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Annotated
from urllib.parse import unquote

from fastapi import Depends, Header, Path, Request, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel
from starlette.requests import HTTPConnection

from common.errors import AuthenticationRequired, BadRequest, NotReady, RequestTooLarge
from node import Node

from .admission import PasswordGate
from .metrics import Metrics
from .models import ID_MAX, INT64
from .settings import PASSWORD_SIZE_BYTES_MAX, ServiceSettings


@dataclass(eq=False)
class Service:
    """What a route may use: the settings, the metrics, the password gate, and the
    node once running."""

    settings: ServiceSettings
    metrics: Metrics
    passwords: PasswordGate
    node: Node | None = None


def service_of(request: HTTPConnection) -> Service:
    service: Service = request.app.state.service
    return service


def node_of(request: Request) -> Node:
    """The running node.  The add routes call this directly: each FastAPI
    sub-dependency costs about as much dependency solving per request as a tenth
    of a whole add."""
    node = service_of(request).node
    if node is None or node.shutting_down:
        raise NotReady("the bookie is not running")
    return node


# Dependencies are `async def` though they never await: FastAPI runs a plain
# `def` dependency on a worker thread, a thread hop per request for a lookup.
async def get_node(request: Request) -> Node:
    return node_of(request)


async def get_service(request: Request) -> Service:
    return service_of(request)


NodeDep = Annotated[Node, Depends(get_node)]
ServiceDep = Annotated[Service, Depends(get_service)]

LedgerId = Annotated[int, Path(ge=0, le=ID_MAX, json_schema_extra=INT64,
                               description="ledger id (0 ≤ id ≤ 2^63-1)")]
EntryId = Annotated[int, Path(ge=0, le=ID_MAX, json_schema_extra=INT64,
                              description="entry id (0 ≤ id ≤ 2^63-1)")]

# The longest header a password the engine takes can need: MAX_PASSWORD_SIZE bytes
# (at most PASSWORD_SIZE_BYTES_MAX), each percent-encoded as 3 characters behind
# RFC 8187's `UTF-8''` marker.  A longer header cannot match any ledger's password.
PASSWORD_HEADER_LENGTH_MAX = len("UTF-8''") + 3 * PASSWORD_SIZE_BYTES_MAX


# The ledger password travels in a header, and header values are bytes most clients
# can only send as ASCII (httpx) or Latin-1 (browsers' and Node's fetch).  A password
# that is not plain ASCII is therefore sent as an RFC 8187 ext-value, percent-encoded
# UTF-8 behind a ``UTF-8''`` marker: every HTTP library can send that, and plain ASCII
# passwords (``%`` included) keep meaning what they always meant.
PASSWORD_EXT_MARKER = "utf-8''"
_BAD_ESCAPE = re.compile("%(?![0-9A-Fa-f]{2})")
PASSWORD_HEADER_DESCRIPTION = (
    "The ledger's password (missing = empty password). Plain ASCII is sent as is. "
    "Any other password (non-ASCII, control characters, leading or trailing spaces, "
    "or text that itself begins with `UTF-8''`) is sent as an RFC 8187 ext-value: "
    "`UTF-8''` followed by its UTF-8 bytes percent-encoded, e.g. `pässwörd` → "
    "`UTF-8''p%C3%A4ssw%C3%B6rd` (JavaScript: `\"UTF-8''\" + encodeURIComponent(pw)`; "
    "Python: `\"UTF-8''\" + urllib.parse.quote(pw, safe=\"\")`). Raw UTF-8 header "
    "bytes are also understood, for clients that can send them."
)

# A plain header parameter, not a sub-dependency (see node_of); routes pass it
# through ledger_password().
PasswordHeader = Annotated[
    str | None,
    Header(
        alias="X-Ledger-Password",
        max_length=PASSWORD_HEADER_LENGTH_MAX,
        description=PASSWORD_HEADER_DESCRIPTION,
    ),
]


def ledger_password(header: str | None) -> str:
    """The password an ``X-Ledger-Password`` header carries (see PASSWORD_HEADER_DESCRIPTION)."""
    if header is None:
        return ""
    if header[: len(PASSWORD_EXT_MARKER)].lower() == PASSWORD_EXT_MARKER:
        encoded = header[len(PASSWORD_EXT_MARKER) :]
        # A stray % or invalid UTF-8 is refused, never guessed at.
        if _BAD_ESCAPE.search(encoded) is None:
            with contextlib.suppress(UnicodeDecodeError):
                return unquote(encoded, errors="strict")
        raise BadRequest("X-Ledger-Password: the UTF-8'' value is not percent-encoded UTF-8")
    # HTTP header bytes reach us decoded as Latin-1; a client that sent UTF-8 (as
    # curl does for non-ASCII text) means the UTF-8 text, which is also what the
    # JSON body of ledger creation carries.
    raw = header.encode("latin-1", errors="replace")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return header


async def authorize(connection: HTTPConnection, node: Node, ledger_id: int,
                    password: str) -> None:
    """NoSuchLedger or Unauthorized unless ``password`` is the ledger's, before the
    route reads a body or changes anything (or a stream is accepted).  A
    password the engine can tell is right without a KDF (a keyed digest, or a
    scrypt password verified before) is checked right here; a wrong one, or one
    that needs scrypt, goes through the password gate (its own threads, and a
    client failing too often is refused without a check)."""
    ledgers = node.ledgers
    if not ledgers.password_verified(ledger_id, password=password):
        client = connection.client.host if connection.client is not None else ""
        await service_of(connection).passwords.check(
            client, lambda limiter: ledgers.authorize(ledger_id, password=password,
                                                      limiter=limiter))


_bearer = HTTPBearer(
    auto_error=False,
    scheme_name="adminToken",
    description="`Authorization: Bearer <ADMIN_TOKEN>`; required when ADMIN_TOKEN is set",
)


async def require_admin(
    service: ServiceDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> None:
    token = service.settings.admin_token_value
    if token is None:
        # start-up refuses a non-loopback address without a token, so this is loopback.
        return
    if credentials is None:
        raise AuthenticationRequired("admin token required (Authorization: Bearer ...)")
    if not _token_matches(credentials.credentials, token):
        raise AuthenticationRequired("invalid admin token")


def is_admin(request: Request) -> bool:
    """Whether the request may see what only admins see: no ADMIN_TOKEN is set
    (loopback), or it carries the token.  For routes open to all whose answer
    holds some admin-only fields (read here, not as a dependency, so that the
    operation is not documented as requiring a token)."""
    token = service_of(request).settings.admin_token_value
    if token is None:
        return True
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    return scheme.lower() == "bearer" and _token_matches(given.strip(), token)


def _token_matches(given: str, token: str) -> bool:
    return hmac.compare_digest(given.encode(), token.encode())


AdminDep = Depends(require_admin)


def json_response(model: BaseModel, status_code: int) -> Response:
    """``model`` as a JSON response, for routes whose ``response_model`` documents
    it.  FastAPI re-validates and re-serialises a returned model; a model we just
    built from engine values needs neither."""
    return Response(model.model_dump_json(), status_code=status_code,
                    media_type="application/json")


async def body_chunks(request: Request, size_max: int,
                      limit_name: str | None = None) -> AsyncIterator[bytes]:
    """The request body as it arrives, refusing (without buffering it) one larger
    than ``size_max``, a limit ``limit_name`` names in the refusal."""
    why = f" ({limit_name})" if limit_name else ""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > size_max:
        raise RequestTooLarge(f"request body of {int(declared)} bytes exceeds {size_max}{why}")
    received = 0
    async for chunk in request.stream():
        received += len(chunk)
        if received > size_max:
            raise RequestTooLarge(f"request body of {received}+ bytes exceeds {size_max}{why}")
        if chunk:
            yield chunk


async def read_body_buffer(request: Request, size_max: int,
                           limit_name: str | None = None) -> bytearray:
    """The whole request body in one buffer that grows as chunks arrive (no list
    of chunks joined at the end, which would hold the body twice)."""
    body = bytearray()
    async for chunk in body_chunks(request, size_max, limit_name):
        body += chunk
    return body


async def read_body(request: Request, size_max: int) -> bytes:
    """The whole request body (one chunk is returned as is, not copied)."""
    chunks = [chunk async for chunk in body_chunks(request, size_max)]
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)
