"""The ledgerd engine: ledgers and entries without HTTP.

Public surface (everything else is private to the package):

- :class:`Bookie` — create/add/read/fence/close/delete/list ledgers, checkpoint,
  statistics.  Calls whose effect must be durable return a :class:`Pending`,
  resolved by the journal's acker thread once the journal has synced them.
- Settings: :class:`EngineSettings` with :class:`WriteCacheSettings`,
  :class:`ReadCacheSettings`, :class:`LedgerLimits` (the journal's and the entry
  logs' own come from ``journal`` and ``entrylog``); :func:`add_record_bytes` is
  the journal size of a batch (what the batch limits must fit).
- Values: :class:`LedgerInfo`, :class:`LedgerFilter`, :class:`Entry`, :class:`Batch`,
  :class:`BatchAddResult`, :class:`LedgerState`, :class:`OffloadInfo`,
  :class:`OffloadState`, :class:`TierPosition`, :class:`BookieStatistics`,
  :class:`ReplayReport`.
- Cluster mode: :class:`Replicas` (``Bookie.replicas``: this engine as a bookie
  holding replicas of other writers' ledgers, docs/cluster.md §12.1) with
  :class:`ReplicaEntry`, :class:`StoredReplicaEntry`, :class:`ReplicaState`;
  :class:`PasswordHash` and :class:`PasswordVerifier` (the node checks a
  replicated ledger's password against its metadata); :func:`kdf_runs` counts
  the scrypt hashes this process ran; :func:`read_key_file`,
  :func:`create_key_file` and :func:`password_key_id` keep the cluster's shared
  password key as the node's own is kept.
- Seams for the services beside the engine: :class:`RemoteEntryReader` (offload/
  reads of ledgers whose local copy is gone), :class:`Relocations` and
  :class:`Relocation` (compaction/ moving entries between entry logs), and
  :class:`CheckpointStep` / ``CheckpointHook`` (tests stop a checkpoint between
  its steps); :data:`ReadHook` (tests run a racing GC inside a read).

Storage layout under ``data_dir``::

    journal.dev                 the journal (when no block device is configured)
    entrylogs/{id:016x}.log     entry logs (see entrylog/)
    index/                      RocksDB: locations, ledgers, replicas, checkpoint mark
    password.key                the key of ledger password digests (0600; see _node_key.py)
    cluster-password.key        cluster mode: the cluster's shared key of them (the same kind)

Invariants:

1. An entry is readable only once acknowledged: reads stop at the LAC, and the
   LAC advances only on the journal's acker thread, after the fdatasync that
   covers the entry.
2. Entry ids are dense from 0; replay keeps only the dense prefix per ledger.
   Replicas (cluster mode) hold the writers' ids, dense or not, under their own
   storage ids (``ledger_id | 2^63``), and replay applies their records as they
   are.
3. The index never points at entry-log bytes that were not fsynced first.
4. The journal is trimmed only to a position whose every record is reflected in
   a committed index batch (the checkpoint mark).
5. Ledger ids are never reused (``next_ledger_id`` is persisted with each
   checkpoint and advanced by replayed CREATE records).
6. Every state change has one code path, live or replayed: the ledger table's
   ``apply`` (metadata events) and the appender's ``stage`` plus the table's
   ``apply_add`` (entries).
"""

from __future__ import annotations

from ._bookie import Bookie as Bookie
from ._checkpoint import CheckpointHook as CheckpointHook
from ._checkpoint import CheckpointResult as CheckpointResult
from ._checkpoint import CheckpointStep as CheckpointStep
from ._events import add_record_bytes as add_record_bytes
from ._model import Batch as Batch
from ._model import BatchAddResult as BatchAddResult
from ._model import Entry as Entry
from ._model import LedgerFilter as LedgerFilter
from ._model import LedgerInfo as LedgerInfo
from ._model import LedgerState as LedgerState
from ._model import OffloadInfo as OffloadInfo
from ._model import OffloadState as OffloadState
from ._model import Pending as Pending
from ._model import ReadHook as ReadHook
from ._model import RemoteEntryReader as RemoteEntryReader
from ._model import TierPosition as TierPosition
from ._node_key import create_key_file as create_key_file
from ._node_key import read_key_file as read_key_file
from ._password import KEY_SIZE_BYTES as KEY_SIZE_BYTES
from ._password import PasswordHash as PasswordHash
from ._password import PasswordScheme as PasswordScheme
from ._password import PasswordVerifier as PasswordVerifier
from ._password import kdf_runs as kdf_runs
from ._password import password_key_id as password_key_id
from ._relocations import Relocation as Relocation
from ._relocations import Relocations as Relocations
from ._replay import ReplayReport as ReplayReport
from ._replicas import ReplicaEntry as ReplicaEntry
from ._replicas import Replicas as Replicas
from ._replicas import ReplicaState as ReplicaState
from ._replicas import StoredReplicaEntry as StoredReplicaEntry
from ._settings import EngineSettings as EngineSettings
from ._settings import LedgerLimits as LedgerLimits
from ._settings import ReadCacheSettings as ReadCacheSettings
from ._settings import WriteCacheSettings as WriteCacheSettings
from ._statistics import BookieStatistics as BookieStatistics
from ._table import ChangedIds as ChangedIds

__all__ = [
    "KEY_SIZE_BYTES",
    "Batch",
    "BatchAddResult",
    "Bookie",
    "BookieStatistics",
    "ChangedIds",
    "CheckpointHook",
    "CheckpointResult",
    "CheckpointStep",
    "EngineSettings",
    "Entry",
    "LedgerFilter",
    "LedgerInfo",
    "LedgerLimits",
    "LedgerState",
    "OffloadInfo",
    "OffloadState",
    "PasswordHash",
    "PasswordScheme",
    "PasswordVerifier",
    "Pending",
    "ReadCacheSettings",
    "ReadHook",
    "Relocation",
    "Relocations",
    "RemoteEntryReader",
    "ReplayReport",
    "ReplicaEntry",
    "ReplicaState",
    "Replicas",
    "StoredReplicaEntry",
    "TierPosition",
    "WriteCacheSettings",
    "add_record_bytes",
    "create_key_file",
    "kdf_runs",
    "password_key_id",
    "read_key_file",
]
