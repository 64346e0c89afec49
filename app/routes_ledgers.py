"""``/api/v1/ledgers``: create, list, append, read, fence, close, delete, offload.

Routes validate and translate; every storage decision is the engine's.  Blocking
engine calls run on worker threads (:func:`deps.blocking` / :func:`deps.settle`);
adds run on the event loop when they wait for nothing (:func:`deps.settle_now`).
"""

from __future__ import annotations

import base64
import time
from collections.abc import AsyncIterator, Iterator
from typing import Annotated

import anyio
from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import StreamingResponse
from pydantic import ValidationError

from common import errors
from ledger import Entry, LedgerState, OffloadState

from . import background
from .deps import (
    AdminDep,
    EntryId,
    LedgerId,
    PasswordHeader,
    ServicesDep,
    blocking,
    json_response,
    ledger_password,
    read_body,
    services_of,
    settle,
    settle_now,
)
from .errors import ApiError, describe_validation
from .frames import FRAMES_MEDIA_TYPE, FrameError, FrameTooLarge, decode_upload, encode_download
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


def _entry_too_large(size: int) -> Exception:
    return errors.EntryTooLarge(f"entry of {size} bytes exceeds MAX_ENTRY_SIZE")


def _body_too_large(size: int) -> Exception:
    return ApiError(413, "EBADREQ", f"request body of {size}+ bytes exceeds MAX_REQUEST_BODY_SIZE")


@router.post(
    "",
    status_code=201,
    response_model=Ledger,
    operation_id="create_ledger",
    responses=problems(400, 503, 507),
)
async def create_ledger(body: CreateLedger, services: ServicesDep) -> Ledger:
    """Create an OPEN ledger; its password guards every later mutating call."""
    limits = services.settings
    if len(body.password.encode()) > limits.max_password_size:
        raise ApiError(400, "EBADREQ", "password exceeds MAX_PASSWORD_SIZE")
    if len(body.metadata) > limits.max_metadata_entries:
        raise ApiError(400, "EBADREQ", "metadata has more than MAX_METADATA_ENTRIES pairs")
    metadata_size = sum(len(k.encode()) + len(v.encode()) for k, v in body.metadata.items())
    if metadata_size > limits.max_metadata_size:
        raise ApiError(400, "EBADREQ", "metadata exceeds MAX_METADATA_SIZE bytes")
    info = await settle(
        services.bookie.create_ledger, password=body.password, metadata=body.metadata
    )
    return Ledger.from_info(info)


@router.get("", response_model=LedgerList, operation_id="list_ledgers", responses=problems())
async def list_ledgers(
    services: ServicesDep,
    state: Annotated[
        LedgerStateName | None, Query(description="only ledgers in this state")
    ] = None,
    after: Annotated[
        int | None, Query(ge=0, le=ID_MAX, description="only ledgers with a larger id")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=PAGE_LIMIT_MAX)] = PAGE_LIMIT_DEFAULT,
) -> LedgerList:
    """List ledgers in id order, a page at a time."""
    page, next_after = await blocking(
        services.bookie.list_ledgers,
        state=LedgerState(state.value) if state is not None else None,
        after=after,
        limit=limit,
    )
    return LedgerList(ledgers=[Ledger.from_info(i) for i in page], next_after=next_after)


@router.get(
    "/{ledger_id}", response_model=Ledger, operation_id="get_ledger", responses=problems(404)
)
async def get_ledger(ledger_id: LedgerId, services: ServicesDep) -> Ledger:
    return Ledger.from_info(await blocking(services.bookie.get_ledger, ledger_id))


