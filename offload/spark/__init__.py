"""Spark access to offloaded ledgers (PySpark ≥ 4.1 Python Data Source API).

Public surface:

- :class:`LedgerdDataSource` — ``spark.dataSource.register(LedgerdDataSource)``,
  then ``spark.read.format("ledgerd").option("bucket", ...).load()``; schema
  ``ledger_id long, entry_id long, payload binary, crc32c long``.
- :class:`LedgerdReader`, :class:`LedgerdPartition` — what Spark plans with
  (tests and tools inspect the planned byte ranges through them).
- Corruption: a frame failing its CRC32C or framing check fails the task with
  ``common.errors.CorruptRecord`` naming the object key, the offset, the
  ledger and the entry (:func:`segment_corrupt` builds it).
- Live ledgers through the nodes (option ``url``): ``spark.read`` plans
  :class:`LiveReader` (ranges by ledger, and by fragment in a cluster) and
  ``spark.readStream`` :class:`LedgerdStreamReader` (offset: per ledger, the
  next entry id); :func:`parse_live_options`, :class:`LiveOptions`,
  :class:`NodeClient` (the nodes' HTTP API as they use it).
- :func:`parse_options`, :class:`ReadOptions`, :func:`discover`,
  :class:`OffloadedLedger` — option parsing and segment discovery, shared with
  :mod:`offload.spark.jobs`.

Invariants:

1. Every byte range starts at a frame whose entry id the index gives, and ends
   at a frame start or the segment's end (ranges are cut at index points).
2. ``read`` depends only on its partition and on options fixed at ``load()``;
   filters change only which partitions are planned (see ``_source``).
3. Every payload's CRC32C is checked before its row is produced, from S3 or
   from a node alike.
4. A live read (batch or micro-batch) reads entries at or below the
   last-add-confirmed it planned with: immutable, so a replay reads the same rows.
"""

from __future__ import annotations

from ._catalog import OffloadedLedger as OffloadedLedger
from ._catalog import Segment as Segment
from ._catalog import discover as discover
from ._catalog import survey_offloaded as survey_offloaded
from ._client import store_for as store_for
from ._live import LivePartition as LivePartition
from ._live import LiveRange as LiveRange
from ._live import LiveReader as LiveReader
from ._live_options import LiveOptions as LiveOptions
from ._live_options import parse_live_options as parse_live_options
from ._node import LedgerView as LedgerView
from ._node import NodeClient as NodeClient
from ._options import Connection as Connection
from ._options import LedgerSelection as LedgerSelection
from ._options import ReadOptions as ReadOptions
from ._options import parse_options as parse_options
from ._plan import PlannedRange as PlannedRange
from ._plan import Span as Span
from ._plan import cut as cut
from ._read import ARROW_SCHEMA as ARROW_SCHEMA
from ._read import BATCH_PAYLOAD_BYTES as BATCH_PAYLOAD_BYTES
from ._read import SCHEMA_DDL as SCHEMA_DDL
from ._read import frames_of as frames_of
from ._read import read_range as read_range
from ._read import segment_corrupt as segment_corrupt
from ._source import LedgerdDataSource as LedgerdDataSource
from ._source import LedgerdPartition as LedgerdPartition
from ._source import LedgerdReader as LedgerdReader
from ._source import spark_replays_pushed_plans as spark_replays_pushed_plans
from ._stream import LedgerdStreamReader as LedgerdStreamReader
