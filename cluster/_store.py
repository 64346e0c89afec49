"""The etcd key layout of a cluster scope and the ledger metadata store on it
(docs/cluster.md §2.2).  Every update of a ledger's key is a compare-and-swap on
its ``mod_revision``."""

from __future__ import annotations

from collections.abc import AsyncIterator

from ._effects import Current, Written
from ._etcd import EtcdClient
from ._metadata import LedgerMetadata, decode_metadata, encode_metadata


class ClusterKeys:
    """Keys of one scope; ids zero-padded so ranges list ledgers in id order."""

    def __init__(self, scope: str) -> None:
        self.root = "/" + scope.strip("/")

    def _key(self, *parts: str) -> bytes:
        return "/".join((self.root, *parts)).encode()

    @property
    def bookies_prefix(self) -> bytes:
        return self._key("bookies", "")

    def bookie(self, bookie_id: str) -> bytes:
        return self._key("bookies", bookie_id)

    @property
    def ledgers_prefix(self) -> bytes:
        return self._key("ledgers", "")

    def ledger(self, ledger_id: int) -> bytes:
        return self._key("ledgers", f"{ledger_id:020d}")

    @property
    def ledger_ids(self) -> bytes:
        return self._key("ids", "ledger")

    @property
    def auditor(self) -> bytes:
        return self._key("auditor")

    def offload_lock(self, ledger_id: int) -> bytes:
        return self._key("offload-locks", f"{ledger_id:020d}")

    def cookie(self, bookie_id: str) -> bytes:
        return self._key("cookies", bookie_id)

    @property
    def decommissioned_prefix(self) -> bytes:
        return self._key("decommissioned", "")

    def decommissioned(self, bookie_id: str) -> bytes:
        return self._key("decommissioned", bookie_id)

    @property
    def password_key(self) -> bytes:
        """The id of the cluster's password key (never the key: node/_cluster_password_key.py)."""
        return self._key("password-key")

    def rereplication(self, ledger_id: int) -> bytes:
        return self._key("rereplication", f"{ledger_id:020d}")


class EtcdMetadataStore:
    """Ledger metadata in etcd; implements ``cluster.MetadataStore``."""

    def __init__(self, client: EtcdClient, keys: ClusterKeys) -> None:
        self._client = client
        self._keys = keys

    async def allocate_ledger_id(self) -> int:
        return await self._client.next_id(self._keys.ledger_ids)

    async def read(self, ledger_id: int) -> tuple[LedgerMetadata, int] | None:
        key = self._keys.ledger(ledger_id)
        kv = await self._client.get(key)
        if kv is None:
            return None
        return decode_metadata(kv.value, key=key.decode()), kv.mod_revision

    async def create(self, metadata: LedgerMetadata) -> int | None:
        return await self._client.create(self._keys.ledger(metadata.ledger_id),
                                         encode_metadata(metadata))

    async def compare_and_swap(self, metadata: LedgerMetadata, expected_revision: int,
                               ) -> Written | Current:
        key = self._keys.ledger(metadata.ledger_id)
        ok, revision, kv = await self._client.compare_and_swap(
            key, encode_metadata(metadata), expected_revision)
        if ok:
            return Written(revision)
        if kv is None:
            return Current(None, revision)
        return Current(decode_metadata(kv.value, key=key.decode()), kv.mod_revision)

    async def delete(self, ledger_id: int, expected_revision: int) -> bool:
        return await self._client.compare_and_delete(self._keys.ledger(ledger_id),
                                                     expected_revision)

    async def list_ledgers(self, *, after: int | None = None,
                           ) -> AsyncIterator[tuple[LedgerMetadata, int]]:
        start = None if after is None else self._keys.ledger(after)
        async for kv in self._client.range_prefix(self._keys.ledgers_prefix,
                                                  start_after=start):
            yield decode_metadata(kv.value, key=kv.key.decode()), kv.mod_revision
