"""``/api/v1/ledgers``: create, list, append, read, fence, close, delete, offload.

Routes validate and translate; every decision is the node's (``node.ledgers``),
whose coroutines keep blocking engine work off the event loop.
"""

from __future__ import annotations

import base64
import time
from collections.abc import AsyncIterator
from typing import Annotated

import crc32c
from fastapi import APIRouter, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import StreamingResponse
from pydantic import Field

from common.errors import BadRequest, UnsupportedMediaType
from common.frames import FRAMES_MEDIA_TYPE, encode_download
from ledger import Entry, LedgerFilter, LedgerState, OffloadState
from node import blocking

from .deps import (
    AdminDep,
    EntryId,
    LedgerId,
    NodeDep,
    PasswordHeader,
    ServiceDep,
    authorize,
    body_chunks,
    json_response,
    ledger_password,
    node_of,
    read_body,
    read_body_buffer,
    service_of,
)
from .frames import decode_upload
from .json_batch import MalformedJson, json_batch_bytes_max, parse_json_batch
from .models import (
    CRC32C_MAX,
    ID_MAX,
    INT64,
    BatchAdded,
    CreateLedger,
    EntryAdded,
    EntryOut,
    EntryPage,
    Ledger,
    LedgerList,
    LedgerStateName,
    Offload,
    OffloadStateName,
)
from .openapi_docs import (
    ADDED_ENTRY_LINKS,
    BACKPRESSURE,
    BAD_BATCH,
    BAD_QUORUMS,
    BAD_RANGE,
    BATCH_BODY,
    BATCH_CONFLICT,
    BATCH_RETRIED,
    BATCH_TOO_LARGE,
    BINARY_SCHEMA,
    BODY_TOO_LARGE,
    CLOSED,
    CLOSED_LEDGER_LINKS,
    CREATE_LIMITS,
    CREATED_LEDGER_LINKS,
    ENTRY_CONFLICT,
    ENTRY_TOO_LARGE,
    FENCED,
    FRAMES_BODY,
    FRAMES_DOWNLOAD,
    NO_ADMIN_TOKEN,
    NO_ENTRY,
    NO_LEDGER,
    NOT_AN_ENTRY_ID,
    NOT_ENOUGH_BOOKIES,
    NOT_SEALED,
    NOT_TEXT,
    OCTETS_MEDIA_TYPE,
    OFFLOAD_OFF,
    QUORUMS_STANDALONE,
    RAW_ENTRY_BODY,
    READ_ONLY,
    S3_DOWN,
    TOO_MANY_LEDGERS,
    WRONG_PASSWORD,
    problems,
    unsupported_media_type,
)

router = APIRouter(prefix="/api/v1/ledgers", tags=["ledgers"])

# Entries pulled from the engine per worker-thread hop while streaming frames.
_STREAM_BATCH_ENTRIES = 64
_STREAM_BATCH_BYTES = 1024 * 1024
PAGE_LIMIT_MAX = 1000
PAGE_LIMIT_DEFAULT = 100
MAX_METADATA_FILTERS = 16
# A metadata filter of a listing: `key=value` (the first `=` splits; the key may
# be empty, as a metadata key may).
MetadataPair = Annotated[str, Field(pattern=r"^[^=]*=")]

Start = Annotated[int, Query(ge=0, le=ID_MAX, json_schema_extra=INT64,
                             description="first entry id")]
End = Annotated[
    int | None,
    Query(ge=0, le=ID_MAX, json_schema_extra=INT64,
          description="last entry id, inclusive (default and at most: last-add-confirmed); "
          "below `start` is 400"),
]

FirstEntryId = Annotated[
    int | None,
    Query(ge=0, le=ID_MAX, json_schema_extra=INT64,
          description="idempotent append: the id the first entry must get (the whole batch "
          "already there from it: 200 with it)"),
]


def _media_type(request: Request) -> str:
    return request.headers.get("content-type", "").split(";")[0].strip().lower()


