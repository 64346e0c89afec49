"""``create_app``: the FastAPI application, its lifespan and its OpenAPI document.

The lifespan is one ``async with``: it opens a :class:`node.Node` on a worker
thread (journal recovery may take a while), serves, and closes it.  A node passed
in by the caller is used as is and left open: whoever opened it closes it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import threading
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from types import FrameType
from typing import Any
from urllib.parse import urlsplit

import anyio
from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema
from starlette.routing import BaseRoute

from common.collector import objects_frozen_out_of_gc
from common.errors import NotReady
from node import Node, blocking

from . import admission, browser, errors, models
from .admission import AdmissionMiddleware, PasswordGate
from .browser import AllowedHosts, BrowserGuardMiddleware
from .console import router as console_router
from .deps import Service
from .errors import PROBLEM_MEDIA_TYPE
from .fast_paths import SingleAddShortcut
from .metrics import Metrics
from .middleware import ServiceMiddleware
from .models import BatchAppend, Problem
from .openapi_docs import INVALID, NO_ADMIN_TOKEN, PROBLEM_REF
from .routes_admin import _version
from .routes_admin import bench as bench_router
from .routes_admin import root as root_router
from .routes_admin import router as admin_router
from .routes_bench_stream import router as bench_stream_router
from .routes_cluster import router as cluster_router
from .routes_internal import key_router as internal_key_router
from .routes_internal import router as internal_router
from .routes_ledgers import add_entry
from .routes_ledgers import router as ledgers_router
from .routes_stream import router as stream_router
from .routes_stream import websocket_server_options
from .settings import ServiceSettings
from .tls import uvicorn_tls_options

log = logging.getLogger("ledgerd")

API_DESCRIPTION = """\
A BookKeeper-style ledger store: create a ledger, append entries (acknowledged
once durable), read them back, fence and close it.  Errors are
`application/problem+json` with a BookKeeper error `code` (`Problem.code`); each
operation lists the errors it can answer with.  See docs/api.md.

Admin calls that change something carry the `adminToken` security requirement:
`Authorization: Bearer <ADMIN_TOKEN>`.  This is what a server with ADMIN_TOKEN set
(every server on a network address) does, and what `openapi/openapi.json`
describes; a loopback server started without ADMIN_TOKEN takes those calls without
a token, and the spec it serves at `/openapi.json` says so (no security, no 401).

Append streams (not listed below: OpenAPI has no WebSocket operations):
`GET /api/v1/ledgers/{ledger_id}/entries/stream` upgraded to a WebSocket with
subprotocol `ledgerd.v1` and `X-Ledger-Password`; binary messages of `u64
first_entry_id` (2^64-1: the server assigns) followed by frames (`u32` length +
payload), one batch each; text acks `{"acks": [[seq, first, last], ...],
"last_add_confirmed": n}`, one per group commit; an error `{"seq": n, "error":
problem}` then close code 4000 + status.  Specification: docs/api.md, "Append
streams".
"""

# The checked-in spec describes a server with an admin token (see API_DESCRIPTION);
# its value never shows in the spec.
SPEC_ADMIN_TOKEN = "spec-admin-token"

SERVERS: list[dict[str, Any]] = [
    {"url": "http://127.0.0.1:8080", "description": "a server on its default address"},
    {
        "url": "{scheme}://{host}:{port}",
        "description": "any server",
        "variables": {
            "scheme": {"default": "http", "enum": ["http", "https"]},
            "host": {"default": "127.0.0.1"},
            "port": {"default": "8080"},
        },
    },
]


def create_app(settings: ServiceSettings, *, node: Node | None = None) -> FastAPI:
    """The ledgerd application.  Raises ``InvalidSetting`` for an unsafe listen address."""
    settings.check_listen_address()
    metrics = Metrics()
    passwords = PasswordGate(
        concurrency=settings.max_concurrent_password_checks,
        failures_max=settings.max_auth_failures, window_s=settings.auth_failure_window,
        checks=metrics.password_checks)
    service = Service(settings=settings, metrics=metrics, passwords=passwords)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with _serving(service, node):
            yield

    app = FastAPI(
        title="ledgerd",
        version=_version(),
        description=API_DESCRIPTION,
        lifespan=lifespan,
        docs_url="/docs",
        redoc_url=None,
        # FastAPI's OpenTelemetry hooks look their providers up on every request;
        # the service exports Prometheus metrics and structured logs instead.
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )
    app.state.service = service
    errors.install(app)
    routers = [ledgers_router, cluster_router, admin_router, root_router]
    if settings.bench_endpoints:
        routers.append(bench_router)
    app.state.api_routes = [route for router in routers for route in router.routes]
    # The routers' routes go into the app's own router, in this order: a request
    # is matched against them one by one, and FastAPI's include_router would wrap
    # each router in a layer that matches every request a second time (measured:
    # 221 -> 186 us of server CPU per no-op request, docs/architecture.md).  The
    # routers carry their prefixes, tags and responses on their routes already.
    for router in routers:
        app.router.routes.extend(router.routes)
    app.router.routes.extend(stream_router.routes)  # WebSocket: not in api_routes' 405 lookup
    if settings.bench_endpoints:
        app.router.routes.extend(bench_stream_router.routes)  # the stream's floor, WebSocket
    app.router.routes.extend(internal_router.routes)  # node-to-node, not in the OpenAPI document
    app.router.routes.extend(internal_key_router.routes)  # node-to-node too
    app.router.routes.extend(console_router.routes)  # static files, not in the OpenAPI doc
    # The last added runs first: ids and logs, then Host/Origin, then admission,
    # then the single add's short way past FastAPI's own layers.
    app.add_middleware(SingleAddShortcut, route=_route_of(app, add_entry))
    app.add_middleware(AdmissionMiddleware, requests_max=settings.max_concurrent_requests)
    app.add_middleware(BrowserGuardMiddleware,
                       allowed_hosts=AllowedHosts(settings.host, _host_names(settings)))
    app.add_middleware(
        ServiceMiddleware,
        metrics=service.metrics,
        body_size_max=settings.max_request_body_size,
        log_requests=settings.access_log,
    )

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = build_openapi(app, settings)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app


def _route_of(app: FastAPI, endpoint: Callable[..., Any]) -> BaseRoute:
    """The app's route whose endpoint is ``endpoint``."""
    return next(r for r in app.router.routes if getattr(r, "endpoint", None) is endpoint)


