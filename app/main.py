"""``create_app``: the FastAPI application, its lifespan and its OpenAPI document.

The lifespan is one ``async with``: it opens a :class:`node.Node` on a worker
thread (journal recovery may take a while), serves, and closes it.  A node passed
in by the caller is used as is and left open: whoever opened it closes it.
"""

from __future__ import annotations

import gc as python_gc
import json
import logging
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import anyio
from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from node import Node, blocking

from . import errors
from .deps import Service
from .errors import PROBLEM_MEDIA_TYPE
from .metrics import Metrics
from .middleware import ServiceMiddleware
from .models import BatchAppend, Problem
from .openapi_docs import PROBLEM_REF
from .routes_admin import _version
from .routes_admin import root as root_router
from .routes_admin import router as admin_router
from .routes_cluster import router as cluster_router
from .routes_internal import router as internal_router
from .routes_ledgers import router as ledgers_router
from .settings import ServiceSettings

# Allocations (net) between two young-generation passes of Python's collector.
YOUNG_COLLECTION_THRESHOLD = 10_000

log = logging.getLogger("ledgerd")

API_DESCRIPTION = """\
A BookKeeper-style ledger store: create a ledger, append entries (acknowledged
once durable), read them back, fence and close it.  Errors are
`application/problem+json` with a BookKeeper error `code`.  See docs/api.md.
"""


def create_app(settings: ServiceSettings, *, node: Node | None = None) -> FastAPI:
    """The ledgerd application.  Raises ``InvalidSetting`` for an unsafe listen address."""
    settings.check_listen_address()
    service = Service(settings=settings, metrics=Metrics())

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
    )
    app.state.service = service
    errors.install(app)
    app.state.api_routes = [*ledgers_router.routes, *admin_router.routes, *root_router.routes,
                            *cluster_router.routes]
    app.include_router(ledgers_router)
    app.include_router(cluster_router)
    app.include_router(admin_router)
    app.include_router(root_router)
    app.include_router(internal_router)  # node-to-node, not in the OpenAPI document
    app.add_middleware(
        ServiceMiddleware,
        metrics=service.metrics,
        body_size_max=settings.max_request_body_size,
        log_requests=settings.access_log,
    )

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = build_openapi(app)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app


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
            await running.start()  # cluster mode: membership, writers, auditor
        except BaseException:
            with anyio.CancelScope(shield=True):
                await running.stop()
                await blocking(running.close)
            raise
    service.node = running
    log.info("bookie ready", extra={"owned": given is None})
    try:
        with _objects_frozen_out_of_gc():
            yield running
    finally:
        service.node = None
        if given is None:
            with anyio.CancelScope(shield=True):
                await running.stop()
            log.info("closing bookie")
            with anyio.CancelScope(shield=True):
                await blocking(running.close)


@contextmanager
def _objects_frozen_out_of_gc() -> Iterator[None]:
    """What exists now (modules, the app, the bookie's ledger table) lives as long
    as the service.  Left to Python's collector, each full pass walks all of it,
    every few seconds under load, stalling every request; frozen, the passes walk
    only what requests create.  A request allocates a few hundred objects that die
    with it; a young pass every 700 of them (the default) costs single adds a
    measurable share of their rate (docs/benchmarks.md), so passes are spaced out."""
    python_gc.collect()
    python_gc.freeze()
    thresholds = python_gc.get_threshold()
    python_gc.set_threshold(YOUNG_COLLECTION_THRESHOLD, *thresholds[1:])
    try:
        yield
    finally:
        python_gc.set_threshold(*thresholds)
        python_gc.unfreeze()  # an app torn down in a longer-lived process (tests)


def openapi_document() -> str:
    """The OpenAPI document as checked in: sorted keys, two-space indent, final newline.

    Independent of the environment: built from default settings, engine not opened.
    """
    spec = create_app(ServiceSettings.model_validate({})).openapi()
    return json.dumps(spec, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def build_openapi(app: FastAPI) -> dict[str, Any]:
    """FastAPI's document, with every error answer as problem+json."""
    spec = get_openapi(
        title=app.title,
        version=app.version,
        description=app.description,
        routes=app.routes,
        tags=[
            {"name": "ledgers", "description": "ledgers and their entries"},
            {"name": "bookie", "description": "admin endpoints (BookKeeper paths)"},
            {"name": "service", "description": "liveness, metrics, benchmark floor"},
            {"name": "cluster", "description": "cluster mode: nodes and re-replication"},
        ],
    )
    schemas = spec.setdefault("components", {}).setdefault("schemas", {})
    schemas["Problem"] = Problem.model_json_schema()
    schemas["BatchAppend"] = BatchAppend.model_json_schema()
    schemas["BatchAppend"]["properties"]["entries"]["items"]["format"] = "byte"
    for path_item in spec.get("paths", {}).values():
        for operation in path_item.values():
            for status, response in operation.get("responses", {}).items():
                if status.isdigit() and int(status) >= 400:
                    response["content"] = {PROBLEM_MEDIA_TYPE: {"schema": PROBLEM_REF}}
    # FastAPI's own validation-error schemas are replaced by Problem above.
    schemas.pop("HTTPValidationError", None)
    schemas.pop("ValidationError", None)
    return spec
