"""A Jepsen-style partition suite for cluster mode (docs/partitions.md).

- :mod:`.lab` — network namespaces on a bridge, silent cuts, slow and flapping links;
- :mod:`.processes` — etcd and the nodes inside them, nodes under libfaketime;
- :mod:`.nemesis` — the seeded fault schedule;
- :mod:`.workload` — clients and their recorded history;
- :mod:`.checker` — the properties checked over a history;
- :mod:`.run` — one seeded run and its report.

``python -m tools.partitions --seeds 1-3 --duration 120 --nodes 5`` (``make
partitions``) runs several.  Needs root, ``ip``, ``nft``, ``tc``, libfaketime and etcd
(``scripts/install-partition.sh``, ``scripts/install-etcd.sh``).
"""

from .checker import PROPERTIES, check
from .run import RunConfig, requirements, run

__all__ = ["PROPERTIES", "RunConfig", "check", "requirements", "run"]
