"""``/internal/v1/``: node-to-node calls of cluster mode (docs/cluster.md §12.2).

Every route needs ``Authorization: Bearer <CLUSTER_TOKEN>`` (compared in
constant time; 401 when it is missing or wrong, and always on a node that is not
in cluster mode).  They are not part of the public API: none is in the OpenAPI
document.  Replica routes carry one protocol message each to the node's
``ReplicaServer``; forward routes carry a v1 call to the ledger's writer (one
hop: the forwarded call never forwards again).  ``GET /internal/v1/password-key``
gives the cluster's password key to a node that has none (docs/cluster.md §13.2).
"""

from __future__ import annotations

import hmac
import json
from typing import Annotated, Any

import crc32c
from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from cluster import (
    BATCH_MEDIA_TYPE,
    ENTRY_FRAME_HEADER_SIZE_BYTES,
    PASSWORD_KEY_PATH,
    AddEntries,
    BookieReply,
    CopyEntries,
    CopyEntry,
    DeleteReplica,
    EntriesRead,
    EntryFound,
    EntryFrame,
    Fence,
    Fenced,
    FenceOk,
    NewEntry,
    NoEntry,
    ReadEntries,
    ReadEntry,
    RecoveryRead,
    Unavailable,
    WriteLac,
    decode_entry_frames,
    encode_entry_frames,
)
from cluster import decode_batch as decode_replica_batch
from common.errors import AuthenticationRequired, BadRequest, NotConfigured
from node import ClusterLedgers, Node

from .deps import (
    EntryId,
    LedgerId,
    NodeDep,
    PasswordHeader,
    ServiceDep,
    json_response,
    ledger_password,
    node_of,
    read_body,
)
from .models import BatchAdded, EntryAdded, Ledger

_bearer = HTTPBearer(auto_error=False)

Epoch = Annotated[int, Query(ge=1, le=2**63 - 1)]
Lac = Annotated[int, Query(ge=-1, le=2**63 - 1)]
Length = Annotated[int, Query(ge=0, le=2**63 - 1)]


