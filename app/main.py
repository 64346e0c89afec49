"""``create_app``: the FastAPI application, its lifespan and its OpenAPI document.

The lifespan is the one owner of the engine (STYLE 11): it opens the
:class:`ledger.Bookie` on a worker thread (journal recovery may take a while),
starts the disk-usage watcher, and on shutdown stops the watcher and closes the
bookie.  A bookie passed in by the caller is used as is and left open: whoever
opened it closes it.
"""

from __future__ import annotations

import asyncio
import gc as python_gc
import json
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from typing import TYPE_CHECKING, Any

import anyio
from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from . import background, disk, errors
from .controls import GcControl, OffloadControl
from .deps import Services, blocking
from .errors import PROBLEM_MEDIA_TYPE
from .metrics import Metrics
from .middleware import ServiceMiddleware
from .models import BatchAppend, Problem
from .openapi_docs import PROBLEM_REF
from .routes_admin import _version
from .routes_admin import root as root_router
from .routes_admin import router as admin_router
from .routes_ledgers import router as ledgers_router
from .routes_stream import router as stream_router
from .settings import ServiceSettings

if TYPE_CHECKING:
    from ledger import Bookie

# Allocations (net) between two young-generation passes of Python's collector.
YOUNG_COLLECTION_THRESHOLD = 10_000

log = logging.getLogger("ledgerd")

API_DESCRIPTION = """\
A BookKeeper-style ledger store: create a ledger, append entries (acknowledged
once durable), read them back, fence and close it.  Errors are
`application/problem+json` with a BookKeeper error `code`.  See docs/api.md.

Append streams (not listed below: OpenAPI has no WebSocket operations):
`GET /api/v1/ledgers/{ledger_id}/entries/stream` upgraded to a WebSocket with
subprotocol `ledgerd.v1` and `X-Ledger-Password`; binary messages of `u64
first_entry_id` (2^64-1: the server assigns) followed by frames (`u32` length +
payload), one batch each; text acks `{"acks": [[seq, first, last], ...],
"last_add_confirmed": n}`, one per group commit; an error `{"seq": n, "error":
problem}` then close code 4000 + status.  Specification: docs/api.md, "Append
streams".
"""


def create_app(
    settings: ServiceSettings,
    *,
    bookie: Bookie | None = None,
    gc: GcControl | None = None,
    offload: OffloadControl | None = None,
) -> FastAPI:
    """The ledgerd application.  Raises ``SettingsError`` for an unsafe listen address."""
    settings.check_listen_address()
    metrics = Metrics()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        owned = bookie is None
        if bookie is None:
            # Imported here: exporting the OpenAPI document needs no engine.
            from ledger import Bookie

            engine_settings = settings.to_engine()
            settings.data_dir.mkdir(parents=True, exist_ok=True)
            log.info("opening bookie", extra={"data_dir": str(settings.data_dir)})
            running = await blocking(Bookie.open, engine_settings)
        else:
            running = bookie
        stops: list[Callable[[], None]] = []
        running_offload = offload
        if running_offload is None and settings.offload_enabled:
            service = await blocking(background.start_offload, settings, running)
            stops.append(service.stop)
            running_offload = service
        running_gc = gc
        if running_gc is None and settings.gc_enabled:
            collector = await blocking(background.start_gc, settings, running)
            stops.append(collector.stop)
            running_gc = collector
        services = Services(
            settings=settings,
            bookie=running,
            metrics=metrics,
            gc=running_gc,
            offload=running_offload,
        )
        metrics.watch(lambda: running.statistics().as_dict())
        if running_gc is not None:
            metrics.watch(running_gc.statistics, prefix="gc")
        if running_offload is not None:
            metrics.watch(running_offload.statistics, prefix="offload")
        watcher = asyncio.create_task(disk.watch(services), name="ledgerd-disk-watch")
        app.state.services = services
        # What exists now (modules, the app, the bookie's ledger table) lives as long
        # as the service.  Left to Python's collector, each full pass walks all of it,
        # every few seconds under load: 15 passes of up to 65 ms in 12 s of adds
        # (measured), each stalling every request.  Frozen, the passes walk only
        # what requests create.
        python_gc.collect()
        python_gc.freeze()
        # A request allocates a few hundred objects that die with it; a young pass
        # every 700 of them (the default) cost single adds 0.05-0.1 of their rate
        # against the no-op in A/B runs.  10,000 keeps each pass well under 1 ms.
        thresholds = python_gc.get_threshold()
        python_gc.set_threshold(YOUNG_COLLECTION_THRESHOLD, *thresholds[1:])
        log.info("bookie ready", extra={"owned": owned})
        try:
            yield
        finally:
            python_gc.set_threshold(*thresholds)
            python_gc.unfreeze()  # an app torn down in a longer-lived process (tests)
            services.shutting_down = True
            watcher.cancel()
            with anyio.CancelScope(shield=True):
                with suppress(asyncio.CancelledError):
                    await watcher
                for task in list(services.background):
                    task.cancel()
                for stop in reversed(stops):
                    await blocking(stop)
                if owned:
                    log.info("closing bookie")
                    await blocking(running.close)
            app.state.services = None

    app = FastAPI(
        title="ledgerd",
        version=_version(),
        description=API_DESCRIPTION,
        lifespan=lifespan,
        docs_url="/docs",
        redoc_url=None,
    )
    app.state.services = None
    errors.install(app)
    app.state.api_routes = [*ledgers_router.routes, *admin_router.routes, *root_router.routes]
    app.include_router(ledgers_router)
    app.include_router(stream_router)
    app.include_router(admin_router)
    app.include_router(root_router)
    app.add_middleware(
        ServiceMiddleware,
        metrics=metrics,
        body_size_max=settings.max_request_body_size,
        log_requests=settings.access_log,
    )

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = build_openapi(app)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app


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
