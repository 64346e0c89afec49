"""``GET /api/v1/cluster``: the nodes of a cluster and its under-replicated ledgers
(DESIGN §10 Precisions); 409 on a standalone server."""

from __future__ import annotations

from fastapi import APIRouter

from common.errors import NotConfigured

from .deps import NodeDep
from .models import ClusterView
from .openapi_docs import CLUSTER_UNAVAILABLE, NOT_CLUSTER, problems

router = APIRouter(prefix="/api/v1", tags=["cluster"])


@router.get("/cluster", response_model=ClusterView, operation_id="get_cluster",
            responses=problems(NOT_CLUSTER, CLUSTER_UNAVAILABLE))
async def get_cluster(node: NodeDep) -> ClusterView:
    """Every registered node (state, disk usage) and every ledger being brought
    back to its write quorum, with its progress."""
    if node.cluster is None:
        raise NotConfigured("this server is not in cluster mode (METADATA_URL is not set)")
    return ClusterView.model_validate(await node.cluster.describe())
