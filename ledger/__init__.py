"""The ledgerd engine: ledgers and entries without HTTP.

Public surface (everything else is private to the package):

- :class:`Bookie` — create/add/read/fence/close/delete/list ledgers, checkpoint,
  statistics.  Adds return ``concurrent.futures.Future`` objects resolved by the
  journal's sync thread once the entry is durable.
- :mod:`common.errors` — the one error tree; :mod:`ledger.settings` — every knob.
- Values: :class:`LedgerInfo`, :class:`Entry`, :class:`AddResult`,
  :class:`BatchAddResult`, :class:`LedgerState`, :class:`OffloadInfo`,
  :class:`OffloadState`, :class:`BookieStatistics`.
- Seams for the services beside the engine: :class:`RemoteEntryReader` (offload/
  reads of ledgers whose local copy is gone) and :class:`Relocation` (compaction/
  moving entries between entry logs).

Storage layout under ``data_dir``::

    journal.dev                 the journal (when no block device is configured)
    entrylogs/{id:016x}.log     entry logs (see entrylog/)
    index/                      RocksDB: locations, ledgers, checkpoint mark

Invariants:

1. An entry is readable only once acknowledged: reads stop at the LAC, and the
   LAC advances only in the journal's sync callback.
2. Entry ids are dense from 0; replay keeps only the dense prefix per ledger.
3. The index never points at entry-log bytes that were not fsynced first.
4. The journal is trimmed only to a position whose every record is reflected in
   a committed index batch (the checkpoint mark).
5. Ledger ids are never reused (``next_ledger_id`` is persisted with each
   checkpoint and advanced by replayed CREATE records).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._model import AddResult as AddResult
from ._model import BatchAddResult as BatchAddResult
from ._model import Entry as Entry
from ._model import LedgerInfo as LedgerInfo
from ._model import LedgerState as LedgerState
from ._model import OffloadInfo as OffloadInfo
from ._model import OffloadState as OffloadState

if TYPE_CHECKING:
    from ._bookie import Bookie as Bookie
    from ._bookie import BookieStatistics as BookieStatistics
    from ._bookie import Relocation as Relocation
    from ._bookie import RemoteEntryReader as RemoteEntryReader
    from ._replay import ReplayReport as ReplayReport

# The bookie imports journal/ and entrylog/, which import common.errors and
# ledger.settings; loading it lazily keeps `import common.errors` free of cycles.
_LAZY = {"Bookie": "._bookie", "BookieStatistics": "._bookie", "Relocation": "._bookie",
         "RemoteEntryReader": "._bookie", "ReplayReport": "._replay"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module 'ledger' has no attribute {name!r}")
