"""Cookies: a bookie's identity, kept both in etcd and beside its data (BookKeeper's
cookies; docs/cluster.md §13.1).

A node that restarts under its ``BOOKIE_ID`` with a wiped, replaced or swapped data
directory or journal would present an empty bookie as one holding its replicas:
readers and recovery would take its "no entry" for a healthy copy that lacks it,
and with E = Qw = Qa = 1 recovery would hand out again ids acknowledged with other
bytes.  So at its first start a node writes a cookie — its bookie id, a random
instance id and its journal's id — to ``DATA_DIR/COOKIE`` and to etcd, and at every
start it refuses to serve (``IdentityMismatch``, which says why and what to do)
unless both are there and agree with each other and with the journal.

The way on for a lost disk is to decommission the old bookie (its replicas are
re-replicated at once) and to start the node under a new ``BOOKIE_ID``; a
decommissioned id is never accepted again.
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from dataclasses import dataclass
from pathlib import Path

from cluster import ClusterKeys, Compare, Delete, Etcd, Put
from common.errors import BookieLive, FormatMismatch, IdentityMismatch
from common.files import sync_directory

log = logging.getLogger("ledgerd.cluster")

COOKIE_FILE = "COOKIE"
FORMAT_VERSION = 1


@dataclass(frozen=True, slots=True)
class Cookie:
    bookie_id: str
    instance_id: str
    journal_id: int

    def encode(self) -> bytes:
        return json.dumps({"format_version": FORMAT_VERSION, "bookie_id": self.bookie_id,
                           "instance_id": self.instance_id,
                           "journal_id": self.journal_id}).encode()

    @classmethod
    def decode(cls, raw: bytes, *, where: str) -> Cookie:
        try:
            doc = json.loads(raw)
            if doc.get("format_version") != FORMAT_VERSION:
                raise ValueError(f"format_version {doc.get('format_version')!r}")
            return cls(str(doc["bookie_id"]), str(doc["instance_id"]), int(doc["journal_id"]))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise FormatMismatch(f"the cookie in {where} is not one this release reads: "
                                 f"{exc}") from exc


def read_local(data_dir: Path) -> Cookie | None:
    path = data_dir / COOKIE_FILE
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    return Cookie.decode(raw, where=str(path))


def write_local(data_dir: Path, cookie: Cookie) -> None:
    """Atomically and durably: a crash leaves the old file or the new one."""
    path = data_dir / COOKIE_FILE
    temporary = path.with_suffix(".tmp")
    with open(temporary, "wb") as file:
        file.write(cookie.encode())
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, path)
    sync_directory(data_dir)


async def check_cookie(etcd: Etcd, keys: ClusterKeys, *, bookie_id: str,
                       data_dir: Path, journal_id: int) -> Cookie:
    """This node's cookie once it is known to be the bookie it says it is; a first
    start writes it (etcd first, then the data directory).  ``IdentityMismatch``
    otherwise; ``MetadataUnavailable`` while etcd does not answer."""
    way_on = (f"To rejoin with this directory as a new bookie: `ledgerd cluster "
              f"decommission {bookie_id}` (its replicas are re-replicated from the other "
              "bookies), then start this node with a new BOOKIE_ID.")
    if await etcd.get(keys.decommissioned(bookie_id)) is not None:
        raise IdentityMismatch(f"bookie {bookie_id} was decommissioned; start this node "
                               "with a new BOOKIE_ID (a decommissioned id is never reused, "
                               "ledgers still name it)")
    local = read_local(data_dir)
    stored_kv = await etcd.get(keys.cookie(bookie_id))
    stored = None if stored_kv is None else Cookie.decode(
        stored_kv.value, where=f"etcd at {keys.cookie(bookie_id).decode()}")
    if local is None and stored is None:
        cookie = Cookie(bookie_id, uuid.uuid4().hex, journal_id)
        if await etcd.create(keys.cookie(bookie_id), cookie.encode()) is None:
            raise IdentityMismatch(f"another node registered bookie {bookie_id} at the same "
                                   "time; give each node its own BOOKIE_ID")
        write_local(data_dir, cookie)
        log.info("new bookie: cookie written", extra={"bookie_id": bookie_id,
                                                       "instance_id": cookie.instance_id})
        return cookie
    if local is None:
        assert stored is not None
        raise IdentityMismatch(
            f"bookie {bookie_id} (instance {stored.instance_id}) is registered in the "
            f"cluster, but the data directory {data_dir} holds no cookie: it was wiped or "
            "replaced, so the replicas the cluster counts on this bookie are not here. "
            + way_on)
    if local.bookie_id != bookie_id:
        raise IdentityMismatch(f"the data directory {data_dir} belongs to bookie "
                               f"{local.bookie_id}, not {bookie_id}: BOOKIE_ID or DATA_DIR "
                               "is wrong")
    if stored is None:
        raise IdentityMismatch(
            f"the data directory {data_dir} belongs to bookie {bookie_id} (instance "
            f"{local.instance_id}), but the cluster at this METADATA_URL and scope has no "
            "cookie for it: the node points at another cluster, or the cluster's metadata "
            "was lost")
    if stored.instance_id != local.instance_id:
        raise IdentityMismatch(
            f"bookie {bookie_id} registered with instance {stored.instance_id}, but the data "
            f"directory {data_dir} holds instance {local.instance_id}: it is another "
            "bookie's directory, or an old copy. " + way_on)
    if local.journal_id != journal_id:
        raise IdentityMismatch(
            f"the journal of bookie {bookie_id} is not the one it registered with "
            f"(journal id {journal_id:#x}, cookie {local.journal_id:#x}): it was wiped or "
            "replaced, and acknowledged entries not yet checkpointed are gone with it. "
            + way_on)
    return local


async def decommission(etcd: Etcd, keys: ClusterKeys, bookie_id: str, *,
                       by: str, at: float) -> None:
    """Mark ``bookie_id`` gone for good: its cookie is dropped, the auditor counts its
    replicas lost at once, and the id is refused from then on.  ``BookieLive`` while
    it is registered (one transaction: it cannot register in between)."""
    record = json.dumps({"bookie_id": bookie_id, "by": by, "at": at}).encode()
    result = await etcd.txn([Compare(keys.bookie(bookie_id), "CREATE", 0)],
                            [Put(keys.decommissioned(bookie_id), record),
                             Delete(keys.cookie(bookie_id))])
    if not result.succeeded:
        raise BookieLive(f"bookie {bookie_id} is registered: stop it first (its lease "
                         "must lapse) and decommission it then")
    log.warning("bookie decommissioned: its replicas are re-replicated",
                extra={"bookie_id": bookie_id, "by": by})


async def decommissioned(etcd: Etcd, keys: ClusterKeys) -> set[str]:
    kvs, _revision = await etcd.get_prefix(keys.decommissioned_prefix)
    return {kv.key.decode().rsplit("/", 1)[-1] for kv in kvs}
