"""Cluster mode: ledgers replicated across ledgerd nodes, coordinated by etcd.

The protocol is written down in ``docs/cluster.md`` (roles, etcd keys, messages,
writer, ensemble change, recovery, re-replication, numbered invariants).  This
package holds it as sans-I/O state machines — no sockets, threads or real clock
inside — driven by the node's asyncio tasks in production and by the seeded
simulation in ``tests/cluster/simulation.py``:

- metadata: ``LedgerMetadata`` (+ JSON codec with a format version), ``Fragment``,
  ``write_set`` (striping), ``covers`` (ack-quorum coverage);
- ``LedgerWriter``: adds, per-entry quorums, LAC, ensemble change, close;
- ``LedgerRecovery``: takeover by epoch, fencing, recovery reads, write-back,
  resume or close;
- ``ReplicaRules``: what a bookie enforces for each request (the engine's part);
- ``plan_rereplication`` / ``LedgerRereplicator``: the auditor's repairs;
- seams for drivers: ``Clock``, ``Membership``, ``MetadataStore``, ``BookieClient``;
- ``Driver``: one machine run on an asyncio event loop through those seams
  (``RoutingBookieClient``: a node's own bookie directly, the others over HTTP),
  ``TickSet``: the drivers a node's tick loop visits;
- ``Etcd``: what cluster mode asks of etcd, two ways — ``EtcdClient`` (etcd's
  v3 JSON gateway, on the nodes' own HTTP/1.1 connections) and ``InProcessEtcd``
  (the same contract in one process, its clients reached through an
  ``EtcdLink``); ``ClusterKeys``, ``EtcdMetadataStore``;
- ``HttpBookieClient`` (``BookieClient`` over the node's ``/internal/v1/``
  routes, https:// peers verified against ``peer_ssl_context``) and the wire
  codec those routes share (``encode_batch``, …);
- ``ClusterSettings``: the knobs of cluster mode.

It imports only the standard library, ``common`` and third-party libraries.
"""

