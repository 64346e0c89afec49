"""``GET /api/v1/cluster``: the nodes of a cluster, its auditor and its
under-replicated ledgers (DESIGN §10 Precisions); ``GET
/api/v1/cluster/ledgers/{id}``: a ledger's fragments.  409 on a standalone server."""

from __future__ import annotations

from fastapi import APIRouter

from common.errors import NotConfigured
from node import ClusterNode, Node

from .deps import LedgerId, NodeDep
from .models import ClusterView, LedgerPlacement
from .openapi_docs import CLUSTER_UNAVAILABLE, NO_LEDGER, NOT_CLUSTER, problems

router = APIRouter(prefix="/api/v1", tags=["cluster"])


@router.get("/cluster", response_model=ClusterView, operation_id="get_cluster",
            responses=problems(NOT_CLUSTER, CLUSTER_UNAVAILABLE))
async def get_cluster(node: NodeDep) -> ClusterView:
    """Every registered node (state, disk usage) and every ledger being brought
    back to its write quorum, with its progress."""
    return ClusterView.model_validate(await _cluster_of(node).describe())


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
