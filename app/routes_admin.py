"""Admin endpoints on BookKeeper's paths (``/api/v1/bookie/*``), ``/heartbeat``,
``/metrics``, and the benchmark's no-op (only with BENCH_ENDPOINTS).

Mutating admin calls need ``Authorization: Bearer <ADMIN_TOKEN>`` when a token is
configured; GC calls go to the node's garbage collector (409 when GC is off).
"""

from __future__ import annotations

import importlib.metadata
from typing import Annotated

from fastapi import APIRouter, Body, Request, Response
from fastapi.responses import JSONResponse

from compaction import GarbageCollector
from node import blocking

from .deps import AdminDep, NodeDep, ServiceDep, service_of
from .errors import problem
from .models import (
    BookieInfo,
    BookieState,
    CompactionSuspension,
    DiskFile,
    DiskFileList,
    Empty,
    EntryLogInfo,
    EntryLogList,
    GcDetails,
    GcRequest,
    GcStatus,
    Heartbeat,
    LogMark,
    Readiness,
    ReadOnlyRequest,
    ReadOnlyState,
    ResumeCompaction,
    SuspendCompaction,
)
from .openapi_docs import (
    BODY_TOO_LARGE,
    GC_OFF,
    NO_ADMIN_TOKEN,
    NOT_READY,
    NOT_TEXT,
    problems,
)

router = APIRouter(prefix="/api/v1/bookie", tags=["bookie"])
root = APIRouter(tags=["service"])
# Included only when BENCH_ENDPOINTS is on (app.main), so absent from the public spec.
bench = APIRouter(tags=["service"])


def _version() -> str:
    try:
        return importlib.metadata.version("ledgerd")
    except importlib.metadata.PackageNotFoundError:
        return "0.0.0"


async def _suspension(gc: GarbageCollector) -> CompactionSuspension:
    major, minor = await blocking(gc.compaction_suspended)
    return CompactionSuspension(is_major_gc_suspended=major, is_minor_gc_suspended=minor)


# --- garbage collection --------------------------------------------------------


@router.put(
    "/gc",
    response_model=GcStatus,
    operation_id="trigger_gc",
    dependencies=[AdminDep],
    responses=problems(NOT_TEXT, NO_ADMIN_TOKEN, GC_OFF, BODY_TOO_LARGE),
)
async def trigger_gc(
    node: NodeDep, body: Annotated[GcRequest | None, Body()] = None
) -> GcStatus:
    """Start a garbage-collection run now (optionally forcing minor/major compaction)."""
    gc = node.gc
    request = body or GcRequest()
    await blocking(gc.trigger_gc, force_major=request.force_major, force_minor=request.force_minor)
    return GcStatus(is_in_force_gc=await blocking(gc.is_in_force_gc))


@router.get("/gc", response_model=GcStatus, operation_id="get_gc", responses=problems(GC_OFF))
async def get_gc(node: NodeDep) -> GcStatus:
    return GcStatus(is_in_force_gc=await blocking(node.gc.is_in_force_gc))


@router.get(
    "/gc_details", response_model=GcDetails, operation_id="gc_details",
    responses=problems(GC_OFF),
)
async def gc_details(node: NodeDep) -> GcDetails:
    details = await blocking(node.gc.gc_details)
    return GcDetails.model_validate(dict(details))


@router.put(
    "/gc/suspend_compaction",
    response_model=CompactionSuspension,
    operation_id="suspend_compaction",
    dependencies=[AdminDep],
    responses=problems(NOT_TEXT, NO_ADMIN_TOKEN, GC_OFF, BODY_TOO_LARGE),
)
async def suspend_compaction(
    node: NodeDep, body: Annotated[SuspendCompaction | None, Body()] = None
) -> CompactionSuspension:
    gc = node.gc
    request = body or SuspendCompaction()
    await blocking(gc.suspend_compaction, major=request.suspend_major, minor=request.suspend_minor)
    return await _suspension(gc)


@router.get(
    "/gc/suspend_compaction",
    response_model=CompactionSuspension,
    operation_id="get_compaction_suspension",
    responses=problems(GC_OFF),
)
async def get_compaction_suspension(node: NodeDep) -> CompactionSuspension:
    return await _suspension(node.gc)