def _host_names(settings: ServiceSettings) -> tuple[str, ...]:
    """ALLOWED_HOSTS, and in cluster mode the name the other nodes call this one by."""
    advertised = urlsplit(settings.advertised_url).hostname if settings.advertised_url else None
    return settings.allowed_hosts + ((advertised,) if advertised else ())


@asynccontextmanager
async def _serving(service: Service, given: Node | None) -> AsyncIterator[Node]:
    """Open the node (unless given), expose it to routes and metrics, close it."""
    if given is None:
        node_settings = service.settings.to_node()
        log.info("opening bookie", extra={"data_dir": str(node_settings.engine.data_dir)})
        running = await blocking(Node.open, node_settings)
    else:
        running = given
    for prefix, source in running.statistics_sources().items():
        service.metrics.watch(source, prefix=prefix)
    if given is None:
        try:
            # cluster mode: the password key, membership, writers, auditor
            await _stoppable_by_signals(running.start())
        except BaseException:
            with anyio.CancelScope(shield=True):
                await running.stop()
                await blocking(running.close)
            raise
    service.node = running
    log.info("bookie ready", extra={"owned": given is None})
    try:
        with objects_frozen_out_of_gc():
            yield running
    finally:
        service.node = None
        if given is None:
            with anyio.CancelScope(shield=True):
                await running.stop()
            log.info("closing bookie")
            with anyio.CancelScope(shield=True):
                await blocking(running.close)


async def _stoppable_by_signals(start: Coroutine[Any, Any, None]) -> None:
    """Run ``start`` so that SIGTERM or SIGINT ends it.  uvicorn's handler only notes
    a signal, and looks at the note once the startup is over; a cluster node's start
    may wait for its peers (the cluster's password key) as long as none answers,
    and a stop must not wait for them.  ``NotReady`` when a signal ended it (uvicorn
    then exits, and raises the signal again)."""
    loop = asyncio.get_running_loop()
    task = loop.create_task(start)
    if threading.current_thread() is not threading.main_thread():
        await task  # signals reach only the main thread (tests serve from others)
        return
    previous: dict[int, Any] = {}

    def on_signal(sig: int, frame: FrameType | None) -> None:
        loop.call_soon_threadsafe(task.cancel)
        handler = previous.get(sig)
        if callable(handler):
            handler(sig, frame)  # uvicorn's: it exits once the startup has failed

    for sig in (signal.SIGINT, signal.SIGTERM):
        previous[sig] = signal.signal(sig, on_signal)
    try:
        await task
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if current is not None and current.cancelling():
            raise  # this startup itself is cancelled
        raise NotReady("stopped by a signal while starting") from None
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def uvicorn_options(settings: ServiceSettings) -> dict[str, Any]:
    """How ``ledgerd serve`` runs the app: ``uvicorn.run(app, **uvicorn_options(s))``.
    Raises InvalidSetting when TLS_CERT_FILE or TLS_KEY_FILE does not load."""
    return {"host": settings.host, "port": settings.port, "log_config": None,
            "access_log": False, "lifespan": "on", "timeout_graceful_shutdown": 10,
            **websocket_server_options(settings), **uvicorn_tls_options(settings)}


