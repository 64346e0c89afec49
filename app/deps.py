"""Per-request dependencies: the running services, ids, passwords, admin auth, bodies."""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import re
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, ParamSpec, TypeVar
from urllib.parse import unquote

import anyio.to_thread
from fastapi import Depends, Header, Path, Request, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel

from common.errors import BadRequest, WouldBlock

from .controls import GcControl, OffloadControl
from .errors import ApiError
from .metrics import Metrics
from .models import ID_MAX
from .settings import ServiceSettings

if TYPE_CHECKING:
    from ledger import Bookie

P = ParamSpec("P")
T = TypeVar("T")


@dataclass(eq=False)
class Services:
    """Everything a route may use; built by the lifespan, one per running app."""

    settings: ServiceSettings
    bookie: Bookie
    metrics: Metrics
    gc: GcControl | None = None
    offload: OffloadControl | None = None
    shutting_down: bool = False
    # True while read-only mode was entered by the disk-usage check (not by an operator).
    auto_read_only: bool = False
    background: list[asyncio.Task[None]] = field(default_factory=list)


def services_of(request: Request) -> Services:
    """The running services.  The add routes call this directly: each FastAPI
    sub-dependency costs about 70 µs of dependency solving per request, a tenth
    of what a whole add costs."""
    services: Services | None = getattr(request.app.state, "services", None)
    if services is None:
        raise ApiError(503, "EIO", "the bookie is not running")
    return services


# Dependencies are `async def` though they never await: FastAPI runs a plain
# `def` dependency on a worker thread, a thread hop per request for a lookup.
async def get_services(request: Request) -> Services:
    return services_of(request)


ServicesDep = Annotated[Services, Depends(get_services)]

LedgerId = Annotated[int, Path(ge=0, le=ID_MAX, description="ledger id (0 ≤ id ≤ 2^63-1)")]
EntryId = Annotated[int, Path(ge=0, le=ID_MAX, description="entry id (0 ≤ id ≤ 2^63-1)")]


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

# A plain header parameter, not a sub-dependency (see services_of); routes pass
# it through ledger_password().
PasswordHeader = Annotated[
    str | None,
    Header(
        alias="X-Ledger-Password",
        max_length=4096,
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


_bearer = HTTPBearer(
    auto_error=False,
    description="`Authorization: Bearer <ADMIN_TOKEN>`; required when ADMIN_TOKEN is set",
)


async def require_admin(
    services: ServicesDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> None:
    token = services.settings.admin_token
    if token is None:
        # start-up refuses a non-loopback address without a token, so this is loopback.
        return
    challenge = {"WWW-Authenticate": 'Bearer realm="ledgerd"'}
    if credentials is None:
        raise ApiError(
            401, "EUA", "admin token required (Authorization: Bearer ...)", headers=challenge
        )
    if not hmac.compare_digest(credentials.credentials.encode(), token.encode()):
        raise ApiError(401, "EUA", "invalid admin token", headers=challenge)


AdminDep = Depends(require_admin)


async def blocking(func: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """Run a blocking engine call on a worker thread, never on the event loop."""
    return await anyio.to_thread.run_sync(lambda: func(*args, **kwargs))


async def settle(func: Callable[P, Future[T]], *args: P.args, **kwargs: P.kwargs) -> T:
    """Call an engine method that returns a Future (it may block briefly for space)
    on a worker thread, then await the future without holding a thread."""
    future = await anyio.to_thread.run_sync(lambda: func(*args, **kwargs))
    return await asyncio.wrap_future(future)


async def settle_now(call: Callable[[bool], Future[T]]) -> T:
    """:func:`settle` for an engine call taking ``block`` (adds): ``call(False)``
    runs right here on the event loop, sparing a worker-thread hop per add, since
    the common case waits for nothing; when it would wait (scrypt for a password
    not yet verified, a read-back for an idempotent retry, full caches) it raises
    WouldBlock having changed nothing, and ``call(True)`` runs on a worker thread."""
    try:
        future = call(False)
    except WouldBlock:
        future = await anyio.to_thread.run_sync(call, True)
    return await asyncio.wrap_future(future)


def json_response(model: BaseModel, status_code: int) -> Response:
    """``model`` as a JSON response, for routes whose ``response_model`` documents
    it.  FastAPI re-validates and re-serialises a returned model (~100 µs); a
    model we just built from engine values needs neither."""
    return Response(model.model_dump_json(), status_code=status_code,
                    media_type="application/json")


async def read_body(
    request: Request, size_max: int, too_large: Callable[[int], Exception]
) -> bytes:
    """The request body, refusing (without buffering it) one larger than ``size_max``."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > size_max:
        raise too_large(int(declared))
    chunks: list[bytes] = []
    received = 0
    async for chunk in request.stream():
        received += len(chunk)
        if received > size_max:
            raise too_large(received)
        chunks.append(chunk)
    return b"".join(chunks)
