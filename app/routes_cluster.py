"""``GET /api/v1/cluster``: the nodes of a cluster, its auditor and its
under-replicated ledgers (DESIGN §10 Precisions); ``GET
/api/v1/cluster/ledgers/{id}``: a ledger's fragments.  409 on a standalone server."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from common.errors import NotConfigured
from node import ClusterNode, Node

from .deps import AdminDep, LedgerId, NodeDep
from .models import ClusterView, Decommissioned, LedgerPlacement
from .openapi_docs import (
    BOOKIE_REGISTERED,
    CLUSTER_UNAVAILABLE,
    NO_ADMIN_TOKEN,
    NO_LEDGER,
    NOT_CLUSTER,
    problems,
)

BookieId = Annotated[str, Path(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$",
                               description="a BOOKIE_ID")]

router = APIRouter(prefix="/api/v1", tags=["cluster"])


@router.get("/cluster", response_model=ClusterView, operation_id="get_cluster",
            responses=problems(NOT_CLUSTER, CLUSTER_UNAVAILABLE))
async def get_cluster(node: NodeDep) -> ClusterView:
    """Every registered node (state, disk usage) and every ledger being brought
    back to its write quorum, with its progress."""
    return ClusterView.model_validate(await _cluster_of(node).describe())


@router.post("/cluster/bookies/{bookie_id}/decommission", response_model=Decommissioned,
             operation_id="decommission_bookie", dependencies=[AdminDep],
             responses=problems(NOT_CLUSTER, CLUSTER_UNAVAILABLE, NO_ADMIN_TOKEN,
                                BOOKIE_REGISTERED))
async def decommission_bookie(bookie_id: BookieId, node: NodeDep) -> Decommissioned:
    """Take a bookie whose disk is lost out of the cluster for good: its replicas
    are re-replicated at once and its id is never accepted again (409 while it is
    registered: stop it first).  A node refused at start for a wiped data
    directory (its cookie) rejoins this way, under a new BOOKIE_ID."""
    await _cluster_of(node).decommission(bookie_id)
    return Decommissioned(bookie_id=bookie_id)


@router.get("/cluster/ledgers/{ledger_id}", response_model=LedgerPlacement,
            operation_id="get_ledger_placement",
            responses=problems(NO_LEDGER, NOT_CLUSTER, CLUSTER_UNAVAILABLE))
async def get_ledger_placement(ledger_id: LedgerId, node: NodeDep) -> LedgerPlacement:
    """The ledger's quorums, writer and fragments (first entry, bookies, epoch)."""
    return LedgerPlacement.model_validate(await _cluster_of(node).placement(ledger_id))


def _cluster_of(node: Node) -> ClusterNode:
    if node.cluster is None:
        raise NotConfigured("this server is not in cluster mode (METADATA_URL is not set)")
    return node.cluster
