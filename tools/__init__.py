"""Tools for tests, benchmarks and the quick start; never imported by the service.

- :mod:`tools.local_s3` — a one-node Ceph (radosgw) S3 server on loopback;
- :mod:`tools.local_etcd` — a one-member etcd on loopback (cluster mode);
- :mod:`tools.local_pki` — a CA and a server certificate made with ``openssl`` (TLS);
- :mod:`tools.local_server` — ``ledgerd serve`` as a child process (start, SIGKILL,
  restart), for live-server tests and benchmarks;
- :mod:`tools.local_cluster` — several such nodes in cluster mode on one etcd
  (``LiveCluster``): the cluster tests, benchmarks and ``make cluster``;
- :mod:`tools.partitions` — the partition suite for cluster mode: nodes and etcd in
  network namespaces, a seeded nemesis, a recorded history and its checker
  (docs/partitions.md);
- :mod:`tools.powercut` — a FUSE file system that simulates power loss (drops
  what was not fsynced), for the power-loss tests (docs/powerloss.md);
- :mod:`tools.add_path` — which source files one add runs through, standalone and
  on each node of a cluster (docs/architecture.md, "Write path").

The service's packages (``common``, ``journal``, ``entrylog``, ``ledger``,
``compaction``, ``offload``, ``app``…) never import this package, and it never
imports ``bench`` or ``tests``: they import it (``tests/test_layers.py``).
"""
