"""The node: one object that owns a running ledgerd service.

Public surface:

- :class:`Node` — ``Node.open(settings)`` opens the bookie and starts the offload
  service, the garbage collector and the disk watcher; ``close()`` stops them and
  closes the bookie.  ``node.ledgers`` is what routes (or an embedding program)
  call: the engine's operations as coroutines, with the node's policies (close →
  offload, delete → S3 deletion).  ``node.gc``, ``node.offload``, ``node.disk`` and the
  admin views serve the admin API.
- :class:`NodeSettings`, :class:`DiskWatchSettings`.
- :func:`blocking`: run a blocking call on a worker thread from the event loop.

Imports point down: ``node`` uses ``ledger``, ``compaction`` and ``offload``;
only ``app`` (HTTP) and ``cli`` use ``node``.
"""

from ._bridge import blocking as blocking
from ._disk import DiskWatcher as DiskWatcher
from ._ledgers import Ledgers as Ledgers
from ._node import Node as Node
from ._replica_server import LocalBookieClient as LocalBookieClient
from ._replica_server import ReplicaServer as ReplicaServer
from ._settings import DiskWatchSettings as DiskWatchSettings
from ._settings import NodeSettings as NodeSettings

__all__ = ["DiskWatchSettings", "DiskWatcher", "Ledgers", "LocalBookieClient", "Node",
           "NodeSettings", "ReplicaServer", "blocking"]
