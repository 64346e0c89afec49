"""The cluster's password key: one key, on every node, never in etcd (docs/cluster.md §13.2).

Cluster ledgers' password digests are keyed BLAKE2b (``ledger/_password.py``)
under one key every node holds, so that any node checks any ledger's password
in a microsecond with no per-node cache.  Where it lives:

- each node: ``DATA_DIR/cluster-password.key`` (32 bytes, 0600, made as the
  standalone ``password.key`` is: ``ledger.create_key_file``);
- etcd, which every node reads and which gets backed up: only the key's *id*,
  ``{scope}/password-key`` → ``{"key_id": hex, "made_by": bookie_id}``, a keyed
  BLAKE2b of a fixed message (``ledger.password_key_id``) that says nothing of
  the key;
- between nodes: ``GET /internal/v1/password-key``, behind the cluster token
  (and TLS when configured), answered only by a node that agreed its key.

At every start, after the cookie check and before the node registers (so before
it serves a create or a password check), :func:`agree_password_key` decides:

1. etcd has no id: the local key (made now if the file is absent) is offered
   with a create-if-absent; the winner's key is the cluster's.  A node that
   lost the race with a key it made in this start drops it (no digest was made
   with it) and goes on as below.
2. etcd's id is the local key's: that key.
3. no local key (a new node, or a lost file): fetched from a registered member,
   checked against etcd's id, then stored.  Members are tried in turn, with a
   backoff, until one answers; each wait is logged.
4. a local key with another id, not made in this start: ``IdentityMismatch``
   (the node refuses to start), naming the file and the way on.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from cluster import ClusterKeys, Etcd
from common.errors import FormatMismatch, IdentityMismatch, LedgerdError
from common.files import sync_directory
from ledger import create_key_file, password_key_id, read_key_file

log = logging.getLogger("ledgerd.cluster")

KEY_FILE_NAME = "cluster-password.key"
# Waits between rounds of asking the members for the key: short at first (a
# member may be finishing its own start), then no more often than this.
RETRY_S_MIN = 0.2
RETRY_S_MAX = 5.0

Fetch = Callable[[str], Awaitable[bytes]]


@dataclass(frozen=True, slots=True)
class KeyRecord:
    """What etcd holds of the cluster's password key."""

    key_id: str
    made_by: str

    def encode(self) -> bytes:
        return json.dumps({"key_id": self.key_id, "made_by": self.made_by}).encode()

    @classmethod
    def decode(cls, raw: bytes, *, where: str) -> KeyRecord:
        try:
            doc = json.loads(raw)
            return cls(str(doc["key_id"]), str(doc["made_by"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise FormatMismatch(f"the password key record in etcd at {where} is not one "
                                 f"this release reads: {exc}") from exc


async def agree_password_key(etcd: Etcd, keys: ClusterKeys, *, bookie_id: str,
                             data_dir: Path, fetch: Fetch) -> bytes:
    """The cluster's password key, agreed with etcd (see the module's docstring).
    ``fetch(url)`` asks the member at ``url`` for its key."""
    path = data_dir / KEY_FILE_NAME
    where = keys.password_key.decode()
    local = read_key_file(path)
    made_now = False
    while True:
        kv = await etcd.get(keys.password_key)
        if kv is None:
            if local is None:
                local, made_now = create_key_file(path), True
            record = KeyRecord(password_key_id(local), bookie_id)
            if await etcd.create(keys.password_key, record.encode()) is not None:
                log.info("the cluster's password key is this node's",
                         extra={"key_id": record.key_id, "path": str(path)})
                return local
            continue  # another node's key won the race: read its id
        record = KeyRecord.decode(kv.value, where=where)
        if local is not None:
            local_id = password_key_id(local)
            if local_id == record.key_id:
                return local
            if not made_now:
                raise IdentityMismatch(
                    f"the password key file {path} (key id {local_id}) is not this "
                    f"cluster's (etcd at {where}: key id {record.key_id}, made by "
                    f"{record.made_by}): the data directory was used with another cluster, "
                    "or the file was replaced. Put back this cluster's key (any node's "
                    f"{KEY_FILE_NAME}), or remove the file: the node then fetches the "
                    "cluster's key from another node at its next start")
            # Made by this start and lost the race: nothing was hashed with it.
            path.unlink()
            sync_directory(path.parent)
            local, made_now = None, False
        key = await _fetch_key(etcd, keys, record, bookie_id=bookie_id, fetch=fetch)
        create_key_file(path, key)
        log.info("fetched the cluster's password key",
                 extra={"key_id": record.key_id, "path": str(path)})
        return key


async def _fetch_key(etcd: Etcd, keys: ClusterKeys, record: KeyRecord, *,
                     bookie_id: str, fetch: Fetch) -> bytes:
    """The key whose id is ``record``'s, from the first registered member that gives
    it; asks again, with a backoff, until one does."""
    wait_s = RETRY_S_MIN
    while True:
        members = await _member_urls(etcd, keys, exclude=bookie_id)
        failures: dict[str, str] = {}
        for member, url in members.items():
            try:
                key = await fetch(url)
            except LedgerdError as exc:
                failures[member] = str(exc)
                continue
            if password_key_id(key) == record.key_id:
                return key
            # A member runs with another key only if its check was bypassed: never
            # store what etcd does not vouch for.
            failures[member] = f"it answered a key of id {password_key_id(key)}"
        log.warning("waiting for a member to give the cluster's password key",
                    extra={"waiting_for": "cluster password key", "key_id": record.key_id,
                           "made_by": record.made_by, "members": sorted(members),
                           "failures": failures, "retry_in_s": wait_s})
        await asyncio.sleep(wait_s)
        wait_s = min(wait_s * 2, RETRY_S_MAX)


async def _member_urls(etcd: Etcd, keys: ClusterKeys, *, exclude: str) -> dict[str, str]:
    """The advertised URL of every registered bookie but ``exclude``."""
    kvs, _revision = await etcd.get_prefix(keys.bookies_prefix)
    urls: dict[str, str] = {}
    for kv in kvs:
        member = kv.key.decode().rsplit("/", 1)[-1]
        try:
            url = str(json.loads(kv.value)["url"])
        except (ValueError, KeyError, TypeError):
            continue  # the membership view logs registrations it cannot read
        if member != exclude and url:
            urls[member] = url
    return urls