@router.post(
    "",
    status_code=201,
    response_model=Ledger,
    operation_id="create_ledger",
    responses={
        201: {"links": CREATED_LEDGER_LINKS},
        **problems(CREATE_LIMITS, NOT_TEXT, BODY_TOO_LARGE, BACKPRESSURE, READ_ONLY,
                   TOO_MANY_LEDGERS, QUORUMS_STANDALONE, BAD_QUORUMS, NOT_ENOUGH_BOOKIES),
    },
)
async def create_ledger(body: CreateLedger, node: NodeDep, service: ServiceDep) -> Response:
    """Create an OPEN ledger; its password guards every later mutating call."""
    # Cluster mode hashes the password with scrypt: on the password gate's threads.
    info = await service.passwords.hash(lambda limiter: node.ledgers.create(
        password=body.password, metadata=body.metadata, ensemble_size=body.ensemble_size,
        write_quorum=body.write_quorum, ack_quorum=body.ack_quorum, limiter=limiter))
    # As adds answer: a creation is a write, and re-validating the model costs as much.
    return json_response(Ledger.from_info(info), 201)


@router.get("", response_model=LedgerList, operation_id="list_ledgers", responses=problems())
async def list_ledgers(
    node: NodeDep,
    state: Annotated[
        LedgerStateName | None, Query(description="only ledgers in this state")
    ] = None,
    after: Annotated[
        int | None,
        Query(ge=0, le=ID_MAX, json_schema_extra=INT64,
              description="only ledgers with a larger id"),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=PAGE_LIMIT_MAX)] = PAGE_LIMIT_DEFAULT,
    offload_state: Annotated[
        OffloadStateName | None, Query(description="only ledgers whose offload is in this state")
    ] = None,
    metadata: Annotated[
        list[MetadataPair] | None,
        Query(max_length=MAX_METADATA_FILTERS,
              description="only ledgers whose metadata has this `key=value` pair "
              "(repeat for several; all must match)"),
    ] = None,
) -> LedgerList:
    """List ledgers in id order, a page at a time (keyset paging: `after` the last
    id seen).  With `offload_state` or `metadata`, a page looks at 20,000 ledgers
    at most, so it may hold fewer than `limit` (even none) and still have a
    `next_after`: follow it until it is null."""
    pairs = dict(pair.split("=", 1) for pair in metadata or ())
    where = LedgerFilter(
        state=LedgerState(state.value) if state is not None else None,
        offload_state=OffloadState(offload_state.value) if offload_state is not None else None,
        metadata=pairs)
    page, next_after = await node.ledgers.list_ledgers(
        state=None, after=after, limit=limit, where=where)
    return LedgerList(ledgers=[Ledger.from_info(i) for i in page], next_after=next_after)


@router.get(
    "/{ledger_id}", response_model=Ledger, operation_id="get_ledger",
    responses=problems(NO_LEDGER),
)
async def get_ledger(ledger_id: LedgerId, node: NodeDep) -> Ledger:
    return Ledger.from_info(await node.ledgers.get(ledger_id))


@router.delete(
    "/{ledger_id}",
    status_code=204,
    response_class=Response,
    operation_id="delete_ledger",
    responses=problems(WRONG_PASSWORD, NO_LEDGER, BACKPRESSURE),
)
async def delete_ledger(
    ledger_id: LedgerId, node: NodeDep, request: Request, x_ledger_password: PasswordHeader = None
) -> Response:
    """Delete a ledger: 404 from now on; its space is reclaimed by garbage collection
    (and its S3 objects deleted, when it was offloaded)."""
    password = ledger_password(x_ledger_password)
    await authorize(request, node, ledger_id, password)
    await node.ledgers.delete(ledger_id, password=password)
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
            "links": ADDED_ENTRY_LINKS,
        },
        201: {"links": ADDED_ENTRY_LINKS},
        **problems(WRONG_PASSWORD, NO_LEDGER, FENCED, CLOSED, ENTRY_CONFLICT, ENTRY_TOO_LARGE,
                   BODY_TOO_LARGE, unsupported_media_type(OCTETS_MEDIA_TYPE), BACKPRESSURE,
                   READ_ONLY),
    },
)
async def add_entry(
    ledger_id: LedgerId,
    request: Request,
    x_ledger_password: PasswordHeader = None,
    entry_id: Annotated[
        int | None,
        Query(ge=0, le=ID_MAX, json_schema_extra=INT64,
              description="idempotent append: the id this entry must get"),
    ] = None,
) -> Response:
    """Append the raw request body as the next entry; answers once it is durable."""
    return await add_single(request, ledger_id, x_ledger_password, entry_id)


