"""A short way through the framework for the call that dominates: a single add.

FastAPI resolves a route's parameters with pydantic and takes each request through
several layers of its own (routing, dependency solving, exception and exit-stack
middleware).  For ``POST /api/v1/ledgers/{ledger_id}/entries`` that was nearly
half of the server's CPU per add (docs/architecture.md).  ``SingleAddShortcut``,
the innermost of the service's middleware (inside admission, the Host/Origin
guard, request ids, metrics and the access log), takes that request when its
parameters are in their plain form only:

- the ledger id in decimal without leading zeros, at most 2^63-1;
- no query, or exactly ``entry_id=`` and such a number;
- at most one ``X-Ledger-Password`` header, no longer than the route accepts.

It calls the function the route calls (``routes_ledgers.add_single``) and answers
a LedgerdError as the app's handler does (``errors.response_for``).  Any other
form (a second password header, another parameter, ``007``) goes on to FastAPI,
which validates it as the OpenAPI document says: the shortcut never answers what
the route would answer differently.
"""

from __future__ import annotations

import re

from starlette.requests import Request
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Receive, Scope, Send

from common.errors import LedgerdError

from .deps import PASSWORD_HEADER_LENGTH_MAX
from .errors import request_id_of, response_for
from .models import ID_MAX
from .routes_ledgers import add_single

_PATH = re.compile(r"/api/v1/ledgers/(0|[1-9][0-9]{0,18})/entries")
_QUERY = re.compile(rb"(?:entry_id=(0|[1-9][0-9]{0,18}))?")
_PASSWORD_HEADER = b"x-ledger-password"


class SingleAddShortcut:
    def __init__(self, app: ASGIApp, *, route: BaseRoute) -> None:
        """``route``: the add route, which the request is recorded as (metrics,
        access log), as if FastAPI had routed it."""
        self.app = app
        self.route = route

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            params = _plain_params(scope)
            if params is not None:
                await self._add(scope, receive, send, *params)
                return
        await self.app(scope, receive, send)

    async def _add(self, scope: Scope, receive: Receive, send: Send, ledger_id: int,
                   password: str | None, entry_id: int | None) -> None:
        scope["route"] = self.route
        scope["path_params"] = {"ledger_id": ledger_id}
        request = Request(scope, receive)
        try:
            response = await add_single(request, ledger_id, password, entry_id)
        except LedgerdError as exc:
            response = response_for(exc, request_id_of(request))
        await response(scope, receive, send)


def _plain_params(scope: Scope) -> tuple[int, str | None, int | None] | None:
    """(ledger id, password header, entry id) of a single add in the plain form,
    else None (the request goes to FastAPI)."""
    path = _PATH.fullmatch(scope["path"])
    if path is None:
        return None
    query = _QUERY.fullmatch(scope["query_string"])
    if query is None:
        return None
    ledger_id = int(path.group(1))
    entry_id = None if query.group(1) is None else int(query.group(1))
    if ledger_id > ID_MAX or (entry_id is not None and entry_id > ID_MAX):
        return None
    password: str | None = None
    for name, value in scope["headers"]:
        if name == _PASSWORD_HEADER:
            if password is not None:
                return None
            # As Starlette decodes headers; FastAPI's Header parameter sees the same.
            password = value.decode("latin-1")
    if password is not None and len(password) > PASSWORD_HEADER_LENGTH_MAX:
        return None
    return ledger_id, password, entry_id