@router.delete(
    "/{ledger_id}",
    status_code=204,
    response_class=Response,
    operation_id="delete_ledger",
    responses=problems(403, 404, 503, 507),
)
async def delete_ledger(
    ledger_id: LedgerId, services: ServicesDep, x_ledger_password: PasswordHeader = None
) -> Response:
    """Delete a ledger: 404 from now on; its space is reclaimed by garbage collection
    (and its S3 objects deleted, when it was offloaded)."""
    password = ledger_password(x_ledger_password)
    offload = (await blocking(services.bookie.get_ledger, ledger_id)).offload
    await settle(services.bookie.delete_ledger, ledger_id, password=password)
    if services.offload is not None and offload.state != OffloadState.NONE:
        # Not awaited: S3 being slow or down must not fail a delete; what this
        # misses, the orphan sweep at the next start deletes.
        background.spawn(services, background.delete_offloaded(services.offload, ledger_id))
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
    services = services_of(request)
    password = ledger_password(x_ledger_password)
    payload = await read_body(request, services.settings.max_entry_size, _entry_too_large)
    started = time.perf_counter()
    result = await settle_now(
        lambda block: services.bookie.add_entry(
            ledger_id, payload, password=password, expected_entry_id=entry_id, block=block
        )
    )
    services.metrics.add_seconds.labels("single").observe(time.perf_counter() - started)
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
    services = services_of(request)
    password = ledger_password(x_ledger_password)
    limits = services.settings
    body = await read_body(request, limits.max_request_body_size, _body_too_large)
    media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media_type == FRAMES_MEDIA_TYPE:
        try:
            payloads = decode_upload(
                body, count_max=limits.max_batch_entries, size_max=limits.max_entry_size
            )
        except FrameTooLarge as exc:
            raise _entry_too_large(limits.max_entry_size + 1) from exc
        except FrameError as exc:
            raise ApiError(400, "EBADREQ", str(exc)) from exc
    elif media_type in ("application/json", "") or media_type.endswith("+json"):
        try:
            payloads = BatchAppend.model_validate_json(body).payloads()
        except ValidationError as exc:
            raise ApiError(422, "EBADREQ", describe_validation(exc.errors())) from exc
        except ValueError as exc:
            raise ApiError(400, "EBADREQ", str(exc)) from exc
        if len(payloads) > limits.max_batch_entries:
            raise ApiError(400, "EBADREQ", "more entries than MAX_BATCH_ENTRIES")
        if any(len(p) > limits.max_entry_size for p in payloads):
            raise _entry_too_large(max(len(p) for p in payloads))
    else:
        raise ApiError(
            415,
            "EBADREQ",
            f"Content-Type must be application/json or {FRAMES_MEDIA_TYPE}, not {media_type!r}",
        )
    if not payloads:
        raise ApiError(400, "EBADREQ", "a batch needs at least one entry")
    if sum(len(p) for p in payloads) > limits.batch_size_max:
        raise ApiError(413, "EBADREQ", "batch payloads exceed MAX_BATCH_SIZE bytes")
    started = time.perf_counter()
    result = await settle_now(
        lambda block: services.bookie.add_entries(
            ledger_id, payloads, password=password, block=block
        )
    )
    services.metrics.add_seconds.labels("batch").observe(time.perf_counter() - started)
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
async def read_entry(ledger_id: LedgerId, entry_id: EntryId, services: ServicesDep) -> Response:
    """One entry's raw payload (only entries up to last-add-confirmed exist)."""
    bookie = services.bookie

    def read() -> tuple[Entry, int]:
        entry = bookie.read_entry(ledger_id, entry_id)
        return entry, bookie.get_ledger(ledger_id).last_add_confirmed

    started = time.perf_counter()
    entry, lac = await blocking(read)
    services.metrics.read_seconds.labels("single").observe(time.perf_counter() - started)
    return Response(
        content=entry.payload,
        media_type="application/octet-stream",
        headers={
            "X-Entry-Id": str(entry.entry_id),
            "X-Crc32c": str(entry.crc32c),
            "X-Last-Add-Confirmed": str(max(lac, entry.entry_id)),
        },
    )


def _pull(entries: Iterator[Entry], count_max: int, bytes_max: int) -> list[Entry]:
    out: list[Entry] = []
    size = 0
    for entry in entries:
        out.append(entry)
        size += len(entry.payload)
        if len(out) >= count_max or size >= bytes_max:
            break
    return out