async def add_single(request: Request, ledger_id: int, password_header: str | None,
                     entry_id: int | None) -> Response:
    """What ``add_entry`` does once its parameters are valid: called by the route,
    and by ``app.fast_paths`` for the requests whose parameters are plain."""
    media_type = _media_type(request)
    if media_type not in ("", OCTETS_MEDIA_TYPE):
        # A JSON or form body would be stored as its text: a client bug, refused.
        raise UnsupportedMediaType(f"Content-Type must be {OCTETS_MEDIA_TYPE}, not {media_type!r}")
    node = node_of(request)
    password = ledger_password(password_header)
    await authorize(request, node, ledger_id, password)
    # The transport reads no more than the largest entry; the engine says why it
    # refuses one larger.
    limit = node.settings.engine.limits.entry_size_bytes_max
    payload = await read_body(request, limit + 1)
    started = time.perf_counter()
    result = await node.ledgers.append(ledger_id, (payload,), password=password,
                                       expected_first_entry_id=entry_id)
    service_of(request).metrics.single_add_seconds.observe(
        time.perf_counter() - started)
    # The stored entry's checksum is its payload's: the engine keeps the bytes as sent.
    added = EntryAdded(
        entry_id=result.first_entry_id,
        last_add_confirmed=result.last_add_confirmed,
        crc32c=crc32c.crc32c(payload),
    )
    return json_response(added, 200 if result.already_present else 201)


@router.post(
    "/{ledger_id}/entries/batch",
    status_code=201,
    response_model=BatchAdded,
    operation_id="add_entries",
    openapi_extra=BATCH_BODY,
    responses={
        200: BATCH_RETRIED,
        **problems(BAD_BATCH, WRONG_PASSWORD, NO_LEDGER, FENCED, CLOSED, BATCH_CONFLICT,
                   BATCH_TOO_LARGE, unsupported_media_type("application/json", FRAMES_MEDIA_TYPE),
                   BACKPRESSURE, READ_ONLY),
    },
)
async def add_entries(
    ledger_id: LedgerId,
    request: Request,
    x_ledger_password: PasswordHeader = None,
    first_entry_id: FirstEntryId = None,
) -> Response:
    """Append several entries, all or nothing; the whole body is validated first."""
    node = node_of(request)
    service = service_of(request)
    password = ledger_password(x_ledger_password)
    limits = node.settings.engine.limits
    await authorize(request, node, ledger_id, password)  # before reading any of the body
    body_size_max = service.settings.max_request_body_size
    media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media_type == FRAMES_MEDIA_TYPE:
        payloads = await decode_upload(body_chunks(request, body_size_max),
                                       count_max=limits.batch_entry_count_max,
                                       size_max=limits.entry_size_bytes_max)
    elif media_type in ("application/json", "") or media_type.endswith("+json"):
        json_max = json_batch_bytes_max(limits.batch_size_bytes_max,
                                        limits.batch_entry_count_max)
        body = await read_body_buffer(
            request, min(body_size_max, json_max),
            "MAX_REQUEST_BODY_SIZE" if body_size_max < json_max else
            "the largest JSON batch of MAX_BATCH_SIZE bytes in MAX_BATCH_ENTRIES entries")
        try:  # CPU work, off the event loop
            payloads = await blocking(parse_json_batch, body,
                                      count_max=limits.batch_entry_count_max)
        except MalformedJson as exc:
            raise RequestValidationError(
                [{"loc": ("body", *exc.loc), "msg": exc.msg, "type": "json_invalid"}]) from exc
    else:
        raise UnsupportedMediaType(
            f"Content-Type must be application/json or {FRAMES_MEDIA_TYPE}, not {media_type!r}")
    started = time.perf_counter()
    result = await node.ledgers.append(ledger_id, payloads, password=password,
                                       expected_first_entry_id=first_entry_id)
    service.metrics.batch_add_seconds.observe(time.perf_counter() - started)
    added = BatchAdded(
        first_entry_id=result.first_entry_id,
        last_entry_id=result.last_entry_id,
        last_add_confirmed=result.last_add_confirmed,
    )
    return json_response(added, 200 if result.already_present else 201)