@router.put(
    "/gc/resume_compaction",
    response_model=CompactionSuspension,
    operation_id="resume_compaction",
    dependencies=[AdminDep],
    responses=problems(NOT_TEXT, NO_ADMIN_TOKEN, GC_OFF, BODY_TOO_LARGE),
)
async def resume_compaction(
    node: NodeDep, body: Annotated[ResumeCompaction | None, Body()] = None
) -> CompactionSuspension:
    gc = node.gc
    request = body or ResumeCompaction()
    await blocking(gc.resume_compaction, major=request.resume_major, minor=request.resume_minor)
    return await _suspension(gc)


# --- storage -------------------------------------------------------------------


@router.get(
    "/entrylogs",
    response_model=EntryLogList,
    operation_id="list_entry_logs",
    responses=problems(),
)
async def list_entry_logs(node: NodeDep) -> EntryLogList:
    """Every entry log with its size, live bytes, usage and ledgers."""
    logs = await blocking(node.entry_logs)
    return EntryLogList(entry_logs=[EntryLogInfo.from_usage(log) for log in logs])


@router.get(
    "/list_disk_file",
    response_model=DiskFileList,
    operation_id="list_disk_files",
    responses=problems(),
)
async def list_disk_files(node: NodeDep) -> DiskFileList:
    files = await blocking(node.disk_files)
    return DiskFileList(files=[DiskFile(path=path, size=size) for path, size in files])


@router.get(
    "/last_log_mark", response_model=LogMark, operation_id="last_log_mark", responses=problems()
)
async def last_log_mark(node: NodeDep) -> LogMark:
    """The journal's trim and synced offsets and the last checkpoint."""
    return LogMark.model_validate(await blocking(node.bookie.last_log_mark))


# --- bookie state --------------------------------------------------------------


@router.get("/info", response_model=BookieInfo, operation_id="bookie_info", responses=problems())
async def bookie_info(node: NodeDep) -> BookieInfo:
    return BookieInfo(version=_version(), **await blocking(node.info))


@router.get("/state", response_model=BookieState, operation_id="bookie_state", responses=problems())
async def bookie_state(node: NodeDep) -> BookieState:
    read_only = node.bookie.read_only
    return BookieState(
        running=not node.shutting_down,
        read_only=read_only,
        shutting_down=node.shutting_down,
        available_for_high_priority_writes=not read_only and not node.shutting_down,
    )


@router.get(
    "/state/readonly",
    response_model=ReadOnlyState,
    operation_id="get_read_only",
    responses=problems(),
)
async def get_read_only(node: NodeDep) -> ReadOnlyState:
    return ReadOnlyState(read_only=node.bookie.read_only)


@router.put(
    "/state/readonly",
    response_model=ReadOnlyState,
    operation_id="set_read_only",
    dependencies=[AdminDep],
    responses=problems(NOT_TEXT, NO_ADMIN_TOKEN, BODY_TOO_LARGE),
)
async def set_read_only(body: ReadOnlyRequest, node: NodeDep) -> ReadOnlyState:
    """Enter or leave read-only mode: adds then fail with 507 ``EREADONLY``; reads work."""
    await blocking(node.disk.set_read_only, body.read_only)
    return ReadOnlyState(read_only=node.bookie.read_only)


@router.get("/is_ready", response_model=Readiness, operation_id="is_ready",
            responses=problems(NOT_READY, node=False))
async def is_ready(request: Request) -> Response:
    """200 while the bookie serves requests, 503 while it starts or shuts down."""
    node = service_of(request).node
    if node is None or node.shutting_down:
        return problem(503, "EIO", "the bookie is not ready")
    return JSONResponse(Readiness(ready=True, read_only=node.bookie.read_only).model_dump())


# --- service -------------------------------------------------------------------


@root.get("/heartbeat", response_model=Heartbeat, operation_id="heartbeat")
async def heartbeat() -> Heartbeat:
    return Heartbeat(status="OK")


@root.get(
    "/metrics",
    response_class=Response,
    operation_id="metrics",
    responses={
        200: {
            "description": "Prometheus text exposition",
            "content": {"text/plain": {"schema": {"type": "string"}}},
        }
    },
)
async def metrics(service: ServiceDep) -> Response:
    body = await blocking(service.metrics.render)
    return Response(body, media_type="text/plain; version=0.0.4; charset=utf-8")


@bench.post(
    "/api/v1/noop",
    status_code=201,
    response_model=Empty,
    operation_id="noop",
    openapi_extra={
        "requestBody": {
            "required": False,
            "content": {
                "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}
            },
        }
    },
    responses=problems(BODY_TOO_LARGE, node=False),
)
async def noop(request: Request) -> Empty:
    """Read the body and answer 201 ``{}``: the HTTP floor the benchmarks compare with."""
    async for _ in request.stream():
        pass
    return Empty()
