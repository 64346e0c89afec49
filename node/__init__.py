"""The node: one object that owns a running ledgerd service.

Public surface:

- :class:`Node` — ``Node.open(settings)`` opens the bookie and starts the offload
  service, the garbage collector and the disk watcher; ``close()`` stops them and
  closes the bookie.  ``node.ledgers`` is what routes (or an embedding program)
  call: the engine's operations as coroutines, with the node's policies (close →
  offload, delete → S3 deletion).  ``node.gc``, ``node.offload``, ``node.disk`` and the
  admin views serve the admin API.
- Cluster mode (``METADATA_URL``, docs/cluster.md): :class:`ClusterNode` (built by
  ``Node.open``, started by ``await node.start()`` on the serving event loop) and
  :class:`ClusterLedgers` (``node.ledgers`` then: the same coroutines on
  replicated ledgers); :class:`ReplicaServer` and :class:`LocalBookieClient`
  (this node's engine as a bookie of the protocol); :class:`ClusterMembership`
  and :class:`LocalStatus` (a node's lease and view of the others) and
  :class:`ClusterReads` (the readable end and entry reads), which the seeded
  simulation runs too.
- :class:`NodeSettings`, :class:`DiskWatchSettings`.
- :func:`blocking`: run a blocking call on a worker thread from the event loop.

Imports point down: ``node`` uses ``ledger``, ``compaction`` and ``offload``;
only ``app`` (HTTP) and ``cli`` use ``node``.
"""

from ._bridge import blocking as blocking
from ._cluster import ClusterNode as ClusterNode
from ._cluster_ledgers import ClusterLedgers as ClusterLedgers
from ._cluster_membership import LocalStatus as LocalStatus
from ._cluster_membership import Membership as ClusterMembership
from ._cluster_reads import ClusterReads as ClusterReads
from ._disk import DiskWatcher as DiskWatcher
from ._ledgers import Ledgers as Ledgers
from ._node import Node as Node
from ._replica_server import LocalBookieClient as LocalBookieClient
from ._replica_server import ReplicaServer as ReplicaServer
from ._settings import DiskWatchSettings as DiskWatchSettings
from ._settings import NodeSettings as NodeSettings

# What ``node.ledgers`` is: standalone, or backed by replication (cluster mode).
LedgerApi = Ledgers | ClusterLedgers

__all__ = [
           "ClusterLedgers",
           "ClusterMembership",
           "ClusterNode",
           "ClusterReads",
           "DiskWatchSettings",
           "DiskWatcher",
           "LedgerApi",
           "Ledgers",
           "LocalBookieClient",
           "LocalStatus",
           "Node",
           "NodeSettings",
           "ReplicaServer",
           "blocking",
]