@router.post(
    "/{ledger_id}/entries/frames",
    status_code=201,
    response_model=BatchAdded,
    operation_id="add_entries_frames",
    openapi_extra=FRAMES_BODY,
    responses={
        200: BATCH_RETRIED,
        **problems(BAD_BATCH, WRONG_PASSWORD, NO_LEDGER, FENCED, CLOSED, BATCH_CONFLICT,
                   BATCH_TOO_LARGE, unsupported_media_type(FRAMES_MEDIA_TYPE), BACKPRESSURE,
                   READ_ONLY),
    },
)
async def add_entries_frames(
    ledger_id: LedgerId,
    request: Request,
    x_ledger_password: PasswordHeader = None,
    first_entry_id: FirstEntryId = None,
) -> Response:
    """Append several entries sent as frames, all or nothing: ``add_entries`` with
    its frames body, as an operation of its own for generated clients (which send
    one media type per operation)."""
    media_type = _media_type(request)
    if media_type != FRAMES_MEDIA_TYPE:
        raise UnsupportedMediaType(f"Content-Type must be {FRAMES_MEDIA_TYPE}, not {media_type!r}")
    return await add_entries(ledger_id, request, x_ledger_password, first_entry_id)


_INT64_HEADER = {"type": "integer", "minimum": 0, **INT64}


@router.get(
    # `:int`: /entries/frames and /entries/batch are other resources, not entry ids.
    "/{ledger_id}/entries/{entry_id:int}",
    response_class=Response,
    operation_id="read_entry",
    responses={
        200: {
            "description": "the entry's payload",
            "content": {OCTETS_MEDIA_TYPE: {"schema": BINARY_SCHEMA}},
            "headers": {
                "X-Entry-Id": {"schema": _INT64_HEADER, "required": True},
                "X-Crc32c": {"schema": {**_INT64_HEADER, "maximum": CRC32C_MAX},
                             "description": "the payload's CRC32C, decimal", "required": True},
                "X-Last-Add-Confirmed": {"schema": _INT64_HEADER, "required": True},
            },
        },
        **problems(NO_LEDGER, NO_ENTRY, NOT_AN_ENTRY_ID, S3_DOWN),
    },
)
async def read_entry(ledger_id: LedgerId, entry_id: EntryId, node: NodeDep,
                     service: ServiceDep) -> Response:
    """One entry's raw payload (only entries up to last-add-confirmed exist)."""
    started = time.perf_counter()
    entry, lac = await node.ledgers.read_entry(ledger_id, entry_id)
    service.metrics.single_read_seconds.observe(time.perf_counter() - started)
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
            "description": "a JSON page; with `Accept: application/x-ledgerd-frames`, "
            f"{FRAMES_DOWNLOAD} (typed clients: `read_entries_frames`)",
            "content": {FRAMES_MEDIA_TYPE: {"schema": BINARY_SCHEMA}},
        },
        **problems(BAD_RANGE, NO_LEDGER, S3_DOWN),
    },
)
async def read_entries(
    ledger_id: LedgerId,
    request: Request,
    node: NodeDep,
    service: ServiceDep,
    start: Start = 0,
    end: End = None,
    limit: Annotated[
        int | None,
        Query(
            ge=1,
            le=ID_MAX,
            json_schema_extra=INT64,
            description=f"most entries; a JSON page holds at most "
            f"{PAGE_LIMIT_MAX} (default {PAGE_LIMIT_DEFAULT}), a frame stream is unbounded",
        ),
    ] = None,
) -> EntryPage | StreamingResponse:
    """Entries ``start..end`` in order, as a JSON page or a stream of frames."""
    last = await _last_of_range(node, ledger_id, start, end)
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
    service.metrics.range_read_seconds.observe(time.perf_counter() - started)
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


