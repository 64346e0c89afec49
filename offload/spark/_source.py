"""``LedgerdDataSource``: offloaded ledgers as a Spark table (PySpark ≥ 4.1).

Planning runs in a Python worker on the driver: ``pushFilters`` (when Spark
has filters to offer) and ``partitions`` (discovery and byte ranges).  Spark
pickles the reader and each partition and runs ``read`` on executors.

Replay safety.  Spark 4.2 and 4.3 cache the *whole* pushed plan (the pickled
reader and its partitions) on the relation of a DataFrame, and reuse it for
any later query on that DataFrame or temp view that has no filter Spark can
push (an unfiltered query, an OR): the cached partitions are replayed without
calling Python again.  No discipline inside the reader can repair a replayed
pruned plan, so with ``pushdown=auto`` (the default) filters are pushed only
on Spark versions without that cache; elsewhere every filter goes back to
Spark and the plan never depends on a query's filters.  ``pushdown=always``
prunes anyway (for DataFrames used by one query, as the export and verify
jobs do); the ``ledgers`` option prunes safely everywhere because it belongs
to the DataFrame, not to a query.  Either way ``read`` depends only on its
partition and on options fixed at load time, never on ``pushFilters``.
"""

from __future__ import annotations

import gc
import logging
import sys
from collections.abc import Iterator, Sequence

import pyarrow as pa
import pyspark
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    Filter,
    InputPartition,
)
from pyspark.sql.types import StructType

from common.errors import InvalidSetting

from ._catalog import discover
from ._client import store_for
from ._live import LiveReader
from ._live_options import is_live, parse_live_options
from ._options import ReadOptions, parse_options
from ._plan import UNBOUNDED, Bounds, PlannedRange, bounds_from_filters, grouped, plan_segment
from ._read import SCHEMA_DDL, read_group
from ._stream import LedgerdStreamReader

log = logging.getLogger("ledgerd.offload.spark")

# The first Spark version whose Python data sources cache the pushed plan on
# the relation (see the module docstring); tests/spark has a canary that fails
# once a release stops doing so, so this can be bounded then.
_REPLAYING_SPARK = (4, 2)


_long_lived_frozen = False


def _in_pyspark_worker() -> bool:
    """Whether this process is one of PySpark's Python workers (``python -m pyspark.daemon``
    and the forks it serves tasks from, or ``-m pyspark.worker`` and friends)."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return spec is not None and str(spec.name).startswith("pyspark.")


def freeze_long_lived_objects() -> None:
    """In a PySpark worker, move everything alive now (modules, the boto3 client)
    out of the cyclic GC's reach, once per process.

    PySpark's worker daemon runs ``gc.collect()`` after every task, in executor
    and planner workers alike.  With pyarrow, pyspark and botocore's S3 model
    loaded, a full collection walks about 100 000 objects: 45-55 ms of CPU per
    task here, as much as reading and checking 30 MiB of frames.  Frozen objects
    are still freed by reference counting; only cycles among them would stay,
    and they are module-level state that lives as long as the worker anyway.
    A driver (a user's process, a test) is never frozen: its objects are not ours.
    """
    global _long_lived_frozen
    if not _long_lived_frozen and _in_pyspark_worker():
        _long_lived_frozen = True
        gc.freeze()


def spark_replays_pushed_plans(version: str = pyspark.__version__) -> bool:
    major, minor = (int(part) for part in version.split(".")[:2])
    return (major, minor) >= _REPLAYING_SPARK


class LedgerdPartition(InputPartition):
    """One Spark partition: a byte range of one segment object and its reads,
    or (packed ledgers) consecutive ranges of one pack, ``group``."""

    def __init__(self, planned: PlannedRange, group: tuple[PlannedRange, ...] = ()) -> None:
        super().__init__(planned)
        self.planned = planned
        self.group = group or (planned,)


class LedgerdReader(DataSourceReader):
    def __init__(self, options: ReadOptions) -> None:
        self._options = options
        # Set by pushFilters and read by partitions() of the same planning call
        # only; read() never looks at it (it may run on a replayed plan).
        self._bounds: Bounds = UNBOUNDED

    def pushes_filters(self) -> bool:
        mode = self._options.pushdown
        return mode == "always" or (mode == "auto" and not spark_replays_pushed_plans())

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        if not self.pushes_filters():
            yield from filters
            return
        bounds, unsupported = bounds_from_filters(filters)
        self._bounds = bounds
        log.info("filters pushed", extra={"ledger_id": repr(bounds.ledger_id),
                                          "entry_id": repr(bounds.entry_id),
                                          "returned_to_spark": len(unsupported)})
        yield from unsupported

    def partitions(self) -> Sequence[InputPartition]:
        options = self._options
        store = store_for(options.connection)
        freeze_long_lived_objects()
        planned = [part
                   for ledger in discover(store, options)
                   for segment in ledger.segments
                   for part in plan_segment(ledger.ledger_id, segment.key, segment.index,
                                            self._bounds,
                                            partition_size_bytes=options.partition_size_bytes,
                                            read_size_bytes=options.read_size_bytes,
                                            chunks=segment.chunks, base=segment.base,
                                            packed=segment.packed)]
        groups = grouped(planned, options.partition_size_bytes)
        log.info("scan planned", extra={"partitions": len(groups),
                                        "bytes": sum(p.size_bytes for p in planned)})
        return [LedgerdPartition(group[0], tuple(group)) for group in groups]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, LedgerdPartition):
            # Spark substitutes InputPartition(None) when we planned nothing.
            return iter(())
        store = store_for(self._options.connection)
        freeze_long_lived_objects()
        return read_group(store, list(partition.group))


class LedgerdDataSource(DataSource):
    """``spark.read.format("ledgerd")``: offloaded ledgers from S3 (``bucket``) or
    live ledgers through the nodes (``url``); ``spark.readStream.format("ledgerd")``:
    new entries of live ledgers.  See docs/spark.md for the options."""

    @classmethod
    def name(cls) -> str:
        return "ledgerd"

    def schema(self) -> str:
        # Fail at load(), not in the middle of a job.
        if is_live(self.options):
            parse_live_options(self.options)
        else:
            parse_options(self.options)
        return SCHEMA_DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        if is_live(self.options):
            freeze_long_lived_objects()
            return LiveReader(parse_live_options(self.options))
        return LedgerdReader(parse_options(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        if not is_live(self.options):
            raise InvalidSetting("invalid option url: a stream reads live ledgers through "
                                 "the nodes; give one or more node URLs")
        return LedgerdStreamReader(parse_live_options(self.options))
