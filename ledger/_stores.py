"""The engine's three stores under ``data_dir``, opened together: the RocksDB
index, the entry logs and the journal (the package docstring draws the layout),
and the password key beside them, read (or made) under the index's lock so two
openers cannot make two.  If the key, the entry logs or the journal fail to
open, the index opened before them is closed, so the failed open does not keep
holding its RocksDB lock."""

from __future__ import annotations

from common.errors import DeviceBroken
from common.files import make_directory
from entrylog import EntryLogStore
from journal import Journal

from ._index import LocationIndex
from ._node_key import NodeKey, load_node_key
from ._settings import EngineSettings


def open_stores(settings: EngineSettings,
                ) -> tuple[LocationIndex, EntryLogStore, Journal, NodeKey]:
    try:
        make_directory(settings.data_dir)
    except OSError as exc:
        raise DeviceBroken(f"cannot create the data directory: {exc}") from exc
    index = LocationIndex(settings.index_path, memory_bytes=settings.index_memory_bytes)
    try:
        password_key = load_node_key(settings.data_dir)
        return (index, EntryLogStore(settings.entry_log), Journal.open(settings.journal),
                password_key)
    except BaseException:
        index.close()
        raise
