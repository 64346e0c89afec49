"""``/api/v1/ledgers``: create, list, append, read, fence, close, delete, offload.

Routes validate and translate; every decision is the node's (``node.ledgers``),
whose coroutines keep blocking engine work off the event loop.
"""

from __future__ import annotations

import base64
import time
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import StreamingResponse
from pydantic import ValidationError

from common.errors import BadRequest, UnsupportedMediaType
from ledger import Entry, LedgerState

from .deps import (
    AdminDep,
    EntryId,
    LedgerId,
    NodeDep,
    PasswordHeader,
    ServiceDep,
    body_chunks,
    json_response,
    ledger_password,
    node_of,
    read_body,
    service_of,
)
from .frames import FRAMES_MEDIA_TYPE, decode_upload, encode_download
from .models import (
    ID_MAX,
    BatchAdded,
    BatchAppend,
    CreateLedger,
    EntryAdded,
    EntryOut,
    EntryPage,
    Ledger,
    LedgerList,
    LedgerStateName,
    Offload,
)
from .openapi_docs import BATCH_BODY, BINARY_SCHEMA, RAW_ENTRY_BODY, problems

router = APIRouter(prefix="/api/v1/ledgers", tags=["ledgers"])

# Entries pulled from the engine per worker-thread hop while streaming frames.
_STREAM_BATCH_ENTRIES = 64
_STREAM_BATCH_BYTES = 1024 * 1024
PAGE_LIMIT_MAX = 1000
PAGE_LIMIT_DEFAULT = 100


@router.post(
    "",
    status_code=201,
    response_model=Ledger,
    operation_id="create_ledger",
    responses=problems(400, 409, 503, 507),
)
async def create_ledger(body: CreateLedger, node: NodeDep) -> Ledger:
    """Create an OPEN ledger; its password guards every later mutating call."""
    info = await node.ledgers.create(password=body.password, metadata=body.metadata,
                                     ensemble_size=body.ensemble_size,
                                     write_quorum=body.write_quorum, ack_quorum=body.ack_quorum)
    return Ledger.from_info(info)


@router.get("", response_model=LedgerList, operation_id="list_ledgers", responses=problems())
async def list_ledgers(
    node: NodeDep,
    state: Annotated[
        LedgerStateName | None, Query(description="only ledgers in this state")
    ] = None,
    after: Annotated[
        int | None, Query(ge=0, le=ID_MAX, description="only ledgers with a larger id")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=PAGE_LIMIT_MAX)] = PAGE_LIMIT_DEFAULT,
) -> LedgerList:
    """List ledgers in id order, a page at a time."""
    page, next_after = await node.ledgers.list_ledgers(
        state=LedgerState(state.value) if state is not None else None,
        after=after,
        limit=limit,
    )
    return LedgerList(ledgers=[Ledger.from_info(i) for i in page], next_after=next_after)


@router.get(
    "/{ledger_id}", response_model=Ledger, operation_id="get_ledger", responses=problems(404)
)
async def get_ledger(ledger_id: LedgerId, node: NodeDep) -> Ledger:
    return Ledger.from_info(await node.ledgers.get(ledger_id))


@router.delete(
    "/{ledger_id}",
    status_code=204,
    response_class=Response,
    operation_id="delete_ledger",
    responses=problems(403, 404, 503, 507),
)
async def delete_ledger(
    ledger_id: LedgerId, node: NodeDep, x_ledger_password: PasswordHeader = None
) -> Response:
    """Delete a ledger: 404 from now on; its space is reclaimed by garbage collection
    (and its S3 objects deleted, when it was offloaded)."""
    await node.ledgers.delete(ledger_id, password=ledger_password(x_ledger_password))
    return Response(status_code=204)


@router.post(
    "/{ledger_id}/entries",
    status_code=201,
    response_model=EntryAdded,
    operation_id="add_entry",
    openapi_extra=RAW_ENTRY_BODY,
    responses={
        200: {
            "description": "idempotent retry: the same payload is already at `entry_id`",
            "model": EntryAdded,
        },
        **problems(403, 404, 409, 413, 503, 507),
    },
)
async def add_entry(
    ledger_id: LedgerId,
    request: Request,
    x_ledger_password: PasswordHeader = None,
    entry_id: Annotated[
        int | None,
        Query(ge=0, le=ID_MAX, description="idempotent append: the id this entry must get"),
    ] = None,
) -> Response:
    """Append the raw request body as the next entry; answers once it is durable."""
    node = node_of(request)
    password = ledger_password(x_ledger_password)
    # The transport reads no more than the largest entry; the engine says why it
    # refuses one larger.
    limit = node.settings.engine.limits.entry_size_bytes_max
    payload = await read_body(request, limit + 1)
    started = time.perf_counter()
    result = await node.ledgers.add_entry(ledger_id, payload, password=password,
                                          expected_entry_id=entry_id)
    service_of(request).metrics.add_seconds.labels("single").observe(
        time.perf_counter() - started)
    added = EntryAdded(
        entry_id=result.entry_id,
        last_add_confirmed=result.last_add_confirmed,
        crc32c=result.crc32c,
    )
    return json_response(added, 200 if result.already_present else 201)