def openapi_document() -> str:
    """The OpenAPI document as checked in: sorted keys, two-space indent, final newline.

    Independent of the environment: built from default settings with an admin token
    (see API_DESCRIPTION), engine not opened.
    """
    settings = ServiceSettings.model_validate({"admin_token": SPEC_ADMIN_TOKEN})
    spec = create_app(settings).openapi()
    return json.dumps(spec, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def build_openapi(app: FastAPI, settings: ServiceSettings) -> dict[str, Any]:
    """FastAPI's document made exact for generated clients and fuzzers: every error
    answer problem+json, limits that depend on the settings (MAX_BATCH_ENTRIES, the
    admin token) as this server applies them, parameters that are absent rather
    than null."""
    spec = get_openapi(
        title=app.title,
        version=app.version,
        description=app.description,
        routes=app.routes,
        servers=SERVERS,
        tags=[
            {"name": "ledgers", "description": "ledgers and their entries"},
            {"name": "bookie", "description": "admin endpoints (BookKeeper paths)"},
            {"name": "service", "description": "liveness and metrics"},
            {"name": "cluster", "description": "cluster mode: nodes and re-replication"},
        ],
    )
    admission.document(spec)
    browser.document(spec)
    schemas = spec.setdefault("components", {}).setdefault("schemas", {})
    # FastAPI's own validation-error schemas are replaced by Problem.
    schemas.pop("HTTPValidationError", None)
    schemas.pop("ValidationError", None)
    _add_schemas(schemas, [Problem, BatchAppend, *(
        model for model in vars(models).values()
        if isinstance(model, type) and issubclass(model, BaseModel) and model.__name__ in schemas
    )])
    _document_limits(schemas, settings)
    token = settings.admin_token_value is not None
    for path_item in spec.get("paths", {}).values():
        for operation in path_item.values():
            for parameter in operation.get("parameters", ()):
                parameter["schema"] = _not_null(parameter["schema"])
            responses = operation.get("responses", {})
            if not token:
                operation.pop("security", None)
                responses.pop(str(NO_ADMIN_TOKEN.status), None)
            for status, response in responses.items():
                if status == str(INVALID.status):
                    response["description"] = f"{INVALID.when} (`{INVALID.code}`)"
                if status.isdigit() and int(status) >= 400:
                    response["content"] = {PROBLEM_MEDIA_TYPE: {"schema": PROBLEM_REF}}
    return spec


def _document_limits(schemas: dict[str, Any], settings: ServiceSettings) -> None:
    """The limits of this server that JSON Schema can say (the engine checks them)."""
    schemas["BatchAppend"]["properties"]["entries"]["maxItems"] = settings.max_batch_entries
    create = schemas["CreateLedger"]["properties"]
    # Characters: a longer password is certainly more bytes than MAX_PASSWORD_SIZE.
    create["password"]["maxLength"] = settings.max_password_size
    create["password"]["description"] = (
        f"at most {settings.max_password_size} UTF-8 bytes (MAX_PASSWORD_SIZE)")
    create["metadata"]["maxProperties"] = settings.max_metadata_entries
    create["metadata"]["description"] = (
        f"at most {settings.max_metadata_entries} pairs (MAX_METADATA_ENTRIES) of at most "
        f"{settings.max_metadata_size} UTF-8 bytes in all (MAX_METADATA_SIZE)")


def _add_schemas(schemas: dict[str, Any], classes: list[type[BaseModel]]) -> None:
    """The models' JSON schemas, and those they refer to, as components.  Also
    replaces FastAPI's copies, whose bounds went through floats (2^63-1 became 2^63)."""
    _, top = models_json_schema([(model, "validation") for model in classes],
                                ref_template="#/components/schemas/{model}")
    schemas.update(top.get("$defs", {}))


def _not_null(schema: dict[str, Any]) -> dict[str, Any]:
    """A parameter is absent or has a value; FastAPI's ``anyOf [T, null]`` for an
    optional one makes generators type it ``T | null``."""
    choices = schema.get("anyOf")
    if not isinstance(choices, list):
        return schema
    values = [choice for choice in choices if choice != {"type": "null"}]
    if len(values) != 1 or len(values) == len(choices):
        return schema
    rest = {key: value for key, value in schema.items() if key != "anyOf"}
    return {**values[0], **rest}