async def require_cluster_token(
    service: ServiceDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> None:
    token = service.settings.cluster_token_value
    if token is None:
        raise AuthenticationRequired("this node is not in cluster mode (no CLUSTER_TOKEN)")
    if credentials is None:
        raise AuthenticationRequired("cluster token required (Authorization: Bearer ...)")
    if not hmac.compare_digest(credentials.credentials.encode(), token.encode()):
        raise AuthenticationRequired("invalid cluster token")


router = APIRouter(prefix="/internal/v1/ledgers", include_in_schema=False,
                   dependencies=[Depends(require_cluster_token)])
key_router = APIRouter(include_in_schema=False, dependencies=[Depends(require_cluster_token)])


def _json(status: int, **body: Any) -> Response:
    return Response(json.dumps(body), status_code=status, media_type="application/json")


def _answer(reply: BookieReply, ok: Response | None = None) -> Response:
    """A refusal as its status (409 fenced, 503 unavailable), else ``ok``."""
    if isinstance(reply, Fenced):
        return _json(409, fenced_epoch=reply.fenced_epoch, lac=reply.lac)
    if isinstance(reply, Unavailable):
        return _json(503, reason=reply.reason)
    assert ok is not None
    return ok


def _entry(reply: BookieReply) -> Response:
    if isinstance(reply, NoEntry):
        return _json(404, lac=reply.lac)
    if not isinstance(reply, EntryFound):
        return _answer(reply)
    return Response(content=reply.payload, media_type="application/octet-stream", headers={
        "X-Epoch": str(reply.epoch), "X-Length-After": str(reply.length_after),
        "X-Crc32c": str(crc32c.crc32c(reply.payload)),
        "X-Last-Add-Confirmed": str(reply.lac)})


def _limit_of(node: Node) -> int:
    return node.settings.engine.limits.entry_size_bytes_max


@router.post("/{ledger_id}/replica/entries/batch")
async def replica_add_batch(ledger_id: LedgerId, request: Request, epoch: Epoch,
                            lac: Lac) -> Response:
    node = node_of(request)
    limits = node.settings.engine.limits
    body = await read_body(request, limits.batch_size_bytes_max
                           + limits.batch_entry_count_max * 20)
    entries = decode_replica_batch(body, count_max=limits.batch_entry_count_max)
    if not entries:
        return _json(200, lac=node.replica_server.lac(ledger_id)[0])
    reply = await node.replica_server.serve(AddEntries(ledger_id, epoch, lac, tuple(entries)))
    return _answer(reply, _json(200, lac=getattr(reply, "lac", -1)))


@router.post("/{ledger_id}/replica/entries/{entry_id}")
async def replica_add(ledger_id: LedgerId, entry_id: EntryId, request: Request,
                      epoch: Epoch, lac: Lac, length_after: Length) -> Response:
    node = node_of(request)
    payload = await read_body(request, _limit_of(node) + 1)
    reply = await node.replica_server.serve(
        AddEntries(ledger_id, epoch, lac, (NewEntry(entry_id, payload, length_after),)))
    return _answer(reply, _json(200, lac=getattr(reply, "lac", -1)))


@router.get("/{ledger_id}/replica/entries/{entry_id}")
async def replica_read(ledger_id: LedgerId, entry_id: EntryId, node: NodeDep) -> Response:
    return _entry(await node.replica_server.serve(ReadEntry(ledger_id, entry_id)))


@router.post("/{ledger_id}/replica/recovery-read/{entry_id}")
async def replica_recovery_read(ledger_id: LedgerId, entry_id: EntryId, epoch: Epoch,
                                node: NodeDep) -> Response:
    return _entry(await node.replica_server.serve(RecoveryRead(ledger_id, entry_id, epoch)))


@router.post("/{ledger_id}/replica/fence")
async def replica_fence(ledger_id: LedgerId, epoch: Epoch, node: NodeDep) -> Response:
    reply = await node.replica_server.serve(Fence(ledger_id, epoch))
    lac = reply.lac if isinstance(reply, FenceOk) else -1
    return _answer(reply, _json(200, lac=lac))


@router.get("/{ledger_id}/replica/lac")
async def replica_lac(ledger_id: LedgerId, node: NodeDep) -> Response:
    lac, fenced_epoch = node.replica_server.lac(ledger_id)
    return _json(200, lac=lac, fenced_epoch=fenced_epoch)


@router.post("/{ledger_id}/replica/lac")
async def replica_write_lac(ledger_id: LedgerId, lac: Lac, node: NodeDep) -> Response:
    reply = await node.replica_server.serve(WriteLac(ledger_id, lac))
    return _answer(reply, _json(200, lac=getattr(reply, "lac", -1)))


@router.put("/{ledger_id}/replica/copies/{entry_id}")
async def replica_copy(ledger_id: LedgerId, entry_id: EntryId, request: Request,
                       epoch: Epoch, length_after: Length) -> Response:
    node = node_of(request)
    payload = await read_body(request, _limit_of(node) + 1)
    reply = await node.replica_server.serve(
        CopyEntry(ledger_id, entry_id, epoch, payload, length_after))
    return _answer(reply, Response(status_code=204))


@router.post("/{ledger_id}/replica/copies/batch")
async def replica_copy_batch(ledger_id: LedgerId, request: Request) -> Response:
    """Re-replication's copies of a range: entry frames, stored as one journal record."""
    node = node_of(request)
    limits = node.settings.engine.limits
    count_max = limits.batch_entry_count_max
    body = await read_body(request, max(limits.batch_size_bytes_max,
                                        limits.entry_size_bytes_max)
                           + count_max * ENTRY_FRAME_HEADER_SIZE_BYTES)
    frames = decode_entry_frames(body, count_max=count_max)
    for frame in frames:
        if crc32c.crc32c(frame.payload) != frame.crc32c:
            raise BadRequest(f"entry {frame.entry_id}: CRC32C mismatch on the wire")
    if not frames:
        return _json(200, copied=0)
    reply = await node.replica_server.serve(CopyEntries(ledger_id, tuple(
        CopyEntry(ledger_id, f.entry_id, f.epoch, f.payload, f.length_after)
        for f in frames)))
    return _answer(reply, _json(200, copied=len(frames)))


@router.post("/{ledger_id}/replica/reads")
async def replica_read_range(
    ledger_id: LedgerId, request: Request,
    bytes_max: Annotated[int, Query(ge=1, le=2**31)] = 4 * 1024 * 1024,
) -> Response:
    """Re-replication's range read: the entries asked for (JSON ``{"entry_ids"}``)
    that this bookie holds, as entry frames, until ``bytes_max`` bytes of payload."""
    node = node_of(request)
    count_max = node.settings.engine.limits.batch_entry_count_max
    try:
        ids = json.loads(await read_body(request, count_max * 21 + 64))["entry_ids"]
        if not isinstance(ids, list) or not all(
                isinstance(i, int) and 0 <= i < 2**63 for i in ids):
            raise ValueError("entry_ids must be a list of entry ids")
    except (ValueError, KeyError, TypeError) as exc:
        raise BadRequest(f"a range read needs {{\"entry_ids\": [...]}}: {exc}") from exc
    if len(ids) > count_max:
        raise BadRequest(f"a range read asks for at most {count_max} entries")
    reply = await node.replica_server.serve(ReadEntries(ledger_id, tuple(ids), bytes_max))
    if not isinstance(reply, EntriesRead):
        return _answer(reply)
    body = encode_entry_frames([EntryFrame(
        e.entry_id, e.epoch, e.length_after, crc32c.crc32c(e.payload), e.payload)
        for e in reply.found])
    return Response(content=body, media_type=BATCH_MEDIA_TYPE, headers={
        "X-Absent-Entries": ",".join(map(str, reply.absent)),
        "X-Last-Add-Confirmed": str(reply.lac)})


@router.get("/{ledger_id}/replica/entries")
async def replica_entries(
    ledger_id: LedgerId, node: NodeDep,
    first: Annotated[int, Query(ge=0, le=2**63 - 1)] = 0,
    last: Annotated[int, Query(ge=0, le=2**63 - 1)] = 2**63 - 1,
    limit: Annotated[int, Query(ge=1, le=100_000)] = 10_000,
) -> Response:
    held = await node.replica_server.entries(ledger_id, first, last, limit + 1)
    more = len(held) > limit
    held = held[:limit]
    return _json(200, entries=[list(pair) for pair in held],
                 next_first=held[-1][0] + 1 if more else None)


@router.delete("/{ledger_id}/replica")
async def replica_delete(ledger_id: LedgerId, node: NodeDep) -> Response:
    reply = await node.replica_server.serve(DeleteReplica(ledger_id))
    return _answer(reply, Response(status_code=204))



# --- forwarded v1 calls (one hop: they never forward again) ------------------------


def _cluster_ledgers(node: Node) -> ClusterLedgers:
    if not isinstance(node.ledgers, ClusterLedgers):
        raise NotConfigured("this node is not in cluster mode")
    return node.ledgers


@router.post("/{ledger_id}/forward/entries")
async def forward_add(ledger_id: LedgerId, request: Request,
                      x_ledger_password: PasswordHeader = None,
                      entry_id: Annotated[int | None, Query(ge=0, le=2**63 - 1)] = None,
                      ) -> Response:
    node = node_of(request)
    payload = await read_body(request, _limit_of(node) + 1)
    result = await _cluster_ledgers(node).append(
        ledger_id, (payload,), password=ledger_password(x_ledger_password),
        expected_first_entry_id=entry_id, forwarded=True)
    added = EntryAdded(entry_id=result.first_entry_id,
                       last_add_confirmed=result.last_add_confirmed,
                       crc32c=crc32c.crc32c(payload))
    return json_response(added, 200 if result.already_present else 201)


@router.post("/{ledger_id}/forward/entries/batch")
async def forward_add_batch(ledger_id: LedgerId, request: Request,
                            x_ledger_password: PasswordHeader = None,
                            first_entry_id: Annotated[int | None,
                                                      Query(ge=0, le=2**63 - 1)] = None,
                            ) -> Response:
    node = node_of(request)
    limits = node.settings.engine.limits
    body = await read_body(request, limits.batch_size_bytes_max
                           + limits.batch_entry_count_max * 20)
    frames = decode_replica_batch(body, count_max=limits.batch_entry_count_max)
    result = await _cluster_ledgers(node).append(
        ledger_id, [f.payload for f in frames], password=ledger_password(x_ledger_password),
        expected_first_entry_id=first_entry_id, forwarded=True)
    return json_response(BatchAdded(first_entry_id=result.first_entry_id,
                                    last_entry_id=result.last_entry_id,
                                    last_add_confirmed=result.last_add_confirmed),
                         200 if result.already_present else 201)


@router.post("/{ledger_id}/forward/close")
async def forward_close(ledger_id: LedgerId, node: NodeDep,
                        x_ledger_password: PasswordHeader = None) -> Response:
    info = await _cluster_ledgers(node).close(
        ledger_id, password=ledger_password(x_ledger_password), forwarded=True)
    return json_response(Ledger.from_info(info), 200)


@router.post("/{ledger_id}/forward/fence")
async def forward_fence(ledger_id: LedgerId, node: NodeDep,
                        x_ledger_password: PasswordHeader = None) -> Response:
    info = await _cluster_ledgers(node).fence(
        ledger_id, password=ledger_password(x_ledger_password), forwarded=True)
    return json_response(Ledger.from_info(info), 200)


@router.delete("/{ledger_id}/forward/delete")
async def forward_delete(ledger_id: LedgerId, node: NodeDep,
                         x_ledger_password: PasswordHeader = None) -> Response:
    await _cluster_ledgers(node).delete(
        ledger_id, password=ledger_password(x_ledger_password), forwarded=True)
    return Response(status_code=204)


@router.post("/{ledger_id}/forward/close-idle")
async def forward_close_idle(ledger_id: LedgerId, node: NodeDep,
                             revision: Annotated[int, Query(ge=0, le=2**63 - 1)]) -> Response:
    """The auditor asks the writer to close an idle ledger whose last ensemble names a
    gone bookie, if its metadata is still at ``revision`` (docs/cluster.md §9)."""
    closed = await _cluster_ledgers(node).writers.close_idle(ledger_id, revision,
                                                             forwarded=True)
    return _json(200, closed=closed)


@router.get("/{ledger_id}/forward/ledger")
async def forward_ledger(ledger_id: LedgerId, node: NodeDep) -> Response:
    """The writer's view of its ledger (state, LAC, length) for a non-writer (§8)."""
    info = await _cluster_ledgers(node).get(ledger_id, forwarded=True)
    return json_response(Ledger.from_info(info), 200)


# --- the cluster's password key ---------------------------------------------------


@key_router.get(PASSWORD_KEY_PATH)
async def password_key(node: NodeDep) -> Response:
    """The cluster's password key, for a member that has none (node/_cluster_password_key.py):
    the cluster token already opens every other route, so it guards this one too.
    503 until this node agreed its key."""
    if node.cluster is None:
        raise NotConfigured("this node is not in cluster mode")
    response = _json(200, key=node.cluster.password_key.hex())
    response.headers["Cache-Control"] = "no-store"
    return response