from ._driver import Driver as Driver
from ._driver import DriverContext as DriverContext
from ._driver import Machine as Machine
from ._driver import RoutingBookieClient as RoutingBookieClient
from ._driver import TickSet as TickSet
from ._effects import AddDone as AddDone
from ._effects import AddFailed as AddFailed
from ._effects import BookieClient as BookieClient
from ._effects import Clock as Clock
from ._effects import Current as Current
from ._effects import Effect as Effect
from ._effects import LedgerClosedDone as LedgerClosedDone
from ._effects import Membership as Membership
from ._effects import MetadataResult as MetadataResult
from ._effects import MetadataStore as MetadataStore
from ._effects import RepairDone as RepairDone
from ._effects import Resumed as Resumed
from ._effects import Send as Send
from ._effects import Stopped as Stopped
from ._effects import WriteMetadata as WriteMetadata
from ._effects import Written as Written
from ._etcd import Compare as Compare
from ._etcd import Delete as Delete
from ._etcd import Etcd as Etcd
from ._etcd import EtcdClient as EtcdClient
from ._etcd import Get as Get
from ._etcd import KeyValue as KeyValue
from ._etcd import Put as Put
from ._etcd import TxnResult as TxnResult
from ._etcd import WatchEvent as WatchEvent
from ._etcd import parse_metadata_url as parse_metadata_url
from ._etcd_inprocess import EtcdLink as EtcdLink
from ._etcd_inprocess import InProcessEtcd as InProcessEtcd
from ._etcd_inprocess import InProcessEtcdClient as InProcessEtcdClient
from ._http import HttpPool as HttpPool
from ._http import HttpResponse as HttpResponse
from ._http import peer_ssl_context as peer_ssl_context
from ._http_client import HttpBookieClient as HttpBookieClient
from ._messages import AddEntries as AddEntries
from ._messages import AddsOk as AddsOk
from ._messages import BookieReply as BookieReply
from ._messages import BookieRequest as BookieRequest
from ._messages import CopiesOk as CopiesOk
from ._messages import CopyEntries as CopyEntries
from ._messages import CopyEntry as CopyEntry
from ._messages import CopyOk as CopyOk
from ._messages import Deleted as Deleted
from ._messages import DeleteReplica as DeleteReplica
from ._messages import EntriesHeld as EntriesHeld
from ._messages import EntriesRead as EntriesRead
from ._messages import EntryFound as EntryFound
from ._messages import Fence as Fence
from ._messages import Fenced as Fenced
from ._messages import FenceOk as FenceOk
from ._messages import LacIs as LacIs
from ._messages import ListEntries as ListEntries
from ._messages import NewEntry as NewEntry
from ._messages import NoEntry as NoEntry
from ._messages import ReadEntries as ReadEntries
from ._messages import ReadEntry as ReadEntry
from ._messages import ReadLac as ReadLac
from ._messages import RecoveryRead as RecoveryRead
from ._messages import Unavailable as Unavailable
from ._messages import WriteLac as WriteLac
from ._metadata import FORMAT_VERSION as FORMAT_VERSION
from ._metadata import PASSWORD_SCHEME_KEYED as PASSWORD_SCHEME_KEYED
from ._metadata import PASSWORD_SCHEME_SCRYPT as PASSWORD_SCHEME_SCRYPT
from ._metadata import Fragment as Fragment
from ._metadata import LedgerMetadata as LedgerMetadata
from ._metadata import LedgerState as LedgerState
from ._metadata import WriterRef as WriterRef
from ._metadata import covers as covers
from ._metadata import decode_metadata as decode_metadata
from ._metadata import encode_metadata as encode_metadata
from ._metadata import with_shared_parts as with_shared_parts
from ._metadata import write_set as write_set
from ._packed import pack_metadata as pack_metadata
from ._packed import packed_notes_offload as packed_notes_offload
from ._packed import packed_revision as packed_revision
from ._packed import packed_state as packed_state
from ._packed import unpack_metadata as unpack_metadata
from ._packed import unpack_recent as unpack_recent
from ._reads import LacQuorum as LacQuorum
from ._reads import counts_as_replica as counts_as_replica
from ._reads import read_candidates as read_candidates
from ._recovery import LedgerRecovery as LedgerRecovery
from ._recovery import RecoveryRules as RecoveryRules
from ._replica import Replica as Replica
from ._replica import ReplicaRules as ReplicaRules
from ._replica import StoredEntry as StoredEntry
from ._rereplication import COPY_BATCH_BYTES_MAX as COPY_BATCH_BYTES_MAX
from ._rereplication import COPY_BATCH_ENTRIES_MAX as COPY_BATCH_ENTRIES_MAX
from ._rereplication import Copy as Copy
from ._rereplication import LedgerRereplicator as LedgerRereplicator
from ._rereplication import RepairPlan as RepairPlan
from ._rereplication import apply_replacements as apply_replacements
from ._rereplication import plan_rereplication as plan_rereplication
from ._rereplication import settled_ranges as settled_ranges
from ._settings import ClusterSettings as ClusterSettings
from ._store import ClusterKeys as ClusterKeys
from ._store import EtcdMetadataStore as EtcdMetadataStore
from ._wire import BATCH_MEDIA_TYPE as BATCH_MEDIA_TYPE
from ._wire import ENTRY_FRAME_HEADER_SIZE_BYTES as ENTRY_FRAME_HEADER_SIZE_BYTES
from ._wire import FORWARDED_HEADER as FORWARDED_HEADER
from ._wire import INTERNAL_PREFIX as INTERNAL_PREFIX
from ._wire import PASSWORD_KEY_PATH as PASSWORD_KEY_PATH
from ._wire import EntryFrame as EntryFrame
from ._wire import batch_runs as batch_runs
from ._wire import decode_batch as decode_batch
from ._wire import decode_entry_frames as decode_entry_frames
from ._wire import encode_batch as encode_batch
from ._wire import encode_entry_frames as encode_entry_frames
from ._wire import forward_path as forward_path
from ._wire import replica_path as replica_path
from ._writer import AddOutcome as AddOutcome
from ._writer import IdleWriter as IdleWriter
from ._writer import LedgerWriter as LedgerWriter
from ._writer import WriterRules as WriterRules
from ._writer import claim as claim