@router.get(
    "/{ledger_id}/entries/frames",
    response_class=StreamingResponse,
    operation_id="read_entries_frames",
    responses={
        200: {
            "description": FRAMES_DOWNLOAD,
            "content": {FRAMES_MEDIA_TYPE: {"schema": BINARY_SCHEMA}},
        },
        **problems(BAD_RANGE, NO_LEDGER, S3_DOWN),
    },
)
async def read_entries_frames(
    ledger_id: LedgerId,
    node: NodeDep,
    start: Start = 0,
    end: End = None,
    limit: Annotated[
        int | None,
        Query(ge=1, le=ID_MAX, json_schema_extra=INT64,
              description="most entries (default: the whole range)"),
    ] = None,
) -> StreamingResponse:
    """Entries ``start..end`` in order as a stream of frames, never held in memory
    whole: ``read_entries`` with ``Accept: application/x-ledgerd-frames``, as an
    operation of its own for generated clients.  An error after the first bytes
    can only cut the stream short (a client sees a truncated frame)."""
    last = await _last_of_range(node, ledger_id, start, end)
    return await _stream_frames(node, ledger_id, start, last, limit)


async def _last_of_range(node: NodeDep, ledger_id: int, start: int, end: int | None) -> int:
    """The last entry id a range read returns: ``end``, capped at last-add-confirmed."""
    if end is not None and end < start:
        raise BadRequest(f"end {end} is below start {start}")
    lac = await node.ledgers.readable_end(ledger_id)
    return lac if end is None else min(end, lac)


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
    responses=problems(WRONG_PASSWORD, NO_LEDGER, BACKPRESSURE),
)
async def fence_ledger(
    ledger_id: LedgerId, node: NodeDep, request: Request, x_ledger_password: PasswordHeader = None
) -> Ledger:
    """Fence the ledger: no more adds (a recovering reader does this first)."""
    password = ledger_password(x_ledger_password)
    await authorize(request, node, ledger_id, password)
    return Ledger.from_info(await node.ledgers.fence(ledger_id, password=password))


@router.post(
    "/{ledger_id}/close",
    response_model=Ledger,
    operation_id="close_ledger",
    responses={200: {"links": CLOSED_LEDGER_LINKS},
               **problems(WRONG_PASSWORD, NO_LEDGER, BACKPRESSURE)},
)
async def close_ledger(
    ledger_id: LedgerId, node: NodeDep, request: Request, x_ledger_password: PasswordHeader = None
) -> Ledger:
    """Seal the ledger: its last entry id and length are fixed from now on."""
    password = ledger_password(x_ledger_password)
    await authorize(request, node, ledger_id, password)
    return Ledger.from_info(await node.ledgers.close(ledger_id, password=password))


@router.post(
    "/{ledger_id}/offload",
    status_code=202,
    response_model=Offload,
    operation_id="offload_ledger",
    dependencies=[AdminDep],
    responses=problems(NO_ADMIN_TOKEN, NO_LEDGER, NOT_SEALED, OFFLOAD_OFF),
)
async def offload_ledger(ledger_id: LedgerId, node: NodeDep) -> Offload:
    """Queue a sealed (CLOSED) ledger for offload to S3 (admin token)."""
    return Offload.from_info(await node.ledgers.request_offload(ledger_id))


@router.get(
    "/{ledger_id}/offload",
    response_model=Offload,
    operation_id="get_offload",
    responses=problems(NO_LEDGER),
)
async def get_offload(ledger_id: LedgerId, node: NodeDep) -> Offload:
    """The ledger's offload state, with its progress while it runs."""
    return Offload.from_ledger(*await node.ledgers.offload_status(ledger_id))