def _close(entries: Iterator[Entry]) -> None:
    close = getattr(entries, "close", None)
    if close is not None:
        close()


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
        **problems(404, 503),
    },
)
async def read_entries(
    ledger_id: LedgerId,
    request: Request,
    services: ServicesDep,
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
    bookie = services.bookie
    info = await blocking(bookie.get_ledger, ledger_id)
    last = info.last_add_confirmed if end is None else min(end, info.last_add_confirmed)
    wants_frames = FRAMES_MEDIA_TYPE in request.headers.get("accept", "")

    if wants_frames:
        return await _stream_frames(services, ledger_id, start, last, limit)

    count_max = min(limit or PAGE_LIMIT_DEFAULT, PAGE_LIMIT_MAX)
    if start > last:
        return EntryPage(entries=[], next_start=None)

    def collect() -> list[Entry]:
        entries = bookie.read_entries(ledger_id, start, last, count_max)
        try:
            return _pull(entries, count_max, services.settings.max_read_page_size)
        finally:
            _close(entries)

    started = time.perf_counter()
    page = await blocking(collect)
    services.metrics.read_seconds.labels("range").observe(time.perf_counter() - started)
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
    services: ServicesDep, ledger_id: int, start: int, last: int, limit: int | None
) -> StreamingResponse:
    bookie = services.bookie
    if start > last:
        return StreamingResponse(iter(()), media_type=FRAMES_MEDIA_TYPE)
    entries = await blocking(bookie.read_entries, ledger_id, start, last, limit)
    # The first batch is read before answering so that an error (e.g. a vanished
    # ledger) still becomes a problem response instead of a cut stream.
    try:
        first = await blocking(_pull, entries, _STREAM_BATCH_ENTRIES, _STREAM_BATCH_BYTES)
    except BaseException:
        await blocking(_close, entries)
        raise

    async def frames() -> AsyncIterator[bytes]:
        batch = first
        try:
            while batch:
                yield b"".join(encode_download(e.entry_id, e.crc32c, e.payload) for e in batch)
                batch = await blocking(_pull, entries, _STREAM_BATCH_ENTRIES, _STREAM_BATCH_BYTES)
        finally:
            # Runs on normal end, on error (the client sees a cut stream) and on a
            # client disconnect (cancellation): release the engine's iterator.
            with anyio.CancelScope(shield=True):
                await blocking(_close, entries)

    return StreamingResponse(frames(), media_type=FRAMES_MEDIA_TYPE)


@router.post(
    "/{ledger_id}/fence",
    response_model=Ledger,
    operation_id="fence_ledger",
    responses=problems(403, 404, 503, 507),
)
async def fence_ledger(
    ledger_id: LedgerId, services: ServicesDep, x_ledger_password: PasswordHeader = None
) -> Ledger:
    """Fence the ledger: no more adds (a recovering reader does this first)."""
    password = ledger_password(x_ledger_password)
    return Ledger.from_info(await settle(services.bookie.fence, ledger_id, password=password))


@router.post(
    "/{ledger_id}/close",
    response_model=Ledger,
    operation_id="close_ledger",
    responses=problems(403, 404, 503, 507),
)
async def close_ledger(
    ledger_id: LedgerId, services: ServicesDep, x_ledger_password: PasswordHeader = None
) -> Ledger:
    """Seal the ledger: its last entry id and length are fixed from now on."""
    password = ledger_password(x_ledger_password)
    closed = await settle(services.bookie.close_ledger, ledger_id, password=password)
    if services.offload is not None:
        await blocking(services.offload.on_ledger_closed, ledger_id)
    return Ledger.from_info(closed)


@router.post(
    "/{ledger_id}/offload",
    status_code=202,
    response_model=Offload,
    operation_id="offload_ledger",
    dependencies=[AdminDep],
    responses=problems(401, 404, 409, 503),
)
async def offload_ledger(ledger_id: LedgerId, services: ServicesDep) -> Offload:
    """Queue a sealed (CLOSED) ledger for offload to S3 (admin token)."""
    if services.offload is None:
        await blocking(services.bookie.get_ledger, ledger_id)  # 404 first
        raise ApiError(503, "EIO", "offload is not configured (set S3_BUCKET)")
    return Offload.from_info(await blocking(services.offload.request_offload, ledger_id))


@router.get(
    "/{ledger_id}/offload",
    response_model=Offload,
    operation_id="get_offload",
    responses=problems(404),
)
async def get_offload(ledger_id: LedgerId, services: ServicesDep) -> Offload:
    """The ledger's offload state, with its progress while it runs."""
    info = (await blocking(services.bookie.get_ledger, ledger_id)).offload
    control = services.offload
    progress = None if control is None else await blocking(control.progress, ledger_id)
    return Offload.from_info(info, progress)