@router.post(
    "/{ledger_id}/entries/batch",
    status_code=201,
    response_model=BatchAdded,
    operation_id="add_entries",
    openapi_extra=BATCH_BODY,
    responses=problems(400, 403, 404, 409, 413, 415, 503, 507),
)
async def add_entries(
    ledger_id: LedgerId, request: Request, x_ledger_password: PasswordHeader = None
) -> Response:
    """Append several entries, all or nothing; the whole body is validated first."""
    node = node_of(request)
    service = service_of(request)
    password = ledger_password(x_ledger_password)
    limits = node.settings.engine.limits
    chunks = body_chunks(request, service.settings.max_request_body_size)
    media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media_type == FRAMES_MEDIA_TYPE:
        payloads = await decode_upload(chunks, count_max=limits.batch_entry_count_max,
                                       size_max=limits.entry_size_bytes_max)
    elif media_type in ("application/json", "") or media_type.endswith("+json"):
        body = b"".join([chunk async for chunk in chunks])
        try:
            payloads = BatchAppend.model_validate_json(body).payloads()
        except ValidationError as exc:
            raise RequestValidationError(exc.errors()) from exc
        except ValueError as exc:
            raise BadRequest(str(exc)) from exc
    else:
        raise UnsupportedMediaType(
            f"Content-Type must be application/json or {FRAMES_MEDIA_TYPE}, not {media_type!r}")
    started = time.perf_counter()
    result = await node.ledgers.add_entries(ledger_id, payloads, password=password)
    service.metrics.add_seconds.labels("batch").observe(time.perf_counter() - started)
    added = BatchAdded(
        first_entry_id=result.first_entry_id,
        last_entry_id=result.last_entry_id,
        last_add_confirmed=result.last_add_confirmed,
    )
    return json_response(added, 201)


@router.get(
    "/{ledger_id}/entries/{entry_id}",
    response_class=Response,
    operation_id="read_entry",
    responses={
        200: {
            "description": "the entry's payload",
            "content": {"application/octet-stream": {"schema": BINARY_SCHEMA}},
            "headers": {
                "X-Entry-Id": {"schema": {"type": "integer"}},
                "X-Crc32c": {"schema": {"type": "integer"}, "description": "decimal CRC32C"},
                "X-Last-Add-Confirmed": {"schema": {"type": "integer"}},
            },
        },
        **problems(404, 503),
    },
)
async def read_entry(ledger_id: LedgerId, entry_id: EntryId, node: NodeDep,
                     service: ServiceDep) -> Response:
    """One entry's raw payload (only entries up to last-add-confirmed exist)."""
    started = time.perf_counter()
    entry, lac = await node.ledgers.read_entry(ledger_id, entry_id)
    service.metrics.read_seconds.labels("single").observe(time.perf_counter() - started)
    return Response(
        content=entry.payload,
        media_type="application/octet-stream",
        headers={
            "X-Entry-Id": str(entry.entry_id),
            "X-Crc32c": str(entry.crc32c),
            "X-Last-Add-Confirmed": str(max(lac, entry.entry_id)),
        },
    )


@router.get(
    "/{ledger_id}/entries",
    response_model=EntryPage,
    operation_id="read_entries",
    responses={
        200: {
            "description": "JSON page, or with `Accept: application/x-ledgerd-frames` a stream "
            "of frames (u64 entry id, u32 crc32c, u32 length, payload; big-endian)",
            "content": {FRAMES_MEDIA_TYPE: {"schema": BINARY_SCHEMA}},
        },
        **problems(400, 404, 503),
    },
)
async def read_entries(
    ledger_id: LedgerId,
    request: Request,
    node: NodeDep,
    service: ServiceDep,
    start: Annotated[int, Query(ge=0, le=ID_MAX, description="first entry id")] = 0,
    end: Annotated[
        int | None,
        Query(
            ge=0, le=ID_MAX, description="last entry id, inclusive (default: last-add-confirmed)"
        ),
    ] = None,
    limit: Annotated[
        int | None,
        Query(
            ge=1,
            le=ID_MAX,
            description=f"most entries; a JSON page holds at most "
            f"{PAGE_LIMIT_MAX} (default {PAGE_LIMIT_DEFAULT}), a frame stream is unbounded",
        ),
    ] = None,
) -> EntryPage | StreamingResponse:
    """Entries ``start..end`` in order, as a JSON page or a stream of frames."""
    if end is not None and end < start:
        raise BadRequest(f"end {end} is below start {start}")
    info = await node.ledgers.get(ledger_id)
    last = info.last_add_confirmed if end is None else min(end, info.last_add_confirmed)
    wants_frames = FRAMES_MEDIA_TYPE in request.headers.get("accept", "")

    if wants_frames:
        return await _stream_frames(node, ledger_id, start, last, limit)

    count_max = min(limit or PAGE_LIMIT_DEFAULT, PAGE_LIMIT_MAX)
    if start > last:
        return EntryPage(entries=[], next_start=None)

    started = time.perf_counter()
    batches = node.ledgers.read_range(ledger_id, start, last, count_max=count_max,
                                      bytes_max=service.settings.max_read_page_size,
                                      batch_count_max=count_max)
    try:
        page: list[Entry] = await anext(batches, [])
    finally:
        await batches.aclose()
    service.metrics.read_seconds.labels("range").observe(time.perf_counter() - started)
    next_start = page[-1].entry_id + 1 if page and page[-1].entry_id < last else None
    return EntryPage(
        entries=[
            EntryOut(
                entry_id=e.entry_id,
                crc32c=e.crc32c,
                payload=base64.b64encode(e.payload).decode("ascii"),
            )
            for e in page
        ],
        next_start=next_start,
    )


async def _stream_frames(
    node: NodeDep, ledger_id: int, start: int, last: int, limit: int | None
) -> StreamingResponse:
    batches = node.ledgers.read_range(ledger_id, start, last, count_max=limit,
                                      bytes_max=_STREAM_BATCH_BYTES,
                                      batch_count_max=_STREAM_BATCH_ENTRIES)
    # The first batch is read before answering so that an error (e.g. a vanished
    # ledger) still becomes a problem response instead of a cut stream.
    try:
        first: list[Entry] = await anext(batches, [])
    except BaseException:
        await batches.aclose()
        raise

    async def frames() -> AsyncIterator[bytes]:
        batch = first
        try:
            while batch:
                yield b"".join(encode_download(e.entry_id, e.crc32c, e.payload) for e in batch)
                batch = await anext(batches, [])
        finally:
            await batches.aclose()

    return StreamingResponse(frames(), media_type=FRAMES_MEDIA_TYPE)


@router.post(
    "/{ledger_id}/fence",
    response_model=Ledger,
    operation_id="fence_ledger",
    responses=problems(403, 404, 503, 507),
)
async def fence_ledger(
    ledger_id: LedgerId, node: NodeDep, x_ledger_password: PasswordHeader = None
) -> Ledger:
    """Fence the ledger: no more adds (a recovering reader does this first)."""
    password = ledger_password(x_ledger_password)
    return Ledger.from_info(await node.ledgers.fence(ledger_id, password=password))


@router.post(
    "/{ledger_id}/close",
    response_model=Ledger,
    operation_id="close_ledger",
    responses=problems(403, 404, 503, 507),
)
async def close_ledger(
    ledger_id: LedgerId, node: NodeDep, x_ledger_password: PasswordHeader = None
) -> Ledger:
    """Seal the ledger: its last entry id and length are fixed from now on."""
    password = ledger_password(x_ledger_password)
    return Ledger.from_info(await node.ledgers.close(ledger_id, password=password))


@router.post(
    "/{ledger_id}/offload",
    status_code=202,
    response_model=Offload,
    operation_id="offload_ledger",
    dependencies=[AdminDep],
    responses=problems(401, 404, 409, 503),
)
async def offload_ledger(ledger_id: LedgerId, node: NodeDep) -> Offload:
    """Queue a sealed (CLOSED) ledger for offload to S3 (admin token)."""
    return Offload.from_info(await node.ledgers.request_offload(ledger_id))


@router.get(
    "/{ledger_id}/offload",
    response_model=Offload,
    operation_id="get_offload",
    responses=problems(404),
)
async def get_offload(ledger_id: LedgerId, node: NodeDep) -> Offload:
    """The ledger's offload state, with its progress while it runs."""
    return Offload.from_info(*await node.ledgers.offload_status(ledger_id))
